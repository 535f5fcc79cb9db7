//! What happens to one entry: a shell command (`--exec`) or a JSON line on stdout, and the
//! counts the progress line and the report read. One [`Handler`] per lane (stream); the
//! flags that stop every lane ([`Shared`]) are common to all.

use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread;

use pelican::{Entry, Source, Verdict};
use rustix::event::{PollFd, PollFlags, Timespec};

use super::screen::Screen;
use super::stop::{StopAll, EXITING};
use crate::json;

/// `--exec` exit status that moves the entry to the dead-letter stream (sysexits'
/// `EX_DATAERR`: the input data was incorrect).
pub const EX_DATAERR: i32 = 65;

/// The longest line written to stdout on the transport's own thread (the event loop, the
/// executor): a pipe with room takes up to `PIPE_BUF` bytes whole, without blocking.
const PIPE_BUF: usize = 4096;

/// What a lane's handler counts, read by the progress line and the final report.
#[derive(Debug, Default)]
pub struct Counters {
    /// Entries handled (a verdict given).
    pub handled: AtomicU64,
    /// Entries whose verdict was not an ack.
    pub failed: AtomicU64,
    /// Entries from this consumer's own pending list.
    pub drained: AtomicU64,
    /// Entries reclaimed from idle peers.
    pub claimed: AtomicU64,
    /// New entries.
    pub new: AtomicU64,
    /// Entries whose verdict was an ack (the acks earned, to be confirmed by the server).
    pub earned: AtomicU64,
    /// Entries in hand now: their command runs (or their line is being written), no verdict
    /// yet. At most `--concurrency`.
    pub in_hand: AtomicUsize,
    /// The most entries that were in hand at once.
    pub in_hand_max: AtomicUsize,
}

impl Counters {
    /// One more entry in hand (and the peak, if it is one); `total` counts every lane's.
    fn take(&self, total: &Counters) {
        for c in [self, total] {
            let now = c.in_hand.fetch_add(1, SeqCst) + 1;
            c.in_hand_max.fetch_max(now, Relaxed);
        }
    }

    /// One entry fewer in hand.
    fn give_back(&self, total: &Counters) {
        for c in [self, total] {
            c.in_hand.fetch_sub(1, SeqCst);
        }
    }
}

/// What every lane shares: the command, and why the run stopped if not by a signal.
pub struct Shared {
    /// `--exec CMD`; `None` prints entries (or pipes them).
    pub exec: Option<String>,
    /// `--pipe CMD`: every entry goes to the one handler process, which the lanes hold
    /// (`Handlers::pipe`): a handler here never runs or prints one.
    pub piped: bool,
    /// `--handler-timeout`: an entry not settled in time is a failure.
    pub handler_timeout: Option<std::time::Duration>,
    /// `--overdue-ms`: an entry in hand longer is told, and makes `/healthz` 503.
    pub overdue: std::time::Duration,
    /// The group, for the command's environment.
    pub group: String,
    /// This consumer's name (every lane's).
    pub consumer: String,
    /// Whether exit status 65 moves the entry to the dead-letter stream.
    pub dead_letter: bool,
    /// Stdout was closed: entries can no longer be printed, every lane stops.
    pub stdout_closed: AtomicBool,
    /// The exit status of a command that could not be run (126, 127): every lane stops.
    pub unrunnable: AtomicI32,
    /// Why the run gave up, if something other than a lane did (a `--pipe` handler that
    /// keeps dying before it answers): every lane stops, and pelican exits 1 saying this.
    pub gave_up: OnceLock<String>,
    /// Stops every lane.
    pub stop: Arc<StopAll>,
    /// The terminal the progress line shares.
    pub screen: Arc<Screen>,
    /// `--quiet`: no line for the consumers' notices.
    pub quiet: bool,
    /// Whether there are several lanes (lines about an entry then name its stream).
    pub several: bool,
    /// The entries in hand over every lane (only `in_hand` and `in_hand_max` are kept).
    pub total: Counters,
}

