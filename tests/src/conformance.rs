//! The conformance suite: whole consumer stories against real servers, written once and run
//! over every transport ([`Transport`]) on Redis 6.2, Redis 7.0, Valkey 8.1 and Redis 8.10, in
//! RESP2 and RESP3 (and over TLS on the flavors that serve it,
//! [`Flavor::TLS`](crate::server::Flavor::TLS)). Every scenario checks the server's own view at
//! the end (`XPENDING`, `XINFO`, `XRANGE`), not only what the handler saw. Stories of slow,
//! failing and dead-lettering handlers and of big entries are in [`handlers`]; stories of many
//! entries in hand at once (a kill, a stop, a peer's reclaim, key order, a fair start) in
//! [`in_hand`]; a consumer pointed slightly wrong (a sentinel's password missing, a data node
//! named as a sentinel…), which must never flood, in [`misuse`] (the tests' names start with
//! `misuse_`). What every story stands on (the transport's part, the targets, the shared tools)
//! is in [`kit`].
//!
//! A transport's test file instantiates the whole suite with one line:
//! `pelican_tests::conformance_suite!(MyTransport);`

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use pelican::{Entry, GroupGone, Source, Verdict};

use crate::admin::Admin;
use crate::server::{Options, Server};

pub mod cluster;
pub mod commit;
pub mod failover;
pub mod handlers;
pub mod in_hand;
pub mod kit;
pub mod many_streams;
pub mod misuse;
pub mod redis8;
pub mod stops;
pub mod tls;
pub use cluster::*;
pub use commit::*;
pub use failover::*;
pub use handlers::*;
pub use in_hand::*;
pub use kit::*;
pub use many_streams::*;
pub use misuse::*;
pub use redis8::*;
pub use stops::*;
pub use tls::*;

// ---- scenarios ------------------------------------------------------------------------------

/// Cold start: the consumer creates the group, consumes what arrives, the PEL ends empty.
pub fn cold_start<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    let seen = Seen::default();
    let run = T::spawn(server.endpoint(), t.config("c1").create_group("0"), seen.acking());
    assert!(wait_until(SETTLE, || admin.group_exists(STREAM, GROUP)), "the door created the group");
    let ids = admin.xadd_n(STREAM, 500, 8);
    assert!(wait_until(SETTLE, || seen.len() >= 500), "consumed {} of 500", seen.len());
    let stats = run.finish();
    assert_eq!(seen.ids(), set(&ids));
    assert!(seen.all().iter().all(|(_, s)| *s == Source::New));
    assert_eq!(stats.acked, 500);
    assert_eq!(admin.xpending_count(STREAM, GROUP), 0);
}

