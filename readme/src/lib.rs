//! The Rust examples of the repository's READMEs, compiled and run as this crate's doctests
//! (`cargo test -p pelican-readme --doc`; `scripts/test` runs them with the workspace), so
//! that an example that no longer matches the API fails the tests. Examples that need a
//! server are `no_run` (compiled, not run); the rest run. The setup an example leaves out
//! is in its hidden (`# `) lines, or, when too long to hide well, here: [`Bank`] and
//! [`payments`], the handler and entries of the test-kit example.
//!
//! A crate of its own because the examples use every published crate at once (`pelican`,
//! both transports, `pelican-tls`, `pelican-metrics`, `pelican-sim`), which none of them
//! depends on; `pelican-tests` cannot be the one, the transports being its dependents (their
//! dev-dependency).

use std::collections::BTreeSet;

use pelican::{Entry, Verdict};
use pelican_sim::kit::{NewEntry, Report};

/// The top-level README.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct Readme;

/// The README's bank (the test-kit example): a database that survives crashes, holding a
/// balance and the ids of the payments applied, written together, so that each payment is
/// added once however often it is delivered (an idempotent handler).
#[derive(Debug, Default)]
pub struct Bank {
    /// The sum of the payments applied.
    pub balance: u64,
    /// The ids of the payments applied.
    pub applied: BTreeSet<Vec<u8>>,
}

impl Bank {
    /// The handler: adds the payment's `amount` unless its id was applied before.
    pub fn apply(&mut self, entry: &Entry) -> Verdict {
        if self.applied.insert(entry.id().to_vec()) {
            self.balance += amount(entry.field(b"amount"));
        }
        Verdict::Ack
    }

    /// The invariant: the balance is the sum of the payments that succeeded, each once.
    pub fn balance_matches(&self, report: &Report<Bank>) -> Result<(), String> {
        let succeeded = report.entries.iter().filter(|e| e.succeeded());
        let expected: u64 = succeeded.map(|e| amount(e.field(b"amount"))).sum();
        if self.balance == expected {
            Ok(())
        } else {
            Err(format!("the balance is {}, the payments that succeeded add up to {expected}", self.balance))
        }
    }
}

/// 30 payments of 1 to 9, one every 100 ms of virtual time.
pub fn payments() -> Vec<NewEntry> {
    (0..30u64).map(|i| NewEntry::new(i * 100, [("amount", (i % 9 + 1).to_string())])).collect()
}

/// A payment's amount, 0 if it has none or it is not a number.
fn amount(value: Option<&[u8]>) -> u64 {
    value.and_then(|a| std::str::from_utf8(a).ok()?.parse().ok()).unwrap_or(0)
}
