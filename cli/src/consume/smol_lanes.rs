//! The lanes on `pelican-smol`: one `Runner` per lane, each a task on one executor on this
//! thread. Commands block, so each runs on smol's blocking pool while its runner goes on
//! working the connection; entries printed are written on the executor's thread when
//! stdout has room (see [`Handler::handle_here`]), which spares a hop per entry.
//!
//! With `--concurrency N` a runner polls up to N handler futures at once, each awaiting its
//! own command on the pool; the pool is made large enough for every lane's N, and larger as
//! streams found later raise what can be in hand. (Its threads start as commands need them.)

use std::cell::Cell;
use std::num::NonZeroUsize;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use pelican::Verdict;
use pelican_smol::{RunError, Runner, StopHandle, StreamSet};
use smol::{LocalExecutor, Timer};

use super::lane::{
    lane_for, tell_too_many, tell_unjoined, teller, Handlers, Lane, LaneFailure, Net, Outcome, Rescan,
};
use super::pipe::Back;
use super::stop::StopAll;
use crate::failure::Failure;
use crate::server::tls_message;

/// How long a stop may wait on the server before that is told: a stop that is confirmed
/// at once says nothing.
const QUIET_WAIT: Duration = Duration::from_secs(1);

/// smol's blocking pool keeps this many threads at most unless told otherwise.
const POOL_DEFAULT: usize = 500;

/// The most threads smol's blocking pool takes.
const POOL_MAX: usize = 10_000;

/// Runs `lanes` until each has stopped or failed; a lane that fails stops the others.
/// Returns each lane's outcome, in order. `concurrency`: each lane's entries in hand at once.
pub fn run(
    lanes: Vec<Lane>,
    net: &Net,
    stop: &Arc<StopAll>,
    concurrency: u32,
    rescan: Option<Rescan>,
) -> Result<Vec<Outcome>, Failure> {
    let several = lanes.len() > 1;
    let pool = Pool {
        concurrency: concurrency as usize,
        most: lanes.iter().map(|l| l.config.most_in_hand.map_or(usize::MAX, |n| n as usize)).collect(),
        limit: Cell::new(POOL_DEFAULT),
    };
    pool.fit(lanes.iter().map(|lane| &lane.handlers));
    let mut runners = Vec::with_capacity(lanes.len());
    for lane in lanes {
        let runner = runner(&lane, net, several)?;
        runners.push((lane, runner));
    }
    let handles: Vec<StopHandle> = runners.iter().map(|(_, runner)| runner.stop_handle()).collect();
    // The watch of the stop (below) hears of it too; one message is enough.
    let (stopped_tx, stopped_rx) = smol::channel::bounded::<()>(1);
    stop.install(move || {
        handles.iter().for_each(StopHandle::stop);
        let _ = stopped_tx.try_send(());
    });
    if stop.is_requested() {
        stop.stop(); // asked before the handles were installed: pass it on
    }
    let executor = LocalExecutor::new();
    let sets: Vec<(Handlers, StreamSet)> =
        runners.iter().map(|(lane, runner)| (lane.handlers.clone(), runner.stream_set())).collect();
    let rescanning = rescan.map(|rescan| executor.spawn(rescan_lanes(rescan, sets, pool, stop.clone())));
    let lanes: Vec<(Handlers, Rc<Cell<bool>>)> =
        runners.iter().map(|(lane, _)| (lane.handlers.clone(), Rc::new(Cell::new(false)))).collect();
    let tasks: Vec<_> = runners
        .into_iter()
        .zip(&lanes)
        .map(|((lane, runner), (_, done))| executor.spawn(run_lane(lane, runner, stop.clone(), done.clone())))
        .collect();
    let watch = executor.spawn(async move {
        if stopped_rx.recv().await.is_ok() {
            tell_wait(&lanes).await;
        }
    });
    // The executor's heartbeat (`--metrics`' /livez): beaten as long as its tasks let it run.
    let beat = executor.spawn(async {
        loop {
            super::metrics::LOOP.beat();
            Timer::after(super::metrics::TURN).await;
        }
    });
    let outcomes = smol::block_on(executor.run(async {
        let mut outcomes = Vec::with_capacity(tasks.len());
        for task in tasks {
            outcomes.push(task.await);
        }
        outcomes
    }));
    drop((watch, beat));
    drop(rescanning);
    Ok(outcomes)
}

/// smol's blocking pool, sized for the commands that can be in hand.
struct Pool {
    /// `--concurrency`: each stream's.
    concurrency: usize,
    /// Each lane's `--most-in-hand`.
    most: Vec<usize>,
    /// The most threads the pool takes now.
    limit: Cell<usize>,
}

impl Pool {
    /// Raises the pool's limit, if needed, so that every command that can be in hand over
    /// `lanes` (the streams of each, times `--concurrency`, capped by its `--most-in-hand`)
    /// has a thread, with a few more for the rest (DNS, the rescan's `SCAN`).
    fn fit<'a>(&self, lanes: impl Iterator<Item = &'a Handlers>) {
        let in_hand = lanes
            .zip(&self.most)
            .map(|(handlers, most)| handlers.len().saturating_mul(self.concurrency).min(*most));
        let wanted = in_hand.sum::<usize>().saturating_add(16).min(POOL_MAX);
        if wanted > self.limit.get() {
            if let Some(threads) = NonZeroUsize::new(wanted) {
                blocking::set_max_blocking_threads(threads);
                self.limit.set(wanted);
            }
        }
    }
}

