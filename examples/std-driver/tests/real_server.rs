//! The std driver against the real servers (Redis 6.2, 7.0, 8.10, Valkey 8.1): a backlog
//! handled once each, a connection killed under it (it reconnects and drains), a stop while
//! parked (rule 1: the dropped connection is closed and the stop finishes on a new one, the
//! consumer leaving the group), a crash and a restart under the same name that gets its
//! pending entries back at once; and a backlog beside `pelican-mio`'s `Runner`.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use pelican::{Config, Verdict};
use pelican_tests::server::{Flavor, Server};

const WAIT: Duration = Duration::from_secs(30);

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let end = Instant::now() + WAIT;
    while !done() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(5));
    }
}

fn config(consumer: &str) -> Config {
    Config::new("s", "g", consumer)
        .create_group("0")
        .beat(Duration::from_secs(5))
        .backoff(Duration::from_millis(20), Duration::from_millis(200))
        .client_name(format!("driver-{consumer}"))
}

/// A driver on its own thread: its stop flag, the ids it handled, its thread.
struct Running {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<String>>>,
    thread: thread::JoinHandle<Result<pelican::Stats, String>>,
}

fn spawn(server: &Server, config: Config) -> Running {
    let (stop, seen) = (Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(Vec::new())));
    let (flag, sink, addr) = (stop.clone(), seen.clone(), server.addr());
    let thread = thread::spawn(move || {
        let handle = |e: &pelican::Entry| {
            sink.lock().unwrap().push(String::from_utf8_lossy(e.id()).into_owned());
            Verdict::Ack
        };
        pelican_std_driver::run(addr, config, handle, |_| {}, &flag).map_err(|e| e.to_string())
    });
    Running { stop, seen, thread }
}

impl Running {
    fn handled(&self) -> BTreeSet<String> {
        self.seen.lock().unwrap().iter().cloned().collect()
    }

    /// Raises the stop flag and waits (bounded) for the clean stop.
    fn stop(self, within: Duration) -> pelican::Stats {
        let asked = Instant::now();
        self.stop.store(true, Ordering::SeqCst);
        wait_until("the stop", || self.thread.is_finished());
        assert!(asked.elapsed() < within, "stopped after {:?}", asked.elapsed());
        self.thread.join().expect("the driver thread").expect("a clean stop")
    }
}

