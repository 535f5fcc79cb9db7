//! Prometheus metrics and a health check for [`pelican`] consumers (of Redis/Valkey Streams
//! consumer groups), run by either transport, `pelican-mio` or `pelican-smol`.
//!
//! A [`Metrics`] reads each stream's consumer through a function that returns its
//! [`Snapshot`] — a transport's `StatsHandle::get` (`pelican-mio`, `pelican-smol`), or
//! anything else that has one — and turns them, at each scrape, into the Prometheus text
//! format ([`Metrics::encode`]) and two health verdicts ([`Metrics::live`],
//! [`Metrics::ready`]). [`Metrics::serve`] answers `GET /metrics`, `GET /livez` and `GET
//! /readyz` over HTTP on a thread of its own; reading a snapshot is all it asks of the
//! consumers, so it costs their loops nothing beyond what the stats handles already do.
//!
//! # Alive, and ready: two questions
//!
//! A probe that restarts a process must not fail for what a restart cannot mend. So the
//! health check is two verdicts, each on a path of its own:
//!
//! - **Alive** ([`Metrics::live`], `GET /livez`): the process answers, every loop given as a
//!   [`Heartbeat`] has turned within its limit, no entry has been in hand longer than
//!   [`Metrics::overdue_after`] (a handler gone silent holds its entry until the process
//!   ends), and every [`Metrics::live_check`] passes. It never fails because the server
//!   cannot be reached or is a replica: the consumer waits that out by itself, and
//!   restarting every worker during an outage of the server would mend nothing. A
//!   Kubernetes `livenessProbe`.
//! - **Ready** ([`Metrics::ready`], `GET /readyz`, and `GET /healthz` as before): alive,
//!   and every stream's consumer connected to a master, and every [`Metrics::check`] passes
//!   (`stopping`, a handler process that is down). A `readinessProbe`, a load balancer's
//!   check, an alert.
//!
//! ```no_run
//! use std::time::Duration;
//! use pelican::{Config, Verdict};
//! use pelican_metrics::{Labels, Metrics};
//!
//! // The group's gauges (pending, lag, the oldest pending entry's age) need its health asked.
//! let config = Config::new("orders", "billing", "w1").health_every(Duration::from_secs(5));
//! let runner = pelican_mio::Runner::new("127.0.0.1:6379", config)?;
//! let stats = runner.stats_handle();
//! let metrics = Metrics::new().stream(Labels::new("orders", "billing", "w1"), move || stats.get());
//! // Until `serving` is stopped or dropped: http://127.0.0.1:9464/metrics, /livez, /readyz.
//! let serving = metrics.serve("127.0.0.1:9464")?;
//! runner.run(|_entry| Verdict::Ack)?;
//! serving.stop();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The metrics
//!
//! Each sample has the labels `stream`, `group` and `consumer`. Counters (cumulative since
//! the consumer was created; named as in `pelican consume --stats-json`):
//!
//! | name | what |
//! |---|---|
//! | `pelican_entries_total{source}` | entries handed to the handler, by `source`: `pending` (its own backlog), `claimed` (reclaimed from an idle owner), `new` |
//! | `pelican_acked_total` | entries the server confirmed acknowledged |
//! | `pelican_retried_total` | `Retry` verdicts |
//! | `pelican_released_total` | entries released (`XNACK`, Redis 8.8+) |
//! | `pelican_retries_delayed_total` | retries that wait (`Verdict::RetryAfter`, or `Retry` under `OnRetry::Backoff`), parked with the group until due; also counted in `pelican_retried_total` |
//! | `pelican_dead_lettered_total` | entries moved to the dead-letter stream |
//! | `pelican_lost_to_peer_total` | acks not counted: a peer had reclaimed the entry |
//! | `pelican_leases_lost_total` | entries found taken by a peer while buffered or in hand |
//! | `pelican_leases_renewed_total` | entries whose ownership was renewed |
//! | `pelican_reconnects_total` | connections after the first |
//! | `pelican_deleted_seen_total` | pending entries found deleted |
//! | `pelican_acks_unmatched_total` | acks not counted: the server forgot the delivery |
//! | `pelican_acks_unreplicated_total` | acks that had not reached the replicas asked for (`--ack-replicas`) when the wait ran out |
//! | `pelican_moved_total` | cluster redirects followed |
//! | `pelican_errors_total` | errors that cost the connection or stopped the consumer |
//! | `pelican_group_recreated_total` | times the group was created again |
//! | `pelican_abandoned_acks_total` | acks given up unconfirmed |
//! | `pelican_reads_shrunk_total` | times the read size was cut |
//! | `pelican_committed_total` | entries whose commit (output writes and ack in one step) was made |
//! | `pelican_commits_fenced_total` | commits fenced off (no longer this consumer's delivery): nothing written |
//! | `pelican_commits_refused_total` | commits refused as they stood (a write would fail): nothing written |
//!
//! Gauges: `pelican_in_hand`, `pelican_in_hand_oldest_age_seconds` (how long the entry in
//! hand the longest has waited for its verdict, 0 when none is: a handler gone silent shows
//! as a line that climbs; [`Metrics::overdue_after`] makes it not alive past a limit),
//! `pelican_buffered`, `pelican_connected` (1 or 0), and, once
//! the group's health is known ([`pelican::Config::health_every`]), `pelican_group_pending`,
//! `pelican_group_lag` (Redis 7+/Valkey, when the server can tell),
//! `pelican_group_consumers` and `pelican_group_oldest_pending_age_seconds` (0 when nothing
//! is pending), and `pelican_dead_letters` (the stream's dead-letter stream's length, with
//! [`pelican::Config::dead_letter`] set; streams sharing one each report it). A gauge that is not known for a stream has no sample for it.
//!
//! Histogram: `pelican_handler_duration_seconds`, from each entry's hand-out to its settle,
//! in Prometheus's default buckets (5 ms to 10 s).
//!
//! # Minimum supported Rust version
//!
//! Rust 1.77 (`rust-version`), the core's. Raising it is a minor release (see the changelog's
//! semver policy).

