//! Seeds for reconnect jitter: the core has no randomness of its own, so each consumer's and
//! locator's is drawn here, for this process and this call.

/// A seed for a consumer's reconnect jitter, of this process and this call: the standard
/// library's per-process random hashing keys (each `RandomState` is another draw).
pub(crate) fn seed() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64)
}