/// Looks for new streams every `rescan.every` (each `SCAN` on the blocking pool), and has
/// each join its lane (the pool grown to match); until a stop.
async fn rescan_lanes(rescan: Rescan, lanes: Vec<(Handlers, StreamSet)>, pool: Pool, stop: Arc<StopAll>) {
    let Rescan { look, every, cluster } = rescan;
    let look = Arc::new(std::sync::Mutex::new(look));
    let handlers: Vec<Handlers> = lanes.iter().map(|(handlers, _)| handlers.clone()).collect();
    while !stop.is_requested() {
        Timer::after(every).await;
        let looking = look.clone();
        let found = smol::unblock(move || (looking.lock().unwrap_or_else(|e| e.into_inner()))()).await;
        for handler in found {
            let Some(i) = lane_for(&handlers, cluster, handler.stream_bytes()) else {
                tell_unjoined(&handler, cluster);
                continue;
            };
            let key = bytes::Bytes::copy_from_slice(handler.stream_bytes());
            if lanes[i].0.add(handler.clone())
                && !lanes[i].1.add(key)
                && lanes[i].0.len() > pelican::MAX_STREAMS
            {
                tell_too_many(&handler); // else it is stopping: nothing more is read anyway
            }
        }
        pool.fit(handlers.iter());
    }
}

/// Once stopping: if lanes still run [`QUIET_WAIT`] after the stop with no entry in hand,
/// they wait on the server to confirm their acks (reachable or not: the runner does not
/// say), which may take as long as an outage. Says so once, and how not to wait.
async fn tell_wait(lanes: &[(Handlers, Rc<Cell<bool>>)]) {
    Timer::after(QUIET_WAIT).await;
    loop {
        let running: Vec<&Handlers> =
            lanes.iter().filter(|(_, done)| !done.get()).map(|(handlers, _)| handlers).collect();
        let Some(first) = running.first() else { return };
        if running.iter().any(|handlers| handlers.sum(|h| h.in_hand() as u64) == 0) {
            first.first().shared.screen.tell(format_args!(
                "pelican: stopping: waiting for the server to confirm the acknowledgements earned; \
                 signal again to exit now"
            ));
            return;
        }
        Timer::after(Duration::from_millis(100)).await;
    }
}

/// A lane's runner: its consumer, the URL's addresses, TLS, its notices told.
fn runner(lane: &Lane, net: &Net, several: bool) -> Result<Runner, Failure> {
    let (endpoint, fallbacks) = net.place(&lane.config.stream);
    // Its host is looked up at every connect, this first one included: a name that does not
    // resolve yet is retried like a server that is not up yet.
    let runner = Runner::lazy(endpoint, lane.config.clone())
        .map_err(|e| match e {
            RunError::Config(e) => Failure::Bad(format!("invalid settings: {e}")),
            e => Failure::Failed(e.to_string()),
        })?
        .fallbacks(fallbacks);
    let mut runner = runner.on_notice(teller(lane, several));
    if let Some((tls, host)) = &net.tls {
        runner = runner.tls(tls.clone(), host);
    }
    let stats = runner.stats_handle();
    lane.published.follow(move || stats.get());
    Ok(runner)
}

/// Runs one lane to its end (then sets `done`); a failure stops every other lane. The
/// runner may poll several handler futures at once (`--concurrency`): each awaits its own
/// command on the blocking pool.
async fn run_lane(lane: Lane, runner: Runner, stop: Arc<StopAll>, done: Rc<Cell<bool>>) -> Outcome {
    let handlers = lane.handlers;
    let result = runner
        .run(move |entry| {
            let handler = handlers.of(&entry);
            // `--pipe`: queued now, as the runner hands it out with the others of its read;
            // written once the first of their futures is polled (`kick`): together, as one
            // batch where the handler takes batches. Its verdict comes back on its channel.
            let piped = handlers.pipe().cloned().map(|pipe| {
                let (tx, rx) = smol::channel::bounded(1);
                pipe.queue(handler.clone(), entry.clone(), Back::Task(tx));
                (pipe, rx)
            });
            async move {
                if let Some((pipe, verdict)) = piped {
                    pipe.kick();
                    return verdict.recv().await.unwrap_or(Verdict::Retry);
                }
                match handler.handle_here(&entry) {
                    Some(verdict) => verdict,
                    None => smol::unblock(move || handler.handle(&entry)).await,
                }
            }
        })
        .await;
    done.set(true);
    result.map_err(|e| {
        stop.stop();
        failure(e)
    })
}

/// Why a runner gave up; a TLS failure names the flag that fixes it.
fn failure(e: RunError) -> LaneFailure {
    match e {
        RunError::Tls(e) => LaneFailure { message: tls_message(&e), error: None },
        RunError::Consumer(error) => {
            LaneFailure { message: RunError::Consumer(error.clone()).to_string(), error: Some(error) }
        }
        e => LaneFailure { message: e.to_string(), error: None },
    }
}