/// Crash and restart under the same name: the backlog comes back at once, without waiting
/// for `min_idle` (an hour here).
pub fn crash_restart<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    create_group(&mut admin);
    let ids = admin.xadd_n(STREAM, 120, 8);
    // First life: handles 19 entries, then dies with the 20th in hand, mid-batch. A panic no
    // longer crashes (it stops, confirming the earned acks): the 20th handler waits while
    // the process is abandoned, as a kill -9 would leave it (no verdict, no ack owed sent,
    // the connection dropped).
    let seen = Seen::default();
    let handled = AtomicUsize::new(0);
    let (dying, killed) = (Arc::new(Mutex::new(None)), Arc::new(AtomicBool::new(false)));
    let (in_hand, dead) = (dying.clone(), killed.clone());
    let crash = T::spawn(
        server.endpoint(),
        t.config("c1"),
        seen.handler(move |id, _| {
            if handled.fetch_add(1, Ordering::SeqCst) == 19 {
                *in_hand.lock().unwrap() = Some(id.to_string());
                assert!(wait_until(SETTLE, || dead.load(Ordering::SeqCst)), "never killed");
            }
            Verdict::Ack
        }),
    );
    assert!(wait_until(SETTLE, || dying.lock().unwrap().is_some()), "handled {} of 20", seen.len());
    crash.crash(&mut admin, "c1");
    killed.store(true, Ordering::SeqCst);
    crash.join(SETTLE).expect("abandoned");
    let held: BTreeSet<String> =
        admin.xpending_consumer(STREAM, GROUP, "c1").into_iter().map(|p| p.0).collect();
    let in_hand = dying.lock().unwrap().clone().expect("an entry in hand");
    assert!(held.contains(&in_hand), "the entry in hand at the crash stays pending: {held:?}");
    assert!(held.len() >= 31, "c1 holds the rest of its batch of 50 ({})", held.len());
    // Second life, same name: the backlog is handed out from its own pending list at once,
    // before anything new.
    let started = Instant::now();
    let again = Seen::default();
    let run = T::spawn(server.endpoint(), t.config("c1"), again.acking());
    assert!(wait_until(SETTLE, || again.ids().is_superset(&held)), "got {} of {}", again.len(), held.len());
    assert!(started.elapsed() < Duration::from_secs(5), "no idle wait: {:?}", started.elapsed());
    assert!(wait_until(SETTLE, || seen.ids().union(&again.ids()).count() == ids.len()), "nothing lost");
    run.finish();
    let deliveries = again.all();
    let (first, rest) = deliveries.split_at(held.len());
    assert!(first.iter().all(|(id, s)| *s == Source::Pending && held.contains(id)), "backlog first");
    assert!(rest.iter().all(|(_, s)| *s == Source::New));
    let twice: BTreeSet<String> = seen.ids().intersection(&again.ids()).cloned().collect();
    assert!(twice.is_subset(&held), "handled twice, yet acked before the crash: {twice:?}");
    assert_eq!(again.len(), again.ids().len(), "the second life handled each once");
    assert_eq!(admin.xpending_count(STREAM, GROUP), 0);
}

/// A dead peer's entries are reclaimed after `min_idle`, within `min_idle + beat + slack`.
pub fn dead_peer<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    create_group(&mut admin);
    let ids = admin.xadd_n(STREAM, 30, 8);
    // Before the read is sent: the server counts idle time from its delivery, which comes
    // after (taken after the answer, a slow round trip made the reclaim look early).
    let held_at = Instant::now();
    assert_eq!(hold(&mut admin, "dead"), 30);
    let min_idle = Duration::from_millis(600);
    let seen = Seen::default();
    let run = T::spawn(server.endpoint(), t.config("c1").min_idle(min_idle), seen.acking());
    assert!(wait_until(Duration::from_secs(10), || seen.len() >= 30), "reclaimed {} of 30", seen.len());
    let took = held_at.elapsed();
    run.finish();
    // The server counts idle time in whole milliseconds.
    assert!(took + Duration::from_millis(2) >= min_idle, "reclaimed before min_idle: {took:?}");
    assert!(took < min_idle + Duration::from_millis(200) + Duration::from_secs(3), "too slow: {took:?}");
    assert_eq!(seen.ids(), set(&ids));
    assert!(seen.all().iter().all(|(_, s)| *s == Source::Claimed));
    assert!(admin.xpending_consumer(STREAM, GROUP, "dead").is_empty());
    assert_eq!(admin.xpending_count(STREAM, GROUP), 0);
}

