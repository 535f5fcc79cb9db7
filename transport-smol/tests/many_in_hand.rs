//! Many entries in hand over `pelican-smol` (`Config::concurrency`), on Redis 6.2, Redis 7.0
//! and Valkey 8.1: how many handlers run at once, one key at a time with `order_by`, a stop
//! and an abandon with entries in hand.
//!
//! Each runner runs on its test's thread beside a control future, and its handlers borrow
//! the test's locals (`let seen = &seen;`): no `Arc`, no `'static`.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use pelican::{Config, Verdict};
use pelican_smol::Runner;
use pelican_tests::server::{Flavor, Server};
use smol::{future, Timer};

/// The longest a run (or a wait inside one) may take before the test fails.
const LIMIT: Duration = Duration::from_secs(20);

fn config(concurrency: u32) -> Config {
    Config::new("s", "g", "c1")
        .count(50)
        .concurrency(concurrency)
        .beat(Duration::from_millis(200))
        .min_idle(Duration::from_secs(3600))
        .backoff(Duration::from_millis(20), Duration::from_millis(200))
        .client_name("pelican-c1")
}

fn server_with_group(flavor: Flavor) -> Server {
    let server = Server::start(flavor);
    server.admin().call(&["XGROUP", "CREATE", "s", "g", "0", "MKSTREAM"]);
    server
}

/// Runs `scenario` on every server at once, each on its own thread.
fn on_every_server(scenario: fn(Flavor)) {
    let threads: Vec<_> =
        Flavor::ALL.into_iter().map(|flavor| thread::spawn(move || scenario(flavor))).collect();
    for (flavor, thread) in Flavor::ALL.into_iter().zip(threads) {
        if thread.join().is_err() {
            panic!("failed on {}", flavor.name());
        }
    }
}

/// Runs `run` beside `control` on this thread, the whole bounded by [`LIMIT`]: past it the
/// run is dropped (its entries stay pending) and the test fails.
fn run_beside<T>(run: impl Future<Output = T>, control: impl Future<Output = ()>) -> T {
    smol::block_on(future::or(async { Some(future::zip(run, control).await.0) }, async {
        Timer::after(LIMIT).await;
        None
    }))
    .unwrap_or_else(|| panic!("the run did not end within {LIMIT:?}"))
}

/// Resolves once `cond` holds; fails the test if it does not within [`LIMIT`].
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + LIMIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        Timer::after(Duration::from_millis(5)).await;
    }
}

fn pending(server: &Server) -> BTreeSet<String> {
    server.admin().xpending_all("s", "g").into_iter().map(|p| p.0).collect()
}

fn id_of(entry: &pelican::Entry) -> String {
    String::from_utf8_lossy(entry.id()).into_owned()
}

/// Counts the handlers running at once and the most ever seen.
#[derive(Default)]
struct Gauge {
    now: AtomicUsize,
    most: AtomicUsize,
}

impl Gauge {
    fn enter(&self) {
        let now = self.now.fetch_add(1, SeqCst) + 1;
        self.most.fetch_max(now, SeqCst);
    }

    fn leave(&self) {
        self.now.fetch_sub(1, SeqCst);
    }
}

/// With concurrency 8 and handlers that each await 50 ms, 8 run at once and never more;
/// every entry is handled once and acked.
#[test]
fn eight_handlers_run_at_once_and_never_more() {
    on_every_server(eight_at_once);
}

fn eight_at_once(flavor: Flavor) {
    let server = server_with_group(flavor);
    let ids = server.admin().xadd_n("s", 160, 8);
    let runner = Runner::new(server.addr(), config(8)).unwrap();
    let stop = runner.stop_handle();
    let gauge = Gauge::default();
    let seen = Mutex::new(Vec::new());
    let (gauge, seen_ref) = (&gauge, &seen);
    let stats = run_beside(
        runner.run(|entry| async move {
            gauge.enter();
            Timer::after(Duration::from_millis(50)).await;
            gauge.leave();
            seen_ref.lock().unwrap().push(id_of(&entry));
            Verdict::Ack
        }),
        async {
            until("every entry handled", || seen.lock().unwrap().len() >= ids.len()).await;
            stop.stop();
        },
    )
    .expect("a clean stop");
    let seen = seen.into_inner().unwrap();
    let distinct: BTreeSet<&String> = seen.iter().collect();
    assert_eq!((seen.len(), distinct.len()), (ids.len(), ids.len()), "{flavor:?}: each handled once");
    assert!(ids.iter().all(|id| distinct.contains(id)), "{flavor:?}: every entry handled");
    assert_eq!(gauge.most.load(SeqCst), 8, "{flavor:?}: 8 at once, never more");
    assert_eq!((stats.new, stats.acked), (160, 160), "{flavor:?}: {stats:?}");
    assert!(pending(&server).is_empty(), "{flavor:?}: every ack confirmed");
}

/// With `order_by("k")` and entries of 3 keys, two entries of one key never run at once,
/// each key's entries are handled in id order, and the keys run beside each other.
#[test]
fn one_entry_per_key_at_once_in_id_order() {
    on_every_server(by_key);
}

