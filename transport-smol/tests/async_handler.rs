//! Async handlers over `pelican-smol`: handlers that await, stops that wait for them, and
//! several consumers on one executor.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use pelican::{Config, Verdict};
use pelican_smol::Runner;
use pelican_tests::conformance::wait_until;
use pelican_tests::server::{Flavor, Server};
use smol::Timer;

const SETTLE: Duration = Duration::from_secs(10);

fn config(consumer: &str) -> Config {
    // Reads of 10 from the start (not one until a handler is timed): the tests speak of
    // what a batch holds.
    Config::new("s", "g", consumer)
        .count(10)
        .start_count(10)
        .beat(Duration::from_millis(200))
        .min_idle(Duration::from_secs(3600))
        .backoff(Duration::from_millis(20), Duration::from_millis(200))
        .client_name(format!("pelican-{consumer}"))
}

fn server_with_group() -> Server {
    let server = Server::start(Flavor::Valkey81);
    server.admin().call(&["XGROUP", "CREATE", "s", "g", "0", "MKSTREAM"]);
    server
}

/// A handler awaiting a timer per entry consumes everything; all of it acked.
#[test]
fn awaiting_handler_consumes_all() {
    let server = server_with_group();
    let mut admin = server.admin();
    admin.xadd_n("s", 50, 8);
    let runner = Runner::new(server.addr(), config("c1")).unwrap();
    let stop = runner.stop_handle();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    // Any executor will do: here futures-lite's plain `block_on`.
    let thread = thread::spawn(move || {
        smol::future::block_on(runner.run(move |entry| {
            let record = record.clone();
            async move {
                Timer::after(Duration::from_millis(5)).await;
                record.lock().unwrap().push(entry.id_bytes());
                Verdict::Ack
            }
        }))
    });
    assert!(wait_until(SETTLE, || seen.lock().unwrap().len() >= 50));
    stop.stop();
    let stats = thread.join().unwrap().expect("clean stop");
    assert_eq!(seen.lock().unwrap().len(), 50);
    assert_eq!(stats.acked, 50);
    assert_eq!(admin.xpending_count("s", "g"), 0);
}

/// A stop while the handler awaits: the handler finishes, its ack is confirmed, the rest of
/// the batch stays pending.
#[test]
fn stop_waits_for_awaiting_handler() {
    let server = server_with_group();
    let mut admin = server.admin();
    let ids = admin.xadd_n("s", 5, 8);
    let runner = Runner::new(server.addr(), config("c1")).unwrap();
    let stop = runner.stop_handle();
    let started = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(Mutex::new(Vec::new()));
    let (flag, record) = (started.clone(), finished.clone());
    let thread = thread::spawn(move || {
        smol::block_on(runner.run(move |entry| {
            let (flag, record) = (flag.clone(), record.clone());
            async move {
                flag.store(true, Ordering::SeqCst);
                Timer::after(Duration::from_millis(300)).await;
                record.lock().unwrap().push(String::from_utf8(entry.id().to_vec()).unwrap());
                Verdict::Ack
            }
        }))
    });
    assert!(wait_until(SETTLE, || started.load(Ordering::SeqCst)));
    stop.stop();
    let stats = thread.join().unwrap().expect("clean stop");
    let finished = finished.lock().unwrap().clone();
    assert_eq!(finished, vec![ids[0].clone()], "the entry in hand finished, no other started");
    assert_eq!(stats.acked, 1, "its ack was confirmed");
    let pending: Vec<String> = admin.xpending_all("s", "g").into_iter().map(|p| p.0).collect();
    assert_eq!(pending, ids[1..].to_vec(), "the rest of the batch stays pending");
}

/// A stop while parked returns far below the beat.
#[test]
fn stop_while_parked_is_prompt() {
    let server = server_with_group();
    let mut admin = server.admin();
    let runner = Runner::new(server.addr(), config("c1").beat(Duration::from_secs(5))).unwrap();
    let stop = runner.stop_handle();
    let thread = thread::spawn(move || smol::block_on(runner.run(|_| async { Verdict::Ack })));
    assert!(wait_until(SETTLE, || admin.info("clients").contains("blocked_clients:1")), "parked");
    let asked = Instant::now();
    stop.stop();
    thread.join().unwrap().expect("clean stop");
    assert!(asked.elapsed() < Duration::from_millis(500), "stopped after {:?}", asked.elapsed());
}

