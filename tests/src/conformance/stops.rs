//! Stops at any instant: whatever moment a stop lands on — a read parked on the server, a
//! reply on its way, an entry in hand — the consumer leaves nothing stranded under its name.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use super::kit::{create_group, set, wait_until, Seen, Target, Transport, GROUP, SETTLE, STREAM};

/// Stops made in [`stops_under_load_strand_nothing`] on each target (`PELICAN_STOPS` sets
/// another number, for a measurement).
pub const STOPS: usize = 25;

fn stops() -> usize {
    std::env::var("PELICAN_STOPS").ok().and_then(|n| n.parse().ok()).unwrap_or(STOPS)
}

/// A producer adds entries one `XADD` at a time while consumers under new names (a
/// Deployment's pods) start, handle a few entries and are stopped at varied instants — most
/// of them while a read is parked, some as a reply arrives. After each stop, nothing the
/// server handed to the stopped consumer waits for `min_idle` under its name: an entry a
/// read cut short by the stop brought is given back (claimable at once) or released. At the
/// end every entry was handled and nothing is pending.
pub fn stops_under_load_strand_nothing<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    create_group(&mut admin);
    let producing = Arc::new(AtomicBool::new(true));
    let producer = {
        let (mut admin, producing) = (server.admin(), producing.clone());
        thread::spawn(move || {
            let mut ids = Vec::new();
            while producing.load(Ordering::SeqCst) {
                ids.push(admin.xadd(STREAM, &[("n", ids.len().to_string())]));
                thread::sleep(Duration::from_micros(300));
            }
            ids
        })
    };
    let min_idle = Duration::from_secs(3600);
    let seen = Seen::default();
    let mut stranded = Vec::new();
    let stops = stops();
    for i in 0..stops {
        let name = format!("pod-{i}");
        let before = seen.len();
        let run = T::spawn(server.endpoint(), t.config(&name).min_idle(min_idle), seen.acking());
        assert!(wait_until(SETTLE, || seen.len() > before + 3), "{name} handled nothing");
        // Stopped at a different instant each time, relative to its reads.
        thread::sleep(Duration::from_micros(137 * (i as u64 % 11)));
        let stats = run.finish();
        assert_eq!(stats.acked, stats.handled(), "{name}: every verdict's ack confirmed");
        for (id, _, idle, deliveries) in admin.xpending_consumer(STREAM, GROUP, &name) {
            // Given back: idle at least `min_idle`; released: no longer under its name.
            if idle < min_idle.as_millis() as i64 {
                stranded.push(format!("{name} holds {id} (idle {idle} ms, delivered {deliveries}×)"));
            }
        }
    }
    producing.store(false, Ordering::SeqCst);
    let ids = producer.join().expect("the producer");
    eprintln!(
        "stops_under_load_strand_nothing on {} {:?}: {} of {stops} stops stranded",
        t.flavor.name(),
        t.protocol,
        stranded.len()
    );
    assert!(stranded.is_empty(), "{} of {stops} stops stranded entries: {stranded:?}", stranded.len());
    // What was given back is taken at once by the next consumer's reclaim.
    let last = T::spawn(server.endpoint(), t.config("last").min_idle(min_idle), seen.acking());
    let all = set(&ids);
    assert!(
        wait_until(SETTLE, || seen.ids().is_superset(&all) && admin.xpending_count(STREAM, GROUP) == 0),
        "handled {} of {}, {} pending",
        seen.ids().intersection(&all).count(),
        all.len(),
        admin.xpending_count(STREAM, GROUP)
    );
    last.finish();
}
