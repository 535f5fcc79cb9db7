//! Deterministic simulation, on the test kit (`pelican_sim::kit`): several pelican consumers
//! (the real sans-IO core) against one simulated server on a virtual clock, with seeded
//! random faults — crashes, restarts under the same name, deaths, disconnects, deleted and
//! trimmed pending entries, failing handlers, slow handlers (under and over `min_idle`),
//! dead-letter verdicts, stops, abandons (stops that drop the entry in hand and give up owed
//! acks), a destroyed group, server restarts that forget the delivery counts raised by
//! drains, failovers to a replica that lags (the old master's clients cut off, or left on it
//! as a replica for a while), the replica's link going down, consumers paused past
//! `min_idle` (zombies), connections cut after an ack went out — and an entry stream with
//! poison entries (whose handler always fails) and big entries (reads past `read_bytes`). The
//! kit's drivers keep driving while a handler runs (like `pelican-smol`), so leases are
//! renewed meanwhile. Each seed draws how many entries a consumer holds in hand at once (1, 2
//! or 8, each settled as its handling finishes), about two worlds in five order entries by a
//! key field of one to four values, about one in four has its consumers wait for their acks
//! to reach the replica (`ack_wait`), and one in four has the producer confirm its adds with
//! `WAIT 1`.
//!
//! After every run the kit's check holds: every added entry was handled with `Ack` at least
//! once, or moved to the dead-letter stream, or was deleted, or was gone with a failover
//! before the replica had it (never one the replica had, never one the producer confirmed);
//! the dead-letter stream holds
//! exactly the moves reported (each once, unless the group was destroyed), with the entry's
//! fields and origin; no `XACK` went out without an `Ack` verdict; no entry was handed out
//! past `max_deliveries`; the pending list is empty at quiescence; no consumer ever held two
//! entries, got one after its stop, stopped unasked or with an entry in hand, failed, or
//! livelocked; no entry was handled again after an `Ack` unless a fault that loses a
//! process, the group or the server's counts explains it; and in ordered worlds, no consumer
//! held two entries of one key at once, and each first handed out a key's entries in id order
//! within a life of its process, but for what a reclaim, a drain after a reconnect or a
//! destroyed group explains. Here also: poison entries went to the dead-letter stream (or
//! were deleted) and were never acked.
//!
//! `PELICAN_SIM_SEEDS=n` sets how many seeds run (default 1000); `PELICAN_SIM_SEED=s` replays
//! one seed, printed on failure; with `PELICAN_SIM_TRACE=1` too, the run's story is printed.

use std::collections::BTreeMap;
use std::time::Duration;

use pelican::{AckWait, Entry, Verdict};
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

/// How a seed's consumers take entries: how many in hand at once, and how many key values
/// the entries carry when ordered by key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Shape {
    concurrency: u32,
    keys: Option<u64>,
}

fn shape(seed: u64) -> Shape {
    let mut rng = Rng(seed ^ 0xc0c0);
    let concurrency = [1, 2, 8][rng.below(3) as usize];
    let keys = rng.chance(40).then(|| 1 + rng.below(4));
    Shape { concurrency, keys }
}

/// Whether a seed's consumers wait for their acks to reach the replica, and whether its
/// producer confirms its adds.
fn durability(seed: u64) -> (bool, bool) {
    let mut rng = Rng(seed ^ 0xd0d0);
    (rng.chance(25), rng.chance(25))
}