/// Several consumers as tasks on one executor share the stream: every entry handled by
/// exactly one of them, nothing lost.
#[test]
fn consumers_share_one_executor() {
    let server = server_with_group();
    let mut admin = server.admin();
    let seen: Arc<Mutex<HashMap<String, Vec<usize>>>> = Arc::default();
    let mut runners = Vec::new();
    let mut stops = Vec::new();
    for i in 0..3 {
        let runner = Runner::new(server.addr(), config(&format!("c{i}"))).unwrap();
        stops.push(runner.stop_handle());
        runners.push(runner);
    }
    let record = seen.clone();
    let thread = thread::spawn(move || {
        let ex = smol::Executor::new();
        let tasks: Vec<_> = runners
            .into_iter()
            .enumerate()
            .map(|(i, runner)| {
                let record = record.clone();
                ex.spawn(runner.run(move |entry| {
                    let record = record.clone();
                    async move {
                        Timer::after(Duration::from_millis(1)).await;
                        let id = String::from_utf8(entry.id().to_vec()).unwrap();
                        record.lock().unwrap().entry(id).or_default().push(i);
                        Verdict::Ack
                    }
                }))
            })
            .collect();
        smol::block_on(ex.run(async {
            let mut all = Vec::new();
            for task in tasks {
                all.push(task.await);
            }
            all
        }))
    });
    let mut ids = Vec::new();
    for _ in 0..10 {
        ids.extend(admin.xadd_n("s", 30, 8));
        thread::sleep(Duration::from_millis(10));
    }
    assert!(wait_until(SETTLE, || seen.lock().unwrap().len() >= ids.len()));
    for stop in &stops {
        stop.stop();
    }
    let results = thread.join().unwrap();
    let acked: u64 = results.into_iter().map(|r| r.expect("clean stop").acked).sum();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), ids.len(), "nothing lost");
    assert!(seen.values().all(|by| by.len() == 1), "each entry handled once");
    assert!(ids.iter().all(|id| seen.contains_key(id)));
    assert_eq!(acked, ids.len() as u64);
    assert_eq!(admin.xpending_count("s", "g"), 0);
}

/// `run` resolves a host name without blocking the executor and consumes from it; a name that
/// does not resolve is a `Resolve` error, not a panic or a retry loop — but for a runner made
/// with `Runner::lazy`, whose first connect looks it up: a failed connect, told and retried.
#[test]
fn run_resolves_host_names() {
    let server = server_with_group();
    let mut admin = server.admin();
    admin.xadd_n("s", 3, 8);
    let seen = Arc::new(Mutex::new(0));
    let record = seen.clone();
    let host = format!("localhost:{}", server.port());
    let stats = smol::block_on(async move {
        let runner = Runner::resolve(host.as_str(), config("c1")).await.expect("localhost resolves");
        let stop = runner.stop_handle();
        runner
            .run(move |_| {
                let (record, stop) = (record.clone(), stop.clone());
                async move {
                    let mut seen = record.lock().unwrap();
                    *seen += 1;
                    if *seen == 3 {
                        stop.stop();
                    }
                    Verdict::Ack
                }
            })
            .await
    })
    .expect("clean stop");
    assert_eq!((*seen.lock().unwrap(), stats.acked), (3, 3));
    assert_eq!(admin.xpending_count("s", "g"), 0);

    let failed = smol::block_on(pelican_smol::run("no-such-host.invalid:6379", config("c1"), |_| async {
        Verdict::Ack
    }));
    assert!(matches!(failed, Err(pelican_smol::RunError::Resolve(_))), "{failed:?}");

    // `lazy` looks the name up at the first connect instead: a failed connect, retried.
    let told = Arc::new(Mutex::new(Vec::new()));
    let tell = told.clone();
    let runner = Runner::lazy("no-such-host.invalid:6379", config("c1"))
        .expect("not looked up yet")
        .on_notice(move |notice| tell.lock().unwrap().push(notice.to_string()));
    let stop = runner.stop_handle();
    let thread = thread::spawn(move || smol::block_on(runner.run(|_| async { Verdict::Ack })));
    assert!(wait_until(SETTLE, || told.lock().unwrap().len() >= 2), "{:?}", told.lock().unwrap());
    stop.stop();
    thread.join().unwrap().expect("a clean stop");
    let told = told.lock().unwrap();
    assert!(told.iter().all(|t| t.contains("cannot resolve no-such-host.invalid")), "{told:?}");
}

