//! The lanes on `pelican-mio`: one `Driver` per lane, all on one `mio::Poll` on this thread,
//! and per lane a pool of worker threads that run its handler, one entry each at a time.
//!
//! Entries are handed out with [`Driver::drive_mixed`], up to `--concurrency` at once per
//! lane. An entry printed (no `--exec`) while stdout has room for its line is written right
//! there, on this thread, and settled at once (see [`Handler::handle_here`]): no hop to a
//! worker and back, no wake-up of the poll, and a whole read's batch in one drive. Any other
//! entry (a command, a line stdout has no room for) goes to the lane's queue, where an idle
//! worker takes it, and the poll goes on driving every connection meanwhile. So a slow
//! command on one stream (or a stdout nobody reads) holds up no other stream, and its own
//! connection keeps writing earned acks and renewing the lease of the entries in hand,
//! which no peer can then take however long the commands run. A worker sends each verdict
//! back by the entry's id and wakes the poll, which settles it.
//!
//! A lane's workers are started as its entries in hand need them, up to `--concurrency`:
//! as many as the most entries it had in hand at once, so an entry never waits for a worker,
//! and a large `--concurrency` costs no threads it does not use. With `--pipe` there are
//! none: the entries a drive hands out are queued for the handler together (written as one
//! batch where it takes batches), and their verdicts come back from the pipe's reader
//! ([`super::pipe::Returns`]), which wakes the poll once for all a line of answers settled.

use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use bytes::Bytes;

use mio::{Events, Poll, Registry, Token, Waker};
use pelican::{Consumer, Entry, Notice, Verdict};
use pelican_mio::{DriveError, Driver, Status};

use super::handler::Handler;
use super::lane::{
    lane_for, tell_too_many, tell_unjoined, teller, Handlers, Lane, LaneFailure, Net, Outcome, Rescan,
};
use super::metrics::TURN;
use super::pipe::{Back, Pipe, Returns};
use super::published::Publisher;
use super::stop::StopAll;
use crate::failure::Failure;
use crate::server::tls_message;

/// The waker's token; lanes get tokens from 0.
const WAKER: Token = Token(usize::MAX);

/// A verdict from lane `.0`'s worker, on its entry.
type Settled = (usize, Entry, Verdict);

/// Runs `lanes` until each has stopped or failed; a lane that fails stops the others.
/// Returns each lane's outcome, in order, once every worker has finished its entry.
pub fn run(
    lanes: Vec<Lane>,
    net: &Net,
    stop: &Arc<StopAll>,
    rescan: Option<Rescan>,
) -> Result<Vec<Outcome>, Failure> {
    let io_failure = |e: io::Error| Failure::Failed(format!("event loop failed: {e}"));
    let mut poll = Poll::new().map_err(io_failure)?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER).map_err(io_failure)?);
    let wake = waker.clone();
    // A failed wake leaves the stop flag set: the loop sees it at its next wake-up.
    stop.install(move || drop(wake.wake()));
    let (settled_tx, settled) = mpsc::channel();
    let several = lanes.len() > 1;
    let mut running = Vec::with_capacity(lanes.len());
    for (i, lane) in lanes.into_iter().enumerate() {
        running.push(Running::start(i, lane, net, several, &settled_tx, &waker)?);
    }
    let cluster = rescan.as_ref().is_some_and(|r| r.cluster);
    let joins =
        rescan.map(|r| spawn_rescan(r, waker.clone(), stop.clone())).transpose().map_err(io_failure)?;
    let joins = joins.map(|found| (found, cluster));
    let result = drive_all(&mut poll, &mut running, &settled, stop, joins.as_ref()).map_err(io_failure);
    // Workers end when their queue closes, after the entry they hold (a lane that failed
    // may still hold one): wait for them, so every command has finished.
    let outcomes = running.into_iter().map(Running::finish).collect();
    result.map(|()| outcomes)
}

