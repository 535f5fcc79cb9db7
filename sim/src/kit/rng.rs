//! The kit's only randomness: splitmix64, seeded from the world's seed.

/// splitmix64: tiny, fast, and good enough to draw schedules.
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator for one purpose of a world: each purpose (configuration, entries, faults,
    /// handlings) draws from its own, so that writing one out (a replay with the faults drawn
    /// made explicit) leaves the others' draws as they were.
    pub(crate) fn new(seed: u64, purpose: u64) -> Rng {
        let mut rng = Rng(seed ^ purpose.wrapping_mul(0xa076_1d64_78bd_642f));
        rng.next();
        rng
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// Uniform in `lo..hi` (`lo` when the range is empty).
    pub(crate) fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo))
    }

    /// True with `percent` % chance.
    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// The purposes, one generator each.
pub(crate) const SETUP: u64 = 1;
pub(crate) const ENTRIES: u64 = 2;
pub(crate) const FAULTS: u64 = 3;
pub(crate) const HANDLINGS: u64 = 4;
pub(crate) const KEYS: u64 = 5;
