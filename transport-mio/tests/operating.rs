//! What an operator sees, on real servers: connections named, the group's health, notices
//! of an outage as it happens, and retirement of idle consumers that orphans nothing.

use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use pelican::retire::Decision;
use pelican::{Config, Notice, Stats, Verdict};
use pelican_mio::{RunError, Runner, StopHandle};
use pelican_tests::admin::Admin;
use pelican_tests::server::{Flavor, Server};

const PATIENCE: Duration = Duration::from_secs(20);

fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(10));
    }
}

/// A runner whose notices land in the returned list.
fn observed(runner: Runner) -> (Runner, Arc<Mutex<Vec<Notice>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    (runner.on_notice(move |n| sink.lock().unwrap().push(n.clone())), seen)
}

fn spawn(
    runner: Runner,
    mut handler: impl FnMut(&pelican::Entry) -> Verdict + Send + 'static,
) -> (StopHandle, mpsc::Receiver<Result<Stats, RunError>>) {
    let stop = runner.stop_handle();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(runner.run(&mut handler));
    });
    (stop, rx)
}

fn finish(stop: &StopHandle, rx: &mpsc::Receiver<Result<Stats, RunError>>) -> Stats {
    stop.stop();
    rx.recv_timeout(PATIENCE).expect("run returned").expect("run succeeded")
}

fn client_names(admin: &mut Admin) -> Vec<String> {
    let list = admin.call(&["CLIENT", "LIST"]).as_text().expect("CLIENT LIST");
    list.lines()
        .filter_map(|l| l.split(' ').find_map(|kv| kv.strip_prefix("name=")).map(String::from))
        .collect()
}

#[test]
fn connections_are_named_and_the_group_health_is_told() {
    for flavor in Flavor::ALL {
        let server = Server::start(flavor);
        let mut admin = server.admin();
        admin.call(&["XGROUP", "CREATE", "s", "g", "0", "MKSTREAM"]);
        let ids = admin.xadd_n("s", 5, 10);
        let config = Config::new("s", "g", "w1")
            .health_every(Duration::from_millis(100))
            .min_idle(Duration::from_secs(60))
            // `Release`'s story (the default before `Backoff`): the failed entry stays w1's.
            .on_retry(pelican::OnRetry::Release);
        let (runner, seen) = observed(Runner::new(server.addr(), config).unwrap());
        // The first entry fails: it stays pending, the group's oldest.
        let first = ids[0].clone();
        let (stop, rx) =
            spawn(runner, move |e| if e.id() == first.as_bytes() { Verdict::Retry } else { Verdict::Ack });
        wait_for("the name in CLIENT LIST", || {
            client_names(&mut admin).contains(&"pelican:s:g:w1".to_string())
        });
        let health = || {
            seen.lock().unwrap().iter().rev().find_map(|n| match n {
                Notice::Health(h) if h.pending == 1 => Some(h.clone()),
                _ => None,
            })
        };
        wait_for("a health notice with the failed entry pending", || health().is_some());
        let h = health().unwrap();
        let oldest = h.oldest.expect("an oldest pending entry");
        assert_eq!(oldest.id, ids[0].as_bytes(), "{flavor:?}");
        if flavor == Flavor::Redis810 {
            // Released by its Retry and taken back by w1's reads, after a growing wait each
            // time (then it stays with w1): held by w1 or released, delivered a few times.
            assert!(oldest.owner.as_deref().is_none_or(|o| o == b"w1"), "{flavor:?}: {oldest:?}");
            assert!((1..=10).contains(&oldest.deliveries), "{flavor:?}: {oldest:?}");
            assert_eq!(h.consumers, 1);
        } else {
            assert_eq!(
                (oldest.owner.as_deref().unwrap_or_default(), oldest.deliveries, h.consumers),
                (&b"w1"[..], 1, 1),
                "{flavor:?}"
            );
        }
        // Its age comes from its id (ms since the epoch) and the server's clock: seconds, not decades.
        assert!(oldest.age < Duration::from_secs(60), "{flavor:?}: {:?}", oldest.age);
        match flavor {
            Flavor::Redis62 => assert_eq!(h.lag, None, "no lag before 7.0"),
            _ => assert_eq!(h.lag, Some(0), "{flavor:?}: all delivered"),
        }
        let stats = finish(&stop, &rx);
        assert_eq!(stats.acked, 4, "{flavor:?}");
        // Released and taken back on 8.10, a few times; once elsewhere (min_idle is a minute).
        match flavor {
            Flavor::Redis810 => assert!((1..=10).contains(&stats.retried), "{stats:?}"),
            _ => assert_eq!(stats.retried, 1, "{flavor:?}"),
        }
    }
}

