//! Reading a running consumer's counters from any thread.

use std::sync::{Arc, Mutex, PoisonError};

use pelican::{Consumer, Snapshot};

/// Reads a runner's consumer while it runs, from any thread: its counters, the entries in
/// hand and buffered, whether it is connected ([`Snapshot`]). Cheap to clone (`Clone + Send
/// + Sync`); reading never waits on the runner's loop.
///
/// The runner publishes a new snapshot after each turn of its loop (a drive of the
/// connection: what was read, written, handled, settled, timed out) that changed something —
/// one short lock then, none for each entry handled within the turn and none while nothing
/// changes — and a last one as it returns; [`get`](Self::get) copies the latest. A handler
/// running inline ([`Runner::run`](crate::Runner::run)) holds its turn up: what the entries of
/// that turn change shows once the turn ends.
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
