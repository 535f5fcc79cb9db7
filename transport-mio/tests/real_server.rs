//! `pelican-mio` against real servers started on loopback ports.
//!
//! The server binaries are expected in `<workspace>/.servers/` (see `scripts/`), or in the
//! directory named by `PELICAN_SERVERS_DIR`. Every wait is bounded: a test fails, never hangs.

use std::collections::HashSet;
use std::net::{SocketAddr, TcpListener};
use std::process::Command;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use mio::{Events, Poll, Token};
use pelican::{Config, Consumer, Entry, Stats, Verdict};
use pelican_mio::{Driver, RunError, Runner, Status, StopHandle};
use pelican_tests::admin::Admin;
use pelican_tests::server::{Flavor, Options, Server};

/// The longest any test waits for anything.
const PATIENCE: Duration = Duration::from_secs(20);

const DEFAULT_FLAVOR: Flavor = Flavor::Valkey81;

/// A loopback port nothing listens on (for tests that need no server).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn create_group(admin: &mut Admin, stream: &str, group: &str) {
    admin.call(&["XGROUP", "CREATE", stream, group, "0", "MKSTREAM"]);
}

/// Ids pending in `group`.
fn pending_ids(admin: &mut Admin, stream: &str, group: &str) -> Vec<String> {
    admin.xpending_all(stream, group).into_iter().map(|(id, ..)| id).collect()
}

/// Whether the client called `name` is parked: blocked (`b` flag) in `XREADGROUP`, per
/// `CLIENT LIST` (the shared admin client only reports client ids).
fn parked_in_xreadgroup(admin: &mut Admin, name: &str) -> bool {
    let list = admin.call(&["CLIENT", "LIST"]).as_text().expect("CLIENT LIST text");
    list.lines().any(|line| {
        let field = |key: &str| line.split(' ').find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='));
        field("name") == Some(name)
            && field("cmd") == Some("xreadgroup")
            && field("flags").is_some_and(|f| f.contains('b'))
    })
}

/// Polls `check` until it holds, failing the test after [`PATIENCE`].
fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `runner` on its own thread; the result comes through the receiver.
fn spawn_run(
    runner: Runner,
    handler: impl FnMut(&Entry) -> Verdict + Send + 'static,
) -> mpsc::Receiver<Result<Stats, RunError>> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(runner.run(handler));
    });
    rx
}

/// Waits (bounded) for a run's result.
fn finish(
    rx: &mpsc::Receiver<Result<Stats, RunError>>,
    stop: Option<&StopHandle>,
) -> Result<Stats, RunError> {
    if let Some(stop) = stop {
        stop.stop();
    }
    rx.recv_timeout(PATIENCE).expect("run did not return in time")
}

/// A config for tests: short beat and backoff, so that reconnects and stops are quick.
fn config(stream: &'static str, group: &'static str, consumer: &'static str) -> Config {
    Config::new(stream, group, consumer)
        .beat(Duration::from_millis(200))
        .backoff(Duration::from_millis(20), Duration::from_millis(200))
        .count(100)
}

// ---- run --------------------------------------------------------------------------------------

#[test]
fn run_consumes_a_backlog_and_acks_everything() {
    for flavor in Flavor::ALL {
        let server = Server::start(flavor);
        let mut admin = server.admin();
        create_group(&mut admin, "s", "g");
        let ids = admin.xadd_n("s", 1000, 1);

        let runner = Runner::new(server.addr(), config("s", "g", "c1")).unwrap();
        let stop = runner.stop_handle();
        let (seen_tx, seen_rx) = mpsc::channel();
        let mut count = 0;
        let rx = spawn_run(runner, move |entry| {
            let _ = seen_tx.send(String::from_utf8(entry.id().to_vec()).unwrap());
            count += 1;
            if count == 1000 {
                stop.stop(); // from the handler's own thread: honored right after this entry
            }
            Verdict::Ack
        });
        let stats = finish(&rx, None).unwrap();
        let seen: Vec<String> = seen_rx.try_iter().collect();
        assert_eq!(seen, ids, "{flavor}: every entry once, in order");
        assert_eq!(stats.new, 1000, "{flavor}: {stats:?}");
        assert_eq!(stats.acked, 1000, "{flavor}: acks confirmed before stopping: {stats:?}");
        assert_eq!(admin.xpending_count("s", "g"), 0, "{flavor}");
    }
}

