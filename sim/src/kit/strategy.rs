//! proptest strategies for worlds, fault schedules and entry streams (feature `proptest`).
//!
//! A failing property shrinks to a small world — fewer faults and entries, simpler fault
//! parameters, fewer consumers, less concurrency, a smaller seed — and proptest prints it as
//! its minimal failing input: a [`World`]'s `Debug` is the code that builds it again, seed
//! included. [`Worlds::concurrency`] lets consumers hold many entries in hand, and
//! [`Worlds::keys`] orders them by a key field.
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
    /// How many entries each consumer may hold in hand at once
    /// ([`World::concurrency`]); it shrinks towards the range's start.
    pub concurrency: RangeInclusive<u32>,
    /// With more than 0, consumers order entries by a field `key` ([`World::order_by`]), and
    /// the entries of [`worlds`] carry one of this many values (`k0`, `k1`, …; see
    /// [`keyed_entries`]); give the entries of [`worlds_with`] the field yourself. 0: not
    /// ordered.
    pub keys: u32,
}

impl Default for Worlds {
    /// 1 to 4 consumers, up to 40 entries and 8 faults of every kind within 3 s, one entry
    /// in hand at a time, not ordered.
    fn default() -> Worlds {
        Worlds {
            consumers: 1..=4,
            max_entries: 40,
            max_faults: 8,
            phase_ms: 3_000,
            kinds: FaultKind::ALL.to_vec(),
            concurrency: 1..=1,
            keys: 0,
        }
    }
}

/// The field [`Worlds::keys`] orders by.
pub const KEY_FIELD: &str = "key";

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
            // Shrinks towards a failover that cuts the old master's clients off.
            FaultKind::Failover => Fault::Failover { stale_ms: ms * u64::from(pick % 2) },
            FaultKind::ReplicaLinkDown => Fault::ReplicaLinkDown { ms: 100 + ms },
            // Past the worlds' min_idle (1 s): a zombie.
            FaultKind::Pause => Fault::Pause { consumer, ms: 1_000 + ms },
            FaultKind::CutAfterCommit => Fault::CutAfterCommit { consumer },
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

/// An entry stream of 1 to `max` entries, each with a field `amount` of 1 to 1,000 and a
/// field `key` ([`KEY_FIELD`]) of one of `keys` values (`k0`, `k1`, …; it shrinks towards
/// `k0`), added within `phase_ms`.
pub fn keyed_entries(max: usize, phase_ms: u64, keys: u32) -> impl Strategy<Value = Vec<NewEntry>> {
    let fields = (1..=1_000u32, 0..keys.max(1)).prop_map(|(amount, key)| {
        vec![
            (b"amount".to_vec(), amount.to_string().into_bytes()),
            (KEY_FIELD.as_bytes().to_vec(), format!("k{key}").into_bytes()),
        ]
    });
    entries_with(fields, max, phase_ms)
}

/// A world: a seed, consumers, an entry stream ([`entries`], or [`keyed_entries`] when
/// ordered) and a fault schedule ([`schedule`]) as `spec` says.
pub fn worlds(spec: Worlds) -> BoxedStrategy<World> {
    if spec.keys > 0 {
        let stream = keyed_entries(spec.max_entries, spec.phase_ms, spec.keys);
        worlds_with(spec, stream).boxed()
    } else {
        let stream = entries(spec.max_entries, spec.phase_ms);
        worlds_with(spec, stream).boxed()
    }
}

/// A world with entries drawn by `stream` (e.g. [`entries_with`] your own fields).
pub fn worlds_with<E>(spec: Worlds, stream: E) -> impl Strategy<Value = World>
where
    E: Strategy<Value = Vec<NewEntry>>,
{
    let Worlds { consumers, max_faults, phase_ms, kinds, concurrency, keys, .. } = spec;
    // An empty or zero range would be refused by proptest: at least one consumer, one in
    // hand.
    let most = (*consumers.end()).clamp(1, 64);
    let consumers = (*consumers.start()).clamp(1, most)..=most;
    let most_in_hand = (*concurrency.end()).clamp(1, pelican::MAX_CONCURRENCY);
    let concurrency = (*concurrency.start()).clamp(1, most_in_hand)..=most_in_hand;
    let faults = schedule(&kinds, most, max_faults, phase_ms);
    (any::<u64>(), consumers, concurrency, stream, faults).prop_map(
        move |(seed, consumers, concurrency, entries, faults)| {
            let world = World::new(seed)
                .consumers(consumers)
                .concurrency(concurrency)
                .phase_ms(phase_ms)
                .entries(entries)
                .faults(faults);
            if keys > 0 {
                world.order_by(KEY_FIELD)
            } else {
                world
            }
        },
    )
}
