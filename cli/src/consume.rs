//! `pelican consume`: one consumer of a group, handing each entry to a shell command or
//! printing it, until SIGINT/SIGTERM.

use std::io::{IsTerminal, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use pelican::{Config, Entry, GroupGone, Notice, Protocol, Source, Stats, Verdict};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::args::{Args, Failure};
use crate::json::{self, Object};
use crate::server::{tls_message, Server, ServerArgs};

pub const USAGE: &str = "\
Usage: pelican consume --stream KEY --group G --consumer NAME [options]

Consumes the stream KEY as consumer NAME of group G. First its own pending entries (a
restart under the same name gets its backlog back at once), then, once per beat, entries
of dead peers idle longer than --min-idle-ms (XAUTOCLAIM), then new entries. Entries are
handled one at a time; each is acknowledged (XACK) only if handled successfully, else it
stays pending and comes back later: at-least-once, so handlers must be idempotent.

Options:
  --stream KEY          the stream key (required)
  --group G             the consumer group (required)
  --consumer NAME       this consumer's name in the group (required)
  --url URL             redis://[user[:password]@]host[:port][/db], or rediss://… for TLS
                        [default: $PELICAN_URL, else redis://127.0.0.1:6379]
                        `:password@` logs in as the default user; %XX escapes allowed
  --tls-ca FILE         rediss://: trust the CA certificates in FILE (PEM) instead of the
                        system's root certificates
  --tls-cert FILE       rediss://: present this client certificate (PEM), for servers that
                        require one (tls-auth-clients); needs --tls-key
  --tls-key FILE        the client certificate's private key (PEM); needs --tls-cert
  --count N             entries per read and per reclaim [100]
  --beat-ms MS          how long a read blocks, and how often peers' entries are
                        reclaimed [2000]
  --min-idle-ms MS      reclaim entries idle longer than this (this consumer's own failed
                        entries included: that is how they are retried) [30000]
  --create-group [ID]   create the group at ID (XGROUP CREATE … MKSTREAM) if it is missing
                        [$: new entries only; 0: the whole stream]
  --recreate-group      if the group or the key is deleted while running, create it again
                        at the --create-group ID (default: stop with an error, exit 1)
  --dead-letter KEY     the dead-letter stream: where entries past --max-deliveries, and
                        those whose command exits 65, are moved (with their fields and
                        pelican-stream/-group/-consumer/-id/-deliveries/-reason)
  --max-deliveries N    move an entry delivered more than N times to the --dead-letter
                        stream instead of handing it out again (needs --dead-letter)
  --resp3               speak RESP3 (HELLO 3) instead of RESP2
  --transport T         mio (default) or smol
  --exec CMD            run `sh -c CMD` for each entry (below); without it, print entries
  --progress            progress on stderr every second even when stderr is not a terminal
                        (on a terminal it is always shown)
  --stats-json FILE     on a clean stop, write the final counters to FILE as one JSON object
  -h, --help

Without --exec, each entry is printed on stdout as one JSON line, then acknowledged:
  {\"id\":\"1700000000000-0\",\"fields\":{\"name\":\"value\",…}}

With --exec, CMD runs for each entry with the entry's fields as one JSON object (and a
newline) on its stdin, its stdout and stderr going to pelican's, and in its environment:
  PELICAN_ID        the entry id
  PELICAN_STREAM, PELICAN_GROUP, PELICAN_CONSUMER
  PELICAN_SOURCE    pending (this consumer's own backlog), claimed (reclaimed from an idle
                    owner) or new
  PELICAN_DELIVERIES how many times the group has delivered it, this time included (the
                    server's count: approximate after reconnects and restarts)
Exit status 0 acknowledges the entry; 65 (EX_DATAERR: it can never be processed) moves it
to the --dead-letter stream at once (without --dead-letter it is a failure); anything else
(or death by a signal) leaves it pending. A status of 126 or 127 (the command cannot be run,
or is not found) stops pelican with exit 1 and the entry left pending, rather than failing
every entry in turn. CMD runs in its own process group, so a Ctrl-C on the terminal reaches
only pelican, which lets CMD finish.

On stderr, one line each: an entry moved to the dead-letter stream, an entry a peer took
while this consumer held it (a lease lost), reads made smaller (slow handlers, big entries).

JSON: a field name or value that is valid UTF-8 is a JSON string; one that is not is
{\"base64\":\"…\"} (standard alphabet, padded). Fields keep stream order, and a repeated name
is kept each time, in order (JSON allows repeated keys, but many parsers keep only the
last). A name that is not UTF-8 cannot be an object key: then `fields` is an array of
[name, value] pairs instead, each element written by the same rule.

Signals: SIGINT or SIGTERM stops gracefully: the entry in hand (its command) finishes, the
acknowledgements earned are confirmed by the server, then pelican exits 0. A second signal
exits at once with status 130: the running command's process group gets SIGTERM and the
entry in hand stays pending.

Exit status: 0 stopped by a signal, 1 failed (the server refused, the group is gone, stdout
closed, CMD cannot be run, an entry is over the frame limit; TLS failed: an untrusted,
expired or misnamed certificate, a client certificate required, a TLS file that cannot be
read, a plaintext port behind rediss:// or a TLS port behind redis://), 2 bad usage, 130 a
second signal.";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Transport {
    Mio,
    Smol,
}

struct Options {
    stream: String,
    group: String,
    consumer: String,
    count: u32,
    beat_ms: u64,
    min_idle_ms: u64,
    create_group: Option<String>,
    recreate: bool,
    dead_letter: Option<String>,
    max_deliveries: Option<u64>,
    resp3: bool,
    transport: Transport,
    exec: Option<String>,
    progress: bool,
    stats_json: Option<PathBuf>,
}

/// The options, and the server (`--url` and the `--tls-*` flags) checked against each other.
fn parse(mut args: Args) -> Result<(Options, Server), Failure> {
    let (mut stream, mut group, mut consumer) = (None, None, None);
    let mut server_args = ServerArgs::default();
    let mut o = Options {
        stream: String::new(),
        group: String::new(),
        consumer: String::new(),
        count: 100,
        beat_ms: 2000,
        min_idle_ms: 30_000,
        create_group: None,
        recreate: false,
        dead_letter: None,
        max_deliveries: None,
        resp3: false,
        transport: Transport::Mio,
        exec: None,
        progress: false,
        stats_json: None,
    };
    while let Some(flag) = args.next_flag()? {
        match flag.as_str() {
            "--stream" => stream = Some(args.value()?),
            "--group" => group = Some(args.value()?),
            "--consumer" => consumer = Some(args.value()?),
            "--count" => o.count = args.number(1)?,
            "--beat-ms" => o.beat_ms = args.number(1)?,
            "--min-idle-ms" => o.min_idle_ms = args.number(1)?,
            "--create-group" => o.create_group = Some(args.optional_value().unwrap_or_else(|| "$".into())),
            "--recreate-group" => o.recreate = true,
            "--dead-letter" => o.dead_letter = Some(args.value()?),
            "--max-deliveries" => o.max_deliveries = Some(args.number(1)?),
            "--resp3" => o.resp3 = true,
            "--transport" => {
                o.transport = match args.value()?.as_str() {
                    "mio" => Transport::Mio,
                    "smol" => Transport::Smol,
                    other => {
                        return Err(args.error(format_args!("--transport: `{other}` is not mio or smol")))
                    }
                }
            }
            "--exec" => o.exec = Some(args.value()?),
            "--progress" => o.progress = true,
            "--stats-json" => o.stats_json = Some(args.value()?.into()),
            _ if server_args.take(&flag, &mut args)? => {}
            _ => return Err(args.unknown(&flag)),
        }
    }
    o.stream = args.required(stream, "--stream")?;
    o.group = args.required(group, "--group")?;
    o.consumer = args.required(consumer, "--consumer")?;
    if o.recreate && o.create_group.is_none() {
        return Err(args.error("--recreate-group needs --create-group (the ID to create it at)"));
    }
    if o.max_deliveries.is_some() && o.dead_letter.is_none() {
        return Err(args.error("--max-deliveries needs --dead-letter (the stream to move entries to)"));
    }
    let server = server_args.into_server(&args)?;
    Ok((o, server))
}

/// What the handler counts, read by the progress line and the final report.
#[derive(Default)]
struct Counters {
    handled: AtomicU64,
    failed: AtomicU64,
    drained: AtomicU64,
    claimed: AtomicU64,
    new: AtomicU64,
}

/// Handles one entry at a time; shared with the signal thread (the running command's pid).
struct Handler {
    exec: Option<String>,
    stream: String,
    group: String,
    consumer: String,
    counters: Arc<Counters>,
    /// The running command's pid (its process group id), 0 when none runs.
    child: Arc<AtomicU32>,
    stdout_closed: AtomicBool,
    /// The exit status of a command that could not be run (126, 127): the consumer stops.
    unrunnable: AtomicI32,
    /// Whether exit status 65 moves the entry to the dead-letter stream.
    dead_letter: bool,
    stop: Box<dyn Fn() + Send + Sync>,
}

impl Handler {
    fn handle(&self, entry: &Entry) -> Verdict {
        let verdict = match &self.exec {
            Some(command) => self.run(command, entry),
            None => self.print(entry),
        };
        let c = &self.counters;
        match entry.source {
            Source::Pending => c.drained.fetch_add(1, Relaxed),
            Source::Claimed => c.claimed.fetch_add(1, Relaxed),
            Source::New => c.new.fetch_add(1, Relaxed),
        };
        if verdict != Verdict::Ack {
            c.failed.fetch_add(1, Relaxed);
        }
        // A second signal is exiting the process: no verdict for the entry in hand, not even
        // if its command (killed) exited 0. Wait here for the exit.
        while EXITING.load(std::sync::atomic::Ordering::SeqCst) {
            thread::park();
        }
        c.handled.fetch_add(1, Relaxed);
        verdict
    }

    /// Prints the entry and flushes before it is acknowledged: an acked entry was written.
    fn print(&self, entry: &Entry) -> Verdict {
        if self.stdout_closed.load(Relaxed) {
            return Verdict::Retry;
        }
        let line = json::entry_line(entry);
        let mut out = std::io::stdout().lock();
        match out.write_all(line.as_bytes()).and_then(|()| out.flush()) {
            Ok(()) => Verdict::Ack,
            Err(_) => {
                self.stdout_closed.store(true, Relaxed);
                (self.stop)();
                Verdict::Retry
            }
        }
    }

    fn run(&self, command: &str, entry: &Entry) -> Verdict {
        let source = match entry.source {
            Source::Pending => "pending",
            Source::Claimed => "claimed",
            Source::New => "new",
        };
        let mut child = match Command::new("sh")
            .arg("-c")
            .arg(command)
            .stdin(Stdio::piped())
            .env("PELICAN_ID", String::from_utf8_lossy(entry.id()).as_ref())
            .env("PELICAN_STREAM", &self.stream)
            .env("PELICAN_GROUP", &self.group)
            .env("PELICAN_CONSUMER", &self.consumer)
            .env("PELICAN_SOURCE", source)
            .env("PELICAN_DELIVERIES", entry.deliveries.to_string())
            .process_group(0)
            .spawn()
        {
            Ok(child) => child,
            Err(e) => {
                eprintln!("pelican: cannot run sh: {e}");
                return Verdict::Retry;
            }
        };
        self.child.store(child.id(), Relaxed);
        let mut input = String::new();
        json::push_fields(&mut input, entry.fields());
        input.push('\n');
        if let Some(mut stdin) = child.stdin.take() {
            // A command that does not read its input closes the pipe: not a failure.
            let _ = stdin.write_all(input.as_bytes());
        }
        let status = child.wait();
        self.child.store(0, Relaxed);
        match status.map(|s| s.code()) {
            Ok(Some(0)) => Verdict::Ack,
            Ok(Some(EX_DATAERR)) if self.dead_letter => Verdict::DeadLetter,
            Ok(Some(code @ (126 | 127))) => {
                // A typo or a missing file would fail every entry in turn: stop instead.
                self.unrunnable.store(code, Relaxed);
                (self.stop)();
                Verdict::Retry
            }
            _ => Verdict::Retry,
        }
    }
}

pub fn main(args: Args) -> Result<(), Failure> {
    let (o, server) = parse(args)?;
    let target = &server.target;
    let addrs = target.resolve().map_err(Failure::Bad)?;
    let mut config = target
        .apply(Config::new(&o.stream, &o.group, &o.consumer))
        .count(o.count)
        .beat(Duration::from_millis(o.beat_ms))
        .min_idle(Duration::from_millis(o.min_idle_ms));
    if let Some(start) = &o.create_group {
        config = config.create_group(start);
    }
    if o.recreate {
        config = config.on_group_gone(GroupGone::Recreate);
    }
    if o.resp3 {
        config = config.protocol(Protocol::Resp3);
    }
    if let Some(key) = &o.dead_letter {
        config = config.dead_letter(key);
        config.max_deliveries = o.max_deliveries;
    }

    let counters = Arc::new(Counters::default());
    let child = Arc::new(AtomicU32::new(0));
    let handler = |stop: Box<dyn Fn() + Send + Sync>| {
        Arc::new(Handler {
            exec: o.exec.clone(),
            stream: o.stream.clone(),
            group: o.group.clone(),
            consumer: o.consumer.clone(),
            counters: counters.clone(),
            child: child.clone(),
            stdout_closed: AtomicBool::new(false),
            unrunnable: AtomicI32::new(0),
            dead_letter: o.dead_letter.is_some(),
            stop,
        })
    };
    let tty = std::io::stderr().is_terminal();
    let start = Instant::now();
    let progress = (o.progress || tty).then(|| Progress::spawn(counters.clone(), tty));

    let (result, handler) = match o.transport {
        Transport::Mio => {
            let mut runner = pelican_mio::Runner::new(&addrs[..], config)
                .map_err(|e| match e {
                    pelican_mio::RunError::Config(e) => Failure::Bad(format!("invalid settings: {e}")),
                    e => Failure::Failed(e.to_string()),
                })?
                .on_notice(tell(tty));
            if let Some(tls) = &server.tls {
                runner = runner.tls(tls.clone(), &target.host);
            }
            let stop = runner.stop_handle();
            on_signals(stop.clone(), child.clone())?;
            let handler = handler(Box::new(move || stop.stop()));
            let h = handler.clone();
            let result = runner.run(move |entry| h.handle(entry)).map_err(mio_failure);
            (result, handler)
        }
        Transport::Smol => {
            let mut runner = pelican_smol::Runner::new(&addrs[..], config)
                .map_err(|e| match e {
                    pelican_smol::RunError::Config(e) => Failure::Bad(format!("invalid settings: {e}")),
                    e => Failure::Failed(e.to_string()),
                })?
                .on_notice(tell(tty));
            if let Some(tls) = &server.tls {
                runner = runner.tls(tls.clone(), &target.host);
            }
            let stop = runner.stop_handle();
            on_signals(stop.clone(), child.clone())?;
            let handler = handler(Box::new(move || stop.stop()));
            let h = handler.clone();
            // The handler blocks (a command, a write): it runs on smol's blocking pool.
            let run = runner.run(move |entry| {
                let h = h.clone();
                smol::unblock(move || h.handle(&entry))
            });
            let result = smol::block_on(run).map_err(smol_failure);
            (result, handler)
        }
    };
    if let Some(progress) = progress {
        progress.finish(result.as_ref().ok(), start.elapsed());
    }
    let stats = result.map_err(|(group_gone, e)| {
        let hint = if group_gone && o.create_group.is_none() {
            " (--create-group creates a missing group)"
        } else {
            ""
        };
        Failure::Failed(format!("{e}{hint}"))
    })?;
    if let Some(path) = &o.stats_json {
        let json = stats_json(&stats, &counters, start.elapsed());
        std::fs::write(path, json + "\n")
            .map_err(|e| Failure::Failed(format!("cannot write {}: {e}", path.display())))?;
    }
    if handler.stdout_closed.load(Relaxed) {
        return Err(Failure::Failed("stopped: stdout is closed (the entry in hand stays pending)".into()));
    }
    let code = handler.unrunnable.load(Relaxed);
    if code != 0 {
        let why = if code == 127 { "not found" } else { "not executable" };
        let command = o.exec.as_deref().unwrap_or_default();
        return Err(Failure::Failed(format!(
            "stopped: the --exec command `{command}` cannot be run (exit {code}: {why}); the entry stays pending"
        )));
    }
    Ok(())
}

/// Why the mio runner gave up, and whether the group is gone (a hint follows then). A TLS
/// failure is told on its own, naming the flag that fixes it.
fn mio_failure(e: pelican_mio::RunError) -> (bool, String) {
    match e {
        pelican_mio::RunError::Tls(e) => (false, tls_message(&e)),
        pelican_mio::RunError::Consumer(pelican::Error::GroupGone { .. }) => (true, e.to_string()),
        e => (false, e.to_string()),
    }
}

/// [`mio_failure`], for the smol runner.
fn smol_failure(e: pelican_smol::RunError) -> (bool, String) {
    match e {
        pelican_smol::RunError::Tls(e) => (false, tls_message(&e)),
        pelican_smol::RunError::Consumer(pelican::Error::GroupGone { .. }) => (true, e.to_string()),
        e => (false, e.to_string()),
    }
}

/// `--exec` exit status that moves the entry to the dead-letter stream (sysexits'
/// `EX_DATAERR`: the input data was incorrect).
const EX_DATAERR: i32 = 65;

/// Prints each notice on stderr, one line each (clearing the progress line on a terminal).
fn tell(tty: bool) -> impl FnMut(&Notice) + Send + 'static {
    let clear = if tty { "\r\x1b[K" } else { "" };
    move |notice| eprintln!("{clear}pelican: {notice}")
}

/// Set by a second signal, just before the process exits with 130.
static EXITING: AtomicBool = AtomicBool::new(false);

/// The first SIGINT/SIGTERM stops the runner gracefully; the second exits at once (130),
/// first sending SIGTERM to the running command's process group.
fn on_signals(stop: impl StopLike, child: Arc<AtomicU32>) -> Result<(), Failure> {
    let mut signals =
        Signals::new([SIGINT, SIGTERM]).map_err(|e| Failure::Failed(format!("cannot catch signals: {e}")))?;
    thread::Builder::new()
        .name("pelican-signals".into())
        .spawn(move || {
            let mut signals = signals.forever();
            // On a terminal, clear the progress line first.
            let clear = if std::io::stderr().is_terminal() { "\r\x1b[K" } else { "" };
            if signals.next().is_some() {
                eprintln!("{clear}pelican: stopping after the entry in hand (signal again to exit at once)");
                stop.stop();
            }
            if signals.next().is_some() {
                EXITING.store(true, std::sync::atomic::Ordering::SeqCst);
                let pid = child.load(Relaxed);
                if pid != 0 {
                    // The command leads its own process group (process_group(0)): signal it all.
                    let _ = Command::new("kill").args(["-TERM", "--", &format!("-{pid}")]).status();
                }
                eprintln!("{clear}pelican: exiting at once; the entry in hand stays pending");
                std::process::exit(130);
            }
        })
        .map_err(|e| Failure::Failed(format!("cannot start the signal thread: {e}")))?;
    Ok(())
}

/// Both transports' stop handles.
trait StopLike: Send + 'static {
    fn stop(&self);
}
impl StopLike for pelican_mio::StopHandle {
    fn stop(&self) {
        pelican_mio::StopHandle::stop(self)
    }
}
impl StopLike for pelican_smol::StopHandle {
    fn stop(&self) {
        pelican_smol::StopHandle::stop(self)
    }
}

/// Every [`Stats`] field, plus the handler's counts and the run time.
fn stats_json(stats: &Stats, counters: &Counters, elapsed: Duration) -> String {
    Object::new()
        .num("drained", stats.drained)
        .num("claimed", stats.claimed)
        .num("new", stats.new)
        .num("acked", stats.acked)
        .num("retried", stats.retried)
        .num("deleted_seen", stats.deleted_seen)
        .num("lost_to_peer", stats.lost_to_peer)
        .num("reconnects", stats.reconnects)
        .num("errors", stats.errors)
        .num("group_recreated", stats.group_recreated)
        .num("abandoned_acks", stats.abandoned_acks)
        .num("leases_renewed", stats.leases_renewed)
        .num("leases_lost", stats.leases_lost)
        .num("dead_lettered", stats.dead_lettered)
        .num("reads_shrunk", stats.reads_shrunk)
        .num("handled", counters.handled.load(Relaxed))
        .num("failed", counters.failed.load(Relaxed))
        .num("seconds", format_args!("{:.3}", elapsed.as_secs_f64()))
        .finish()
}

/// The progress line on stderr, once a second.
struct Progress {
    done: Arc<AtomicBool>,
    thread: thread::JoinHandle<()>,
    counters: Arc<Counters>,
    tty: bool,
}

impl Progress {
    fn spawn(counters: Arc<Counters>, tty: bool) -> Progress {
        let done = Arc::new(AtomicBool::new(false));
        let (c, d) = (counters.clone(), done.clone());
        let thread = thread::spawn(move || {
            let mut last = (Instant::now(), 0);
            while !d.load(Relaxed) {
                thread::park_timeout(Duration::from_secs(1));
                if d.load(Relaxed) || last.0.elapsed() < Duration::from_millis(990) {
                    continue;
                }
                let handled = c.handled.load(Relaxed);
                let rate = (handled - last.1) as f64 / last.0.elapsed().as_secs_f64();
                last = (Instant::now(), handled);
                let line = format!(
                    "{rate:.0} entries/s, {handled} handled, {} failed, {} reclaimed, {} drained",
                    c.failed.load(Relaxed),
                    c.claimed.load(Relaxed),
                    c.drained.load(Relaxed)
                );
                if tty {
                    eprint!("\r\x1b[K{line}");
                } else {
                    eprintln!("{line}");
                }
            }
        });
        Progress { done, thread, counters, tty }
    }

    /// Ends the line and prints a summary.
    fn finish(self, stats: Option<&Stats>, elapsed: Duration) {
        self.done.store(true, Relaxed);
        self.thread.thread().unpark();
        let _ = self.thread.join();
        if self.tty {
            eprint!("\r\x1b[K");
        }
        let c = &self.counters;
        let acked = stats.map_or(String::new(), |s| {
            let mut text = format!(", {} acked", s.acked);
            if s.dead_lettered > 0 {
                text += &format!(", {} dead-lettered", s.dead_lettered);
            }
            if s.leases_lost > 0 {
                text += &format!(", {} taken by peers", s.leases_lost);
            }
            text
        });
        eprintln!(
            "pelican: {} handled in {:.1} s{acked}, {} failed, {} reclaimed, {} drained",
            c.handled.load(Relaxed),
            elapsed.as_secs_f64(),
            c.failed.load(Relaxed),
            c.claimed.load(Relaxed),
            c.drained.load(Relaxed)
        );
    }
}
