//! `--pipe CMD`: one long-running handler process for every entry of every lane.
//!
//! **What goes through the pipe.** Entries go to the handler's stdin as JSON: one line per
//! entry, or — once the handler has said it takes them — many entries in one line, a
//! *batch*: `{"batch":7,"entries":[{…},{…}]}`. It answers on its stdout: one line per
//! entry (`{"id":"…","verdict":"ack"}`), in any order, or one line per batch,
//! `{"batch":7,"verdicts":["ack","retry",…]}` (in the batch's order; `null` for an entry it
//! answers later on a line of its own). pelican offers batches in the handler's environment
//! ([`PROTOCOL_ENV`]` = batch`); a handler takes them by writing [`HELLO`] as its first
//! line, before it reads anything. The answers of either form are read at any time, so a
//! handler that says so late (a start slower than [`START_GRACE`]) answers the lines it got
//! before one by one. A batch costs the handler one parse and one write for all its entries
//! rather than one each: that is what makes a handler in Python keep up with the server.
//!
//! **How.** The lanes hand their entries over without waiting ([`Pipe::queue`], then
//! [`Pipe::kick`]): no thread per entry in hand. A writer thread ([`Pipe::keep`]) takes
//! every entry queued since it last looked and writes them to the handler at once (one
//! batch, or one line each), registering them as outstanding first; so the busier the
//! handler, the bigger the batches. A reader thread per handler reads the answers as they
//! come and settles each entry: its verdict goes back to its lane ([`Back`]), which acks it.
//! Up to `--concurrency` entries per lane are outstanding at once.
//!
//! The handler's life: started before anything is read ([`Pipe::start`]: one that exits
//! within [`START_GRACE`] is a failure at the start, before an entry can be failed by it;
//! one that says [`HELLO`] is up, and the wait ends); if it exits or dies, its outstanding
//! entries are held (in hand: their leases are renewed meanwhile) and written again to the
//! next handler, started after a backoff, so that a broken handler burns no entry's
//! deliveries; an entry outstanding at [`DEATHS_PER_ENTRY`] deaths (it may be what kills
//! the handler) fails. One that cannot be started at all (126/127 before it answers
//! anything), or that dies before answering anything [`FAILED_STARTS`] times in a row, stops
//! pelican with exit 1. While it is down or failing, [`Pipe::health`] says so. At the end of
//! the run ([`Pipe::finish`]) its stdin is closed and it is given time to exit, then
//! SIGTERM, then SIGKILL.
//!
//! A line that cannot be read as an answer (not JSON, no `"id"`, an unknown verdict) fails
//! an entry rather than being ignored, which would leave the entry in hand for good (see
//! [`blame`] for which one). An answer that never comes (an unflushed stdout) is seen by the
//! overdue watch (`super::overdue`) and ended by the stop's deadline (`super::deadline`).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use pelican::{Entry, Verdict};
use rustix::process::{kill_process_group, Pid, Signal};
use serde::Deserialize;
use serde_json::Value;

use super::handler::{Handler, Shared};
use super::stop::EXITING;
use crate::json;

/// The first wait before the handler is started again; it doubles up to [`BACKOFF_MAX`],
/// and starts over once a handler has run [`BACKOFF_RESET`].
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
const BACKOFF_RESET: Duration = Duration::from_secs(10);
/// How long the handler has to exit once its stdin is closed, and again after SIGTERM.
const EXIT_GRACE: Duration = Duration::from_secs(3);
/// The longest answer line read: an answer is a few dozen bytes, and the rest of a longer
/// line is skipped rather than kept.
const MAX_LINE: usize = 64 * 1024;
/// The longest line read from a handler that takes batches: a batch's verdicts, with the
/// writes each carries.
const MAX_BATCH_LINE: usize = 64 * 1024 * 1024;
/// About the most a batch holds, in its entries' fields: bigger entries go in several
/// batches, each a line the handler parses whole.
const MAX_BATCH_BYTES: usize = 16 * 1024 * 1024;
/// How long the handler must live at the start for pelican to begin reading: a command
/// that fails at once (a missing module, a syntax error) exits well within it. A handler
/// that says [`HELLO`] sooner is up.
pub const START_GRACE: Duration = Duration::from_millis(500);
/// How long a handler started again, after one of this command said [`HELLO`], is waited
/// for to say it too before anything is written to it (then it gets lines).
const HELLO_WAIT: Duration = Duration::from_secs(5);
/// Handlers in a row that die before answering anything, after which pelican stops (exit 1).
pub const FAILED_STARTS: u32 = 5;
/// Handler deaths an outstanding entry is written again after; at this many it fails.
pub const DEATHS_PER_ENTRY: u32 = 3;
/// Lines told about a misbehaving handler per [`TELL_WINDOW`]; the rest are counted.
const TELLS_PER_WINDOW: u32 = 5;
const TELL_WINDOW: Duration = Duration::from_secs(10);

/// The variable in the handler's environment that offers batches: its value, [`BATCH`].
pub const PROTOCOL_ENV: &str = "PELICAN_PIPE_PROTOCOL";
/// The protocol of batches, as offered and as taken.
pub const BATCH: &str = "batch";
/// The handler's first line that takes batches.
pub const HELLO: &str = r#"{"protocol":"batch"}"#;

/// Where a lane takes its settled entries back: `settle` for each (on the pipe's reader
/// thread), then `wake` once for all those a line of answers settled.
pub trait Returns: Send + Sync {
    /// `entry`'s verdict (already counted by its handler).
    fn settle(&self, entry: Entry, verdict: Verdict);
    /// Entries were settled: the lane has work.
    fn wake(&self);
}

/// How an entry's verdict goes back: to its lane (mio: every entry of a lane the same way),
/// or to the task that waits for it alone (smol: each entry a future).
pub enum Back {
    /// Through the lane's [`Returns`].
    Lane(Arc<dyn Returns>),
    /// Through a channel of its own.
    Task(smol::channel::Sender<Verdict>),
}

/// An entry handed to the pipe: whose, where its verdict goes, and how it has fared.
struct Handed {
    handler: Arc<Handler>,
    entry: Entry,
    back: Back,
    /// Handlers that died while it was outstanding.
    deaths: u32,
    /// `--handler-timeout`: failed if not answered by then.
    deadline: Option<Instant>,
}

