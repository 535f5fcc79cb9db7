//! Counters a consumer keeps; read them with [`Consumer::stats`](crate::Consumer::stats).

/// One stream's part of a consumer's counts ([`Consumer::stream_stats`](crate::Consumer::stream_stats)):
/// what a consumer of many streams did on each. The consumer's [`Stats`] are the totals.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamStats {
    /// Entries handed out from this consumer's own pending list of the stream.
    pub drained: u64,
    /// Entries of the stream handed out after a reclaim took them.
    pub claimed: u64,
    /// New entries of the stream handed out.
    pub new: u64,
    /// Entries the server confirmed acknowledged (commits included).
    pub acked: u64,
    /// `Retry` verdicts.
    pub retried: u64,
    /// Entries moved to the dead-letter stream.
    pub dead_lettered: u64,
    /// Entries committed with their writes.
    pub committed: u64,
    /// Entries a peer took from this consumer (a lease lost).
    pub leases_lost: u64,
    /// Times the stream's group was found gone and made again.
    pub group_recreated: u64,
    /// Retries that wait (see [`Stats::retries_delayed`]).
    pub retries_delayed: u64,
}

/// Cumulative counts since the consumer was created.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Entries handed out from this consumer's own pending list (the drain).
    pub drained: u64,
    /// Entries handed out after `XAUTOCLAIM` took them.
    pub claimed: u64,
    /// New entries handed out (read with `>`).
    pub new: u64,
    /// Entries the server confirmed acknowledged (`XACK` counted them).
    pub acked: u64,
    /// `Retry` and `RetryAfter` verdicts.
    pub retried: u64,
    /// Entries released (`XNACK`, Redis 8.8+): given `Retry`, or read and dropped unhandled
    /// at a stop or a lost connection. The next read of any consumer takes them at once.
    pub released: u64,
    /// Pending entries whose message was deleted (`XDEL`/`XTRIM`): never handed out; acked
    /// away when their id is known.
    pub deleted_seen: u64,
    /// Acks the server did not count for entries a peer could have taken: held in hand past
    /// `min_idle` since they were last read or renewed, or whose lease was found lost. A
    /// peer had reclaimed (and acked) the entry first.
    pub lost_to_peer: u64,
    /// Acks the server did not count for entries no peer could have taken (always leased):
    /// the server no longer had them pending. A server restarted from an append-only file
    /// that missed the read forgets the delivery; a group deleted and made again forgets
    /// every one. The entry may be delivered again.
    pub acks_unmatched: u64,
    /// Acks (and dead-letter moves) that had not reached the replicas (or append-only files)
    /// [`Config::ack_wait`](crate::Config::ack_wait) asks for when its wait ran out: a
    /// failover before they get there would bring their entries back.
    pub acks_unreplicated: u64,
    /// Connections after the first.
    pub reconnects: u64,
    /// Cluster redirects (`MOVED`) followed to the node now serving the stream's slot.
    pub moved: u64,
    /// Errors that cost the connection or stopped the consumer.
    pub errors: u64,
    /// Times the group was created again after the server said it was gone.
    pub group_recreated: u64,
    /// Acks (and dead-letter moves) given up unconfirmed by
    /// [`Consumer::abandon`](crate::Consumer::abandon): their entries stay pending and are
    /// delivered again.
    pub abandoned_acks: u64,
    /// Entries whose ownership was renewed (`XCLAIM … JUSTID`) while they waited in the
    /// buffer or in hand.
    pub leases_renewed: u64,
    /// Entries found taken by a peer (or deleted) before they were handed out, dropped from
    /// the buffer, or while in hand ([`Notice::LeaseLost`](crate::Notice::LeaseLost)).
    pub leases_lost: u64,
    /// Entries moved to the dead-letter stream ([`Notice::DeadLettered`](crate::Notice::DeadLettered)).
    pub dead_lettered: u64,
    /// Entries settled by [`Verdict::Commit`](crate::Verdict::Commit) whose writes and ack
    /// were made (also counted in [`acked`](Self::acked)).
    pub committed: u64,
    /// Commits fenced off: the entry was no longer this consumer's with the same delivery
    /// ([`Notice::CommitFenced`](crate::Notice::CommitFenced)). Nothing written.
    pub commits_fenced: u64,
    /// Commits refused as they stood: a write would have failed
    /// ([`Notice::CommitRefused`](crate::Notice::CommitRefused)). Nothing written; the
    /// entry stays pending.
    pub commits_refused: u64,
    /// Times the read size was cut ([`Notice::ReadShrunk`](crate::Notice::ReadShrunk)).
    pub reads_shrunk: u64,
    /// How long handlers took: from each entry's hand-out to its settle.
    pub handler_time: HandlerTimes,
    /// Retries that wait — [`Verdict::RetryAfter`](crate::Verdict::RetryAfter), and `Retry`
    /// under [`OnRetry::Backoff`](crate::OnRetry::Backoff), the default — each also counted
    /// in [`retried`](Self::retried): entries parked with the group until due.
    pub retries_delayed: u64,
}