/// The entry stream: batches of 1–8 small entries every 50–450 ms; now and then a poison
/// entry, or 2–5 entries of 1.5–3 KB (a read of several passes `read_bytes`, 4 KiB). Ordered
/// by key, each entry has a field `k` of `keys` values.
fn entries(seed: u64, keys: Option<u64>) -> Vec<NewEntry> {
    let mut rng = Rng(seed ^ 0xe7e5);
    let mut key = Rng(seed ^ 0x6b65);
    let mut out = Vec::new();
    let mut at = 0;
    let mut add = |at: u64, mut fields: Vec<(String, String)>| {
        if let Some(keys) = keys {
            fields.push(("k".into(), format!("k{}", key.below(keys))));
        }
        out.push(NewEntry::new(at, fields));
    };
    let small = || vec![("f".to_string(), "v".to_string())];
    while at < PHASE {
        for _ in 0..1 + rng.below(8) {
            add(at, small());
        }
        if rng.chance(4) {
            let mut poison = small();
            poison.push(("poison".into(), "1".into()));
            add(at, poison);
        }
        if rng.chance(4) {
            for _ in 0..2 + rng.below(4) {
                add(at, vec![("f".into(), "v".repeat(1_500 + rng.below(1_500) as usize))]);
            }
        }
        at += 50 + rng.below(400);
    }
    out
}

/// The application's state: the handler's random failures, and the most entries a consumer
/// had in hand at once.
struct App {
    rng: Rng,
    most_in_hand: usize,
}

/// The handler: poison entries always fail, and 5% of handlings fail during the phase, half
/// of those asking a wait of their own (up to 2.5 s: some longer than the kit's `min_idle`,
/// parked again while their consumer runs).
fn handle(app: &mut App, ctx: &HandlerCtx<'_>, entry: &Entry) -> Verdict {
    app.most_in_hand = app.most_in_hand.max(ctx.in_hand());
    if entry.field(b"poison").is_some() {
        Verdict::Retry
    } else if ctx.now_ms() < PHASE && app.rng.chance(5) {
        match app.rng.chance(50) {
            true => Verdict::RetryAfter(Duration::from_millis(app.rng.below(2_500))),
            false => Verdict::Retry,
        }
    } else {
        Verdict::Ack
    }
}

fn tracing() -> bool {
    std::env::var_os("PELICAN_SIM_TRACE").is_some()
}

