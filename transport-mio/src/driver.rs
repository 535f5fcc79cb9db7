//! One consumer over one `mio` socket, registered on a caller's `Poll`.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use pelican::locate::{Dial, Found, SentinelAnswer};
use pelican::{Consumer, Endpoint, Entry, Event, HostPort, Locator, Notice, Verdict};
use pelican_tls::TlsError;

use crate::conn::Conn;
use crate::error::DriveError;
use crate::resolve::Resolver;
use crate::scout::{Scout, ScoutError};
use crate::tls::{RustlsError, Tls};

/// Size of one socket read.
const READ_CHUNK: usize = 64 * 1024;

/// Reads one [`Driver::drive`] call makes before it yields to the caller's other work (the
/// driver then asks to be driven again at once, see [`Driver::next_deadline`]).
const READ_BUDGET: usize = 32;

/// Connections in a row that end without a word from the server (a TLS handshake never
/// answered; a plaintext connection reset before any reply) before the driver gives up:
/// such a server speaks the other protocol, and retrying would go on forever.
const QUIET_LIMIT: u32 = 3;

/// How long a TCP connect may take before it counts as failed, unless
/// [`Driver::connect_timeout`] says otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// What a [`Driver`] reports after [`Driver::drive`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
#[non_exhaustive]
pub enum Status {
    /// Still working: drive it again on its token's next event or at
    /// [`Driver::next_deadline`], whichever comes first.
    Running,
    /// The consumer stopped (after [`Driver::stop`]); its socket is closed and deregistered.
    /// Further calls to `drive` do nothing and report `Stopped` again.
    Stopped,
}

/// The socket's state.
#[derive(Debug)]
enum Link {
    /// No socket.
    Idle,
    /// A non-blocking connect is under way; it fails if not done by `deadline`.
    Connecting { stream: TcpStream, deadline: Instant },
    /// Connected over TCP, shaking hands over TLS; it fails if not done by `deadline`.
    Securing { conn: Conn, deadline: Instant },
    /// Connected (over TLS, secured); the consumer was told so.
    Up { conn: Conn },
}

