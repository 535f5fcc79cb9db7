//! `Runner::run_pool` on real servers: many entries in hand at once (`Config::concurrency`),
//! in order per key (`Config::order_by`), stops and abandons with entries in hand, and a
//! handler running longer than `min_idle` keeping its entry (where inline `run` loses it).
//!
//! Every wait is bounded: a test fails, never hangs. Handlers that wait for something wait
//! at most [`PATIENCE`] too.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use pelican::{Config, Entry, Stats, Verdict};
use pelican_mio::{RunError, Runner, StopHandle};
use pelican_tests::admin::Admin;
use pelican_tests::server::{Flavor, Server};

/// The longest any test waits for anything.
const PATIENCE: Duration = Duration::from_secs(20);

const DEFAULT_FLAVOR: Flavor = Flavor::Valkey81;

/// Polls `check` until it holds or [`PATIENCE`] passes; true if it held.
fn wait_until(mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// Polls `check` until it holds, failing the test after [`PATIENCE`].
fn wait_for(what: &str, check: impl FnMut() -> bool) {
    assert!(wait_until(check), "timed out waiting for {what}");
}

/// Runs `flavor_test` on every server at once, one thread each (the handlers mostly sleep).
fn on_every_server(flavor_test: fn(Flavor)) {
    let threads: Vec<_> = Flavor::ALL.into_iter().map(|f| thread::spawn(move || flavor_test(f))).collect();
    for t in threads {
        t.join().expect("every server");
    }
}

fn create_group(admin: &mut Admin) {
    admin.call(&["XGROUP", "CREATE", "s", "g", "0", "MKSTREAM"]);
}

/// A config for tests: short beat and backoff, so that reconnects and stops are quick.
fn config(consumer: &'static str, concurrency: u32) -> Config {
    Config::new("s", "g", consumer)
        .beat(Duration::from_millis(200))
        .backoff(Duration::from_millis(20), Duration::from_millis(200))
        .concurrency(concurrency)
}

type Outcome = mpsc::Receiver<Result<Stats, RunError>>;

/// Runs `runner.run_pool(handler)` on its own thread; the result comes through the receiver.
fn spawn_pool(
    runner: Runner,
    handler: impl Fn(&Entry) -> Verdict + Send + Sync + 'static,
) -> (StopHandle, Outcome) {
    let stop = runner.stop_handle();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(runner.run_pool(handler));
    });
    (stop, rx)
}

/// Runs `runner.run(handler)` (inline) on its own thread.
fn spawn_inline(
    runner: Runner,
    handler: impl FnMut(&Entry) -> Verdict + Send + 'static,
) -> (StopHandle, Outcome) {
    let stop = runner.stop_handle();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(runner.run(handler));
    });
    (stop, rx)
}

/// Stops a run and waits (bounded) for its counters.
fn finish(stop: &StopHandle, rx: &Outcome) -> Stats {
    stop.stop();
    rx.recv_timeout(PATIENCE).expect("the run returned in time").expect("the run stopped cleanly")
}

fn text(id: &[u8]) -> String {
    String::from_utf8_lossy(id).into_owned()
}

/// Sorts ids in stream order (`ms-seq`, numerically).
fn sort_ids(ids: &mut [String]) {
    let key = |id: &String| {
        let (ms, seq) = id.split_once('-').expect("an entry id");
        (ms.parse::<u64>().expect("ms"), seq.parse::<u64>().expect("seq"))
    };
    ids.sort_by_key(key);
}

/// Handlers running at once: counts up on entry, down on the way out, and keeps the peak.
#[derive(Default)]
struct Gauge {
    running: AtomicUsize,
    peak: AtomicUsize,
}

impl Gauge {
    fn enter(&self) -> usize {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        now
    }

    fn leave(&self) {
        self.running.fetch_sub(1, Ordering::SeqCst);
    }

    fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }
}

// ---- concurrency ------------------------------------------------------------------------------

/// Concurrency 8, handlers sleeping 50 ms: 8 run at once (the first 8 wait, bounded, until
/// all 8 are running, which proves it without a race), never more; every entry is handled
/// once and acked.
#[test]
fn run_pool_runs_up_to_concurrency_handlers_at_once() {
    on_every_server(pool_of_eight);
}

