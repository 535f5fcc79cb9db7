//! proptest strategies for worlds, fault schedules and entry streams (feature `proptest`).
//!
//! A failing property shrinks to a small world — fewer faults and entries, simpler fault
//! parameters, fewer consumers, a smaller seed — and proptest prints it as its minimal
//! failing input: a [`World`]'s `Debug` is the code that builds it again, seed included.
//!
//! ```
//! use pelican::Verdict;
//! use pelican_sim::kit::strategy::{self, Worlds};
//! use proptest::prelude::*;
//!
//! proptest! {
//!     #![proptest_config(ProptestConfig::with_cases(8))]
//!     // #[test] in a test file
//!     fn nothing_is_lost(world in strategy::worlds(Worlds::default())) {
//!         let report = world.run((), |_, _, _| Verdict::Ack);
//!         if let Err(failure) = report.check() {
//!             return Err(TestCaseError::fail(failure.to_string()));
//!         }
//!     }
//! }
//! # nothing_is_lost();
//! ```

use std::ops::RangeInclusive;

use proptest::prelude::*;
use proptest::sample::select;

use super::fault::{Fault, FaultKind};
use super::world::{NewEntry, World};

/// Field/value pairs of an entry.
pub type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// What [`worlds`] draws.
#[derive(Clone, Debug)]
pub struct Worlds {
    /// How many consumers.
    pub consumers: RangeInclusive<usize>,
    /// The most entries (at least one is added).
    pub max_entries: usize,
    /// The most faults scheduled.
    pub max_faults: usize,
    /// Entries and faults happen before this (virtual ms): the world's
    /// [`phase_ms`](World::phase_ms).
    pub phase_ms: u64,
    /// The kinds of faults scheduled.
    pub kinds: Vec<FaultKind>,
}

impl Default for Worlds {
    /// 1 to 4 consumers, up to 40 entries and 8 faults of every kind within 3 s.
    fn default() -> Worlds {
        Worlds {
            consumers: 1..=4,
            max_entries: 40,
            max_faults: 8,
            phase_ms: 3_000,
            kinds: FaultKind::ALL.to_vec(),
        }
    }
}

/// A fault of one of `kinds` (every kind if empty) aimed at one of `consumers`, with
/// parameters in the ranges the random faults use; it shrinks towards the first kind
/// listed, consumer 0, and short times.
pub fn fault(kinds: &[FaultKind], consumers: usize) -> impl Strategy<Value = Fault> {
    let kinds = if kinds.is_empty() { FaultKind::ALL.to_vec() } else { kinds.to_vec() };
    (select(kinds), 0..consumers.max(1), 0..2_500u64, any::<u32>()).prop_map(|(kind, consumer, ms, pick)| {
        match kind {
            FaultKind::Crash => Fault::Crash { consumer, restart_ms: 50 + ms },
            FaultKind::Death => Fault::Death { consumer },
            FaultKind::Disconnect => Fault::Disconnect { consumer },
            FaultKind::SlowHandler => Fault::SlowHandler { consumer, ms },
            FaultKind::FailingHandler => Fault::FailingHandler { consumer },
            FaultKind::DeadLetterVerdict => Fault::DeadLetterVerdict { consumer },
            FaultKind::DeletePending => Fault::DeletePending { pick },
            FaultKind::Trim => Fault::Trim { count: 1 + pick % 5 },
            FaultKind::DestroyGroup => Fault::DestroyGroup,
            FaultKind::Stop => Fault::Stop { consumer, restart_ms: 50 + ms / 4 },
            FaultKind::Abandon => Fault::Abandon { consumer, restart_ms: 50 + ms / 4 },
            FaultKind::ServerRestart => Fault::ServerRestart { down_ms: ms },
        }
    })
}

/// A schedule of up to `max` faults of `kinds` within `phase_ms`, in time order.
pub fn schedule(
    kinds: &[FaultKind],
    consumers: usize,
    max: usize,
    phase_ms: u64,
) -> impl Strategy<Value = Vec<(u64, Fault)>> {
    prop::collection::vec((0..phase_ms.max(1), fault(kinds, consumers)), 0..=max).prop_map(|mut faults| {
        faults.sort_by_key(|(at, _)| *at);
        faults
    })
}

/// An entry stream of 1 to `max` entries with fields drawn by `fields`, added within
/// `phase_ms`, in time order.
pub fn entries_with<F>(fields: F, max: usize, phase_ms: u64) -> impl Strategy<Value = Vec<NewEntry>>
where
    F: Strategy<Value = Fields>,
{
    prop::collection::vec((0..phase_ms.max(1), fields), 1..=max.max(1)).prop_map(|mut entries| {
        entries.sort_by_key(|(at, _)| *at);
        entries.into_iter().map(|(at_ms, fields)| NewEntry { at_ms, fields }).collect()
    })
}

/// An entry stream of 1 to `max` entries, each with a field `amount` of 1 to 1,000 (a sum
/// to check a handler's side effects against), added within `phase_ms`.
pub fn entries(max: usize, phase_ms: u64) -> impl Strategy<Value = Vec<NewEntry>> {
    let amount = (1..=1_000u32).prop_map(|a| vec![(b"amount".to_vec(), a.to_string().into_bytes())]);
    entries_with(amount, max, phase_ms)
}

/// A world: a seed, consumers, an entry stream ([`entries`]) and a fault schedule
/// ([`schedule`]) as `spec` says.
pub fn worlds(spec: Worlds) -> impl Strategy<Value = World> {
    let stream = entries(spec.max_entries, spec.phase_ms);
    worlds_with(spec, stream)
}

/// A world with entries drawn by `stream` (e.g. [`entries_with`] your own fields).
pub fn worlds_with<E>(spec: Worlds, stream: E) -> impl Strategy<Value = World>
where
    E: Strategy<Value = Vec<NewEntry>>,
{
    let Worlds { consumers, max_faults, phase_ms, kinds, .. } = spec;
    // An empty or zero range would be refused by proptest: at least one consumer.
    let most = (*consumers.end()).clamp(1, 64);
    let consumers = (*consumers.start()).clamp(1, most)..=most;
    (any::<u64>(), consumers, stream, schedule(&kinds, most, max_faults, phase_ms)).prop_map(
        move |(seed, consumers, entries, faults)| {
            World::new(seed).consumers(consumers).phase_ms(phase_ms).entries(entries).faults(faults)
        },
    )
}