/// Drives one [`Consumer`] over one `mio` TCP socket.
///
/// The socket is registered on the caller's [`Registry`] under the caller's [`Token`]
/// (readable and writable, edge-triggered), so any number of drivers can share one thread
/// inside someone else's event loop. The driver knows nothing of the protocol: it connects,
/// moves bytes between the socket and the consumer until the socket would block, hands
/// entries to the handler and settles them with its verdict, and reconnects when the
/// consumer asks to.
///
/// Where it connects is an [`Endpoint`], which a [`Locator`] follows: a host name is looked
/// up again at every connect (blocking, with `std`'s resolver), so a name that a failover
/// moves to another node is followed. With [`Sentinels`](pelican::Sentinels) the driver
/// asks them where the master is over a second socket, registered under the same token,
/// and keeps it open, subscribed, to hear when a failover moves the master: it then closes
/// the consumer's connection and reconnects there at once. A node that answers as a replica
/// is never read from ([`pelican::Error::NotMaster`]); the driver tries again after the
/// consumer's backoff, asking the sentinels again first.
///
/// # Driving it
///
/// The caller MUST call [`drive`](Self::drive):
///
/// - once after creating the driver (or simply when [`next_deadline`](Self::next_deadline)
///   has passed, which it has at first: the driver wants to connect at once);
/// - on every `mio` event for the driver's token, whatever its readiness;
/// - whenever [`next_deadline`](Self::next_deadline) has passed.
///
/// Extra calls are harmless. Each call works until there is nothing left to do without
/// waiting: bytes written until the socket would block, every entry handed out, every
/// readable byte read (or a fairness budget is spent, in which case `next_deadline` is due
/// at once). `drive` returns [`Status::Stopped`] once the consumer has stopped, and a fatal
/// [`DriveError`] if the consumer gave up (wrong password, a missing group…) or TLS failed
/// (an untrusted certificate…); a non-fatal error
/// only costs the connection, and the driver reconnects after the consumer's backoff.
/// [`Notice`]s (connections, reclaims, a lease lost, a dead letter, a smaller read, health) wait in
/// [`poll_notice`](Self::poll_notice).
///
/// # Slow handlers, and many entries at once
///
/// With [`drive`](Self::drive) the handler runs inside the call, one entry at a time, so
/// nothing else happens on this driver's connection meanwhile: its earned acks go out when it
/// returns, and the entry in hand cannot have its lease renewed. A handler running longer
/// than `min_idle` can then lose its entry to a peer's reclaim, which handles it too (its
/// `XACK` then counts 0, see [`Stats::lost_to_peer`](pelican::Stats::lost_to_peer)).
///
/// To keep entries leased while they are worked on, and to work on several at once, hand
/// them elsewhere with [`drive_deferred`](Self::drive_deferred) (to a worker pool, a queue…)
/// and [`settle`](Self::settle) each by its id as it completes, in any order. Up to
/// [`Config::concurrency`](pelican::Config::concurrency) entries are in hand at once (never
/// two of one key with [`Config::order_by`](pelican::Config::order_by)); the next is handed
/// out as soon as one is settled. Keep driving meanwhile, on events and at
/// [`next_deadline`](Self::next_deadline): that writes earned acks within
/// [`Config::ack_delay`](pelican::Config::ack_delay) and renews the leases of the entries in
/// hand and of those waiting. Wake your `Poll` when a worker is done (a
/// [`mio::Waker`]) and settle its entry before driving again, as
/// `transport-mio/examples/pool.rs` does; [`Runner::run_pool`](crate::Runner::run_pool) is
/// that loop, ready made. [`drive_mixed`](Self::drive_mixed) does both, entry by entry: a
/// handler that can answer at once does so inside the call, the others are passed on. A [`stop`](Self::stop) hands out nothing more and waits for the
/// entries in hand to be settled; [`abandon`](Self::abandon) drops them (a later `settle`
/// returns false) and they stay pending.
///
/// ```no_run
/// use std::time::Instant;
/// use mio::{Events, Poll, Token};
/// use pelican::{Config, Consumer, Verdict};
/// use pelican_mio::{Driver, Status};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut poll = Poll::new()?;
/// let consumer = Consumer::new(Config::new("orders", "billing", "worker-1"))?;
/// let mut driver = Driver::new(("127.0.0.1", 6379), consumer, Token(7));
/// let mut events = Events::with_capacity(64);
/// let mut handler = |entry: &pelican::Entry| {
///     println!("{:?}", entry.id());
///     Verdict::Ack
/// };
/// loop {
///     if driver.drive(poll.registry(), &mut handler)? == Status::Stopped {
///         break;
///     }
///     let timeout = driver.next_deadline().map(|d| d.saturating_duration_since(Instant::now()));
///     poll.poll(&mut events, timeout)?;
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Driver {
    consumer: Consumer,
    token: Token,
    /// Where to connect: the endpoint's node (or a cluster's others, after a failed
    /// connect), or the master the sentinels name.
    locator: Locator,
    /// The address of the current connection, or the last one tried.
    peer: Option<SocketAddr>,
    /// Connects that failed in a row: picks the next of a name's addresses.
    attempts: usize,
    /// With Sentinel: the connection asking a sentinel, or watching one.
    scout: Option<Scout>,
    /// How host names are looked up.
    resolver: Resolver,
    connect_timeout: Duration,
    link: Link,
    buf: Box<[u8]>,
    /// Drive again at once (a past instant, fixed so that callers comparing it with their
    /// own `now` see it due): set at creation, when a `drive` stopped short of its work to
    /// let others run, and after a deferred settle.
    asap: Option<Instant>,
    stopped: bool,
    notices: VecDeque<Notice>,
    /// TLS, and the host name the server's certificate must carry.
    tls: Option<(Tls, String)>,
    /// A TLS failure that ended the driver.
    tls_failed: Option<TlsError>,
    /// Connections in a row that ended without a word from the server (see [`QUIET_LIMIT`]).
    quiet: u32,
    /// Whether the server sent anything on this connection.
    heard: bool,
    /// The host name the current connection was dialled by (for the certificate check).
    tls_name: String,
    /// A dial the locator held back ([`Locator::admit`]): not before then.
    held: Option<Instant>,
    /// Failed connects told to the log so far (each reason once, then every 30 s).
    retell: pelican::retell::Retell,
}