/// What a lane's notices told of its connection and its group, for the progress line.
#[derive(Default)]
pub struct Watch {
    /// The server is not reachable now (a connect failed or the connection was lost, and
    /// no reply came since).
    pub down: AtomicBool,
    /// The group's health, as last told.
    pub health: Mutex<Option<pelican::GroupHealth>>,
    /// Entries read and waiting to be handed out, as the transport last saw them, plus one
    /// ([`Watch::buffered`]); 0: not known (`--transport smol` does not tell).
    buffered: AtomicUsize,
}

impl Watch {
    /// Notes how many entries are read and waiting to be handed out.
    pub fn set_buffered(&self, n: usize) {
        self.buffered.store(n.saturating_add(1), Relaxed);
    }

    /// How many entries are read and waiting to be handed out, if the transport tells.
    pub fn buffered(&self) -> Option<usize> {
        self.buffered.load(Relaxed).checked_sub(1)
    }
}

/// Handles one lane's entries, up to `--concurrency` at once (each call of
/// [`handle`](Handler::handle) is one entry; the transport makes the calls at once).
pub struct Handler {
    /// The lane's stream, as shown (escaped if it is not UTF-8).
    pub stream: String,
    /// The lane's stream, its bytes (for the JSON lines, which keep every byte).
    stream_bytes: Vec<u8>,
    /// The lane's stream as the JSON lines write it (a string, or `{"base64":…}`): how a
    /// `--pipe` answer names it.
    pub stream_json: String,
    /// `--emit-to`'s stream for this lane: what `--exec`'s command prints is committed there.
    emit_to: Option<Vec<u8>>,
    /// Its counts.
    pub counters: Arc<Counters>,
    /// Its connection's state and its group's health.
    pub watch: Arc<Watch>,
    /// The pids of the commands running for this lane, each leading its process group, for
    /// a second signal to end. Locked while a command starts, so that a second signal sees
    /// every command started (see [`Handler::children`]).
    children: Mutex<Vec<u32>>,
    /// What the lanes share.
    pub shared: Arc<Shared>,
}

impl Handler {
    /// The stream's bytes.
    pub fn stream_bytes(&self) -> &[u8] {
        &self.stream_bytes
    }

    /// A handler for `stream`'s lane.
    pub fn new(stream: &[u8], emit_to: Option<Vec<u8>>, shared: Arc<Shared>) -> Handler {
        Handler {
            stream: crate::name::show(stream).into_owned(),
            stream_bytes: stream.to_vec(),
            stream_json: json::to_string(&json::Bytes(stream)),
            emit_to,
            counters: Arc::default(),
            watch: Arc::default(),
            children: Mutex::new(Vec::new()),
            shared,
        }
    }

    /// The running commands' pids. Held while a command starts: a second signal sets
    /// [`EXITING`] and then takes each lane's list, so either it finds the pid, or the
    /// handler (taking the list after it) finds `EXITING` set and starts nothing.
    pub fn children(&self) -> MutexGuard<'_, Vec<u32>> {
        // A panic while the list was held left it with or without a pid: either is right.
        self.children.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many of this lane's entries are in hand now (see [`Counters::in_hand`]).
    pub fn in_hand(&self) -> usize {
        self.counters.in_hand.load(SeqCst)
    }

    /// Handles `entry` and gives the verdict, counting it. Called for several entries at
    /// once from as many threads (`--concurrency`).
    pub fn handle(&self, entry: &Entry) -> Verdict {
        let _in_hand = InHand::take(self);
        let verdict = match (&self.shared.exec, self.shared.piped) {
            (Some(command), _) => self.run(command, entry),
            // Never: the transports hand `--pipe`'s entries over without a thread each
            // (`Pipe::queue`), and take them back through `settled`.
            (None, true) => Verdict::Retry,
            (None, false) => self.print(entry),
        };
        self.count(entry, given_back_if_overran(verdict))
    }

    /// One more entry in hand, handed to a handler that answers later (`--pipe`): its verdict
    /// comes through [`settled`](Self::settled), which gives it back.
    pub fn hold(&self) {
        self.counters.take(&self.shared.total);
    }

    /// The verdict of an entry taken with [`hold`](Self::hold), counted; the entry is no
    /// longer in hand.
    pub fn settled(&self, entry: &Entry, verdict: Verdict) -> Verdict {
        let verdict = self.count(entry, given_back_if_overran(verdict));
        self.counters.give_back(&self.shared.total);
        verdict
    }

