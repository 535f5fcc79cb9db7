//! `--pipe CMD`: one long-running handler process for every entry of every lane. Each entry
//! goes to its stdin as one JSON line; it answers on its stdout, one JSON line per entry, in
//! any order. Up to `--concurrency` entries per lane are outstanding at once: each waits on
//! its own thread (a lane's worker, smol's blocking pool) for its answer.
//!
//! The handler's life: started before anything is read ([`Pipe::start`]: one that exits
//! within [`START_GRACE`] is a failure at the start, before an entry can be failed by it);
//! if it exits or dies, its outstanding entries are held (in hand: their leases are renewed
//! meanwhile) and written again to the next handler, started after a backoff, so that a
//! broken handler burns no entry's deliveries; an entry outstanding at
//! [`DEATHS_PER_ENTRY`] deaths (it may be what kills the handler) fails. One that cannot be
//! started at all (126/127 before it answers anything), or that dies before answering
//! anything [`FAILED_STARTS`] times in a row, stops pelican with exit 1. While it is down
//! or failing, [`Pipe::health`] says so. At the end of the run ([`Pipe::finish`]) its stdin
//! is closed and it is given time to exit, then SIGTERM, then SIGKILL.
//!
//! A line that cannot be read as an answer (not JSON, no `"id"`, an unknown verdict) fails
//! an entry rather than being ignored, which would leave the entry in hand for good (see
//! [`blame`] for which one). An answer that never comes (an unflushed stdout) is seen by the
//! overdue watch (`super::overdue`) and ended by the stop's deadline (`super::deadline`).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use pelican::{Entry, Verdict};
use rustix::process::{kill_process_group, Pid, Signal};
use serde::Deserialize;

use super::handler::{Shared, EXITING};
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
/// How long the handler must live at the start for pelican to begin reading: a command
/// that fails at once (a missing module, a syntax error) exits well within it.
pub const START_GRACE: Duration = Duration::from_millis(500);
/// Handlers in a row that die before answering anything, after which pelican stops (exit 1).
pub const FAILED_STARTS: u32 = 5;
/// Handler deaths an outstanding entry is written again after; at this many it fails.
pub const DEATHS_PER_ENTRY: u32 = 3;
/// Lines told about a misbehaving handler per [`TELL_WINDOW`]; the rest are counted.
const TELLS_PER_WINDOW: u32 = 5;
const TELL_WINDOW: Duration = Duration::from_secs(10);

/// The handler process and the entries waiting for its answers.
pub struct Pipe {
    command: String,
    state: Mutex<State>,
    /// Outstanding entries by (stream as JSON, id).
    waiting: Mutex<HashMap<Key, Waiter>>,
    /// Lines written to handlers so far: each outstanding entry's place in that order.
    written: AtomicU64,
    /// The running handler's pid (0: none), for a second signal to end.
    pid: AtomicU32,
    /// Handlers started after the first.
    restarts: AtomicU64,
    /// What was said about bad lines lately (see [`TELLS_PER_WINDOW`]).
    tells: Mutex<Tells>,
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
}

struct Running {
    stdin: ChildStdin,
    generation: u64,
    since: Instant,
    /// The thread that reads its answers, and reaps it when they end.
    reader: Option<thread::JoinHandle<()>>,
}

/// An outstanding entry: its stream as the lines write it (JSON), and its id.
type Key = (String, String);

/// An outstanding entry's wait: the handler generation its line was written to, when (its
/// place among the lines written), and where its outcome goes.
struct Waiter {
    generation: u64,
    written: u64,
    tx: Sender<Outcome>,
}

/// What an outstanding entry gets: its verdict, or the news that the handler it was
/// written to is gone.
enum Outcome {
    Verdict(Verdict),
    Died,
}