/// The event loop: settles verdicts, drives the lanes that are due, until all are done.
fn drive_all(
    poll: &mut Poll,
    lanes: &mut [Running],
    settled: &Receiver<Settled>,
    stop: &StopAll,
    joins: Option<&(Receiver<Vec<Arc<Handler>>>, bool)>,
) -> io::Result<()> {
    let mut events = Events::with_capacity(256);
    let mut stopping = false;
    // Whether the wait on an unreachable server was told (once).
    let mut told = false;
    loop {
        if !stopping && stop.is_requested() {
            stopping = true;
            lanes.iter_mut().for_each(|lane| lane.driver.stop());
        }
        while let Ok((i, entry, verdict)) = settled.try_recv() {
            let lane = &mut lanes[i];
            lane.outstanding = lane.outstanding.saturating_sub(1);
            lane.driver.settle_entry(&entry, verdict);
        }
        if let Some((joins, cluster)) = joins {
            while let Ok(found) = joins.try_recv() {
                found.into_iter().for_each(|handler| join(lanes, *cluster, handler));
            }
        }
        let mut woken = vec![false; lanes.len()];
        for event in events.iter().filter(|e| e.token() != WAKER) {
            if let Some(flag) = woken.get_mut(event.token().0) {
                *flag = true;
            }
        }
        let now = Instant::now();
        for (lane, woken) in lanes.iter_mut().zip(woken) {
            // While stopping, drive everyone: driving more often than needed is harmless,
            // and a stop may be done at once.
            let due = lane.driver.next_deadline().is_some_and(|at| at <= now);
            if lane.outcome.is_none() && (woken || due || stopping) && lane.drive(poll.registry(), stop) {
                stop.stop();
            }
        }
        if lanes.iter().all(|lane| lane.outcome.is_some()) {
            return Ok(());
        }
        if stopping && !told {
            told = tell_wait(lanes);
        }
        super::metrics::LOOP.beat();
        let next = lanes.iter().filter_map(|lane| lane.driver.next_deadline()).min();
        // Turned at least every TURN, so that the heartbeat tells a stuck loop from an idle one.
        let timeout = next.map_or(TURN, |at| at.saturating_duration_since(Instant::now()).min(TURN));
        match poll.poll(&mut events, Some(timeout)) {
            Err(e) if e.kind() != io::ErrorKind::Interrupted => return Err(e),
            _ => {}
        }
    }
}

/// A stream found since the start joins its lane: its handler, then its consumer.
fn join(lanes: &mut [Running], cluster: bool, handler: Arc<Handler>) {
    let all: Vec<Handlers> = lanes.iter().map(|lane| lane.handlers.clone()).collect();
    let Some(i) = lane_for(&all, cluster, handler.stream_bytes()) else {
        return tell_unjoined(&handler, cluster);
    };
    let lane = &mut lanes[i];
    let key = Bytes::copy_from_slice(handler.stream_bytes());
    if !lane.handlers.add(handler.clone()) {
        return;
    }
    if lane.driver.add_stream(key) {
        let config = lane.driver.consumer().config();
        let cap = config.most_in_hand.map_or(usize::MAX, |n| n as usize);
        lane.most = lane.most.saturating_add(config.concurrency.max(1) as usize).min(cap);
    } else if lane.driver.consumer().streams().count() >= pelican::MAX_STREAMS {
        tell_too_many(&handler); // else it is stopping: nothing more is read anyway
    }
}

/// Looks for new streams every `rescan.every` on a thread of its own (a `SCAN` blocks),
/// sending their handlers and waking the loop; ends at a stop.
fn spawn_rescan(
    mut rescan: Rescan,
    waker: Arc<Waker>,
    stop: Arc<StopAll>,
) -> io::Result<Receiver<Vec<Arc<Handler>>>> {
    let (found_tx, found) = mpsc::channel();
    thread::Builder::new().name("pelican-rescan".into()).spawn(move || loop {
        let next = Instant::now() + rescan.every;
        while let Some(wait) = next.checked_duration_since(Instant::now()).filter(|w| !w.is_zero()) {
            if stop.is_requested() {
                return;
            }
            thread::sleep(wait.min(Duration::from_millis(100)));
        }
        let new = (rescan.look)();
        if !new.is_empty() && (found_tx.send(new).is_err() || waker.wake().is_err()) {
            return;
        }
    })?;
    Ok(found)
}

/// While stopping: if lanes wait for an unreachable server to confirm their acks, which may
/// take as long as the outage, says so (with how many, as far as the counts tell) and how
/// not to wait. True once told.
fn tell_wait(lanes: &[Running]) -> bool {
    let waiting: Vec<&Running> = lanes.iter().filter(|lane| lane.waits_on_server()).collect();
    let Some(first) = waiting.first() else { return false };
    let owed: u64 = waiting.iter().map(|lane| lane.acks_unconfirmed()).sum();
    let what = match owed {
        // Nothing owed: the stop ends once the commands in flight are answered or time out.
        0 => return false,
        1 => "1 acknowledgement".to_string(),
        n => format!("{n} acknowledgements"),
    };
    first.handlers.first().shared.screen.tell(format_args!(
        "pelican: stopping: waiting for the server (unreachable) to confirm {what}; signal again to exit now"
    ));
    true
}

