//! The test kit with many entries in hand (`World::concurrency`) and an order by key
//! (`World::order_by`): handlings overlap and settle as they finish, every fault kind acts on
//! all the entries in hand or on one handling as it says, ordered worlds hold the consumers to
//! `OrderBy`'s promise (checked here again from the reports, independently of the kit's own
//! check), and the kit's order checks hold under every fault.

use std::collections::{BTreeMap, BTreeSet};

use pelican::{Source, Verdict};
use pelican_sim::kit::{search, EntryReport, Fault, FaultKind, Handling, NewEntry, Report, World};

fn field(e: &EntryReport, name: &str) -> u64 {
    e.field(name.as_bytes()).and_then(|v| std::str::from_utf8(v).ok()?.parse().ok()).unwrap_or(0)
}

fn entry_field(entry: &pelican::Entry, name: &str) -> u64 {
    entry.field(name.as_bytes()).and_then(|v| std::str::from_utf8(v).ok()?.parse().ok()).unwrap_or(0)
}

/// `n` entries added at `at`, with a field `i` (0, 1, …).
fn batch(at: u64, n: u64) -> Vec<NewEntry> {
    (0..n).map(|i| NewEntry::new(at, [("i", i.to_string())])).collect()
}

/// Every handling with its entry's id (its number).
fn handlings<S>(report: &Report<S>) -> Vec<(u64, &Handling)> {
    let number = |id: &str| id.split('-').next().and_then(|n| n.parse().ok()).unwrap_or(0);
    report.entries.iter().flat_map(|e| e.handlings.iter().map(move |h| (number(&e.id), h))).collect()
}

/// The most handlings of one consumer life in hand at once, by their times (a handling is in
/// hand from `at_ms` until its verdict arrives; one never settled, until the run's end).
fn most_at_once<'a>(hs: impl IntoIterator<Item = &'a Handling>, end: u64) -> usize {
    let mut events: Vec<(u64, i32)> = Vec::new();
    for h in hs {
        let until = h.settled_at_ms.unwrap_or(end);
        if until > h.at_ms {
            events.push((h.at_ms, 1));
            events.push((until, -1));
        }
    }
    events.sort(); // at one instant, a handling ending (-1) goes before one starting
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in events {
        now += d;
        most = most.max(now);
    }
    most as usize
}

/// Handlings grouped by consumer and life.
fn by_life<S>(report: &Report<S>) -> BTreeMap<(usize, u32), Vec<(u64, &Handling)>> {
    let mut out: BTreeMap<(usize, u32), Vec<(u64, &Handling)>> = BTreeMap::new();
    for (n, h) in handlings(report) {
        out.entry((h.index, h.life)).or_default().push((n, h));
    }
    for hs in out.values_mut() {
        hs.sort_by_key(|(n, h)| (h.at_ms, *n));
    }
    out
}

#[test]
fn many_entries_in_hand_settle_as_they_finish() {
    // 8 entries at once, 4 in hand at a time; later entries finish sooner.
    let world = World::new(2).consumers(1).concurrency(4).entries(batch(0, 8));
    let report = world.run(0usize, |most, ctx, entry| {
        *most = (*most).max(ctx.in_hand());
        ctx.takes(100 - entry_field(entry, "i") * 10);
        Verdict::Ack
    });
    report.check().unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(report.state, 4, "the handler saw 4 in hand at most");
    let hs = handlings(&report);
    assert_eq!(hs.len(), 8, "each handled once");
    assert_eq!(most_at_once(hs.iter().map(|(_, h)| *h), report.ended_at_ms), 4);
    for e in &report.entries {
        let h = &e.handlings[0];
        assert_eq!(h.settled_at_ms, Some(h.at_ms + 100 - field(e, "i") * 10), "{e}");
    }
    // Settled in the order they finished, not the order handed out.
    let mut by_start: Vec<&Handling> = hs.iter().map(|(_, h)| *h).collect();
    by_start.sort_by_key(|h| h.at_ms);
    let ends: Vec<u64> = by_start.iter().filter_map(|h| h.settled_at_ms).collect();
    assert!(ends.windows(2).any(|w| w[1] < w[0]), "some entry handed out later finished first: {ends:?}");
}