fn pool_of_eight(flavor: Flavor) {
    const TOTAL: usize = 200;
    let server = Server::start(flavor);
    let mut admin = server.admin();
    create_group(&mut admin);
    let ids = admin.xadd_n("s", TOTAL, 4);

    let gauge = Arc::new(Gauge::default());
    let handled = Arc::new(Mutex::new(Vec::new()));
    let started = Arc::new(AtomicUsize::new(0));
    let runner = Runner::new(server.addr(), config("c1", 8)).unwrap();
    let (g, seen, first) = (gauge.clone(), handled.clone(), started.clone());
    let (stop, rx) = spawn_pool(runner, move |entry| {
        g.enter();
        seen.lock().unwrap().push(text(entry.id()));
        if first.fetch_add(1, Ordering::SeqCst) < 8 {
            wait_until(|| g.peak() >= 8);
        }
        thread::sleep(Duration::from_millis(50));
        g.leave();
        Verdict::Ack
    });
    wait_for("every entry handled", || handled.lock().unwrap().len() >= TOTAL);
    wait_for("every ack confirmed", || admin.xpending_count("s", "g") == 0);
    let stats = finish(&stop, &rx);

    assert_eq!(gauge.peak(), 8, "{flavor:?}: 8 at once, never more");
    let mut handled = handled.lock().unwrap().clone();
    assert_eq!(handled.len(), TOTAL, "{flavor:?}: each once");
    sort_ids(&mut handled);
    assert_eq!(handled, ids, "{flavor:?}: every entry");
    assert_eq!((stats.new, stats.acked, stats.lost_to_peer), (TOTAL as u64, TOTAL as u64, 0), "{flavor:?}");
    assert_eq!(admin.xpending_count("s", "g"), 0, "{flavor:?}");
}

/// With `order_by("k")` and three keys, concurrency 8: never two entries of one key at once,
/// each key's entries handled in id order, the three keys side by side (the first three
/// handlers wait, bounded, until three run at once).
#[test]
fn order_by_handles_each_key_one_at_a_time_in_order() {
    on_every_server(ordered_by_key);
}

/// Per key: its handlers running now, and the ids handed to them so far.
type PerKey = BTreeMap<String, (usize, Vec<String>)>;

fn ordered_by_key(flavor: Flavor) {
    const PER_KEY: usize = 20;
    const KEYS: [&str; 3] = ["a", "b", "c"];
    let server = Server::start(flavor);
    let mut admin = server.admin();
    create_group(&mut admin);
    let mut expected: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for i in 0..PER_KEY * KEYS.len() {
        let key = KEYS[i % KEYS.len()];
        let id = admin.xadd("s", &[("k", key), ("n", &i.to_string())]);
        expected.entry(key.to_string()).or_default().push(id);
    }

    let gauge = Arc::new(Gauge::default());
    let per_key: Arc<Mutex<PerKey>> = Arc::default();
    let twins = Arc::new(Mutex::new(Vec::new()));
    let started = Arc::new(AtomicUsize::new(0));
    let runner = Runner::new(server.addr(), config("c1", 8).order_by("k")).unwrap();
    let (g, keys, overlap, first) = (gauge.clone(), per_key.clone(), twins.clone(), started.clone());
    let (stop, rx) = spawn_pool(runner, move |entry| {
        let key = text(entry.field(b"k").unwrap_or_default());
        {
            let mut keys = keys.lock().unwrap();
            let (running, order) = keys.entry(key.clone()).or_default();
            *running += 1;
            if *running > 1 {
                overlap.lock().unwrap().push(text(entry.id()));
            }
            order.push(text(entry.id()));
        }
        g.enter();
        if first.fetch_add(1, Ordering::SeqCst) < 3 {
            wait_until(|| g.peak() >= 3);
        }
        thread::sleep(Duration::from_millis(10));
        g.leave();
        keys.lock().unwrap().get_mut(&key).expect("entered").0 -= 1;
        Verdict::Ack
    });
    let total = PER_KEY * KEYS.len();
    wait_for("every entry handled", || {
        per_key.lock().unwrap().values().map(|(_, order)| order.len()).sum::<usize>() >= total
    });
    wait_for("every ack confirmed", || admin.xpending_count("s", "g") == 0);
    let stats = finish(&stop, &rx);

    assert_eq!(*twins.lock().unwrap(), Vec::<String>::new(), "{flavor:?}: two of one key at once");
    let seen: BTreeMap<String, Vec<String>> =
        per_key.lock().unwrap().iter().map(|(k, (_, order))| (k.clone(), order.clone())).collect();
    assert_eq!(seen, expected, "{flavor:?}: each key's entries once, in id order");
    assert_eq!(gauge.peak(), 3, "{flavor:?}: the three keys side by side, no more");
    assert_eq!(stats.acked, total as u64, "{flavor:?}");
}

