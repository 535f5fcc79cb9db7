//! One consumer reading many streams on one connection ([`Config::streams`](pelican::Config::streams)): each entry of
//! each stream handled once and acked on its own stream, a crash with entries in hand on
//! several streams drained whole by the restart, one stream's group lost while the others go on.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pelican::{Entry, GroupGone, Verdict};

use super::kit::{wait_until, Handler, Target, Transport, GROUP};
use crate::admin::Admin;

const SETTLE: Duration = Duration::from_secs(20);

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("many:{i}")).collect()
}

/// Every delivery, as `stream/id`.
#[derive(Clone, Default)]
struct Deliveries(Arc<Mutex<Vec<String>>>);

impl Deliveries {
    fn note(&self, e: &Entry) {
        let (stream, id) = (String::from_utf8_lossy(e.stream()), String::from_utf8_lossy(e.id()));
        self.0.lock().unwrap().push(format!("{stream}/{id}"));
    }
    fn acking(&self) -> Handler {
        let me = self.clone();
        Box::new(move |e: &Entry| {
            me.note(e);
            Verdict::Ack
        })
    }
    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
    fn distinct(&self) -> BTreeSet<String> {
        self.all().into_iter().collect()
    }
}

fn add_all(admin: &mut Admin, keys: &[String], per: usize) -> BTreeSet<String> {
    let mut added = BTreeSet::new();
    for key in keys {
        for id in admin.xadd_n(key, per, 8) {
            added.insert(format!("{key}/{id}"));
        }
    }
    added
}

fn pending(admin: &mut Admin, keys: &[String]) -> i64 {
    keys.iter().map(|k| admin.xpending_count(k, GROUP)).sum()
}

/// 200 streams, one consumer, one connection: each of the 1,000 entries handled once, every
/// pending list empty; new entries on any stream reach the one parked read.
pub fn many_streams_one_connection<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    let keys = keys(200);
    let mut added = add_all(&mut admin, &keys, 4);
    let seen = Deliveries::default();
    let config = t.config("c1").streams(&keys).create_group("0");
    let run = T::spawn(server.endpoint(), config, seen.acking());
    assert!(wait_until(SETTLE, || seen.all().len() >= 800), "handled {} of 800", seen.all().len());
    assert_eq!(admin.client_ids_by_name("pelican-c1").len(), 1, "one connection for every stream");
    // Parked on all of them: one entry on the last stream, one on the first.
    for key in [&keys[199], &keys[0]] {
        added.extend(admin.xadd_n(key, 1, 8).into_iter().map(|id| format!("{key}/{id}")));
    }
    assert!(wait_until(SETTLE, || seen.all().len() >= 802), "handled {} of 802", seen.all().len());
    let stats = run.finish();
    assert_eq!(seen.distinct(), added);
    assert_eq!(seen.all().len(), added.len(), "each once");
    assert_eq!(stats.acked, added.len() as u64);
    assert_eq!(pending(&mut admin, &keys), 0);
}

/// A crash with entries in hand on several streams: the restart under the same name drains
/// every stream's own pending list at once; nothing is lost, and only what was pending at
/// the crash is handled twice.
pub fn many_streams_crash_restart<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    let keys = keys(40);
    for key in &keys {
        admin.cmd(&["XGROUP", "CREATE", key, GROUP, "0", "MKSTREAM"]);
    }
    let added = add_all(&mut admin, &keys, 10);
    let seen = Deliveries::default();
    let (handled, killed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
    let holding = Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
    let (count, dead, first, hold) = (handled.clone(), killed.clone(), seen.clone(), holding.clone());
    let config = t.config("c1").streams(&keys).concurrency(4);
    let crash = T::spawn_concurrent(
        server.endpoint(),
        config.clone(),
        Arc::new(move |e: &Entry| {
            first.note(e);
            // After 150, one entry of each of four streams is held in hand until the process
            // is killed: the crash leaves entries in hand on several streams, whatever order
            // they come in (four of one stream could fill its own concurrency).
            let held = count.fetch_add(1, Ordering::SeqCst) >= 150 && {
                let mut streams = hold.lock().unwrap();
                streams.len() < 4 && streams.insert(e.stream().to_vec())
            };
            if held {
                wait_until(SETTLE, || dead.load(Ordering::SeqCst));
            }
            Verdict::Ack
        }),
    );
    assert!(wait_until(SETTLE, || holding.lock().unwrap().len() == 4), "handled {}", seen.all().len());
    crash.crash(&mut admin, "c1");
    killed.store(true, Ordering::SeqCst);
    crash.join(SETTLE).expect("abandoned");
    let held = pending(&mut admin, &keys);
    assert!(held >= 4, "the entries in hand stay pending ({held})");
    let holding = keys.iter().filter(|k| admin.xpending_count(k, GROUP) > 0).count();
    assert!(holding >= 2, "pending on several streams ({holding})");
    let before = seen.distinct();
    let again = Deliveries::default();
    let run = T::spawn(server.endpoint(), config, again.acking());
    // Every entry handled, and what was pending at the crash (in hand, read ahead, acks not
    // yet confirmed) drained and acked.
    assert!(
        wait_until(SETTLE, || before.union(&again.distinct()).count() == added.len()
            && pending(&mut admin, &keys) == 0),
        "{} of {} handled, {} pending",
        before.union(&again.distinct()).count(),
        added.len(),
        pending(&mut admin, &keys)
    );
    run.finish();
    let twice = before.intersection(&again.distinct()).count() as i64;
    assert!(twice <= held, "handled twice {twice}, pending at the crash {held}");
    assert_eq!(again.all().len(), again.distinct().len(), "the second life handled each once");
    assert_eq!(pending(&mut admin, &keys), 0);
}