/// A world of one consumer holding 4 entries of 200 ms each from 0 ms (of 8).
fn four_in_hand(seed: u64) -> World {
    World::new(seed).consumers(1).concurrency(4).handler_ms(200, 201).entries(batch(0, 8))
}

#[test]
fn a_crash_or_an_abandon_drops_every_entry_in_hand_and_a_stop_waits_for_them() {
    for fault in
        [Fault::Crash { consumer: 0, restart_ms: 50 }, Fault::Abandon { consumer: 0, restart_ms: 50 }]
    {
        let report = four_in_hand(3).fault(100, fault).run((), |_, _, _| Verdict::Ack);
        report.check().unwrap_or_else(|f| panic!("{f}"));
        let first: Vec<&Handling> =
            handlings(&report).into_iter().map(|(_, h)| h).filter(|h| h.life == 0).collect();
        assert_eq!(first.len(), 4, "{fault:?}: four in hand when it struck");
        assert!(first.iter().all(|h| h.settled_at_ms.is_none()), "{fault:?}: their verdicts were lost");
        for e in report.entries.iter().filter(|e| e.handlings[0].life == 0) {
            let again = &e.handlings[1];
            assert_eq!(
                (again.life, again.source),
                (1, Source::Pending),
                "{fault:?}: drained on restart: {e}"
            );
        }
        let dups = report.duplicates();
        assert_eq!((dups.total, dups.by_fault.get(&fault.kind()).copied()), (4, Some(4)), "{fault:?}");
    }
    // A stop: the four in hand are settled as they finish, nothing more in that life.
    let report = four_in_hand(3)
        .fault(100, Fault::Stop { consumer: 0, restart_ms: 50 })
        .run((), |_, _, _| Verdict::Ack);
    report.check().unwrap_or_else(|f| panic!("{f}"));
    let hs = handlings(&report);
    let first: Vec<&Handling> = hs.iter().map(|(_, h)| *h).filter(|h| h.life == 0).collect();
    assert_eq!(first.len(), 4);
    assert!(first.iter().all(|h| h.settled_at_ms == Some(h.at_ms + 200)), "{first:?}");
    let stopped = first.iter().filter_map(|h| h.settled_at_ms).max().unwrap_or(0);
    assert!(
        hs.iter().all(|(_, h)| h.life == 0 || h.at_ms >= stopped + 50),
        "the next life starts after the stop"
    );
    assert_eq!(report.duplicates().total, 0);
}

#[test]
fn a_slow_or_failing_handler_is_one_handlings_among_those_in_hand() {
    let report =
        four_in_hand(5).fault(0, Fault::SlowHandler { consumer: 0, ms: 700 }).run((), |_, _, _| Verdict::Ack);
    report.check().unwrap_or_else(|f| panic!("{f}"));
    let took: Vec<u64> =
        handlings(&report).iter().filter_map(|(_, h)| Some(h.settled_at_ms? - h.at_ms)).collect();
    assert_eq!(took.iter().filter(|&&t| t == 700).count(), 1, "{took:?}");
    assert_eq!(took.iter().filter(|&&t| t == 200).count(), 7, "{took:?}");

    let report =
        four_in_hand(5).fault(0, Fault::FailingHandler { consumer: 0 }).run((), |_, _, _| Verdict::Ack);
    report.check().unwrap_or_else(|f| panic!("{f}"));
    let failed: Vec<&Handling> =
        handlings(&report).into_iter().map(|(_, h)| h).filter(|h| !h.by_handler).collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].verdict, Verdict::Retry);
    assert!(report.entries.iter().all(|e| e.succeeded()));
}

