//! The blocking common case: one consumer on its own `Poll`, until stopped or failed.

use std::cell::Cell;
use std::io;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use mio::{Events, Poll, Token, Waker};
use pelican::{Config, Consumer, Entry, IntoEndpoint, Notice, Stats, Verdict};

use crate::driver::{Driver, Status};
use crate::error::RunError;
use crate::pool::{self, Dispatch, Outcome, Panicked, Pool};
use crate::resolve::endpoint;
use crate::stats::{Publisher, StatsHandle};
use crate::stop::StopHandle;
use crate::stream_set::{Changes, StreamSet};
#[cfg(feature = "tls")]
use crate::tls::Tls;

const CONSUMER: Token = Token(0);
const WAKER: Token = Token(1);

/// Consumes `config`'s stream from the server at `addr` (`"host:port"`, a `SocketAddr`,
/// [`Sentinels`](pelican::Sentinels)…: see [`Runner::new`]) on the calling thread, handing each
/// entry to `handler`, reconnecting after the consumer's backoff whenever the connection is
/// lost. Runs until stopped (see [`Runner`] for a [`StopHandle`]) or until the consumer
/// fails for good; returns the consumer's counters when stopped.
///
/// ```no_run
/// use pelican::{Config, Verdict};
///
/// let config = Config::new("orders", "billing", "worker-1").create_group("$");
/// let stats = pelican_mio::run("127.0.0.1:6379", config, |entry| {
///     println!("{:?}", entry.id());
///     Verdict::Ack
/// })?;
/// # Ok::<(), pelican_mio::RunError>(())
/// ```
pub fn run(
    addr: impl IntoEndpoint,
    config: Config,
    handler: impl FnMut(&Entry) -> Verdict,
) -> Result<Stats, RunError> {
    Runner::new(addr, config)?.run(handler)
}

/// A consumer on its own `Poll`, ready to [`run`](Runner::run) on the calling thread; hand
/// out [`StopHandle`]s before it starts.
///
/// ```no_run
/// use std::time::Duration;
/// use pelican::{Config, Verdict};
/// use pelican_mio::Runner;
///
/// let runner = Runner::new("127.0.0.1:6379", Config::new("orders", "billing", "worker-1"))?;
/// let stop = runner.stop_handle();
/// std::thread::spawn(move || {
///     std::thread::sleep(Duration::from_secs(60));
///     stop.stop();
/// });
/// let stats = runner.run(|_entry| Verdict::Ack)?;
/// println!("acked {}", stats.acked);
/// # Ok::<(), pelican_mio::RunError>(())
/// ```
pub struct Runner {
    poll: Poll,
    driver: Driver,
    stop: StopHandle,
    observer: Option<Observer>,
    stats: Publisher,
    changes: Arc<Changes>,
}

/// What [`Runner::on_notice`] was given.
type Observer = Box<dyn FnMut(&Notice) + Send>;

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("driver", &self.driver)
            .field("stop", &self.stop)
            .finish_non_exhaustive()
    }
}

impl Runner {
    /// Validates `config` and `addr`, and creates the `Poll`. Connects only in
    /// [`run`](Self::run).
    ///
    /// `addr` is where the server is: `"host:port"` text, a `(host, port)` pair or a
    /// `SocketAddr` — a host name is looked up again at every connect (a failed connect moves
    /// on to the next address it resolves to), so a name that a failover moves is followed;
    /// it must resolve now, or this fails with [`RunError::Resolve`] — or
    /// [`Sentinels`](pelican::Sentinels), to consume from the master they name and follow it
    /// through failovers:
    ///
    /// ```no_run
    /// use pelican::{Config, HostPort, Sentinels};
    ///
    /// let sentinels = Sentinels::new("mymaster", ["10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"]
    ///     .map(|s| s.parse::<HostPort>().unwrap()));
    /// let runner = pelican_mio::Runner::new(sentinels, Config::new("orders", "billing", "worker-1"))?;
    /// # Ok::<(), pelican_mio::RunError>(())
    /// ```
    pub fn new(addr: impl IntoEndpoint, config: Config) -> Result<Runner, RunError> {
        let consumer = Consumer::new(config).map_err(RunError::Config)?;
        Runner::with_driver(Driver::new(endpoint(addr)?, consumer, CONSUMER))
    }