impl Driver {
    /// A driver for `consumer`, connecting to `endpoint` (a `SocketAddr`, a `(host, port)`,
    /// a [`HostPort`], [`Sentinels`](pelican::Sentinels)…), registering its sockets under
    /// `token`. Nothing happens until the first [`drive`](Self::drive).
    pub fn new(endpoint: impl Into<Endpoint>, mut consumer: Consumer, token: Token) -> Driver {
        // Each driver's jitter its own (unless `Config::seed` names one): a fleet restarted
        // at once does not reconnect in step.
        consumer.reseed(crate::seed());
        let mut locator = Locator::new(endpoint.into());
        locator.reseed(crate::seed());
        Driver {
            consumer,
            token,
            locator,
            peer: None,
            attempts: 0,
            scout: None,
            resolver: Resolver::default(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            link: Link::Idle,
            buf: vec![0; READ_CHUNK].into_boxed_slice(),
            asap: Some(Instant::now()),
            stopped: false,
            notices: VecDeque::new(),
            tls: None,
            tls_failed: None,
            quiet: 0,
            heard: false,
            tls_name: String::new(),
            held: None,
            retell: pelican::retell::Retell::new(),
        }
    }

    /// Connects over TLS, checking that the server's certificate names `host` (a host name,
    /// or an IP address checked as one; a cluster node a redirect names is checked by the
    /// name the redirect gives). With Sentinel, `host` is not used: each node is checked by
    /// the host the sentinels name it by, each sentinel by its own. A certificate or
    /// handshake failure is fatal ([`DriveError::Tls`]): retrying would not fix it.
    #[cfg(feature = "tls")]
    #[must_use]
    pub fn tls(mut self, tls: Tls, host: impl Into<String>) -> Driver {
        self.tls = Some((tls, host.into()));
        self
    }

    /// Adds nodes to try, in turn, after a connect to the endpoint's node failed: a
    /// cluster's other nodes (masters and replicas: any of them leads on with `MOVED`), so
    /// that a stream whose node died finds its slot's new master. Not with Sentinel.
    #[must_use]
    pub fn fallbacks(mut self, nodes: impl IntoIterator<Item = HostPort>) -> Driver {
        self.locator.add_fallbacks(nodes);
        self
    }

    /// Looks host names up with `lookup` instead of the system's resolver (`std`'s, which
    /// blocks the driver's thread while DNS answers): for a discovery of your own (a file, a
    /// service registry), or a resolver with a cache and a timeout. It is called at every
    /// connect, for the node and for each sentinel asked; an `Err` or no address is a failed
    /// connect, retried after the consumer's backoff.
    #[must_use]
    pub fn resolve_with(
        mut self,
        lookup: impl Fn(&str, u16) -> io::Result<Vec<SocketAddr>> + Send + Sync + 'static,
    ) -> Driver {
        self.resolver = Resolver::with(lookup);
        self
    }

    /// [`fallbacks`](Self::fallbacks), by address.
    #[must_use]
    pub fn fallback_addrs(self, addrs: impl IntoIterator<Item = SocketAddr>) -> Driver {
        self.fallbacks(addrs.into_iter().map(|a| HostPort::new(a.ip().to_string(), a.port())))
    }

    /// Sets how long a TCP connect may take before it counts as a failed attempt (default
    /// [`DEFAULT_CONNECT_TIMEOUT`]).
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Driver {
        self.connect_timeout = timeout;
        self
    }

    /// The consumer: its [`stats`](Consumer::stats), [`config`](Consumer::config) and state.
    pub fn consumer(&self) -> &Consumer {
        &self.consumer
    }

    /// The token the socket is registered under.
    pub fn token(&self) -> Token {
        self.token
    }

    /// Where the driver connects.
    pub fn endpoint(&self) -> &Endpoint {
        self.locator.endpoint()
    }

    /// The address the driver is connected or connecting to, or tried last; `None` before
    /// the first connect.
    pub fn peer(&self) -> Option<SocketAddr> {
        self.peer
    }

    /// True once the consumer has stopped and the socket is closed.
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// Asks the consumer to stop, between entries, once earned acks are confirmed (see
    /// [`Consumer::stop`]). The caller MUST go on driving until [`Status::Stopped`]; the
    /// next [`drive`](Self::drive) may already report it.
    pub fn stop(&mut self) {
        self.consumer.stop();
    }

    /// Stops without waiting on the server (see [`Consumer::abandon`]): acks not yet
    /// confirmed are given up, their entries stay pending and come again. The next
    /// [`drive`](Self::drive) reports [`Status::Stopped`].
    pub fn abandon(&mut self) {
        self.consumer.abandon();
    }

    /// The next [`Notice`] reported by the consumer during a [`drive`](Self::drive), oldest
    /// first. They are kept until taken, the latest [`NOTICES_KEPT`] at most.
    pub fn poll_notice(&mut self) -> Option<Notice> {
        self.notices.pop_front()
    }

    /// The verdict on the entry in hand with this id, handed out by
    /// [`drive_deferred`](Self::drive_deferred) (in any order, up to
    /// [`Config::concurrency`](pelican::Config::concurrency) at once). The driver is due at
    /// once ([`next_deadline`](Self::next_deadline)): drive it again to send what the verdict
    /// earned and to go on. Returns false, doing nothing, if no such entry is in hand.
    pub fn settle(&mut self, id: &[u8], verdict: Verdict) -> bool {
        let now = Instant::now();
        self.asap = Some(now);
        self.consumer.settle(id, verdict, now)
    }

    /// Reads `key` too ([`Consumer::add_stream`](pelican::Consumer::add_stream)); the driver
    /// is due at once.
    pub fn add_stream(&mut self, key: impl Into<bytes::Bytes>) -> bool {
        self.asap = Some(Instant::now());
        self.consumer.add_stream(key)
    }

    /// [`settle`](Self::settle) for this entry, by its stream and its id: what a consumer of
    /// many streams needs ([`Consumer::settle_entry`](pelican::Consumer::settle_entry)).
    pub fn settle_entry(&mut self, entry: &Entry, verdict: Verdict) -> bool {
        let now = Instant::now();
        self.asap = Some(now);
        self.consumer.settle_entry(entry, verdict, now)
    }

    /// When the driver next needs [`drive`](Self::drive) without an event: a reply's
    /// deadline, a reconnect, a connect timing out. A deadline in the past means at once.
    /// `None`: only an event can give it work (or it has stopped or failed).
    #[must_use]
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.stopped || self.consumer.error().is_some() || self.tls_failed.is_some() {
            return None;
        }
        if self.asap.is_some() {
            return self.asap;
        }
        let link = match &self.link {
            Link::Connecting { deadline, .. } | Link::Securing { deadline, .. } => Some(*deadline),
            Link::Up { .. } => self.consumer.poll_timeout(),
            // A sentinel is being asked where to connect: its answer (an event) or its
            // deadline brings the next step, not the consumer's past connect time.
            Link::Idle if self.asking() => None,
            // Before the first connect the consumer has no deadline: it wants one at once. A
            // dial the locator held back waits for its time.
            Link::Idle if self.consumer.wants_connection() => {
                let due = self.consumer.poll_timeout().unwrap_or_else(Instant::now);
                Some(self.held.map_or(due, |held| held.max(due)))
            }
            Link::Idle => self.consumer.poll_timeout(),
        };
        let scout = match &self.scout {
            Some(scout) => scout.deadline(),
            None => self.locator.rewatch_at().filter(|_| self.wants_watch()),
        };
        [link, scout].into_iter().flatten().min()
    }

