//! The worker side of [`Runner::run_pool`](crate::Runner::run_pool), and what a runner makes
//! of a handler's panic.

use std::any::Any;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Mutex, PoisonError};

use pelican::{Entry, Verdict};

use crate::error::RunError;

/// What a worker reports for an entry: the handler's verdict, or the message of its panic.
pub(crate) type Outcome = Result<Verdict, String>;

/// A handler's panic on an entry: what [`RunError::HandlerPanicked`] will say.
#[derive(Debug)]
pub(crate) struct Panicked {
    id: String,
    message: String,
}

impl Panicked {
    pub(crate) fn new(entry: &Entry, message: String) -> Panicked {
        Panicked { id: String::from_utf8_lossy(entry.id()).into_owned(), message }
    }
}

impl From<Panicked> for RunError {
    fn from(p: Panicked) -> Self {
        RunError::HandlerPanicked { id: p.id, message: p.message }
    }
}

/// Runs `handler` on `work` (an entry, or a stream's entry), catching a panic: its message
/// comes back instead of a verdict.
///
/// `AssertUnwindSafe`: what the handler may have left half-changed is its own state, which
/// the runner never looks at; the runner only stops and reports the panic (a handler that
/// wants its state checked after a panic checks it itself, as it would after a crash).
pub(crate) fn handle<T>(handler: impl FnOnce(&T) -> Verdict, work: &T) -> Outcome {
    panic::catch_unwind(AssertUnwindSafe(|| handler(work))).map_err(|payload| panic_message(&*payload))
}

/// A panic's payload as text: `panic!("…")` gives a `&str` or a `String`; anything else
/// (`panic_any(42)`) is named as such.
fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a non-string panic".to_owned()
    }
}

/// What the workers share: the queue of entries to handle (`T`: an [`Entry`], or a stream's
/// index and its entry), and whether the run is over.
#[derive(Debug)]
pub(crate) struct Pool<T> {
    /// One receiver for all the workers; each holds the lock only while it waits for an
    /// entry (the core hands out no more than there are workers, so none waits for long
    /// while another is free).
    queue: Mutex<Receiver<T>>,
    /// Set when the driving loop is done (stopped, abandoned, failed): an entry still queued
    /// is not handled but left pending, as the core gave it up.
    closed: AtomicBool,
}

impl<T> Pool<T> {
    pub(crate) fn new(queue: Receiver<T>) -> Pool<T> {
        Pool { queue: Mutex::new(queue), closed: AtomicBool::new(false) }
    }

    /// The driving side's end of the queue; dropping it ends the workers.
    pub(crate) fn dispatch(&self, to_workers: Sender<T>) -> Dispatch<'_, T> {
        Dispatch { closed: &self.closed, to_workers }
    }

    /// Starts `workers` named worker threads in `scope`, each running [`work`](Self::work).
    pub(crate) fn start<'scope, 'env, H>(
        &'env self,
        scope: &'scope std::thread::Scope<'scope, 'env>,
        workers: u32,
        handler: &'env H,
        done: &Sender<(T, Outcome)>,
        wake: impl Fn() + Send + Copy + 'env,
    ) -> std::io::Result<()>
    where
        T: Send,
        H: Fn(&T) -> Verdict + Sync,
    {
        for i in 0..workers {
            let done = done.clone();
            std::thread::Builder::new()
                .name(format!("pelican-worker-{i}"))
                .spawn_scoped(scope, move || self.work(handler, &done, wake))?;
        }
        Ok(())
    }

    /// One worker: takes entries until the queue is closed, handles each (catching a panic),
    /// and sends it back with its outcome, waking the driving thread with `wake`.
    pub(crate) fn work(
        &self,
        handler: &impl Fn(&T) -> Verdict,
        done: &Sender<(T, Outcome)>,
        wake: impl Fn(),
    ) {
        loop {
            // The guard goes at the end of the statement: the lock is not held while handling.
            let next = self.queue.lock().unwrap_or_else(PoisonError::into_inner).recv();
            let Ok(work) = next else { return };
            if self.closed.load(Ordering::Acquire) {
                return;
            }
            let outcome = handle(handler, &work);
            if done.send((work, outcome)).is_err() {
                return;
            }
            wake();
        }
    }
}

/// Sends entries to the workers. Dropped on every way out of the driving loop (a return, an
/// error, an unwind): it marks the pool closed, then the queue's sender goes, so that each
/// worker ends once its running handler returns, and `thread::scope` can join them all.
#[derive(Debug)]
pub(crate) struct Dispatch<'a, T> {
    closed: &'a AtomicBool,
    to_workers: Sender<T>,
}

impl<T> Dispatch<'_, T> {
    /// Queues `work` for the next free worker.
    pub(crate) fn send(&self, work: T) {
        // Fails only once every worker is gone, which the pool's receiver (alive until the
        // scope ends) rules out; were it to fail, the entry would stay in hand, pending.
        let _ = self.to_workers.send(work);
    }
}

impl<T> Drop for Dispatch<'_, T> {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::Release);
        // `to_workers` is dropped right after this, waking the workers waiting on it.
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pelican::Source;

    #[test]
    fn a_panic_becomes_its_message() {
        let entry = Entry::new("1-0", [("f", "v")], Source::New);
        let text = handle(|_| panic!("static text"), &entry);
        let formatted = handle(|e| panic!("on {}", String::from_utf8_lossy(e.id())), &entry);
        let other = handle(|_| panic::panic_any(42_u32), &entry);
        assert_eq!(text, Err("static text".to_owned()));
        assert_eq!(formatted, Err("on 1-0".to_owned()));
        assert_eq!(other, Err("a non-string panic".to_owned()));
        assert_eq!(handle(|_| Verdict::Ack, &entry), Ok(Verdict::Ack));
        let err = RunError::from(Panicked::new(&entry, "boom".to_owned()));
        let shown = err.to_string();
        assert!(shown.contains("1-0") && shown.contains("boom") && shown.contains("pending"), "{shown}");
    }
}