/// A lane under way: its driver on the poll, its workers, its outcome once known.
struct Running {
    /// The lane's index (its token, and its tag on the verdicts).
    i: usize,
    driver: Driver,
    /// Its streams' handlers (its workers hold them too), for their counts.
    handlers: Handlers,
    /// The workers' queue: the entries handed out, each taken by an idle worker.
    work: Option<Sender<Entry>>,
    /// The queue's other end, shared by the workers (each takes one entry at a time).
    queue: Arc<Mutex<Receiver<Entry>>>,
    workers: Vec<JoinHandle<()>>,
    /// Entries sent to the queue whose verdict has not come back yet.
    outstanding: usize,
    /// How many workers the lane may have: its consumer's `concurrency`.
    most: usize,
    /// Where the workers send verdicts, and how they wake the poll.
    settled: Sender<Settled>,
    waker: Arc<Waker>,
    tell: Box<dyn FnMut(&Notice) + Send>,
    outcome: Option<Outcome>,
    /// Publishes the consumer's snapshots for `--metrics` and the overdue watch.
    publisher: Publisher,
    /// `--pipe`: the handler the entries go to instead of the workers, and how their
    /// verdicts come back.
    pipe: Option<(Arc<Pipe>, Arc<dyn Returns>)>,
}

/// How a `--pipe` handler's verdicts come back to lane `.i`: on the channel the workers
/// use, waking the poll.
struct LaneReturns {
    i: usize,
    settled: Sender<Settled>,
    waker: Arc<Waker>,
}

impl Returns for LaneReturns {
    fn settle(&self, entry: Entry, verdict: Verdict) {
        let _ = self.settled.send((self.i, entry, verdict));
    }

    fn wake(&self) {
        let _ = self.waker.wake();
    }
}

impl Running {
    /// Creates lane `i`'s consumer and driver (token `i`) and starts its worker.
    fn start(
        i: usize,
        lane: Lane,
        net: &Net,
        several: bool,
        settled: &Sender<Settled>,
        waker: &Arc<Waker>,
    ) -> Result<Running, Failure> {
        let tell = Box::new(teller(&lane, several));
        let (endpoint, fallbacks) = net.place(&lane.config.stream);
        // `concurrency` is each stream's: the workers are started as they are needed.
        let most = (lane.config.concurrency.max(1) as usize).saturating_mul(lane.handlers.len());
        let most = most.min(lane.config.most_in_hand.map_or(usize::MAX, |n| n as usize));
        let consumer =
            Consumer::new(lane.config).map_err(|e| Failure::Bad(format!("invalid settings: {e}")))?;
        let mut driver = Driver::new(endpoint, consumer, Token(i)).fallbacks(fallbacks);
        if let Some((tls, host)) = &net.tls {
            driver = driver.tls(tls.clone(), host);
        }
        let (work, queue) = mpsc::channel();
        let pipe = lane.handlers.pipe().cloned().map(|pipe| {
            let back: Arc<dyn Returns> =
                Arc::new(LaneReturns { i, settled: settled.clone(), waker: waker.clone() });
            (pipe, back)
        });
        let mut running = Running {
            i,
            driver,
            handlers: lane.handlers,
            work: Some(work),
            queue: Arc::new(Mutex::new(queue)),
            workers: Vec::new(),
            outstanding: 0,
            most,
            settled: settled.clone(),
            waker: waker.clone(),
            tell,
            outcome: None,
            publisher: lane.published.publisher(),
            pipe,
        };
        // The first worker now: a lane that cannot start one cannot run at all. (A pipe's
        // lane has none.)
        if running.pipe.is_none() {
            running
                .add_worker()
                .map_err(|e| Failure::Failed(format!("cannot start a worker thread: {e}")))?;
        }
        Ok(running)
    }

    /// Starts one more worker.
    fn add_worker(&mut self) -> io::Result<()> {
        let worker = spawn_worker(
            format!("pelican-lane-{}-{}", self.i, self.workers.len()),
            self.i,
            self.handlers.clone(),
            self.queue.clone(),
            self.settled.clone(),
            self.waker.clone(),
        )?;
        self.workers.push(worker);
        Ok(())
    }

    /// Whether the lane, stopping, waits on the server with no connection to it: nothing
    /// in hand, and not stopped (with nothing owed, a stop ends without a connection).
    fn waits_on_server(&self) -> bool {
        let consumer = self.driver.consumer();
        self.outcome.is_none() && !consumer.is_connected() && consumer.in_hand().len() == 0
    }

    /// Acks earned by the handler that the server has not counted yet (acked, or found
    /// acked by a peer; a commit answered, whatever its outcome). Deleted entries' acks
    /// count as acked without being earned, so this may fall short, never over.
    fn acks_unconfirmed(&self) -> u64 {
        let s = self.driver.consumer().stats();
        let earned = self.handlers.sum(|h| h.counters.earned.load(Relaxed));
        earned.saturating_sub(
            s.acked + s.lost_to_peer + s.acks_unmatched + s.commits_fenced + s.commits_refused,
        )
    }