impl Stats {
    /// Entries handed out, by any path: drained, claimed and new.
    pub fn handed_out(&self) -> u64 {
        self.drained + self.claimed + self.new
    }

    /// Entries settled (a verdict given, whichever): the handlers timed.
    pub fn handled(&self) -> u64 {
        self.handler_time.count()
    }
}

/// A histogram of handler times, in the buckets Prometheus uses for durations by default
/// (5 ms to 10 s, and more): what a `…_duration_seconds` histogram exports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HandlerTimes {
    /// Handlers timed in each bucket: `counts[i]` took at most [`HandlerTimes::BOUNDS`]`[i]`
    /// (and more than the bound before); the last counts those past every bound.
    pub counts: [u64; HandlerTimes::BOUNDS.len() + 1],
    /// All their times added up.
    pub sum: std::time::Duration,
}

impl HandlerTimes {
    /// The buckets' upper bounds, in seconds (Prometheus's default buckets).
    pub const BOUNDS: [f64; 11] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

    /// Records one handler's time.
    pub fn record(&mut self, took: std::time::Duration) {
        let secs = took.as_secs_f64();
        let i = Self::BOUNDS.iter().position(|b| secs <= *b).unwrap_or(Self::BOUNDS.len());
        self.counts[i] += 1;
        self.sum += took;
    }

    /// How many handlers were timed.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// A consumer's state at one moment: its counters, the entries in hand and buffered, and
/// whether it is connected. [`Consumer::snapshot`](crate::Consumer::snapshot) takes one; the
/// transports publish them while they run, for other threads to read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Snapshot {
    /// The counters since the consumer was created.
    pub stats: Stats,
    /// Entries handed out and not yet settled
    /// ([`Consumer::in_hand`](crate::Consumer::in_hand)).
    pub in_hand: usize,
    /// Entries read and waiting to be handed out
    /// ([`Consumer::buffered`](crate::Consumer::buffered)).
    pub buffered: usize,
    /// True while a connection is up to a node that answered as a master (a replica, or a
    /// node still answering the handshake, is not counted as connected).
    pub connected: bool,
    /// The group's health as last asked ([`Config::health_every`](crate::Config::health_every);
    /// `None` until the first answer, or if never asked).
    pub health: Option<crate::GroupHealth>,
    /// While not connected because the node reached answers as a replica: what it is (`a
    /// replica of 10.0.0.1:6379`, as [`Notice::NotMaster`](crate::Notice::NotMaster) says).
    pub not_master: Option<String>,
    /// The entry in hand the longest, if any ([`Consumer::oldest_in_hand`](crate::Consumer::oldest_in_hand)):
    /// a handler that never gives its verdict shows here, its age growing.
    pub oldest_in_hand: Option<OldestInHand>,
    /// Nothing left to read as of the server's last answers
    /// ([`Consumer::is_caught_up`](crate::Consumer::is_caught_up)): for a batch job, on
    /// another thread, to end once it has handled everything that was there.
    pub caught_up: bool,
}

/// The entry a consumer has held the longest without a verdict: which, and since when.
/// Read with [`Consumer::oldest_in_hand`](crate::Consumer::oldest_in_hand) or in a
/// [`Snapshot`]; its [`age`](Self::age) is asked with the time now, so a snapshot read
/// later (by a health check on another thread) still tells the age at that moment.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct OldestInHand {
    /// The stream it came from.
    pub stream: bytes::Bytes,
    /// Its id.
    pub id: bytes::Bytes,
    /// When it was handed out: the time passed to the consumer then (the transports pass
    /// the clock's time).
    pub since: std::time::Instant,
}

impl OldestInHand {
    /// The entry `id` of `stream`, in hand since `since` (what a driver of its own, or a
    /// test of a health check, reports).
    pub fn new(
        stream: impl Into<bytes::Bytes>,
        id: impl Into<bytes::Bytes>,
        since: std::time::Instant,
    ) -> Self {
        OldestInHand { stream: stream.into(), id: id.into(), since }
    }

    /// How long it has been in hand at `now` (zero if `now` is earlier).
    pub fn age(&self, now: std::time::Instant) -> std::time::Duration {
        now.saturating_duration_since(self.since)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn handler_times_fall_in_their_buckets() {
        let mut times = HandlerTimes::default();
        for ms in [1, 5, 6, 240, 250, 251, 10_000, 10_001, 60_000] {
            times.record(Duration::from_millis(ms));
        }
        assert_eq!(times.counts, [2, 1, 0, 0, 0, 2, 1, 0, 0, 0, 1, 2]);
        assert_eq!(times.count(), 9);
        let stats = Stats { drained: 1, claimed: 2, new: 7, handler_time: times.clone(), ..Stats::default() };
        assert_eq!((stats.handed_out(), stats.handled()), (10, 9));
        assert_eq!(times.sum, Duration::from_millis(1 + 5 + 6 + 240 + 250 + 251 + 10_000 + 10_001 + 60_000));
    }
}
