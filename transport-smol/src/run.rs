//! One consumer over one `smol::net::TcpStream`, until stopped or failed for good.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use futures_util::stream::FuturesUnordered;
use pelican::locate::{Dial, Found, SentinelAnswer};
use pelican::{
    Config, Consumer, Endpoint, Entry, Event, HostPort, IntoEndpoint, Locator, Notice, Stats, Verdict,
};
use pelican_tls::TlsError;
use smol::future;
use smol::io::{AsyncReadExt, AsyncWriteExt};
use smol::net::TcpStream;
use smol::stream::{Stream, StreamExt};
use smol::Timer;

use crate::conn::{self, Conn, HandshakeError};
use crate::error::RunError;
use crate::handler::{self, Panic};
use crate::resolve::{checked, checked_async, Resolver};
use crate::scout::{self, Scout, ScoutError};
use crate::stats::{Publisher, StatsHandle};
use crate::stop::{Request, StopHandle};
use crate::stream_set::{Changes, StreamSet};
use crate::tls::Tls;

/// Size of one socket read.
const READ_CHUNK: usize = 64 * 1024;

/// Connections in a row that end without a word from the server (a TLS handshake never
/// answered; a plaintext connection reset before any reply) before the runner gives up:
/// such a server speaks the other protocol, and retrying would go on forever.
const QUIET_LIMIT: u32 = 3;

/// How long an abandon's parting write may take: an abandon does not wait on the server.
const PARTING_WRITE: Duration = Duration::from_millis(100);

/// How long a TCP connect (and then a TLS handshake) may take before it counts as failed, unless
/// [`Runner::connect_timeout`] says otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Consumes `config`'s stream from the server at `addr`, handing each entry to the async
/// `handler` and settling it with the verdict it returns, reconnecting after the consumer's
/// backoff whenever the connection is lost. Runs until the consumer fails for good or a
/// handler panics (see [`Runner`] for a [`StopHandle`], and [`Runner::run`] for entries in
/// hand at once and panics).
///
/// `addr` is as for [`Runner::new`]: `"host:port"`, a `SocketAddr`, [`Sentinels`](pelican::Sentinels)….
/// A host name is looked up on smol's blocking-thread pool ([`smol::net::resolve`]), so the
/// executor stays free while DNS answers, and again at every connect.
///
/// ```no_run
/// use pelican::{Config, Verdict};
///
/// let config = Config::new("orders", "billing", "worker-1").create_group("$");
/// let stats = smol::block_on(pelican_smol::run("127.0.0.1:6379", config, |entry| async move {
///     smol::Timer::after(std::time::Duration::from_millis(1)).await; // the handler's own I/O
///     println!("{:?}", entry.id());
///     Verdict::Ack
/// }))?;
/// # Ok::<(), pelican_smol::RunError>(())
/// ```
pub async fn run<H, F>(addr: impl IntoEndpoint, config: Config, handler: H) -> Result<Stats, RunError>
where
    H: FnMut(Entry) -> F,
    F: Future<Output = Verdict>,
{
    Runner::resolve(addr, config).await?.run(handler).await
}

/// A consumer and its server's address, ready to [`run`](Runner::run) as a future on any
/// executor; hand out [`StopHandle`]s before it starts.
///
/// ```no_run
/// use std::time::Duration;
/// use pelican::{Config, Verdict};
/// use pelican_smol::Runner;
///
/// let runner = Runner::new("127.0.0.1:6379", Config::new("orders", "billing", "worker-1"))?;
/// let stop = runner.stop_handle();
/// std::thread::spawn(move || {
///     std::thread::sleep(Duration::from_secs(60));
///     stop.stop();
/// });
/// let stats = smol::block_on(runner.run(|_entry| async { Verdict::Ack }))?;
/// println!("acked {}", stats.acked);
/// # Ok::<(), pelican_smol::RunError>(())
/// ```
pub struct Runner {
    consumer: Consumer,
    /// Where to connect: the endpoint's node (or a cluster's others, after a failed
    /// connect), or the master the sentinels name.
    locator: Locator,
    /// The address of the current connection, or the last one tried.
    peer: Option<SocketAddr>,
    /// Connects that failed in a row: picks the next of a name's addresses.
    attempts: usize,
    /// With Sentinel: a question to a sentinel under way, or the watch kept open.
    scout: Option<Scout>,
    /// Failed connects told to the log so far (each reason once, then every 30 s).
    retell: pelican::retell::Retell,
    /// How host names are looked up.
    resolver: Resolver,
    connect_timeout: Duration,
    stop: StopHandle,
    /// Streams to add or remove, asked through a [`StreamSet`].
    changes: Arc<Changes>,
    /// What the consumer has been told of the stop handle's requests: waits on the handle
    /// wake only for more, so a stop under way does not spin them.
    told: Request,
    observer: Option<Observer>,
    /// The connection, once up.
    link: Option<Conn>,
    buf: Vec<u8>,
    /// TLS, and the host name the server's certificate must carry.
    tls: Option<(Tls, String)>,
    /// Connections in a row that ended without a word from the server (see [`QUIET_LIMIT`]).
    quiet: u32,
    /// Whether the server sent anything on this connection.
    heard: bool,
    /// The host name the current connection was dialled by (for the certificate check).
    tls_name: String,
    /// The first handler panic, which ends the run once the stop it started has.
    panic: Option<Panic>,
    stats: Publisher,
}

