//! Where a lane's latest snapshot is published ([`Published`]), for `--metrics`
//! (`super::metrics`), the overdue watch (`super::overdue`) and the drained watch
//! (`super::drained`): filled by a smol lane's runner, or by a [`Publisher`] for a mio lane
//! the CLI drives itself.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use pelican::{Consumer, Snapshot};

/// Reads a lane's latest snapshot.
type Read = Box<dyn Fn() -> Snapshot + Send + Sync>;

/// Where the metrics read a lane's snapshots: empty (all zeros, not connected) until the
/// lane's transport starts and fills it.
#[derive(Clone, Default)]
pub struct Published(Arc<OnceLock<Read>>);

impl Published {
    /// The lane's latest snapshot.
    pub fn read(&self) -> Snapshot {
        self.0.get().map_or_else(Snapshot::default, |read| read())
    }

    /// Reads the lane through `read` from now on (a smol runner's stats handle); once.
    pub fn follow(&self, read: impl Fn() -> Snapshot + Send + Sync + 'static) {
        let _ = self.0.set(Box::new(read));
    }

    /// A publisher for a lane whose consumer the CLI drives itself (mio).
    pub fn publisher(&self) -> Publisher {
        let latest = Arc::new(Mutex::new(Snapshot::default()));
        let read = latest.clone();
        self.follow(move || read.lock().unwrap_or_else(PoisonError::into_inner).clone());
        Publisher { latest, last: Snapshot::default() }
    }
}

/// Publishes a driven consumer's snapshot for the metrics.
pub struct Publisher {
    latest: Arc<Mutex<Snapshot>>,
    /// What was last published, compared without the lock.
    last: Snapshot,
}

impl Publisher {
    /// Publishes `consumer`'s snapshot if it changed since the last time.
    pub fn publish(&mut self, consumer: &Consumer) {
        if consumer.refresh_snapshot(&mut self.last) {
            self.latest.lock().unwrap_or_else(PoisonError::into_inner).clone_from(&self.last);
        }
    }
}