/// An abandon while the handler awaits drops the handler's future: `run` returns at once and
/// the entry stays pending, unacked, to come again.
#[test]
fn abandon_drops_an_awaiting_handler() {
    let server = server_with_group();
    let mut admin = server.admin();
    let ids = admin.xadd_n("s", 1, 8);
    let runner = Runner::new(server.addr(), config("c1")).unwrap();
    let stop = runner.stop_handle();
    let (started, finished) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let (start, finish) = (started.clone(), finished.clone());
    let thread = thread::spawn(move || {
        smol::block_on(runner.run(move |_| {
            let (start, finish) = (start.clone(), finish.clone());
            async move {
                start.store(true, Ordering::SeqCst);
                Timer::after(Duration::from_secs(30)).await;
                finish.store(true, Ordering::SeqCst);
                Verdict::Ack
            }
        }))
    });
    assert!(wait_until(SETTLE, || started.load(Ordering::SeqCst)));
    stop.stop();
    thread::sleep(Duration::from_millis(100));
    assert!(!thread.is_finished(), "a stop waits for the handler");
    let asked = Instant::now();
    stop.abandon();
    let stats = thread.join().unwrap().expect("clean stop");
    assert!(asked.elapsed() < Duration::from_secs(2), "returned after {:?}", asked.elapsed());
    assert!(!finished.load(Ordering::SeqCst), "the handler's future was dropped");
    assert_eq!((stats.new, stats.acked), (1, 0));
    let pending: Vec<String> = admin.xpending_all("s", "g").into_iter().map(|p| p.0).collect();
    assert_eq!(pending, ids);
}

/// An async handler slower than `min_idle`, with a peer reclaiming every beat: the entry in
/// hand (and those waiting) keep their lease while it awaits, so the peer takes none and
/// nothing is handled twice. On every server, RESP2 and RESP3.
#[test]
fn a_handler_slower_than_min_idle_keeps_its_entries_from_a_peer() {
    let mut threads = Vec::new();
    for flavor in Flavor::ALL {
        for protocol in [pelican::Protocol::Resp2, pelican::Protocol::Resp3] {
            threads.push(thread::spawn(move || slow_handler_with_a_peer(flavor, protocol)));
        }
    }
    for t in threads {
        t.join().expect("every server and protocol");
    }
}

fn slow_handler_with_a_peer(flavor: Flavor, protocol: pelican::Protocol) {
    let server = Server::start(flavor);
    let mut admin = server.admin();
    admin.call(&["XGROUP", "CREATE", "s", "g", "0", "MKSTREAM"]);
    let ids = admin.xadd_n("s", 5, 8);
    let min_idle = Duration::from_millis(600);
    let handled = Arc::new(Mutex::new(Vec::new()));
    let spawn = |name: &'static str, slow: Duration| {
        let config = config(name).min_idle(min_idle).protocol(protocol);
        let runner = Runner::new(server.addr(), config).unwrap();
        let stop = runner.stop_handle();
        let record = handled.clone();
        let thread = thread::spawn(move || {
            smol::block_on(runner.run(move |entry| {
                let record = record.clone();
                async move {
                    // The first entry takes 2.5 × min_idle.
                    if record.lock().unwrap().is_empty() {
                        Timer::after(slow).await;
                    }
                    record.lock().unwrap().push((name, String::from_utf8(entry.id().to_vec()).unwrap()));
                    Verdict::Ack
                }
            }))
        });
        (stop, thread)
    };
    let (stop1, c1) = spawn("c1", min_idle * 5 / 2);
    assert!(wait_until(SETTLE, || admin.xpending_consumer("s", "g", "c1").len() == 5), "c1 read all");
    let (stop2, c2) = spawn("c2", Duration::ZERO);
    assert!(wait_until(SETTLE, || handled.lock().unwrap().len() >= 5 && admin.xpending_count("s", "g") == 0));
    // A few of c2's beats with nothing to take.
    thread::sleep(Duration::from_millis(300));
    stop1.stop();
    stop2.stop();
    let s1 = c1.join().unwrap().expect("c1 stopped cleanly");
    let s2 = c2.join().unwrap().expect("c2 stopped cleanly");
    let handled = handled.lock().unwrap().clone();
    assert_eq!(handled.len(), 5, "{flavor:?} {protocol:?}: each once: {handled:?}");
    assert!(handled.iter().all(|(who, _)| *who == "c1"), "c2 took none: {handled:?}");
    let mut got: Vec<String> = handled.into_iter().map(|(_, id)| id).collect();
    got.sort();
    assert_eq!(got, ids);
    assert!(s1.leases_renewed >= 2, "renewed while the handler awaited: {s1:?}");
    assert_eq!((s1.leases_lost, s1.lost_to_peer, s2.claimed), (0, 0, 0), "{s1:?} {s2:?}");
}
