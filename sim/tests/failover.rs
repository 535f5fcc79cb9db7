//! Failovers in the kit: what a promoted replica may lose (the adds it never had, acks,
//! deliveries, dead-letter moves) and what it may not (anything the replica had, anything
//! the producer confirmed), consumers led to the demoted master for a while, under crashes,
//! many entries in hand and an order by key; and what `ack_wait` saves. (The simulator's
//! replica itself: `tests/replication.rs`.)

use std::collections::BTreeMap;
use std::time::Duration;

use pelican::{AckWait, Verdict};
use pelican_sim::kit::{Fate, Fault, FaultKind, NewEntry, Report, World};
use pelican_sim::SimOptions;

fn entries(n: u64, every_ms: u64) -> Vec<NewEntry> {
    (0..n).map(|i| NewEntry::new(i * every_ms, [("n", (i + 1).to_string())])).collect()
}

fn fates<S>(report: &Report<S>) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for e in &report.entries {
        *out.entry(format!("{:?}", e.fate)).or_default() += 1;
    }
    out
}

#[test]
fn a_failover_loses_the_adds_its_replica_never_had_and_nothing_else() {
    // An entry every 50 ms; the replica copies every 1,000 ms; the failover at 2,750 ms
    // promotes the copy made at 2,000 (before that moment's entry was added): the 16
    // entries added from 2,000 to 2,750 never were.
    let world = World::new(3)
        .consumers(2)
        .server(SimOptions::valkey81())
        .replica_lag(1_000)
        .entries(entries(80, 50))
        .fault(2_750, Fault::Failover { stale_ms: 0 });
    let report = world.run((), |_, _, _| Verdict::Ack);
    report.check().unwrap_or_else(|failure| panic!("{failure}"));
    let gone: Vec<&str> =
        report.entries.iter().filter(|e| e.fate == Fate::Unreplicated).map(|e| e.id.as_str()).collect();
    let want: Vec<String> = (41..=56).map(|n| format!("{n}-0")).collect();
    assert_eq!(gone, want, "{report}");
    assert!(report.entries.iter().all(|e| e.fate == Fate::Unreplicated || e.fate == Fate::Acked), "{report}");
    assert_eq!(report.server.stream.len(), 80 - 16, "the stream the new master holds");
    assert!(report.server.pending.is_empty());
    // The ids the old master gave them are free again, and nothing else was added:
    // the kit's producer does not add them twice.
    assert!(report.server.stream.iter().all(|id| !want.contains(id)));
    // Some were handled on the old master before it went: the story keeps those handlings.
    assert!(report.entries.iter().any(|e| e.fate == Fate::Unreplicated && !e.handlings.is_empty()));
}

#[test]
fn an_entry_the_producer_confirmed_is_never_lost() {
    let (mut confirmed, mut unreplicated, mut unconfirmed_kept) = (0, 0, 0);
    for seed in 0..40 {
        let world = World::new(seed)
            .confirm_adds(100)
            .random_faults([FaultKind::Failover, FaultKind::ReplicaLinkDown, FaultKind::Crash])
            .fault_gap_ms(200, 1_200);
        let report = world.run((), |_, _, _| Verdict::Ack);
        report.check().unwrap_or_else(|failure| panic!("{failure}"));
        for e in &report.entries {
            assert!(!(e.confirmed && e.fate == Fate::Unreplicated), "seed {seed}: {e}");
            confirmed += usize::from(e.confirmed);
            unreplicated += usize::from(e.fate == Fate::Unreplicated);
            unconfirmed_kept += usize::from(!e.confirmed && e.fate == Fate::Acked);
        }
    }
    eprintln!(
        "confirmed adds over 40 worlds: {confirmed} confirmed (none lost), {unconfirmed_kept} unconfirmed but \
         kept, {unreplicated} never replicated"
    );
    assert!(confirmed > 1_000, "most adds are confirmed: {confirmed}");
    assert!(unreplicated > 0, "adds the link down kept from the replica were lost: {unreplicated}");
    assert!(unconfirmed_kept > 0, "a WAIT that ran out does not mean the entry is lost");
}

