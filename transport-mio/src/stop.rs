//! Stopping a runner from any thread: a stop, or an abandon.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use mio::Waker;
use pelican::Consumer;

/// Stop requests made from other threads, passed on to a consumer by its driver's thread.
#[derive(Debug, Default)]
pub(crate) struct StopFlags {
    requested: AtomicBool,
    abandoned: AtomicBool,
}

impl StopFlags {
    /// Tells `consumer` what has been asked: an abandon outranks a stop.
    pub(crate) fn apply(&self, consumer: &mut Consumer) {
        if self.abandoned.load(Ordering::Acquire) {
            consumer.abandon();
        } else if self.requested.load(Ordering::Acquire) {
            consumer.stop();
        }
    }
}

/// Stops a [`Runner`](crate::Runner) from any thread: the consumer hands out nothing more,
/// finishes the entries in hand (one with [`run`](crate::Runner::run), up to the concurrency
/// with [`run_pool`](crate::Runner::run_pool)), confirms its earned acks and returns. Cheap
/// to clone; stopping twice is harmless.
#[derive(Clone, Debug)]
pub struct StopHandle {
    inner: Arc<StopInner>,
}

#[derive(Debug)]
struct StopInner {
    flags: StopFlags,
    waker: Waker,
}

impl StopHandle {
    pub(crate) fn new(waker: Waker) -> StopHandle {
        StopHandle { inner: Arc::new(StopInner { flags: StopFlags::default(), waker }) }
    }

    pub(crate) fn flags(&self) -> &StopFlags {
        &self.inner.flags
    }

    /// Wakes the runner's poll (a worker of [`Runner::run_pool`](crate::Runner::run_pool)
    /// finished an entry): the poll has room for one waker only.
    pub(crate) fn wake(&self) {
        // A failed wake costs only time: the runner drives again at its next deadline.
        let _ = self.inner.waker.wake();
    }

    /// Asks the runner to stop and wakes its poll. Returns at once; the runner's `run`
    /// returns when the consumer has stopped. Before `run` starts, `run` stops at once.
    pub fn stop(&self) {
        self.inner.flags.requested.store(true, Ordering::Release);
        // A failed wake leaves the flag set: the runner sees it at its next wake-up.
        let _ = self.inner.waker.wake();
    }

    /// Asks the runner to stop without waiting on the server (see
    /// [`Consumer::abandon`](pelican::Consumer::abandon)), e.g. when a [`stop`](Self::stop)
    /// waits on an unreachable server to confirm acks. A handler already running finishes
    /// (it cannot be interrupted: the run returns once it has) but its verdict is not sent;
    /// the entries in hand and those whose acks are not yet confirmed stay pending, to be
    /// delivered again.
    pub fn abandon(&self) {
        self.inner.flags.abandoned.store(true, Ordering::Release);
        self.stop();
    }

    /// True once [`stop`](Self::stop) or [`abandon`](Self::abandon) has been called on any
    /// clone.
    pub fn is_requested(&self) -> bool {
        self.inner.flags.requested.load(Ordering::Acquire)
    }
}