/// A `Retry` verdict comes back after `min_idle` (through `XAUTOCLAIM` of its own entry),
/// when it stays pending (where the server releases, on request: [`redis8`] has the release).
pub fn retry_after_min_idle<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    create_group(&mut admin);
    let min_idle = Duration::from_millis(500);
    let seen = Seen::default();
    let run = T::spawn(
        server.endpoint(),
        t.config("c1").min_idle(min_idle).on_retry(pelican::OnRetry::StayPending),
        seen.handler(|_, times| if times == 1 { Verdict::Retry } else { Verdict::Ack }),
    );
    thread::sleep(Duration::from_millis(300));
    let ids = admin.xadd_n(STREAM, 5, 8);
    let added = Instant::now();
    assert!(wait_until(Duration::from_secs(10), || seen.len() >= 10), "deliveries: {}", seen.len());
    let took = added.elapsed();
    let stats = run.finish();
    // The server counts idle time in whole milliseconds from the delivery, which can come a
    // little before `added` (the read is woken by the XADD itself).
    assert!(took + Duration::from_millis(5) >= min_idle, "retried before min_idle: {took:?}");
    let all = seen.all();
    for id in &ids {
        let sources: Vec<Source> = all.iter().filter(|(i, _)| i == id).map(|(_, s)| *s).collect();
        assert_eq!(sources, [Source::New, Source::Claimed], "{id}");
    }
    assert_eq!((stats.retried, stats.acked), (5, 5));
    assert_eq!(admin.xpending_count(STREAM, GROUP), 0);
}

/// Pending entries deleted by `XDEL` (or trimmed by `XTRIM`) are acked away on the drain and
/// on the claim path, never handed out; the PEL ends empty.
fn deleted_pending<T: Transport>(t: Target, trim: bool) {
    let server = t.start();
    let mut admin = server.admin();
    create_group(&mut admin);
    let ids = admin.xadd_n(STREAM, 20, 8);
    // c1 (the drain path) holds the first 10, `dead` (the claim path) the other 10.
    admin.call(&["XREADGROUP", "GROUP", GROUP, "c1", "COUNT", "10", "STREAMS", STREAM, ">"]);
    assert_eq!(hold(&mut admin, "dead"), 10);
    let gone: Vec<String> = if trim {
        admin.call(&["XTRIM", STREAM, "MAXLEN", "15"]);
        ids[..5].to_vec()
    } else {
        let gone = vec![ids[1].clone(), ids[4].clone(), ids[12].clone(), ids[17].clone()];
        for id in &gone {
            admin.call(&["XDEL", STREAM, id]);
        }
        gone
    };
    let live: BTreeSet<String> = set(&ids).difference(&set(&gone)).cloned().collect();
    let seen = Seen::default();
    let run = T::spawn(server.endpoint(), t.config("c1").min_idle(Duration::from_millis(300)), seen.acking());
    assert!(
        wait_until(SETTLE, || seen.ids() == live && admin.xpending_count(STREAM, GROUP) == 0),
        "{:?}",
        seen.ids()
    );
    let stats = run.finish();
    assert!(seen.ids().is_disjoint(&set(&gone)), "a deleted entry was handed out");
    assert!(stats.deleted_seen >= gone.len() as u64, "{stats:?}");
    assert_eq!(admin.xpending_count(STREAM, GROUP), 0);
}

/// `XDEL` of pending entries, on the drain and on the claim path.
pub fn xdel_pending<T: Transport>(t: Target) {
    deleted_pending::<T>(t, false);
}

/// `XTRIM` of pending entries.
pub fn xtrim_pending<T: Transport>(t: Target) {
    deleted_pending::<T>(t, true);
}

/// The group disappears while parked (`XGROUP DESTROY`, then `DEL` of the key): the consumer
/// recreates it and carries on.
pub fn group_gone_recreated<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    let seen = Seen::default();
    let config = t.config("c1").create_group("0").on_group_gone(GroupGone::Recreate);
    let run = T::spawn(server.endpoint(), config, seen.acking());
    assert!(wait_until(SETTLE, || admin.group_exists(STREAM, GROUP)));
    for how in [["XGROUP", "DESTROY", STREAM, GROUP].as_slice(), ["DEL", STREAM].as_slice()] {
        let before = set(&admin.xadd_n(STREAM, 3, 8));
        assert!(wait_until(SETTLE, || seen.ids().is_superset(&before)), "consumed before {how:?}");
        thread::sleep(Duration::from_millis(100)); // parked again
        admin.call(how);
        assert!(wait_until(SETTLE, || admin.group_exists(STREAM, GROUP)), "recreated after {how:?}");
        let after = set(&admin.xadd_n(STREAM, 3, 8));
        assert!(wait_until(SETTLE, || seen.ids().is_superset(&after)), "consumed after {how:?}");
    }
    let stats = run.finish();
    assert!(stats.group_recreated >= 2, "{stats:?}");
    assert_eq!(admin.xpending_count(STREAM, GROUP), 0);
}