#[test]
fn consumers_led_to_the_demoted_master_wait_for_the_new_one() {
    let world = World::new(5)
        .consumers(3)
        .entries(entries(60, 100))
        .fault(2_000, Fault::Failover { stale_ms: 1_500 })
        .trace(true);
    let report = world.run((), |_, _, _| Verdict::Ack);
    report.check().unwrap_or_else(|failure| panic!("{failure}"));
    let told = report.notices.get("not-master").copied().unwrap_or(0);
    assert!(told >= 1, "a replica was told: {:?}", report.notices);
    // Nothing was handled while the address led to the replica: only the new master hands
    // out entries (what the old one handed out before is from before 2,000 ms).
    let handled_meanwhile = report
        .entries
        .iter()
        .flat_map(|e| &e.handlings)
        .filter(|h| (2_001..3_500).contains(&h.at_ms))
        .count();
    assert_eq!(handled_meanwhile, 0, "{report}");
    let read = report.trace.iter().filter(|l| l.contains("READONLY") || l.contains("UNBLOCKED")).count();
    assert!(read > 0, "the connections left on the old master were answered as a replica's");
    assert!(report.entries.iter().all(|e| matches!(e.fate, Fate::Acked | Fate::Unreplicated)));
}

/// Failovers (both kinds) and replica links going down among crashes, deaths, disconnects,
/// failing and slow handlers and server restarts, on every server, with one entry in hand or
/// eight, ordered by key or not: every check holds (nothing the replica had is lost, every
/// duplicate is put down to a fault, the order by key is kept).
#[test]
fn failovers_under_faults_keep_every_promise() {
    let mut applied: BTreeMap<FaultKind, u64> = BTreeMap::new();
    let mut fates_seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut notices: BTreeMap<&'static str, u64> = BTreeMap::new();
    for seed in 0..60 {
        let mut world = World::new(seed).random_faults([
            FaultKind::Failover,
            FaultKind::Failover,
            FaultKind::ReplicaLinkDown,
            FaultKind::Crash,
            FaultKind::Disconnect,
            FaultKind::FailingHandler,
            FaultKind::SlowHandler,
            FaultKind::ServerRestart,
            FaultKind::Death,
        ]);
        if seed % 3 == 1 {
            world = world.concurrency(8);
        }
        if seed % 2 == 1 {
            world = world.order_by("k").keys(3);
        }
        if seed % 4 == 3 {
            world = world.ack_wait(AckWait::Replicas { replicas: 1, timeout: Duration::from_millis(50) });
        }
        let report = world.run((), |_, _, _| Verdict::Ack);
        report.check().unwrap_or_else(|failure| panic!("{failure}"));
        for (kind, n) in report.faults_applied() {
            *applied.entry(kind).or_default() += n;
        }
        for (fate, n) in fates(&report) {
            *fates_seen.entry(fate).or_default() += n;
        }
        for (name, n) in &report.notices {
            *notices.entry(name).or_default() += n;
        }
    }
    eprintln!("failovers under faults: {applied:?}; fates {fates_seen:?}; notices {notices:?}");
    assert!(applied.get(&FaultKind::Failover).copied().unwrap_or(0) >= 100, "{applied:?}");
    assert!(applied.get(&FaultKind::ReplicaLinkDown).copied().unwrap_or(0) >= 30, "{applied:?}");
    assert!(fates_seen.get("Unreplicated").copied().unwrap_or(0) > 0, "{fates_seen:?}");
    for path in ["not-master", "acks-unreplicated", "reconnected"] {
        assert!(notices.contains_key(path), "{path} was exercised: {notices:?}");
    }
}