#[test]
fn an_outage_is_told_as_it_happens() {
    // Nothing listens: each attempt is a ConnectFailed naming the address and the cause.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (runner, seen) = observed(Runner::new(("127.0.0.1", port), Config::new("s", "g", "c")).unwrap());
    let (stop, rx) = spawn(runner, |_| Verdict::Ack);
    wait_for("two failed connects", || seen.lock().unwrap().len() >= 2);
    for notice in seen.lock().unwrap().iter() {
        let Notice::ConnectFailed { reason, retry_in } = notice else { panic!("{notice:?}") };
        assert!(reason.contains(&format!("127.0.0.1:{port}")) && reason.contains("refused"), "{reason}");
        assert!(*retry_in <= Duration::from_secs(5));
        assert!(notice.to_string().starts_with("cannot connect: 127.0.0.1:"), "{notice}");
    }
    finish(&stop, &rx);

    // A server that dies and comes back: lost (with why), then reconnected.
    // (No persistence here: the group door creates the group again after the restart.)
    let mut server = Server::start(Flavor::Redis70);
    let config = Config::new("s", "g", "c").create_group("0");
    let (runner, seen) = observed(Runner::new(server.addr(), config).unwrap());
    let (stop, rx) = spawn(runner, |_| Verdict::Ack);
    let has =
        |seen: &Arc<Mutex<Vec<Notice>>>, want: fn(&Notice) -> bool| seen.lock().unwrap().iter().any(want);
    wait_for("connected", || has(&seen, |n| matches!(n, Notice::Connected { reconnect: false, .. })));
    server.kill9();
    wait_for("connection lost", || has(&seen, |n| matches!(n, Notice::ConnectionLost { .. })));
    server.restart();
    wait_for("reconnected", || has(&seen, |n| matches!(n, Notice::Connected { reconnect: true, .. })));
    let stats = finish(&stop, &rx);
    assert!(stats.reconnects >= 1);
    let lost =
        seen.lock().unwrap().iter().find(|n| matches!(n, Notice::ConnectionLost { .. })).cloned().unwrap();
    assert!(lost.is_trouble() && lost.to_string().starts_with("connection lost: "), "{lost}");
}