#[test]
fn a_death_leaves_every_entry_in_hand_to_the_peer() {
    let world = World::new(6)
        .consumers(2)
        .concurrency(4)
        .handler_ms(300, 301)
        .entries(batch(0, 12))
        .fault(150, Fault::Death { consumer: 0 });
    let report = world.run((), |_, _, _| Verdict::Ack);
    report.check().unwrap_or_else(|f| panic!("{f}"));
    let dead: Vec<&EntryReport> =
        report.entries.iter().filter(|e| e.handlings.iter().any(|h| h.index == 0)).collect();
    assert!(dead.len() >= 2, "c0 held several when it died: {}", dead.len());
    for e in dead {
        let h = &e.handlings[0];
        assert_eq!((h.index, h.settled_at_ms), (0, None), "{e}");
        assert!(e.handlings[1..].iter().any(|h| h.index == 1 && h.source == Source::Claimed), "{e}");
    }
}

/// An ordered world's reports, read independently of the kit's live check: per consumer life,
/// never two handlings of one key overlapping in time; each key's entries first handed out in
/// id order, reclaims aside (no reconnects or destroyed groups in these worlds).
fn held_in_order<S>(report: &Report<S>) -> Result<(), String> {
    for ((index, life), hs) in by_life(report) {
        let mut keys: BTreeMap<&[u8], Vec<(u64, &Handling)>> = BTreeMap::new();
        for &(n, h) in &hs {
            if let Some(key) = &h.key {
                keys.entry(key).or_default().push((n, h));
            }
        }
        for (key, hs) in keys {
            let key = String::from_utf8_lossy(key);
            if most_at_once(hs.iter().map(|(_, h)| *h), report.ended_at_ms) > 1 {
                return Err(format!("c{index} (life {life}) held two entries of key {key} at once"));
            }
            let mut seen = BTreeSet::new();
            let mut latest = 0;
            for (n, h) in hs {
                if seen.insert(n) && h.source != Source::Claimed {
                    if n < latest {
                        return Err(format!(
                            "c{index} (life {life}) first handed out {n}-0 after {latest}-0 ({key})"
                        ));
                    }
                    latest = n;
                }
            }
        }
    }
    Ok(())
}

#[test]
fn an_ordered_world_holds_one_entry_per_key_and_hands_each_key_out_in_order() {
    for seed in 0..6 {
        // Two keys, 8 in hand at most: different keys overlap, one key never does. Each
        // entry numbered 7, 14, … fails once: `Retry` frees its key at once, and it comes
        // back after later entries of its key.
        let world = World::new(seed).consumers(2).concurrency(8).order_by("k").keys(2).handler_ms(5, 40);
        let report = world.run(BTreeSet::new(), |retried: &mut BTreeSet<Vec<u8>>, _, entry| {
            if entry_field(entry, "n") % 7 == 0 && retried.insert(entry.id().to_vec()) {
                Verdict::Retry
            } else {
                Verdict::Ack
            }
        });
        report.check().unwrap_or_else(|f| panic!("{f}"));
        held_in_order(&report).unwrap_or_else(|e| panic!("seed {seed}: {e}\n{}", report.world));
        assert!(!report.state.is_empty());
        let lives = by_life(&report);
        let most =
            lives.values().map(|hs| most_at_once(hs.iter().map(|(_, h)| *h), report.ended_at_ms)).max();
        assert_eq!(most, Some(2), "seed {seed}: two keys, two at once");
        // A retried entry was handled again after a later entry of its key was handed out.
        let overtaken = report.entries.iter().filter(|e| e.handlings.len() > 1).any(|e| {
            let (first, again) = (&e.handlings[0], &e.handlings[1]);
            report.entries.iter().any(|later| {
                later.id > e.id
                    && later.field(b"k") == e.field(b"k")
                    && later.handlings.iter().any(|h| h.at_ms > first.at_ms && h.at_ms < again.at_ms)
            })
        });
        assert!(overtaken, "seed {seed}: Retry frees the key");
    }
}