    /// Handles `entry` on the calling thread if that cannot block: an entry printed (no
    /// `--exec`) while stdout has room for its line. `None`: hand it to [`handle`](Self::handle)
    /// on a thread that may block.
    ///
    /// This is how both transports print without a hop to a worker thread (mio) or the
    /// blocking pool (smol) per entry, yet with each line written to stdout before its
    /// verdict: the driver may send the `XACK` right after the settle (the batch's end, the
    /// ack delay, a read ahead), so a line held in a buffer past its verdict could be
    /// acknowledged and then lost with the process. One `write` per entry is the price; a
    /// blocked stdout never stalls the event loop (mio) or the executor (smol), whose
    /// connections keep renewing leases and confirming acks.
    pub fn handle_here(&self, entry: &Entry) -> Option<Verdict> {
        if self.shared.exec.is_some() || self.shared.piped || self.shared.stdout_closed.load(Relaxed) {
            return None;
        }
        let line = json::entry_line(&self.stream_bytes, entry);
        if line.len() > PIPE_BUF || !stdout_has_room() {
            return None;
        }
        let _in_hand = InHand::take(self);
        let verdict = self.write_line(&line);
        Some(self.count(entry, verdict))
    }

    /// Counts `entry` and its verdict.
    fn count(&self, entry: &Entry, verdict: Verdict) -> Verdict {
        let c = &self.counters;
        match entry.source {
            Source::Pending => c.drained.fetch_add(1, Relaxed),
            Source::Claimed => c.claimed.fetch_add(1, Relaxed),
            Source::New => c.new.fetch_add(1, Relaxed),
            _ => 0, // a path this build does not count apart
        };
        if matches!(verdict, Verdict::Ack | Verdict::Commit(_)) {
            c.earned.fetch_add(1, Relaxed);
        } else {
            c.failed.fetch_add(1, Relaxed);
        }
        // A second signal is exiting the process: no verdict for the entry in hand, not even
        // if its command (killed) exited 0. Wait here for the exit.
        while EXITING.load(SeqCst) {
            thread::park();
        }
        c.handled.fetch_add(1, Relaxed);
        verdict
    }

    /// Prints the entry and flushes before it is acknowledged: an acked entry was written.
    fn print(&self, entry: &Entry) -> Verdict {
        if self.shared.stdout_closed.load(Relaxed) {
            return Verdict::Retry;
        }
        self.write_line(&json::entry_line(&self.stream_bytes, entry))
    }

    /// Writes `line` to stdout and flushes it: `Ack` once it is written.
    fn write_line(&self, line: &str) -> Verdict {
        let shared = &self.shared;
        let _hold = shared.screen.clear_for_stdout();
        // The lock keeps lanes' lines whole.
        let mut out = std::io::stdout().lock();
        match out.write_all(line.as_bytes()).and_then(|()| out.flush()) {
            Ok(()) => Verdict::Ack,
            Err(_) => {
                shared.stdout_closed.store(true, Relaxed);
                shared.stop.stop();
                Verdict::Retry
            }
        }
    }