// ---- stop and abandon -------------------------------------------------------------------------

/// What [`eight_held`] started: a pool whose 8 handlers are running and held.
struct Held {
    server: Server,
    admin: Admin,
    ids: Vec<String>,
    handled: Arc<Mutex<Vec<String>>>,
    release: Arc<AtomicBool>,
    stop: StopHandle,
    rx: Outcome,
}

/// 100 entries, a pool of 8 whose handlers hold their entries until released (bounded):
/// returns once 8 are running.
fn eight_held(flavor: Flavor) -> Held {
    let server = Server::start(flavor);
    let mut admin = server.admin();
    create_group(&mut admin);
    let ids = admin.xadd_n("s", 100, 4);
    let gauge = Arc::new(Gauge::default());
    let handled = Arc::new(Mutex::new(Vec::new()));
    let release = Arc::new(AtomicBool::new(false));
    let runner = Runner::new(server.addr(), config("c1", 8)).unwrap();
    let (g, seen, go) = (gauge.clone(), handled.clone(), release.clone());
    let (stop, rx) = spawn_pool(runner, move |entry| {
        g.enter();
        seen.lock().unwrap().push(text(entry.id()));
        wait_until(|| go.load(Ordering::SeqCst));
        g.leave();
        Verdict::Ack
    });
    wait_for("8 handlers running", || gauge.running() == 8);
    Held { server, admin, ids, handled, release, stop, rx }
}

/// A stop while 8 entries are in hand: the run waits for their handlers, settles them, has
/// their acks confirmed and returns; nothing is handed out after the stop. What was read
/// but not handed out stays pending, and a restart hands out exactly that: in the end every
/// entry was handled once and the pending list is empty.
#[test]
fn a_stop_with_eight_in_hand_lets_them_finish_and_hands_out_nothing_more() {
    let Held { server, mut admin, ids, handled, release, stop, rx } = eight_held(DEFAULT_FLAVOR);
    stop.stop();
    // The handlers are held: the run cannot have returned (nothing here measures speed).
    thread::sleep(Duration::from_millis(300));
    assert!(rx.try_recv().is_err(), "returned with handlers running");
    release.store(true, Ordering::SeqCst);
    let stats = rx.recv_timeout(PATIENCE).expect("returned once they finished").expect("stopped cleanly");

    let first: Vec<String> = handled.lock().unwrap().clone();
    assert_eq!(first.len(), 8, "nothing handed out after the stop: {first:?}");
    assert_eq!((stats.new, stats.acked), (8, 8), "{stats:?}");
    let pending: HashSet<String> = admin.xpending_all("s", "g").into_iter().map(|p| p.0).collect();
    assert!(first.iter().all(|id| !pending.contains(id)), "the 8 in hand were acked");

    // The rest, handed out to the same consumer's drain after a restart.
    let again = Arc::new(Mutex::new(Vec::new()));
    let seen = again.clone();
    let runner = Runner::new(server.addr(), config("c1", 8)).unwrap();
    let (stop, rx) = spawn_pool(runner, move |entry| {
        seen.lock().unwrap().push(text(entry.id()));
        Verdict::Ack
    });
    wait_for("the rest handled", || first.len() + again.lock().unwrap().len() >= ids.len());
    wait_for("every ack confirmed", || admin.xpending_count("s", "g") == 0);
    finish(&stop, &rx);
    let mut all: Vec<String> = first.into_iter().chain(again.lock().unwrap().iter().cloned()).collect();
    sort_ids(&mut all);
    assert_eq!(all, ids, "each entry handled once");
}

