#![no_main]

use std::sync::OnceLock;
use std::time::Instant;

use libfuzzer_sys::fuzz_target;

/// One origin for every run, so that a run depends on its input only.
static ORIGIN: OnceLock<Instant> = OnceLock::new();

fuzz_target!(|data: &[u8]| pelican::fuzzing::many_streams(data, *ORIGIN.get_or_init(Instant::now)));