fn by_key(flavor: Flavor) {
    let server = server_with_group(flavor);
    let mut admin = server.admin();
    let keys = ["a", "b", "c"];
    let mut ids_of: HashMap<&str, Vec<String>> = HashMap::new();
    for i in 0..90 {
        let key = keys[i % 3];
        let id = admin.xadd("s", &[("k", key), ("n", &i.to_string())]);
        ids_of.entry(key).or_default().push(id);
    }
    let runner = Runner::new(server.addr(), config(8).order_by("k")).unwrap();
    let stop = runner.stop_handle();
    let gauge = Gauge::default();
    let running: Mutex<BTreeSet<String>> = Mutex::default();
    let twice = AtomicBool::new(false);
    let handled: Mutex<HashMap<String, Vec<String>>> = Mutex::default();
    let count = AtomicUsize::new(0);
    let (gauge, running, twice, handled, count_ref) = (&gauge, &running, &twice, &handled, &count);
    let stats = run_beside(
        runner.run(|entry| async move {
            let key = String::from_utf8_lossy(entry.field(b"k").unwrap_or_default()).into_owned();
            gauge.enter();
            if !running.lock().unwrap().insert(key.clone()) {
                twice.store(true, SeqCst);
            }
            Timer::after(Duration::from_millis(10)).await;
            running.lock().unwrap().remove(&key);
            gauge.leave();
            handled.lock().unwrap().entry(key).or_default().push(id_of(&entry));
            count_ref.fetch_add(1, SeqCst);
            Verdict::Ack
        }),
        async {
            until("every entry handled", || count.load(SeqCst) >= 90).await;
            stop.stop();
        },
    )
    .expect("a clean stop");
    assert!(!twice.load(SeqCst), "{flavor:?}: two entries of one key ran at once");
    let handled = handled.lock().unwrap();
    for key in keys {
        assert_eq!(handled.get(key), ids_of.get(key), "{flavor:?}: key {key} handled once each, in id order");
    }
    assert_eq!(gauge.most.load(SeqCst), 3, "{flavor:?}: the three keys ran beside each other");
    assert_eq!(stats.acked, 90, "{flavor:?}: {stats:?}");
    assert!(pending(&server).is_empty(), "{flavor:?}: every ack confirmed");
}

/// A stop while 8 are in hand: nothing more is handed out, the 8 finish, their acks are
/// confirmed, then `run` returns; the entries never handed out are not acked.
#[test]
fn a_stop_with_eight_in_hand_lets_them_finish() {
    on_every_server(stop_with_eight);
}

fn stop_with_eight(flavor: Flavor) {
    let server = server_with_group(flavor);
    let ids = server.admin().xadd_n("s", 100, 8);
    let runner = Runner::new(server.addr(), config(8)).unwrap();
    let stop = runner.stop_handle();
    let started = Mutex::new(Vec::new());
    let finished = Mutex::new(Vec::new());
    let (started_ref, finished_ref) = (&started, &finished);
    let stats = run_beside(
        runner.run(|entry| async move {
            started_ref.lock().unwrap().push(id_of(&entry));
            Timer::after(Duration::from_millis(300)).await;
            finished_ref.lock().unwrap().push(id_of(&entry));
            Verdict::Ack
        }),
        async {
            until("8 in hand", || started.lock().unwrap().len() >= 8).await;
            stop.stop();
        },
    )
    .expect("a clean stop");
    let started: BTreeSet<String> = started.into_inner().unwrap().into_iter().collect();
    let finished: BTreeSet<String> = finished.into_inner().unwrap().into_iter().collect();
    assert_eq!(started.len(), 8, "{flavor:?}: nothing handed out after the stop: {started:?}");
    assert_eq!(finished, started, "{flavor:?}: the 8 in hand finished");
    assert_eq!(stats.acked, 8, "{flavor:?}: their acks were confirmed: {stats:?}");
    let pending = pending(&server);
    assert!(pending.is_disjoint(&started), "{flavor:?}: no handled entry is pending: {pending:?}");
    let never: BTreeSet<String> = ids.into_iter().filter(|id| !started.contains(id)).collect();
    assert!(pending.is_subset(&never), "{flavor:?}: what stays pending was never handed out");
}

/// An abandon with 8 in hand drops their futures: `run` returns without waiting for them
/// (they would await three times the run's bound), and those entries stay pending, unacked.
#[test]
fn an_abandon_with_eight_in_hand_drops_them() {
    on_every_server(abandon_with_eight);
}

fn abandon_with_eight(flavor: Flavor) {
    let server = server_with_group(flavor);
    server.admin().xadd_n("s", 100, 8);
    let runner = Runner::new(server.addr(), config(8)).unwrap();
    let stop = runner.stop_handle();
    let started = Mutex::new(Vec::new());
    let finished = AtomicUsize::new(0);
    let (started_ref, finished_ref) = (&started, &finished);
    let stats = run_beside(
        runner.run(|entry| async move {
            started_ref.lock().unwrap().push(id_of(&entry));
            // Far past LIMIT: only an abandon ends the run in time.
            Timer::after(LIMIT * 3).await;
            finished_ref.fetch_add(1, SeqCst);
            Verdict::Ack
        }),
        async {
            until("8 in hand", || started.lock().unwrap().len() >= 8).await;
            stop.abandon();
        },
    )
    .expect("an abandon ends cleanly");
    assert_eq!(finished.load(SeqCst), 0, "{flavor:?}: the futures were dropped");
    assert_eq!((stats.new, stats.acked), (8, 0), "{flavor:?}: {stats:?}");
    let started: BTreeSet<String> = started.into_inner().unwrap().into_iter().collect();
    assert_eq!(started.len(), 8);
    assert!(started.is_subset(&pending(&server)), "{flavor:?}: the 8 stay pending");
}
