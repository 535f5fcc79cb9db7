//! Entries given `Retry` that the server can release (`XNACK`, Redis 8.8+): which may be
//! released (only those surely still this consumer's — `XNACK` checks no owner), when (at
//! once, after [`OnRetry::ReleaseAfter`]'s delay, or after a backoff that grows with the
//! deliveries), and the ids owed. The consumer sends them.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::acks::Acks;
use crate::config::{Config, OnRetry};

/// The first wait of [`OnRetry::Release`]'s backoff (see [`backoff`]).
const BACKOFF: Duration = Duration::from_millis(10);

#[derive(Debug, Default)]
pub(crate) struct Releases {
    /// Due now, as `XNACK` arguments.
    owed: Acks,
    /// Later, in order of due time.
    delayed: VecDeque<Delayed>,
}

#[derive(Debug)]
struct Delayed {
    due: Instant,
    id: Bytes,
    /// When it was last read or renewed: past the window it may be a peer's.
    read_at: Instant,
}

/// Whether an entry held this long since it was last read or renewed is surely still this
/// consumer's: no peer reclaims it before `min_idle`; halfway from the lease to that leaves
/// room for the server's clock.
pub(crate) fn surely_ours(config: &Config, held: Duration) -> bool {
    let lease = config.lease_threshold();
    held < lease + config.min_idle.saturating_sub(lease) / 2
}

/// How long [`OnRetry::Release`] waits before it releases an entry given `Retry` at its
/// `deliveries`-th delivery: nothing the first time; then 10 ms, ×4 each time (so that an
/// entry that keeps failing is not retried in a hot loop, this consumer's next read taking
/// back what it released); `None` (stays pending, back after `min_idle`) once that would
/// pass the lease.
fn backoff(config: &Config, deliveries: u64) -> Option<Duration> {
    if deliveries <= 1 {
        return Some(Duration::ZERO);
    }
    let times = 4u32.saturating_pow(u32::try_from(deliveries - 2).unwrap_or(u32::MAX).min(30));
    Some(BACKOFF.saturating_mul(times)).filter(|d| *d <= config.lease_threshold())
}

impl Releases {
    /// An entry in hand given `Retry` at `now`: `bulk` is its id as a bulk string, `read_at`
    /// when it was last read or renewed (`None`: lost to a peer). Queued for release as
    /// [`Config::on_retry`] says, if it is surely still ours.
    pub(crate) fn retry(
        &mut self,
        config: &Config,
        bulk: &[u8],
        id: impl FnOnce() -> Bytes,
        deliveries: u64,
        read_at: Option<Instant>,
        now: Instant,
    ) {
        let Some(read_at) = read_at.filter(|at| surely_ours(config, now.saturating_duration_since(*at)))
        else {
            return;
        };
        let delay = match config.on_retry {
            // (A backoff parks its entries instead: `crate::delay`.)
            OnRetry::StayPending | OnRetry::Backoff(_) => return,
            OnRetry::Release => match backoff(config, deliveries) {
                Some(delay) => delay,
                None => return,
            },
            OnRetry::ReleaseAfter(delay) => delay,
        };
        if delay.is_zero() {
            self.owed.push_bulk(bulk, false);
            return;
        }
        let due = now + delay;
        let at = self.delayed.partition_point(|d| d.due <= due);
        self.delayed.insert(at, Delayed { due, id: id(), read_at });
    }

    /// An entry in hand given back ([`Verdict::GiveBack`](crate::Verdict::GiveBack)), surely
    /// still ours: released at once, whatever [`Config::on_retry`] says.
    pub(crate) fn now(&mut self, bulk: &[u8]) {
        self.owed.push_bulk(bulk, false);
    }

    /// When the next delayed release is due.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.delayed.front().map(|d| d.due)
    }

    /// Moves the delayed releases due by `now` (all of them if `all`: a stop does not wait)
    /// to the owed ones, those still surely ours.
    pub(crate) fn come_due(&mut self, config: &Config, now: Instant, all: bool) {
        while self.delayed.front().is_some_and(|d| all || d.due <= now) {
            let Some(d) = self.delayed.pop_front() else { break };
            if surely_ours(config, now.saturating_duration_since(d.read_at)) {
                self.owed.push(&d.id);
            }
        }
    }

    /// The releases owed now, if any.
    pub(crate) fn take(&mut self) -> Option<Acks> {
        (!self.owed.is_empty()).then(|| self.owed.take(Acks::default()))
    }

    /// Nothing owed and nothing delayed.
    pub(crate) fn is_empty(&self) -> bool {
        self.owed.is_empty() && self.delayed.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_grows_then_leaves_the_entry_pending() {
        let config = Config::new("s", "g", "c").min_idle(Duration::from_secs(30)); // lease 15 s
        let waits: Vec<Option<u64>> =
            (1..=9).map(|n| backoff(&config, n).map(|d| d.as_millis() as u64)).collect();
        let want = [Some(0), Some(10), Some(40), Some(160), Some(640), Some(2560), Some(10240), None, None];
        assert_eq!(waits, want);
        assert_eq!(backoff(&config, u64::MAX), None);
    }

    #[test]
    fn only_entries_surely_ours_are_released() {
        let config = Config::new("s", "g", "c").min_idle(Duration::from_secs(30));
        assert!(surely_ours(&config, Duration::from_secs(22)));
        assert!(!surely_ours(&config, Duration::from_millis(22_500)));
        // Queued, due and dropped releases: `core/tests/redis8.rs` (the core reads no clock).
    }
}