    fn run(&self, command: &str, entry: &Entry) -> Verdict {
        let source = entry.source.as_str();
        let shared = &self.shared;
        // What the command writes on the terminal starts on a clean line. Not under the
        // slot: a second signal must never wait on the screen to take it.
        drop(shared.screen.clear());
        let mut children = self.children();
        if EXITING.load(SeqCst) {
            return Verdict::Retry; // a second signal is ending the commands: start none
        }
        let mut child = match Command::new("sh")
            .arg("-c")
            .arg(command)
            .stdin(Stdio::piped())
            .stdout(if self.emit_to.is_some() { Stdio::piped() } else { Stdio::inherit() })
            .env("PELICAN_ID", String::from_utf8_lossy(entry.id()).as_ref())
            .env("PELICAN_STREAM", &self.stream)
            .env("PELICAN_GROUP", &shared.group)
            .env("PELICAN_CONSUMER", &shared.consumer)
            .env("PELICAN_SOURCE", source)
            .env("PELICAN_DELIVERIES", entry.deliveries.to_string())
            .process_group(0)
            .spawn()
        {
            Ok(child) => child,
            Err(e) => {
                drop(children);
                shared.screen.tell(format_args!("pelican: cannot run sh: {e}"));
                return Verdict::Retry;
            }
        };
        let pid = child.id();
        children.push(pid);
        drop(children);
        let mut input = String::new();
        json::push_fields(&mut input, entry.fields());
        input.push('\n');
        if let Some(mut stdin) = child.stdin.take() {
            // A command that does not read its input closes the pipe: not a failure.
            let _ = stdin.write_all(input.as_bytes());
        }
        // With --emit-to its output is read as it comes (a full pipe would stall it).
        let printed = child.stdout.take().map(|mut stdout| {
            thread::spawn(move || {
                let mut all = Vec::new();
                let _ = std::io::Read::read_to_end(&mut stdout, &mut all);
                all
            })
        });
        // Reaped here, on every path: a second signal waits for the lists to empty before
        // the process exits, so no command outlives pelican.
        let (status, timed_out) = match shared.handler_timeout {
            Some(limit) => match self.wait_within(&mut child, limit, entry) {
                Ok((status, timed_out)) => (Ok(status), timed_out),
                Err(e) => (Err(e), false),
            },
            None => (child.wait(), false),
        };
        self.children().retain(|p| *p != pid);
        if let (Ok(status), false) = (&status, timed_out) {
            self.tell_killed(entry, *status);
        }
        let printed = printed.and_then(|reader| reader.join().ok()).unwrap_or_default();
        match status.map(|s| s.code()) {
            Ok(Some(0)) => match &self.emit_to {
                None => Verdict::Ack,
                Some(stream) => match super::emit::from_lines(stream, &printed) {
                    Ok(writes) => Verdict::Commit(writes),
                    Err(why) => {
                        // Nothing of it is written: the entry fails, as a failed command's.
                        shared.screen.tell(format_args!(
                            "pelican: {}entry {}: --emit-to: {why}; the entry failed, nothing written",
                            self.lane_prefix(),
                            String::from_utf8_lossy(entry.id())
                        ));
                        Verdict::Retry
                    }
                },
            },
            Ok(Some(EX_DATAERR)) if shared.dead_letter => Verdict::DeadLetter,
            Ok(Some(code @ (126 | 127))) => {
                // A typo or a missing file would fail every entry in turn: stop instead.
                shared.unrunnable.store(code, Relaxed);
                shared.stop.stop();
                Verdict::Retry
            }
            _ => Verdict::Retry,
        }
    }

    /// Waits for `child` at most `limit` (`--handler-timeout`); past it, kills its process
    /// group, tells so, and reaps it.
    fn wait_within(
        &self,
        child: &mut std::process::Child,
        limit: std::time::Duration,
        entry: &Entry,
    ) -> std::io::Result<(ExitStatus, bool)> {
        let deadline = std::time::Instant::now() + limit;
        let mut pause = std::time::Duration::from_millis(1);
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok((status, false));
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                break;
            }
            // Short at first (most commands are quick), then at most 20 ms.
            thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(std::time::Duration::from_millis(20));
        }
        if let Some(group) = rustix::process::Pid::from_raw(child.id() as i32) {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        }
        self.shared.screen.tell(format_args!(
            "pelican: {}{} took longer than {} ms: its command was killed; the entry stays pending",
            self.lane_prefix(),
            String::from_utf8_lossy(entry.id()),
            limit.as_millis()
        ));
        Ok((child.wait()?, true))
    }

    /// `stream ` before an entry's id when there are several lanes.
    fn lane_prefix(&self) -> String {
        if self.shared.several {
            format!("stream {}: ", self.stream)
        } else {
            String::new()
        }
    }

    /// A command killed by a signal (the OOM killer, a `kill` from elsewhere, a crash) is
    /// told, with `--quiet` too: its entry stays pending with no other word of why. Not the
    /// commands a second signal or the stop's deadline ends: those say so themselves.
    fn tell_killed(&self, entry: &Entry, status: ExitStatus) {
        let Some(signal) = status.signal() else { return };
        if EXITING.load(SeqCst) || super::stop::OVERRAN.load(SeqCst) {
            return;
        }
        let prefix = self.lane_prefix();
        let name = match (signal_name(signal), status.core_dumped()) {
            (Some(name), true) => format!(" ({name}, core dumped)"),
            (Some(name), false) => format!(" ({name})"),
            (None, true) => " (core dumped)".into(),
            (None, false) => String::new(),
        };
        self.shared.screen.tell(format_args!(
            "pelican: {prefix}the command for {} was killed by signal {signal}{name}; the entry stays pending",
            String::from_utf8_lossy(entry.id()),
        ));
    }
}