fn story(flavor: Flavor) {
    let server = Server::start(flavor);
    let mut admin = server.admin();
    let ids: BTreeSet<String> = admin.xadd_n("s", 10_000, 16).into_iter().collect();
    let driver = spawn(&server, config("c1"));
    wait_until("half the backlog", || driver.handled().len() >= 5_000);
    // The connection killed under it: it reconnects, drains what it held, goes on.
    assert!(admin.client_kill_by_name("driver-c1") >= 1, "{flavor:?}: connected");
    wait_until("the whole backlog", || driver.handled() == ids);
    wait_until("every ack confirmed", || admin.xpending_count("s", "g") == 0);
    // Parked on a 5 s read: the stop drops that connection and finishes on a new one, at once.
    thread::sleep(Duration::from_millis(100));
    let stats = driver.stop(Duration::from_secs(2));
    assert!(stats.reconnects >= 1, "{flavor:?}: {stats:?}");
    // Acks whose answers the kill cut are sent again and counted by the server as done.
    assert_eq!(stats.acked + stats.acks_unmatched, 10_000, "{flavor:?}: {stats:?}");
    assert!(admin.consumer_names("s", "g").is_empty(), "{flavor:?}: it left the group");

    // A crash: handled 10 of 50 new ones, then its thread abandoned with the rest held (the
    // connection cut, as kill -9 leaves it). A restart under the name gets them at once.
    let more: BTreeSet<String> = admin.xadd_n("s", 50, 16).into_iter().collect();
    let crashed = Arc::new(AtomicBool::new(false));
    let (held, cut) = (Arc::new(Mutex::new(Vec::new())), crashed.clone());
    let sink = held.clone();
    let addr = server.addr();
    let crash = thread::spawn(move || {
        let stop = AtomicBool::new(false);
        let handle = |e: &pelican::Entry| {
            let mut seen = sink.lock().unwrap();
            seen.push(String::from_utf8_lossy(e.id()).into_owned());
            if seen.len() == 10 {
                drop(seen);
                wait_until("the crash", || cut.load(Ordering::SeqCst));
                // The process dies here, the entry in hand and the rest of its read held.
                panic!("crashed, as kill -9 leaves it");
            }
            Verdict::Ack
        };
        // All 50 in its first read (not a read grown with the handlers' pace, which a loaded
        // machine slows): the crash then holds the 40 it did not handle.
        let config = config("c2").count(50).start_count(50);
        let _ = pelican_std_driver::run(addr, config, handle, |_| {}, &stop);
    });
    wait_until("ten handled", || held.lock().unwrap().len() == 10);
    assert!(admin.client_kill_by_name("driver-c2") >= 1);
    let pending = admin.xpending_consumer("s", "g", "c2").len();
    assert!(pending >= 40, "{flavor:?}: the rest of its batch stays pending ({pending})");
    let started = Instant::now();
    let again = spawn(&server, config("c2"));
    let first: BTreeSet<String> = held.lock().unwrap().iter().cloned().collect();
    wait_until("the pending entries, at once", || again.handled().union(&first).count() >= more.len());
    assert!(started.elapsed() < Duration::from_secs(5), "no idle wait: {:?}", started.elapsed());
    crashed.store(true, Ordering::SeqCst);
    assert!(crash.join().is_err(), "the first life died in its handler");
    again.stop(Duration::from_secs(2));
    assert_eq!(admin.xpending_count("s", "g"), 0, "{flavor:?}");
}

#[test]
fn the_std_driver_consumes_reconnects_stops_and_recovers_on_every_server() {
    let runs: Vec<_> = Flavor::ALL.into_iter().map(|f| (f, thread::spawn(move || story(f)))).collect();
    let failed: Vec<Flavor> = runs.into_iter().filter_map(|(f, t)| t.join().is_err().then_some(f)).collect();
    assert!(failed.is_empty(), "failed on {failed:?}");
}

/// 100,000 entries through the std driver and through `pelican-mio`'s `Runner`, one after
/// the other on one server: both handle each once (the times are printed, not asserted:
/// speed is the benchmarks' to measure).
#[test]
fn a_backlog_beside_the_mio_runner() {
    let server = Server::start(Flavor::Redis70);
    let mut admin = server.admin();
    admin.xadd_n("s", 100_000, 16);
    for (group, mio) in [("std", false), ("mio", true)] {
        admin.call(&["XGROUP", "CREATE", "s", group, "0"]);
        let config = Config::new("s", group, "c").count(500).no_client_name();
        let started = Instant::now();
        let stats = if mio {
            let runner = pelican_mio::Runner::new(server.addr(), config).unwrap();
            let stop = runner.stop_handle();
            let mut n = 0;
            let stats = runner.run(move |_| {
                n += 1;
                if n == 100_000 {
                    stop.stop();
                }
                Verdict::Ack
            });
            stats.expect("a clean stop")
        } else {
            let stop = AtomicBool::new(false);
            let mut n = 0;
            let handle = |_: &pelican::Entry| {
                n += 1;
                if n == 100_000 {
                    stop.store(true, Ordering::SeqCst);
                }
                Verdict::Ack
            };
            pelican_std_driver::run(server.addr(), config, handle, |_| {}, &stop).expect("a clean stop")
        };
        eprintln!("{group}: 100,000 entries in {:?}", started.elapsed());
        assert_eq!(stats.acked, 100_000, "{group}");
        assert_eq!(admin.xpending_count("s", group), 0, "{group}");
    }
}