#[test]
fn ordered_worlds_with_many_in_hand_keep_their_promises_under_every_fault() {
    let mut faults = 0;
    for seed in 0..24u64 {
        let world = World::new(seed)
            .phase_ms(4_000)
            .concurrency([2, 8][seed as usize % 2])
            .order_by("k")
            .keys(1 + seed as u32 % 3)
            .random_faults(FaultKind::ALL);
        let report = world.run((), |_, ctx, entry| {
            if ctx.now_ms() < 4_000 && entry_field(entry, "n") % 11 == 0 {
                Verdict::Retry
            } else {
                Verdict::Ack
            }
        });
        report.check().unwrap_or_else(|f| panic!("{f}"));
        faults += report.faults.iter().filter(|f| f.applied).count();
        // The report's world replays the same way.
        let again = report.world.run((), |_, ctx, entry| {
            if ctx.now_ms() < 4_000 && entry_field(entry, "n") % 11 == 0 {
                Verdict::Retry
            } else {
                Verdict::Ack
            }
        });
        assert_eq!(again.entries, report.entries, "seed {seed}");
    }
    assert!(faults > 100, "{faults} faults applied");
}

#[test]
fn search_lowers_the_concurrency_and_drops_the_order_when_a_failure_needs_neither() {
    // A naive counter: any crash between applying and acking counts an entry twice.
    let worlds = (0..30).map(|seed| {
        World::new(seed)
            .concurrency(8)
            .order_by("k")
            .entries((0..20).map(|i| NewEntry::new(i * 30, [("k", (i % 3).to_string())])))
            .handler_ms(20, 80)
            .random_faults([FaultKind::Crash])
    });
    let found = search(worlds, |world| {
        let report = world.run(0u64, |count, _, _| {
            *count += 1;
            Verdict::Ack
        });
        let handled: u64 = report.entries.iter().map(|e| e.handlings.len() as u64).sum();
        let once = report.entries.len() as u64;
        report.check_with(|&count| {
            if count == once || count != handled {
                Ok(())
            } else {
                Err(format!("counted {count} for {once} entries"))
            }
        })
    })
    .expect("a crash catches the counter");
    let minimal = &found.minimal.world;
    // One in hand when the crash alone explains it; two when it needs an ack that waited
    // behind a short parked read (entries in hand, nothing new) and died with the process.
    assert!(minimal.max_in_hand() <= 2 && minimal.ordered_by().is_none(), "{}", found.minimal);
    assert!(minimal.given_entries().map_or(0, <[NewEntry]>::len) <= 3, "{}", found.minimal);
    // Its failure tells the story of the entry counted twice.
    assert!(!found.minimal.entries.is_empty(), "{}", found.minimal);
    assert!(found.minimal.entries.iter().all(|e| e.duplicates() > 0), "{}", found.minimal);
    assert!(
        found.minimal.to_string().contains("the entries handled again after an Ack:"),
        "{}",
        found.minimal
    );
}

#[test]
fn worlds_from_bytes_run_many_in_hand_and_ordered() {
    // The 9th byte: 2 consumers (bits 0-1), concurrency 8 (bits 2-3), ordered by `k` with one
    // key (bits 4-5); bits 6-7 ignored.
    let how = 0b1101_1001;
    let world = World::from_bytes(&[9, 0, 0, 0, 0, 0, 0, 0, how, 2, 0, 0, 40, 30]);
    assert_eq!(world.consumer_count(), 2);
    assert_eq!((world.max_in_hand(), world.ordered_by(), world.key_count()), (8, Some(&b"k"[..]), 1));
    let report = world.run((), |_, _, _| Verdict::Ack);
    report.check().unwrap_or_else(|f| panic!("{f}"));
    assert!(report.entries.iter().all(|e| e.field(b"k") == Some(b"k0")), "drawn entries carry the key");
    let code = report.world.to_string();
    for call in [".concurrency(8)", ".order_by(\"k\")", ".keys(1)"] {
        assert!(code.contains(call), "{code}");
    }
    for (bits, concurrency, keys) in
        [(0b00_00, 1, None), (0b01_01 << 2, 2, Some(1)), (0b10_11 << 2, 3, Some(3))]
    {
        let world = World::from_bytes(&[1, 0, 0, 0, 0, 0, 0, 0, bits]);
        assert_eq!(world.max_in_hand(), concurrency, "{bits:#b}");
        assert_eq!(world.ordered_by().map(|_| world.key_count()), keys, "{bits:#b}");
    }
}