    /// One turn of the driver: the entries handed out are printed here if they can be
    /// without blocking, else go to the workers; notices are told. A stop asked meanwhile
    /// is passed on between two entries. Returns true if the lane failed just now (the
    /// others must stop).
    fn drive(&mut self, registry: &Registry, stop: &StopAll) -> bool {
        let mut handed = Vec::new();
        let handlers = &self.handlers;
        let status = self.driver.drive_mixed(
            registry,
            &mut |entry| {
                let handler = handlers.of(&entry);
                let here = caught(&handler, &entry, || handler.handle_here(&entry), Some(Verdict::Retry));
                if here.is_none() {
                    handed.push(entry);
                }
                here
            },
            &mut || stop.is_requested(),
        );
        while let Some(notice) = self.driver.poll_notice() {
            (self.tell)(&notice);
        }
        match &self.pipe {
            Some((pipe, back)) => {
                // Queued together, so that they are written together: one batch.
                let any = !handed.is_empty();
                for entry in handed {
                    self.outstanding += 1;
                    pipe.queue(self.handlers.of(&entry), entry, Back::Lane(back.clone()));
                }
                if any {
                    pipe.kick();
                }
            }
            None => handed.into_iter().for_each(|entry| self.hand(entry)),
        }
        // The lane's entries read and waiting, shown as its first stream's.
        self.handlers.first().watch.set_buffered(self.driver.consumer().buffered());
        self.publisher.publish(self.driver.consumer());
        match status {
            Ok(Status::Stopped) => {
                self.outcome = Some(Ok(self.driver.consumer().stats().clone()));
                false
            }
            Ok(_) => false, // running

            Err(e) => {
                self.outcome = Some(Err(failure(e)));
                true
            }
        }
    }

    /// Puts `entry` on the workers' queue, with one more worker if every one is busy.
    fn hand(&mut self, entry: Entry) {
        self.outstanding += 1;
        if self.outstanding > self.workers.len() && self.workers.len() < self.most {
            if let Err(e) = self.add_worker() {
                // The entry waits for a busy worker to be free: fewer commands at once.
                self.handlers.first().shared.screen.tell(format_args!(
                    "pelican: cannot start another worker thread ({e}); running {} at once",
                    self.workers.len()
                ));
                self.most = self.workers.len();
            }
        }
        let unsent = match &self.work {
            Some(work) => work.send(entry).err().map(|mpsc::SendError(entry)| entry),
            None => Some(entry),
        };
        if let Some(entry) = unsent {
            // Every worker is gone: the entry stays pending, for later.
            self.outstanding -= 1;
            self.driver.settle_entry(&entry, Verdict::Retry);
        }
    }

    /// Closes the workers' queue, waits for them, and gives the outcome.
    fn finish(mut self) -> Outcome {
        self.work = None;
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
        self.outcome.unwrap_or_else(|| {
            Err(LaneFailure {
                message: "the event loop ended before these streams stopped".into(),
                error: None,
            })
        })
    }
}

/// A worker of lane `i`: takes entries from `queue` one at a time until it closes, handles
/// each and sends the verdict back, waking the poll to settle it. A handler that panics
/// (a bug) leaves its entry pending, and the worker goes on.
fn spawn_worker(
    name: String,
    i: usize,
    handlers: Handlers,
    queue: Arc<Mutex<Receiver<Entry>>>,
    settled: Sender<Settled>,
    waker: Arc<Waker>,
) -> io::Result<JoinHandle<()>> {
    thread::Builder::new().name(name).spawn(move || loop {
        // Held while waiting: the other idle workers wait for the lock instead.
        let next = queue.lock().unwrap_or_else(PoisonError::into_inner).recv();
        let Ok(entry) = next else { return };
        let handler = handlers.of(&entry);
        let verdict = caught(&handler, &entry, || handler.handle(&entry), Verdict::Retry);
        if settled.send((i, entry, verdict)).is_err() {
            return;
        }
        let _ = waker.wake();
    })
}

/// What `handle` gives for `entry`, or `panicked` if it panics (a bug): the panic is told,
/// and the entry, given `panicked` (a retry), stays pending.
fn caught<T>(handler: &Handler, entry: &Entry, handle: impl FnOnce() -> T, panicked: T) -> T {
    panic::catch_unwind(AssertUnwindSafe(handle)).unwrap_or_else(|_| {
        let id = String::from_utf8_lossy(entry.id()).into_owned();
        handler.shared.screen.tell(format_args!("pelican: handling {id} failed (a bug); it stays pending"));
        panicked
    })
}

/// Why a driver gave up, worded as the runner's errors are; a TLS failure names the flag
/// that fixes it.
fn failure(e: DriveError) -> LaneFailure {
    match e {
        DriveError::Tls(e) => LaneFailure { message: tls_message(&e), error: None },
        DriveError::Consumer(e) => LaneFailure { message: format!("consumer failed: {e}"), error: Some(e) },
        e => LaneFailure { message: e.to_string(), error: None },
    }
}