    /// Does everything that can be done now: connect or reconnect if due, finish a connect,
    /// write, read, hand each entry to `handler` and settle it with the verdict, check the
    /// consumer's deadlines. See the type's docs for when to call it.
    ///
    /// Returns [`Status::Stopped`] once the consumer stopped, and the consumer's fatal
    /// [`DriveError`] once it failed (again on every later call); the socket is closed and
    /// deregistered in both cases.
    pub fn drive(
        &mut self,
        registry: &Registry,
        handler: &mut impl FnMut(&Entry) -> Verdict,
    ) -> Result<Status, DriveError> {
        let mut notices = std::mem::take(&mut self.notices);
        let status = self.drive_until(
            registry,
            &mut |e| Some(handler(&e)),
            &mut |n| keep_notice(&mut notices, n),
            &mut |_| {},
        );
        self.notices = notices;
        status
    }

    /// Like [`drive`](Self::drive), but an entry is not handled inside the call: it is passed
    /// to `on_entry` (to a worker thread, a queue…) and stays in hand until
    /// [`settle`](Self::settle) is called with its id. Meanwhile keep driving on events and
    /// at [`next_deadline`](Self::next_deadline) as usual: the driver goes on writing earned
    /// acks and renewing the leases of the entries in hand (and of those waiting), so that no
    /// peer takes them however long they are worked on. Up to
    /// [`Config::concurrency`](pelican::Config::concurrency) entries are in hand at once
    /// (one, by default): one call may pass on several, and the next comes out once one of
    /// them is settled (see the type's docs).
    pub fn drive_deferred(
        &mut self,
        registry: &Registry,
        on_entry: &mut impl FnMut(Entry),
    ) -> Result<Status, DriveError> {
        let mut notices = std::mem::take(&mut self.notices);
        let mut hand = |entry| {
            on_entry(entry);
            None
        };
        let status =
            self.drive_until(registry, &mut hand, &mut |n| keep_notice(&mut notices, n), &mut |_| {});
        self.notices = notices;
        status
    }

    /// [`drive`](Self::drive) and [`drive_deferred`](Self::drive_deferred) in one, decided
    /// per entry: `hand` either handles the entry inside the call and returns its verdict
    /// (`Some`: it is settled at once, as `drive` does), or passes it on (to a worker, a
    /// queue…) and returns `None`: it stays in hand until [`settle`](Self::settle) is called
    /// with its id, as with `drive_deferred`. Up to
    /// [`Config::concurrency`](pelican::Config::concurrency) entries are in hand at once,
    /// those passed on counting until settled.
    ///
    /// For handlers that are quick most of the time but may have to wait (a line written to
    /// a pipe that may be full): the quick ones cost no hop between threads and no wake-up
    /// of the loop, a batch of them is handled in one call, and the others do not hold up the
    /// connection (earned acks, lease renewals) while they wait.
    ///
    /// `stop` is asked at the start of the call and after each verdict returned by `hand`,
    /// before its entry is settled; `true` stops the consumer as [`stop`](Self::stop) does
    /// (asking again is harmless), so that a stop asked meanwhile (from a signal handler, by
    /// the handler itself) is honored right after the entry, not after the whole batch.
    pub fn drive_mixed(
        &mut self,
        registry: &Registry,
        hand: &mut impl FnMut(Entry) -> Option<Verdict>,
        stop: &mut impl FnMut() -> bool,
    ) -> Result<Status, DriveError> {
        let mut notices = std::mem::take(&mut self.notices);
        let mut requests = |consumer: &mut Consumer| {
            if stop() {
                consumer.stop();
            }
        };
        let status = self.drive_until(registry, hand, &mut |n| keep_notice(&mut notices, n), &mut requests);
        self.notices = notices;
        status
    }