#![forbid(unsafe_code)]

mod encode;
mod serve;

use std::net::ToSocketAddrs;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pelican::Snapshot;

pub use serve::Serving;

/// What a stream's samples are labelled with: `stream`, `group`, `consumer`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Labels {
    /// The stream's key, as text (escape names that are not UTF-8 as you show them
    /// elsewhere).
    pub stream: String,
    /// The group.
    pub group: String,
    /// The consumer's name.
    pub consumer: String,
}

impl Labels {
    /// The labels of `consumer` of `group` on `stream`.
    pub fn new(stream: impl Into<String>, group: impl Into<String>, consumer: impl Into<String>) -> Labels {
        Labels { stream: stream.into(), group: group.into(), consumer: consumer.into() }
    }

    /// The label set of a sample.
    fn set(&self) -> [(&str, &str); 3] {
        [("stream", &self.stream), ("group", &self.group), ("consumer", &self.consumer)]
    }

    /// The label set with one more label.
    fn with<'a>(&'a self, name: &'a str, value: &'a str) -> Vec<(&'a str, &'a str)> {
        let mut set = self.set().to_vec();
        set.push((name, value));
        set
    }
}

/// Reads a stream's latest snapshot.
type Read = Arc<dyn Fn() -> Snapshot + Send + Sync>;

/// A health check of the application's own.
type Check = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// A loop's heartbeat, with how long it may go unbeaten and what the loop is called.
type Beat = (String, Heartbeat, Duration);

/// A counter of the application's own: its name (without `_total`), its help, how to read it.
type Extra = (String, String, Arc<dyn Fn() -> u64 + Send + Sync>);

/// The streams whose consumers are exported, each read through a function that returns its
/// latest [`Snapshot`]. Cheap to clone (the functions are shared).
#[derive(Clone, Default)]
pub struct Metrics {
    streams: Vec<(Labels, Read)>,
    checks: Vec<Check>,
    /// The liveness checks of the application's own.
    live_checks: Vec<Check>,
    /// The loops that must keep turning.
    beats: Vec<Beat>,
    counters: Vec<Extra>,
    /// An entry in hand longer than this makes the consumer not alive.
    overdue: Option<Duration>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let streams: Vec<&Labels> = self.streams.iter().map(|(labels, _)| labels).collect();
        f.debug_struct("Metrics")
            .field("streams", &streams)
            .field("checks", &self.checks.len())
            .field("live_checks", &self.live_checks.len())
            .field("heartbeats", &self.beats.len())
            .finish()
    }
}

impl Metrics {
    /// No stream yet.
    pub fn new() -> Metrics {
        Metrics::default()
    }

