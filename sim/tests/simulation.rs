//! Deterministic simulation, on the test kit (`pelican_sim::kit`): several pelican consumers
//! (the real sans-IO core) against one simulated server on a virtual clock, with seeded
//! random faults — crashes, restarts under the same name, deaths, disconnects, deleted and
//! trimmed pending entries, failing handlers, slow handlers (under and over `min_idle`),
//! dead-letter verdicts, stops, abandons (stops that drop the entry in hand and give up owed
//! acks), a destroyed group, server restarts that forget the delivery counts raised by
//! drains — and an entry stream with poison entries (whose handler always fails) and big
//! entries (reads past `read_bytes`). The kit's drivers keep driving while a handler runs
//! (like `pelican-smol`), so leases are renewed meanwhile.
//!
//! After every run the kit's check holds: every added entry was handled with `Ack` at least
//! once, or moved to the dead-letter stream, or was deleted; the dead-letter stream holds
//! exactly the moves reported (each once, unless the group was destroyed), with the entry's
//! fields and origin; no `XACK` went out without an `Ack` verdict; no entry was handed out
//! past `max_deliveries`; the pending list is empty at quiescence; no consumer ever held two
//! entries, got one after its stop, stopped unasked or with an entry in hand, failed, or
//! livelocked; and no entry was handled again after an `Ack` unless a fault that loses a
//! process, the group or the server's counts explains it. Here also: poison entries went to
//! the dead-letter stream (or were deleted) and were never acked.
//!
//! `PELICAN_SIM_SEEDS=n` sets how many seeds run (default 1000); `PELICAN_SIM_SEED=s` replays
//! one seed, printed on failure; with `PELICAN_SIM_TRACE=1` too, the run's story is printed.

use std::collections::BTreeMap;

use pelican::{Entry, Verdict};
use pelican_sim::kit::{Fate, FaultKind, HandlerCtx, NewEntry, Report, World};

/// Faults and new entries happen before this (virtual ms); then the system must settle.
const PHASE: u64 = 8_000;
/// `min_idle` of the kit's consumers.
const MIN_IDLE: u64 = 1_000;

/// splitmix64, for the entry stream and the handler's random failures.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// The entry stream: batches of 1–8 small entries every 50–450 ms; now and then a poison
/// entry, or 2–5 entries of 1.5–3 KB (a read of several passes `read_bytes`, 4 KiB).
fn entries(seed: u64) -> Vec<NewEntry> {
    let mut rng = Rng(seed ^ 0xe7e5);
    let mut out = Vec::new();
    let mut at = 0;
    while at < PHASE {
        for _ in 0..1 + rng.below(8) {
            out.push(NewEntry::new(at, [("f", "v")]));
        }
        if rng.chance(4) {
            out.push(NewEntry::new(at, [("f", "v"), ("poison", "1")]));
        }
        if rng.chance(4) {
            for _ in 0..2 + rng.below(4) {
                let big = "v".repeat(1_500 + rng.below(1_500) as usize);
                out.push(NewEntry::new(at, [("f", big)]));
            }
        }
        at += 50 + rng.below(400);
    }
    out
}

/// The handler: poison entries always fail, and 5% of handlings fail during the phase.
fn handle(rng: &mut Rng, ctx: &HandlerCtx<'_>, entry: &Entry) -> Verdict {
    if entry.field(b"poison").is_some() || (ctx.now_ms() < PHASE && rng.chance(5)) {
        Verdict::Retry
    } else {
        Verdict::Ack
    }
}

fn tracing() -> bool {
    std::env::var_os("PELICAN_SIM_TRACE").is_some()
}

