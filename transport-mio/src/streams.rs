//! Many streams in one call: one consumer (and connection) per stream, all on one `Poll` on
//! the calling thread, one handler for all.

use std::cell::Cell;
use std::io;
use std::net::SocketAddr;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mio::{Events, Poll, Token, Waker};
use pelican::{Config, Consumer, Endpoint, Entry, HostPort, IntoEndpoint, Notice, Stats, Verdict};

use crate::cluster::locate_with_masters;
use crate::driver::{Driver, Status, DEFAULT_CONNECT_TIMEOUT};
use crate::error::RunError;
use crate::pool::{self, Outcome, Panicked, Pool};
use crate::resolve::{endpoint, resolve};
use crate::run::{earliest, wait};
use crate::stats::{Publisher, StatsHandle};
use crate::stop::StopHandle;
use crate::tls::Tls;

/// The waker's token; streams get tokens from 0.
const WAKER: Token = Token(usize::MAX);

/// What [`Streams::on_notice`] was given.
type Observer = Box<dyn FnMut(&Bytes, &Notice) + Send>;

/// Each stream's counters when the run ends, in the order of the configurations.
pub type StreamStats = Vec<(Bytes, Stats)>;

/// Several streams consumed in one call: one consumer (and one connection) per
/// [`Config`], all on one `Poll` on the calling thread, one handler for all, which is told
/// each entry's stream. What the lanes of `pelican consume --stream a --stream b` do.
///
/// - [`run`](Self::run) runs the handler inline, one entry at a time across all streams;
///   [`run_pool`](Self::run_pool) on worker threads — as many as the streams'
///   [`Config::concurrency`] added up — each stream's entries in hand up to its own
///   concurrency, leased while they are handled. As [`Runner::run`](crate::Runner::run) and
///   [`Runner::run_pool`](crate::Runner::run_pool), for one stream.
/// - One [`StopHandle`] stops them all ([`stop`](StopHandle::stop),
///   [`stop_within`](StopHandle::stop_within), [`abandon`](StopHandle::abandon)); a
///   [`StatsHandle`] per stream reads each one's counters while they run.
/// - A stream that fails for good, or whose handler panics, stops the others (as a stop:
///   their entries in hand finish, their earned acks are confirmed), and the run returns its
///   error as [`RunError::Stream`], naming it.
/// - In a cluster, give the address of any node: before the streams connect, that node is
///   asked once which master serves each stream ([`locate`](crate::locate), plaintext
///   only), and each stream starts there; a stream that lands elsewhere (over TLS, a slot
///   migrated since) follows the `MOVED` it gets. On a server that is not a cluster node the
///   question costs one short connection.
///
/// The consumer names, as usual, tell the connections apart: several streams under one
/// consumer name are not twins (the default connection name holds the stream); the same
/// stream twice under one consumer name is, and is refused ([`pelican::Error::Twin`]).
///
/// ```no_run
/// use pelican::{Config, Verdict};
/// use pelican_mio::Streams;
///
/// let configs = ["orders", "refunds", "invoices"]
///     .map(|stream| Config::new(stream, "billing", "worker-1").create_group("$"));
/// let streams = Streams::new("127.0.0.1:6379", configs)?;
/// let stop = streams.stop_handle(); // stops every stream
/// let stats = streams.run(|stream, entry| {
///     println!("{}: {:?}", String::from_utf8_lossy(stream), entry.id());
///     Verdict::Ack
/// })?;
/// for (stream, stats) in stats {
///     println!("{}: {} acked", String::from_utf8_lossy(&stream), stats.acked);
/// }
/// # Ok::<(), pelican_mio::RunError>(())
/// ```
pub struct Streams {
    consumers: Vec<Consumer>,
    /// Where every stream connects, unless the node it names is a cluster node that says
    /// which master serves each stream (each then starts there, and tries the others in turn
    /// when its own is gone).
    endpoint: Endpoint,
    tls: Option<(Tls, String)>,
    connect_timeout: Duration,
    poll: Poll,
    stop: StopHandle,
    stats: Vec<Publisher>,
    observer: Option<Observer>,
}