/// With `GroupGone::Fail`, a destroyed group stops the consumer with an error.
pub fn group_gone_fails<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    create_group(&mut admin);
    let seen = Seen::default();
    let run = T::spawn(server.endpoint(), t.config("c1"), seen.acking());
    thread::sleep(Duration::from_millis(300));
    admin.call(&["XGROUP", "DESTROY", STREAM, GROUP]);
    let err = run.join(SETTLE).expect_err("the consumer fails");
    assert!(err.contains("group is gone"), "{err}");
    assert!(!admin.group_exists(STREAM, GROUP), "failing does not recreate the group");
}

/// `XGROUP DELCONSUMER` while parked: the server drops the consumer (and its pending list);
/// the next read recreates it and consumption goes on.
pub fn delconsumer_while_parked<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    create_group(&mut admin);
    let seen = Seen::default();
    let run = T::spawn(server.endpoint(), t.config("c1"), seen.acking());
    thread::sleep(Duration::from_millis(300));
    admin.call(&["XGROUP", "DELCONSUMER", STREAM, GROUP, "c1"]);
    let ids = admin.xadd_n(STREAM, 10, 8);
    assert!(wait_until(SETTLE, || seen.ids() == set(&ids)));
    run.finish();
    assert_eq!(admin.xpending_count(STREAM, GROUP), 0);
}

/// Stop mid-batch: the entry in hand finishes, its ack is confirmed, nothing after it is
/// handed out, the rest stays pending.
pub fn stop_mid_batch<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    create_group(&mut admin);
    admin.xadd_n(STREAM, 50, 8);
    let seen = Seen::default();
    let started = Arc::new(AtomicBool::new(false));
    let flag = started.clone();
    let run = T::spawn(
        server.endpoint(),
        t.config("c1"),
        seen.handler(move |_, _| {
            flag.store(true, Ordering::SeqCst);
            thread::sleep(Duration::from_millis(30));
            Verdict::Ack
        }),
    );
    assert!(wait_until(SETTLE, || started.load(Ordering::SeqCst)));
    run.stop();
    let stats = run.join(SETTLE).expect("clean stop");
    let handled = seen.len() as u64;
    assert!((1..50).contains(&handled), "{handled}");
    assert_eq!(stats.acked, handled, "every settled entry's ack was confirmed");
    assert_eq!(admin.xpending_count(STREAM, GROUP), 50 - handled as i64, "the rest stays pending");
}

/// Stop while parked returns promptly (far below the beat).
pub fn stop_while_parked<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    create_group(&mut admin);
    let run =
        T::spawn(server.endpoint(), t.config("c1").beat(Duration::from_secs(5)), Seen::default().acking());
    assert!(wait_until(SETTLE, || admin.info("clients").contains("blocked_clients:1")), "parked");
    let asked = Instant::now();
    run.stop();
    run.join(Duration::from_secs(2)).expect("clean stop");
    assert!(asked.elapsed() < Duration::from_millis(500), "stopped after {:?}", asked.elapsed());
    assert_eq!(admin.xpending_count(STREAM, GROUP), 0);
    assert!(wait_until(SETTLE, || admin.client_id_by_name("pelican-c1").is_none()), "hung up");
}