#[test]
fn stop_while_parked_returns_promptly() {
    let server = Server::start(DEFAULT_FLAVOR);
    let mut admin = server.admin();
    create_group(&mut admin, "s", "g");
    let config = config("s", "g", "c1").beat(Duration::from_secs(5)).client_name("parked");
    let runner = Runner::new(server.addr(), config).unwrap();
    let stop = runner.stop_handle();
    let rx = spawn_run(runner, |_| Verdict::Ack);
    // Parked: the server lists the client as blocked in XREADGROUP.
    wait_for("the consumer to park", || parked_in_xreadgroup(&mut admin, "parked"));
    let started = Instant::now();
    let stats = finish(&rx, Some(&stop)).unwrap();
    let took = started.elapsed();
    assert!(took < Duration::from_millis(500), "stop took {took:?}");
    assert_eq!(stats.errors, 0, "{stats:?}");
}

#[test]
fn stop_before_run_returns_at_once() {
    // Nothing listens here: a stop before the first connect needs no server.
    let runner = Runner::new(("127.0.0.1", free_port()), config("s", "g", "c1")).unwrap();
    runner.stop_handle().stop();
    let started = Instant::now();
    let stats = runner.run(|_| Verdict::Ack).unwrap();
    assert!(started.elapsed() < Duration::from_millis(500));
    assert_eq!(stats, Stats::default());
}

#[test]
fn retry_leaves_the_entry_pending() {
    let server = Server::start(DEFAULT_FLAVOR);
    let mut admin = server.admin();
    create_group(&mut admin, "s", "g");
    let ids = admin.xadd_n("s", 5, 1);
    let config = config("s", "g", "c1").min_idle(Duration::from_secs(600));
    let runner = Runner::new(server.addr(), config).unwrap();
    let stop = runner.stop_handle();
    let mut handled = 0;
    let rx = spawn_run(runner, move |entry| {
        handled += 1;
        if handled == 5 {
            stop.stop();
        }
        if entry.field(b"f") == Some(b"2") {
            Verdict::Retry
        } else {
            Verdict::Ack
        }
    });
    let stats = finish(&rx, None).unwrap();
    assert_eq!((stats.new, stats.acked, stats.retried), (5, 4, 1), "{stats:?}");
    assert_eq!(pending_ids(&mut admin, "s", "g"), vec![ids[2].clone()]);
}

#[test]
fn client_kill_reconnects_and_continues() {
    let server = Server::start(DEFAULT_FLAVOR);
    let mut admin = server.admin();
    create_group(&mut admin, "s", "g");
    let first = admin.xadd_n("s", 10, 1);
    let config = config("s", "g", "c1").client_name("victim");
    let runner = Runner::new(server.addr(), config).unwrap();
    let stop = runner.stop_handle();
    let (seen_tx, seen_rx) = mpsc::channel();
    let rx = spawn_run(runner, move |entry| {
        let _ = seen_tx.send(String::from_utf8(entry.id().to_vec()).unwrap());
        Verdict::Ack
    });
    let mut seen = HashSet::new();
    let deadline = Instant::now() + PATIENCE;
    while first.iter().any(|id| !seen.contains(id)) {
        let left = deadline.saturating_duration_since(Instant::now());
        seen.insert(seen_rx.recv_timeout(left).expect("first entries"));
    }

    let victims = admin.client_ids_by_name("victim");
    assert_eq!(victims.len(), 1, "{victims:?}");
    let id = victims[0];
    admin.call(&["CLIENT", "KILL", "ID", &id.to_string()]);
    // A new connection under the same name, then new entries get through it.
    wait_for("the consumer to reconnect", || {
        admin.client_ids_by_name("victim").iter().any(|&other| other != id)
    });
    let second = admin.xadd_n("s", 10, 1);
    while second.iter().any(|id| !seen.contains(id)) {
        let left = deadline.saturating_duration_since(Instant::now());
        seen.insert(seen_rx.recv_timeout(left).expect("entries after the reconnect"));
    }
    let stats = finish(&rx, Some(&stop)).unwrap();
    assert!(stats.reconnects >= 1, "{stats:?}");
    assert_eq!(admin.xpending_count("s", "g"), 0);
}