impl std::fmt::Debug for Streams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Streams")
            .field("consumers", &self.consumers)
            .field("endpoint", &self.endpoint)
            .field("stop", &self.stop)
            .finish_non_exhaustive()
    }
}

/// A stream under way: its driver on the poll, and whether it is done (stopped or failed).
struct Lane {
    stream: Bytes,
    driver: Driver,
    stats: Publisher,
    done: bool,
}

/// The first stream that failed or panicked, and how.
struct Ended {
    failed: Option<(usize, RunError)>,
    panicked: Option<(usize, Panicked)>,
}

impl Streams {
    /// Validates each of `configs` (one stream each) and `addr` (as for
    /// [`Runner::new`](crate::Runner::new): any node of a cluster, or
    /// [`Sentinels`](pelican::Sentinels)), and creates the `Poll`. Connects only in
    /// [`run`](Self::run) or [`run_pool`](Self::run_pool).
    pub fn new(
        addr: impl IntoEndpoint,
        configs: impl IntoIterator<Item = Config>,
    ) -> Result<Streams, RunError> {
        let consumers = configs
            .into_iter()
            .map(|config| Consumer::new(config).map_err(RunError::Config))
            .collect::<Result<Vec<_>, _>>()?;
        let endpoint = endpoint(addr)?;
        let poll = Poll::new().map_err(RunError::Io)?;
        let waker = Waker::new(poll.registry(), WAKER).map_err(RunError::Io)?;
        let stats = consumers.iter().map(|_| Publisher::default()).collect();
        Ok(Streams {
            consumers,
            endpoint,
            tls: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            poll,
            stop: StopHandle::new(waker),
            stats,
            observer: None,
        })
    }

    /// Connects every stream over TLS, checking that the server's certificate names `host`
    /// (see [`Runner::tls`](crate::Runner::tls)). In a cluster the streams then start at the
    /// node given and follow `MOVED` to their masters.
    #[cfg(feature = "tls")]
    #[must_use]
    pub fn tls(mut self, tls: Tls, host: impl Into<String>) -> Streams {
        self.tls = Some((tls, host.into()));
        self
    }

    /// Sets how long a TCP connect may take before it counts as a failed attempt (default
    /// [`DEFAULT_CONNECT_TIMEOUT`]); it bounds the question of where each stream is served
    /// too.
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Streams {
        self.connect_timeout = timeout;
        self
    }

    /// Calls `observer` with each stream's [`Notice`]s, and the stream, as they happen, on
    /// the running thread.
    #[must_use]
    pub fn on_notice(mut self, observer: impl FnMut(&Bytes, &Notice) + Send + 'static) -> Streams {
        self.observer = Some(Box::new(observer));
        self
    }

    /// A handle that stops every stream from any thread.
    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    /// A [`StatsHandle`] per stream, in the order of the configurations: each reads its
    /// stream's counters, entries in hand and buffered, and connection while the run runs.
    pub fn stats_handles(&self) -> Vec<StatsHandle> {
        self.stats.iter().map(Publisher::handle).collect()
    }

    /// Runs every stream until stopped through the [`StopHandle`] (returning each stream's
    /// counters, in the order of the configurations), until one fails for good, or until the
    /// handler panics (both [`RunError::Stream`]). The handler runs on this thread, one entry
    /// at a time, with the entry's stream; as [`Runner::run`](crate::Runner::run), it is the
    /// fastest for quick handlers, and nothing else happens on any stream's connection while
    /// it runs.
    pub fn run(
        mut self,
        mut handler: impl FnMut(&Bytes, &Entry) -> Verdict,
    ) -> Result<StreamStats, RunError> {
        let mut lanes = self.lanes();
        let stopping = Cell::new(false);
        let panicked: Cell<Option<(usize, Panicked)>> = Cell::new(None);
        let mut hand = |i: usize, stream: &Bytes, entry: Entry| {
            Some(match pool::handle(|entry| handler(stream, entry), &entry) {
                Ok(verdict) => verdict,
                Err(message) => {
                    // As in `Runner::run`: Retry leaves it pending without holding the stop.
                    if !stopping.replace(true) {
                        panicked.set(Some((i, Panicked::new(&entry, message))));
                    }
                    Verdict::Retry
                }
            })
        };
        let failed = drive_all(
            &mut self.poll,
            &mut lanes,
            &self.stop,
            &mut self.observer,
            &stopping,
            &mut hand,
            &mut |_| {},
        )?;
        finished(&lanes, Ended { failed, panicked: panicked.take() })
    }