    /// [`drive`](Self::drive), handing each entry to `hand` (which returns its verdict, or
    /// `None` if it will be settled later) and each notice to `observe`, and letting
    /// `requests` pass on stop requests to the consumer: first, then after each verdict
    /// `hand` returns, before it is settled (so a stop is not held up by a batch of entries,
    /// and one asked for by the handler itself is honored right after its entry).
    pub(crate) fn drive_until(
        &mut self,
        registry: &Registry,
        hand: &mut impl FnMut(Entry) -> Option<Verdict>,
        observe: &mut impl FnMut(Notice),
        requests: &mut impl FnMut(&mut Consumer),
    ) -> Result<Status, DriveError> {
        self.asap = None;
        if self.stopped {
            return Ok(Status::Stopped);
        }
        requests(&mut self.consumer);
        if let Some(err) = self.consumer.error() {
            let err = err.clone();
            self.close(registry);
            return Err(DriveError::Consumer(err));
        }
        if let Some(err) = &self.tls_failed {
            return Err(DriveError::Tls(err.clone()));
        }
        let now = Instant::now();
        self.advance_scout(registry, now);
        self.advance_link(registry, now);
        if let Some(err) = &self.tls_failed {
            return Err(DriveError::Tls(err.clone()));
        }
        self.exchange(registry, hand, observe, requests)
    }

    /// With Sentinel: moves the sentinel's connection on and acts on what it says; opens a
    /// lost watch again when due.
    fn advance_scout(&mut self, registry: &Registry, now: Instant) {
        let Some(scout) = &mut self.scout else {
            if self.wants_watch() && self.locator.rewatch_at().is_some_and(|at| now >= at) {
                self.locator.on_rewatch();
                self.start_scout(registry, now);
            }
            return;
        };
        match scout.drive(now) {
            Ok(answers) => {
                for answer in answers {
                    self.on_answer(registry, answer, now);
                }
            }
            Err(ScoutError::Tls(err)) => self.fail_tls(registry, err),
            Err(ScoutError::Failed(why)) => {
                let Some(scout) = self.scout.take() else { return };
                let watching = scout.answered();
                let sentinel = scout.sentinel().clone();
                scout.close(registry);
                if watching {
                    log::info!("{}: the watch on sentinel {sentinel} was lost ({why})", self.name());
                    self.locator.on_watch_lost(now);
                } else {
                    self.sentinel_failed(now, why);
                }
            }
        }
    }

    /// A sentinel could not be asked: the next one is, at once; once every one failed, the
    /// consumer is told (its backoff paces the next round).
    fn sentinel_failed(&mut self, now: Instant, why: String) {
        match self.locator.on_sentinel_failed(why) {
            Some(all) => self.consumer.on_disconnected_because(now, all),
            None => self.again(),
        }
    }

    /// What a sentinel said.
    fn on_answer(&mut self, registry: &Registry, answer: SentinelAnswer, now: Instant) {
        let to = match &answer {
            SentinelAnswer::Master(at) | SentinelAnswer::Switched(at) => Some(at.clone()),
            SentinelAnswer::Unknown { .. } => None,
        };
        match self.locator.on_answer(answer) {
            // Connected where the sentinels said (or about to be): nothing changes.
            Found::Same => {}
            Found::Master => {
                self.consumer.connect_now(now);
                self.again();
            }
            Found::Moved { from } => {
                let to = to.map_or_else(String::new, |to| to.to_string());
                let why = format!("a failover moved the master from {from} to {to}");
                if !matches!(self.link, Link::Idle) {
                    self.close(registry);
                    self.consumer.on_disconnected_because(now, &why);
                }
                log::info!("{}: {why}", self.name());
                self.consumer.connect_now(now);
                self.again();
            }
            Found::Failed(all) => {
                if let Some(scout) = self.scout.take() {
                    scout.close(registry);
                }
                match all {
                    Some(all) => self.consumer.on_disconnected_because(now, all),
                    None => self.again(),
                }
            }
            _ => {}
        }
    }

    /// True when a watch should be open and is not: with Sentinel, the master known and the
    /// consumer live.
    fn wants_watch(&self) -> bool {
        self.locator.watches()
            && self.scout.is_none()
            && self.locator.master().is_some()
            && !self.stopped
            && self.consumer.error().is_none()
    }

    /// True while a sentinel is being asked where the consumer is to connect.
    fn asking(&self) -> bool {
        self.scout.as_ref().is_some_and(|scout| !scout.answered())
    }

    /// Opens a connection to the sentinel the locator names, to ask (and then watch).
    fn start_scout(&mut self, registry: &Registry, now: Instant) {
        let (Some(session), Some(sentinel)) = (self.locator.session(), self.locator.sentinel().cloned())
        else {
            return;
        };
        if let Err(at) = self.locator.admit(&sentinel, now) {
            match self.locator.master() {
                // A watch: opened again later, the locator says when.
                Some(_) => self.locator.on_watch_lost(now),
                // The consumer's connect: it waits.
                None => self.held = Some(at),
            }
            return;
        }
        let tls = self.tls.as_ref().map(|(tls, _)| tls);
        log::debug!("{}: asking sentinel {sentinel}", self.name());
        let resolver = &self.resolver;
        let within = (now, self.connect_timeout);
        match Scout::start(&sentinel, session, tls, resolver, registry, self.token, within) {
            Ok(scout) => self.scout = Some(scout),
            Err(ScoutError::Tls(err)) => self.fail_tls(registry, err),
            Err(ScoutError::Failed(why)) if self.locator.master().is_some() => {
                log::info!("{}: cannot watch sentinel {sentinel}: {why}", self.name());
                self.locator.on_watch_lost(now);
            }
            Err(ScoutError::Failed(why)) => self.sentinel_failed(now, why),
        }
    }