#[test]
fn keeps_retrying_until_the_server_appears() {
    // Reserve a port for the server, then take the server down until the consumer has
    // been retrying for a while.
    let mut server = Server::start(DEFAULT_FLAVOR);
    server.kill9();
    let config = config("s", "g", "c1").create_group("0");
    let runner = Runner::new(server.addr(), config).unwrap();
    let stop = runner.stop_handle();
    let (seen_tx, seen_rx) = mpsc::channel();
    let rx = spawn_run(runner, move |entry| {
        let _ = seen_tx.send(entry.id_bytes());
        Verdict::Ack
    });
    thread::sleep(Duration::from_millis(300));
    server.restart();
    let mut admin = server.admin();
    // The consumer creates the group from `0` when it gets in, so entries added before or
    // after that are all delivered.
    let ids = admin.xadd_n("s", 5, 1);
    for _ in &ids {
        seen_rx.recv_timeout(PATIENCE).expect("an entry once the server is up");
    }
    let stats = finish(&rx, Some(&stop)).unwrap();
    assert_eq!(stats.acked, 5, "{stats:?}");
    assert_eq!(admin.xpending_count("s", "g"), 0);
}

#[test]
fn a_fatal_error_is_returned() {
    let server = Server::start_with(DEFAULT_FLAVOR, Options::default().with_requirepass("sesame"));
    let config = config("s", "g", "c1").auth(None::<&str>, "wrong").create_group("0");
    let runner = Runner::new(server.addr(), config).unwrap();
    let rx = spawn_run(runner, |_| Verdict::Ack);
    match finish(&rx, None) {
        Err(RunError::Consumer(e)) => {
            assert!(e.is_fatal(), "{e}");
            assert!(e.to_string().contains("WRONGPASS"), "{e}");
        }
        other => panic!("expected a fatal consumer error, got {other:?}"),
    }
}

#[test]
fn a_bad_config_or_address_is_refused_up_front() {
    let addr = SocketAddr::from(([127, 0, 0, 1], 1));
    assert!(matches!(Runner::new(addr, config("s", "g", "c1").count(0)), Err(RunError::Config(_))));
    assert!(matches!(
        Runner::new("no-such-host.invalid:6379", config("s", "g", "c1")),
        Err(RunError::Resolve(_))
    ));
}

// ---- Driver -----------------------------------------------------------------------------------