#[test]
fn retirement_racing_a_busy_consumer_orphans_nothing() {
    for flavor in Flavor::ALL {
        let server = Server::start(flavor);
        let mut admin = server.admin();
        admin.call(&["XGROUP", "CREATE", "s", "g", "0", "MKSTREAM"]);
        // Two consumers gone for good: one left nothing pending, one left an entry.
        admin.xadd_n("s", 2, 10);
        admin.call(&["XREADGROUP", "GROUP", "g", "empty", "COUNT", "1", "STREAMS", "s", ">"]);
        let held = admin.call(&["XREADGROUP", "GROUP", "g", "holder", "COUNT", "1", "STREAMS", "s", ">"]);
        assert!(!held.is_error());
        let pending = admin.xpending_all("s", "g");
        let emptied = pending.iter().find(|p| p.1 == "empty").map(|p| p.0.clone()).unwrap();
        admin.call(&["XACK", "s", "g", &emptied]);
        let config = Config::new("s", "g", "admin");
        // A dry run reports and removes nothing.
        let rows = pelican_mio::retire(server.addr(), &config, Duration::ZERO, true, PATIENCE).unwrap();
        let decided: Vec<_> =
            rows.iter().map(|r| (String::from_utf8_lossy(&r.name).into_owned(), r.retired())).collect();
        assert_eq!(decided, [("empty".to_string(), true), ("holder".to_string(), false)], "{flavor:?}");
        assert_eq!(admin.call(&["XINFO", "CONSUMERS", "s", "g"]).as_array().unwrap().len(), 2);

        // A busy consumer is handed 2,000 entries while retirement runs in a loop with no
        // idle bound at all: it is removed whenever its pending list is empty (it comes back
        // at its next read), never while it holds an entry. Its connection carries another
        // name than its default: the retirement cannot tell it is connected, so only the
        // pending check (in the same script as the removal) stands between it and removal.
        let total = 2_000;
        admin.xadd_n("s", total, 10);
        let handled = Arc::new(AtomicUsize::new(0));
        let count = handled.clone();
        let worker = Config::new("s", "g", "busy").count(10).client_name("busy-worker");
        let (stop, rx) = spawn(Runner::new(server.addr(), worker).unwrap(), move |_| {
            count.fetch_add(1, Ordering::Relaxed);
            Verdict::Ack
        });
        let (mut rounds, mut removed) = (0, 0);
        let deadline = Instant::now() + PATIENCE;
        while handled.load(Ordering::Relaxed) < total {
            assert!(Instant::now() < deadline, "{flavor:?}: the busy consumer did not finish");
            let rows = pelican_mio::retire(server.addr(), &config, Duration::ZERO, false, PATIENCE).unwrap();
            for row in &rows {
                assert!(!row.retired() || row.pending == 0, "{flavor:?}: {row:?}");
                removed += usize::from(row.retired() && &row.name[..] == b"busy");
            }
            rounds += 1;
        }
        let stats = finish(&stop, &rx);
        // Every ack counted by the server: no entry left the group's pending list under the
        // consumer (a removal with entries pending would drop them, and their XACK count 0).
        assert_eq!((stats.acked, stats.lost_to_peer, stats.leases_lost), (total as u64, 0, 0), "{flavor:?}");
        eprintln!("{flavor:?}: {rounds} retirements raced the consumer, which was removed {removed} times while empty");
        // Only the holder's entry is pending, still held by it: nothing orphaned.
        let pending = admin.xpending_all("s", "g");
        assert_eq!(pending.len(), 1, "{flavor:?}");
        assert_eq!(pending[0].1, "holder");
    }
}