    /// Runs like [`run`](Self::run), but the handler runs on a pool of worker threads — as
    /// many as the streams' [`Config::concurrency`] added up — while this thread drives
    /// every connection: each stream has up to its concurrency of entries in hand (in order
    /// per key with [`Config::order_by`](pelican::Config::order_by)), their leases renewed
    /// however long the handlers take, as with [`Runner::run_pool`](crate::Runner::run_pool).
    /// The workers are scoped: the handler may borrow the caller's state, and must be `Sync`.
    pub fn run_pool(
        mut self,
        handler: impl Fn(&Bytes, &Entry) -> Verdict + Sync,
    ) -> Result<StreamStats, RunError> {
        let mut lanes = self.lanes();
        let workers: u32 = lanes.iter().map(|lane| lane.driver.consumer().config().concurrency.max(1)).sum();
        let streams: Vec<Bytes> = lanes.iter().map(|lane| lane.stream.clone()).collect();
        let (to_workers, queue) = mpsc::channel();
        let (done, verdicts) = mpsc::channel::<((usize, Entry), Outcome)>();
        let pool = Pool::new(queue);
        let handler = |(i, entry): &(usize, Entry)| handler(&streams[*i], entry);
        let (pool, stop, handler) = (&pool, &self.stop, &handler);
        let stopping = Cell::new(false);
        let mut panicked = None;
        let failed = thread::scope(|scope| {
            // Dropped on every way out of this closure, which ends the workers.
            let dispatch = pool.dispatch(to_workers);
            pool.start(scope, workers, handler, &done, || stop.wake()).map_err(RunError::Io)?;
            let mut settle = |lanes: &mut [Lane]| {
                for ((i, entry), outcome) in verdicts.try_iter() {
                    let verdict = match outcome {
                        Ok(verdict) => verdict,
                        Err(message) => {
                            // As for a stop, on every stream, before more are handed out.
                            stopping.set(true);
                            lanes.iter_mut().for_each(|lane| lane.driver.stop());
                            panicked.get_or_insert_with(|| (i, Panicked::new(&entry, message)));
                            Verdict::Retry
                        }
                    };
                    // False after an abandon: the entry was given up, and stays pending.
                    let _in_hand = lanes[i].driver.settle_entry(&entry, verdict);
                }
            };
            let mut hand = |i: usize, _: &Bytes, entry: Entry| {
                dispatch.send((i, entry));
                None
            };
            drive_all(&mut self.poll, &mut lanes, stop, &mut self.observer, &stopping, &mut hand, &mut settle)
        })?;
        finished(&lanes, Ended { failed, panicked })
    }

    /// Each stream's lane: its driver, started at the master serving it when the endpoint's
    /// node is a cluster node that says which (the cluster's masters and the endpoint's
    /// node its fallbacks).
    fn lanes(&mut self) -> Vec<Lane> {
        let (homes, nodes) = self.homes();
        let consumers = std::mem::take(&mut self.consumers);
        let stats = std::mem::take(&mut self.stats);
        consumers
            .into_iter()
            .zip(stats)
            .zip(homes)
            .enumerate()
            .map(|(i, ((consumer, stats), home))| {
                let stream = consumer.config().stream.clone();
                let driver = match (home, &self.endpoint) {
                    (Some(home), Endpoint::Node(node)) => Driver::new(home, consumer, Token(i))
                        .fallbacks(std::iter::once(node.clone()).chain(nodes.iter().cloned())),
                    _ => Driver::new(self.endpoint.clone(), consumer, Token(i)),
                }
                .connect_timeout(self.connect_timeout);
                #[cfg(feature = "tls")]
                let driver = match &self.tls {
                    Some((tls, host)) => driver.tls(tls.clone(), host.clone()),
                    None => driver,
                };
                Lane { stream, driver, stats, done: false }
            })
            .collect()
    }