/// Found by the kit (`sim/tests/simulation.rs` with concurrency 8, seed 13, a disconnect): with
/// more than one entry allowed in hand, a reconnect's drain of the own pending list goes out
/// while entries are still in hand. An entry settled after the drain went out and before its
/// reply came back — its `XACK` owed, due `ack_delay` later, or written behind the drain — was
/// in the reply, no longer in hand, and was handed out again: a duplicate no fault explains
/// (a dead-letter verdict's move likewise). One entry, concurrency 2, a disconnect at 50 ms;
/// c0 is back at 61 ms, when the handling ends. With concurrency 1 the drain waits for the
/// entry in hand, so its `XACK` goes out first. Entries settled and not yet confirmed are now
/// left to their ack or move, as the one in hand is left to its handler.
#[test]
fn an_entry_settled_while_a_drain_is_under_way_is_not_handed_out_again() {
    for verdict in [Verdict::Ack, Verdict::DeadLetter] {
        let world = World::new(1)
            .consumers(1)
            .concurrency(2)
            .entries([NewEntry::new(0, [("n", "1")])])
            .fault(50, Fault::Disconnect { consumer: 0 })
            .trace(true);
        let report = world.run((), |_, ctx, _| {
            ctx.takes(61);
            verdict.clone()
        });
        let window = ["61 ms c0: reconnected".to_string(), format!("61 ms c0 settles 1-0: {verdict:?}")];
        assert!(window.iter().all(|line| report.trace.contains(line)), "the window: {:#?}", report.trace);
        report.check().unwrap_or_else(|f| panic!("{f}"));
        assert_eq!(report.entries[0].handlings.len(), 1, "{}", report.entries[0]);
    }
    // Wherever the handlings end around the reconnect, with one or two in hand.
    for takes in 40..=200 {
        let world = World::new(1)
            .consumers(1)
            .concurrency(2)
            .entries([NewEntry::new(0, [("n", "1")]), NewEntry::new(0, [("n", "2")])])
            .fault(50, Fault::Disconnect { consumer: 0 });
        let report = world.run((), |_, ctx, entry| {
            ctx.takes(if entry_field(entry, "n") == 1 { takes } else { 240 - takes });
            Verdict::Ack
        });
        report.check().unwrap_or_else(|f| panic!("takes {takes}: {f}"));
        assert_eq!(report.duplicates().total, 0, "takes {takes}");
    }
}

/// `n` entries of one key `a`, added at 0 ms, those at `big` (indices) of 3 KB: two big ones
/// side by side make a read of two outgrow the kit's `read_bytes` (4 KiB).
fn one_key(n: usize, big: &[usize]) -> Vec<NewEntry> {
    (0..n)
        .map(|i| {
            let f = if big.contains(&i) { "v".repeat(3_000) } else { "v".to_string() };
            NewEntry::new(0, [("k", "a".to_string()), ("f", f)])
        })
        .collect()
}