/// `CLIENT KILL` of the consumer's connection: it reconnects, drains and carries on.
pub fn client_kill<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    create_group(&mut admin);
    let seen = Seen::default();
    let run = T::spawn(server.endpoint(), t.config("c1"), seen.acking());
    let first = admin.xadd_n(STREAM, 10, 8);
    assert!(wait_until(SETTLE, || seen.len() >= 10));
    assert!(wait_until(SETTLE, || admin.client_kill_by_name("pelican-c1") >= 1));
    let second = admin.xadd_n(STREAM, 10, 8);
    assert!(wait_until(SETTLE, || seen.ids().is_superset(&set(&second))));
    let stats = run.finish();
    assert!(stats.reconnects >= 1, "{stats:?}");
    assert_eq!(seen.ids(), set(&first).union(&set(&second)).cloned().collect());
    assert_eq!(admin.xpending_count(STREAM, GROUP), 0);
}

/// kill -9 of the server and a restart with AOF on the same port: the consumer reconnects
/// (through `LOADING`, if it sees it) and nothing is lost.
pub fn server_restart_aof<T: Transport>(t: Target) {
    let mut server = t.start_with(Options::default().with_aof());
    let mut admin = server.admin();
    create_group(&mut admin);
    let seen = Seen::default();
    let run = T::spawn(server.endpoint(), t.config("c1"), seen.acking());
    let mut ids = admin.xadd_n(STREAM, 200, 8);
    assert!(wait_until(SETTLE, || seen.len() >= 50));
    server.kill9();
    thread::sleep(Duration::from_millis(200));
    server.restart();
    let mut admin = server.admin();
    ids.extend(admin.xadd_n(STREAM, 100, 8));
    assert!(wait_until(Duration::from_secs(20), || seen.ids() == set(&ids)
        && admin.xpending_count(STREAM, GROUP) == 0));
    let stats = run.finish();
    assert!(stats.reconnects >= 1, "{stats:?}");
    // No peer: acks the restarted server no longer had pending are not put down to one.
    assert_eq!(stats.lost_to_peer, 0, "{stats:?}");
}

/// A consumer whose first entry's ack becomes owed while the server is down: the handler
/// holds the entry while the server is killed and a stop is asked, then acks it. One entry
/// per read: at most the next one is read ahead before the outage.
fn ack_owed_in_outage<T: Transport>(t: Target) -> (Server, Running, Vec<String>) {
    let mut server = t.start_with(Options::default().with_aof());
    let mut admin = server.admin();
    create_group(&mut admin);
    let ids = admin.xadd_n(STREAM, 3, 8);
    let (entered, released) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let (enter, release) = (entered.clone(), released.clone());
    let handler = Box::new(move |_: &Entry| {
        enter.store(true, Ordering::SeqCst);
        assert!(wait_until(SETTLE, || release.load(Ordering::SeqCst)));
        Verdict::Ack
    });
    let run = T::spawn(server.endpoint(), t.config("c1").count(1), handler);
    assert!(wait_until(SETTLE, || entered.load(Ordering::SeqCst)));
    server.kill9();
    run.stop();
    released.store(true, Ordering::SeqCst);
    // The stop waits to confirm the ack: not while the server is down.
    assert!(!wait_until(Duration::from_millis(500), || run.is_finished()), "stopped with an ack unconfirmed");
    (server, run, ids)
}

/// A stop during an outage with an ack owed: the consumer reconnects when the server is
/// back, confirms the ack (and reads nothing more), then stops.
pub fn stop_during_outage<T: Transport>(t: Target) {
    let (mut server, run, ids) = ack_owed_in_outage::<T>(t);
    server.restart();
    let stats = run.join(SETTLE).expect("clean stop");
    assert_eq!((stats.new, stats.acked, stats.abandoned_acks), (1, 1, 0), "{stats:?}");
    let (read_ahead, unread) = rest_after_outage(&mut server.admin());
    assert!(!read_ahead.contains(&ids[0]), "the ack landed");
    assert!(read_ahead.len() <= 1, "read ahead before the outage, nothing after: {read_ahead:?}");
    assert_eq!([read_ahead, unread].concat(), ids[1..], "the rest pending to c1 or never read");
}

