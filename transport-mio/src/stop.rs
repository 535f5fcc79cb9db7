//! Stopping a runner from any thread: a stop, a stop with a deadline, or an abandon.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::Waker;
use pelican::Consumer;

/// No deadline, in [`StopFlags::deadline`].
const NEVER: u64 = u64::MAX;

/// Stop requests made from other threads, passed on to a consumer by its driver's thread.
#[derive(Debug)]
pub(crate) struct StopFlags {
    requested: AtomicBool,
    abandoned: AtomicBool,
    /// When a stop becomes an abandon ([`StopHandle::stop_within`]): nanoseconds after
    /// `base`, the earliest asked, or [`NEVER`]. An atomic, not a lock: read by the runner at
    /// each wait while a stop is under way.
    deadline: AtomicU64,
    base: Instant,
}

impl Default for StopFlags {
    fn default() -> StopFlags {
        StopFlags {
            requested: AtomicBool::new(false),
            abandoned: AtomicBool::new(false),
            deadline: AtomicU64::new(NEVER),
            base: Instant::now(),
        }
    }
}

impl StopFlags {
    /// Tells `consumer` what has been asked: an abandon outranks a stop, and a stop past its
    /// deadline is an abandon. Called for every entry: while nothing is asked, two loads.
    #[inline]
    pub(crate) fn apply(&self, consumer: &mut Consumer) {
        if self.abandoned.load(Ordering::Acquire) {
            consumer.abandon();
        } else if self.requested.load(Ordering::Acquire) {
            self.stop_or_abandon(consumer);
        }
    }

    /// A stop is asked: a stop, or an abandon once its deadline has passed.
    #[cold]
    fn stop_or_abandon(&self, consumer: &mut Consumer) {
        if self.deadline().is_some_and(|at| Instant::now() >= at) {
            self.abandoned.store(true, Ordering::Release);
            consumer.abandon();
        } else {
            consumer.stop();
        }
    }

    /// When a stop under way becomes an abandon, if a deadline was given: the runner wakes
    /// then. `None` while no stop is asked (one atomic load: cheap at every wait).
    pub(crate) fn deadline(&self) -> Option<Instant> {
        if !self.requested.load(Ordering::Acquire) || self.abandoned.load(Ordering::Acquire) {
            return None;
        }
        match self.deadline.load(Ordering::Acquire) {
            NEVER => None,
            nanos => self.base.checked_add(Duration::from_nanos(nanos)),
        }
    }

    /// Sets the deadline `limit` from now, unless an earlier one is set. A limit too far off
    /// to count sets none.
    fn set_deadline(&self, limit: Duration) {
        let Some(at) = Instant::now().checked_add(limit) else { return };
        let nanos = u64::try_from(at.duration_since(self.base).as_nanos()).unwrap_or(NEVER).min(NEVER - 1);
        self.deadline.fetch_min(nanos, Ordering::AcqRel);
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
    /// returns when the consumer has stopped: the entries in hand finished and settled, and
    /// the acks earned confirmed by the server, however long that takes (during an outage,
    /// until the server is back; [`stop_within`](Self::stop_within) puts a limit on it).
    /// Before `run` starts, `run` stops at once.
    pub fn stop(&self) {
        self.inner.flags.requested.store(true, Ordering::Release);
        // A failed wake leaves the flag set: the runner sees it at its next wake-up.
        let _ = self.inner.waker.wake();
    }

    /// Asks the runner to stop, as [`stop`](Self::stop) does, and to abandon the stop (as
    /// [`abandon`](Self::abandon) does) if the run has not returned `limit` from now: for a
    /// process told to exit (SIGTERM), which must be gone within a grace period even when
    /// the server cannot confirm the acks owed. Returns at once; the runner wakes at the
    /// deadline by itself. Within the limit it is a stop: nothing more handed out, the
    /// entries in hand finished and settled, the earned acks confirmed. Past it, the acks
    /// not yet confirmed are given up (counted in [`Stats::abandoned_acks`]) and the entries
    /// in hand whose handlers have not returned too: their verdicts are not sent, and they
    /// stay pending, to be delivered again. A handler running at the deadline is not
    /// interrupted: with [`Runner::run`](crate::Runner::run) the run returns once it has
    /// returned, with [`Runner::run_pool`](crate::Runner::run_pool) once every worker's
    /// handler has.
    ///
    /// Called again (or after [`stop`](Self::stop)), the earlier deadline holds.
    ///
    /// [`Stats::abandoned_acks`]: pelican::Stats::abandoned_acks
    pub fn stop_within(&self, limit: Duration) {
        self.inner.flags.set_deadline(limit);
        self.stop();
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
