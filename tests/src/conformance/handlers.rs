//! Stories of handlers as they are: slow, failing for good, giving up on an entry, handed
//! entries of megabytes. Part of the conformance suite (see the parent module).

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use pelican::{Entry, Limits, Verdict};

use super::kit::{create_group, set, wait_until, Handler, Seen, Target, Transport, GROUP, SETTLE, STREAM};
use crate::admin::Admin;

/// Two consumers, one handed a whole batch whose handling outlasts `min_idle` many times
/// over: its entries are leased while they wait, so the peer's reclaim takes none of them
/// and every entry is handled exactly once.
pub fn slow_handlers_two_consumers<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    create_group(&mut admin);
    let ids = admin.xadd_n(STREAM, 24, 8);
    let min_idle = Duration::from_secs(1);
    let seen = Seen::default();
    let slow = |seen: &Seen| {
        seen.handler(|_, _| {
            thread::sleep(Duration::from_millis(150));
            Verdict::Ack
        })
    };
    // c1 reads the whole backlog at once (24 × 150 ms = 3.6 s); c2 reclaims every beat.
    let c1 = T::spawn(server.endpoint(), t.config("c1").min_idle(min_idle), slow(&seen));
    assert!(wait_until(SETTLE, || !seen.is_empty()), "c1 started");
    let c2 = T::spawn(server.endpoint(), t.config("c2").min_idle(min_idle), slow(&seen));
    assert!(
        wait_until(Duration::from_secs(30), || seen.ids() == set(&ids)
            && admin.xpending_count(STREAM, GROUP) == 0),
        "handled {} of {}",
        seen.ids().len(),
        ids.len()
    );
    let (s1, s2) = (c1.finish(), c2.finish());
    let all = seen.all();
    assert_eq!(all.len(), ids.len(), "each entry handled exactly once: {all:?}");
    assert!(s1.leases_renewed > 0, "the batch was leased: {s1:?}");
    assert_eq!(
        (s1.leases_lost, s2.leases_lost, s1.lost_to_peer, s2.lost_to_peer),
        (0, 0, 0, 0),
        "{s1:?} {s2:?}"
    );
    assert_eq!(s1.acked + s2.acked, ids.len() as u64);
}

/// An earned ack reaches the server before the next entry is handled, even from a handler
/// that blocks its thread: while entry k is being handled, entry k-1 is no longer pending.
pub fn acks_before_the_next_handler<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    create_group(&mut admin);
    let ids = admin.xadd_n(STREAM, 6, 8);
    let addr = server.addr();
    let mut probe: Option<Admin> = None;
    let late = Arc::new(Mutex::new(Vec::new()));
    let (late_in, list) = (late.clone(), ids.clone());
    let seen = Seen::default();
    let handler = seen.handler(move |id, _| {
        let k = list.iter().position(|i| i == id).expect("an id added");
        if k > 0 {
            let probe = probe.get_or_insert_with(|| Admin::connect(addr));
            let previous = &list[k - 1];
            let acked = wait_until(Duration::from_secs(2), || {
                probe.xpending_all(STREAM, GROUP).iter().all(|p| p.0 != *previous)
            });
            if !acked {
                late_in.lock().unwrap().push(previous.clone());
            }
        }
        thread::sleep(Duration::from_millis(10));
        Verdict::Ack
    });
    let run = T::spawn(server.endpoint(), t.config("c1"), handler);
    assert!(wait_until(SETTLE, || seen.len() >= ids.len()));
    run.finish();
    assert_eq!(*late.lock().unwrap(), Vec::<String>::new(), "acks still pending during the next handler");
    assert_eq!(admin.xpending_count(STREAM, GROUP), 0);
}

/// The dead-letter entry's fields, by name.
fn field<'a>(fields: &'a [(String, Vec<u8>)], name: &str) -> Option<&'a [u8]> {
    fields.iter().find(|(n, _)| n == name).map(|(_, v)| &v[..])
}

/// A handler recording each delivery's id and count, answering `verdict(id)`.
fn counting(
    deliveries: &Arc<Mutex<Vec<(String, u64)>>>,
    verdict: impl Fn(&str) -> Verdict + Send + 'static,
) -> Handler {
    let deliveries = deliveries.clone();
    Box::new(move |e: &Entry| {
        let id = String::from_utf8_lossy(e.id()).into_owned();
        deliveries.lock().unwrap().push((id.clone(), e.deliveries));
        verdict(&id)
    })
}