    /// Connects over TLS, checking that the server's certificate names `host` (the host
    /// name the address came from, or an IP address checked as one). A certificate or
    /// handshake failure ends [`run`](Self::run) with [`RunError::Tls`].
    ///
    /// ```no_run
    /// use pelican::Config;
    /// use pelican_tls::TlsConfig;
    ///
    /// let tls = TlsConfig::new().ca_file("ca.pem").build()?;
    /// let runner = pelican_mio::Runner::new("redis.example.com:6380", Config::new("s", "g", "c1"))?
    ///     .tls(tls, "redis.example.com");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "tls")]
    #[must_use]
    pub fn tls(mut self, tls: Tls, host: impl Into<String>) -> Runner {
        self.driver = self.driver.tls(tls, host);
        self
    }

    /// Adds nodes to try in turn after a connect to the endpoint's node failed: a cluster's
    /// other nodes (see [`Driver::fallbacks`]).
    #[must_use]
    pub fn fallbacks(mut self, nodes: impl IntoIterator<Item = pelican::HostPort>) -> Runner {
        self.driver = self.driver.fallbacks(nodes);
        self
    }

    /// [`fallbacks`](Self::fallbacks), by address.
    #[must_use]
    pub fn fallback_addrs(mut self, addrs: impl IntoIterator<Item = std::net::SocketAddr>) -> Runner {
        self.driver = self.driver.fallback_addrs(addrs);
        self
    }

    /// Looks host names up with `lookup` instead of the system's resolver (see
    /// [`Driver::resolve_with`]).
    #[must_use]
    pub fn resolve_with(
        mut self,
        lookup: impl Fn(&str, u16) -> io::Result<Vec<std::net::SocketAddr>> + Send + Sync + 'static,
    ) -> Runner {
        self.driver = self.driver.resolve_with(lookup);
        self
    }

    /// Sets how long a TCP connect may take before it counts as a failed attempt (default
    /// [`DEFAULT_CONNECT_TIMEOUT`](crate::DEFAULT_CONNECT_TIMEOUT)).
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Runner {
        self.driver = self.driver.connect_timeout(timeout);
        self
    }

    fn with_driver(driver: Driver) -> Result<Runner, RunError> {
        let poll = Poll::new().map_err(RunError::Io)?;
        let waker = Waker::new(poll.registry(), WAKER).map_err(RunError::Io)?;
        let stop = StopHandle::new(waker);
        let changes = Arc::new(Changes::new(driver.consumer()));
        Ok(Runner { poll, driver, stop, observer: None, stats: Publisher::default(), changes })
    }

    /// Calls `observer` with each [`Notice`] (connections, reclaims, leases lost, dead
    /// letters, smaller reads, health) as it happens, on the running thread.
    #[must_use]
    pub fn on_notice(mut self, observer: impl FnMut(&Notice) + Send + 'static) -> Runner {
        self.observer = Some(Box::new(observer));
        self
    }

    /// A handle that stops [`run`](Self::run) from any thread.
    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    /// A handle that adds streams to the running consumer and removes them, from any thread
    /// (see [`Config::streams`](pelican::Config::streams)).
    pub fn stream_set(&self) -> StreamSet {
        StreamSet::new(&self.changes, self.stop.clone())
    }

    /// A handle that reads the consumer's counters, the entries in hand and buffered and
    /// whether it is connected while [`run`](Self::run) or [`run_pool`](Self::run_pool)
    /// runs, from any thread; after the run, what it ended with.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use pelican::{Config, Verdict};
    ///
    /// let runner = pelican_mio::Runner::new("127.0.0.1:6379", Config::new("orders", "billing", "w1"))?;
    /// let stats = runner.stats_handle();
    /// std::thread::spawn(move || loop {
    ///     std::thread::sleep(Duration::from_secs(10));
    ///     let now = stats.get();
    ///     println!("acked {}, {} in hand, connected: {}", now.stats.acked, now.in_hand, now.connected);
    /// });
    /// runner.run(|_entry| Verdict::Ack)?;
    /// # Ok::<(), pelican_mio::RunError>(())
    /// ```
    pub fn stats_handle(&self) -> StatsHandle {
        self.stats.handle()
    }

    /// The consumer, e.g. for its [`config`](Consumer::config).
    pub fn consumer(&self) -> &Consumer {
        self.driver.consumer()
    }

