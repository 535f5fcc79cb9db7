//! Prometheus metrics and a health check for [`pelican`] consumers (of Redis/Valkey Streams
//! consumer groups), run by either transport, `pelican-mio` or `pelican-smol`.
//!
//! A [`Metrics`] reads each stream's consumer through a function that returns its
//! [`Snapshot`](pelican::Snapshot) — a transport's `StatsHandle::get` (`pelican-mio`, `pelican-smol`), or
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
mod exporter;
mod serve;

pub use encode::{Labels, CONTENT_TYPE};
pub use exporter::{Heartbeat, Metrics};
pub use serve::Serving;

#[cfg(test)]
mod tests;