#[test]
fn two_drivers_share_one_poll() {
    let server = Server::start(DEFAULT_FLAVOR);
    let mut admin = server.admin();
    create_group(&mut admin, "a", "g");
    create_group(&mut admin, "b", "g");
    admin.xadd_n("a", 50, 1);
    admin.xadd_n("b", 70, 1);

    let mut poll = Poll::new().unwrap();
    let mut events = Events::with_capacity(16);
    let consumer = |stream| Consumer::new(config(stream, "g", "c1")).unwrap();
    let mut drivers = [
        Driver::new(server.addr(), consumer("a"), Token(10)),
        Driver::new(server.addr(), consumer("b"), Token(20)),
    ];
    let mut counts = [0usize; 2];
    let deadline = Instant::now() + PATIENCE;
    let mut stopping = false;
    loop {
        assert!(Instant::now() < deadline, "drivers did not finish: {counts:?}");
        let now = Instant::now();
        for (i, driver) in drivers.iter_mut().enumerate() {
            let woken = events.iter().any(|e| e.token() == driver.token());
            if woken || driver.next_deadline().is_some_and(|at| at <= now) {
                let count = &mut counts[i];
                let status = driver
                    .drive(poll.registry(), &mut |_: &Entry| {
                        *count += 1;
                        Verdict::Ack
                    })
                    .unwrap();
                assert!(status == Status::Running || stopping, "stopped unasked");
            }
        }
        if !stopping && counts == [50, 70] {
            stopping = true;
            for driver in &mut drivers {
                // Stopped comes once the acks in flight are confirmed: keep driving.
                driver.stop();
            }
        }
        if drivers.iter().all(Driver::is_stopped) {
            break;
        }
        let next = drivers.iter().filter_map(Driver::next_deadline).min();
        let timeout =
            next.map_or(Duration::from_millis(100), |at| at.saturating_duration_since(Instant::now()));
        poll.poll(&mut events, Some(timeout.min(Duration::from_millis(100)))).unwrap();
    }
    assert_eq!(counts, [50, 70]);
    assert_eq!(drivers[0].consumer().stats().acked, 50);
    assert_eq!(drivers[1].consumer().stats().acked, 70);
    assert_eq!(admin.xpending_count("a", "g"), 0);
    assert_eq!(admin.xpending_count("b", "g"), 0);
}

#[test]
fn stop_mid_batch_confirms_acks_and_leaves_the_rest_pending() {
    let server = Server::start(DEFAULT_FLAVOR);
    let mut admin = server.admin();
    create_group(&mut admin, "s", "g");
    let ids = admin.xadd_n("s", 30, 1);
    let runner = Runner::new(server.addr(), config("s", "g", "c1")).unwrap();
    let stop = runner.stop_handle();
    let mut handled = 0;
    let rx = spawn_run(runner, move |_| {
        handled += 1;
        if handled == 5 {
            stop.stop(); // 25 more entries of the same read are still buffered
        }
        Verdict::Ack
    });
    let stats = finish(&rx, None).unwrap();
    assert_eq!((stats.new, stats.acked), (5, 5), "{stats:?}");
    assert_eq!(pending_ids(&mut admin, "s", "g"), ids[5..].to_vec());
}

/// Sends `signal` (e.g. `-STOP`) to the server process.
fn signal(server: &Server, signal: &str) {
    let pid = server.pid().expect("the server is running");
    let status = Command::new("kill").args([signal, &pid.to_string()]).status().expect("kill");
    assert!(status.success());
}

#[test]
fn a_silent_server_times_out_and_the_consumer_recovers() {
    let server = Server::start(DEFAULT_FLAVOR);
    let mut admin = server.admin();
    create_group(&mut admin, "s", "g");
    let config = config("s", "g", "c1").read_grace(Duration::from_secs(1)).client_name("frozen");
    let runner = Runner::new(server.addr(), config).unwrap();
    let stop = runner.stop_handle();
    let (seen_tx, seen_rx) = mpsc::channel();
    let rx = spawn_run(runner, move |entry| {
        let _ = seen_tx.send(entry.id_bytes());
        Verdict::Ack
    });
    wait_for("the consumer to connect", || admin.client_id_by_name("frozen").is_some());
    // Frozen: the parked read gets no answer within beat + read_grace.
    signal(&server, "-STOP");
    thread::sleep(Duration::from_millis(2500));
    signal(&server, "-CONT");
    let ids = admin.xadd_n("s", 5, 1);
    for _ in &ids {
        seen_rx.recv_timeout(PATIENCE).expect("an entry after the server thawed");
    }
    let stats = finish(&rx, Some(&stop)).unwrap();
    assert!(stats.errors >= 1 && stats.reconnects >= 1, "{stats:?}");
    assert_eq!(stats.acked, 5, "{stats:?}");
    assert_eq!(admin.xpending_count("s", "g"), 0);
}