    /// Connects if the consumer wants a connection and its backoff has passed; finishes a
    /// connect under way.
    fn advance_link(&mut self, registry: &Registry, now: Instant) {
        match std::mem::replace(&mut self.link, Link::Idle) {
            Link::Idle => {
                if self.held.is_some_and(|held| now < held) {
                    return; // the locator's ceiling: not yet
                }
                self.held = None;
                if self.consumer.connect_due(now) {
                    self.connect(registry, now);
                }
            }
            Link::Connecting { stream, deadline } => match connect_outcome(&stream) {
                Ok(true) => {
                    self.heard = false;
                    match &self.tls {
                        None => self.up(Conn::Plain(stream), now),
                        Some((tls, _)) => match tls.connect(&self.tls_host().unwrap_or_default()) {
                            Ok(session) => {
                                let conn = Conn::Tls(stream, Box::new(session));
                                self.link = Link::Securing { conn, deadline: now + self.connect_timeout };
                                self.secure(registry, now);
                            }
                            Err(err) => {
                                self.link = Link::Connecting { stream, deadline };
                                self.fail_tls(registry, err);
                            }
                        },
                    }
                }
                Ok(false) if now < deadline => self.link = Link::Connecting { stream, deadline },
                Ok(false) => {
                    self.link = Link::Connecting { stream, deadline };
                    let reason = format!("no answer within {:?}", self.connect_timeout);
                    self.connect_failed(registry, now, reason);
                }
                Err(e) => {
                    self.link = Link::Connecting { stream, deadline };
                    self.connect_failed(registry, now, e);
                }
            },
            securing @ Link::Securing { .. } => {
                self.link = securing;
                self.secure(registry, now);
            }
            up @ Link::Up { .. } => self.link = up,
        }
    }

    /// Moves the TLS handshake on; once done, the consumer is told it is connected.
    fn secure(&mut self, registry: &Registry, now: Instant) {
        let Link::Securing { conn, deadline } = &mut self.link else { return };
        let deadline = *deadline;
        match conn.handshake() {
            Ok(true) => {
                let Link::Securing { conn, .. } = std::mem::replace(&mut self.link, Link::Idle) else {
                    return;
                };
                self.quiet = 0;
                self.up(conn, now);
            }
            Ok(false) if now < deadline => {}
            Ok(false) => {
                // A plaintext server takes the hello for an unfinished command and waits.
                self.quiet += 1;
                if self.quiet >= QUIET_LIMIT {
                    let host = self.tls.as_ref().map_or_else(String::new, |(_, host)| host.clone());
                    self.fail_tls(registry, TlsError::NoTlsAnswer { host, attempts: self.quiet });
                } else {
                    let reason = format!("the TLS handshake got no answer within {:?}", self.connect_timeout);
                    self.connect_failed(registry, now, reason);
                }
            }
            Err(e) => {
                let _stopped = self.io_failed(registry, &e, now);
            }
        }
    }

    fn up(&mut self, conn: Conn, now: Instant) {
        self.link = Link::Up { conn };
        self.consumer.on_connected(now);
    }

    /// TLS failed for good: the driver ends.
    fn fail_tls(&mut self, registry: &Registry, err: TlsError) {
        log::error!("{}: gave up: {err}", self.name());
        self.close(registry);
        self.tls_failed = Some(err);
    }

    /// Connects where the consumer's redirect (a cluster's `MOVED`) or the locator says,
    /// looking the host up now; with Sentinel and no master known, asks a sentinel first.
    fn connect(&mut self, registry: &Registry, now: Instant) {
        let node = match (self.consumer.redirect(), self.locator.dial()) {
            (Some((host, port)), _) => HostPort::new(host, port),
            (None, Some(Dial::Node(node))) => node.clone(),
            (None, None) => {
                self.consumer.on_disconnected_because(now, "no sentinel to ask: the endpoint names none");
                self.again();
                return;
            }
            (None, Some(Dial::Sentinel(_))) => {
                match &self.scout {
                    // Asking already: its answer brings the next drive here again.
                    Some(scout) if !scout.answered() => {}
                    // A watch cannot ask (it is subscribed): another connection asks.
                    _ => {
                        if let Some(watch) = self.scout.take() {
                            watch.close(registry);
                        }
                        self.start_scout(registry, now);
                    }
                }
                return;
            }
        };
        // A redirect's empty host is the host connected to.
        let host = match (&node.host[..], self.peer) {
            ("", Some(peer)) => peer.ip().to_string(),
            _ => node.host.clone(),
        };
        if let Err(at) = self.locator.admit(&HostPort::new(host.as_str(), node.port), now) {
            self.held = Some(at);
            return;
        }
        let to = match self.resolver.resolve(&host, node.port) {
            Ok(addrs) => addrs[self.attempts % addrs.len()],
            Err(e) => {
                let reason = format!("cannot resolve {host}: {e}");
                self.consumer.on_disconnected_because(now, reason);
                self.locator.on_link_down(false);
                self.again();
                return;
            }
        };
        self.peer = Some(to);
        self.tls_name = host;
        log::debug!("{}: connecting to {to}", self.name());
        let attempt = TcpStream::connect(to).and_then(|mut stream| {
            stream.set_nodelay(true)?;
            registry.register(&mut stream, self.token, Interest::READABLE | Interest::WRITABLE)?;
            Ok(stream)
        });
        match attempt {
            Ok(stream) => self.link = Link::Connecting { stream, deadline: now + self.connect_timeout },
            Err(e) => self.connect_failed(registry, now, e),
        }
    }

