//! The exposition: each stream's [`Snapshot`] as Prometheus metric families, written by
//! `prometheus-client`'s text encoder (the Prometheus text format, version 0.0.4).

use std::fmt;
use std::time::Instant;

use pelican::{HandlerTimes, Snapshot, Stats};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

/// The `Content-Type` of [`Metrics::encode`]'s text: the Prometheus text format, 0.0.4.
///
/// [`Metrics::encode`]: crate::Metrics::encode
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

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

/// A counter: its name (without `_total`, which the encoder adds), its help, and how to
/// read it from the consumer's [`Stats`].
type CounterDef = (&'static str, &'static str, Get);

/// A counter read from the consumer's [`Stats`].
type Get = fn(&Stats) -> u64;

/// The entries handed out, by the `source` label (the names `--exec` commands see in
/// `PELICAN_SOURCE`).
pub(crate) const SOURCES: [(&str, Get); 3] =
    [("pending", |s| s.drained), ("claimed", |s| s.claimed), ("new", |s| s.new)];

/// Every other [`Stats`] counter, named as in `pelican consume --stats-json`.
pub(crate) const COUNTERS: [CounterDef; 20] = [
    ("pelican_acked", "Entries the server confirmed acknowledged (XACK counted them).", |s| s.acked),
    ("pelican_retried", "Retry verdicts: entries left pending (or released) for another try.", |s| s.retried),
    (
        "pelican_released",
        "Entries released (XNACK, Redis 8.8+): retried, or read and dropped unhandled at a stop or a lost connection.",
        |s| s.released,
    ),
    (
        "pelican_retries_delayed",
        "Retries that wait (a retry_after, or a retry under the backoff): parked with the group until due; also in pelican_retried.",
        |s| s.retries_delayed,
    ),
    ("pelican_dead_lettered", "Entries moved to the dead-letter stream.", |s| s.dead_lettered),
    (
        "pelican_lost_to_peer",
        "Acks the server did not count because a peer had reclaimed (and acked) the entry first.",
        |s| s.lost_to_peer,
    ),
    (
        "pelican_leases_lost",
        "Entries found taken by a peer (or deleted) while buffered or in hand.",
        |s| s.leases_lost,
    ),
    ("pelican_leases_renewed", "Entries whose ownership was renewed while buffered or in hand.", |s| {
        s.leases_renewed
    }),
    ("pelican_reconnects", "Connections after the first.", |s| s.reconnects),
    (
        "pelican_deleted_seen",
        "Pending entries whose message was deleted (XDEL/XTRIM): never handed out.",
        |s| s.deleted_seen,
    ),
    (
        "pelican_acks_unmatched",
        "Acks the server did not count for entries no peer could have taken (the server forgot the delivery).",
        |s| s.acks_unmatched,
    ),
    (
        "pelican_acks_unreplicated",
        "Acks that had not reached the replicas (or append-only files) asked for when the wait ran out.",
        |s| s.acks_unreplicated,
    ),
    ("pelican_moved", "Cluster redirects (MOVED) followed.", |s| s.moved),
    ("pelican_errors", "Errors that cost the connection or stopped the consumer.", |s| s.errors),
    ("pelican_group_recreated", "Times the group was created again after the server said it was gone.", |s| {
        s.group_recreated
    }),
    ("pelican_abandoned_acks", "Acks (and dead-letter moves) given up unconfirmed at an abandon.", |s| {
        s.abandoned_acks
    }),
    ("pelican_reads_shrunk", "Times the read size was cut (slow handlers, big entries).", |s| s.reads_shrunk),
    ("pelican_committed", "Entries whose commit (writes and ack in one step) was made.", |s| s.committed),
    (
        "pelican_commits_fenced",
        "Commits fenced off: the entry was no longer this consumer's delivery; nothing written.",
        |s| s.commits_fenced,
    ),
    ("pelican_commits_refused", "Commits refused as they stood (a write would fail); nothing written.", |s| {
        s.commits_refused
    }),
];

/// A gauge: its name, its help, and how to read it from a snapshot at the scrape's time
/// (`None`: not known, so not exported for that stream).
type GaugeDef = (&'static str, &'static str, fn(&Snapshot, Instant) -> Option<f64>);

