//! Stopping a runner from any task or thread: a stop, or an abandon.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use smol::channel::{Receiver, Sender};

/// What a [`StopHandle`] has been asked, in rising order: each outranks the one before.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Request {
    Run,
    Stop,
    Abandon,
}

/// Stops a [`Runner`](crate::Runner) from any task or thread: the consumer hands out nothing
/// more, the entries in hand finish, their earned acks are confirmed and
/// [`Runner::run`](crate::Runner::run) returns.
/// Cheap to clone; stopping twice is harmless.
#[derive(Clone, Debug)]
pub struct StopHandle {
    inner: Arc<StopInner>,
}

#[derive(Debug)]
struct StopInner {
    /// The highest [`Request`] made, as its discriminant.
    request: AtomicU8,
    /// Wakes the runner's wait; one message is enough, `request` says the rest.
    tx: Sender<()>,
    rx: Receiver<()>,
}

impl StopHandle {
    pub(crate) fn new() -> StopHandle {
        let (tx, rx) = smol::channel::bounded(1);
        StopHandle { inner: Arc::new(StopInner { request: AtomicU8::new(0), tx, rx }) }
    }

    /// Asks the runner to stop and wakes it. Returns at once; the runner's `run` returns
    /// when the consumer has stopped. Before `run` starts, `run` stops at once.
    pub fn stop(&self) {
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

    /// True once [`stop`](Self::stop) or [`abandon`](Self::abandon) has been called on any
    /// clone.
    pub fn is_requested(&self) -> bool {
        self.request() >= Request::Stop
    }

    fn ask(&self, request: Request) {
        self.inner.request.fetch_max(request as u8, Ordering::AcqRel);
        // A full channel already holds a wake-up.
        let _ = self.inner.tx.try_send(());
    }

    pub(crate) fn request(&self) -> Request {
        match self.inner.request.load(Ordering::Acquire) {
            0 => Request::Run,
            1 => Request::Stop,
            _ => Request::Abandon,
        }
    }

    /// Resolves once more than `told` has been asked.
    pub(crate) async fn beyond(&self, told: Request) {
        while self.request() <= told {
            // The channel is never closed: this handle holds a sender.
            let _ = self.inner.rx.recv().await;
        }
    }
}