/// What [`Runner::on_notice`] was given.
type Observer = Box<dyn FnMut(&Notice) + Send>;

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("consumer", &self.consumer)
            .field("endpoint", self.locator.endpoint())
            .field("stop", &self.stop)
            .finish_non_exhaustive()
    }
}

/// What came first while many handlers ran: one of them finishing (`None`: none was
/// running), or a step of the connection.
enum Next<T> {
    Handled(Option<T>),
    Stepped(Result<(), RunError>),
}

/// What ended a wait on the socket, the consumer's deadline, a stop or the sentinels.
enum Wake {
    Io(io::Result<usize>),
    Timer,
    Stop,
    /// The watch heard something (or was lost).
    Heard(Result<SentinelAnswer, String>),
    /// A question to a sentinel (to open the watch again) was answered, or failed.
    Asked(scout::Asked),
    /// It is time to open a lost watch again.
    Rewatch,
}

impl Runner {
    /// Validates `config` and `addr`. Connects only in [`run`](Self::run).
    ///
    /// `addr` is where the server is: `"host:port"` text, a `(host, port)` pair or a
    /// `SocketAddr` — a host name is looked up again at every connect (a failed connect moves
    /// on to the next address it resolves to), so a name that a failover moves is followed;
    /// it must resolve now (looked up here, blocking), or this fails with
    /// [`RunError::Resolve`] — or [`Sentinels`](pelican::Sentinels), to consume from the
    /// master they name and follow it through failovers (the sentinels are asked over a
    /// connection of their own, kept open to hear `+switch-master`). Inside a task, prefer
    /// [`resolve`](Self::resolve), which does not block the executor.
    ///
    /// ```no_run
    /// use pelican::{Config, HostPort, Sentinels};
    ///
    /// let sentinels = Sentinels::new("mymaster", ["10.0.0.1:26379", "10.0.0.2:26379"]
    ///     .map(|s| s.parse::<HostPort>().unwrap()));
    /// let runner = pelican_smol::Runner::new(sentinels, Config::new("orders", "billing", "worker-1"))?;
    /// # Ok::<(), pelican_smol::RunError>(())
    /// ```
    pub fn new(addr: impl IntoEndpoint, config: Config) -> Result<Runner, RunError> {
        let consumer = Consumer::new(config).map_err(RunError::Config)?;
        Ok(Runner::with_endpoint(consumer, checked(addr)?))
    }

    /// Like [`new`](Self::new), but looks a host name up on smol's blocking-thread pool
    /// ([`smol::net::resolve`]) so that the executor stays free meanwhile.
    pub async fn resolve(addr: impl IntoEndpoint, config: Config) -> Result<Runner, RunError> {
        let consumer = Consumer::new(config).map_err(RunError::Config)?;
        Ok(Runner::with_endpoint(consumer, checked_async(addr).await?))
    }

    /// Like [`new`](Self::new), but a host name is not looked up now: one that does not
    /// resolve yet (a service whose name appears once it is up) is a failed connect,
    /// retried after the consumer's backoff like every later lookup. A `"host:port"` text
    /// that is not one, or sentinels without a single address, still fail here.
    pub fn lazy(addr: impl IntoEndpoint, config: Config) -> Result<Runner, RunError> {
        let consumer = Consumer::new(config).map_err(RunError::Config)?;
        Ok(Runner::with_endpoint(consumer, crate::resolve::endpoint(addr)?))
    }