/// Issue 22: on Redis 7.0 a consumer parked on reads that find nothing looks idle
/// (`XINFO CONSUMERS`), so an idle bound alone removed live consumers. Two consumers parked
/// with a short beat and nothing pending are kept as connected even with no idle bound; a
/// third that has disconnected is removed.
#[test]
fn retirement_keeps_parked_consumers_and_removes_the_departed() {
    for flavor in Flavor::ALL {
        let server = Server::start(flavor);
        let mut admin = server.admin();
        admin.call(&["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"]);
        let consumers = |admin: &mut Admin| -> Vec<String> {
            let reply = admin.call(&["XINFO", "CONSUMERS", "s", "g"]);
            let rows = reply.as_array().expect("XINFO CONSUMERS").to_vec();
            rows.iter()
                .map(|c| {
                    let fields = c.as_array().expect("a consumer's fields");
                    let name = fields.chunks(2).find(|kv| kv[0].as_text().as_deref() == Some("name"));
                    name.and_then(|kv| kv[1].as_text()).expect("a name")
                })
                .collect()
        };
        // The departed: it read (so the group knows it), then stopped, staying in the group
        // (as a crashed one stays).
        let departed = Config::new("s", "g", "gone").leave_on_stop(false);
        let (stop, rx) = spawn(Runner::new(server.addr(), departed).unwrap(), |_| Verdict::Ack);
        wait_for("gone to join", || consumers(&mut admin).contains(&"gone".to_string()));
        finish(&stop, &rx);
        wait_for("gone's connection to close", || {
            !client_names(&mut admin).contains(&"pelican:s:g:gone".into())
        });
        // Two parked, beating every 100 ms on an empty stream.
        let parked: Vec<_> = ["p1", "p2"]
            .iter()
            .map(|name| {
                let config = Config::new("s", "g", name).beat(Duration::from_millis(100));
                spawn(Runner::new(server.addr(), config).unwrap(), |_| Verdict::Ack)
            })
            .collect();
        wait_for("both parked consumers to join", || consumers(&mut admin).len() == 3);
        thread::sleep(Duration::from_millis(300));
        let config = Config::new("s", "g", "admin");
        for dry_run in [true, false] {
            let rows =
                pelican_mio::retire(server.addr(), &config, Duration::ZERO, dry_run, PATIENCE).unwrap();
            let decided: Vec<_> = rows
                .iter()
                .map(|r| (String::from_utf8_lossy(&r.name).into_owned(), r.pending, r.connected, r.decision))
                .collect();
            assert_eq!(
                decided,
                [
                    ("gone".to_string(), 0, false, Decision::Retired),
                    ("p1".to_string(), 0, true, Decision::Connected),
                    ("p2".to_string(), 0, true, Decision::Connected),
                ],
                "{flavor:?}, dry run {dry_run}"
            );
        }
        assert_eq!(consumers(&mut admin), ["p1", "p2"], "{flavor:?}: only the departed was removed");
        for (stop, rx) in &parked {
            let stats = finish(stop, rx);
            assert_eq!(stats.errors, 0, "{flavor:?}: the parked consumers ran on undisturbed");
        }
    }
}

#[test]
fn a_stop_waiting_on_a_silent_server_ends_when_its_commands_time_out() {
    // A port that accepts and never answers: the handshake and the drain wait, then time
    // out (read grace, 2 s). A stop asked meanwhile ends then; it once waited forever.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let _held = thread::spawn(move || listener.incoming().take(4).collect::<Vec<_>>());
    // Twins allowed: the drain goes out with the handshake (a look for twins would hold it,
    // and the stop would end at once with nothing in flight that it must wait for).
    let config = Config::new("s", "g", "c").allow_twins();
    let (runner, seen) = observed(Runner::new(addr, config).unwrap());
    let (stop, rx) = spawn(runner, |_| Verdict::Ack);
    thread::sleep(Duration::from_millis(300));
    let stats = finish(&stop, &rx);
    assert_eq!((stats.acked, stats.errors), (0, 1), "the timeout");
    assert!(!seen.lock().unwrap().iter().any(|n| matches!(n, Notice::Connected { .. })), "never connected");
}

/// Two consumers pointed at a port nobody listens on retry at their own delays: each driver
/// seeds the jitter of its reconnects from this process's randomness (before, every process
/// waited the same 63, 172, 296… ms and a fleet reconnected in step); `Config::seed` pins it.
#[test]
fn reconnect_delays_differ_between_drivers_unless_seeded() {
    use std::sync::{Arc, Mutex};
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap(); // freed at once
    let delays = |config: pelican::Config| {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let runner = pelican_mio::Runner::new(
            closed,
            config.backoff(Duration::from_millis(20), Duration::from_secs(5)),
        )
        .unwrap()
        .on_notice(move |n| {
            if let pelican::Notice::ConnectFailed { retry_in, .. } = n {
                sink.lock().unwrap().push(*retry_in);
            }
        });
        let stop = runner.stop_handle();
        let run = std::thread::spawn(move || runner.run(|_| pelican::Verdict::Ack));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while seen.lock().unwrap().len() < 4 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.stop();
        let _ = run.join();
        let seen = seen.lock().unwrap().clone();
        assert!(seen.len() >= 4, "{seen:?}");
        seen[..4].to_vec()
    };
    let config = || pelican::Config::new("s", "g", "c").no_client_name();
    assert_ne!(delays(config()), delays(config()), "each driver its own jitter");
    assert_eq!(delays(config().seed(9)), delays(config().seed(9)), "Config::seed pins it");
}