#[test]
fn handles_are_thread_safe() {
    fn check<T: Clone + Send + Sync + 'static>() {}
    fn check_send<T: Send + 'static>() {}
    check::<StopHandle>();
    check_send::<Runner>();
    check_send::<Driver>();
    check_send::<RunError>();
}

#[test]
fn a_driver_without_a_server_backs_off_instead_of_spinning() {
    let mut poll = Poll::new().unwrap();
    let mut events = Events::with_capacity(8);
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let consumer = Consumer::new(config("s", "g", "c1")).unwrap(); // backoff 20 ms … 200 ms
    let mut driver = Driver::new(addr, consumer, Token(3));
    let (mut drives, mut polls) = (0, 0);
    let end = Instant::now() + Duration::from_millis(1000);
    while Instant::now() < end {
        let now = Instant::now();
        if events.iter().next().is_some() || driver.next_deadline().is_some_and(|at| at <= now) {
            drives += 1;
            assert_eq!(
                driver.drive(poll.registry(), &mut |_: &Entry| Verdict::Ack).unwrap(),
                Status::Running
            );
        }
        let next = driver.next_deadline().expect("a reconnect is always scheduled");
        let timeout = next.saturating_duration_since(Instant::now()).min(end.saturating_duration_since(now));
        poll.poll(&mut events, Some(timeout)).unwrap();
        polls += 1;
    }
    // Attempts every 10–200 ms: a handful, not thousands.
    assert!((3..=60).contains(&drives), "{drives} drives, {polls} polls");
    assert!(polls <= 4 * drives + 4, "{drives} drives, {polls} polls");
    assert_eq!(driver.consumer().stats().reconnects, 0);
    assert!(!driver.consumer().is_connected());
    // Stopping with nothing owed needs no server.
    driver.stop();
    assert_eq!(driver.drive(poll.registry(), &mut |_: &Entry| Verdict::Ack).unwrap(), Status::Stopped);
    assert_eq!(driver.next_deadline(), None);
}

/// A driver whose ack is owed while the server is down cannot stop (the stop waits for the
/// server); `abandon` ends it at the next drive, giving the ack up.
#[test]
fn abandon_ends_a_driver_stuck_on_an_owed_ack() {
    let mut server = Server::start(DEFAULT_FLAVOR);
    let mut admin = server.admin();
    create_group(&mut admin, "s", "g");
    admin.xadd_n("s", 1, 1);
    drop(admin);
    let mut poll = Poll::new().unwrap();
    let mut events = Events::with_capacity(8);
    let mut driver = Driver::new(server.addr(), Consumer::new(config("s", "g", "c1")).unwrap(), Token(1));
    let mut handler = |_: &Entry| {
        server.kill9(); // the ack this earns has no server to go to
        Verdict::Ack
    };
    let mut drive_for = |driver: &mut Driver, limit: Duration| {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if driver.drive(poll.registry(), &mut handler).unwrap() == Status::Stopped {
                return true;
            }
            let timeout =
                driver.next_deadline().map_or(limit, |at| at.saturating_duration_since(Instant::now()));
            poll.poll(&mut events, Some(timeout.min(Duration::from_millis(50)))).unwrap();
        }
        false
    };
    assert!(!drive_for(&mut driver, Duration::from_millis(300)));
    assert_eq!(driver.consumer().stats().new, 1, "the entry was handled");
    driver.stop();
    assert!(!drive_for(&mut driver, Duration::from_millis(300)), "stopped with its ack unconfirmed");
    driver.abandon();
    assert!(drive_for(&mut driver, Duration::from_millis(100)), "abandon did not end the driver");
    let stats = driver.consumer().stats();
    assert_eq!((stats.acked, stats.abandoned_acks), (0, 1));
    assert_eq!(driver.next_deadline(), None);
}