    /// The master serving each stream, as the endpoint's node says (`None` for each: not a
    /// cluster, TLS, Sentinel, no answer), and every master of the cluster.
    fn homes(&self) -> (Vec<Option<SocketAddr>>, Vec<HostPort>) {
        let unknown = (vec![None; self.consumers.len()], Vec::new());
        let Endpoint::Node(node) = &self.endpoint else { return unknown };
        if self.tls.is_some() || self.consumers.is_empty() {
            return unknown;
        }
        let keys: Vec<&[u8]> = self.consumers.iter().map(|c| &c.config().stream[..]).collect();
        for seed in resolve(&node.host, node.port).unwrap_or_default() {
            match locate_with_masters(seed, &keys, self.connect_timeout) {
                Ok(found) => return found,
                // An answer that is not a slot map: not a cluster node (or it wants a
                // password first). The other addresses are the same server.
                Err(e) if e.kind() == io::ErrorKind::InvalidData => break,
                Err(e) => log::debug!("{seed}: where the streams are served: {e}"),
            }
        }
        unknown
    }
}

/// The loop over every stream: settles what the workers finished (`settle`), drives each
/// stream that has an event, is due, or is stopping, handing each entry to `hand` (its
/// verdict, or `None` if settled later), and waits. Returns once every stream is done, with
/// the first that failed for good.
fn drive_all(
    poll: &mut Poll,
    lanes: &mut [Lane],
    stop: &StopHandle,
    observer: &mut Option<Observer>,
    stopping: &Cell<bool>,
    hand: &mut impl FnMut(usize, &Bytes, Entry) -> Option<Verdict>,
    settle: &mut impl FnMut(&mut [Lane]),
) -> Result<Option<(usize, RunError)>, RunError> {
    let mut events = Events::with_capacity(256);
    let mut woken = vec![false; lanes.len()];
    let flags = stop.flags();
    let mut failed = None;
    loop {
        settle(lanes);
        woken.iter_mut().for_each(|w| *w = false);
        for event in events.iter() {
            if let Some(w) = woken.get_mut(event.token().0) {
                *w = true;
            }
        }
        // While stopping, every stream is driven: more often than needed is harmless, and
        // each must hear of the stop.
        let all = stopping.get() || stop.is_requested();
        let now = Instant::now();
        for (i, lane) in lanes.iter_mut().enumerate() {
            let Lane { stream, driver, stats, done } = lane;
            let due = driver.next_deadline().is_some_and(|at| at <= now);
            if *done || !(woken[i] || due || all) {
                continue;
            }
            let status = driver.drive_until(
                poll.registry(),
                &mut |entry| hand(i, stream, entry),
                &mut |notice| {
                    if let Some(observer) = observer.as_mut() {
                        observer(stream, &notice);
                    }
                },
                &mut |consumer| {
                    flags.apply(consumer);
                    if stopping.get() {
                        consumer.stop();
                    }
                },
            );
            stats.publish(driver.consumer());
            match status {
                Ok(Status::Running) => {}
                Ok(Status::Stopped) => *done = true,
                Err(err) => {
                    *done = true;
                    stopping.set(true);
                    failed.get_or_insert((i, RunError::from(err)));
                }
            }
        }
        if lanes.iter().all(|lane| lane.done) {
            return Ok(failed);
        }
        if stopping.get() && !all {
            continue; // a stream failed or panicked just now: the others hear of it at once
        }
        let next =
            lanes.iter().filter(|lane| !lane.done).filter_map(|lane| lane.driver.next_deadline()).min();
        wait(poll, &mut events, earliest(next, flags.deadline()))?;
    }
}

/// What a run returns once every stream is done: each stream's counters, or the first panic
/// or failure, naming its stream.
fn finished(lanes: &[Lane], ended: Ended) -> Result<StreamStats, RunError> {
    let in_stream = |i: usize, error: RunError| RunError::Stream {
        stream: String::from_utf8_lossy(&lanes[i].stream).into_owned(),
        error: Box::new(error),
    };
    if let Some((i, panicked)) = ended.panicked {
        return Err(in_stream(i, panicked.into()));
    }
    if let Some((i, error)) = ended.failed {
        return Err(in_stream(i, error));
    }
    Ok(lanes.iter().map(|lane| (lane.stream.clone(), lane.driver.consumer().stats().clone())).collect())
}
