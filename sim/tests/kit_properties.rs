//! Property tests over the test kit (feature `proptest`): for any world the strategies draw,
//! one entry in hand at a time or many, ordered by key or not, pelican keeps its promises
//! and an idempotent handler's side effects add up; a naive
//! handler's side effects are exactly one application per handling; reports replay; and
//! proptest's shrinking brings a failure of the naive handler down to a small schedule.

use std::collections::BTreeSet;

use pelican::Verdict;
use pelican_sim::kit::strategy::{self, Worlds};
use pelican_sim::kit::{FaultKind, HandlerCtx, Report, World};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestError, TestRng, TestRunner};

#[derive(Debug, Default)]
struct Bank {
    balance: u64,
    applied: BTreeSet<String>,
}

fn amount(fields: &[(Vec<u8>, Vec<u8>)]) -> u64 {
    let value = fields.iter().find(|(n, _)| n == b"amount").map(|(_, v)| v);
    value.and_then(|v| std::str::from_utf8(v).ok()?.parse().ok()).unwrap_or(0)
}

fn naive(bank: &mut Bank, _: &HandlerCtx<'_>, entry: &pelican::Entry) -> Verdict {
    bank.balance +=
        entry.field(b"amount").and_then(|a| std::str::from_utf8(a).ok()?.parse::<u64>().ok()).unwrap_or(0);
    Verdict::Ack
}

fn idempotent(bank: &mut Bank, ctx: &HandlerCtx<'_>, entry: &pelican::Entry) -> Verdict {
    if bank.applied.insert(String::from_utf8_lossy(entry.id()).into_owned()) {
        naive(bank, ctx, entry);
    }
    Verdict::Ack
}

/// The balance is the sum of the amounts of the entries that succeeded, each once.
fn balanced(report: &Report<Bank>) -> Result<(), String> {
    let expected: u64 = report.entries.iter().filter(|e| e.succeeded()).map(|e| amount(&e.fields)).sum();
    if report.state.balance == expected {
        Ok(())
    } else {
        Err(format!("balance {} != {expected}", report.state.balance))
    }
}

fn small() -> Worlds {
    Worlds { max_entries: 25, max_faults: 6, phase_ms: 2_000, ..Worlds::default() }
}

/// Up to 8 entries in hand, ordered by one of 3 keys.
fn ordered() -> Worlds {
    Worlds { concurrency: 1..=8, keys: 3, ..small() }
}

proptest! {
    // No regression files: a failure prints its world, which is the replay.
    #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn pelican_keeps_its_promises_and_an_idempotent_handler_adds_up(world in strategy::worlds(small())) {
        let report = world.run(Bank::default(), idempotent);
        if let Err(failure) = report.check_with(|_| balanced(&report)) {
            return Err(TestCaseError::fail(failure.to_string()));
        }
        prop_assert!(report.quiescent);
    }

    #[test]
    fn with_many_in_hand_and_an_order_by_key_too(world in strategy::worlds(ordered())) {
        prop_assert_eq!(world.ordered_by(), Some(strategy::KEY_FIELD.as_bytes()));
        let report = world.run(Bank::default(), idempotent);
        if let Err(failure) = report.check_with(|_| balanced(&report)) {
            return Err(TestCaseError::fail(failure.to_string()));
        }
        prop_assert!(report.quiescent);
        let mut handlings = report.entries.iter().flat_map(|e| &e.handlings);
        prop_assert!(handlings.all(|h| h.key.is_some()), "every entry has its key");
    }

    #[test]
    fn a_naive_handler_applies_once_per_handling_and_replays(world in strategy::worlds(small())) {
        let report = world.run(Bank::default(), naive);
        let applied: u64 = report
            .entries
            .iter()
            .map(|e| e.handlings.iter().filter(|h| h.by_handler).count() as u64 * amount(&e.fields))
            .sum();
        prop_assert_eq!(report.state.balance, applied);
        // Its surplus is the duplicates', every one put down to a fault.
        let dups = report.duplicates();
        prop_assert_eq!(dups.unexplained, 0);
        prop_assert_eq!(dups.total, report.entries.iter().map(|e| e.duplicates() as u64).sum::<u64>());
        if dups.total == 0 {
            prop_assert!(balanced(&report).is_ok());
        }
        let again = report.world.run(Bank::default(), naive);
        prop_assert_eq!(again.state.balance, report.state.balance);
        prop_assert_eq!(again.faults, report.faults);
        prop_assert_eq!(again.entries, report.entries);
    }
}

/// proptest finds a world where the naive handler applies an entry twice and shrinks it to
/// a schedule of one or two faults, a crash (or an abandon, which also drops the verdict)
/// among them.
#[test]
fn shrinking_finds_a_minimal_failing_schedule_for_a_naive_handler() {
    let spec = Worlds {
        kinds: vec![FaultKind::Crash, FaultKind::Disconnect, FaultKind::SlowHandler],
        concurrency: 1..=8,
        ..small()
    };
    // A fixed seed: the figure asserted (how small the shrunk world is) does not vary by run.
    let config = Config { cases: 256, failure_persistence: None, ..Config::default() };
    let mut runner = TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    let outcome = runner.run(&strategy::worlds(spec), |world: World| {
        let report = world.run(Bank::default(), naive);
        report.check_with(|_| balanced(&report)).map_err(|f| TestCaseError::fail(f.to_string()))
    });
    let Err(TestError::Fail(reason, minimal)) = outcome else { panic!("no failure found: {outcome:?}") };
    eprintln!("minimal failing world ({reason}):\n{minimal}");
    let faults = minimal.scheduled_faults();
    assert!((1..=2).contains(&faults.len()), "{minimal}");
    assert!(faults.iter().any(|(_, f)| f.kind() == FaultKind::Crash), "{minimal}");
    assert!(minimal.given_entries().map_or(0, <[_]>::len) <= 3, "{minimal}");
    assert_eq!(minimal.max_in_hand(), 1, "no concurrency needed: {minimal}");
    let report = minimal.run(Bank::default(), idempotent);
    report.check_with(|_| balanced(&report)).unwrap_or_else(|f| panic!("{f}"));
}