/// A `Driver` in the caller's loop, handing entries to a worker thread with
/// `drive_deferred`: while the worker takes 2.5 × `min_idle` on an entry, the loop keeps
/// driving, the entry in hand (and those waiting) keep their lease, and a peer reclaiming
/// every beat takes none of them. On every server.
#[test]
fn a_deferred_entry_keeps_its_lease_while_a_worker_takes_long() {
    let threads: Vec<_> =
        Flavor::ALL.into_iter().map(|f| thread::spawn(move || deferred_with_a_peer(f))).collect();
    for t in threads {
        t.join().expect("every server");
    }
}

fn deferred_with_a_peer(flavor: Flavor) {
    let server = Server::start(flavor);
    let mut admin = server.admin();
    create_group(&mut admin, "s", "g");
    let ids = admin.xadd_n("s", 4, 8);
    let min_idle = Duration::from_millis(600);

    let mut poll = Poll::new().unwrap();
    let mut events = Events::with_capacity(16);
    let waker = std::sync::Arc::new(mio::Waker::new(poll.registry(), Token(1)).unwrap());
    // The first read takes the whole backlog (reads start at the concurrency, 1, otherwise):
    // the entries waiting behind the slow one are leased too.
    let consumer = Consumer::new(config("s", "g", "c1").min_idle(min_idle).start_count(4)).unwrap();
    let mut driver = Driver::new(server.addr(), consumer, Token(0));
    // The worker: the first entry takes 2.5 × min_idle, the rest nothing.
    let (to_worker, work) = mpsc::channel::<Entry>();
    let (done, verdicts) = mpsc::channel::<String>();
    let wake = waker.clone();
    let worker = thread::spawn(move || {
        for (i, entry) in work.iter().enumerate() {
            if i == 0 {
                thread::sleep(min_idle * 5 / 2);
            }
            let _ = done.send(String::from_utf8(entry.id().to_vec()).unwrap());
            let _ = wake.wake();
        }
    });

    let mut handled = Vec::new();
    let mut peer: Option<(StopHandle, mpsc::Receiver<Result<Stats, RunError>>)> = None;
    let peer_seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let deadline = Instant::now() + PATIENCE;
    while handled.len() < ids.len() {
        assert!(Instant::now() < deadline, "{flavor:?}: handled {handled:?}");
        while let Ok(id) = verdicts.try_recv() {
            assert!(driver.settle(id.as_bytes(), Verdict::Ack), "{id} in hand");
            handled.push(id);
        }
        let status =
            driver.drive_deferred(poll.registry(), &mut |entry| to_worker.send(entry).unwrap()).unwrap();
        assert_eq!(status, Status::Running);
        if peer.is_none() && admin.xpending_consumer("s", "g", "c1").len() == ids.len() {
            // c1 holds them all: start a peer that reclaims idle entries every beat.
            let runner = Runner::new(server.addr(), config("s", "g", "c2").min_idle(min_idle)).unwrap();
            let record = peer_seen.clone();
            let stop = runner.stop_handle();
            peer = Some((
                stop,
                spawn_run(runner, move |e| {
                    record.lock().unwrap().push(e.id_bytes());
                    Verdict::Ack
                }),
            ));
        }
        let timeout = driver.next_deadline().map(|at| at.saturating_duration_since(Instant::now()));
        poll.poll(&mut events, Some(timeout.unwrap_or(PATIENCE).min(Duration::from_millis(100)))).unwrap();
    }
    drop(to_worker);
    worker.join().unwrap();
    let (stop, rx) = peer.expect("the peer ran");
    let peer_stats = finish(&rx, Some(&stop)).expect("the peer stopped cleanly");
    wait_for("c1's acks", || admin.xpending_count("s", "g") == 0);
    assert_eq!(handled, ids, "{flavor:?}: each once, in order");
    assert!(
        peer_seen.lock().unwrap().is_empty(),
        "{flavor:?}: the peer took {:?}",
        peer_seen.lock().unwrap()
    );
    let stats = driver.consumer().stats();
    assert!(stats.leases_renewed >= 2, "{flavor:?}: {stats:?}");
    assert_eq!((stats.leases_lost, stats.lost_to_peer, peer_stats.claimed), (0, 0, 0));
}

