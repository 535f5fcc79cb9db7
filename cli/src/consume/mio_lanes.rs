//! The lanes on `pelican-mio`: one `Driver` per lane, all on one `mio::Poll` on this thread,
//! and one worker thread per lane that runs its handler.
//!
//! Entries are handed out deferred ([`Driver::drive_deferred`]): a lane's entry goes to its
//! worker, and the poll goes on driving every connection meanwhile. So a slow command on
//! one stream holds up no other stream, and its own connection keeps writing earned acks
//! and renewing the lease of the entry in hand, which no peer can then take however long
//! the command runs. The worker sends the verdict back and wakes the poll, which settles it.

use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Instant;

use mio::{Events, Poll, Registry, Token, Waker};
use pelican::{Consumer, Entry, Notice, Verdict};
use pelican_mio::{DriveError, Driver, Status};

use super::handler::{Handler, StopAll};
use super::lane::{teller, Lane, LaneFailure, Net, Outcome};
use crate::args::Failure;
use crate::server::tls_message;

/// The waker's token; lanes get tokens from 0.
const WAKER: Token = Token(usize::MAX);

/// A verdict from lane `.0`'s worker.
type Settled = (usize, bytes::Bytes, Verdict);

/// Runs `lanes` until each has stopped or failed; a lane that fails stops the others.
/// Returns each lane's outcome, in order, once every worker has finished its entry.
pub fn run(lanes: Vec<Lane>, net: &Net, stop: &Arc<StopAll>) -> Result<Vec<Outcome>, Failure> {
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
    let result = drive_all(&mut poll, &mut running, &settled, stop).map_err(io_failure);
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
        while let Ok((i, id, verdict)) = settled.try_recv() {
            lanes[i].driver.settle(&id, verdict);
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
            if lane.outcome.is_none() && (woken || due || stopping) && lane.drive(poll.registry()) {
                stop.stop();
            }
        }
        if lanes.iter().all(|lane| lane.outcome.is_some()) {
            return Ok(());
        }
        if stopping && !told {
            told = tell_wait(lanes);
        }
        let next = lanes.iter().filter_map(|lane| lane.driver.next_deadline()).min();
        let timeout = next.map(|at| at.saturating_duration_since(Instant::now()));
        match poll.poll(&mut events, timeout) {
            Err(e) if e.kind() != io::ErrorKind::Interrupted => return Err(e),
            _ => {}
        }
    }
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
    first.handler.shared.screen.tell(format_args!(
        "pelican: stopping: waiting for the server (unreachable) to confirm {what}; signal again to exit now"
    ));
    true
}

/// A lane under way: its driver on the poll, its worker thread, its outcome once known.
struct Running {
    driver: Driver,
    /// The lane's handler (its worker holds it too), for its counts.
    handler: Arc<Handler>,
    /// The worker's queue (one entry at a time: the driver hands out no other until the
    /// verdict is settled).
    work: Option<Sender<Entry>>,
    worker: Option<JoinHandle<()>>,
    tell: Box<dyn FnMut(&Notice) + Send>,
    outcome: Option<Outcome>,
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
        let tell = Box::new(teller(&lane.handler, several));
        let addrs = net.addrs_for(&lane.config.stream);
        let consumer =
            Consumer::new(lane.config).map_err(|e| Failure::Bad(format!("invalid settings: {e}")))?;
        let mut driver = Driver::new(addrs[0], consumer, Token(i)).fallback_addrs(addrs[1..].to_vec());
        if let Some((tls, host)) = &net.tls {
            driver = driver.tls(tls.clone(), host);
        }
        let (work, queue) = mpsc::channel();
        let handler = lane.handler;
        let worker = spawn_worker(i, handler.clone(), queue, settled.clone(), waker.clone())?;
        Ok(Running { driver, handler, work: Some(work), worker: Some(worker), tell, outcome: None })
    }

    /// Whether the lane, stopping, waits on the server with no connection to it: nothing
    /// in hand, and not stopped (with nothing owed, a stop ends without a connection).
    fn waits_on_server(&self) -> bool {
        let consumer = self.driver.consumer();
        self.outcome.is_none() && !consumer.is_connected() && consumer.in_hand().len() == 0
    }

    /// Acks earned by the handler that the server has not counted yet (acked, or found
    /// acked by a peer). Deleted entries' acks count as acked without being earned, so this
    /// may fall short, never over.
    fn acks_unconfirmed(&self) -> u64 {
        let stats = self.driver.consumer().stats();
        let earned = self.handler.counters.earned.load(Relaxed);
        earned.saturating_sub(stats.acked + stats.lost_to_peer + stats.acks_unmatched)
    }

    /// One turn of the driver: an entry handed out goes to the worker, notices are told.
    /// Returns true if the lane failed just now (the others must stop).
    fn drive(&mut self, registry: &Registry) -> bool {
        let mut handed = None;
        let status = self.driver.drive_deferred(registry, &mut |entry| handed = Some(entry));
        while let Some(notice) = self.driver.poll_notice() {
            (self.tell)(&notice);
        }
        if let Some(entry) = handed {
            let id = entry.id_bytes();
            let sent = self.work.as_ref().is_some_and(|work| work.send(entry).is_ok());
            if !sent {
                // The worker is gone (it panicked): the entry stays pending, for later.
                self.driver.settle(&id, Verdict::Retry);
            }
        }
        match status {
            Ok(Status::Running) => false,
            Ok(Status::Stopped) => {
                self.outcome = Some(Ok(self.driver.consumer().stats().clone()));
                false
            }
            Err(e) => {
                self.outcome = Some(Err(failure(e)));
                true
            }
        }
    }

    /// Closes the worker's queue, waits for it, and gives the outcome.
    fn finish(mut self) -> Outcome {
        self.work = None;
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
        self.outcome.unwrap_or_else(|| {
            Err(LaneFailure {
                message: "the event loop ended before this stream stopped".into(),
                error: None,
            })
        })
    }
}

/// Lane `i`'s worker: handles each entry of `queue` and sends the verdict back, waking the
/// poll to settle it.
fn spawn_worker(
    i: usize,
    handler: Arc<Handler>,
    queue: Receiver<Entry>,
    settled: Sender<Settled>,
    waker: Arc<Waker>,
) -> Result<JoinHandle<()>, Failure> {
    thread::Builder::new()
        .name(format!("pelican-lane-{i}"))
        .spawn(move || {
            for entry in queue {
                let verdict = handler.handle(&entry);
                if settled.send((i, entry.id_bytes(), verdict)).is_err() {
                    return;
                }
                let _ = waker.wake();
            }
        })
        .map_err(|e| Failure::Failed(format!("cannot start a worker thread: {e}")))
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
