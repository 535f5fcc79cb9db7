//! Stopping a runner from any task or thread: a stop, a stop with a deadline, or an abandon.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use event_listener::Event;
use smol::{future, Timer};

/// What a [`StopHandle`] has been asked, in rising order: each outranks the one before.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Request {
    Run,
    Stop,
    Abandon,
}

/// No deadline, in [`StopInner::deadline`].
const NEVER: u64 = u64::MAX;

/// Stops a [`Runner`](crate::Runner) (or every stream of a [`Streams`](crate::Streams)) from
/// any task or thread: the consumer hands out nothing more, the entries in hand finish, their
/// earned acks are confirmed and [`Runner::run`](crate::Runner::run) returns.
/// Cheap to clone; stopping twice is harmless.
#[derive(Clone, Debug)]
pub struct StopHandle {
    inner: Arc<StopInner>,
}

#[derive(Debug)]
struct StopInner {
    /// The highest [`Request`] made, as its discriminant.
    request: AtomicU8,
    /// When a stop becomes an abandon ([`StopHandle::stop_within`]): nanoseconds after
    /// `base`, the earliest asked, or [`NEVER`].
    deadline: AtomicU64,
    base: Instant,
    /// Wakes every wait on the handle (several runners may share it); `request` says why.
    asked: Event,
}

impl StopHandle {
    pub(crate) fn new() -> StopHandle {
        StopHandle {
            inner: Arc::new(StopInner {
                request: AtomicU8::new(0),
                deadline: AtomicU64::new(NEVER),
                base: Instant::now(),
                asked: Event::new(),
            }),
        }
    }

    /// Asks the runner to stop and wakes it. Returns at once; the runner's `run` returns
    /// when the consumer has stopped: the entries in hand finished and settled, and the acks
    /// earned confirmed by the server, however long that takes (during an outage, until the
    /// server is back; [`stop_within`](Self::stop_within) puts a limit on it). Before `run`
    /// starts, `run` stops at once.
    pub fn stop(&self) {
        self.ask(Request::Stop);
    }

    /// Asks the runner to stop, as [`stop`](Self::stop) does, and to abandon the stop (as
    /// [`abandon`](Self::abandon) does) if the run has not returned `limit` from now: for a
    /// process told to exit (SIGTERM), which must be gone within a grace period even when
    /// the server cannot confirm the acks owed. Returns at once; the runner wakes at the
    /// deadline by itself (a timer). Within the limit it is a stop: nothing more handed out,
    /// the handler futures running finish and settle their entries, the earned acks are
    /// confirmed. Past it, the futures still running are dropped and the acks not yet
    /// confirmed given up (counted in
    /// [`Stats::abandoned_acks`](pelican::Stats::abandoned_acks)): their entries stay
    /// pending, to be delivered again. (A handler that blocks its thread rather than awaiting
    /// holds the runner up, deadline or not.)
    ///
    /// Called again (or after [`stop`](Self::stop)), the earlier deadline holds.
    pub fn stop_within(&self, limit: Duration) {
        if let Some(at) = Instant::now().checked_add(limit) {
            let since = at.duration_since(self.inner.base).as_nanos();
            let nanos = u64::try_from(since).unwrap_or(NEVER).min(NEVER - 1);
            self.inner.deadline.fetch_min(nanos, Ordering::AcqRel);
        }
        self.ask(Request::Stop);
    }

    /// Asks the runner to stop without waiting on the server (see
    /// [`Consumer::abandon`](pelican::Consumer::abandon)), e.g. when a [`stop`](Self::stop)
    /// waits on an unreachable server to confirm acks. The handlers' futures still running
    /// are dropped; acks not yet confirmed are given up. Their entries stay pending, to be
    /// delivered again.
    pub fn abandon(&self) {
        self.ask(Request::Abandon);
    }

    /// True once [`stop`](Self::stop), [`stop_within`](Self::stop_within) or
    /// [`abandon`](Self::abandon) has been called on any clone.
    pub fn is_requested(&self) -> bool {
        self.request() >= Request::Stop
    }

    fn ask(&self, request: Request) {
        self.inner.request.fetch_max(request as u8, Ordering::AcqRel);
        self.inner.asked.notify(usize::MAX);
    }

    /// What has been asked; a stop past its deadline is an abandon. One atomic load unless
    /// a stop is under way.
    pub(crate) fn request(&self) -> Request {
        match self.inner.request.load(Ordering::Acquire) {
            0 => Request::Run,
            1 if self.deadline().is_some_and(|at| Instant::now() >= at) => Request::Abandon,
            1 => Request::Stop,
            _ => Request::Abandon,
        }
    }

    /// When a stop becomes an abandon, if a deadline was given.
    fn deadline(&self) -> Option<Instant> {
        match self.inner.deadline.load(Ordering::Acquire) {
            NEVER => None,
            nanos => self.inner.base.checked_add(Duration::from_nanos(nanos)),
        }
    }

    /// Resolves once more than `told` has been asked: a new request, or a stop's deadline
    /// passing.
    pub(crate) async fn beyond(&self, told: Request) {
        loop {
            if self.request() > told {
                return;
            }
            let asked = self.inner.asked.listen();
            // Asked between the check and the listen: the listener missed it.
            if self.request() > told {
                return;
            }
            match self.deadline().filter(|_| told == Request::Stop) {
                Some(at) => {
                    future::or(asked, async {
                        Timer::at(at).await;
                    })
                    .await
                }
                None => asked.await,
            }
        }
    }
}
