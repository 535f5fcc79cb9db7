//! Adding and removing a running consumer's streams from any thread ([`StreamSet`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use pelican::{Consumer, StreamChange};

use crate::stop::StopHandle;

/// The changes asked and not yet made, passed on by the runner's thread at each drive.
#[derive(Debug, Default)]
pub(crate) struct Changes {
    asked: Mutex<Vec<StreamChange>>,
    /// Something is asked: the drive looks at the lock only then.
    pending: AtomicBool,
}

impl Changes {
    /// Makes the changes asked on `consumer`.
    #[inline]
    pub(crate) fn apply(&self, consumer: &mut Consumer) {
        if self.pending.load(Ordering::Acquire) {
            self.apply_asked(consumer);
        }
    }

    #[cold]
    fn apply_asked(&self, consumer: &mut Consumer) {
        self.pending.store(false, Ordering::Release);
        let asked = std::mem::take(&mut *self.asked.lock().unwrap_or_else(PoisonError::into_inner));
        consumer.change_streams(asked);
    }

    fn ask(&self, change: StreamChange) {
        self.asked.lock().unwrap_or_else(PoisonError::into_inner).push(change);
        self.pending.store(true, Ordering::Release);
    }
}

/// Adds streams to a running consumer and removes them, from any thread
/// ([`Runner::stream_set`](crate::Runner::stream_set)): made at the runner's next turn, as
/// [`Consumer::add_stream`] and [`Consumer::remove_stream`] make them (a stream added is
/// drained, then read with the others on the same connection; one removed is read no more,
/// its entries in hand finished).
#[derive(Clone, Debug)]
pub struct StreamSet {
    changes: Arc<Changes>,
    wake: StopHandle,
}

impl StreamSet {
    pub(crate) fn new(changes: Arc<Changes>, wake: StopHandle) -> StreamSet {
        StreamSet { changes, wake }
    }

    /// Reads `key` too (nothing if it is read already).
    pub fn add(&self, key: impl Into<Bytes>) {
        self.changes.ask(StreamChange::Add(key.into()));
        self.wake.wake();
    }

    /// Reads `key` no more (nothing if it is not read).
    pub fn remove(&self, key: impl Into<Bytes>) {
        self.changes.ask(StreamChange::Remove(key.into()));
        self.wake.wake();
    }
}
