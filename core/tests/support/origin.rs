//! The origin of the tests' virtual clock: they need some `Instant`, and only offsets from it
//! matter. The one clock read of the core's tests, kept out of `core/src` (whose code never
//! reads the clock): the integration tests' support and the core's own unit tests both take
//! it from here.

use std::time::Instant;

/// Some `Instant` to count from.
#[allow(clippy::disallowed_methods)]
pub fn origin() -> Instant {
    Instant::now()
}
