//! The stop of every lane, and how it goes: [`StopAll`] asks it, [`EXITING`] says a second
//! signal is exiting the process (`super::signals`), [`OVERRAN`] that the stop ran past its
//! deadline (`super::deadline`). Read by the handlers, the `--pipe` handler and the
//! transports.

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Mutex, OnceLock, PoisonError};

/// Set by a second signal, before its commands are ended and the process exits with 130.
pub static EXITING: AtomicBool = AtomicBool::new(false);

/// Set once the deadline has passed: the handlers' late failures become give-backs, and the
/// run ends with [`EXIT_STATUS`](super::deadline::EXIT_STATUS).
pub static OVERRAN: AtomicBool = AtomicBool::new(false);

/// A stop of every lane, asked from anywhere (a signal, a closed stdout, a command that
/// cannot run, a lane that failed). The transport installs how to wake itself; a stop asked
/// before that is seen when it starts (it checks [`StopAll::is_requested`]).
#[derive(Default)]
pub struct StopAll {
    requested: AtomicBool,
    wake: OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// For [`StopAll::wait`]: set with `requested`, under the lock, so no wait misses it.
    asked: (Mutex<bool>, std::sync::Condvar),
}

impl StopAll {
    /// Asks every lane to stop after its entry in hand, and wakes the transport.
    pub fn stop(&self) {
        self.requested.store(true, SeqCst);
        if let Some(wake) = self.wake.get() {
            wake();
        }
        let (asked, told) = &self.asked;
        *asked.lock().unwrap_or_else(PoisonError::into_inner) = true;
        told.notify_all();
    }

    /// Blocks until a stop is asked (for the stop's deadline, on a thread of its own).
    pub fn wait(&self) {
        let (asked, told) = &self.asked;
        let mut asked = asked.lock().unwrap_or_else(PoisonError::into_inner);
        while !*asked {
            asked = told.wait(asked).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Whether a stop was asked.
    pub fn is_requested(&self) -> bool {
        self.requested.load(SeqCst)
    }

    /// How to get the transport's attention (once; a later call is ignored).
    pub fn install(&self, wake: impl Fn() + Send + Sync + 'static) {
        let _ = self.wake.set(Box::new(wake));
    }
}