/// Runs one seed with faults of these kinds and checks it; panics with the seed and what
/// went wrong.
fn run(seed: u64, kinds: &[FaultKind]) -> Report<Rng> {
    let world = World::new(seed).entries(entries(seed)).random_faults(kinds.iter().copied()).trace(tracing());
    let report = world.run(Rng(seed ^ 0x4a4d), handle);
    if tracing() {
        for line in &report.trace {
            eprintln!("{line}");
        }
    }
    let poison = |e: &&pelican_sim::kit::EntryReport| e.field(b"poison").is_some();
    let outcome = report.check_with(|_| {
        for e in report.entries.iter().filter(poison) {
            if e.succeeded() || !matches!(e.fate, Fate::DeadLettered | Fate::Deleted) {
                return Err(format!("poison {} ended {:?}, handled {:?}", e.id, e.fate, e.handlings));
            }
        }
        Ok(())
    });
    if let Err(failure) = outcome {
        let violations: Vec<String> = failure.violations.iter().map(|v| format!("  - {v}")).collect();
        panic!(
            "seed {seed} ({report}):\n{}\nreplay: PELICAN_SIM_SEED={seed} (PELICAN_SIM_TRACE=1 for its story)",
            violations.join("\n")
        );
    }
    report
}

fn seeds() -> Vec<u64> {
    if let Ok(s) = std::env::var("PELICAN_SIM_SEED") {
        return vec![s.parse().expect("PELICAN_SIM_SEED is a number")];
    }
    let n = std::env::var("PELICAN_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(1000);
    (1..=n).collect()
}

#[test]
fn nothing_is_lost_under_every_fault() {
    let seeds = seeds();
    let mut faults: BTreeMap<FaultKind, u64> = BTreeMap::new();
    let mut notices: BTreeMap<&'static str, u64> = BTreeMap::new();
    let (mut duplicates, mut slow, mut very_slow, mut poisoned) = (0, 0, 0, 0);
    for &seed in &seeds {
        let report = run(seed, &FaultKind::ALL);
        duplicates += report.duplicates().total;
        for (kind, n) in report.faults_applied() {
            *faults.entry(kind).or_default() += n;
        }
        for (name, n) in &report.notices {
            *notices.entry(name).or_default() += n;
        }
        for f in report.faults.iter().filter(|f| f.applied) {
            if let pelican_sim::kit::Fault::SlowHandler { ms, .. } = f.fault {
                if ms > MIN_IDLE {
                    very_slow += 1;
                } else {
                    slow += 1;
                }
            }
        }
        poisoned += report.server.dead_letters.iter().filter(|d| d.reason == "max-deliveries").count();
    }
    eprintln!(
        "simulated {} seeds with all faults: {faults:?}, {duplicates} duplicate handlings; notices {notices:?}",
        seeds.len()
    );
    if seeds.len() >= 50 {
        assert_eq!(faults.len(), FaultKind::ALL.len(), "every fault was exercised: {faults:?}");
        assert!(slow > 0 && very_slow > 0, "slow handlers under and over min_idle: {slow}, {very_slow}");
        assert!(poisoned > 0, "poison entries went to the dead-letter stream after max_deliveries");
        for path in ["read-shrunk-big-entries", "lease-lost", "reclaimed", "connect-failed", "dead-lettered"]
        {
            assert!(notices.contains_key(path), "{path} was exercised: {notices:?}");
        }
    }
}

/// Without faults nothing is handled twice; with one kind of fault at a time, the duplicate
/// handlings each fault costs is the figure reported. Only faults that lose a process's
/// state (crash, death, abandon), the group, or the server's counts (a restart) may cost
/// any.
#[test]
fn duplicates_per_fault() {
    let seeds: Vec<u64> = seeds().into_iter().take(200).collect();
    let clean: u64 = seeds.iter().map(|&s| run(s, &[]).duplicates().total).sum();
    assert_eq!(clean, 0, "no faults, no duplicates");
    let mut lines = Vec::new();
    for kind in FaultKind::ALL {
        let (mut dups, mut count) = (0u64, 0u64);
        for &seed in &seeds {
            let report = run(seed ^ 0xfa17, &[kind]);
            dups += report.duplicates().total;
            count += report.faults_applied().get(&kind).copied().unwrap_or(0);
        }
        lines.push(format!(
            "{kind:?}: {count} faults, {dups} duplicates, {:.3} per fault",
            dups as f64 / count.max(1) as f64
        ));
        // Slow handlers, even slower than min_idle, keep their leases here.
        if !kind.may_duplicate() {
            assert_eq!(dups, 0, "{kind:?} caused duplicate handlings");
        }
    }
    eprintln!("duplicates per fault over {} seeds each:\n  {}", seeds.len(), lines.join("\n  "));
}