/// An abandon during an outage with an ack owed returns at once; the entry stays pending,
/// to come again: nothing is lost.
pub fn abandon_during_outage<T: Transport>(t: Target) {
    let (mut server, run, ids) = ack_owed_in_outage::<T>(t);
    run.abandon();
    let stats = run.join(Duration::from_secs(2)).expect("clean stop");
    assert_eq!((stats.new, stats.acked, stats.abandoned_acks), (1, 0, 1), "{stats:?}");
    server.restart();
    let (pending, unread) = rest_after_outage(&mut server.admin());
    assert_eq!(pending.first(), Some(&ids[0]), "still c1's, for its drain");
    assert!(pending.len() <= 2, "at most one read ahead: {pending:?}");
    assert_eq!([pending, unread].concat(), ids, "the rest pending to c1 or never read");
}

/// After an outage story: the ids still pending (all c1's), and those a new reader gets.
fn rest_after_outage(admin: &mut Admin) -> (Vec<String>, Vec<String>) {
    let pending = admin.xpending_all(STREAM, GROUP);
    assert!(pending.iter().all(|p| p.1 == "c1"), "{pending:?}");
    let unread = admin.call(&["XREADGROUP", "GROUP", GROUP, "c2", "COUNT", "10", "STREAMS", STREAM, ">"]);
    let unread: Vec<String> = unread
        .as_array()
        .and_then(|streams| streams[0].as_array()?[1].as_array())
        .map(|entries| entries.iter().filter_map(|e| e.as_array()?[0].as_text()).collect())
        .unwrap_or_default();
    (pending.into_iter().map(|p| p.0).collect(), unread)
}

/// AUTH with an ACL user.
pub fn acl_user<T: Transport>(t: Target) {
    let server = t.start_with(Options::default().with_full_user("app", "s3cret-pass"));
    let mut admin = server.admin();
    create_group(&mut admin);
    let ids = admin.xadd_n(STREAM, 10, 8);
    let seen = Seen::default();
    let run = T::spawn(server.endpoint(), t.config("c1").auth(Some("app"), "s3cret-pass"), seen.acking());
    assert!(wait_until(SETTLE, || seen.ids() == set(&ids)));
    run.finish();
    assert_eq!(admin.xpending_count(STREAM, GROUP), 0);
    let bad =
        T::spawn(server.endpoint(), t.config("c2").auth(Some("app"), "wrong"), Seen::default().acking());
    let err = bad.join(SETTLE).expect_err("wrong password is fatal");
    assert!(err.contains("WRONGPASS"), "{err}");
}

/// Two processes under one consumer name (an overlapping restart, a copied unit): the second
/// refuses to start, naming the first, and takes nothing from the shared pending list; told
/// it may share the name (`allow_twins`), it runs beside the first.
pub fn twins<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    create_group(&mut admin);
    let seen = Seen::default();
    let first = T::spawn(server.endpoint(), t.config("c1"), seen.acking());
    let ids = admin.xadd_n(STREAM, 20, 8);
    assert!(wait_until(SETTLE, || seen.ids() == set(&ids)), "the first consumes");
    let second = Seen::default();
    let twin = T::spawn(server.endpoint(), t.config("c1"), second.acking());
    let err = twin.join(SETTLE).expect_err("a twin is refused");
    assert!(err.contains("already consumes as pelican-c1"), "{err}");
    assert_eq!(second.len(), 0, "the refused twin handled nothing");
    // Allowed, the twin runs; both consume.
    let shared = T::spawn(server.endpoint(), t.config("c1").allow_twins(), second.acking());
    assert!(wait_until(SETTLE, || admin.client_ids_by_name("pelican-c1").len() == 2), "both connected");
    let more = admin.xadd_n(STREAM, 200, 8);
    let all: BTreeSet<String> = ids.iter().chain(&more).cloned().collect();
    assert!(wait_until(SETTLE, || seen.ids().union(&second.ids()).count() == all.len()), "nothing lost");
    shared.finish();
    first.finish();
    assert_eq!(admin.xpending_count(STREAM, GROUP), 0);
}

