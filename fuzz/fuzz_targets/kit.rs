#![no_main]

use libfuzzer_sys::fuzz_target;
use pelican::Verdict;
use pelican_sim::kit::World;

// A world of consumers, faults and entries from the bytes (pelican_sim::kit::World::from_bytes):
// pelican keeps its promises whatever happens. Your own target: the same, with your handler
// and state, and `check_with` your invariant.
fuzz_target!(|data: &[u8]| {
    let report = World::from_bytes(data).run((), |_, _, _| Verdict::Ack);
    if let Err(failure) = report.check() {
        panic!("{failure}");
    }
});
