//! Many streams in one call: one runner (one consumer, one connection) per stream, all
//! polled inside one future, one handler for all.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::FuturesUnordered;
use pelican::cluster::{read_slot_map, SlotMap, SLOTS_REQUEST};
use pelican::{Config, Consumer, Endpoint, Entry, HostPort, IntoEndpoint, Notice, Stats, Verdict};
use smol::future;
use smol::io::{AsyncReadExt, AsyncWriteExt};
use smol::net::TcpStream;
use smol::stream::StreamExt;
use smol::Timer;

use crate::error::RunError;
use crate::resolve::{checked, checked_async, redirect_addr, resolve};
use crate::run::{Runner, DEFAULT_CONNECT_TIMEOUT};
use crate::stats::StatsHandle;
use crate::stop::StopHandle;
#[cfg(feature = "tls")]
use crate::tls::Tls;

/// Each stream's counters when the run ends, in the order of the configurations.
pub type StreamStats = Vec<(Bytes, Stats)>;

/// Several streams consumed in one call: one consumer (and one connection) per [`Config`],
/// each a [`Runner`] of its own, all polled inside the one future [`run`](Self::run)
/// returns, one handler for all, which is given each entry's stream. What the lanes of
/// `pelican consume --stream a --stream b` do.
///
/// - Each stream has up to its [`Config::concurrency`] handler futures at once, polled in
///   place (not spawned), as with [`Runner::run`].
/// - One [`StopHandle`] stops them all ([`stop`](StopHandle::stop),
///   [`stop_within`](StopHandle::stop_within), [`abandon`](StopHandle::abandon)); a
///   [`StatsHandle`] per stream reads each one's counters while they run.
/// - A stream that fails for good, or whose handler panics, stops the others through that
///   stop handle (their entries in hand finish, their earned acks are confirmed), and the run
///   returns its error as [`RunError::Stream`], naming it.
/// - In a cluster, give the address of any node: before the streams connect, that node is
///   asked once which master serves each stream (`CLUSTER SLOTS`, plaintext only), and each
///   stream starts there; a stream that lands elsewhere (over TLS, a slot migrated since)
///   follows the `MOVED` it gets. On a server that is not a cluster node the question costs
///   one short connection.
///
/// The consumer names, as usual, tell the connections apart: several streams under one
/// consumer name are not twins (the default connection name holds the stream); the same
/// stream twice under one consumer name is, and is refused ([`pelican::Error::Twin`]).
///
/// ```no_run
/// use pelican::{Config, Entry, Verdict};
/// use pelican_smol::Streams;
///
/// struct Db; // the application's own client
/// impl Db {
///     async fn write(&self, _stream: &[u8], _entry: &Entry) { /* its own I/O */ }
/// }
///
/// let db = Db;
/// let configs = ["orders", "refunds", "invoices"]
///     .map(|stream| Config::new(stream, "billing", "worker-1").create_group("$").concurrency(8));
/// let streams = Streams::new("127.0.0.1:6379", configs)?;
/// let stop = streams.stop_handle(); // stops every stream
/// let db = &db; // borrowed by every handler future
/// let stats = smol::block_on(streams.run(|stream, entry| async move {
///     db.write(&stream, &entry).await;
///     Verdict::Ack
/// }))?;
/// for (stream, stats) in stats {
///     println!("{}: {} acked", String::from_utf8_lossy(&stream), stats.acked);
/// }
/// # Ok::<(), pelican_smol::RunError>(())
/// ```
pub struct Streams {
    runners: Vec<Runner>,
    /// Where every stream connects, unless the node it names is a cluster node that says
    /// which master serves each stream (each then starts there, and tries the others in turn
    /// when its own is gone).
    endpoint: Endpoint,
    tls: bool,
    connect_timeout: Duration,
    stop: StopHandle,
}

impl std::fmt::Debug for Streams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Streams")
            .field("runners", &self.runners)
            .field("endpoint", &self.endpoint)
            .field("stop", &self.stop)
            .finish_non_exhaustive()
    }
}