    pub(crate) fn with_endpoint(mut consumer: Consumer, endpoint: Endpoint) -> Runner {
        // Each runner's jitter its own (unless `Config::seed` names one): a fleet restarted
        // at once does not reconnect in step.
        consumer.reseed(crate::seed::seed());
        let mut locator = Locator::new(endpoint);
        locator.reseed(crate::seed::seed());
        let changes = Arc::new(Changes::new(&consumer));
        Runner {
            consumer,
            locator,
            peer: None,
            attempts: 0,
            scout: None,
            retell: pelican::retell::Retell::new(),
            resolver: Resolver::default(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            stop: StopHandle::new(),
            changes,
            told: Request::Run,
            observer: None,
            link: None,
            buf: vec![0; READ_CHUNK],
            tls: None,
            quiet: 0,
            heard: false,
            panic: None,
            stats: Publisher::default(),
            tls_name: String::new(),
        }
    }

    /// Connects over TLS, checking that the server's certificate names `host` (the host
    /// name the address came from, or an IP address checked as one; a cluster node a
    /// redirect names is checked by the name the redirect gives). With Sentinel, `host` is
    /// not used: each node is checked by the host the sentinels name it by, each sentinel by
    /// its own. A certificate or handshake failure ends [`run`](Self::run) with
    /// [`RunError::Tls`].
    ///
    /// ```no_run
    /// use pelican::Config;
    /// use pelican_tls::TlsConfig;
    ///
    /// let tls = TlsConfig::new().ca_file("ca.pem").build()?;
    /// let runner = pelican_smol::Runner::new("redis.example.com:6380", Config::new("s", "g", "c1"))?
    ///     .tls(tls, "redis.example.com");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "tls")]
    #[must_use]
    pub fn tls(mut self, tls: Tls, host: impl Into<String>) -> Runner {
        self.tls = Some((tls, host.into()));
        self
    }

    /// Adds nodes to try, in turn, after a connect to the endpoint's node failed: a
    /// cluster's other nodes (any of them leads on with `MOVED`), so that a stream whose node
    /// died finds its slot's new master. Not with Sentinel.
    #[must_use]
    pub fn fallbacks(mut self, nodes: impl IntoIterator<Item = HostPort>) -> Runner {
        self.locator.add_fallbacks(nodes);
        self
    }

    /// Looks host names up with `lookup` (on smol's blocking pool) instead of the system's
    /// resolver: for a discovery of your own (a file, a service registry), or a resolver with
    /// a cache and a timeout. It is called at every connect, for the node and for each
    /// sentinel asked; an `Err` or no address is a failed connect, retried after the
    /// consumer's backoff.
    #[must_use]
    pub fn resolve_with(
        mut self,
        lookup: impl Fn(&str, u16) -> io::Result<Vec<SocketAddr>> + Send + Sync + 'static,
    ) -> Runner {
        self.resolver = Resolver::with(lookup);
        self
    }

    /// [`fallbacks`](Self::fallbacks), by address.
    #[must_use]
    pub fn fallback_addrs(self, addrs: impl IntoIterator<Item = SocketAddr>) -> Runner {
        self.fallbacks(addrs.into_iter().map(|a| HostPort::new(a.ip().to_string(), a.port())))
    }

    /// Sets how long a TCP connect may take before it counts as a failed attempt (default
    /// [`DEFAULT_CONNECT_TIMEOUT`]).
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Runner {
        self.connect_timeout = timeout;
        self
    }

    /// Calls `observer` with each [`Notice`] (connections, reclaims, leases lost, dead
    /// letters, smaller reads, health) as it happens, inside [`run`](Self::run).
    #[must_use]
    pub fn on_notice(mut self, observer: impl FnMut(&Notice) + Send + 'static) -> Runner {
        self.observer = Some(Box::new(observer));
        self
    }

    /// A handle that stops [`run`](Self::run) from any task or thread.
    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    /// A handle that adds streams to the running consumer and removes them, from any
    /// thread or task (see [`Config::streams`](pelican::Config::streams)).
    pub fn stream_set(&self) -> StreamSet {
        StreamSet::new(&self.changes, self.stop.clone())
    }

    /// Shares `stop` with this runner: one handle stops every runner given it (the streams
    /// of a [`Streams`](crate::Streams)).
    pub(crate) fn with_stop(mut self, stop: StopHandle) -> Runner {
        self.stop = stop;
        self
    }

    /// Tries `home` first (the master serving the stream, in a cluster), then the endpoint's
    /// node and `nodes` (the cluster's masters) in turn.
    pub(crate) fn lead_to(&mut self, home: SocketAddr, nodes: &[HostPort]) {
        let Endpoint::Node(node) = self.locator.endpoint().clone() else { return };
        self.locator = Locator::new(home.into());
        self.locator.reseed(crate::seed::seed());
        self.locator.add_fallbacks(std::iter::once(node).chain(nodes.iter().cloned()));
    }

    /// A handle that reads the consumer's counters, the entries in hand and buffered and
    /// whether it is connected while [`run`](Self::run) runs, from any task or thread; after
    /// the run, what it ended with.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use pelican::{Config, Verdict};
    ///
    /// let runner = pelican_smol::Runner::new("127.0.0.1:6379", Config::new("orders", "billing", "w1"))?;
    /// let stats = runner.stats_handle();
    /// std::thread::spawn(move || loop {
    ///     std::thread::sleep(Duration::from_secs(10));
    ///     let now = stats.get();
    ///     println!("acked {}, {} in hand, connected: {}", now.stats.acked, now.in_hand, now.connected);
    /// });
    /// smol::block_on(runner.run(|_entry| async { Verdict::Ack }))?;
    /// # Ok::<(), pelican_smol::RunError>(())
    /// ```
    pub fn stats_handle(&self) -> StatsHandle {
        self.stats.handle()
    }

    /// The consumer, e.g. for its [`config`](Consumer::config).
    pub fn consumer(&self) -> &Consumer {
        &self.consumer
    }

    /// Runs until stopped through a [`StopHandle`] (returning the consumer's counters), until
    /// the consumer fails for good ([`RunError::Consumer`]), or until the handler panics
    /// ([`RunError::HandlerPanicked`]). Lost connections and errors a reconnect can fix are
    /// handled inside, with the consumer's backoff.
    ///
    /// Each entry is passed to `handler`, and the future it returns is polled here, inside
    /// `run`, until its verdict settles the entry. Up to
    /// [`Config::concurrency`](pelican::Config::concurrency) of them run at once (by default
    /// one: each entry is handled before the next is handed out; with
    /// [`Config::streams`](pelican::Config::streams), that many of each stream), and with
    /// [`Config::order_by`](pelican::Config::order_by) never two of one key. They are not
    /// spawned, so they need be neither `'static` nor `Send`: they may borrow what the caller
    /// owns, as below.
    ///
    /// While they run, the connection keeps working: earned acks go out within
    /// [`Config::ack_delay`](pelican::Config::ack_delay), and the leases of the entries in
    /// hand (and of those waiting) are renewed, so a peer does not take them however long
    /// they take. A stop requested meanwhile hands out nothing more and waits for them: each
    /// entry is settled, the earned acks are confirmed, then `run` returns. An
    /// [`abandon`](StopHandle::abandon) drops the futures instead. A fatal consumer error
    /// lets them finish (their verdicts go unused: the entries stay pending), then `run`
    /// returns it.
    ///
    /// A panic, calling `handler` or polling its future, is caught: that entry is not acked
    /// (it stays pending, to come again), nothing more is handed out, the other futures
    /// finish and the earned acks are confirmed, as for a stop; then `run` returns
    /// [`RunError::HandlerPanicked`] naming the entry.
    ///
    /// ```no_run
    /// use pelican::{Config, Entry, Verdict};
    /// use pelican_smol::Runner;
    ///
    /// struct Db; // the application's own client
    /// impl Db {
    ///     async fn write(&self, _entry: &Entry) { /* its own I/O */ }
    /// }
    ///
    /// let db = Db;
    /// let config = Config::new("orders", "billing", "worker-1").concurrency(16);
    /// let runner = Runner::new("127.0.0.1:6379", config)?;
    /// let db = &db; // borrowed by every handler future: no `Arc`, no `'static`
    /// let stats = smol::block_on(runner.run(|entry| async move {
    ///     db.write(&entry).await;
    ///     Verdict::Ack
    /// }))?;
    /// # Ok::<(), pelican_smol::RunError>(())
    /// ```
    pub async fn run<H, F>(mut self, handler: H) -> Result<Stats, RunError>
    where
        H: FnMut(Entry) -> F,
        F: Future<Output = Verdict>,
    {
        // Many streams have an entry each in hand at once, at least.
        let config = self.consumer.config();
        let outcome = if config.concurrency > 1 || !config.more_streams.is_empty() {
            self.serve_many(handler).await
        } else {
            self.serve_one(handler).await
        };
        self.part().await;
        self.stats.publish(&self.consumer);
        // A panic ended the run, whatever happened after it.
        let outcome = match self.panic.take() {
            Some(Panic { id, message }) => {
                if let Err(err) = outcome {
                    log::error!("{}: after the handler panicked: {err}", self.name());
                }
                Err(RunError::HandlerPanicked { id, message })
            }
            None => outcome,
        };
        if let Err(err) = &outcome {
            log::error!("{}: gave up: {err}", self.name());
        }
        outcome
    }

    /// An abandon's parting write (see [`Consumer::abandon`]), if it goes within a moment.
    async fn part(&mut self) {
        let (Some(stream), Some(bytes)) = (&mut self.link, self.consumer.poll_transmit()) else { return };
        let write = async {
            if stream.write_all(bytes).await.is_ok() {
                let _ = stream.flush().await;
            }
        };
        future::or(write, async {
            Timer::after(PARTING_WRITE).await;
        })
        .await;
    }

    /// The stream's name, for logs.
    fn name(&self) -> String {
        String::from_utf8_lossy(&self.consumer.config().stream).into_owned()
    }

    /// One entry in hand at a time: its future is pinned here, with nothing allocated per
    /// entry.
    async fn serve_one<H, F>(&mut self, mut handler: H) -> Result<Stats, RunError>
    where
        H: FnMut(Entry) -> F,
        F: Future<Output = Verdict>,
    {
        loop {
            self.tell();
            while let Some(event) = self.consumer.poll_event() {
                match event {
                    Event::Entry(entry) => {
                        let held = entry.clone();
                        let outcome = match handler::call(&mut handler, entry) {
                            Ok(handled) => match self.handle(handled).await? {
                                Some(outcome) => outcome,
                                // Abandoned while it ran: the consumer has stopped.
                                None => return Ok(self.consumer.stats().clone()),
                            },
                            Err(payload) => Err(payload),
                        };
                        // Stop before settling: the settle then ends the batch and writes the
                        // earned acks.
                        self.tell();
                        self.settle(&held, outcome);
                        // What the settle sent (a slow handler's ack, a renewal of the next
                        // entries' lease) goes out before the next handler starts: a handler
                        // may block the executor's thread.
                        while self.link.is_some()
                            && !self.consumer.is_stopped()
                            && self.consumer.poll_transmit().is_some()
                        {
                            self.step().await?;
                        }
                    }
                    Event::Notice(notice) => self.observe(&notice),
                    Event::Stopped => return Ok(self.consumer.stats().clone()),
                    // Events this transport does not know yet need nothing from it.
                    _ => {}
                }
            }
            if let Some(err) = self.consumer.error() {
                return Err(RunError::Consumer(err.clone()));
            }
            if self.consumer.is_stopped() {
                return Ok(self.consumer.stats().clone());
            }
            self.step().await?;
        }
    }

    /// Awaits a handler's future while the connection goes on working. `None`: abandoned
    /// meanwhile (the future is dropped; the consumer has stopped). A fatal error meanwhile
    /// lets the handler finish first, unless an abandon comes first.
    async fn handle<T>(&mut self, handled: impl Future<Output = T>) -> Result<Option<T>, RunError> {
        let mut handled = pin!(handled);
        loop {
            while let Some(event) = self.consumer.poll_event() {
                match event {
                    Event::Notice(notice) => self.observe(&notice),
                    Event::Stopped => return Ok(None),
                    // One entry at a time: no other comes out while one is in hand.
                    _ => {}
                }
            }
            let step = future::or(async { Ok(Some(handled.as_mut().await)) }, async {
                self.step().await.map(|()| None)
            });
            match step.await {
                Ok(Some(outcome)) => return Ok(Some(outcome)),
                Ok(None) => {}
                Err(err) => {
                    // Its verdict (or panic, which the panic hook has told) goes unused.
                    unless_abandoned(&self.stop, async {
                        handled.await;
                    })
                    .await;
                    return Err(err);
                }
            }
        }
    }

    /// Many entries in hand: their futures polled at once, here, as a set, each settling
    /// its entry as it finishes.
    async fn serve_many<H, F>(&mut self, mut handler: H) -> Result<Stats, RunError>
    where
        H: FnMut(Entry) -> F,
        F: Future<Output = Verdict>,
    {
        let mut running = FuturesUnordered::new();
        loop {
            self.tell();
            while let Some(event) = self.consumer.poll_event() {
                match event {
                    Event::Entry(entry) => {
                        let held = entry.clone();
                        match handler::call(&mut handler, entry) {
                            Ok(handled) => running.push(handler::tagged(held, handled)),
                            Err(payload) => self.settle(&held, Err(payload)),
                        }
                    }
                    Event::Notice(notice) => self.observe(&notice),
                    // A stop comes out once none is in hand; after an abandon, the futures
                    // still running are dropped here.
                    Event::Stopped => return Ok(self.consumer.stats().clone()),
                    // Events this transport does not know yet need nothing from it.
                    _ => {}
                }
            }
            if let Some(err) = self.consumer.error() {
                let err = RunError::Consumer(err.clone());
                unless_abandoned(&self.stop, finish_all(&mut running)).await;
                return Err(err);
            }
            if self.consumer.is_stopped() {
                return Ok(self.consumer.stats().clone());
            }
            if running.is_empty() {
                self.step().await?;
                continue;
            }
            // Bytes to write (a settle's acks, a read, a renewal) go first: a write seldom
            // waits. Otherwise a finished handler does, so that the next entry is handed out
            // before the socket is read, as with one in hand. Either way the other is polled
            // while the first waits. A connect cut short by a finished handler is simply
            // tried again: nothing new is handed out while disconnected, so that happens at
            // most once per entry in hand.
            let next = if self.consumer.poll_transmit().is_some() {
                future::or(async { Next::Stepped(self.step().await) }, async {
                    Next::Handled(running.next().await)
                })
                .await
            } else {
                future::or(async { Next::Handled(running.next().await) }, async {
                    Next::Stepped(self.step().await)
                })
                .await
            };
            match next {
                Next::Handled(Some((entry, outcome))) => {
                    // Stop before settling, as with one in hand.
                    self.tell();
                    self.settle(&entry, outcome);
                }
                // (`None` cannot be: only an empty set ends, and this one was not.)
                Next::Handled(None) | Next::Stepped(Ok(())) => {}
                Next::Stepped(Err(err)) => {
                    unless_abandoned(&self.stop, finish_all(&mut running)).await;
                    return Err(err);
                }
            }
        }
    }

    /// Settles the entry in hand with this `id` by its handler's verdict. After a panic the
    /// consumer stops first (nothing more is handed out), then the entry is settled with
    /// [`Verdict::Retry`]: no ack, so it stays pending with this delivery counted (a
    /// handler that panics on it every time brings it to `max_deliveries` and the dead
    /// letters, rather than around forever). Left in hand instead, it would hold the stop
    /// open for good: the stop ends once nothing is in hand, and an abandon to end it would
    /// give up the earned acks not yet confirmed.
    fn settle(&mut self, entry: &Entry, outcome: thread::Result<Verdict>) {
        let id = entry.id();
        let verdict = match outcome {
            Ok(verdict) => verdict,
            Err(payload) => {
                let panic = Panic::new(id, &*payload);
                log::error!(
                    "{}: the handler panicked on entry {} ({}): it stays pending; stopping",
                    self.name(),
                    panic.id,
                    panic.message
                );
                self.consumer.stop();
                // The first panic is the one `run` returns.
                self.panic.get_or_insert(panic);
                Verdict::Retry
            }
        };
        self.consumer.settle_entry(entry, verdict, Instant::now());
    }

    fn observe(&mut self, notice: &Notice) {
        // Trouble as a warning, the rest as information; the group's health at debug level.
        let level = match notice {
            _ if notice.is_trouble() => log::Level::Warn,
            Notice::Health(_) => log::Level::Debug,
            _ => log::Level::Info,
        };
        // A connect failing again for the same reason: told once, then every 30 s.
        if let Some(line) = self.retell.line(notice, Instant::now()) {
            log::log!(level, "{}: {line}", self.name());
        }
        if let Some(observer) = self.observer.as_mut() {
            observer(notice);
        }
    }

    /// Waits for one thing — a write, a read, the consumer's next deadline, a stop request,
    /// a connect — and tells the consumer. `Err` only when the consumer failed for good.
    ///
    /// What changed since the last step (entries handed out and settled, what the last step
    /// read) is published to the [`StatsHandle`] first: before the wait, which may be long.
    async fn step(&mut self) -> Result<(), RunError> {
        self.stats.publish(&self.consumer);
        self.tell();
        if let Some(err) = self.consumer.error() {
            return Err(RunError::Consumer(err.clone()));
        }
        if self.consumer.is_stopped() {
            return Ok(()); // `Stopped` is the caller's to take
        }
        let deadline = self.consumer.poll_timeout();
        let timer = async {
            deadline.map_or_else(Timer::never, Timer::at).await;
        };
        if self.link.is_some() && self.consumer.wants_connection() {
            // The consumer dropped it (a stop leaving the group from a parked read).
            self.link = None;
        }
        let Some(stream) = &mut self.link else {
            if self.consumer.connect_due(Instant::now()) {
                self.link = self.connect().await?;
            } else {
                // Waiting for the reconnect time (or, with no deadline, only a stop).
                future::or(timer, future::or(self.stop.beyond(self.told), self.changes.asked())).await;
            }
            return Ok(());
        };
        let writing = self.consumer.poll_transmit().is_some();
        let wake = if let Some(bytes) = self.consumer.poll_transmit() {
            // One write at a time: a write cut short by the timer wrote nothing.
            future::or(async { Wake::Io(stream.write(bytes).await) }, async {
                timer.await;
                Wake::Timer
            })
            .await
        } else {
            // The read comes first, so bytes already in the socket beat a passed deadline.
            // What a TLS session still holds of the last write goes out before it.
            let read = async {
                match stream.flush().await {
                    Ok(()) => Wake::Io(stream.read(&mut self.buf).await),
                    Err(e) => Wake::Io(Err(e)),
                }
            };
            let timer = async {
                timer.await;
                Wake::Timer
            };
            // A stop, or streams to add or remove: passed on at the next turn.
            let stop = async {
                future::or(self.stop.beyond(self.told), self.changes.asked()).await;
                Wake::Stop
            };
            let rewatch = self.locator.rewatch_at().filter(|_| wants_watch(&self.locator, &self.scout));
            let sentinel = async {
                match &mut self.scout {
                    Some(Scout::Watching(watch)) => Wake::Heard(watch.next().await),
                    Some(Scout::Asking(asking)) => Wake::Asked(asking.as_mut().await),
                    None => {
                        rewatch.map_or_else(Timer::never, Timer::at).await;
                        Wake::Rewatch
                    }
                }
            };
            future::or(future::or(future::or(read, timer), stop), sentinel).await
        };
        let now = Instant::now();
        let result = match wake {
            Wake::Stop => return Ok(()),
            Wake::Heard(Ok(answer)) => {
                self.on_answer(answer, now);
                return Ok(());
            }
            Wake::Heard(Err(why)) => {
                if let Some(Scout::Watching(watch)) = self.scout.take() {
                    log::info!(
                        "{}: the watch on sentinel {} was lost ({why})",
                        self.name(),
                        watch.sentinel()
                    );
                }
                self.locator.on_watch_lost(now);
                return Ok(());
            }
            Wake::Asked(Ok((watch, answer))) => {
                self.scout = Some(Scout::Watching(watch));
                self.on_answer(answer, now);
                return Ok(());
            }
            Wake::Asked(Err(ScoutError::Tls(err))) => return Err(RunError::Tls(err)),
            Wake::Asked(Err(ScoutError::Failed(why))) => {
                self.scout = None;
                log::info!("{}: cannot watch the sentinels: {why}", self.name());
                self.locator.on_watch_lost(now);
                return Ok(());
            }
            Wake::Rewatch => {
                self.locator.on_rewatch();
                if let Some(sentinel) = self.locator.sentinel().cloned() {
                    if self.locator.admit(&sentinel, now).is_err() {
                        // Dialled too often lately: opened again later, the locator says when.
                        self.locator.on_watch_lost(now);
                        return Ok(());
                    }
                }
                if let (Some(session), Some(sentinel)) = (self.locator.session(), self.locator.sentinel()) {
                    let tls = self.tls.as_ref().map(|(tls, _)| tls.clone());
                    let (resolver, timeout) = (self.resolver.clone(), self.connect_timeout);
                    self.scout = Some(Scout::asking(sentinel.clone(), session, tls, resolver, timeout));
                }
                return Ok(());
            }
            Wake::Io(Ok(0)) => Err(Cut::Lost("the server closed the connection".into())),
            Wake::Io(Ok(n)) if writing => {
                self.consumer.advance_transmit(n);
                return Ok(());
            }
            Wake::Io(Ok(n)) => {
                if !self.heard {
                    self.heard = true;
                    self.quiet = 0;
                }
                self.consumer.handle_input(&self.buf[..n], now).map_err(Cut::Consumer)
            }
            Wake::Io(Err(e)) if e.kind() == io::ErrorKind::Interrupted => return Ok(()),
            Wake::Io(Err(e)) => {
                if let Some(err) = self.refused(&e) {
                    self.link = None;
                    return Err(RunError::Tls(err));
                }
                // A TLS port resets a plaintext client before a word (PROTOCOL.md 28).
                let reset = matches!(e.kind(), io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe);
                if self.tls.is_none() && !self.heard && reset {
                    self.quiet += 1;
                    if self.quiet >= QUIET_LIMIT {
                        let addr = self.peer.map_or_else(String::new, |peer| peer.to_string());
                        return Err(RunError::Tls(TlsError::ServerWantsTls { addr, attempts: self.quiet }));
                    }
                }
                Err(Cut::Lost(e.to_string()))
            }
            Wake::Timer => self.consumer.handle_timeout(now).map_err(Cut::Consumer),
        };
        match result {
            Ok(()) => Ok(()),
            // EOF or an I/O error: the connection is lost; reconnect after the backoff.
            Err(Cut::Lost(reason)) => {
                self.link = None;
                self.consumer.on_disconnected_because(now, reason);
                self.link_down(self.heard);
                Ok(())
            }
            // The consumer closed the connection; it scheduled a reconnect unless fatal.
            Err(Cut::Consumer(err)) => {
                self.link = None;
                if err.is_fatal() {
                    return Err(RunError::Consumer(err));
                }
                self.link_down(self.heard);
                Ok(())
            }
        }
    }

    /// What a sentinel said: a failover that moved the master away from where the consumer
    /// is connected closes its connection, and it reconnects there at once.
    fn on_answer(&mut self, answer: SentinelAnswer, now: Instant) {
        let to = match &answer {
            SentinelAnswer::Master(at) | SentinelAnswer::Switched(at) => at.to_string(),
            SentinelAnswer::Unknown { .. } => String::new(),
        };
        match self.locator.on_answer(answer) {
            Found::Moved { from } => {
                let why = format!("a failover moved the master from {from} to {to}");
                log::info!("{}: {why}", self.name());
                if self.link.take().is_some() {
                    self.consumer.on_disconnected_because(now, &why);
                }
                self.consumer.connect_now(now);
            }
            Found::Master => self.consumer.connect_now(now),
            Found::Failed(all) => {
                self.scout = None;
                if let Some(all) = all {
                    self.consumer.on_disconnected_because(now, all);
                }
            }
            _ => {}
        }
    }

    /// The consumer's connection is down (`was_up`: after the server answered on it): the
    /// locator decides where next; with Sentinel the master is asked for again, on a new
    /// connection (a watch cannot ask).
    fn link_down(&mut self, was_up: bool) {
        self.locator.on_link_down(was_up);
        if self.locator.master().is_none() && matches!(self.scout, Some(Scout::Watching(_))) {
            self.scout = None;
        }
    }

    /// A server refusing the client's certificate, which TLS 1.3 reports after the
    /// handshake, on the first read: fatal. Other failures there cost the connection only.
    fn refused(&self, err: &io::Error) -> Option<TlsError> {
        let (tls, host) = self.tls.as_ref()?;
        let explained = tls.explain(conn::tls_failure(err)?, host);
        matches!(explained, TlsError::ClientCertRequired { .. } | TlsError::ClientCertRefused { .. })
            .then_some(explained)
    }

    /// Where to connect: the consumer's redirect (a cluster's `MOVED`), or the locator's
    /// node — with Sentinel, once a sentinel has named the master (asked here, each sentinel
    /// in turn, each question bounded by the connect timeout). `None`: no connect this time
    /// (the consumer was told why, or a stop came).
    async fn dial(&mut self) -> Result<Option<HostPort>, RunError> {
        loop {
            if let Some((host, port)) = self.consumer.redirect() {
                return Ok(Some(HostPort::new(host, port)));
            }
            let sentinel = match self.locator.dial() {
                Some(Dial::Node(node)) => return Ok(Some(node.clone())),
                Some(Dial::Sentinel(sentinel)) => sentinel.clone(),
                None => {
                    self.consumer.on_disconnected_because(
                        Instant::now(),
                        "no sentinel to ask: the endpoint names none",
                    );
                    return Ok(None);
                }
            };
            let Some(session) = self.locator.session() else { return Ok(None) };
            if !self.admitted(&sentinel).await {
                return Ok(None); // a stop request
            }
            // A watch cannot ask (it is subscribed): another connection asks.
            self.scout = None;
            let tls = self.tls.as_ref().map(|(tls, _)| tls.clone());
            log::debug!("{}: asking sentinel {sentinel}", self.name());
            let asked = scout::ask(sentinel, session, tls, self.resolver.clone(), self.connect_timeout);
            let Some(asked) = bounded(self.connect_timeout * 2, &self.stop, self.told, asked).await else {
                return Ok(None); // a stop request (the question bounds itself)
            };
            let now = Instant::now();
            match asked {
                Ok((watch, answer)) => {
                    self.scout = Some(Scout::Watching(watch));
                    if let Found::Failed(all) = self.locator.on_answer(answer) {
                        self.scout = None;
                        if let Some(all) = all {
                            self.consumer.on_disconnected_because(now, all);
                            return Ok(None);
                        }
                    }
                }
                Err(ScoutError::Tls(err)) => return Err(RunError::Tls(err)),
                Err(ScoutError::Failed(why)) => {
                    if let Some(all) = self.locator.on_sentinel_failed(why) {
                        self.consumer.on_disconnected_because(now, all);
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// One connect attempt (and TLS handshake), each cut short by its timeout or a new stop
    /// request. Tells the consumer of the outcome (nothing, if cut short by a request: the
    /// loop decides again). A TLS failure is fatal.
    async fn connect(&mut self) -> Result<Option<Conn>, RunError> {
        let Some(node) = self.dial().await? else { return Ok(None) };
        // A redirect's empty host is the host connected to.
        let host = match (&node.host[..], self.peer) {
            ("", Some(peer)) => peer.ip().to_string(),
            _ => node.host.clone(),
        };
        if !self.admitted(&HostPort::new(host.as_str(), node.port)).await {
            return Ok(None); // a stop request
        }
        let addr = match self.resolver.resolve(&host, node.port).await {
            Ok(addrs) => addrs[self.attempts % addrs.len()],
            Err(e) => {
                self.attempts += 1;
                self.consumer
                    .on_disconnected_because(Instant::now(), format_args!("cannot resolve {host}: {e}"));
                self.link_down(false);
                return Ok(None);
            }
        };
        self.peer = Some(addr);
        self.tls_name = host;
        log::debug!("{}: connecting to {addr}", self.name());
        let timeout = self.connect_timeout;
        let Some(attempt) = bounded(timeout, &self.stop, self.told, TcpStream::connect(addr)).await else {
            return Ok(self.attempt_failed(true, format_args!("{addr}: no answer within {timeout:?}")));
        };
        let stream = match attempt {
            Ok(stream) => stream,
            Err(e) => return Ok(self.attempt_failed(false, format_args!("{addr}: {e}"))),
        };
        // Small commands go out at once; a failure here costs only latency.
        let _ = stream.set_nodelay(true);
        self.heard = false;
        let conn = match &self.tls {
            None => Conn::Plain(stream),
            Some((tls, configured)) => {
                let named = matches!(self.locator.endpoint(), Endpoint::Sentinel(_))
                    || self.consumer.redirect().is_some();
                let host = if named || configured.is_empty() { &self.tls_name } else { configured };
                match bounded(self.connect_timeout, &self.stop, self.told, conn::secure(stream, tls, host))
                    .await
                {
                    Some(Ok(conn)) => {
                        self.quiet = 0;
                        conn
                    }
                    Some(Err(HandshakeError::Tls(err))) => return Err(RunError::Tls(err)),
                    Some(Err(HandshakeError::Io)) => {
                        return Ok(
                            self.attempt_failed(false, format_args!("{addr}: the TLS handshake failed"))
                        );
                    }
                    None if self.stop.request() > self.told => return Ok(None),
                    None => {
                        // A plaintext server takes the hello for an unfinished command and waits.
                        self.quiet += 1;
                        if self.quiet >= QUIET_LIMIT {
                            let host = host.clone();
                            return Err(RunError::Tls(TlsError::NoTlsAnswer { host, attempts: self.quiet }));
                        }
                        let reason =
                            format_args!("{addr}: the TLS handshake got no answer within {timeout:?}");
                        return Ok(self.attempt_failed(false, reason));
                    }
                }
            }
        };
        self.consumer.on_connected(Instant::now());
        Ok(Some(conn))
    }

    /// Waits until the locator lets a connect to `to` go ([`Locator::admit`]: its ceiling
    /// on dials); false if a stop request came first.
    async fn admitted(&mut self, to: &HostPort) -> bool {
        loop {
            let Err(at) = self.locator.admit(to, Instant::now()) else { return true };
            let waited = future::or(
                async {
                    Timer::at(at).await;
                    true
                },
                async {
                    self.stop.beyond(self.told).await;
                    false
                },
            );
            if !waited.await {
                return false;
            }
        }
    }

    /// A connect attempt failed, or was `cut_short` by its timeout or a stop request: the
    /// next address, after the consumer's backoff (nothing, for a stop: the loop decides).
    fn attempt_failed(&mut self, cut_short: bool, reason: std::fmt::Arguments<'_>) -> Option<Conn> {
        if cut_short && self.stop.request() > self.told {
            return None;
        }
        self.attempts += 1;
        self.consumer.on_disconnected_because(Instant::now(), reason);
        self.link_down(false);
        None
    }

    /// Passes on to the consumer what the stop handle was asked since it was last told.
    fn tell(&mut self) {
        self.changes.apply(&mut self.consumer);
        let asked = self.stop.request();
        if asked > self.told {
            match asked {
                Request::Abandon => self.consumer.abandon(),
                Request::Stop => self.consumer.stop(),
                Request::Run => {}
            }
            self.told = asked;
        }
    }
}

/// Lets the handlers still `running` finish, their verdicts unused (a panic among them has
/// been told by the panic hook).
async fn finish_all(running: &mut (impl Stream + Unpin)) {
    while running.next().await.is_some() {}
}

/// `work`, unless an abandon is asked of `stop` before it finishes (then it is dropped).
async fn unless_abandoned(stop: &StopHandle, work: impl Future<Output = ()>) {
    future::or(work, stop.beyond(Request::Stop)).await;
}

/// `work`, unless `timeout` passes or `stop` is asked more than `told` first (`None`).
async fn bounded<T>(
    timeout: Duration,
    stop: &StopHandle,
    told: Request,
    work: impl Future<Output = T>,
) -> Option<T> {
    future::or(async { Some(work.await) }, async {
        future::or(
            async {
                Timer::after(timeout).await;
            },
            stop.beyond(told),
        )
        .await;
        None
    })
    .await
}

/// True when a watch should be open and is not: with Sentinel, the master known.
fn wants_watch(locator: &Locator, scout: &Option<Scout>) -> bool {
    locator.watches() && scout.is_none() && locator.master().is_some()
}

/// Why a step cost the connection.
enum Cut {
    /// The connection was lost (end of file, an I/O error): the reason.
    Lost(String),
    /// The consumer closed it (fatal or not).
    Consumer(pelican::Error),
}
