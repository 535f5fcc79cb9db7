//! A handler that is not idempotent, caught by pelican-sim's test kit.
//!
//! A bank adds each payment's `amount` to a balance. The naive handler just adds it: when its
//! process crashes after the addition but before the ack reaches the server, the payment
//! comes back (the restarted consumer drains its pending list, or a peer reclaims it) and is
//! added twice. The fixed handler keeps the ids of the payments applied with the balance,
//! in one transaction, and adds each once.
//!
//! The kit searches 200 seeded worlds (3 consumers, 30 payments, random faults of every
//! kind) for one where the balance is not the sum of the payments that succeeded, shrinks it
//! to a minimal failing schedule and prints it (as code, to replay); then runs the same
//! search with the fixed handler, which passes. Exit status 0 when both go as expected.
//!
//! `cargo run -p pelican-sim --example non-idempotent-handler`

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::time::Instant;

use pelican::{Entry, Verdict};
use pelican_sim::kit::{search, FaultKind, HandlerCtx, NewEntry, Report, World};

/// The bank's database: what survives a crash.
#[derive(Debug, Default)]
struct Bank {
    balance: u64,
    /// Ids of the payments applied, written with the balance (the fixed handler only).
    applied: BTreeSet<String>,
}

fn amount(entry: &Entry) -> u64 {
    entry.field(b"amount").and_then(|a| std::str::from_utf8(a).ok()?.parse().ok()).unwrap_or(0)
}

/// Adds the payment, whether or not it was added before.
fn naive(bank: &mut Bank, _: &HandlerCtx<'_>, entry: &Entry) -> Verdict {
    bank.balance += amount(entry);
    Verdict::Ack
}

/// Adds the payment once: its id and the new balance are written together.
fn idempotent(bank: &mut Bank, _: &HandlerCtx<'_>, entry: &Entry) -> Verdict {
    if bank.applied.insert(String::from_utf8_lossy(entry.id()).into_owned()) {
        bank.balance += amount(entry);
    }
    Verdict::Ack
}

/// 30 payments of 1 to 100 over 3 seconds.
fn payments(seed: u64) -> Vec<NewEntry> {
    (0..30u64)
        .map(|i| {
            let amount = (seed.wrapping_mul(31).wrapping_add(i * 17)) % 100 + 1;
            NewEntry::new(i * 100, [("amount", amount.to_string())])
        })
        .collect()
}

fn worlds() -> impl Iterator<Item = World> {
    (1..=200).map(|seed| {
        World::new(seed).consumers(3).phase_ms(3_000).entries(payments(seed)).random_faults(FaultKind::ALL)
    })
}

/// The invariant: the balance is the sum of the payments that succeeded, each once.
fn balanced(report: &Report<Bank>) -> Result<(), String> {
    let expected: u64 = report
        .entries
        .iter()
        .filter(|e| e.succeeded())
        .map(|e| {
            e.field(b"amount").and_then(|a| std::str::from_utf8(a).ok()?.parse::<u64>().ok()).unwrap_or(0)
        })
        .sum();
    let balance = report.state.balance;
    if balance == expected {
        Ok(())
    } else {
        Err(format!("the balance is {balance}, the payments that succeeded add up to {expected}"))
    }
}

type Handler = fn(&mut Bank, &HandlerCtx<'_>, &Entry) -> Verdict;

fn property(handler: Handler) -> impl FnMut(&World) -> Result<(), pelican_sim::kit::Failure> {
    move |world| {
        let report = world.run(Bank::default(), handler);
        report.check_with(|_| balanced(&report))
    }
}

fn main() -> ExitCode {
    println!("The naive handler, over 200 worlds with random faults:");
    let start = Instant::now();
    let Some(found) = search(worlds(), property(naive)) else {
        println!("  not caught: every world passed (unexpected)");
        return ExitCode::FAILURE;
    };
    let took = start.elapsed();
    println!(
        "  caught at seed {}; shrunk to a minimal failing schedule ({} worlds run in {:.2} s, {:.0} per second):\n",
        found.first.world.seed(),
        found.runs,
        took.as_secs_f64(),
        found.runs as f64 / took.as_secs_f64()
    );
    // The failure tells the story of the payment applied twice: each handling, and an Ack
    // that never reached the consumer ("never settled": its process died first).
    println!("{}\n", found.minimal);
    let report = found.minimal.world.run(Bank::default(), naive);
    for f in &report.faults {
        println!("  fault at {} ms: {:?}{}", f.at_ms, f.fault, if f.applied { "" } else { " (skipped)" });
    }

    println!("\nThe idempotent handler, over the same 200 worlds:");
    let start = Instant::now();
    if let Some(found) = search(worlds(), property(idempotent)) {
        println!("  failed (unexpected):\n{}", found.minimal);
        return ExitCode::FAILURE;
    }
    let took = start.elapsed();
    println!("  all pass ({:.2} s, {:.0} worlds per second)", took.as_secs_f64(), 200.0 / took.as_secs_f64());
    if let Err(failure) = property(idempotent)(&found.minimal.world) {
        println!("  the minimal world fails it (unexpected):\n{failure}");
        return ExitCode::FAILURE;
    }
    println!("  and so does the minimal world above, which the naive handler fails.");
    ExitCode::SUCCESS
}
