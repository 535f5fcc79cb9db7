//! The application's handler as a runner calls it: its futures, each tagged with its entry
//! when many run at once, and the panics caught calling it or polling them.

use std::any::Any;
use std::future::Future;
use std::panic::{self, AssertUnwindSafe};
use std::thread;

use pelican::{Entry, Verdict};
use smol::future::{CatchUnwind, FutureExt};

/// A handler that panicked: the entry's id and what it panicked with.
#[derive(Debug)]
pub(crate) struct Panic {
    pub(crate) id: String,
    pub(crate) message: String,
}

impl Panic {
    pub(crate) fn new(id: &[u8], payload: &(dyn Any + Send)) -> Panic {
        let message = match (payload.downcast_ref::<&str>(), payload.downcast_ref::<String>()) {
            (Some(text), _) => (*text).to_string(),
            (None, Some(text)) => text.clone(),
            (None, None) => "a non-string panic".to_string(),
        };
        Panic { id: String::from_utf8_lossy(id).into_owned(), message }
    }
}

/// A handler's future whose panics come out as `Err` (the payload).
pub(crate) type Guarded<F> = CatchUnwind<AssertUnwindSafe<F>>;

/// Calls `handler` with `entry`: its future, guarded, or the payload of its panic. The
/// handler and its futures are asserted unwind-safe: after a panic nothing more is handed
/// out, so the handler is called no more, and the future that panicked is polled no more
/// (the others in hand go on: they may have been left in a state they must cope with, as
/// after a panic on another thread).
pub(crate) fn call<H, F>(handler: &mut H, entry: Entry) -> thread::Result<Guarded<F>>
where
    H: FnMut(Entry) -> F,
    F: Future<Output = Verdict>,
{
    panic::catch_unwind(AssertUnwindSafe(|| handler(entry)))
        .map(|handled| AssertUnwindSafe(handled).catch_unwind())
}

/// A guarded future that says which entry it is about, for a set of them polled at once.
pub(crate) async fn tagged<F>(entry: Entry, handled: Guarded<F>) -> (Entry, thread::Result<Verdict>)
where
    F: Future<Output = Verdict>,
{
    (entry, handled.await)
}
