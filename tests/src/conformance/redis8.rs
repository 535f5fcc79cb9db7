//! Stories of the Redis 8 verbs, where the server speaks them (Redis 8.10 here): a `Retry`
//! released at once, a stop that hands its buffered entries to a peer at once, acks that
//! delete. On servers without them each story checks the classic behaviour instead (or the
//! clear refusal), so that every target asserts something.

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use pelican::{DeleteAcked, OnRetry, Verdict};

use super::kit::{create_group, wait_until, Seen, Target, Transport, GROUP, SETTLE, STREAM};
use crate::server::Flavor;

/// Whether the target's server releases entries (`XNACK`, Redis 8.8+).
pub fn releases(flavor: Flavor) -> bool {
    flavor == Flavor::Redis810
}

/// Two consumers; every entry's first handling says `Retry`. Where the server releases, each
/// is handled again (by either) well before `min_idle`; elsewhere it waits `min_idle`. The
/// delays from each `Retry` to the next handling are printed (the figure the notes quote).
pub fn retry_released_at_once<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    create_group(&mut admin);
    let min_idle = Duration::from_secs(2);
    // When each id was last given Retry, and how long until it was handled again.
    let retried: Arc<Mutex<Vec<(String, Instant)>>> = Arc::default();
    let again: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let seen = Seen::default();
    let handler =
        |seen: &Seen, retried: Arc<Mutex<Vec<(String, Instant)>>>, again: Arc<Mutex<Vec<Duration>>>| {
            seen.handler(move |id, _| {
                let mut retried = retried.lock().unwrap();
                if let Some(i) = retried.iter().position(|(r, _)| r == id) {
                    again.lock().unwrap().push(retried.remove(i).1.elapsed());
                    return Verdict::Ack;
                }
                retried.push((id.to_string(), Instant::now()));
                Verdict::Retry
            })
        };
    // The story of `Release`, no longer the default (`Backoff` is: retries that wait).
    let config =
        |name: &str| t.config(name).min_idle(min_idle).count(1).start_count(1).on_retry(OnRetry::Release);
    let c1 = T::spawn(server.endpoint(), config("c1"), handler(&seen, retried.clone(), again.clone()));
    let c2 = T::spawn(server.endpoint(), config("c2"), handler(&seen, retried.clone(), again.clone()));
    thread::sleep(Duration::from_millis(300));
    let ids = admin.xadd_n(STREAM, 20, 8);
    let n = ids.len();
    assert!(
        wait_until(SETTLE, || again.lock().unwrap().len() == n),
        "retried: {}",
        again.lock().unwrap().len()
    );
    let (s1, s2) = (c1.finish(), c2.finish());
    let mut delays = again.lock().unwrap().clone();
    delays.sort();
    let (median, worst) = (delays[n / 2], delays[n - 1]);
    eprintln!(
        "retry_released_at_once on {} {:?}: again after median {median:?}, worst {worst:?}",
        t.flavor, t.protocol
    );
    if releases(t.flavor) {
        assert!(worst < min_idle / 2, "released, yet handled again after {worst:?}");
        assert_eq!(s1.released + s2.released, n as u64, "{s1:?} {s2:?}");
    } else {
        // `min_idle` counts from the delivery, which precedes the Retry by the time the entry
        // took to reach its handler (under load, TLS, a while): half of it is a safe floor.
        assert!(delays[0] >= min_idle / 2, "back long before min_idle: {delays:?}");
        assert_eq!(s1.released + s2.released, 0);
    }
    assert_eq!(s1.acked + s2.acked, n as u64);
    assert_eq!(admin.xpending_count(STREAM, GROUP), 0);
}

/// A consumer holding 100 entries read and not handed out stops; a parked peer has them
/// at once where the server releases (`XNACK`), at its next reclaim elsewhere (given back
/// idle `min_idle`, so no peer waits the 30 s out): each handled once in all.
pub fn stop_releases_buffered<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    create_group(&mut admin);
    let ids = admin.xadd_n(STREAM, 101, 8);
    let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = started.clone();
    let first = Seen::default();
    let c1 = T::spawn(
        server.endpoint(),
        t.config("c1").count(101).start_count(101).min_idle(Duration::from_secs(30)),
        first.handler(move |_, _| {
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
            thread::sleep(Duration::from_millis(200));
            Verdict::Ack
        }),
    );
    assert!(wait_until(SETTLE, || started.load(std::sync::atomic::Ordering::SeqCst)));
    let peer = Seen::default();
    let c2 = T::spawn(server.endpoint(), t.config("c2").min_idle(Duration::from_secs(30)), peer.acking());
    thread::sleep(Duration::from_millis(100));
    let stopped = Instant::now();
    c1.stop();
    let s1 = c1.join(SETTLE).expect("a clean stop");
    let handled = first.len();
    assert!(wait_until(SETTLE, || first.len() + peer.len() == ids.len()), "peer has {}", peer.len());
    let handover = stopped.elapsed();
    eprintln!(
        "stop_releases_buffered on {} {:?}: the peer had the {} left within {handover:?} of the stop",
        t.flavor,
        t.protocol,
        peer.len(),
    );
    if releases(t.flavor) {
        assert_eq!(s1.released as usize, ids.len() - handled, "{s1:?}");
        assert_eq!(admin.consumer_names(STREAM, GROUP), ["c2"], "released all: c1 left the group");
    } else {
        assert_eq!(s1.released, 0, "{s1:?}");
        // It held what it gave back when it stopped: it stays (for `pelican retire`).
        assert_eq!(admin.consumer_names(STREAM, GROUP), ["c1", "c2"]);
        // Two beats (200 ms each) and the peer's handling, with room for a loaded machine;
        // far below the 30 s `min_idle` the entries would otherwise wait out.
        assert!(handover < Duration::from_secs(5), "handed over after {handover:?}");
    }
    let mut all: Vec<String> = first.all().into_iter().chain(peer.all()).map(|(id, _)| id).collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), ids.len(), "each handled");
    assert_eq!(first.len() + peer.len(), ids.len(), "each handled once");
    assert!(wait_until(SETTLE, || admin.xpending_count(STREAM, GROUP) == 0));
    c2.finish();
}