/// A least-privilege stream worker (`+@stream +@connection`): consuming works (the look for
/// twins too); a dead-letter stream, which needs `EVAL`, is refused at the start with a
/// message naming the check, before anything is read, not at the first dead letter.
pub fn acl_stream_worker<T: Transport>(t: Target) {
    let rule = "worker on >pw ~* &* +@stream +@connection";
    let server = t.start_with(Options::default().with_acl_user(rule));
    let mut admin = server.admin();
    create_group(&mut admin);
    let ids = admin.xadd_n(STREAM, 10, 8);
    let seen = Seen::default();
    let config = t.config("c1").auth(Some("worker"), "pw");
    let with_dead_letters = config.clone().dead_letter_after(3, "s:dead");
    let refused = T::spawn(server.endpoint(), with_dead_letters, seen.acking());
    let err = refused.join(SETTLE).expect_err("no EVAL: refused");
    assert!(err.contains("the check that dead letters can be moved") && err.contains("NOPERM"), "{err}");
    assert_eq!((seen.len(), admin.xpending_count(STREAM, GROUP)), (0, 0), "nothing read");
    let run = T::spawn(server.endpoint(), config.health_every(Duration::from_millis(100)), seen.acking());
    assert!(wait_until(SETTLE, || seen.ids() == set(&ids)), "consumed {}", seen.len());
    run.finish();
    assert_eq!(admin.xpending_count(STREAM, GROUP), 0);
}

/// A clean stop leaves the group: found parked on a 5 s read, it leaves on a new connection
/// without waiting the read out; kept in the group on request (`leave_on_stop(false)`), and
/// when the user may not run `EVAL` (consuming unaffected).
pub fn stop_leaves_the_group<T: Transport>(t: Target) {
    let server = t.start_with(Options::default().with_acl_user("worker on >pw ~* &* +@stream +@connection"));
    let mut admin = server.admin();
    create_group(&mut admin);
    let seen = Seen::default();
    let run = T::spawn(server.endpoint(), t.config("c1").beat(Duration::from_secs(5)), seen.acking());
    admin.xadd_n(STREAM, 10, 8);
    assert!(wait_until(SETTLE, || seen.len() == 10 && admin.xpending_count(STREAM, GROUP) == 0));
    thread::sleep(Duration::from_millis(200)); // parked
    let stopping = Instant::now();
    run.finish();
    let took = stopping.elapsed();
    assert!(took < Duration::from_secs(2), "the 5 s read was waited out: {took:?}");
    assert_eq!(admin.consumer_names(STREAM, GROUP), Vec::<String>::new(), "c1 left");

    let kept = T::spawn(server.endpoint(), t.config("c2").leave_on_stop(false), seen.acking());
    let without_eval = T::spawn(server.endpoint(), t.config("c3").auth(Some("worker"), "pw"), seen.acking());
    assert!(wait_until(SETTLE, || admin.consumer_names(STREAM, GROUP).len() == 2), "both joined");
    admin.xadd_n(STREAM, 10, 8);
    assert!(wait_until(SETTLE, || seen.len() == 20 && admin.xpending_count(STREAM, GROUP) == 0));
    let stats = (kept.finish(), without_eval.finish());
    assert_eq!(stats.0.acked + stats.1.acked, 10);
    let mut names = admin.consumer_names(STREAM, GROUP);
    names.sort();
    assert_eq!(names, ["c2", "c3"]);
}