/// The gauges. The group's come from [`Snapshot::health`], which is known only once the
/// consumer asks for it ([`pelican::Config::health_every`]) and the server answers.
pub(crate) const GAUGES: [GaugeDef; 9] = [
    ("pelican_in_hand", "Entries handed out and not yet settled.", |s, _| Some(s.in_hand as f64)),
    (
        "pelican_in_hand_oldest_age_seconds",
        "How long the entry in hand the longest has waited for its handler's verdict; 0 when none is in hand.",
        |s, now| Some(s.oldest_in_hand.as_ref().map_or(0.0, |o| o.age(now).as_secs_f64())),
    ),
    ("pelican_buffered", "Entries read and waiting to be handed out.", |s, _| Some(s.buffered as f64)),
    ("pelican_connected", "1 while a connection to the server is up, else 0.", |s, _| {
        Some(if s.connected { 1.0 } else { 0.0 })
    }),
    (
        "pelican_group_pending",
        "Entries delivered to the group's consumers and not yet acknowledged (all consumers), as last asked.",
        |s, _| s.health.as_ref().map(|h| h.pending as f64),
    ),
    (
        "pelican_group_lag",
        "Entries in the stream not yet delivered to the group, as last asked (Redis 7+/Valkey; absent when the server cannot tell).",
        |s, _| s.health.as_ref().and_then(|h| h.lag).map(|lag| lag as f64),
    ),
    ("pelican_group_consumers", "The group's consumers, as last asked.", |s, _| {
        s.health.as_ref().map(|h| h.consumers as f64)
    }),
    (
        "pelican_group_oldest_pending_age_seconds",
        "Age of the group's oldest pending entry (server time less its id's time), as last asked; 0 when nothing is pending.",
        |s, _| s.health.as_ref().map(|h| h.oldest.as_ref().map_or(0.0, |o| o.age.as_secs_f64())),
    ),
    (
        "pelican_dead_letters",
        "Entries in the stream's dead-letter stream (XLEN), as last asked; absent without one.",
        |s, _| s.health.as_ref().and_then(|h| h.dead_letters).map(|n| n as f64),
    ),
];

/// The handler-time histogram's name.
pub(crate) const HISTOGRAM: &str = "pelican_handler_duration_seconds";

/// One scrape: each stream's labels and its snapshot, read once, and the application's own
/// counters (name, help, value).
#[derive(Debug)]
pub(crate) struct Scrape {
    pub(crate) rows: Vec<(Labels, Snapshot)>,
    pub(crate) counters: Vec<(String, String, u64)>,
    /// When the snapshots were read: ages are counted to it.
    pub(crate) now: Instant,
}

impl Scrape {
    /// The Prometheus text format of this scrape.
    pub(crate) fn text(self) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self));
        let mut text = String::new();
        // Writing to a String cannot fail; a collector error leaves what was written.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut text, &registry);
        text
    }
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        let handed_out = "Entries handed out to the handler, by source: pending (this consumer's own \
                          backlog), claimed (reclaimed from an idle owner), new.";
        let mut metric =
            encoder.encode_descriptor("pelican_entries", handed_out, None, MetricType::Counter)?;
        for (labels, snapshot) in &self.rows {
            for (source, get) in SOURCES {
                let set = labels.with("source", source);
                ConstCounter::new(get(&snapshot.stats)).encode(metric.encode_family(&set)?)?;
            }
        }
        for (name, help, get) in COUNTERS {
            let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (labels, snapshot) in &self.rows {
                let set = labels.set();
                ConstCounter::new(get(&snapshot.stats)).encode(metric.encode_family(&set)?)?;
            }
        }
        for (name, help, get) in GAUGES {
            let values: Vec<(&Labels, f64)> =
                self.rows.iter().filter_map(|(labels, s)| Some((labels, get(s, self.now)?))).collect();
            if values.is_empty() {
                continue; // a family with no sample is left out
            }
            let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (labels, value) in values {
                let set = labels.set();
                ConstGauge::new(value).encode(metric.encode_family(&set)?)?;
            }
        }
        let help = "How long handlers took, from each entry's hand-out to its settle.";
        let mut metric = encoder.encode_descriptor(HISTOGRAM, help, None, MetricType::Histogram)?;
        for (labels, snapshot) in &self.rows {
            let set = labels.set();
            let times = &snapshot.stats.handler_time;
            let buckets = buckets(times);
            let sum = times.sum.as_secs_f64();
            metric.encode_family(&set)?.encode_histogram::<NoLabelSet>(sum, times.count(), &buckets, None)?;
        }
        for (name, help, value) in &self.counters {
            let metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            ConstCounter::new(*value).encode(metric)?;
        }
        Ok(())
    }
}

/// Each bucket's upper bound and its own count (the encoder adds them up); the last one's
/// bound is `+Inf`.
fn buckets(times: &HandlerTimes) -> Vec<(f64, u64)> {
    HandlerTimes::BOUNDS.iter().copied().chain([f64::INFINITY]).zip(times.counts).collect()
}