/// A consumer holding 100 entries read ahead, its handler stuck on another, is abandoned (a
/// second Ctrl-C): the 100 are a peer's within a beat or so all the same (given back by the
/// abandon's parting write); the one in hand is not (its handler may still be at work), and
/// stays pending with the abandoned consumer.
pub fn abandon_hands_over_buffered<T: Transport>(t: Target) {
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    let server = t.start();
    let mut admin = server.admin();
    create_group(&mut admin);
    let ids = admin.xadd_n(STREAM, 101, 8);
    let (started, release) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let (flag, stuck) = (started.clone(), release.clone());
    let first = Seen::default();
    let c1 = T::spawn(
        server.endpoint(),
        t.config("c1").count(101).start_count(101).min_idle(Duration::from_secs(30)),
        first.handler(move |_, _| {
            flag.store(true, SeqCst);
            wait_until(SETTLE, || stuck.load(SeqCst));
            Verdict::Ack
        }),
    );
    assert!(wait_until(SETTLE, || started.load(SeqCst)));
    let peer = Seen::default();
    let c2 = T::spawn(server.endpoint(), t.config("c2").min_idle(Duration::from_secs(30)), peer.acking());
    thread::sleep(Duration::from_millis(100));
    let abandoned = Instant::now();
    c1.abandon();
    release.store(true, SeqCst); // a blocking handler returns before its runner sees the abandon
    let s1 = c1.join(SETTLE).expect("an abandon");
    assert!(wait_until(SETTLE, || peer.len() == ids.len() - 1), "peer has {}", peer.len());
    let handover = abandoned.elapsed();
    eprintln!(
        "abandon_hands_over_buffered on {} {:?}: the peer had the {} read ahead within {handover:?}",
        t.flavor,
        t.protocol,
        peer.len()
    );
    assert!(handover < Duration::from_secs(5), "handed over after {handover:?}");
    assert_eq!((first.len(), s1.acked), (1, 0), "{s1:?}");
    // The peer's acks may still be on their way.
    assert!(wait_until(SETTLE, || admin.xpending_count(STREAM, GROUP) == 1));
    let pending = admin.xpending_all(STREAM, GROUP);
    assert_eq!((pending[0].0.as_str(), pending[0].1.as_str()), (first.all()[0].0.as_str(), "c1"));
    c2.finish();
}

/// Acks that delete: the stream is empty once all is handled. A server without `XACKDEL`
/// refuses the consumer at its first connect, saying what it needs.
pub fn acks_delete<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    create_group(&mut admin);
    admin.xadd_n(STREAM, 30, 8);
    let seen = Seen::default();
    let config = t.config("c1").delete_acked(DeleteAcked::KeepRef);
    // Every other entry committed with an output: deleted once committed too.
    let mut n = 0;
    let handler = seen.handler(move |id, _| {
        n += 1;
        match n % 2 {
            0 => Verdict::Commit(pelican::Writes::new().add("out", [("input", id)])),
            _ => Verdict::Ack,
        }
    });
    let run = T::spawn(server.endpoint(), config, handler);
    if !releases(t.flavor) {
        let err = run.join(SETTLE).expect_err("refused");
        assert!(err.contains("XACKDEL"), "{err}");
        assert_eq!(admin.xlen(STREAM), 30, "nothing read");
        return;
    }
    assert!(wait_until(SETTLE, || admin.xlen(STREAM) == 0), "{} left", admin.xlen(STREAM));
    let stats = run.finish();
    assert_eq!((seen.len(), stats.acked, stats.committed), (30, 30, 15));
    assert_eq!((admin.xpending_count(STREAM, GROUP), admin.xlen("out")), (0, 15));
}

/// Retries kept pending ([`OnRetry::StayPending`]) on a server that could release them: the
/// classic behaviour, on request.
pub fn retry_stays_pending_on_request<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    create_group(&mut admin);
    let seen = Seen::default();
    let config = t.config("c1").on_retry(OnRetry::StayPending);
    let run = T::spawn(server.endpoint(), config, seen.handler(|_, _| Verdict::Retry));
    admin.xadd_n(STREAM, 5, 8);
    assert!(wait_until(SETTLE, || seen.len() >= 5));
    thread::sleep(Duration::from_millis(500));
    let stats = run.finish();
    assert_eq!((seen.len(), stats.retried, stats.released), (5, 5, 0), "{stats:?}");
    let held = admin.xpending_consumer(STREAM, GROUP, "c1");
    assert_eq!(held.len(), 5, "pending with c1 still");
}
