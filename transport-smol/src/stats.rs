//! Reading a running consumer's counters from any task or thread.

use std::sync::{Arc, Mutex, PoisonError};

use pelican::{Consumer, Snapshot};

/// Reads a runner's consumer while it runs, from any task or thread: its counters, the
/// entries in hand and buffered, whether it is connected ([`Snapshot`]). Cheap to clone
/// (`Clone + Send + Sync`); reading never waits on the runner's loop.
///
/// The runner publishes a new snapshot after each step of its loop (a read, a write, a
/// timeout, a connect; the entries handled and settled meanwhile) that changed something —
/// one short lock then, none for each entry and none while nothing changes — and a last one
/// as it returns; [`get`](Self::get) copies the latest.
#[derive(Clone, Debug, Default)]
pub struct StatsHandle {
    latest: Arc<Mutex<Snapshot>>,
}

impl StatsHandle {
    /// The latest snapshot published (all zeros and disconnected before the run starts).
    pub fn get(&self) -> Snapshot {
        self.latest.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// The runner's side of a [`StatsHandle`]: publishes what changed since it last did.
#[derive(Debug, Default)]
pub(crate) struct Publisher {
    handle: StatsHandle,
    /// What was last published, compared without the lock.
    last: Snapshot,
}

impl Publisher {
    pub(crate) fn handle(&self) -> StatsHandle {
        self.handle.clone()
    }

    /// Publishes `consumer`'s snapshot if it differs from the last one published: one lock
    /// per turn that changed something, none while nothing does (parked, or waiting out an
    /// outage).
    pub(crate) fn publish(&mut self, consumer: &Consumer) {
        if consumer.refresh_snapshot(&mut self.last) {
            self.handle.latest.lock().unwrap_or_else(PoisonError::into_inner).clone_from(&self.last);
        }
    }
}