/// The handler process and the entries waiting for its answers.
pub struct Pipe {
    command: String,
    state: Mutex<State>,
    /// Wakes the writer ([`Pipe::keep`]): entries queued, a handler's hello or death, the end.
    wake: Condvar,
    /// Outstanding entries: written, not answered.
    waiting: Mutex<Waiting>,
    /// The running handler's pid (0: none), for a second signal to end.
    pid: AtomicU32,
    /// Handlers started after the first.
    restarts: AtomicU64,
    /// What was said about bad lines lately (see [`TELLS_PER_WINDOW`]).
    tells: Mutex<Tells>,
    /// The writer thread, joined at the end.
    writer: Mutex<Option<thread::JoinHandle<()>>>,
}

#[derive(Default)]
struct State {
    running: Option<Running>,
    generation: u64,
    /// Before this, no new handler starts (the backoff after one that died).
    next_start: Option<Instant>,
    backoff: Option<Duration>,
    /// The run is ending: the handler is not started again.
    finishing: bool,
    /// Handlers in a row that died before answering anything.
    failed_starts: u32,
    /// How the last handler ended, while none runs or the one running has not answered
    /// after a failed start.
    last_end: Option<String>,
    /// Entries handed over and not yet written: new ones at the back, those of a handler
    /// that died at the front, in the order they were written to it.
    queue: VecDeque<Handed>,
    /// A handler of this command said [`HELLO`]: the next one started is given
    /// [`HELLO_WAIT`] to say it too.
    batches_seen: bool,
}

struct Running {
    /// Shared with the writer while it writes, outside the lock.
    stdin: Arc<ChildStdin>,
    generation: u64,
    since: Instant,
    /// The thread that reads its answers, and reaps it when they end.
    reader: Option<thread::JoinHandle<()>>,
    /// It said [`HELLO`]: it gets batches.
    batches: bool,
    /// Nothing is written to it before this unless it says [`HELLO`].
    hello_by: Option<Instant>,
}

/// The outstanding entries, each by its place in the order written (its `seq`), found by id,
/// and the batches they were written in.
#[derive(Default)]
struct Waiting {
    entries: BTreeMap<u64, Waiter>,
    by_id: HashMap<String, Vec<u64>>,
    batches: HashMap<u64, Batch>,
    next_seq: u64,
    next_batch: u64,
    /// `--handler-timeout`'s deadlines, the soonest first (stale ones, of entries answered
    /// since, are skipped).
    deadlines: BinaryHeap<Reverse<(Instant, u64)>>,
}

/// An outstanding entry: the handler generation it was written to, its id (as a string),
/// its batch, and the entry itself.
struct Waiter {
    generation: u64,
    id: String,
    batch: Option<u64>,
    handed: Handed,
}

/// A batch written: its entries' seqs are `first..first + len`; `left` of them outstanding.
struct Batch {
    first: u64,
    len: usize,
    left: usize,
}

impl Waiting {
    /// Registers `handed`, written to handler `generation` in this order (as one batch if
    /// `batch`): the batch's number, if one.
    fn register(&mut self, generation: u64, batch: bool, handed: Vec<Handed>) -> Option<u64> {
        let first = self.next_seq;
        let number = batch.then(|| {
            self.next_batch += 1;
            self.next_batch
        });
        if let Some(number) = number {
            self.batches.insert(number, Batch { first, len: handed.len(), left: handed.len() });
        }
        for handed in handed {
            let seq = self.next_seq;
            self.next_seq += 1;
            let id = String::from_utf8_lossy(handed.entry.id()).into_owned();
            self.by_id.entry(id.clone()).or_default().push(seq);
            if let Some(at) = handed.deadline {
                self.deadlines.push(Reverse((at, seq)));
            }
            self.entries.insert(seq, Waiter { generation, id, batch: number, handed });
        }
        number
    }

    /// Takes the outstanding entry `seq`, if it still is.
    fn remove(&mut self, seq: u64) -> Option<Waiter> {
        let waiter = self.entries.remove(&seq)?;
        if let Some(seqs) = self.by_id.get_mut(&waiter.id) {
            seqs.retain(|s| *s != seq);
            if seqs.is_empty() {
                self.by_id.remove(&waiter.id);
            }
        }
        if let Some(number) = waiter.batch {
            if let Some(batch) = self.batches.get_mut(&number) {
                batch.left -= 1;
                if batch.left == 0 {
                    self.batches.remove(&number);
                }
            }
        }
        Some(waiter)
    }

    /// Takes every entry outstanding with handler `generation`, in the order written.
    fn take_generation(&mut self, generation: u64) -> Vec<Handed> {
        let seqs: Vec<u64> =
            self.entries.iter().filter(|(_, w)| w.generation == generation).map(|(s, _)| *s).collect();
        seqs.into_iter().filter_map(|seq| self.remove(seq)).map(|w| w.handed).collect()
    }

    /// The outstanding entries of `generation`, in the order written: (seq, id).
    fn of_generation(&self, generation: u64) -> Vec<(u64, &str)> {
        self.entries
            .iter()
            .filter(|(_, w)| w.generation == generation)
            .map(|(s, w)| (*s, &w.id[..]))
            .collect()
    }
}

/// One line from the handler, of any form (see [`Pipe::answer`]).
#[derive(Deserialize)]
struct Incoming {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    verdict: Option<Value>,
    #[serde(default)]
    stream: Option<Value>,
    /// Entries to add with the ack, in one step (see [`super::emit`]).
    #[serde(default)]
    emit: Option<Value>,
    /// Other writes to make with the ack.
    #[serde(default)]
    writes: Option<Value>,
    /// With `"retry"`: not before this many milliseconds (`Verdict::RetryAfter`).
    #[serde(default)]
    retry_after_ms: Option<Value>,
    /// A batch's answer: its number…
    #[serde(default)]
    batch: Option<Value>,
    /// …and a verdict per entry, in order.
    #[serde(default)]
    verdicts: Option<Value>,
    /// The hello.
    #[serde(default)]
    protocol: Option<Value>,
}

/// What a line from the handler was.
#[derive(PartialEq)]
enum Heard {
    /// An answer that settled at least one entry.
    Answered,
    /// Its [`HELLO`].
    Hello,
    /// Anything else (told, if it needed telling).
    Other,
}

