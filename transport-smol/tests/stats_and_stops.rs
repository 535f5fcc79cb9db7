//! Live stats from a running `Runner` (one in hand, and many), and a stop with a deadline, on
//! real servers. Every wait is bounded.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use pelican::{Config, Entry, Snapshot, Stats, Verdict};
use pelican_smol::{RunError, Runner, StatsHandle};
use pelican_tests::admin::Admin;
use pelican_tests::conformance::wait_until;
use pelican_tests::server::{Flavor, Options, Server};
use smol::lock::Barrier;

/// The longest any test waits for anything.
const PATIENCE: Duration = Duration::from_secs(20);

type Outcome = mpsc::Receiver<Result<Stats, RunError>>;

fn create_group(admin: &mut Admin, stream: &str) {
    admin.call(&["XGROUP", "CREATE", stream, "g", "0", "MKSTREAM"]);
}

fn config(stream: &str) -> Config {
    Config::new(stream, "g", "c1")
        .beat(Duration::from_millis(200))
        .backoff(Duration::from_millis(20), Duration::from_millis(200))
        .count(50)
}

/// Runs `runner` under `smol::block_on` on a thread of its own; the outcome comes through
/// the receiver.
fn spawn<H, F>(runner: Runner, handler: H) -> Outcome
where
    H: FnMut(Entry) -> F + Send + 'static,
    F: Future<Output = Verdict> + Send,
{
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(smol::block_on(runner.run(handler)));
    });
    rx
}

/// Polls the handle until `check` holds, failing with the last snapshot after [`PATIENCE`].
fn wait_for(stats: &StatsHandle, what: &str, check: impl Fn(&Snapshot) -> bool) {
    assert!(wait_until(PATIENCE, || check(&stats.get())), "{what}: {:?}", stats.get());
}

/// A runner's counters, what it holds and its connection, read from another thread while it
/// runs (one entry in hand at a time, and four): they follow the entries handled, the
/// entries in hand, an outage, and end as `run` returns them.
#[test]
fn the_stats_handle_follows_a_running_consumer() {
    for many in [1, 4] {
        let mut server = Server::start_with(Flavor::Redis70, Options::default().with_aof());
        let mut admin = server.admin();
        create_group(&mut admin, "s");
        admin.xadd_n("s", 300, 8);
        let runner = Runner::new(server.addr(), config("s").concurrency(many)).unwrap();
        let (stats, stop) = (runner.stats_handle(), runner.stop_handle());
        assert_eq!(stats.get(), Snapshot::default(), "nothing yet, not connected");
        // From the 301st entry on, `many` handlers wait at the gate.
        let handled = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(Barrier::new(many as usize + 1));
        let (counter, held) = (handled.clone(), gate.clone());
        let outcome = spawn(runner, move |_| {
            let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
            let held = held.clone();
            async move {
                if n > 300 && n <= 300 + many as usize {
                    held.wait().await;
                }
                Verdict::Ack
            }
        });
        wait_for(&stats, "the backlog acked, while running", |s| s.stats.acked == 300 && s.connected);
        assert_eq!(admin.xpending_count("s", "g"), 0);
        admin.xadd_n("s", 10, 8);
        wait_for(&stats, "the gated entries in hand", |s| s.in_hand == many as usize);
        smol::block_on(gate.wait());
        wait_for(&stats, "the rest acked", |s| s.stats.acked == 310 && s.in_hand == 0);
        server.kill9();
        wait_for(&stats, "the outage seen", |s| !s.connected);
        server.restart();
        wait_for(&stats, "reconnected", |s| s.connected && s.stats.reconnects >= 1);
        stop.stop();
        let end = outcome.recv_timeout(PATIENCE).expect("run returned").expect("a clean stop");
        assert_eq!(stats.get().stats, end, "the last snapshot is what run returned");
        assert_eq!((end.new, end.acked), (310, 310), "{many} at once: {end:?}");
        assert!(!stats.get().connected);
    }
}

/// A stop's deadline, well short of the next reconnect.
const LIMIT: Duration = Duration::from_millis(600);

/// An ack owed while the server is down (killed with `kill -9` while the handler held the
/// entry): a plain stop waits for the server; `stop_within` then ends the run at its deadline
/// — the runner's timer wakes it, long before its next reconnect — giving the ack up, and
/// the entry stays pending to the consumer. One in hand and many, on every server.
#[test]
fn stop_within_abandons_an_ack_owed_to_a_dead_server_at_its_deadline() {
    for flavor in Flavor::ALL {
        for many in [1, 4] {
            let mut server = Server::start_with(flavor, Options::default().with_aof());
            let mut admin = server.admin();
            create_group(&mut admin, "s");
            let ids = admin.xadd_n("s", 3, 8);
            // Reconnects 5–10 s apart: only the deadline can end the stop sooner.
            let config = config("s")
                .count(1)
                .concurrency(many)
                .backoff(Duration::from_secs(10), Duration::from_secs(10));
            let runner = Runner::new(server.addr(), config).unwrap();
            let stop = runner.stop_handle();
            let (entered, entry) = mpsc::channel();
            let (release, released) = smol::channel::bounded::<()>(1);
            let outcome = spawn(runner, move |e| {
                let _ = entered.send(String::from_utf8_lossy(e.id()).into_owned());
                let released = released.clone();
                async move {
                    let _ = released.recv().await;
                    Verdict::Ack
                }
            });
            assert_eq!(entry.recv_timeout(PATIENCE).unwrap(), ids[0]);
            server.kill9();
            stop.stop();
            release.send_blocking(()).unwrap();
            assert!(
                outcome.recv_timeout(Duration::from_millis(500)).is_err(),
                "{flavor} {many} at once: a plain stop waits for the server to confirm the ack"
            );
            let asked = Instant::now();
            stop.stop_within(LIMIT);
            let stats =
                outcome.recv_timeout(Duration::from_secs(4)).expect("returned at the deadline").unwrap();
            assert!(asked.elapsed() >= LIMIT, "{flavor} {many} at once: a stop until the deadline");
            assert_eq!(
                (stats.new, stats.acked, stats.abandoned_acks),
                (1, 0, 1),
                "{flavor} {many} at once: {stats:?}"
            );
            server.restart();
            let pending = server.admin().xpending_all("s", "g");
            assert_eq!(
                pending.first().map(|p| (&p.0[..], &p.1[..])),
                Some((&ids[0][..], "c1")),
                "{pending:?}"
            );
        }
    }
}

/// With the server answering, `stop_within` is a stop: the entries in hand finish, their acks
/// are confirmed, nothing is given up.
#[test]
fn stop_within_is_a_stop_when_the_server_answers() {
    for many in [1, 4] {
        let server = Server::start(Flavor::Valkey81);
        let mut admin = server.admin();
        create_group(&mut admin, "s");
        admin.xadd_n("s", 100, 8);
        let runner = Runner::new(server.addr(), config("s").concurrency(many)).unwrap();
        let (stop, stats) = (runner.stop_handle(), runner.stats_handle());
        let outcome = spawn(runner, |_| async { Verdict::Ack });
        wait_for(&stats, "the backlog acked", |s| s.stats.acked == 100);
        stop.stop_within(Duration::from_secs(60));
        let end = outcome.recv_timeout(PATIENCE).expect("run returned").unwrap();
        assert_eq!((end.acked, end.abandoned_acks), (100, 0), "{many} at once: {end:?}");
        assert_eq!(admin.xpending_count("s", "g"), 0);
    }
}