    /// Adds a stream's consumer: `read` returns its latest snapshot (a transport's
    /// `StatsHandle::get`). It is called once per scrape and per health check, from the
    /// thread that asks, so it should not wait on the consumer's loop.
    #[must_use]
    pub fn stream(mut self, labels: Labels, read: impl Fn() -> Snapshot + Send + Sync + 'static) -> Metrics {
        self.streams.push((labels, Arc::new(read)));
        self
    }

    /// Adds a readiness check of the application's own, asked by [`ready`](Self::ready)
    /// (and [`healthy`](Self::healthy)) before the streams' connections: `Err(why)` makes
    /// it not ready (e.g. `stopping`, or a handler process that is down and being started
    /// again). It does not touch [`live`](Self::live): see [`live_check`](Self::live_check).
    #[must_use]
    pub fn check(mut self, check: impl Fn() -> Result<(), String> + Send + Sync + 'static) -> Metrics {
        self.checks.push(Arc::new(check));
        self
    }

    /// Adds a liveness check of the application's own, asked by [`live`](Self::live) (and so
    /// by [`ready`](Self::ready) too): `Err(why)` for what only a restart mends — a state the
    /// process cannot leave by itself. Never for what it waits out (a server down).
    #[must_use]
    pub fn live_check(mut self, check: impl Fn() -> Result<(), String> + Send + Sync + 'static) -> Metrics {
        self.live_checks.push(Arc::new(check));
        self
    }

    /// Makes `loop_name` (e.g. `the event loop`) not alive once `beat` has not been
    /// [beaten](Heartbeat::beat) for longer than `limit`: a loop that is stuck (a deadlock, a
    /// call that never returns) is what a liveness probe is for. Beat it at every turn, and
    /// make the loop turn well within `limit` when it has nothing to do (a timeout on its
    /// wait).
    #[must_use]
    pub fn heartbeat(mut self, loop_name: impl Into<String>, beat: &Heartbeat, limit: Duration) -> Metrics {
        self.beats.push((loop_name.into(), beat.clone(), limit));
        self
    }

    /// Makes an entry in hand longer than `limit` not alive, and so not ready
    /// ([`live`](Self::live) names it and how long it has waited): a handler that has gone
    /// silent — it never answers, hangs, or writes to a pipe nobody reads — holds its entry
    /// for good, while its lease is renewed and the connection looks well; a restart ends it,
    /// and the entry goes to a peer. Set it above the longest a handler may rightly take.
    /// Without it, an entry may be in hand any time; the age shows in
    /// `pelican_in_hand_oldest_age_seconds` either way.
    #[must_use]
    pub fn overdue_after(mut self, limit: Duration) -> Metrics {
        self.overdue = Some(limit);
        self
    }

    /// Adds a counter of the application's own, without labels (e.g. the restarts of a
    /// handler process every stream shares): `name` without `_total` (the encoder adds it),
    /// `read` its value now.
    #[must_use]
    pub fn counter(
        mut self,
        name: impl Into<String>,
        help: impl Into<String>,
        read: impl Fn() -> u64 + Send + Sync + 'static,
    ) -> Metrics {
        self.counters.push((name.into(), help.into(), Arc::new(read)));
        self
    }

    /// Every stream's metrics now, in the Prometheus text format (version 0.0.4; serve it as
    /// [`CONTENT_TYPE`]). Each stream's snapshot is read once.
    pub fn encode(&self) -> String {
        let rows = self.streams.iter().map(|(labels, read)| (labels.clone(), read())).collect();
        let counters =
            self.counters.iter().map(|(name, help, read)| (name.clone(), help.clone(), read())).collect();
        encode::Scrape { rows, counters, now: Instant::now() }.text()
    }

    /// Alive: `Ok` while every [`live_check`](Self::live_check) passes, every
    /// [`heartbeat`](Self::heartbeat) was beaten within its limit and, with
    /// [`overdue_after`](Self::overdue_after), no entry has been in hand longer than its
    /// limit; else why not, in one line. Whether the server can be reached plays no part (see
    /// the [crate docs](crate#alive-and-ready-two-questions)).
    pub fn live(&self) -> Result<(), String> {
        for check in &self.live_checks {
            check()?;
        }
        for (name, beat, limit) in &self.beats {
            let since = beat.since();
            if since > *limit {
                return Err(format!(
                    "{name} has not turned for {} s (the limit is {} s)",
                    since.as_secs(),
                    seconds(*limit)
                ));
            }
        }
        let Some(limit) = self.overdue else { return Ok(()) };
        let now = Instant::now();
        let snapshots = self.streams.iter().map(|(_, read)| read());
        let oldest = snapshots.filter_map(|s| s.oldest_in_hand).min_by_key(|o| o.since);
        match oldest.filter(|o| o.age(now) > limit) {
            None => Ok(()),
            Some(o) => Err(format!(
                "entry {} of stream {} has been in hand for {} s with no verdict from its handler (the limit is {} s)",
                String::from_utf8_lossy(&o.id),
                String::from_utf8_lossy(&o.stream),
                o.age(now).as_secs(),
                seconds(limit)
            )),
        }
    }