    /// The stream's name, for logs.
    fn name(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.consumer.config().stream)
    }

    /// The host the certificate must name: with Sentinel, or after a redirect, the host
    /// connected to as named (cluster nodes and sentinels name nodes by IP address); else the
    /// one configured.
    fn tls_host(&self) -> Option<String> {
        let (_, configured) = self.tls.as_ref()?;
        let named =
            matches!(self.locator.endpoint(), Endpoint::Sentinel(_)) || self.consumer.redirect().is_some();
        Some(if named || configured.is_empty() { self.tls_name.clone() } else { configured.clone() })
    }

    fn connect_failed(&mut self, registry: &Registry, now: Instant, reason: impl std::fmt::Display) {
        self.close(registry);
        self.attempts += 1;
        let tried = self.peer.map_or_else(String::new, |peer| format!("{peer}: "));
        self.consumer.on_disconnected_because(now, format_args!("{tried}{reason}"));
        self.link_down(registry, false);
        self.again();
    }

    /// The consumer's connection is down (`was_up`: after the server answered on it): the
    /// locator decides where next; with Sentinel the master is asked for again, on a new
    /// connection (a watch cannot ask).
    fn link_down(&mut self, registry: &Registry, was_up: bool) {
        self.locator.on_link_down(was_up);
        if self.locator.master().is_none() && self.scout.as_ref().is_some_and(Scout::answered) {
            if let Some(watch) = self.scout.take() {
                watch.close(registry);
            }
        }
    }

    /// The link is gone: drive again at once, whatever the consumer's deadlines say. A stop
    /// waiting on the server may have ended with it (`Stopped` is ready, and no deadline
    /// would bring it out), and its notices are to be told.
    fn again(&mut self) {
        self.asap = Some(Instant::now());
    }

    /// The connection is lost: close it, tell the consumer (which schedules a reconnect).
    fn disconnected(&mut self, registry: &Registry, now: Instant, reason: impl std::fmt::Display) {
        self.close(registry);
        self.consumer.on_disconnected_because(now, reason);
        self.link_down(registry, self.heard);
        self.again();
    }

    /// The consumer returned an error: the connection is done. Fatal errors end the driver.
    fn failed(&mut self, registry: &Registry, err: pelican::Error) -> Result<Status, DriveError> {
        self.close(registry);
        self.link_down(registry, self.heard);
        self.again();
        if err.is_fatal() {
            log::error!("{}: gave up: {err}", self.name());
            Err(DriveError::Consumer(err))
        } else {
            Ok(Status::Running)
        }
    }

    /// A read or write failed: the connection is lost, or TLS failed for good.
    fn io_failed(
        &mut self,
        registry: &Registry,
        err: &io::Error,
        now: Instant,
    ) -> Result<Status, DriveError> {
        let handshaking = matches!(&self.link, Link::Securing { .. });
        let tls = err.get_ref().and_then(|e| e.downcast_ref::<RustlsError>());
        if let (Some(tls_err), Some((config, host))) = (tls, &self.tls) {
            let explained = config.explain(tls_err, host);
            // The handshake's failures are fatal, and a server refusing the client's
            // certificate once it ended (TLS 1.3 says so after the handshake).
            let fatal = handshaking
                || matches!(
                    explained,
                    TlsError::ClientCertRequired { .. } | TlsError::ClientCertRefused { .. }
                );
            if fatal {
                self.fail_tls(registry, explained.clone());
                return Err(DriveError::Tls(explained));
            }
        }
        // A TLS port resets a plaintext client before a word (PROTOCOL.md 28).
        let reset = matches!(err.kind(), io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe);
        if self.tls.is_none() && !self.heard && reset {
            self.quiet += 1;
            if self.quiet >= QUIET_LIMIT {
                let addr = self.peer.map_or_else(String::new, |peer| peer.to_string());
                let err = TlsError::ServerWantsTls { addr, attempts: self.quiet };
                self.fail_tls(registry, err.clone());
                return Err(DriveError::Tls(err));
            }
        }
        self.disconnected(registry, now, err);
        Ok(Status::Running)
    }

    fn close(&mut self, registry: &Registry) {
        match std::mem::replace(&mut self.link, Link::Idle) {
            Link::Idle => {}
            Link::Connecting { mut stream, .. } => {
                // Dropping the socket closes it; the registration goes with it either way.
                let _ = registry.deregister(&mut stream);
            }
            Link::Securing { mut conn, .. } | Link::Up { mut conn } => {
                let _ = registry.deregister(conn.socket());
            }
        }
    }

    /// Writes, hands out entries and reads until the socket would block both ways (or the
    /// read budget is spent).
    fn exchange(
        &mut self,
        registry: &Registry,
        hand: &mut impl FnMut(Entry) -> Option<Verdict>,
        observe: &mut impl FnMut(Notice),
        requests: &mut impl FnMut(&mut Consumer),
    ) -> Result<Status, DriveError> {
        let mut reads = 0;
        let mut deadlines_checked = false;
        loop {
            let now = Instant::now();
            let write_blocked = match self.flush() {
                Ok(blocked) => blocked,
                Err(e) => {
                    let _running = self.io_failed(registry, &e, now)?;
                    false
                }
            };
            while let Some(event) = self.consumer.poll_event() {
                match event {
                    Event::Entry(entry) => {
                        let held = entry.clone();
                        let Some(verdict) = hand(entry) else { continue };
                        // Stop before settling: the settle then flushes the earned acks (a
                        // stop after it would leave them unwritten behind the dropped batch).
                        requests(&mut self.consumer);
                        self.consumer.settle_entry(&held, verdict, Instant::now());
                        // What the settle sent (a slow handler's ack, a renewal of the next
                        // entries' lease) goes out before the next handler runs; a failed
                        // write shows again at the next flush.
                        let _ = self.flush();
                    }
                    Event::Notice(notice) => {
                        if let Some(line) = self.retell.line(&notice, Instant::now()) {
                            log_notice(&self.name(), &notice, &line);
                        }
                        observe(notice)
                    }
                    Event::Stopped => {
                        // An abandon's parting write (see `Consumer::abandon`), if it goes
                        // without waiting.
                        let _ = self.flush();
                        self.close(registry);
                        if let Some(scout) = self.scout.take() {
                            scout.close(registry);
                        }
                        self.stopped = true;
                        return Ok(Status::Stopped);
                    }
                    // Events this driver does not know yet need nothing from it.
                    _ => {}
                }
            }
            if matches!(self.link, Link::Up { .. }) && self.consumer.wants_connection() {
                // The consumer dropped this connection (a stop leaving the group from a parked
                // read): a new one at once.
                self.close(registry);
                self.asap = Some(now);
                return Ok(Status::Running);
            }
            let Link::Up { conn } = &mut self.link else {
                return Ok(Status::Running);
            };
            if self.consumer.poll_transmit().is_some() && !write_blocked {
                continue; // settling earned acks and the next read: write them first
            }
            if reads == READ_BUDGET {
                self.asap = Some(now);
                return Ok(Status::Running);
            }
            match conn.read(&mut self.buf) {
                Ok(0) => {
                    self.disconnected(registry, now, "the server closed the connection");
                    return Ok(Status::Running);
                }
                Ok(n) => {
                    reads += 1;
                    if !self.heard {
                        self.heard = true;
                        self.quiet = 0;
                    }
                    if let Err(err) = self.consumer.handle_input(&self.buf[..n], Instant::now()) {
                        return self.failed(registry, err);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // Everything readable is in, so a reply still missing past its deadline
                    // is late (checking earlier could blame a reply waiting in the socket
                    // while a slow handler ran).
                    let now = Instant::now();
                    if deadlines_checked || self.consumer.poll_timeout().is_none_or(|at| at > now) {
                        return Ok(Status::Running);
                    }
                    deadlines_checked = true;
                    if let Err(err) = self.consumer.handle_timeout(now) {
                        return self.failed(registry, err);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.io_failed(registry, &e, now),
            }
        }
    }

    /// Writes what the consumer has to send. `Ok(true)` if the socket would block with bytes
    /// left (a writable event will follow).
    fn flush(&mut self) -> io::Result<bool> {
        let Link::Up { conn } = &mut self.link else { return Ok(false) };
        while let Some(bytes) = self.consumer.poll_transmit() {
            match conn.write(bytes) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.consumer.advance_transmit(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        conn.flush()
    }
}

/// How many untaken notices a [`Driver`] keeps (the oldest go first).
pub const NOTICES_KEPT: usize = 1024;

fn keep_notice(notices: &mut VecDeque<Notice>, notice: Notice) {
    if notices.len() == NOTICES_KEPT {
        notices.pop_front();
    }
    notices.push_back(notice);
}

/// A notice through the `log` facade, as `line` tells it: trouble (a lost connection, a lost
/// lease, a dead letter) as a warning, the rest as information; the group's health at debug
/// level.
fn log_notice(stream: &str, notice: &Notice, line: &str) {
    let level = match notice {
        _ if notice.is_trouble() => log::Level::Warn,
        Notice::Health(_) => log::Level::Debug,
        _ => log::Level::Info,
    };
    log::log!(level, "{stream}: {line}");
}

/// Whether a non-blocking connect has finished: `Ok(true)` connected, `Ok(false)` still
/// under way, `Err` failed (the recipe from `mio::net::TcpStream::connect`'s docs).
pub(crate) fn connect_outcome(stream: &TcpStream) -> io::Result<bool> {
    if let Some(err) = stream.take_error()? {
        return Err(err);
    }
    match stream.peer_addr() {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
        Err(e) => Err(e),
    }
}