/// One answer line (its `"id"` known to be a string).
#[derive(Deserialize)]
struct Answer {
    id: String,
    #[serde(default)]
    verdict: Option<serde_json::Value>,
    #[serde(default)]
    stream: Option<serde_json::Value>,
    /// Entries to add with the ack, in one step (see [`super::emit`]).
    #[serde(default)]
    emit: Option<serde_json::Value>,
    /// Other writes to make with the ack.
    #[serde(default)]
    writes: Option<serde_json::Value>,
    /// With `"retry"`: not before this many milliseconds (`Verdict::RetryAfter`).
    #[serde(default)]
    retry_after_ms: Option<serde_json::Value>,
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
            waiting: Mutex::default(),
            written: AtomicU64::new(0),
            pid: AtomicU32::new(0),
            restarts: AtomicU64::new(0),
            tells: Mutex::default(),
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

    /// Starts the handler before anything is read, and waits [`START_GRACE`]: `Err` says how
    /// it ended if it did not live that long (its stderr, pelican's, has said why).
    pub fn start(self: &Arc<Self>, shared: &Arc<Shared>) -> Result<(), String> {
        let started = Instant::now();
        if self.started(&mut lock(&self.state), shared).is_none() {
            return Err(self.ended().unwrap_or_else(|| "could not be started".into()));
        }
        while started.elapsed() < START_GRACE {
            thread::sleep(Duration::from_millis(10));
            if lock(&self.state).running.is_none() {
                let how = self.ended().unwrap_or_else(|| "ended".into());
                let ms = started.elapsed().as_millis();
                return Err(format!(
                    "the --pipe handler `{}` {how} {ms} ms after its start, before any entry was \
                     read (its stderr above says why)",
                    self.command
                ));
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

    /// Writes `entry` to the handler and waits for its verdict (at most `timeout` in all).
    /// If the handler dies meanwhile, the entry is written again to the next one, up to
    /// [`DEATHS_PER_ENTRY`] deaths; then, or with no answer in time, it fails: `Retry`.
    pub fn call(self: &Arc<Self>, shared: &Arc<Shared>, stream: &[u8], entry: &Entry) -> Verdict {
        let line = line(stream, entry);
        let key = (stream_key(stream), String::from_utf8_lossy(entry.id()).into_owned());
        let deadline = shared.handler_timeout.map(|limit| Instant::now() + limit);
        for deaths in 0.. {
            if deaths == DEATHS_PER_ENTRY {
                shared.screen.tell(format_args!(
                    "pelican: --pipe: {} was outstanding at {deaths} handler deaths: failed (it stays \
                     pending; is it what kills the handler?)",
                    key.1
                ));
                return Verdict::Retry;
            }
            let (tx, rx) = mpsc::channel();
            {
                let mut state = lock(&self.state);
                let Some(generation) = self.started(&mut state, shared) else { return Verdict::Retry };
                let written = self.written.fetch_add(1, Relaxed);
                lock(&self.waiting).insert(key.clone(), Waiter { generation, written, tx });
                let running = state.running.as_mut().expect("started");
                // A failed write: it is gone, and its reader tells this entry so.
                let _ = running.stdin.write_all(line.as_bytes()).and_then(|()| running.stdin.flush());
            }
            let answer = match deadline {
                Some(at) => rx.recv_timeout(at.saturating_duration_since(Instant::now())),
                None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            match answer {
                Ok(Outcome::Verdict(verdict)) => return verdict,
                Ok(Outcome::Died) => continue,
                Err(RecvTimeoutError::Timeout) => {
                    lock(&self.waiting).remove(&key);
                    let ms = shared.handler_timeout.unwrap_or_default().as_millis();
                    shared.screen.tell(format_args!(
                        "pelican: --pipe: {} not answered within {ms} ms: failed (it stays pending)",
                        key.1
                    ));
                    return Verdict::Retry;
                }
                Err(RecvTimeoutError::Disconnected) => return Verdict::Retry,
            }
        }
        Verdict::Retry
    }

    /// The running handler's generation, starting one if none runs (after the backoff).
    /// `None`: it cannot be started, or the run is ending.
    fn started(self: &Arc<Self>, state: &mut State, shared: &Arc<Shared>) -> Option<u64> {
        if let Some(running) = &state.running {
            return Some(running.generation);
        }
        let ending = |state: &State| state.finishing || EXITING.load(SeqCst) || shared.stop.is_requested();
        if ending(state) {
            return None;
        }
        if let Some(at) = state.next_start {
            // Holding the lock: the other entries wait for the same start.
            thread::sleep(at.saturating_duration_since(Instant::now()));
            // A stop asked meanwhile starts no new handler.
            if ending(state) {
                return None;
            }
        }
        let mut child = match Command::new("sh")
            .arg("-c")
            .arg(&self.command)
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
        state.running = Some(Running { stdin, generation, since: Instant::now(), reader });
        Some(generation)
    }

    fn back_off(&self, state: &mut State) {
        let next = state.backoff.map_or(BACKOFF_MIN, |b| (b * 2).min(BACKOFF_MAX));
        state.backoff = Some(next);
        state.next_start = Some(Instant::now() + next);
    }

    /// The reader of generation `generation`: gives each answer to its entry; when the
    /// handler's stdout ends, reaps it and tells its outstanding entries, which are written
    /// again to the next handler.
    fn read(&self, shared: &Shared, mut child: Child, stdout: ChildStdout, generation: u64) {
        let started = Instant::now();
        let mut answered = false;
        let mut lines = BufReader::new(stdout);
        let mut line = Vec::new();
        loop {
            match next_line(&mut lines, &mut line) {
                Ok(None) | Err(_) => break,
                Ok(Some(true)) => {
                    if self.answer(shared, &line, generation) && !answered {
                        answered = true;
                        let mut state = lock(&self.state);
                        state.failed_starts = 0;
                        state.last_end = None;
                    }
                }
                Ok(Some(false)) => {
                    let text = String::from_utf8_lossy(&line);
                    let why = format!("a line longer than {} KiB", MAX_LINE / 1024);
                    self.unreadable(shared, &text, &why, generation);
                }
            }
        }
        let status = child.wait();
        self.pid.compare_exchange(child.id(), 0, SeqCst, SeqCst).ok();
        let orphans: Vec<Sender<Outcome>> = {
            let mut waiting = lock(&self.waiting);
            let keys: Vec<_> =
                waiting.iter().filter(|(_, w)| w.generation == generation).map(|(k, _)| k.clone()).collect();
            keys.into_iter().filter_map(|k| waiting.remove(&k)).map(|w| w.tx).collect()
        };
        let mut state = lock(&self.state);
        if state.running.as_ref().is_some_and(|r| r.generation == generation) {
            state.running = None;
        }
        let how = match &status {
            Ok(s) => match (s.code(), s.signal()) {
                (Some(code), _) => format!("exited with status {code}"),
                (_, Some(signal)) => format!("was killed by signal {signal}"),
                _ => "ended".to_string(),
            },
            Err(e) => format!("was lost ({e})"),
        };
        // Past the stop's deadline the handler was ended on purpose, and that was told.
        let ending = state.finishing || EXITING.load(SeqCst) || super::deadline::OVERRAN.load(SeqCst);
        let code = status.as_ref().ok().and_then(ExitStatus::code);
        // A failed start: dead soon after its start, without a word (one that lived long
        // enough, idle, is trusted).
        match answered || started.elapsed() >= BACKOFF_RESET {
            true => state.failed_starts = 0,
            false => state.failed_starts += 1,
        }
        state.last_end = Some(how.clone());
        if !ending && !answered && matches!(code, Some(126 | 127)) {
            // A typo or a missing file would fail every entry in turn: stop instead.
            shared.unrunnable.store(code.unwrap_or(127), Relaxed);
            shared.stop.stop();
        } else if !ending && state.failed_starts >= FAILED_STARTS {
            let n = state.failed_starts;
            let _ = shared.gave_up.set(format!(
                "stopped: the --pipe handler `{}` died before answering anything {n} times in a row \
                 (the last {how}); the entries it held stay pending",
                self.command
            ));
            shared.stop.stop();
        } else if !ending {
            if started.elapsed() >= BACKOFF_RESET {
                state.backoff = None;
            }
            self.back_off(&mut state);
            let n = orphans.len();
            let entries = if n == 1 { "entry is" } else { "entries are" };
            // Stopping: no new handler starts (see `started`), so none is promised.
            let next = match shared.stop.is_requested() {
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
        }
        drop(state);
        for tx in orphans {
            let _ = tx.send(Outcome::Died);
        }
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

    /// One line from handler generation `generation`; true if it is a well-formed answer
    /// that settled an entry. A line that cannot be read fails an entry (see
    /// [`unreadable`](Self::unreadable)); an unknown verdict fails the entry it names; an
    /// answer for no outstanding entry is ignored. Each is told on stderr (rate-limited).
    fn answer(&self, shared: &Shared, line: &[u8], generation: u64) -> bool {
        let text = String::from_utf8_lossy(line);
        let text = text.trim_end_matches(['\n', '\r']);
        if text.trim().is_empty() {
            return false;
        }
        // Read as an answer at once (the usual case, at no more cost than before); only a line
        // that is not one is looked at again, to say why.
        let Ok(answer) = serde_json::from_str::<Answer>(text) else {
            self.unreadable(shared, text, why_not(text), generation);
            return false;
        };
        let shown: String = text.chars().take(200).collect();
        let verdict = match answer.verdict.as_ref().and_then(serde_json::Value::as_str) {
            Some("ack") => Ok(Verdict::Ack),
            Some("retry") => match &answer.retry_after_ms {
                None => Ok(Verdict::Retry),
                // A whole number of ms (the core takes more than 365 days as 365 days).
                Some(ms) => {
                    ms.as_u64().map(|ms| Verdict::RetryAfter(Duration::from_millis(ms))).ok_or_else(|| {
                        format!("a \"retry_after_ms\" that is not a whole number of milliseconds ({ms})")
                    })
                }
            },
            // A wait asked with another verdict is a mistake worth failing for, not dropping.
            Some(_) if answer.retry_after_ms.is_some() => {
                Err("a \"retry_after_ms\" with a verdict other than \"retry\"".to_string())
            }
            Some("dead-letter") if shared.dead_letter => Ok(Verdict::DeadLetter),
            // Without a dead-letter stream it is a failure, as --exec's 65 is.
            Some("dead-letter") => Ok(Verdict::Retry),
            Some(_) => Err(format!(
                "an unknown verdict {}",
                answer.verdict.as_ref().map(ToString::to_string).unwrap_or_default()
            )),
            None if answer.verdict.is_some() => Err("a \"verdict\" that is not a string".to_string()),
            None => Err("no \"verdict\"".to_string()),
        };
        // Writes ride only with an ack, and are read whole before anything is sent: a bad
        // one fails the entry (it stays pending), nothing of it written.
        let verdict = match (verdict, &answer.emit, &answer.writes) {
            (Err(why), ..) => Err(why),
            (Ok(verdict), None, None) => Ok(verdict),
            (Ok(verdict), ..) if verdict != Verdict::Ack => {
                let why = "\"emit\"/\"writes\" go with \"verdict\": \"ack\"";
                shared.screen.tell(format_args!(
                    "pelican: --pipe: entry {}: {why}; the entry failed, nothing written",
                    answer.id
                ));
                Ok(Verdict::Retry)
            }
            (Ok(_), emit, writes) => match super::emit::from_answer(emit.as_ref(), writes.as_ref()) {
                Ok(writes) => Ok(Verdict::Commit(writes)),
                Err(why) => {
                    shared.screen.tell(format_args!(
                        "pelican: --pipe: entry {}: {why}; the entry failed, nothing written",
                        answer.id
                    ));
                    Ok(Verdict::Retry)
                }
            },
        };
        let mut waiting = lock(&self.waiting);
        let key = match &answer.stream {
            Some(stream) => Some((serde_json::to_string(stream).unwrap_or_default(), answer.id.clone())),
            // One stream (or the id says which): the outstanding entry with this id.
            None => {
                let mut found = waiting.keys().filter(|(_, id)| *id == answer.id);
                match (found.next(), found.next()) {
                    (Some(key), None) => Some(key.clone()),
                    (Some(_), Some(_)) => {
                        drop(waiting);
                        self.tell_bad(shared, format_args!(
                            "pelican: --pipe: an answer without \"stream\" for an id outstanding on several streams, ignored: {shown}"
                        ));
                        return false;
                    }
                    _ => None,
                }
            }
        };
        let found = key.and_then(|k| waiting.remove(&k));
        drop(waiting);
        match (found, verdict) {
            (Some(waiter), Ok(verdict)) => {
                let _ = waiter.tx.send(Outcome::Verdict(verdict));
                true
            }
            (Some(waiter), Err(why)) => {
                // The entry it names fails: ignored, the line would leave it in hand for good.
                let _ = waiter.tx.send(Outcome::Verdict(Verdict::Retry));
                self.tell_bad(shared, format_args!(
                    "pelican: --pipe: {} failed and stays pending: its answer has {why}; expected {EXPECTED}; the line: {shown}",
                    answer.id
                ));
                false
            }
            (None, verdict) => {
                let also = verdict.err().map(|why| format!(" (and with {why})")).unwrap_or_default();
                self.tell_bad(
                    shared,
                    format_args!(
                        "pelican: --pipe: an answer for no outstanding entry{also}, ignored: {shown}"
                    ),
                );
                false
            }
        }
    }

    /// A line from handler generation `generation` that cannot be read as an answer (`why`
    /// not): it fails the entry [`blame`] picks, told with the line. With nothing outstanding
    /// it is told and ignored.
    fn unreadable(&self, shared: &Shared, text: &str, why: &str, generation: u64) {
        let shown: String = text.trim_end().chars().take(200).collect();
        let more = if text.chars().nth(200).is_some() { "…" } else { "" };
        let failed = {
            let mut waiting = lock(&self.waiting);
            let picked = blame(&waiting, text, generation);
            picked.and_then(|(key, how)| Some((waiting.remove(&key)?, key, how)))
        };
        let Some((waiter, (stream, id), how)) = failed else {
            self.tell_bad(shared, format_args!(
                "pelican: --pipe: not an answer: {why}; expected {EXPECTED}. No entry is outstanding to fail for it; the line: {shown}{more}"
            ));
            return;
        };
        let _ = waiter.tx.send(Outcome::Verdict(Verdict::Retry));
        let of = if shared.several { format!(" of stream {stream}") } else { String::new() };
        self.tell_bad(shared, format_args!(
            "pelican: --pipe: not an answer: {why}; expected {EXPECTED}. {id}{of} failed for it ({how}) and stays pending; the line: {shown}{more}"
        ));
    }

    /// The end of the run (every entry settled): closes the handler's stdin, gives it
    /// [`EXIT_GRACE`] to exit, then SIGTERM, then SIGKILL.
    pub fn finish(&self) {
        let reader = {
            let mut state = lock(&self.state);
            state.finishing = true;
            state.running.take().and_then(|r| r.reader) // dropping stdin closes it
        };
        let Some(reader) = reader else { return };
        for signal in [None, Some(Signal::TERM), Some(Signal::KILL)] {
            if let (Some(signal), Some(pid)) = (signal, self.pid().and_then(|p| Pid::from_raw(p as i32))) {
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
}

/// What an answer looks like, for the lines that tell a bad one.
const EXPECTED: &str = r#"{"id": "…", "verdict": "ack"|"retry"|"dead-letter"} on one line"#;

/// What a line written with single quotes is told.
const SINGLE_QUOTES: &str =
    "not JSON (single quotes: JSON strings take double quotes, as json.dumps writes them)";

/// Why `text` is not an answer (`{"id": "…", …}`), in words for the handler's author.
fn why_not(text: &str) -> &'static str {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(text) else {
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

/// The outstanding entry an unreadable `line` from handler generation `generation` fails,
/// and why that one: an entry written to that handler whose id the line names (a Python
/// dict printed with single quotes still holds it; the oldest of those, if it names
/// several), else the only one written to it, else the oldest written to it. `None`:
/// nothing outstanding there.
fn blame(waiting: &HashMap<Key, Waiter>, line: &str, generation: u64) -> Option<(Key, String)> {
    let mut theirs: Vec<(&Key, &Waiter)> =
        waiting.iter().filter(|(_, w)| w.generation == generation).collect();
    theirs.sort_by_key(|(_, w)| w.written);
    let named = theirs.iter().find(|((_, id), _)| names(line, id));
    let (how, (key, _)) = match (named, &theirs[..]) {
        (Some(named), _) => ("named in the line".to_string(), named),
        (None, []) => return None,
        (None, [only]) => ("the only entry outstanding".to_string(), only),
        (None, [oldest, ..]) => (format!("the oldest of {} outstanding", theirs.len()), oldest),
    };
    Some(((*key).clone(), how))
}

/// Whether `line` holds `id` as a whole (not as part of a longer id: `1-0` is not in `11-0`).
fn names(line: &str, id: &str) -> bool {
    let part = |c: Option<char>| c.is_some_and(|c| c.is_ascii_digit() || c == '-');
    !id.is_empty()
        && line.match_indices(id).any(|(at, _)| {
            !part(line[..at].chars().next_back()) && !part(line[at + id.len()..].chars().next())
        })
}

/// Reads one line (its newline kept) into `line`, keeping at most [`MAX_LINE`] bytes of it:
/// `None` at the end of the output, `Some(false)` for a longer line (the rest of it skipped),
/// so a handler writing without newlines cannot grow pelican's memory without end.
fn next_line(from: &mut impl BufRead, line: &mut Vec<u8>) -> std::io::Result<Option<bool>> {
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
        let room = MAX_LINE.saturating_sub(line.len());
        whole &= chunk.len() <= room;
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let used = chunk.len();
        from.consume(used);
        if end.is_some() {
            return Ok(Some(whole));
        }
    }
}

/// An entry's line for the handler: what `consume` prints, with its delivery count and
/// where it came from.
fn line(stream: &[u8], entry: &Entry) -> String {
    json::pipe_line(stream, entry, entry.source.as_str())
}

/// A stream as the lines write it (a JSON string, or `{"base64":…}`).
fn stream_key(stream: &[u8]) -> String {
    serde_json::to_string(&json::Bytes(stream)).unwrap_or_default()
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::{blame, names, next_line, why_not, Waiter, MAX_LINE};
    use std::collections::HashMap;

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
        let mut waiting = HashMap::new();
        let mut add = |id: &str, generation, written| {
            let (tx, _) = std::sync::mpsc::channel();
            waiting.insert(("\"s\"".to_string(), id.to_string()), Waiter { generation, written, tx });
        };
        add("5-0", 2, 7);
        add("3-0", 2, 9);
        add("1-0", 1, 1); // written to a handler that died since
        let blamed =
            |line: &str, generation| blame(&waiting, line, generation).map(|((_, id), how)| (id, how));
        assert_eq!(blamed("{'id': '3-0'}", 2), Some(("3-0".into(), "named in the line".into())));
        assert_eq!(
            blamed("{\"verdict\":\"ack\"}", 2),
            Some(("5-0".into(), "the oldest of 2 outstanding".into()))
        );
        assert_eq!(blamed("oops", 1), Some(("1-0".into(), "the only entry outstanding".into())));
        assert_eq!(blamed("oops", 3), None);
    }

    fn lines(bytes: &[u8]) -> Vec<(usize, bool)> {
        // A small buffer: lines arrive in several pieces.
        let mut from = std::io::BufReader::with_capacity(7, bytes);
        let mut line = Vec::new();
        std::iter::from_fn(|| next_line(&mut from, &mut line).unwrap().map(|whole| (line.len(), whole)))
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