    /// Ready to consume: `Ok` while [`live`](Self::live), every [`check`](Self::check)
    /// passes and every stream's consumer is connected to a master; else why not, in one
    /// line: what is not alive, the first check that fails, the node that is a replica, the
    /// streams not connected (no stream at all is not ready either: nothing is consumed).
    pub fn ready(&self) -> Result<(), String> {
        self.live()?;
        for check in &self.checks {
            check()?;
        }
        if self.streams.is_empty() {
            return Err("no stream to consume".into());
        }
        let snapshots: Vec<(&Labels, Snapshot)> = self.streams.iter().map(|(l, read)| (l, read())).collect();
        // A node that answers as a replica is reached, not read from: said as such.
        if let Some((labels, role)) =
            snapshots.iter().find_map(|(l, snap)| Some((*l, snap.not_master.as_ref()?)))
        {
            let streams = match snapshots.len() {
                1 => format!("stream {}", labels.stream),
                _ => format!("stream {} and perhaps others", labels.stream),
            };
            return Err(format!("connected to {role}, not a master: nothing is read ({streams})"));
        }
        let down: Vec<&str> =
            snapshots.iter().filter(|(_, s)| !s.connected).map(|(l, _)| &l.stream[..]).collect();
        match &down[..] {
            [] => Ok(()),
            [one] if self.streams.len() == 1 => Err(format!("not connected to the server (stream {one})")),
            several => Err(format!("not connected to the server: streams {}", several.join(", "))),
        }
    }

    /// The same verdict as [`ready`](Self::ready), by its older name (`GET /healthz`, which
    /// has always answered whether the consumer is consuming).
    pub fn healthy(&self) -> Result<(), String> {
        self.ready()
    }

    /// Serves [`encode`](Self::encode) at `GET /metrics`, [`live`](Self::live) at `GET
    /// /livez` and [`ready`](Self::ready) at `GET /readyz` and `GET /healthz` (each 200 `ok`,
    /// or 503 with why, one line) on `addr` (port 0: any free port; [`Serving::addr`] tells
    /// which), from a thread of its own, until the
    /// [`Serving`] is stopped or dropped. Other paths are 404, other methods 405; a request
    /// that is not HTTP gets a 400 or a closed connection, and the server goes on.
    pub fn serve(&self, addr: impl ToSocketAddrs) -> std::io::Result<Serving> {
        Serving::start(self.clone(), addr)
    }
}

/// A limit in seconds, as short as it can be written (`30`, `0.5`).
fn seconds(d: Duration) -> String {
    let text = format!("{:.3}", d.as_secs_f64());
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A loop's sign of life for [`Metrics::heartbeat`]: the loop [`beat`](Self::beat)s it at
/// every turn, and the liveness check asks how long ago the last beat was. Cheap to clone
/// and to beat (one atomic store); clones share the beat.
#[derive(Clone, Debug)]
pub struct Heartbeat {
    /// When it was made: beats are kept as nanoseconds since then, in one atomic.
    start: Instant,
    last: Arc<AtomicU64>,
}

impl Heartbeat {
    /// A heartbeat beaten now.
    pub fn new() -> Heartbeat {
        Heartbeat { start: Instant::now(), last: Arc::new(AtomicU64::new(0)) }
    }

    /// The loop turned: now is its last beat.
    pub fn beat(&self) {
        let nanos = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last.fetch_max(nanos, Relaxed);
    }

    /// How long ago the last beat was (or the heartbeat was made, if never beaten).
    pub fn since(&self) -> Duration {
        let last = self.start + Duration::from_nanos(self.last.load(Relaxed));
        Instant::now().saturating_duration_since(last)
    }
}

impl Default for Heartbeat {
    fn default() -> Heartbeat {
        Heartbeat::new()
    }
}

/// The `Content-Type` of [`Metrics::encode`]'s text: the Prometheus text format, 0.0.4.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

#[cfg(test)]
mod tests;