/// Runs one seed with faults of these kinds and checks it; panics with the seed and what
/// went wrong.
fn run(seed: u64, kinds: &[FaultKind]) -> Report<App> {
    let Shape { concurrency, keys } = shape(seed);
    let mut world = World::new(seed)
        .concurrency(concurrency)
        .entries(entries(seed, keys))
        .random_faults(kinds.iter().copied())
        .trace(tracing());
    if keys.is_some() {
        world = world.order_by("k");
    }
    let (ack_wait, confirm_adds) = durability(seed);
    if ack_wait {
        world = world.ack_wait(AckWait::Replicas { replicas: 1, timeout: Duration::from_millis(100) });
    }
    if confirm_adds {
        world = world.confirm_adds(100);
    }
    let report = world.run(App { rng: Rng(seed ^ 0x4a4d), most_in_hand: 0 }, handle);
    if tracing() {
        for line in &report.trace {
            eprintln!("{line}");
        }
    }
    let poison = |e: &&pelican_sim::kit::EntryReport| e.field(b"poison").is_some();
    let outcome = report.check_with(|_| {
        for e in report.entries.iter().filter(poison) {
            if e.succeeded() || !matches!(e.fate, Fate::DeadLettered | Fate::Deleted | Fate::Unreplicated) {
                return Err(format!("poison {} ended {:?}, handled {:?}", e.id, e.fate, e.handlings));
            }
        }
        Ok(())
    });
    if let Err(failure) = outcome {
        // The violations and the stories of their entries; the world's code is long (its
        // entries written out): the seed replays it.
        let text = failure.to_string();
        let story = text.split("\nreplay:\n").next().unwrap_or_default();
        panic!("{story}\n({report})\nreplay: PELICAN_SIM_SEED={seed} (PELICAN_SIM_TRACE=1 for its story)");
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
    // Entries gone with a failover, entries the producer confirmed, acks counted unreplicated.
    let (mut unreplicated, mut confirmed, mut acks_unreplicated) = (0, 0, 0);
    // Per shape: worlds, and the most entries in hand at once.
    let mut shapes: BTreeMap<Shape, (u64, usize)> = BTreeMap::new();
    // Worlds per server imitated (the seed draws it; a quarter run on Redis 8.10).
    let mut servers: BTreeMap<String, u64> = BTreeMap::new();
    for &seed in &seeds {
        let report = run(seed, FaultKind::ALL);
        *servers.entry(report.world.server_options().server_version.clone()).or_default() += 1;
        let seen = shapes.entry(shape(seed)).or_default();
        seen.0 += 1;
        seen.1 = seen.1.max(report.state.most_in_hand);
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
        unreplicated += report.entries.iter().filter(|e| e.fate == Fate::Unreplicated).count();
        confirmed += report.entries.iter().filter(|e| e.confirmed).count();
        acks_unreplicated += report.acks_unreplicated;
    }
    eprintln!(
        "simulated {} seeds with all faults: {faults:?}, {duplicates} duplicate handlings; {unreplicated} entries \
         gone with a failover, {confirmed} confirmed (none lost), {acks_unreplicated} acks unreplicated; notices \
         {notices:?}; servers {servers:?}; (concurrency, keys): (worlds, most in hand) {:?}",
        seeds.len(),
        shapes.iter().map(|(s, seen)| ((s.concurrency, s.keys), *seen)).collect::<Vec<_>>()
    );
    if seeds.len() >= 50 {
        // Every concurrency ran, ordered and not, and used what it allows: up to its
        // concurrency, and one entry per key at a time when ordered.
        let allowed = |s: &Shape| (s.concurrency as usize).min(s.keys.map_or(usize::MAX, |k| k as usize));
        for (s, (_, most)) in &shapes {
            assert!(*most <= allowed(s), "{s:?}: {most} in hand at once");
        }
        for concurrency in [1, 2, 8] {
            for ordered in [false, true] {
                let of = |s: &&Shape| s.concurrency == concurrency && s.keys.is_some() == ordered;
                let most = shapes.iter().filter(|(s, _)| of(s)).map(|(_, seen)| seen.1).max();
                let allowed = shapes.keys().filter(of).map(allowed).max();
                assert!(allowed.is_some(), "concurrency {concurrency}, ordered {ordered} ran");
                assert_eq!(most, allowed, "concurrency {concurrency}, ordered {ordered}: {shapes:?}");
            }
        }
        assert_eq!(faults.len(), FaultKind::ALL.len(), "every fault was exercised: {faults:?}");
        for version in ["6.2.14", "7.0.15", "8.1.8", "8.10.2"] {
            assert!(servers.contains_key(version), "worlds ran on {version}: {servers:?}");
        }
        assert!(slow > 0 && very_slow > 0, "slow handlers under and over min_idle: {slow}, {very_slow}");
        assert!(poisoned > 0, "poison entries went to the dead-letter stream after max_deliveries");
        assert!(unreplicated > 0 && confirmed > 0, "failovers lost adds ({unreplicated}), none confirmed");
        assert!(acks_unreplicated > 0, "a WAIT ran out while the replica's link was down");
        for path in [
            "read-shrunk-big-entries",
            "lease-lost",
            "reclaimed",
            "connect-failed",
            "dead-lettered",
            "not-master",
            "acks-unreplicated",
        ] {
            assert!(notices.contains_key(path), "{path} was exercised: {notices:?}");
        }
    }
}

/// Without faults nothing is handled twice; with one kind of fault at a time, the duplicate
/// handlings each fault costs is the figure reported. Only faults that lose a process's
/// state (crash, death, abandon), the group, or the server's counts or last writes (a
/// restart, a failover) may cost any: not a replica's link going down.
#[test]
fn duplicates_per_fault() {
    let seeds: Vec<u64> = seeds().into_iter().take(200).collect();
    let clean: u64 = seeds.iter().map(|&s| run(s, &[]).duplicates().total).sum();
    assert_eq!(clean, 0, "no faults, no duplicates");
    let mut lines = Vec::new();
    for kind in FaultKind::ALL.iter().copied() {
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
