#![no_main]

use libfuzzer_sys::fuzz_target;
use pelican::{Verdict, Writes};
use pelican_sim::kit::World;

// A world of consumers, faults and entries from the bytes (pelican_sim::kit::World::from_bytes):
// pelican keeps its promises whatever happens. With bits 6-7 of the 9th byte 01 the handler commits
// (World::commits_from_bytes): each entry's id into `out` and 1 onto `n`, with its ack, and
// the kit's checks hold each input to one output. Your own target: the same, with your
// handler and state, and `check_with` your invariant.
fuzz_target!(|data: &[u8]| {
    let commits = World::commits_from_bytes(data);
    let report = World::from_bytes(data).run((), |_, _, entry| match commits {
        true => Verdict::Commit(Writes::new().add("out", [(&b"input"[..], entry.id())]).incr_by("n", 1)),
        false => Verdict::Ack,
    });
    if let Err(failure) = report.check() {
        panic!("{failure}");
    }
});