/// Found by the kit (the simulation's seed 185, without faults): a read of new entries that
/// outgrows `read_bytes` is skipped and its entries come back by a drain of the own pending
/// list, but the reads pipelined behind it were buffered and handed out first, so a key's
/// entries went out of the order read. One consumer (concurrency 1 does it too), six entries
/// of one key: reads of two ahead, [4-0, 5-0] (6 KB) skipped, [6-0] handed out before them.
/// The entries of the reads behind a skipped one are now left to the drain with it (their
/// delivery counts given back), which reads them all in id order.
#[test]
fn a_read_skipped_for_its_size_is_not_overtaken_by_the_reads_behind_it() {
    let world = World::new(1).consumers(1).order_by("k").handler_ms(1, 2).entries(one_key(6, &[3, 4]));
    let report = world.run((), |_, _, _| Verdict::Ack);
    report.check().unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(report.notices.get("read-shrunk-big-entries"), Some(&1), "the window: a read skipped");
    let mut hs = handlings(&report);
    hs.sort_by_key(|(n, h)| (h.at_ms, *n));
    let order: Vec<(u64, Source, u64)> = hs.iter().map(|(n, h)| (*n, h.source, h.deliveries)).collect();
    assert_eq!(
        order,
        [
            (1, Source::New, 1),
            (2, Source::New, 1),
            (3, Source::New, 1),
            (4, Source::Pending, 2), // read twice: skipped, drained
            (5, Source::Pending, 2),
            (6, Source::Pending, 1), // left to the drain, its count given back
        ]
    );
    // Wherever the big pair lies, with one or two in hand, whatever the seed draws.
    for n in [6, 9, 12] {
        for at in 0..n - 1 {
            for seed in 0..6 {
                for concurrency in [1, 2] {
                    let world = World::new(seed)
                        .consumers(1)
                        .concurrency(concurrency)
                        .order_by("k")
                        .handler_ms(1, 2)
                        .entries(one_key(n, &[at, at + 1]));
                    let report = world.run((), |_, _, _| Verdict::Ack);
                    report.check().unwrap_or_else(|f| panic!("{f}"));
                }
            }
        }
    }
}

/// Found by the kit (the simulation's seed 914: Redis 6.2, whose `XAUTOCLAIM` claims deleted
/// entries without naming them, so that the consumer drains its pending list to ack them
/// away): with entries in hand, a drain of the own pending list from the top (after such a
/// claim, or a read skipped for its size) delivers the entries in hand again, which resets
/// their idle time on the server. The consumer kept their lease clocks, so the next
/// owner-checked renewal asked for more idle time than they had, claimed nothing, and took
/// them for taken by a peer (`LeaseLost` in hand); renewals stopped and a peer reclaimed one
/// while its handler still ran: a duplicate no fault explains. Two consumers, concurrency 2:
/// c0 holds 1-0 (2.5 s); at 600 ms two big entries make its read outgrow `read_bytes`, the
/// drain re-delivers 1-0, the renewal at 1,003 ms asks for 453 ms idle of 403, and c1
/// reclaims 1-0 at 1,600 ms. A drain's (or reclaim's) delivery of an entry in hand now
/// restarts its lease.
#[test]
fn a_drain_that_delivers_an_entry_in_hand_again_restarts_its_lease() {
    let slow_and_two_big = |at: u64| {
        let big = "v".repeat(3_000);
        vec![
            NewEntry::new(0, [("n", "slow".to_string())]),
            NewEntry::new(at, [("n", "big".to_string()), ("f", big.clone())]),
            NewEntry::new(at, [("n", "big".to_string()), ("f", big)]),
        ]
    };
    let handler = |_: &mut (), ctx: &pelican_sim::kit::HandlerCtx<'_>, entry: &pelican::Entry| {
        if entry.field(b"n") == Some(b"slow") {
            ctx.takes(2_500);
        }
        Verdict::Ack
    };
    let report = World::new(0).consumers(2).concurrency(2).entries(slow_and_two_big(600)).run((), handler);
    report.check().unwrap_or_else(|f| panic!("{f}"));
    assert!(report.notices.contains_key("read-shrunk-big-entries"), "the window: {:?}", report.notices);
    assert!(!report.notices.contains_key("lease-lost-in-hand"), "{:?}", report.notices);
    assert_eq!(report.entries[0].handlings.len(), 1, "{}", report.entries[0]);
    for seed in 0..12 {
        for at in [200, 400, 600, 800, 1_000] {
            let world = World::new(seed).consumers(2).concurrency(2).entries(slow_and_two_big(at));
            let report = world.run((), handler);
            report.check().unwrap_or_else(|f| panic!("{f}"));
            assert!(
                !report.notices.contains_key("lease-lost-in-hand"),
                "seed {seed}, at {at}: {:?}",
                report.notices
            );
        }
    }
}
