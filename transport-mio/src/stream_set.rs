//! Adding and removing a running consumer's streams from any thread ([`StreamSet`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use bytes::Bytes;
use pelican::{Consumer, StreamChanges};

use crate::stop::StopHandle;

/// The changes asked and not yet made, passed on by the runner's thread at each drive.
#[derive(Debug)]
pub(crate) struct Changes {
    state: Mutex<StreamChanges>,
    /// Something is asked: the drive looks at the lock only then.
    pending: AtomicBool,
}

impl Changes {
    /// Nothing asked; `consumer`'s streams read.
    pub(crate) fn new(consumer: &Consumer) -> Changes {
        Changes { state: Mutex::new(StreamChanges::new(consumer)), pending: AtomicBool::new(false) }
    }

    /// Makes the changes asked on `consumer`.
    #[inline]
    pub(crate) fn apply(&self, consumer: &mut Consumer) {
        if self.pending.load(Ordering::Acquire) {
            self.apply_asked(consumer);
        }
    }

    #[cold]
    fn apply_asked(&self, consumer: &mut Consumer) {
        // Held while the changes are made, so that what is read and what is asked stay one.
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        self.pending.store(false, Ordering::Release);
        state.apply(consumer);
    }

    /// Asks `key` added: whether the consumer will take it (see [`StreamSet::add`]).
    fn add(&self, key: Bytes) -> bool {
        if !self.state.lock().unwrap_or_else(PoisonError::into_inner).add(key) {
            return false;
        }
        self.pending.store(true, Ordering::Release);
        true
    }

    /// Asks `key` removed: whether it was read (or asked to be).
    fn remove(&self, key: Bytes) -> bool {
        if !self.state.lock().unwrap_or_else(PoisonError::into_inner).remove(key) {
            return false;
        }
        self.pending.store(true, Ordering::Release);
        true
    }
}

/// Adds streams to a running consumer and removes them, from any thread
/// ([`Runner::stream_set`](crate::Runner::stream_set)): made at the runner's next turn, as
/// [`Consumer::add_stream`] and [`Consumer::remove_stream`] make them (a stream added is
/// drained, then read with the others on the same connection; one removed is read no more,
/// its entries in hand finished).
///
/// Each call says at once whether it was taken, checked against what the consumer will read
/// once every change asked before it is made — its streams, with those asked since — and
/// refused as the consumer would refuse it. Changes asked before [`run`](crate::Runner::run)
/// are made as it starts.
#[derive(Clone, Debug)]
pub struct StreamSet {
    changes: Weak<Changes>,
    wake: StopHandle,
}

impl StreamSet {
    pub(crate) fn new(changes: &Arc<Changes>, wake: StopHandle) -> StreamSet {
        StreamSet { changes: Arc::downgrade(changes), wake }
    }

    /// Reads `key` too. True if taken: the consumer reads it from its next turn on. False,
    /// changing nothing, if it is read already (or asked to be), the consumer reads
    /// [`MAX_STREAMS`](pelican::MAX_STREAMS) streams (counting those asked), a stop or an abandon has been asked
    /// ([`StopHandle`]), the consumer refused an add before (it is stopping, or failed), or
    /// the runner is gone (its run returned, or it was dropped).
    ///
    /// A stream taken is read unless the consumer stops first: one that fails for good
    /// between this call and its next turn reads nothing more at all, this stream neither.
    pub fn add(&self, key: impl Into<Bytes>) -> bool {
        let Some(changes) = self.changes.upgrade() else { return false };
        if self.wake.is_requested() || !changes.add(key.into()) {
            return false;
        }
        self.wake.wake();
        true
    }

    /// Reads `key` no more. True if taken: it was read (or asked to be), and is read no more
    /// from the consumer's next turn (even while it stops: its entries in hand are
    /// finished). False, changing nothing, if it is not read, or the runner is gone.
    pub fn remove(&self, key: impl Into<Bytes>) -> bool {
        let Some(changes) = self.changes.upgrade() else { return false };
        if !changes.remove(key.into()) {
            return false;
        }
        self.wake.wake();
        true
    }
}

#[cfg(test)]
mod tests {
    use pelican::{Config, MAX_STREAMS};

    use crate::Runner;

    /// A runner that never runs: nothing connects (the port is never dialled).
    fn runner() -> Runner {
        Runner::new("127.0.0.1:9", Config::new("s0", "g", "c").streams(["s0", "s1"])).expect("a runner")
    }

    #[test]
    fn each_change_says_whether_it_was_taken() {
        let runner = runner();
        let set = runner.stream_set();
        assert!(!set.add("s0") && !set.add("s1"), "read already");
        assert!(!set.remove("s2"), "not read");
        assert!(set.add("s2") && !set.add("s2"), "taken once");
        assert!(set.remove("s2") && !set.remove("s2"), "removed once");
        assert!(set.remove("s0") && set.add("s0"), "removed, then added again");
        // Up to the most, counting what is asked and not yet made.
        let room = MAX_STREAMS - 2;
        assert_eq!((0..room).filter(|i| set.add(format!("more:{i}"))).count(), room);
        assert!(!set.add("one-too-many"));
        assert!(set.remove("more:0") && set.add("one-too-many"), "a removal makes room");
        drop(runner);
        assert!(!set.add("s3") && !set.remove("s0"), "the runner is gone");
    }

    #[test]
    fn a_stop_takes_no_stream() {
        let runner = runner();
        let set = runner.stream_set();
        runner.stop_handle().stop();
        assert!(!set.add("s2"), "stopping");
        assert!(set.remove("s1"), "a removal is taken while stopping");
    }
}