/// `drive_mixed`: two of three entries handled inline, every third passed to a worker and
/// settled when it comes back; a stop asked through `stop` after the 20th entry is honored
/// right after it, in the middle of the read's batch. One at a time (concurrency 1), so in
/// order whichever way each went; the 20 acked, the rest of the read left pending. On every
/// server.
#[test]
fn drive_mixed_handles_inline_or_defers_and_stops_between_two_entries() {
    let threads: Vec<_> = Flavor::ALL.into_iter().map(|f| thread::spawn(move || mixed(f))).collect();
    for t in threads {
        t.join().expect("every server");
    }
}

fn mixed(flavor: Flavor) {
    let server = Server::start(flavor);
    let mut admin = server.admin();
    create_group(&mut admin, "s", "g");
    let ids = admin.xadd_n("s", 30, 8);

    let mut poll = Poll::new().unwrap();
    let mut events = Events::with_capacity(16);
    let waker = std::sync::Arc::new(mio::Waker::new(poll.registry(), Token(1)).unwrap());
    // One read takes them all: the stop comes in the middle of its batch.
    let consumer = Consumer::new(config("s", "g", "c1").start_count(30)).unwrap();
    let mut driver = Driver::new(server.addr(), consumer, Token(0));
    let (to_worker, work) = mpsc::channel::<Entry>();
    let (done, verdicts) = mpsc::channel::<String>();
    let wake = waker.clone();
    let worker = thread::spawn(move || {
        for entry in work.iter() {
            let _ = done.send(String::from_utf8(entry.id().to_vec()).unwrap());
            let _ = wake.wake();
        }
    });

    let text = |entry: &Entry| String::from_utf8(entry.id().to_vec()).unwrap();
    let handed = std::cell::RefCell::new(Vec::new());
    let (mut inline, mut deferred) = (0, 0);
    let deadline = Instant::now() + PATIENCE;
    loop {
        assert!(Instant::now() < deadline, "{flavor:?}: handed {:?}", handed.borrow());
        while let Ok(id) = verdicts.try_recv() {
            assert!(driver.settle(id.as_bytes(), Verdict::Ack), "{id} in hand");
        }
        let status = driver
            .drive_mixed(
                poll.registry(),
                &mut |entry| {
                    let mut handed = handed.borrow_mut();
                    handed.push(text(&entry));
                    if handed.len() % 3 == 0 {
                        deferred += 1;
                        to_worker.send(entry).unwrap();
                        None
                    } else {
                        inline += 1;
                        Some(Verdict::Ack)
                    }
                },
                &mut || handed.borrow().len() >= 20,
            )
            .unwrap();
        if status == Status::Stopped {
            break;
        }
        let timeout = driver.next_deadline().map(|at| at.saturating_duration_since(Instant::now()));
        poll.poll(&mut events, Some(timeout.unwrap_or(PATIENCE).min(Duration::from_millis(100)))).unwrap();
    }
    drop(to_worker);
    worker.join().unwrap();
    assert_eq!(handed.into_inner(), ids[..20].to_vec(), "{flavor:?}: each once, in order");
    assert_eq!((inline, deferred), (14, 6), "{flavor:?}");
    let stats = driver.consumer().stats();
    assert_eq!((stats.new, stats.acked), (20, 20), "{flavor:?}: {stats:?}");
    assert_eq!(pending_ids(&mut admin, "s", "g"), ids[20..].to_vec(), "{flavor:?}");
}