impl Streams {
    /// Validates each of `configs` (one stream each) and `addr` (as for
    /// [`Runner::new`]: any node of a cluster, or [`Sentinels`](pelican::Sentinels); a host
    /// name is looked up here, blocking, and again at every connect). Connects only in
    /// [`run`](Self::run). Inside a task, prefer [`resolve`](Self::resolve).
    pub fn new(
        addr: impl IntoEndpoint,
        configs: impl IntoIterator<Item = Config>,
    ) -> Result<Streams, RunError> {
        Streams::with_endpoint(checked(addr)?, configs)
    }

    /// Like [`new`](Self::new), but looks a host name up on smol's blocking-thread pool, so
    /// that the executor stays free meanwhile.
    pub async fn resolve(
        addr: impl IntoEndpoint,
        configs: impl IntoIterator<Item = Config>,
    ) -> Result<Streams, RunError> {
        Streams::with_endpoint(checked_async(addr).await?, configs)
    }

    fn with_endpoint(
        endpoint: Endpoint,
        configs: impl IntoIterator<Item = Config>,
    ) -> Result<Streams, RunError> {
        let stop = StopHandle::new();
        let runners = configs
            .into_iter()
            .map(|config| {
                let consumer = Consumer::new(config).map_err(RunError::Config)?;
                Ok(Runner::with_endpoint(consumer, endpoint.clone()).with_stop(stop.clone()))
            })
            .collect::<Result<Vec<_>, RunError>>()?;
        Ok(Streams { runners, endpoint, tls: false, connect_timeout: DEFAULT_CONNECT_TIMEOUT, stop })
    }

    /// Connects every stream over TLS, checking that the server's certificate names `host`
    /// (see [`Runner::tls`]). In a cluster the streams then start at the node given and
    /// follow `MOVED` to their masters.
    #[cfg(feature = "tls")]
    #[must_use]
    pub fn tls(mut self, tls: Tls, host: impl Into<String>) -> Streams {
        let host = host.into();
        self.runners = self.runners.into_iter().map(|runner| runner.tls(tls.clone(), host.clone())).collect();
        self.tls = true;
        self
    }

    /// Sets how long a TCP connect (and a TLS handshake) may take before it counts as
    /// failed (default [`DEFAULT_CONNECT_TIMEOUT`]); it bounds the question of where each
    /// stream is served too.
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Streams {
        self.runners = self.runners.into_iter().map(|runner| runner.connect_timeout(timeout)).collect();
        self.connect_timeout = timeout;
        self
    }

    /// Calls `observer` with each stream's [`Notice`]s, and the stream, as they happen,
    /// inside [`run`](Self::run).
    #[must_use]
    pub fn on_notice(mut self, observer: impl FnMut(&Bytes, &Notice) + Send + 'static) -> Streams {
        // Shared by the runners, each calling it in turn inside the one future: the lock is
        // never contended.
        let shared = Arc::new(Mutex::new(observer));
        self.runners = self
            .runners
            .into_iter()
            .map(|runner| {
                let (observer, stream) = (shared.clone(), runner.consumer().config().stream.clone());
                runner.on_notice(move |notice| {
                    (observer.lock().unwrap_or_else(PoisonError::into_inner))(&stream, notice);
                })
            })
            .collect();
        self
    }

    /// A handle that stops every stream from any task or thread.
    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    /// A [`StatsHandle`] per stream, in the order of the configurations: each reads its
    /// stream's counters, entries in hand and buffered, and connection while the run runs.
    pub fn stats_handles(&self) -> Vec<StatsHandle> {
        self.runners.iter().map(Runner::stats_handle).collect()
    }

