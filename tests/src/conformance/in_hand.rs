//! Stories of many entries in hand (`Config::concurrency` above one), every consumer run
//! through [`Transport::spawn_concurrent`]: a kill and a stop with entries in hand, a peer
//! reclaiming a dead consumer's, key order across a restart, and a fair start. Part of the
//! conformance suite (see the parent module).
//!
//! A kill is an abandon ([`Running::abandon`](super::kit::Running::abandon)) while handlers hang:
//! no verdict, no owed ack and nothing read is sent or given back, and the connection drops,
//! as after a kill -9. The hanging handlers then return (their verdicts unused), which a kill
//! would not wait for; nothing they do after the abandon reaches the server.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use pelican::{Entry, Source, Verdict};

use super::kit::{create_group, wait_until, Target, Transport, GROUP, SETTLE, STREAM};
use crate::admin::Admin;

/// How many entries the consumers of these stories have in hand at once.
const IN_HAND: usize = 8;

/// One handling, as its handler saw it when it started.
#[derive(Clone, Debug)]
struct Handling {
    id: String,
    source: Source,
    deliveries: u64,
    key: Option<String>,
}

/// Every handling of one consumer's life, in the order its handlers started.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<Handling>>>);

impl Log {
    /// Records `entry`; returns how many handlings came before it.
    fn record(&self, entry: &Entry) -> usize {
        let handling = Handling {
            id: text(entry.id()),
            source: entry.source,
            deliveries: entry.deliveries,
            key: entry.field(b"k").map(text),
        };
        let mut all = self.0.lock().unwrap();
        all.push(handling);
        all.len() - 1
    }

    fn all(&self) -> Vec<Handling> {
        self.0.lock().unwrap().clone()
    }

    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    fn ids(&self) -> BTreeSet<String> {
        self.0.lock().unwrap().iter().map(|h| h.id.clone()).collect()
    }

    fn ids_from(&self, source: Source) -> BTreeSet<String> {
        self.0.lock().unwrap().iter().filter(|h| h.source == source).map(|h| h.id.clone()).collect()
    }

    /// Each key's handlings, in the order they started.
    fn by_key(&self) -> BTreeMap<String, Vec<String>> {
        let mut keys: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for h in self.0.lock().unwrap().iter() {
            keys.entry(h.key.clone().unwrap_or_default()).or_default().push(h.id.clone());
        }
        keys
    }
}

/// Handlers of one key running at once, and the handlings that found another of their key
/// running.
#[derive(Default)]
struct PerKey {
    running: Mutex<BTreeMap<String, usize>>,
    beside: Mutex<Vec<String>>,
}

impl PerKey {
    fn enter(&self, entry: &Entry) {
        let key = entry.field(b"k").map(text).unwrap_or_default();
        let mut running = self.running.lock().unwrap();
        let n = running.entry(key).or_default();
        *n += 1;
        if *n > 1 {
            self.beside.lock().unwrap().push(text(entry.id()));
        }
    }

    fn leave(&self, entry: &Entry) {
        let key = entry.field(b"k").map(text).unwrap_or_default();
        *self.running.lock().unwrap().get_mut(&key).expect("entered") -= 1;
    }

