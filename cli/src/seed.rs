//! This process's randomness for jitter: consumers' reconnects and one-shot commands'
//! retries spread out when a fleet of workers restarts at once.

use std::time::Duration;

/// The core's backoff (the one every consumer reconnect goes through), for a one-shot
/// command's retries, jittered by [`seed`].
pub fn backoff(min: Duration, max: Duration) -> pelican::Backoff {
    pelican::Backoff::new(min, max, seed())
}

/// A seed for the backoff's jitter of this process: its id and the time, so that processes
/// started together (a fleet of workers restarted at once) spread their retries.
pub fn seed() -> u64 {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    u64::from(std::process::id()) << 32 | u64::from(nanos)
}
