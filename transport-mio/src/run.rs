//! The blocking common case: one consumer on its own `Poll`, until stopped or failed.

use std::io;
use std::net::ToSocketAddrs;
use std::time::{Duration, Instant};

use mio::{Events, Poll, Token, Waker};
use pelican::{Config, Consumer, Entry, Notice, Stats, Verdict};

use crate::driver::{Driver, Status};
use crate::error::RunError;
use crate::stop::StopHandle;
use pelican_tls::Tls;

const CONSUMER: Token = Token(0);
const WAKER: Token = Token(1);

/// Consumes `config`'s stream from the server at `addr` on the calling thread, handing each
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
    addr: impl ToSocketAddrs,
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
    /// Resolves `addr` (a failed connect moves on to the next address it resolved to),
    /// validates `config` and creates the `Poll`. Connects only in [`run`](Self::run).
    pub fn new(addr: impl ToSocketAddrs, config: Config) -> Result<Runner, RunError> {
        let consumer = Consumer::new(config).map_err(RunError::Config)?;
        let mut addrs = addr.to_socket_addrs().map_err(RunError::Resolve)?;
        let first = addrs.next().ok_or_else(|| {
            RunError::Resolve(io::Error::new(io::ErrorKind::InvalidInput, "no address to connect to"))
        })?;
        Runner::with_driver(Driver::new(first, consumer, CONSUMER).fallback_addrs(addrs))
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
    pub fn tls(mut self, tls: Tls, host: impl Into<String>) -> Runner {
        self.driver = self.driver.tls(tls, host);
        self
    }

    /// Sets how long a TCP connect may take before it counts as a failed attempt (default
    /// [`DEFAULT_CONNECT_TIMEOUT`](crate::DEFAULT_CONNECT_TIMEOUT)).
    pub fn connect_timeout(mut self, timeout: Duration) -> Runner {
        self.driver = self.driver.connect_timeout(timeout);
        self
    }

    fn with_driver(driver: Driver) -> Result<Runner, RunError> {
        let poll = Poll::new().map_err(RunError::Io)?;
        let waker = Waker::new(poll.registry(), WAKER).map_err(RunError::Io)?;
        Ok(Runner { poll, driver, stop: StopHandle::new(waker), observer: None })
    }

    /// Calls `observer` with each [`Notice`] (connections, reclaims, leases lost, dead
    /// letters, smaller reads, health) as it happens, on the running thread.
    pub fn on_notice(mut self, observer: impl FnMut(&Notice) + Send + 'static) -> Runner {
        self.observer = Some(Box::new(observer));
        self
    }

    /// A handle that stops [`run`](Self::run) from any thread.
    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    /// The consumer, e.g. for its [`config`](Consumer::config).
    pub fn consumer(&self) -> &Consumer {
        self.driver.consumer()
    }

    /// Runs until stopped through a [`StopHandle`] (returning the consumer's counters) or
    /// until the consumer or TLS fails for good ([`RunError::Consumer`], [`RunError::Tls`]).
    /// Lost connections and
    /// errors a reconnect can fix are handled inside, with the consumer's backoff.
    ///
    /// The handler runs on this thread, so nothing else happens on the connection while it
    /// does: a handler running longer than `min_idle` can lose its entry to a peer, which
    /// handles it too (its `XACK` then counts 0: [`Stats::lost_to_peer`]). The entries
    /// waiting behind it are renewed before they are handed out, and reads shrink to what
    /// the handlers get through well within the lease. For handlers that may run that long,
    /// use a [`Driver`] with [`Driver::drive_deferred`], or `pelican-smol`.
    pub fn run(mut self, mut handler: impl FnMut(&Entry) -> Verdict) -> Result<Stats, RunError> {
        let mut events = Events::with_capacity(8);
        let flags = self.stop.flags();
        let mut observer = self.observer.take();
        let mut observe = |notice: Notice| {
            if let Some(observer) = observer.as_mut() {
                observer(&notice);
            }
        };
        loop {
            let status = self.driver.drive_until(
                self.poll.registry(),
                &mut |e| Some(handler(&e)),
                &mut observe,
                Some(flags),
            )?;
            if status == Status::Stopped {
                return Ok(self.driver.consumer().stats().clone());
            }
            let timeout = self.driver.next_deadline().map(|at| at.saturating_duration_since(Instant::now()));
            match self.poll.poll(&mut events, timeout) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(RunError::Io(e)),
            }
            // Whatever woke the poll (the socket, the waker, the deadline), driving again
            // does what is due.
        }
    }
}