    /// Runs until stopped through a [`StopHandle`] (returning the consumer's counters) or
    /// until the consumer or TLS fails for good ([`RunError::Consumer`], [`RunError::Tls`]).
    /// Lost connections and errors a reconnect can fix are handled inside, with the
    /// consumer's backoff.
    ///
    /// The handler runs on this thread, one entry at a time (whatever
    /// [`Config::concurrency`](pelican::Config::concurrency) says), with no thread or channel
    /// in between: the fastest way through entries that are handled quickly. Nothing else
    /// happens on the connection while it runs, so a handler running longer than `min_idle`
    /// can lose its entry to a peer, which handles it too (its `XACK` then counts 0:
    /// [`Stats::lost_to_peer`]). The entries waiting behind it are renewed before they are
    /// handed out, and reads shrink to what the handlers get through well within the lease.
    /// For handlers that wait on I/O or may run that long, use
    /// [`run_pool`](Self::run_pool).
    ///
    /// A handler that panics does not unwind through `run`: the panic is caught, its entry
    /// is left pending (settled [`Verdict::Retry`], so released at once on Redis 8.8+ unless
    /// [`Config::on_retry`](pelican::Config::on_retry) says otherwise), the consumer stops as
    /// for a stop (the acks earned before are sent and confirmed) and `run` returns
    /// [`RunError::HandlerPanicked`] naming the entry. The default panic hook still prints
    /// the panic.
    pub fn run(mut self, mut handler: impl FnMut(&Entry) -> Verdict) -> Result<Stats, RunError> {
        let mut events = Events::with_capacity(8);
        let flags = self.stop.flags();
        let mut observer = self.observer.take();
        let mut observe = |notice: Notice| {
            if let Some(observer) = observer.as_mut() {
                observer(&notice);
            }
        };
        // The first panic; the stop it calls for is passed on before its entry is settled.
        let panicked: Cell<Option<Panicked>> = Cell::new(None);
        let stopping = Cell::new(false);
        let mut hand = |entry: Entry| {
            Some(match pool::handle(&mut handler, &entry) {
                Ok(verdict) => verdict,
                Err(message) => {
                    // Retry, not left in hand: the stop waits for the entries in hand to be
                    // settled, and Retry leaves it pending without an ack.
                    if !stopping.replace(true) {
                        panicked.set(Some(Panicked::new(&entry, message)));
                    }
                    Verdict::Retry
                }
            })
        };
        let changes = &self.changes;
        let mut requests = |consumer: &mut Consumer| {
            changes.apply(consumer);
            flags.apply(consumer);
            if stopping.get() {
                consumer.stop();
            }
        };
        loop {
            let status =
                self.driver.drive_until(self.poll.registry(), &mut hand, &mut observe, &mut requests);
            self.stats.publish(self.driver.consumer());
            if status? == Status::Stopped {
                return finished(&self.driver, panicked.take());
            }
            wait(&mut self.poll, &mut events, earliest(self.driver.next_deadline(), flags.deadline()))?;
        }
    }

    /// Runs like [`run`](Self::run), but the handler runs on a pool of
    /// [`Config::concurrency`](pelican::Config::concurrency) worker threads (one, by
    /// default), up to that many entries at once, while this thread drives the connection
    /// through [`Driver::drive_deferred`]: acks go out within
    /// [`Config::ack_delay`](pelican::Config::ack_delay) and the leases of the entries being
    /// handled (and of those waiting) are renewed while the handlers run, so a handler
    /// running longer than `min_idle` keeps its entry, which no peer takes.
    ///
    /// Use it for handlers that wait on I/O (a database, an HTTP call: several wait at once)
    /// or may run long; with the default concurrency of 1 it handles one entry at a time, as
    /// `run` does, but keeps the entry leased during a slow handler. `run` is the faster of
    /// the two for quick handlers: it hands nothing between threads.
    ///
    /// The workers are started with [`std::thread::scope`], once for the whole run (not one
    /// per entry), so the handler may borrow the caller's state; it takes `&Entry` and must be
    /// `Sync` (shared by the workers), e.g. a closure over a `Mutex` or atomics. Entries go
    /// to the workers over a channel and come back with their verdicts over another, each
    /// waking this thread's `Poll`. The entries in hand are settled by their ids, in the
    /// order they finish; with [`Config::order_by`](pelican::Config::order_by) no two of one
    /// key are in hand at once, so each key's entries are handled one after the other, in
    /// order.
    ///
    /// Through a [`StopHandle`]: [`stop`](StopHandle::stop) hands out nothing more, lets
    /// the entries in hand finish and settles them, confirms the earned acks, then returns;
    /// [`abandon`](StopHandle::abandon) gives up the entries in hand (their verdicts are not
    /// sent: they stay pending, to be delivered again) and the acks not yet confirmed, and
    /// returns once the handlers still running have returned (they cannot be interrupted).
    /// However it ends (a stop, an abandon, a fatal error), `run_pool` joins its workers
    /// before it returns, and an entry queued for a worker but not yet started is not
    /// handled: it stays pending.
    ///
    /// A handler that panics is caught on its worker: its entry is left pending (settled
    /// [`Verdict::Retry`], as `Config::on_retry` says), the consumer stops as for a stop (the other entries in hand
    /// finish and are settled, earned acks are confirmed), and `run_pool` returns
    /// [`RunError::HandlerPanicked`] naming the entry (the first one, if several panic).
    ///
    /// ```no_run
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use pelican::{Config, Verdict};
    /// use pelican_mio::Runner;
    ///
    /// let config = Config::new("orders", "billing", "worker-1").concurrency(8);
    /// let charged = AtomicU64::new(0); // borrowed by the handler: no Arc needed
    /// let stats = Runner::new("127.0.0.1:6379", config)?.run_pool(|entry| {
    ///     // e.g. a blocking HTTP call; up to 8 run at once
    ///     charged.fetch_add(1, Ordering::Relaxed);
    ///     Verdict::Ack
    /// })?;
    /// println!("{} charged, {stats:?}", charged.load(Ordering::Relaxed));
    /// # Ok::<(), pelican_mio::RunError>(())
    /// ```
    pub fn run_pool(self, handler: impl Fn(&Entry) -> Verdict + Sync) -> Result<Stats, RunError> {
        let Runner { mut poll, mut driver, stop, observer, mut stats, changes } = self;
        // `concurrency` is each stream's (streams added later share these workers).
        let config = driver.consumer().config();
        let workers = config.concurrency.max(1).saturating_mul(1 + config.more_streams.len() as u32);
        let workers = workers.min(config.most_in_hand.unwrap_or(u32::MAX));
        let (to_workers, queue) = mpsc::channel();
        let (done, verdicts) = mpsc::channel();
        let pool = Pool::new(queue);
        let (pool, stop, handler) = (&pool, &stop, &handler);
        thread::scope(|scope| {
            // Dropped on every way out of this closure, which ends the workers (see Dispatch).
            let dispatch = pool.dispatch(to_workers);
            pool.start(scope, workers, handler, &done, || stop.wake()).map_err(RunError::Io)?;
            drive_pool(&mut poll, &mut driver, (stop, &changes), observer, &mut stats, &dispatch, &verdicts)
        })
    }
}