/// An abandon while 8 entries are in hand returns once their handlers return (they cannot
/// be interrupted); their verdicts are not sent, so all 8 stay pending.
#[test]
fn an_abandon_with_eight_in_hand_returns_once_they_return_and_leaves_them_pending() {
    let Held { server: _server, mut admin, handled, release, stop, rx, .. } = eight_held(DEFAULT_FLAVOR);
    stop.abandon();
    thread::sleep(Duration::from_millis(300));
    assert!(rx.try_recv().is_err(), "returned with handlers running");
    release.store(true, Ordering::SeqCst);
    let stats = rx.recv_timeout(PATIENCE).expect("returned once they returned").expect("abandoned cleanly");

    let handled = handled.lock().unwrap().clone();
    assert_eq!(handled.len(), 8, "{handled:?}");
    assert_eq!(stats.acked, 0, "{stats:?}");
    let pending: HashSet<String> = admin.xpending_all("s", "g").into_iter().map(|p| p.0).collect();
    assert!(handled.iter().all(|id| pending.contains(id)), "the 8 in hand stay pending");
}

// ---- a long handler and a peer ----------------------------------------------------------------

/// A handler running 2.5 × `min_idle` under `run_pool` keeps its entry: the pool's thread
/// renews its lease meanwhile, and a peer reclaiming every beat, started while it runs,
/// takes nothing.
#[test]
fn run_pool_keeps_a_long_handlers_entry_from_a_peer() {
    on_every_server(|flavor| {
        let (stats, peer_took) = long_handler_beside_a_peer(flavor, true);
        assert_eq!(peer_took, Vec::<String>::new(), "{flavor:?}: the peer took it");
        assert_eq!((stats.acked, stats.leases_lost, stats.lost_to_peer), (1, 0, 0), "{flavor:?}: {stats:?}");
        assert!(stats.leases_renewed >= 1, "{flavor:?}: {stats:?}");
    });
}

/// The same handler under inline `run` loses its entry: nothing renews the lease while it
/// runs, the peer reclaims the entry and handles it too, and the late `XACK` counts 0.
#[test]
fn inline_run_loses_a_long_handlers_entry_to_a_peer() {
    on_every_server(|flavor| {
        let (stats, peer_took) = long_handler_beside_a_peer(flavor, false);
        assert_eq!(peer_took.len(), 1, "{flavor:?}: the peer took it");
        assert_eq!(stats.lost_to_peer, 1, "{flavor:?}: {stats:?}");
    });
}

/// One entry, a handler (on `c1`, under `run_pool` or `run`) that takes 2.5 × `min_idle`,
/// and a peer (`c2`) started while it runs. Returns c1's counters and what the peer handled.
/// Inline, the handler also waits (bounded) for the peer to have handled the entry, so the
/// outcome does not hang on when the peer's reclaim comes.
fn long_handler_beside_a_peer(flavor: Flavor, pool: bool) -> (Stats, Vec<String>) {
    let server = Server::start(flavor);
    let mut admin = server.admin();
    create_group(&mut admin);
    let ids = admin.xadd_n("s", 1, 8);
    let min_idle = Duration::from_millis(600);

    let peer_took = Arc::new(Mutex::new(Vec::new()));
    let (started_tx, started) = mpsc::channel();
    let started_tx = Mutex::new(started_tx);
    let watched = peer_took.clone();
    let handler = move |_: &Entry| {
        let _ = started_tx.lock().unwrap().send(());
        thread::sleep(min_idle * 5 / 2);
        if !pool {
            wait_until(|| !watched.lock().unwrap().is_empty());
        }
        Verdict::Ack
    };
    let runner = Runner::new(server.addr(), config("c1", 1).min_idle(min_idle)).unwrap();
    let (stop, rx) = if pool { spawn_pool(runner, handler) } else { spawn_inline(runner, handler) };
    started.recv_timeout(PATIENCE).expect("the handler started");

    let peer = Runner::new(server.addr(), config("c2", 1).min_idle(min_idle)).unwrap();
    let record = peer_took.clone();
    let (peer_stop, peer_rx) = spawn_inline(peer, move |entry| {
        record.lock().unwrap().push(text(entry.id()));
        Verdict::Ack
    });
    let c1_stats = |rx: &Outcome| rx.recv_timeout(PATIENCE).expect("c1 returned").expect("c1 stopped");
    // c1's handler returns, its ack is sent (and counted, or found to count 0).
    wait_for("c1's verdict settled", || admin.xpending_count("s", "g") == 0);
    stop.stop();
    let stats = c1_stats(&rx);
    finish(&peer_stop, &peer_rx);
    let took = peer_took.lock().unwrap().clone();
    assert!(took.iter().all(|id| ids.contains(id)), "{took:?}");
    (stats, took)
}