    fn beside(&self) -> Vec<String> {
        self.beside.lock().unwrap().clone()
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// An entry id as numbers, for stream order.
fn order(id: &str) -> (u64, u64) {
    let (ms, seq) = id.split_once('-').expect("an entry id");
    (ms.parse().expect("ms"), seq.parse().expect("seq"))
}

fn in_id_order(ids: &[String]) -> bool {
    ids.windows(2).all(|w| order(&w[0]) < order(&w[1]))
}

/// The ids pending in the group, each with its owner and delivery count.
fn pending(admin: &mut Admin) -> BTreeMap<String, (String, i64)> {
    admin.xpending_all(STREAM, GROUP).into_iter().map(|(id, owner, _, n)| (id, (owner, n))).collect()
}

/// Every id in the stream (`XRANGE`).
fn stream_ids(admin: &mut Admin) -> BTreeSet<String> {
    admin.xrange(STREAM).into_iter().map(|(id, _)| id).collect()
}

fn union(a: &BTreeSet<String>, b: &BTreeSet<String>) -> BTreeSet<String> {
    a.union(b).cloned().collect()
}

fn minus(a: &BTreeSet<String>, b: &BTreeSet<String>) -> BTreeSet<String> {
    a.difference(b).cloned().collect()
}

/// A kill with 8 entries in hand (`concurrency 8`): 60 entries, the first life handles 20
/// (their acks reach the server), then its next 8 handlers hang and it is killed. Its
/// pending list holds those 8 and what it read but never handed out. A restart under the
/// same name hands out those 8 first (they are the oldest it holds; the first 8 handlers of
/// the second life wait until all 8 run, so that none can free a slot before), drains all it
/// held and nothing else, then reads what is new. Nothing is lost; the only entries handled
/// twice are the 8 in hand at the kill.
pub fn kill_with_entries_in_hand<T: Transport>(t: Target) {
    const QUICK: usize = 20;
    let server = t.start();
    let mut admin = server.admin();
    create_group(&mut admin);
    admin.xadd_n(STREAM, 60, 8);
    let config = t.config("c1").concurrency(IN_HAND as u32);
    let (first, hung, killed) =
        (Log::default(), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
    let (log, hanging, dead) = (first.clone(), hung.clone(), killed.clone());
    let life = T::spawn_concurrent(
        server.endpoint(),
        config.clone(),
        Arc::new(move |e: &Entry| {
            if log.record(e) < QUICK {
                thread::sleep(Duration::from_millis(10));
            } else {
                hanging.fetch_add(1, SeqCst);
                wait_until(SETTLE, || dead.load(SeqCst));
            }
            Verdict::Ack
        }),
    );
    assert!(wait_until(SETTLE, || hung.load(SeqCst) == IN_HAND), "{} hung", hung.load(SeqCst));
    let handled: Vec<String> = first.all().into_iter().map(|h| h.id).collect();
    assert_eq!(handled.len(), QUICK + IN_HAND, "never more than 8 in hand: {handled:?}");
    let quick: BTreeSet<String> = handled[..QUICK].iter().cloned().collect();
    let in_hand: BTreeSet<String> = handled[QUICK..].iter().cloned().collect();
    assert!(
        wait_until(SETTLE, || pending(&mut admin).keys().all(|id| !quick.contains(id))),
        "the quick ones' acks reach the server"
    );
    life.crash(&mut admin, "c1");
    killed.store(true, SeqCst);
    let stats = life.join(SETTLE).expect("killed");
    assert_eq!(stats.new, (QUICK + IN_HAND) as u64, "{stats:?}");

    let held = pending(&mut admin);
    assert!(held.values().all(|(owner, _)| owner == "c1"), "{held:?}");
    let held: BTreeSet<String> = held.into_keys().collect();
    assert!(in_hand.is_subset(&held), "the entries in hand at the kill stay pending: {held:?}");
    assert!(held.is_disjoint(&quick), "{held:?}");
    admin.xadd_n(STREAM, 20, 8);

    let second = Log::default();
    let log = second.clone();
    let life = T::spawn_concurrent(
        server.endpoint(),
        config,
        Arc::new(move |e: &Entry| {
            if log.record(e) < IN_HAND {
                wait_until(SETTLE, || log.len() >= IN_HAND);
            }
            Verdict::Ack
        }),
    );
    let all = stream_ids(&mut admin);
    assert!(
        wait_until(SETTLE, || union(&quick, &second.ids()) == all
            && admin.xpending_count(STREAM, GROUP) == 0),
        "handled {} of {}",
        second.len() + QUICK,
        all.len()
    );
    life.finish();

    let again = second.all();
    let back_first: BTreeSet<String> = again[..IN_HAND].iter().map(|h| h.id.clone()).collect();
    assert_eq!(back_first, in_hand, "the entries in hand at the kill come back first");
    assert_eq!(second.ids_from(Source::Pending), held, "the drain: what c1 held, nothing else");
    // Read once by the first life, once by the drain: a kill gives no count back.
    assert!(again.iter().filter(|h| h.source == Source::Pending).all(|h| h.deliveries == 2), "{again:?}");
    assert_eq!(second.ids_from(Source::New), minus(&minus(&all, &quick), &held), "then what is new");
    assert_eq!(again.len(), held.len() + second.ids_from(Source::New).len(), "each once, none claimed");
    let twice: BTreeSet<String> = first.ids().intersection(&second.ids()).cloned().collect();
    assert_eq!(twice, in_hand, "handled twice: only what was in hand at the kill");
    assert_eq!(union(&first.ids(), &second.ids()), stream_ids(&mut admin), "nothing lost");
    assert_eq!(admin.xpending_count(STREAM, GROUP), 0);
}

/// A stop with 8 entries in hand (`concurrency 8`), their handlers held: the run waits for
/// them, settles them and has their acks confirmed; nothing is handed out after the stop.
/// What was read but never handed out stays pending to the consumer, its delivery count
/// given back (0: as if never read), so that a restart's drain counts it once. The restart
/// handles the rest: each entry handled once in all, the pending list empty.
pub fn stop_with_entries_in_hand<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    create_group(&mut admin);
    admin.xadd_n(STREAM, 60, 8);
    let config = t.config("c1").concurrency(IN_HAND as u32);
    let (first, released) = (Log::default(), Arc::new(AtomicBool::new(false)));
    let (log, go) = (first.clone(), released.clone());
    let life = T::spawn_concurrent(
        server.endpoint(),
        config.clone(),
        Arc::new(move |e: &Entry| {
            log.record(e);
            wait_until(SETTLE, || go.load(SeqCst));
            Verdict::Ack
        }),
    );
    assert!(wait_until(SETTLE, || first.len() == IN_HAND), "{} in hand", first.len());
    life.stop();
    assert!(
        !wait_until(Duration::from_millis(200), || life.is_finished()),
        "returned with 8 handlers running"
    );
    released.store(true, SeqCst);
    let stats = life.join(SETTLE).expect("a clean stop");

    let in_hand = first.ids();
    assert_eq!(first.len(), IN_HAND, "nothing handed out after the stop: {:?}", first.all());
    assert_eq!((stats.new, stats.acked), (IN_HAND as u64, IN_HAND as u64), "{stats:?}");
    let rest = pending(&mut admin);
    assert!(rest.keys().all(|id| !in_hand.contains(id)), "the 8 in hand were acked: {rest:?}");
    assert!(rest.len() >= 50 - IN_HAND, "the rest of the first read of 50 stays pending: {rest:?}");
    // Given back (its count as before the read); where the server releases, released too.
    let owner = if super::redis8::releases(t.flavor) { "" } else { "c1" };
    assert!(rest.values().all(|(o, n)| o == owner && *n == 0), "counts given back: {rest:?}");
    let rest: BTreeSet<String> = rest.into_keys().collect();

    let second = Log::default();
    let log = second.clone();
    let life = T::spawn_concurrent(
        server.endpoint(),
        config,
        Arc::new(move |e: &Entry| {
            log.record(e);
            Verdict::Ack
        }),
    );
    let all = stream_ids(&mut admin);
    assert!(
        wait_until(SETTLE, || union(&in_hand, &second.ids()) == all
            && admin.xpending_count(STREAM, GROUP) == 0),
        "handled {} of {}",
        second.len() + IN_HAND,
        all.len()
    );
    life.finish();
    let again = second.all();
    // Released at the stop where the server can: read again with a claiming read.
    let back = if super::redis8::releases(t.flavor) { Source::Claimed } else { Source::Pending };
    assert_eq!(second.ids_from(back), rest, "the restart has what was read and not handed out");
    assert!(again.iter().filter(|h| h.source == back).all(|h| h.deliveries == 1), "counted once: {again:?}");
    assert_eq!(again.len(), all.len() - IN_HAND, "each entry handled once in all: {again:?}");
    assert!(first.ids().is_disjoint(&second.ids()));
    assert_eq!(admin.xpending_count(STREAM, GROUP), 0);
}

/// A peer reclaims a dead consumer's entries in hand: c1 (`concurrency 8`, `min_idle` 1 s)
/// reads 40 entries, has 8 in hand, and dies (their handlers never settle). c2, started
/// after, reclaims everything c1 held once it is idle past `min_idle`: each entry handled by
/// c2 once, the 8 the only ones handled twice, nothing left pending.
pub fn peer_reclaims_in_hand<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    create_group(&mut admin);
    admin.xadd_n(STREAM, 40, 8);
    let min_idle = Duration::from_secs(1);
    let (dead, killed) = (Log::default(), Arc::new(AtomicBool::new(false)));
    let (log, gone) = (dead.clone(), killed.clone());
    let c1 = T::spawn_concurrent(
        server.endpoint(),
        t.config("c1").concurrency(IN_HAND as u32).min_idle(min_idle),
        Arc::new(move |e: &Entry| {
            log.record(e);
            wait_until(SETTLE, || gone.load(SeqCst));
            Verdict::Ack
        }),
    );
    assert!(wait_until(SETTLE, || dead.len() == IN_HAND), "{} in hand", dead.len());
    c1.crash(&mut admin, "c1");
    killed.store(true, SeqCst);
    c1.join(SETTLE).expect("killed");
    let in_hand = dead.ids();
    assert_eq!(in_hand.len(), IN_HAND);
    let held = pending(&mut admin);
    assert!(held.values().all(|(owner, _)| owner == "c1"), "{held:?}");
    let held: BTreeSet<String> = held.into_keys().collect();
    assert!(in_hand.is_subset(&held), "the entries in hand stay pending to c1: {held:?}");

    let peer = Log::default();
    let log = peer.clone();
    let c2 = T::spawn_concurrent(
        server.endpoint(),
        t.config("c2").concurrency(IN_HAND as u32).min_idle(min_idle),
        Arc::new(move |e: &Entry| {
            log.record(e);
            Verdict::Ack
        }),
    );
    let all = stream_ids(&mut admin);
    assert!(
        wait_until(SETTLE, || peer.ids() == all && admin.xpending_count(STREAM, GROUP) == 0),
        "c2 handled {} of {}",
        peer.ids().len(),
        all.len()
    );
    let stats = c2.finish();
    let took = peer.all();
    assert_eq!(took.len(), all.len(), "each handled by c2 once: {took:?}");
    assert_eq!(peer.ids_from(Source::Claimed), held, "c2 reclaimed what c1 held");
    assert_eq!(peer.ids_from(Source::New), minus(&all, &held), "and read what c1 never had");
    assert!(
        took.iter().filter(|h| in_hand.contains(&h.id)).all(|h| h.deliveries >= 2),
        "the 8 in hand come counted again: {took:?}"
    );
    assert_eq!((stats.claimed, stats.lost_to_peer), (held.len() as u64, 0), "{stats:?}");
    assert!(admin.xpending_consumer(STREAM, GROUP, "c1").is_empty());
    assert_eq!(admin.xpending_count(STREAM, GROUP), 0);
}

/// Key order across a crash, exactly as [`pelican::OrderBy`] promises it: `order_by("k")`,
/// `concurrency 8`, six keys, 60 entries. The first life retries one entry (which frees its
/// key: the next of that key is handed out while it stays pending), handles 20, then its next
/// handlers hang (one per key) and it is killed; 12 entries are added; a restart under the
/// same name handles the rest. In each life, never two of one key at once, and each key's
/// entries in id order (the restart drains its own pending first, in id order, ahead of what
/// is new). Per key, across both lives, the first handlings of the ids are in id order. The
/// only entries handled twice are those in hand at the kill and the one retried.
pub fn key_order_across_restart<T: Transport>(t: Target) {
    const KEYS: [&str; 6] = ["a", "b", "c", "d", "e", "f"];
    const QUICK: usize = 20;
    let server = t.start();
    let mut admin = server.admin();
    create_group(&mut admin);
    let add = |admin: &mut Admin, from: usize, n: usize| -> Vec<String> {
        (from..from + n)
            .map(|i| admin.xadd(STREAM, &[("k", KEYS[i % KEYS.len()]), ("n", &i.to_string())]))
            .collect()
    };
    let ids = add(&mut admin, 0, 60);
    // The first entry of key b is retried; the next of b is ids[1 + 6].
    let retried = ids[1].clone();
    // The retried entry stays pending for the restart's drain (released, it would come back
    // after later entries of its key, as `OrderBy` says).
    let config =
        t.config("c1").concurrency(IN_HAND as u32).order_by("k").on_retry(pelican::OnRetry::StayPending);

    let (first, one_key) = (Log::default(), Arc::new(PerKey::default()));
    let (hung, killed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
    let (log, keys, hanging, dead, retry) =
        (first.clone(), one_key.clone(), hung.clone(), killed.clone(), retried.clone());
    let life = T::spawn_concurrent(
        server.endpoint(),
        config.clone(),
        Arc::new(move |e: &Entry| {
            let n = log.record(e);
            keys.enter(e);
            let verdict = if text(e.id()) == retry {
                Verdict::Retry
            } else if n < QUICK {
                thread::sleep(Duration::from_millis(5));
                Verdict::Ack
            } else {
                hanging.fetch_add(1, SeqCst);
                wait_until(SETTLE, || dead.load(SeqCst));
                Verdict::Ack
            };
            keys.leave(e);
            verdict
        }),
    );
    assert!(wait_until(SETTLE, || hung.load(SeqCst) == KEYS.len()), "{} hung", hung.load(SeqCst));
    let handled: Vec<String> = first.all().into_iter().map(|h| h.id).collect();
    assert_eq!(handled.len(), QUICK + KEYS.len(), "one in hand per key: {handled:?}");
    let in_hand: BTreeSet<String> = handled[QUICK..].iter().cloned().collect();
    let acked: BTreeSet<String> = handled[..QUICK].iter().filter(|id| **id != retried).cloned().collect();
    assert!(
        wait_until(SETTLE, || pending(&mut admin).keys().all(|id| !acked.contains(id))),
        "the acks of the first life reach the server"
    );
    let freed = handled.iter().position(|id| *id == ids[1 + KEYS.len()]);
    assert!(
        freed > handled.iter().position(|id| *id == retried),
        "Retry frees the key: the next of b is handed out while the retried one is pending: {handled:?}"
    );
    life.crash(&mut admin, "c1");
    killed.store(true, SeqCst);
    life.join(SETTLE).expect("killed");
    assert_eq!(one_key.beside(), Vec::<String>::new(), "two of one key at once in the first life");
    let held: BTreeSet<String> = pending(&mut admin).into_keys().collect();
    assert!(in_hand.is_subset(&held) && held.contains(&retried), "{held:?}");
    add(&mut admin, 60, 12);

    let (second, one_key) = (Log::default(), Arc::new(PerKey::default()));
    let (log, keys) = (second.clone(), one_key.clone());
    let life = T::spawn_concurrent(
        server.endpoint(),
        config,
        Arc::new(move |e: &Entry| {
            log.record(e);
            keys.enter(e);
            thread::sleep(Duration::from_millis(2));
            keys.leave(e);
            Verdict::Ack
        }),
    );
    let all = stream_ids(&mut admin);
    assert!(
        wait_until(SETTLE, || union(&acked, &second.ids()) == all
            && admin.xpending_count(STREAM, GROUP) == 0),
        "handled {} of {}",
        acked.len() + second.ids().len(),
        all.len()
    );
    life.finish();

    assert_eq!(one_key.beside(), Vec::<String>::new(), "two of one key at once in the second life");
    let (before, after) = (first.by_key(), second.by_key());
    for key in KEYS {
        let (before, after) = (&before[key], &after[key]);
        assert!(in_id_order(before), "key {key}, first life: {before:?}");
        assert!(in_id_order(after), "key {key}, second life (the drain first, in id order): {after:?}");
        let firsts: Vec<String> =
            before.iter().chain(after.iter().filter(|id| !before.contains(id))).cloned().collect();
        assert!(in_id_order(&firsts), "key {key}, first handlings across the restart: {firsts:?}");
    }
    assert_eq!(second.ids_from(Source::Pending), held, "the drain: what c1 held");
    let twice: BTreeSet<String> = first.ids().intersection(&second.ids()).cloned().collect();
    let expected: BTreeSet<String> = in_hand.iter().chain([&retried]).cloned().collect();
    assert_eq!(twice, expected, "handled twice: the entries in hand at the kill and the retried one");
    assert_eq!(union(&first.ids(), &second.ids()), stream_ids(&mut admin), "nothing lost");
    assert_eq!(admin.xpending_count(STREAM, GROUP), 0);
}

/// A fair start: three consumers with `concurrency 2` (and the default start count, their
/// concurrency) start together on 30 waiting entries, each handler taking 200 ms. Each
/// handles some, none more than half, and every entry is handled once.
///
/// With the suite's long `min_idle` (an hour): reads ask for the start count until a handler
/// is timed, then for about 10 ms of the handlers' work (one entry each here), never what the
/// lease would allow, so the consumer that times a handler first does not take what is left.
pub fn fair_start<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    create_group(&mut admin);
    admin.xadd_n(STREAM, 30, 8);
    let names = ["c1", "c2", "c3"];
    let logs: Vec<Log> = names.iter().map(|_| Log::default()).collect();
    let runs: Vec<_> = names
        .iter()
        .zip(&logs)
        .map(|(name, log)| {
            let mut config = t.config(name).concurrency(2);
            config.start_count = None;
            let log = log.clone();
            T::spawn_concurrent(
                server.endpoint(),
                config,
                Arc::new(move |e: &Entry| {
                    log.record(e);
                    thread::sleep(Duration::from_millis(200));
                    Verdict::Ack
                }),
            )
        })
        .collect();
    let all = stream_ids(&mut admin);
    let handled = || logs.iter().fold(BTreeSet::new(), |ids, log| union(&ids, &log.ids()));
    assert!(
        wait_until(SETTLE, || handled() == all && admin.xpending_count(STREAM, GROUP) == 0),
        "handled {} of {}",
        handled().len(),
        all.len()
    );
    for run in runs {
        run.finish();
    }
    let counts: Vec<usize> = logs.iter().map(Log::len).collect();
    assert_eq!(counts.iter().sum::<usize>(), all.len(), "each entry handled once: {counts:?}");
    assert!(counts.iter().all(|n| *n >= 5 && *n <= all.len() / 2), "none hoards: {counts:?}");
    assert_eq!(admin.xpending_count(STREAM, GROUP), 0);
}
