//! The blocking common case: one consumer on its own `Poll`, until stopped or failed.

use std::fmt;
use std::io;
use std::net::ToSocketAddrs;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Events, Poll, Token, Waker};
use pelican::{Config, ConfigError, Consumer, Entry, Stats, Verdict};

use crate::driver::{Driver, Status, StopFlags};

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
///     println!("{:?}", entry.id);
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
#[derive(Debug)]
pub struct Runner {
    poll: Poll,
    driver: Driver,
    stop: StopHandle,
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

    /// Sets how long a TCP connect may take before it counts as a failed attempt (default
    /// [`DEFAULT_CONNECT_TIMEOUT`](crate::DEFAULT_CONNECT_TIMEOUT)).
    pub fn connect_timeout(mut self, timeout: Duration) -> Runner {
        self.driver = self.driver.connect_timeout(timeout);
        self
    }

    fn with_driver(driver: Driver) -> Result<Runner, RunError> {
        let poll = Poll::new().map_err(RunError::Io)?;
        let waker = Waker::new(poll.registry(), WAKER).map_err(RunError::Io)?;
        let stop = StopHandle { inner: Arc::new(StopInner { flags: StopFlags::default(), waker }) };
        Ok(Runner { poll, driver, stop })
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
    /// until the consumer fails for good ([`RunError::Consumer`]). Lost connections and
    /// errors a reconnect can fix are handled inside, with the consumer's backoff.
    pub fn run(mut self, mut handler: impl FnMut(&Entry) -> Verdict) -> Result<Stats, RunError> {
        let mut events = Events::with_capacity(8);
        let flags = &self.stop.inner.flags;
        loop {
            let status = self
                .driver
                .drive_until(self.poll.registry(), &mut handler, Some(flags))
                .map_err(RunError::Consumer)?;
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

/// Stops a [`Runner`] from any thread: the consumer finishes the entry in hand, confirms
/// its earned acks and returns. Cheap to clone; stopping twice is harmless.
#[derive(Clone, Debug)]
pub struct StopHandle {
    inner: Arc<StopInner>,
}

#[derive(Debug)]
struct StopInner {
    flags: StopFlags,
    waker: Waker,
}

impl StopHandle {
    /// Asks the runner to stop and wakes its poll. Returns at once; the runner's `run`
    /// returns when the consumer has stopped. Before `run` starts, `run` stops at once.
    pub fn stop(&self) {
        self.inner.flags.requested.store(true, Ordering::Release);
        // A failed wake leaves the flag set: the runner sees it at its next wake-up.
        let _ = self.inner.waker.wake();
    }

    /// Asks the runner to stop without waiting on the server (see
    /// [`Consumer::abandon`](pelican::Consumer::abandon)), e.g. when a [`stop`](Self::stop)
    /// waits on an unreachable server to confirm acks. A handler already running finishes
    /// (it cannot be interrupted) but its verdict is not sent; acks not yet confirmed are
    /// given up, and their entries stay pending, to be delivered again.
    pub fn abandon(&self) {
        self.inner.flags.abandoned.store(true, Ordering::Release);
        self.stop();
    }

    /// True once [`stop`](Self::stop) or [`abandon`](Self::abandon) has been called on any
    /// clone.
    pub fn is_requested(&self) -> bool {
        self.inner.flags.requested.load(Ordering::Acquire)
    }
}

/// Why [`run`] or [`Runner`] gave up.
#[derive(Debug)]
#[non_exhaustive]
pub enum RunError {
    /// The configuration was refused.
    Config(ConfigError),
    /// The address did not resolve, or resolved to nothing.
    Resolve(io::Error),
    /// The consumer failed for good ([`pelican::Error::is_fatal`]): wrong credentials, a
    /// missing group, a reply it cannot read…
    Consumer(pelican::Error),
    /// The `Poll` could not be created or polled.
    Io(io::Error),
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Config(e) => write!(f, "invalid configuration: {e}"),
            RunError::Resolve(e) => write!(f, "cannot resolve the server address: {e}"),
            RunError::Consumer(e) => write!(f, "consumer failed: {e}"),
            RunError::Io(e) => write!(f, "event loop failed: {e}"),
        }
    }
}

impl std::error::Error for RunError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RunError::Config(e) => Some(e),
            RunError::Resolve(e) | RunError::Io(e) => Some(e),
            RunError::Consumer(e) => Some(e),
        }
    }
}

impl From<ConfigError> for RunError {
    fn from(e: ConfigError) -> Self {
        RunError::Config(e)
    }
}

impl From<pelican::Error> for RunError {
    fn from(e: pelican::Error) -> Self {
        RunError::Consumer(e)
    }
}