/// Entries handled twice after failovers that lose up to 200 ms of writes (and more when the
/// replica's link was down), over many seeds (80, or `PELICAN_SIM_SEEDS`), with plain acks
/// and with acks that wait for the replica: waiting makes them rarer.
#[test]
fn acks_that_wait_for_the_replica_duplicate_less() {
    let seeds = std::env::var("PELICAN_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(80);
    let run = |wait: bool, link_down: bool| -> (u64, u64, u64) {
        let (mut duplicates, mut unreplicated, mut failovers) = (0, 0, 0);
        for seed in 0..seeds {
            let mut world = World::new(seed).replica_lag(200).faults((1..6).map(|i| {
                let stale_ms = if i % 2 == 0 { 300 } else { 0 };
                (i * 1_300, Fault::Failover { stale_ms })
            }));
            if link_down {
                world = world.faults((1..6).map(|i| (i * 1_300 - 400, Fault::ReplicaLinkDown { ms: 1_000 })));
            }
            if wait {
                world =
                    world.ack_wait(AckWait::Replicas { replicas: 1, timeout: Duration::from_millis(100) });
            }
            let report = world.run((), |_, _, _| Verdict::Ack);
            report.check().unwrap_or_else(|failure| panic!("{failure}"));
            duplicates += report.duplicates().total;
            unreplicated += report.acks_unreplicated;
            failovers += report.faults_applied().get(&FaultKind::Failover).copied().unwrap_or(0);
        }
        (duplicates, unreplicated, failovers)
    };
    let (plain, _, failovers) = run(false, false);
    let (waited, unreplicated, _) = run(true, false);
    eprintln!(
        "entries handled twice over {seeds} worlds ({failovers} failovers): {plain} with plain acks, {waited} \
         with ack_replicas(1, 100 ms) ({unreplicated} acks counted unreplicated)"
    );
    assert!(plain > 0, "the failovers lost acks");
    assert!(waited * 4 < plain, "{waited} with ack_replicas, {plain} without");
    assert_eq!(unreplicated, 0, "a replica whose link is up has every ack at once");

    // With the replica's link down for a second before each failover, a WAIT cannot help the
    // acks of that second: they are counted unreplicated, and handled again.
    let (plain_down, _, _) = run(false, true);
    let (waited_down, unreplicated_down, _) = run(true, true);
    eprintln!(
        "with the link down 1 s before each failover: {plain_down} with plain acks, {waited_down} with \
         ack_replicas ({unreplicated_down} acks counted unreplicated)"
    );
    assert!(unreplicated_down > 0, "the WAITs ran out while the link was down");
    assert!(waited_down > 0, "and their acks were lost");
    assert!(waited_down < plain_down, "{waited_down} with ack_replicas, {plain_down} without");
}

#[test]
fn a_world_with_failovers_replays_from_its_code() {
    // A server other than the one the seed draws, so that the code names it.
    let server = match World::new(9).server_options() == &SimOptions::redis62() {
        true => (SimOptions::redis70(), ".server(SimOptions::redis70())"),
        false => (SimOptions::redis62(), ".server(SimOptions::redis62())"),
    };
    let world = World::new(9)
        .server(server.0)
        .replica_lag(150)
        .ack_wait(AckWait::Replicas { replicas: 1, timeout: Duration::from_millis(100) })
        .confirm_adds(50)
        .fault(1_000, Fault::ReplicaLinkDown { ms: 700 })
        .fault(1_500, Fault::Failover { stale_ms: 400 });
    let code = world.to_string();
    for part in [
        server.1,
        ".replica_lag(150)",
        ".ack_wait(pelican::AckWait::Replicas { replicas: 1, timeout: std::time::Duration::from_millis(100) })",
        ".confirm_adds(50)",
        ".fault(1000, Fault::ReplicaLinkDown { ms: 700 })",
        ".fault(1500, Fault::Failover { stale_ms: 400 })",
    ] {
        assert!(code.contains(part), "{part} in\n{code}");
    }
    let first = world.run((), |_, _, _| Verdict::Ack);
    first.check().unwrap_or_else(|failure| panic!("{failure}"));
    let again = first.world.run((), |_, _, _| Verdict::Ack);
    assert_eq!(first.entries, again.entries, "the same story");
    assert_eq!(first.acks_unreplicated, again.acks_unreplicated);
    assert_eq!(first.world.acks_wait_for(), world.acks_wait_for());
    assert_eq!(first.world.adds_confirmed_within_ms(), Some(50));
    assert!(first.entries.iter().any(|e| e.confirmed));
    assert!(first.entries.iter().any(|e| e.fate == Fate::Unreplicated), "{first}");
}