/// One stream's group destroyed while the consumer runs: it is made again there (from the
/// start), the other streams go on meanwhile.
pub fn many_streams_one_group_gone<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    let keys = keys(5);
    let seen = Deliveries::default();
    let config = t.config("c1").streams(&keys).create_group("0").on_group_gone(GroupGone::Recreate);
    let run = T::spawn(server.endpoint(), config, seen.acking());
    assert!(wait_until(SETTLE, || keys.iter().all(|k| admin.group_exists(k, GROUP))), "groups made");
    let mut added = add_all(&mut admin, &keys, 3);
    assert!(wait_until(SETTLE, || seen.distinct() == added), "first round: {}", seen.all().len());
    admin.cmd(&["XGROUP", "DESTROY", &keys[2], GROUP]);
    // The others go on; the lost one is made again and read from its start.
    let others: Vec<String> = keys.iter().filter(|k| *k != &keys[2]).cloned().collect();
    added.extend(add_all(&mut admin, &others, 2));
    assert!(
        wait_until(SETTLE, || seen.distinct() == added),
        "others: {} of {}",
        seen.distinct().len(),
        added.len()
    );
    assert!(wait_until(SETTLE, || admin.group_exists(&keys[2], GROUP)), "made again");
    added.extend(add_all(&mut admin, &keys[2..3], 2));
    assert!(
        wait_until(SETTLE, || seen.distinct() == added),
        "after: {} of {}",
        seen.distinct().len(),
        added.len()
    );
    let stats = run.finish();
    assert!(stats.group_recreated >= 1);
    assert_eq!(pending(&mut admin, &keys), 0);
}

/// One stream deleted while the consumer reads it with the others: made again (its group
/// with it) and read on, the others untouched.
pub fn many_streams_one_deleted_and_made_again<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    let keys = keys(4);
    let seen = Deliveries::default();
    let config = t.config("c1").streams(&keys).create_group("0").on_group_gone(GroupGone::Recreate);
    let run = T::spawn(server.endpoint(), config, seen.acking());
    assert!(wait_until(SETTLE, || keys.iter().all(|k| admin.group_exists(k, GROUP))), "groups made");
    let added = add_all(&mut admin, &keys, 2);
    assert!(wait_until(SETTLE, || seen.distinct() == added), "first round: {}", seen.all().len());
    admin.cmd(&["DEL", &keys[1]]);
    // Made again (with its group) by the consumer, then read on like the others.
    assert!(wait_until(SETTLE, || admin.group_exists(&keys[1], GROUP)), "made again");
    let later = add_all(&mut admin, &keys, 2);
    assert!(
        wait_until(SETTLE, || seen.distinct().is_superset(&later)),
        "after: {} of {}",
        seen.distinct().intersection(&later).count(),
        later.len()
    );
    let stats = run.finish();
    assert!(stats.group_recreated >= 1, "{stats:?}");
    assert_eq!(pending(&mut admin, &keys), 0);
}