/// A large backlog (100k entries) consumed in full, the PEL empty at the end.
pub fn large_backlog<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    create_group(&mut admin);
    let n = 100_000;
    admin.xadd_n(STREAM, n, 16);
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    let run = T::spawn(
        server.endpoint(),
        t.config("c1").count(500),
        Box::new(move |_: &Entry| {
            c.fetch_add(1, Ordering::Relaxed);
            Verdict::Ack
        }),
    );
    assert!(
        wait_until(Duration::from_secs(120), || count.load(Ordering::Relaxed) >= n),
        "{}",
        count.load(Ordering::Relaxed)
    );
    let stats = run.finish();
    assert_eq!(stats.acked, n as u64);
    assert_eq!(admin.xpending_count(STREAM, GROUP), 0);
    let reply = admin.call(&["XINFO", "GROUPS", STREAM]);
    assert!(format!("{reply:?}").contains("pending"), "{reply:?}");
}

/// Expands to one `#[test]` per scenario for the transport `$t`, each run on every target.
#[macro_export]
macro_rules! conformance_suite {
    ($t:ty) => {
        $crate::conformance_suite!(@each $t;
            cold_start, crash_restart, dead_peer, retry_after_min_idle, xdel_pending, xtrim_pending,
            group_gone_recreated, group_gone_fails, delconsumer_while_parked, stop_mid_batch,
            stop_while_parked, stop_during_outage, abandon_during_outage, client_kill,
            server_restart_aof, acl_user, large_backlog, slow_handlers_two_consumers,
            acks_before_the_next_handler, poison_entry_is_dead_lettered, dead_letter_verdict,
            big_entries, entry_too_large_is_named, twins, acl_stream_worker, stop_leaves_the_group, kill_with_entries_in_hand,
            stop_with_entries_in_hand, peer_reclaims_in_hand, key_order_across_restart, fair_start,
            retry_released_at_once, stop_releases_buffered, abandon_hands_over_buffered, acks_delete, retry_stays_pending_on_request,
            commit_crash_restart, commit_zombie_fenced, commit_refused_writes_nothing, commit_needs_scripting,
            commit_counts_per_key,
            many_streams_one_connection, many_streams_crash_restart, many_streams_one_group_gone,
            many_streams_one_deleted_and_made_again, many_streams_added_and_removed,
            stops_under_load_strand_nothing);
        $crate::conformance_suite!(@plain $t; commit_cut_after_write, many_streams_changes_refused);
        $crate::conformance_suite!(@once $t; tls_certificates_refused, tls_protocol_mismatch,
            cluster_lanes_find_their_masters, cluster_migration_while_parked,
            cluster_migration_while_busy, cluster_atomic_migration, cluster_failover,
            cluster_master_killed, sentinel_master_killed, sentinel_failover_twice,
            sentinel_start_while_master_down, pointed_at_a_replica, moving_primary_endpoint,
            sentinel_over_tls, cluster_commit_hash_tags);
        $crate::conformance_suite!(@once $t; misuse_sentinel_wants_a_password,
            misuse_sentinel_wrong_password, misuse_sentinel_at_a_data_node, misuse_node_at_a_sentinel,
            misuse_unknown_service, misuse_sentinels_down, misuse_node_refuses_the_login,
            misuse_no_backoff_still_paced);
    };
    (@once $t:ty; $($name:ident),*) => {
        $(
            #[test]
            fn $name() {
                $crate::conformance::$name::<$t>();
            }
        )*
    };
    (@plain $t:ty; $($name:ident),*) => {
        $(
            #[test]
            fn $name() {
                $crate::conformance::on_every_plain_target(stringify!($name), $crate::conformance::$name::<$t>);
            }
        )*
    };
    (@each $t:ty; $($name:ident),*) => {
        $(
            #[test]
            fn $name() {
                $crate::conformance::on_every_target(stringify!($name), $crate::conformance::$name::<$t>);
            }
        )*
    };
}