    /// Runs every stream until stopped through the [`StopHandle`] (returning each stream's
    /// counters, in the order of the configurations), until one fails for good, or until the
    /// handler panics (both [`RunError::Stream`]).
    ///
    /// The handler is called with each entry's stream (a `Bytes` sharing the configuration's,
    /// no copy) and the entry, and its future is polled here, as with [`Runner::run`]: it may
    /// borrow what the caller owns. It is `Fn`, not `FnMut`: the streams' runners call it
    /// in turn, each holding it meanwhile. The future is `Send` when the handler is `Sync`
    /// and its futures are `Send`.
    pub async fn run<H, F>(self, handler: H) -> Result<StreamStats, RunError>
    where
        H: Fn(Bytes, Entry) -> F,
        F: Future<Output = Verdict>,
    {
        let Streams { mut runners, endpoint, tls, connect_timeout, stop } = self;
        let names: Vec<Bytes> = runners.iter().map(|r| r.consumer().config().stream.clone()).collect();
        if let (false, false, Endpoint::Node(node)) = (tls, runners.is_empty(), &endpoint) {
            let seeds = resolve(&node.host, node.port).await.unwrap_or_default();
            if let Some((homes, nodes)) = locate(&seeds, &names, connect_timeout).await {
                for (runner, home) in runners.iter_mut().zip(homes) {
                    if let Some(home) = home {
                        runner.lead_to(home, &nodes);
                    }
                }
            }
        }
        let handler = &handler;
        let mut lanes: FuturesUnordered<_> = runners
            .into_iter()
            .zip(names.iter().cloned())
            .enumerate()
            .map(|(i, (runner, stream))| async move {
                (i, runner.run(move |entry| handler(stream.clone(), entry)).await)
            })
            .collect();
        let mut stats: Vec<Stats> = vec![Stats::default(); names.len()];
        let mut failed = None;
        while let Some((i, outcome)) = lanes.next().await {
            match outcome {
                Ok(end) => stats[i] = end,
                Err(error) if failed.is_none() => {
                    stop.stop(); // the others end as for a stop
                    let stream = String::from_utf8_lossy(&names[i]).into_owned();
                    failed = Some(RunError::Stream { stream, error: Box::new(error) });
                }
                // Logged by its runner; the first is the one returned.
                Err(_) => {}
            }
        }
        match failed {
            Some(error) => Err(error),
            None => Ok(names.into_iter().zip(stats).collect()),
        }
    }
}

/// The master serving each of `keys`, as the first of `seeds` that answers says
/// (`CLUSTER SLOTS`, each attempt bounded by `timeout`), and every master of the cluster;
/// `None` if none says: not a cluster node (or one that wants a password first), or no
/// answer.
async fn locate(
    seeds: &[SocketAddr],
    keys: &[Bytes],
    timeout: Duration,
) -> Option<(Vec<Option<SocketAddr>>, Vec<HostPort>)> {
    for seed in seeds {
        let asked = future::or(async { Some(slot_map(*seed).await) }, async {
            Timer::after(timeout).await;
            None
        })
        .await;
        match asked {
            Some(Ok(map)) => {
                let mut homes = Vec::with_capacity(keys.len());
                for key in keys {
                    let home = match map.owner_of_key(key) {
                        Some(node) => redirect_addr(&node.host, node.port, *seed).await,
                        None => None,
                    };
                    homes.push(home);
                }
                let nodes = map
                    .masters()
                    .iter()
                    .map(|node| match node.host.as_str() {
                        "" => HostPort::new(seed.ip().to_string(), node.port),
                        host => HostPort::new(host, node.port),
                    })
                    .collect();
                return Some((homes, nodes));
            }
            // An answer that is not a slot map: the other addresses are the same server.
            Some(Err(e)) if e.kind() == io::ErrorKind::InvalidData => return None,
            Some(Err(e)) => log::debug!("{seed}: where the streams are served: {e}"),
            None => log::debug!("{seed}: where the streams are served: no answer within {timeout:?}"),
        }
    }
    None
}

/// `CLUSTER SLOTS`, asked of `node` on a connection of its own.
async fn slot_map(node: SocketAddr) -> io::Result<SlotMap> {
    let mut socket = TcpStream::connect(node).await?;
    socket.write_all(SLOTS_REQUEST).await?;
    let mut reply = Vec::new();
    let mut chunk = vec![0; 16 * 1024];
    loop {
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        reply.extend_from_slice(&chunk[..n]);
        match read_slot_map(&reply) {
            Ok(Some(map)) => return Ok(map),
            Ok(None) => {}
            Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
        }
    }
}