/// Streams added to and removed from a running consumer (`Runner::stream_set`): one added is
/// drained (its entries made before it was added are read) and read on the same connection,
/// one removed is read no more (its new entries wait, undelivered). Each change says whether
/// it was taken: an add of a stream read (or asked) already and a removal of one not read are
/// refused, and change nothing.
pub fn many_streams_added_and_removed<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    let keys = keys(3);
    for key in &keys {
        admin.cmd(&["XGROUP", "CREATE", key, GROUP, "0", "MKSTREAM"]);
    }
    let first = add_all(&mut admin, &keys[..2], 2);
    let waiting = add_all(&mut admin, &keys[2..], 2);
    let seen = Deliveries::default();
    let run = T::spawn(server.endpoint(), t.config("c1").streams(&keys[..2]), seen.acking());
    assert!(wait_until(SETTLE, || seen.distinct() == first), "the first two: {:?}", seen.all());
    assert!(!run.add_stream(&keys[0]), "read already");
    assert!(!run.remove_stream("many:never"), "not read");
    assert!(run.add_stream(&keys[2]), "taken");
    assert!(!run.add_stream(&keys[2]), "asked already");
    let both: BTreeSet<String> = first.union(&waiting).cloned().collect();
    assert!(wait_until(SETTLE, || seen.distinct() == both), "added, drained: {:?}", seen.all());
    assert_eq!(admin.client_ids_by_name("pelican-c1").len(), 1, "one connection");
    assert!(run.remove_stream(&keys[0]), "taken");
    assert!(!run.remove_stream(&keys[0]), "asked already");
    std::thread::sleep(Duration::from_millis(300));
    let unread = add_all(&mut admin, &keys[..1], 2);
    let more = add_all(&mut admin, &keys[1..], 2);
    let all: BTreeSet<String> = both.union(&more).cloned().collect();
    assert!(wait_until(SETTLE, || seen.distinct() == all), "the others go on: {:?}", seen.all());
    std::thread::sleep(Duration::from_millis(300));
    let stats = run.finish();
    assert!(seen.distinct().is_disjoint(&unread), "read once removed");
    assert_eq!(stats.acked, all.len() as u64);
    assert_eq!(seen.all().len(), all.len(), "each once");
    assert_eq!(pending(&mut admin, &keys), 0);
}

/// The most streams a consumer reads (`pelican::MAX_STREAMS`), reached through
/// `Runner::stream_set` while it runs: each add up to it is taken (the last stream added is
/// read: its entry handled), the next one refused at once; a removal makes room for one
/// more. After a stop is asked, an add is refused (a stop reads nothing new). On every
/// server and protocol, without TLS (thousands of streams joining take seconds).
pub fn many_streams_changes_refused<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    let keys = keys(pelican::MAX_STREAMS + 1);
    let seen = Deliveries::default();
    // Groups made from the first entry (`create_group`): the added streams need no setup.
    let config = t.config("c1").streams(&keys[..2]).create_group("0");
    let mut to = server.endpoint();
    let told = Arc::new(Mutex::new(Vec::new()));
    let sink = told.clone();
    to.notices = Some(Arc::new(move |n: &pelican::Notice| sink.lock().unwrap().push(n.to_string())));
    let run = T::spawn(to, config, seen.acking());
    let first = add_all(&mut admin, &keys[..1], 1);
    assert!(wait_until(SETTLE, || seen.distinct() == first), "running: {:?}", seen.all());
    let refused: Vec<&String> = keys[2..pelican::MAX_STREAMS].iter().filter(|k| !run.add_stream(k)).collect();
    assert!(refused.is_empty(), "{} adds below the most refused: {:?}", refused.len(), &refused[..1]);
    let over = &keys[pelican::MAX_STREAMS];
    assert!(!run.add_stream(over), "one stream more than the most");
    // The last one taken is read, on the one connection.
    let last = &keys[pelican::MAX_STREAMS - 1];
    let mut want = first.clone();
    want.extend(add_all(&mut admin, std::slice::from_ref(last), 1));
    // Every stream added is made a group and drained first: thousands take a while.
    assert!(wait_until(SETTLE * 3, || seen.distinct() == want), "the last added read: {:?}", seen.all());
    assert!(run.remove_stream(&keys[1]), "taken");
    assert!(run.add_stream(over), "room again");
    want.extend(add_all(&mut admin, std::slice::from_ref(over), 1));
    assert!(
        wait_until(SETTLE, || seen.distinct() == want),
        "the one added in its place read: {:?}",
        seen.all()
    );
    assert_eq!(admin.client_ids_by_name("pelican-c1").len(), 1, "one connection");
    run.stop();
    assert!(!run.add_stream(&keys[1]), "a stop reads nothing new");
    let stats = run.join(SETTLE).expect("stopped cleanly");
    // A loaded server (thousands of groups made at once) may answer an ack past the reply
    // deadline: the ack, sent again on a new connection, finds it acked (unmatched).
    assert_eq!(stats.acked + stats.acks_unmatched, want.len() as u64, "{stats:?} {:?}", told.lock().unwrap());
    assert_eq!(seen.all().len(), want.len(), "each once: {:?}", seen.all());
    assert_eq!(pending(&mut admin, &[keys[0].clone(), last.clone(), over.clone()]), 0);
}
