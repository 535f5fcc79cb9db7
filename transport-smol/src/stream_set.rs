//! Adding and removing a running consumer's streams from any thread or task ([`StreamSet`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use event_listener::Event;
use pelican::{Consumer, StreamChange};

/// The changes asked and not yet made, passed on by the runner at its next turn.
#[derive(Debug, Default)]
pub(crate) struct Changes {
    asked: Mutex<Vec<StreamChange>>,
    /// Something is asked: the runner looks at the lock only then.
    pending: AtomicBool,
    /// Wakes the runner's wait.
    woken: Event,
}

impl Changes {
    /// Makes the changes asked on `consumer`.
    #[inline]
    pub(crate) fn apply(&self, consumer: &mut Consumer) {
        if self.pending.load(Ordering::Acquire) {
            self.pending.store(false, Ordering::Release);
            let asked = std::mem::take(&mut *self.asked.lock().unwrap_or_else(PoisonError::into_inner));
            consumer.change_streams(asked);
        }
    }

    /// Returns once a change is asked (at once if one is).
    pub(crate) async fn asked(&self) {
        loop {
            if self.pending.load(Ordering::Acquire) {
                return;
            }
            let woken = self.woken.listen();
            if self.pending.load(Ordering::Acquire) {
                return;
            }
            woken.await;
        }
    }

    fn ask(&self, change: StreamChange) {
        self.asked.lock().unwrap_or_else(PoisonError::into_inner).push(change);
        self.pending.store(true, Ordering::Release);
        self.woken.notify(usize::MAX);
    }
}

/// Adds streams to a running consumer and removes them, from any thread or task
/// ([`Runner::stream_set`](crate::Runner::stream_set)): made at the runner's next turn, as
/// [`Consumer::add_stream`] and [`Consumer::remove_stream`] make them (a stream added is
/// drained, then read with the others on the same connection; one removed is read no more,
/// its entries in hand finished).
#[derive(Clone, Debug)]
pub struct StreamSet {
    changes: Arc<Changes>,
}

impl StreamSet {
    pub(crate) fn new(changes: Arc<Changes>) -> StreamSet {
        StreamSet { changes }
    }

    /// Reads `key` too (nothing if it is read already).
    pub fn add(&self, key: impl Into<Bytes>) {
        self.changes.ask(StreamChange::Add(key.into()));
    }

    /// Reads `key` no more (nothing if it is not read).
    pub fn remove(&self, key: impl Into<Bytes>) {
        self.changes.ask(StreamChange::Remove(key.into()));
    }
}
