//! Failovers in the kit: under faults they lose nothing that survived, duplicates are put
//! down to them, and `ack_replicas` makes them rarer. (The simulator's replica itself:
//! `tests/replication.rs`.)

use std::time::Duration;

use pelican::{Config, Verdict};
use pelican_sim::kit::{Fault, FaultKind, World};

/// Failovers among other faults: every check holds (nothing that survived is lost, every
/// duplicate is put down to a fault), on every server, many seeds.
#[test]
fn failovers_under_faults_keep_every_promise() {
    let mut applied = 0;
    for seed in 0..60 {
        let world =
            World::new(seed).random_faults([FaultKind::Failover, FaultKind::Crash, FaultKind::Disconnect]);
        let report = world.run((), |_, _, _| Verdict::Ack);
        report.check().unwrap_or_else(|failure| panic!("{failure}"));
        applied += report.faults_applied().get(&FaultKind::Failover).copied().unwrap_or(0);
    }
    assert!(applied >= 60, "failovers were drawn and applied: {applied}");
}

/// Entries handled twice after failovers that lose 200 ms of writes, over many seeds, with
/// plain acks and with acks that wait for the replica: waiting makes them rarer.
#[test]
fn acks_that_wait_for_the_replica_duplicate_less() {
    let duplicates = |wait: bool| -> u64 {
        (0..40)
            .map(|seed| {
                let world = World::new(seed)
                    .replica_lag(200)
                    .faults((1..6).map(|i| (i * 1_300, Fault::Failover)))
                    .configure(move |config: Config| match wait {
                        true => config.ack_replicas(1, Duration::from_millis(100)),
                        false => config,
                    });
                let report = world.run((), |_, _, _| Verdict::Ack);
                report.check().unwrap_or_else(|failure| panic!("{failure}"));
                report.duplicates().total
            })
            .sum()
    };
    let (plain, waited) = (duplicates(false), duplicates(true));
    eprintln!("entries handled twice over 40 worlds of 5 failovers: {plain} with plain acks, {waited} with ack_replicas");
    assert!(plain > 0, "the failovers lost acks");
    assert!(waited < plain / 2, "{waited} with ack_replicas, {plain} without");
}