/// [`Runner::run_pool`]'s driving loop: settles what the workers finished, drives, waits.
fn drive_pool(
    poll: &mut Poll,
    driver: &mut Driver,
    (stop, changes): (&StopHandle, &Changes),
    mut observer: Option<Observer>,
    stats: &mut Publisher,
    dispatch: &Dispatch<'_, Entry>,
    verdicts: &mpsc::Receiver<(Entry, Outcome)>,
) -> Result<Stats, RunError> {
    let mut events = Events::with_capacity(8);
    let flags = stop.flags();
    let mut observe = |notice: Notice| {
        if let Some(observer) = observer.as_mut() {
            observer(&notice);
        }
    };
    let mut panicked: Option<Panicked> = None;
    loop {
        // Settled before driving: each settle may let the next entry out, and a panic's
        // stop must come before any more are handed out.
        for (entry, outcome) in verdicts.try_iter() {
            let verdict = match outcome {
                Ok(verdict) => verdict,
                Err(message) => {
                    // As for a stop: nothing more handed out, the others finish. Retry, not
                    // left in hand: the stop waits for the entries in hand to be settled,
                    // and Retry leaves it pending without an ack.
                    driver.stop();
                    panicked.get_or_insert_with(|| Panicked::new(&entry, message));
                    Verdict::Retry
                }
            };
            // False after an abandon: the entry was given up, and stays pending.
            let _in_hand = driver.settle_entry(&entry, verdict);
        }
        let status = driver.drive_until(
            poll.registry(),
            &mut |entry| {
                dispatch.send(entry);
                None
            },
            &mut observe,
            &mut |consumer| {
                changes.apply(consumer);
                flags.apply(consumer)
            },
        );
        stats.publish(driver.consumer());
        if status? == Status::Stopped {
            return finished(driver, panicked);
        }
        wait(poll, &mut events, earliest(driver.next_deadline(), flags.deadline()))?;
    }
}

/// The earlier of two deadlines, if any.
pub(crate) fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Waits on `poll` until `next` (the drivers' next deadline, or a stop's) or an event (a
/// socket, the waker). Whatever woke it, driving again does what is due.
pub(crate) fn wait(poll: &mut Poll, events: &mut Events, next: Option<Instant>) -> Result<(), RunError> {
    let timeout = next.map(|at| at.saturating_duration_since(Instant::now()));
    match poll.poll(events, timeout) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
        Err(e) => Err(RunError::Io(e)),
    }
}

/// What a run that stopped returns: the counters, or the handler's panic.
fn finished(driver: &Driver, panicked: Option<Panicked>) -> Result<Stats, RunError> {
    match panicked {
        Some(panicked) => Err(panicked.into()),
        None => Ok(driver.consumer().stats().clone()),
    }
}