/// An entry whose handler always fails is handed out `max_deliveries` times, then moved to
/// the dead-letter stream with its fields and origin; the rest of the stream is handled;
/// nothing stays pending.
pub fn poison_entry_is_dead_lettered<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    create_group(&mut admin);
    let ids = admin.xadd_n(STREAM, 10, 8);
    let poison = ids[4].clone();
    let deliveries = Arc::new(Mutex::new(Vec::new()));
    let bad = poison.clone();
    let handler = counting(&deliveries, move |id| if id == bad { Verdict::Retry } else { Verdict::Ack });
    let config = t.config("c1").min_idle(Duration::from_millis(300)).dead_letter_after(3, "dl");
    let run = T::spawn(server.endpoint(), config, handler);
    assert!(
        wait_until(Duration::from_secs(15), || admin.xlen("dl") == 1
            && admin.xpending_count(STREAM, GROUP) == 0),
        "{:?}",
        deliveries.lock().unwrap()
    );
    let stats = run.finish();
    let all = deliveries.lock().unwrap().clone();
    let of_poison: Vec<u64> = all.iter().filter(|(id, _)| *id == poison).map(|(_, n)| *n).collect();
    assert_eq!(of_poison, [1, 2, 3], "handed out exactly max_deliveries times, counted");
    assert_eq!(all.len(), ids.len() + 2, "the rest once each: {all:?}");
    let moved = admin.xrange("dl");
    let (_, fields) = &moved[0];
    assert_eq!(field(fields, "f"), Some(&b"00000004"[..]), "its own fields: {fields:?}");
    assert_eq!(field(fields, "pelican-id"), Some(poison.as_bytes()));
    assert_eq!(field(fields, "pelican-stream"), Some(&b"s"[..]));
    assert_eq!(field(fields, "pelican-group"), Some(&b"g"[..]));
    assert_eq!(field(fields, "pelican-consumer"), Some(&b"c1"[..]));
    assert_eq!(field(fields, "pelican-deliveries"), Some(&b"4"[..]));
    assert_eq!(field(fields, "pelican-reason"), Some(&b"max-deliveries"[..]));
    assert_eq!((stats.dead_lettered, stats.retried, stats.acked), (1, 3, 9), "{stats:?}");
}

/// `Verdict::DeadLetter` moves the entry in hand at once.
pub fn dead_letter_verdict<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    create_group(&mut admin);
    let ids = admin.xadd_n(STREAM, 5, 8);
    let deliveries = Arc::new(Mutex::new(Vec::new()));
    let bad = ids[2].clone();
    let handler = counting(&deliveries, move |id| if id == bad { Verdict::DeadLetter } else { Verdict::Ack });
    let run = T::spawn(server.endpoint(), t.config("c1").dead_letter("dl"), handler);
    assert!(wait_until(SETTLE, || admin.xlen("dl") == 1 && admin.xpending_count(STREAM, GROUP) == 0));
    let stats = run.finish();
    assert_eq!(deliveries.lock().unwrap().len(), ids.len(), "each handed out once");
    let moved = admin.xrange("dl");
    assert_eq!(field(&moved[0].1, "pelican-id"), Some(ids[2].as_bytes()));
    assert_eq!(field(&moved[0].1, "pelican-reason"), Some(&b"verdict"[..]));
    assert_eq!(field(&moved[0].1, "pelican-deliveries"), Some(&b"1"[..]));
    assert_eq!((stats.dead_lettered, stats.acked), (1, 4));
}

/// Entries of 3 MB with a count of 100: reads are cut to what fits in `read_bytes` and every
/// entry is handled once.
pub fn big_entries<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    create_group(&mut admin);
    let size = 3 << 20;
    let ids: Vec<String> =
        (0..12u8).map(|i| admin.xadd(STREAM, &[("f".as_bytes(), vec![b'a' + i; size])])).collect();
    let sizes = Arc::new(Mutex::new(Vec::new()));
    let seen = Seen::default();
    let mut inner = seen.acking();
    let record = sizes.clone();
    let handler: Handler = Box::new(move |e: &Entry| {
        record.lock().unwrap().push(e.field(b"f").map_or(0, |v| v.len()));
        inner(e)
    });
    let run = T::spawn(server.endpoint(), t.config("c1").count(100), handler);
    assert!(wait_until(Duration::from_secs(30), || seen.ids() == set(&ids)), "handled {}", seen.len());
    let stats = run.finish();
    assert_eq!(seen.len(), ids.len(), "each once");
    assert!(sizes.lock().unwrap().iter().all(|n| *n == size));
    assert!(stats.reads_shrunk >= 1, "{stats:?}");
    assert_eq!(admin.xpending_count(STREAM, GROUP), 0);
}

/// One entry larger than the frame limit stops the consumer with an error naming it (and
/// the setting to raise); it stays pending, and the entries before it were handled.
pub fn entry_too_large_is_named<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    create_group(&mut admin);
    let small = admin.xadd(STREAM, &[("f", "small")]);
    let big = admin.xadd(STREAM, &[("f".as_bytes(), vec![b'x'; 2 << 20])]);
    let seen = Seen::default();
    let limits = Limits::default().max_frame(1 << 20);
    let run = T::spawn(server.endpoint(), t.config("c1").limits(limits).read_bytes(64 << 10), seen.acking());
    let err = run.join(SETTLE).expect_err("an entry over the frame limit is an error");
    assert!(err.contains(&big) && err.contains("max_frame"), "{err}");
    assert_eq!(seen.ids(), set(&[small]));
    let pending: Vec<String> = admin.xpending_all(STREAM, GROUP).into_iter().map(|p| p.0).collect();
    assert_eq!(pending, [big], "left pending");
}
