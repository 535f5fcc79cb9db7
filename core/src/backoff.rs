//! Reconnect delays: exponential, capped, with jitter from a caller-supplied seed (the core
//! has no randomness or clock of its own). The consumer's reconnects go through one
//! ([`Config::backoff`](crate::Config::backoff)); a client of its own (the command line's
//! one-shot commands) retries through the same.

use std::time::Duration;

/// Delays between attempts: between half and all of `min · 2^failures`, capped at `max`
/// ("equal jitter", from the seed given: give each process its own, so that a herd of them
/// spreads).
#[derive(Debug)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    failures: u32,
    rng: u64,
}

impl Backoff {
    /// Starting at `min`, at most `max`, jittered from `seed`.
    pub fn new(min: Duration, max: Duration, seed: u64) -> Backoff {
        Backoff { min, max, failures: 0, rng: seed }
    }

    /// The delay before the next attempt: between half and all of `min · 2^failures`, capped
    /// at `max`. Equal jitter keeps a floor while spreading a herd of reconnecting consumers.
    pub fn next_delay(&mut self) -> Duration {
        let ceiling = self.min.saturating_mul(1 << self.failures.min(20)).min(self.max);
        self.failures = self.failures.saturating_add(1);
        let half = ceiling / 2;
        let span = (ceiling - half).as_nanos() as u64;
        half + Duration::from_nanos(if span == 0 { 0 } else { self.random() % (span + 1) })
    }

    /// The connection proved healthy: start again from `min`.
    pub fn reset(&mut self) {
        self.failures = 0;
    }

    /// splitmix64.
    fn random(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_caps_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1), 7);
        let delays: Vec<_> = (0..8).map(|_| b.next_delay()).collect();
        for (i, d) in delays.iter().enumerate() {
            let ceiling = Duration::from_millis(100 << i).min(Duration::from_secs(1));
            assert!(*d >= ceiling / 2 && *d <= ceiling, "attempt {i}: {d:?}");
        }
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(100));
    }

    #[test]
    fn same_seed_same_delays_other_seed_other_delays() {
        let run = |seed| {
            let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(5), seed);
            (0..6).map(|_| b.next_delay()).collect::<Vec<_>>()
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
    }
}