/// Lines told in the current window, and those left untold.
#[derive(Default)]
struct Tells {
    since: Option<Instant>,
    told: u32,
    untold: u64,
}

impl Pipe {
    /// A pipe to `sh -c command`; [`start`](Self::start) starts it.
    pub fn new(command: String) -> Pipe {
        Pipe {
            command,
            state: Mutex::default(),
            wake: Condvar::new(),
            waiting: Mutex::default(),
            pid: AtomicU32::new(0),
            restarts: AtomicU64::new(0),
            tells: Mutex::default(),
            writer: Mutex::default(),
        }
    }

    /// The running handler's pid (it leads its own process group), if any.
    pub fn pid(&self) -> Option<u32> {
        Some(self.pid.load(SeqCst)).filter(|p| *p != 0)
    }

    /// Handlers started after the first (`pelican_handler_restarts_total`).
    pub fn restarts(&self) -> u64 {
        self.restarts.load(Relaxed)
    }

    /// Whether the handler said it takes batches ([`HELLO`]).
    pub fn speaks_batches(&self) -> bool {
        let state = lock(&self.state);
        state.batches_seen || state.running.as_ref().is_some_and(|r| r.batches)
    }

    /// Starts the handler before anything is read, and the writer; waits [`START_GRACE`],
    /// or until the handler says [`HELLO`]: `Err` says how it ended if it did not live that
    /// long (its stderr, pelican's, has said why).
    pub fn start(self: &Arc<Self>, shared: &Arc<Shared>) -> Result<(), String> {
        let started = Instant::now();
        if self.launch(&mut lock(&self.state), shared).is_none() {
            return Err(self.ended().unwrap_or_else(|| "could not be started".into()));
        }
        let (pipe, keeping) = (self.clone(), shared.clone());
        let writer = thread::Builder::new()
            .name("pelican-pipe-writer".into())
            .spawn(move || pipe.keep(&keeping))
            .map_err(|e| format!("cannot start the --pipe writer's thread: {e}"))?;
        *lock(&self.writer) = Some(writer);
        while started.elapsed() < START_GRACE {
            thread::sleep(Duration::from_millis(5));
            let state = lock(&self.state);
            match &state.running {
                None => {
                    drop(state);
                    let how = self.ended().unwrap_or_else(|| "ended".into());
                    let ms = started.elapsed().as_millis();
                    return Err(format!(
                        "the --pipe handler `{}` {how} {ms} ms after its start, before any entry was \
                         read (its stderr above says why)",
                        self.command
                    ));
                }
                Some(running) if running.batches => break,
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// How the last handler ended, if it did.
    fn ended(&self) -> Option<String> {
        lock(&self.state).last_end.clone()
    }

    /// `Err` while the handler is down (waiting to be started again) or failing (the last
    /// one died before answering anything, and this one has not answered yet): for
    /// `/healthz`.
    pub fn health(&self) -> Result<(), String> {
        let state = lock(&self.state);
        if state.finishing {
            return Ok(());
        }
        let how = state.last_end.as_deref().unwrap_or("ended");
        match (&state.running, state.failed_starts) {
            (None, _) if state.generation > 0 => {
                let at =
                    state.next_start.map_or(0, |at| at.saturating_duration_since(Instant::now()).as_millis());
                Err(format!("the --pipe handler is down: it {how}; starting it again in {at} ms"))
            }
            // Until this one answers, or lives long enough to be trusted.
            (Some(running), n @ 1..) if running.since.elapsed() < BACKOFF_RESET => Err(format!(
                "the --pipe handler is failing: {n} in a row died before answering anything (the last {how})"
            )),
            _ => Ok(()),
        }
    }

    /// Hands `entry` of `handler`'s stream to the handler: it is in hand until its verdict
    /// goes `back`. Queued only: [`kick`](Self::kick) has the writer write what is queued,
    /// so that entries handed over together are written together.
    pub fn queue(&self, handler: Arc<Handler>, entry: Entry, back: Back) {
        handler.hold();
        let deadline = handler.shared.handler_timeout.map(|limit| Instant::now() + limit);
        lock(&self.state).queue.push_back(Handed { handler, entry, back, deaths: 0, deadline });
    }

    /// Has the writer write what is queued.
    pub fn kick(&self) {
        self.wake.notify_one();
    }

    /// The writer, on a thread of its own until [`finish`](Self::finish): writes what is
    /// queued to the running handler (starting one after the backoff if none runs, and
    /// waiting for a new one's hello if this command said it before), and fails entries
    /// past `--handler-timeout`.
    fn keep(self: &Arc<Self>, shared: &Arc<Shared>) {
        let mut state = lock(&self.state);
        loop {
            let now = Instant::now();
            let late = self.expired(&mut state, shared, now);
            if !late.is_empty() {
                drop(state);
                self.time_out(shared, late);
                state = lock(&self.state);
                continue;
            }
            let deadline = self.next_deadline(&state, shared);
            if state.queue.is_empty() {
                if state.finishing {
                    return;
                }
                state = self.sleep(state, deadline, None);
                continue;
            }
            if state.running.is_none() {
                if ending(&state, shared) {
                    let failed: Vec<Handed> = state.queue.drain(..).collect();
                    drop(state);
                    self.fail(failed);
                    state = lock(&self.state);
                    continue;
                }
                if let Some(at) = state.next_start.filter(|at| *at > now) {
                    state = self.sleep(state, deadline, Some(at));
                    continue;
                }
                if self.launch(&mut state, shared).is_none() {
                    // Not even `sh` could be run: what waits fails (it stays pending).
                    let failed: Vec<Handed> = state.queue.drain(..).collect();
                    drop(state);
                    self.fail(failed);
                    state = lock(&self.state);
                    continue;
                }
            }
            let Some(running) = state.running.as_ref() else { continue };
            let (generation, batches) = (running.generation, running.batches);
            if let Some(by) = running.hello_by.filter(|by| !batches && *by > now) {
                state = self.sleep(state, deadline, Some(by));
                continue;
            }
            let stdin = running.stdin.clone();
            let take = if batches { batch_len(&state.queue) } else { state.queue.len() };
            let handed: Vec<Handed> = state.queue.drain(..take).collect();
            let lines: Vec<(Arc<Handler>, Entry)> =
                handed.iter().map(|h| (h.handler.clone(), h.entry.clone())).collect();
            // Registered before the write, under the state's lock: a handler that dies meanwhile
            // finds them (its reader takes its generation's entries only once it is no longer
            // running), and an answer cannot come before its entry is known.
            let batch = lock(&self.waiting).register(generation, batches, handed);
            drop(state);
            let text = frame(batch, &lines);
            // A failed write: the handler is gone, and its reader hands these to the next one.
            let _ = (&*stdin).write_all(&text);
            drop(stdin);
            state = lock(&self.state);
        }
    }

    /// Waits on the writer's condition until woken, `deadline` (a timeout's) or `until`.
    fn sleep<'a>(
        &self,
        state: MutexGuard<'a, State>,
        deadline: Option<Instant>,
        until: Option<Instant>,
    ) -> MutexGuard<'a, State> {
        let at = match (deadline, until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match at {
            None => self.wake.wait(state).unwrap_or_else(PoisonError::into_inner),
            Some(at) => {
                let wait = at.saturating_duration_since(Instant::now());
                self.wake.wait_timeout(state, wait).unwrap_or_else(PoisonError::into_inner).0
            }
        }
    }

    /// The soonest `--handler-timeout` deadline of an entry queued or outstanding.
    fn next_deadline(&self, state: &State, shared: &Shared) -> Option<Instant> {
        shared.handler_timeout?;
        let queued = state.queue.iter().filter_map(|h| h.deadline).min();
        let written = lock(&self.waiting).deadlines.peek().map(|Reverse((at, _))| *at);
        match (queued, written) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The entries queued or outstanding past `--handler-timeout`, taken.
    fn expired(&self, state: &mut State, shared: &Shared, now: Instant) -> Vec<Handed> {
        if shared.handler_timeout.is_none() {
            return Vec::new();
        }
        let mut late = Vec::new();
        if state.queue.iter().any(|h| h.deadline.is_some_and(|at| at <= now)) {
            let (gone, kept): (VecDeque<Handed>, VecDeque<Handed>) = std::mem::take(&mut state.queue)
                .into_iter()
                .partition(|h| h.deadline.is_some_and(|at| at <= now));
            late = gone.into();
            state.queue = kept;
        }
        let mut waiting = lock(&self.waiting);
        while let Some(Reverse((at, seq))) = waiting.deadlines.peek().copied() {
            if at > now {
                break;
            }
            waiting.deadlines.pop();
            late.extend(waiting.remove(seq).map(|w| w.handed));
        }
        late
    }

    /// Fails `late`, each told: not answered within `--handler-timeout`.
    fn time_out(&self, shared: &Shared, late: Vec<Handed>) {
        let ms = shared.handler_timeout.unwrap_or_default().as_millis();
        for handed in &late {
            shared.screen.tell(format_args!(
                "pelican: --pipe: {} not answered within {ms} ms: failed (it stays pending)",
                String::from_utf8_lossy(handed.entry.id())
            ));
        }
        self.fail(late);
    }

    /// Settles each of `handed` as failed (`Retry`: it stays pending).
    fn fail(&self, handed: Vec<Handed>) {
        let mut wakes = Vec::new();
        for handed in handed {
            settle(handed, Verdict::Retry, &mut wakes);
        }
        wake_all(&mut wakes);
    }

    /// Starts a handler (a new generation) and its reader. `None`: it could not be started
    /// (told, the backoff set).
    fn launch(self: &Arc<Self>, state: &mut State, shared: &Arc<Shared>) -> Option<u64> {
        let mut child = match Command::new("sh")
            .arg("-c")
            .arg(&self.command)
            .env(PROTOCOL_ENV, BATCH)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
        {
            Ok(child) => child,
            Err(e) => {
                shared.screen.tell(format_args!("pelican: cannot run sh: {e}"));
                state.last_end = Some(format!("could not be started (sh: {e})"));
                self.back_off(state);
                return None;
            }
        };
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else { return None };
        if state.generation > 0 {
            self.restarts.fetch_add(1, Relaxed);
        }
        state.generation += 1;
        let generation = state.generation;
        self.pid.store(child.id(), SeqCst);
        let (pipe, shared) = (self.clone(), shared.clone());
        let reader = thread::Builder::new()
            .name("pelican-pipe".into())
            .spawn(move || pipe.read(&shared, child, stdout, generation))
            .ok();
        let hello_by = state.batches_seen.then(|| Instant::now() + HELLO_WAIT);
        state.running = Some(Running {
            stdin: Arc::new(stdin),
            generation,
            since: Instant::now(),
            reader,
            batches: false,
            hello_by,
        });
        Some(generation)
    }

    fn back_off(&self, state: &mut State) {
        let next = state.backoff.map_or(BACKOFF_MIN, |b| (b * 2).min(BACKOFF_MAX));
        state.backoff = Some(next);
        state.next_start = Some(Instant::now() + next);
    }

    /// The reader of generation `generation`: gives each answer to its entry; when the
    /// handler's stdout ends, reaps it and hands its outstanding entries to the next one.
    fn read(&self, shared: &Shared, mut child: Child, stdout: ChildStdout, generation: u64) {
        let started = Instant::now();
        let mut answered = false;
        let mut limit = MAX_LINE;
        let mut lines = BufReader::with_capacity(64 * 1024, stdout);
        let mut line = Vec::new();
        let mut wakes = Vec::new();
        loop {
            // The lanes whose entries were settled are woken once, before a read that may wait.
            if lines.buffer().is_empty() {
                wake_all(&mut wakes);
            }
            match next_line(&mut lines, &mut line, limit) {
                Ok(None) | Err(_) => break,
                Ok(Some(true)) => match self.answer(shared, &line, generation, &mut wakes) {
                    Heard::Answered if !answered => {
                        answered = true;
                        let mut state = lock(&self.state);
                        state.failed_starts = 0;
                        state.last_end = None;
                    }
                    Heard::Hello => limit = MAX_BATCH_LINE,
                    _ => {}
                },
                Ok(Some(false)) => {
                    let text = String::from_utf8_lossy(&line);
                    let why = format!("a line longer than {} KiB", limit / 1024);
                    self.unreadable(shared, &text, &why, generation, &mut wakes);
                }
            }
        }
        wake_all(&mut wakes);
        let status = child.wait();
        self.pid.compare_exchange(child.id(), 0, SeqCst, SeqCst).ok();
        let mut state = lock(&self.state);
        if state.running.as_ref().is_some_and(|r| r.generation == generation) {
            state.running = None;
        }
        // After it is no longer running: nothing more is registered for it (see `keep`).
        let orphans = lock(&self.waiting).take_generation(generation);
        let how = match &status {
            Ok(s) => match (s.code(), s.signal()) {
                (Some(code), _) => format!("exited with status {code}"),
                (_, Some(signal)) => format!("was killed by signal {signal}"),
                _ => "ended".to_string(),
            },
            Err(e) => format!("was lost ({e})"),
        };
        // Past the stop's deadline the handler was ended on purpose, and that was told.
        let ending = state.finishing || EXITING.load(SeqCst) || super::stop::OVERRAN.load(SeqCst);
        let code = status.as_ref().ok().and_then(ExitStatus::code);
        // A failed start: dead soon after its start, without a word (one that lived long
        // enough, idle, is trusted).
        match answered || started.elapsed() >= BACKOFF_RESET {
            true => state.failed_starts = 0,
            false => state.failed_starts += 1,
        }
        state.last_end = Some(how.clone());
        let mut failed = Vec::new();
        if !ending && !answered && matches!(code, Some(126 | 127)) {
            // A typo or a missing file would fail every entry in turn: stop instead.
            shared.unrunnable.store(code.unwrap_or(127), Relaxed);
            shared.stop.stop();
            failed = orphans;
        } else if !ending && state.failed_starts >= FAILED_STARTS {
            let n = state.failed_starts;
            let _ = shared.gave_up.set(format!(
                "stopped: the --pipe handler `{}` died before answering anything {n} times in a row \
                 (the last {how}); the entries it held stay pending",
                self.command
            ));
            shared.stop.stop();
            failed = orphans;
        } else if !ending {
            if started.elapsed() >= BACKOFF_RESET {
                state.backoff = None;
            }
            self.back_off(&mut state);
            let n = orphans.len();
            let entries = if n == 1 { "entry is" } else { "entries are" };
            // Stopping: no new handler starts (see `keep`), so none is promised.
            let stopping = shared.stop.is_requested();
            let next = match stopping {
                true if n == 0 => String::new(),
                true => format!("; its {n} outstanding {entries} left pending"),
                false if n == 0 => {
                    format!("; starting it again in {} ms", state.backoff.unwrap_or(BACKOFF_MIN).as_millis())
                }
                false => format!(
                    "; its {n} outstanding {entries} held for the next one, started in {} ms",
                    state.backoff.unwrap_or(BACKOFF_MIN).as_millis()
                ),
            };
            shared.screen.tell(format_args!("pelican: the --pipe handler {how}{next}"));
            if stopping {
                failed = orphans;
            } else {
                // Written again first, in the order they were written before.
                for mut handed in orphans.into_iter().rev() {
                    handed.deaths += 1;
                    if handed.deaths >= DEATHS_PER_ENTRY {
                        shared.screen.tell(format_args!(
                            "pelican: --pipe: {} was outstanding at {} handler deaths: failed (it stays \
                             pending; is it what kills the handler?)",
                            String::from_utf8_lossy(handed.entry.id()),
                            handed.deaths
                        ));
                        failed.push(handed);
                    } else {
                        state.queue.push_front(handed);
                    }
                }
            }
        } else {
            failed = orphans;
        }
        drop(state);
        self.wake.notify_all();
        self.fail(failed);
    }

    /// Tells a line about the handler's output, at most [`TELLS_PER_WINDOW`] per
    /// [`TELL_WINDOW`]; the count of those left untold comes with the next window's first.
    fn tell_bad(&self, shared: &Shared, line: std::fmt::Arguments<'_>) {
        let mut tells = lock(&self.tells);
        let now = Instant::now();
        if tells.since.is_none_or(|since| now.duration_since(since) >= TELL_WINDOW) {
            if tells.untold > 0 {
                shared.screen.tell(format_args!(
                    "pelican: --pipe: {} more lines like these in {} s, untold",
                    tells.untold,
                    TELL_WINDOW.as_secs()
                ));
            }
            *tells = Tells { since: Some(now), told: 0, untold: 0 };
        }
        if tells.told < TELLS_PER_WINDOW {
            tells.told += 1;
            shared.screen.tell(line);
        } else {
            tells.untold += 1;
        }
    }

    /// One line from handler generation `generation`: an entry's answer, a batch's, or the
    /// hello. A line that cannot be read fails an entry (see [`unreadable`](Self::unreadable));
    /// an unknown verdict fails the entry it names; an answer for no outstanding entry is
    /// ignored. Each is told on stderr (rate-limited).
    fn answer(&self, shared: &Shared, line: &[u8], generation: u64, wakes: &mut Wakes) -> Heard {
        let text = String::from_utf8_lossy(line);
        let text = text.trim_end_matches(['\n', '\r']);
        if text.trim().is_empty() {
            return Heard::Other;
        }
        let Ok(incoming) = serde_json::from_str::<Incoming>(text) else {
            self.unreadable(shared, text, why_not(text), generation, wakes);
            return Heard::Other;
        };
        if incoming.batch.is_some() || incoming.verdicts.is_some() {
            return self.answer_batch(shared, incoming, text, generation, wakes);
        }
        if let (Some(protocol), None) = (&incoming.protocol, &incoming.id) {
            return self.hello(shared, protocol, generation);
        }
        let Some(Value::String(id)) = &incoming.id else {
            self.unreadable(shared, text, why_not(text), generation, wakes);
            return Heard::Other;
        };
        let shown: String = text.chars().take(200).collect();
        let verdict = judge(
            shared,
            id,
            incoming.verdict.as_ref(),
            incoming.retry_after_ms.as_ref(),
            [incoming.emit.as_ref(), incoming.writes.as_ref()],
        );
        let stream = incoming.stream.as_ref().map(|s| serde_json::to_string(s).unwrap_or_default());
        let found = {
            let mut waiting = lock(&self.waiting);
            let seqs = waiting.by_id.get(id).map(|seqs| &seqs[..]).unwrap_or_default();
            let seq = match &stream {
                Some(stream) => Ok(seqs.iter().copied().find(|seq| {
                    waiting.entries.get(seq).is_some_and(|w| w.handed.handler.stream_json == *stream)
                })),
                // One stream (or the id says which): the outstanding entry with this id.
                None => match seqs {
                    [seq] => Ok(Some(*seq)),
                    [] => Ok(None),
                    _ => Err(()),
                },
            };
            seq.map(|seq| seq.and_then(|seq| waiting.remove(seq)))
        };
        let found = match found {
            Ok(found) => found,
            Err(()) => {
                self.tell_bad(shared, format_args!(
                    "pelican: --pipe: an answer without \"stream\" for an id outstanding on several streams, ignored: {shown}"
                ));
                return Heard::Other;
            }
        };
        match (found, verdict) {
            (Some(waiter), Ok(verdict)) => {
                settle(waiter.handed, verdict, wakes);
                Heard::Answered
            }
            (Some(waiter), Err(why)) => {
                // The entry it names fails: ignored, the line would leave it in hand for good.
                settle(waiter.handed, Verdict::Retry, wakes);
                self.tell_bad(shared, format_args!(
                    "pelican: --pipe: {id} failed and stays pending: its answer has {why}; expected {EXPECTED}; the line: {shown}"
                ));
                Heard::Other
            }
            (None, verdict) => {
                let also = verdict.err().map(|why| format!(" (and with {why})")).unwrap_or_default();
                self.tell_bad(
                    shared,
                    format_args!(
                        "pelican: --pipe: an answer for no outstanding entry{also}, ignored: {shown}"
                    ),
                );
                Heard::Other
            }
        }
    }

    /// A batch's answer: `{"batch":N,"verdicts":[…]}`, a verdict per entry in the batch's
    /// order (`null` for one answered on a line of its own). A count of verdicts other than
    /// the batch's entries fails those outstanding; a bad verdict fails its entry.
    fn answer_batch(
        &self,
        shared: &Shared,
        incoming: Incoming,
        text: &str,
        generation: u64,
        wakes: &mut Wakes,
    ) -> Heard {
        let shown: String = text.chars().take(200).collect();
        let (Some(number), Some(Value::Array(verdicts))) =
            (incoming.batch.as_ref().and_then(Value::as_u64), incoming.verdicts)
        else {
            let why = "a batch's answer needs \"batch\" (its number, as written) and \"verdicts\" (an array)";
            self.unreadable(shared, text, why, generation, wakes);
            return Heard::Other;
        };
        let mut waiting = lock(&self.waiting);
        let Some(batch) = waiting.batches.get(&number) else {
            drop(waiting);
            self.tell_bad(
                shared,
                format_args!("pelican: --pipe: an answer for no outstanding batch, ignored: {shown}"),
            );
            return Heard::Other;
        };
        let (first, len) = (batch.first, batch.len);
        let ours = |waiting: &mut Waiting, seq: u64| match waiting
            .entries
            .get(&seq)
            .is_some_and(|w| w.batch == Some(number))
        {
            true => waiting.remove(seq),
            false => None,
        };
        if verdicts.len() != len {
            let failed: Vec<Handed> = (first..first + len as u64)
                .filter_map(|seq| ours(&mut waiting, seq))
                .map(|w| w.handed)
                .collect();
            drop(waiting);
            let n = failed.len();
            self.fail(failed);
            self.tell_bad(shared, format_args!(
                "pelican: --pipe: batch {number} has {len} entries, its answer {} verdicts: its {n} outstanding failed and stay pending; the line: {shown}",
                verdicts.len()
            ));
            return Heard::Other;
        }
        let settled: Vec<(Waiter, Value)> = verdicts
            .into_iter()
            .zip(first..)
            .filter(|(verdict, _)| !verdict.is_null())
            .filter_map(|(verdict, seq)| Some((ours(&mut waiting, seq)?, verdict)))
            .collect();
        drop(waiting);
        let mut heard = Heard::Other;
        for (waiter, verdict) in settled {
            let (verdict, after, emit, writes) = match verdict {
                Value::Object(mut answer) => (
                    answer.remove("verdict"),
                    answer.remove("retry_after_ms"),
                    answer.remove("emit"),
                    answer.remove("writes"),
                ),
                verdict => (Some(verdict), None, None, None),
            };
            match judge(
                shared,
                &waiter.id,
                verdict.as_ref(),
                after.as_ref(),
                [emit.as_ref(), writes.as_ref()],
            ) {
                Ok(verdict) => {
                    heard = Heard::Answered;
                    settle(waiter.handed, verdict, wakes);
                }
                Err(why) => {
                    self.tell_bad(shared, format_args!(
                        "pelican: --pipe: {} failed and stays pending: its verdict in batch {number} has {why}; expected {EXPECTED_IN_BATCH}",
                        waiter.id
                    ));
                    settle(waiter.handed, Verdict::Retry, wakes);
                }
            }
        }
        heard
    }

    /// The handler's hello: it takes batches from now on (or asks for a protocol this
    /// pelican does not speak, told: it gets lines).
    fn hello(&self, shared: &Shared, protocol: &Value, generation: u64) -> Heard {
        if protocol.as_str() != Some(BATCH) {
            self.tell_bad(shared, format_args!(
                "pelican: --pipe: the handler asks for the protocol {protocol}, which this pelican does not speak (it takes {HELLO}): it gets one entry per line"
            ));
            return Heard::Other;
        }
        let mut state = lock(&self.state);
        state.batches_seen = true;
        if let Some(running) = state.running.as_mut().filter(|r| r.generation == generation) {
            running.batches = true;
        }
        drop(state);
        self.wake.notify_all();
        Heard::Hello
    }

    /// A line from handler generation `generation` that cannot be read as an answer (`why`
    /// not): it fails the entry [`blame`] picks, told with the line. With nothing outstanding
    /// it is told and ignored.
    fn unreadable(&self, shared: &Shared, text: &str, why: &str, generation: u64, wakes: &mut Wakes) {
        let shown: String = text.trim_end().chars().take(200).collect();
        let more = if text.chars().nth(200).is_some() { "…" } else { "" };
        let failed = {
            let mut waiting = lock(&self.waiting);
            let picked = blame(&waiting.of_generation(generation), text);
            picked.and_then(|(seq, how)| Some((waiting.remove(seq)?, how)))
        };
        let Some((waiter, how)) = failed else {
            self.tell_bad(shared, format_args!(
                "pelican: --pipe: not an answer: {why}; expected {EXPECTED}. No entry is outstanding to fail for it; the line: {shown}{more}"
            ));
            return;
        };
        let of = match shared.several {
            true => format!(" of stream {}", waiter.handed.handler.stream_json),
            false => String::new(),
        };
        let id = waiter.id.clone();
        settle(waiter.handed, Verdict::Retry, wakes);
        self.tell_bad(shared, format_args!(
            "pelican: --pipe: not an answer: {why}; expected {EXPECTED}. {id}{of} failed for it ({how}) and stays pending; the line: {shown}{more}"
        ));
    }

    /// The end of the run (every entry settled): closes the handler's stdin, gives it
    /// [`EXIT_GRACE`] to exit, then SIGTERM, then SIGKILL; then the writer ends.
    pub fn finish(&self) {
        let reader = {
            let mut state = lock(&self.state);
            state.finishing = true;
            state.running.take().and_then(|r| r.reader) // dropping stdin closes it
        };
        self.wake.notify_all();
        if let Some(reader) = reader {
            for signal in [None, Some(Signal::TERM), Some(Signal::KILL)] {
                if let (Some(signal), Some(pid)) = (signal, self.pid().and_then(|p| Pid::from_raw(p as i32)))
                {
                    let _ = kill_process_group(pid, signal);
                }
                let deadline = Instant::now() + EXIT_GRACE;
                while self.pid().is_some() && Instant::now() < deadline {
                    thread::sleep(Duration::from_millis(10));
                }
                if self.pid().is_none() {
                    break;
                }
            }
            let _ = reader.join();
        }
        if let Some(writer) = lock(&self.writer).take() {
            let _ = writer.join();
        }
    }
}

/// The lanes to wake once the answers read so far are settled.
type Wakes = Vec<Arc<dyn Returns>>;

/// Settles `handed` with `verdict` (counted by its handler) and sends the verdict back; its
/// lane is woken later, with the others ([`wake_all`]).
fn settle(handed: Handed, verdict: Verdict, wakes: &mut Wakes) {
    let Handed { handler, entry, back, .. } = handed;
    let verdict = handler.settled(&entry, verdict);
    match back {
        Back::Lane(lane) => {
            lane.settle(entry, verdict);
            if !wakes.iter().any(|w| Arc::ptr_eq(w, &lane)) {
                wakes.push(lane);
            }
        }
        // A task that is gone (an abandoned run) no longer waits for it.
        Back::Task(tx) => drop(tx.try_send(verdict)),
    }
}

fn wake_all(wakes: &mut Wakes) {
    for lane in wakes.drain(..) {
        lane.wake();
    }
}

/// Whether the run is ending: no handler is started any more.
fn ending(state: &State, shared: &Shared) -> bool {
    state.finishing || EXITING.load(SeqCst) || shared.stop.is_requested()
}

/// How many of the entries queued go in the next batch: all, up to about [`MAX_BATCH_BYTES`]
/// of fields (at least one); the rest go in the next.
fn batch_len(queue: &VecDeque<Handed>) -> usize {
    let mut bytes = 0;
    for (i, handed) in queue.iter().enumerate() {
        bytes += handed.entry.fields().map(|(name, value)| name.len() + value.len()).sum::<usize>();
        if bytes > MAX_BATCH_BYTES && i > 0 {
            return i;
        }
    }
    queue.len()
}

/// What `lines` look like on the handler's stdin: one batch (`{"batch":N,"entries":[…]}`)
/// or a line each.
fn frame(batch: Option<u64>, lines: &[(Arc<Handler>, Entry)]) -> Vec<u8> {
    let mut text = Vec::with_capacity(lines.len() * 128 + 32);
    if let Some(number) = batch {
        let _ = write!(text, "{{\"batch\":{number},\"entries\":[");
    }
    for (i, (handler, entry)) in lines.iter().enumerate() {
        if batch.is_some() && i > 0 {
            text.push(b',');
        }
        json::push_pipe_entry(&mut text, handler.stream_bytes(), entry, entry.source.as_str());
        if batch.is_none() {
            text.push(b'\n');
        }
    }
    if batch.is_some() {
        text.extend_from_slice(b"]}\n");
    }
    text
}

/// An entry's verdict from its answer's members: `Err` for a missing or unknown one; writes
/// that cannot be made (malformed, or with another verdict than an ack) are told and fail
/// the entry, nothing of them written.
fn judge(
    shared: &Shared,
    id: &str,
    verdict: Option<&Value>,
    retry_after_ms: Option<&Value>,
    [emit, writes]: [Option<&Value>; 2],
) -> Result<Verdict, String> {
    let verdict = match verdict.and_then(Value::as_str) {
        Some("ack") if retry_after_ms.is_none() => Verdict::Ack,
        Some("retry") => match retry_after_ms {
            None => Verdict::Retry,
            // A whole number of ms (the core takes more than 365 days as 365 days).
            Some(ms) => match ms.as_u64() {
                Some(ms) => Verdict::RetryAfter(Duration::from_millis(ms)),
                None => {
                    return Err(format!(
                        "a \"retry_after_ms\" that is not a whole number of milliseconds ({ms})"
                    ))
                }
            },
        },
        // A wait asked with another verdict is a mistake worth failing for, not dropping.
        Some(_) if retry_after_ms.is_some() => {
            return Err("a \"retry_after_ms\" with a verdict other than \"retry\"".to_string())
        }
        Some("dead-letter") if shared.dead_letter => Verdict::DeadLetter,
        // Without a dead-letter stream it is a failure, as --exec's 65 is.
        Some("dead-letter") => Verdict::Retry,
        Some(_) => {
            return Err(format!(
                "an unknown verdict {}",
                verdict.map(ToString::to_string).unwrap_or_default()
            ))
        }
        None if verdict.is_some() => return Err("a \"verdict\" that is not a string".to_string()),
        None => return Err("no \"verdict\"".to_string()),
    };
    // Writes ride only with an ack, and are read whole before anything is sent: a bad one
    // fails the entry (it stays pending), nothing of it written.
    if emit.is_none() && writes.is_none() {
        return Ok(verdict);
    }
    if verdict != Verdict::Ack {
        let why = "\"emit\"/\"writes\" go with \"verdict\": \"ack\"";
        shared
            .screen
            .tell(format_args!("pelican: --pipe: entry {id}: {why}; the entry failed, nothing written"));
        return Ok(Verdict::Retry);
    }
    match super::emit::from_answer(emit, writes) {
        Ok(writes) => Ok(Verdict::Commit(writes)),
        Err(why) => {
            shared
                .screen
                .tell(format_args!("pelican: --pipe: entry {id}: {why}; the entry failed, nothing written"));
            Ok(Verdict::Retry)
        }
    }
}

/// What an answer looks like, for the lines that tell a bad one.
const EXPECTED: &str = r#"{"id": "…", "verdict": "ack"|"retry"|"dead-letter"} on one line (a "retry" may add "retry_after_ms": N)"#;

/// What a verdict in a batch's answer looks like.
const EXPECTED_IN_BATCH: &str = r#""ack"|"retry"|"dead-letter", {"verdict": …} (with "emit", "writes" or "retry_after_ms"), or null (answered on its own line)"#;

/// What a line written with single quotes is told.
const SINGLE_QUOTES: &str =
    "not JSON (single quotes: JSON strings take double quotes, as json.dumps writes them)";

/// Why `text` is not an answer (`{"id": "…", …}`), in words for the handler's author.
fn why_not(text: &str) -> &'static str {
    let Ok(value) = serde_json::from_str::<Value>(text) else {
        // Python's `print(dict)` writes single quotes: the likeliest mistake, named.
        return match text.trim_start().starts_with("{'") || text.contains("': ") {
            true => SINGLE_QUOTES,
            false => "not JSON",
        };
    };
    match value.get("id") {
        _ if !value.is_object() => "not a JSON object",
        None => "no \"id\"",
        Some(id) if !id.is_string() => "its \"id\" is not a string",
        Some(_) => "not an answer",
    }
}

/// The outstanding entry an unreadable `line` fails, of those written to its handler
/// (`theirs`: seq and id, in the order written), and why that one: one whose id the line
/// names (a Python dict printed with single quotes still holds it; the oldest of those, if
/// it names several), else the only one, else the oldest. `None`: nothing outstanding there.
fn blame(theirs: &[(u64, &str)], line: &str) -> Option<(u64, String)> {
    let named = theirs.iter().find(|(_, id)| names(line, id));
    let (how, (seq, _)) = match (named, theirs) {
        (Some(named), _) => ("named in the line".to_string(), named),
        (None, []) => return None,
        (None, [only]) => ("the only entry outstanding".to_string(), only),
        (None, [oldest, ..]) => (format!("the oldest of {} outstanding", theirs.len()), oldest),
    };
    Some((*seq, how))
}

/// Whether `line` holds `id` as a whole (not as part of a longer id: `1-0` is not in `11-0`).
fn names(line: &str, id: &str) -> bool {
    let part = |c: Option<char>| c.is_some_and(|c| c.is_ascii_digit() || c == '-');
    !id.is_empty()
        && line.match_indices(id).any(|(at, _)| {
            !part(line[..at].chars().next_back()) && !part(line[at + id.len()..].chars().next())
        })
}

/// Reads one line (its newline kept) into `line`, keeping at most `limit` bytes of it:
/// `None` at the end of the output, `Some(false)` for a longer line (the rest of it skipped),
/// so a handler writing without newlines cannot grow pelican's memory without end.
fn next_line(from: &mut impl BufRead, line: &mut Vec<u8>, limit: usize) -> std::io::Result<Option<bool>> {
    line.clear();
    let (mut any, mut whole) = (false, true);
    loop {
        let buf = match from.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok(any.then_some(whole));
        }
        any = true;
        let end = buf.iter().position(|b| *b == b'\n');
        let chunk = &buf[..end.map_or(buf.len(), |i| i + 1)];
        let room = limit.saturating_sub(line.len());
        whole &= chunk.len() <= room;
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let used = chunk.len();
        from.consume(used);
        if end.is_some() {
            return Ok(Some(whole));
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::{blame, names, next_line, why_not, MAX_LINE};

    #[test]
    fn an_unreadable_line_is_told_why() {
        assert_eq!(why_not("{'id': '1-0', 'verdict': 'ack'}"), super::SINGLE_QUOTES);
        assert_eq!(why_not("done"), "not JSON");
        assert_eq!(why_not("[1]"), "not a JSON object");
        assert_eq!(why_not(r#"{"verdict":"ack"}"#), "no \"id\"");
        assert_eq!(why_not(r#"{"id":7}"#), "its \"id\" is not a string");
    }

    #[test]
    fn an_unreadable_line_fails_the_entry_it_names_else_the_only_else_the_oldest() {
        assert!(names("{'id': '1-0', 'verdict': 'ack'}", "1-0"));
        assert!(!names("{'id': '11-0'}", "1-0") && !names("{'id': '1-01'}", "1-0") && !names("x", ""));
        // Written to the handler in this order (a handler that died since had 1-0).
        let theirs = [(7, "5-0"), (9, "3-0")];
        let blamed = |theirs: &[(u64, &str)], line: &str| blame(theirs, line);
        assert_eq!(blamed(&theirs, "{'id': '3-0'}"), Some((9, "named in the line".into())));
        assert_eq!(blamed(&theirs, "{\"verdict\":\"ack\"}"), Some((7, "the oldest of 2 outstanding".into())));
        assert_eq!(blamed(&[(1, "1-0")], "oops"), Some((1, "the only entry outstanding".into())));
        assert_eq!(blamed(&[], "oops"), None);
    }

    fn lines(bytes: &[u8]) -> Vec<(usize, bool)> {
        // A small buffer: lines arrive in several pieces.
        let mut from = std::io::BufReader::with_capacity(7, bytes);
        let mut line = Vec::new();
        std::iter::from_fn(|| {
            next_line(&mut from, &mut line, MAX_LINE).unwrap().map(|whole| (line.len(), whole))
        })
        .collect()
    }

    #[test]
    fn lines_are_read_whole_and_long_ones_cut() {
        assert_eq!(lines(b"{\"id\":\"1-0\"}\n\nlast"), [(13, true), (1, true), (4, true)]);
        let mut long = vec![b'x'; MAX_LINE + 10];
        long.extend_from_slice(b"\nnext\n");
        assert_eq!(lines(&long), [(MAX_LINE, false), (5, true)]);
        assert_eq!(lines(b""), []);
    }
}