/// Past the stop's deadline the handler was ended before it could finish: an entry failed
/// then was not handled, and goes back for a peer at once (no failure of the entry's).
fn given_back_if_overran(verdict: Verdict) -> Verdict {
    match verdict {
        Verdict::Retry if super::stop::OVERRAN.load(SeqCst) => Verdict::GiveBack,
        verdict => verdict,
    }
}

/// An entry in hand while this lives: counted in its lane and in the total, given back on
/// every path (a panic too).
struct InHand<'a>(&'a Handler);

impl<'a> InHand<'a> {
    fn take(handler: &'a Handler) -> InHand<'a> {
        handler.counters.take(&handler.shared.total);
        InHand(handler)
    }
}

impl Drop for InHand<'_> {
    fn drop(&mut self) {
        self.0.counters.give_back(&self.0.shared.total);
    }
}

/// A signal's name (`SIGKILL`), if it is one of the usual ones.
fn signal_name(signal: i32) -> Option<&'static str> {
    use rustix::process::Signal as S;
    let names = [
        (S::HUP, "SIGHUP"),
        (S::INT, "SIGINT"),
        (S::QUIT, "SIGQUIT"),
        (S::ILL, "SIGILL"),
        (S::TRAP, "SIGTRAP"),
        (S::ABORT, "SIGABRT"),
        (S::BUS, "SIGBUS"),
        (S::FPE, "SIGFPE"),
        (S::KILL, "SIGKILL"),
        (S::USR1, "SIGUSR1"),
        (S::SEGV, "SIGSEGV"),
        (S::USR2, "SIGUSR2"),
        (S::PIPE, "SIGPIPE"),
        (S::ALARM, "SIGALRM"),
        (S::TERM, "SIGTERM"),
        (S::XCPU, "SIGXCPU"),
        (S::XFSZ, "SIGXFSZ"),
        (S::SYS, "SIGSYS"),
    ];
    names.iter().find(|(s, _)| s.as_raw() == signal).map(|(_, name)| *name)
}

/// Whether a line of up to [`PIPE_BUF`] bytes can be written to stdout now without blocking:
/// a pipe or terminal with room, a file. No answer (an error) counts as no room: the blocking
/// path then finds out what is wrong.
fn stdout_has_room() -> bool {
    if stdout_always_ready() {
        return true;
    }
    let stdout = std::io::stdout();
    let mut fds = [PollFd::new(&stdout, PollFlags::OUT)];
    let now = Timespec { tv_sec: 0, tv_nsec: 0 };
    matches!(rustix::event::poll(&mut fds, Some(&now)), Ok(1))
        && fds[0].revents().contains(PollFlags::OUT)
        && !fds[0].revents().intersects(PollFlags::ERR | PollFlags::HUP)
}

/// Whether stdout is a regular file or `/dev/null`, which poll(2) always finds ready: its
/// room is then not asked before each line (a system call per entry that could only say
/// yes). Asked once: stdout stays the same file.
fn stdout_always_ready() -> bool {
    static READY: OnceLock<bool> = OnceLock::new();
    *READY.get_or_init(|| {
        let stdout = std::io::stdout().as_fd().try_clone_to_owned().map(std::fs::File::from);
        let Ok(meta) = stdout.and_then(|file| file.metadata()) else { return false };
        let is_null = || {
            std::fs::metadata("/dev/null").is_ok_and(|null| {
                meta.file_type().is_char_device()
                    && null.file_type().is_char_device()
                    && meta.rdev() == null.rdev()
            })
        };
        meta.file_type().is_file() || is_null()
    })
}
