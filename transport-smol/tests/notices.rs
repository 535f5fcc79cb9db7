//! What an operator sees through the smol transport, on real servers: a failed connect and
//! a lost connection with their reasons, a reconnect, the group's health.

use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use pelican::{Config, Notice, Verdict};
use pelican_smol::Runner;
use pelican_tests::server::{Flavor, Server};

const PATIENCE: Duration = Duration::from_secs(20);

fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(10));
    }
}

type Seen = Arc<Mutex<Vec<Notice>>>;

/// Runs a consumer of `config` at `addr` on its own thread, its notices in the list.
fn start(
    addr: std::net::SocketAddr,
    config: Config,
) -> (pelican_smol::StopHandle, thread::JoinHandle<()>, Seen) {
    let seen: Seen = Arc::default();
    let sink = seen.clone();
    let runner = Runner::new(addr, config).unwrap().on_notice(move |n| sink.lock().unwrap().push(n.clone()));
    let stop = runner.stop_handle();
    let thread = thread::spawn(move || {
        smol::block_on(runner.run(|_| async { Verdict::Ack })).expect("run succeeded");
    });
    (stop, thread, seen)
}

fn has(seen: &Seen, want: impl Fn(&Notice) -> bool) -> bool {
    seen.lock().unwrap().iter().any(want)
}

#[test]
fn connects_losses_and_health_are_told() {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let (stop, thread, seen) = start(addr, Config::new("s", "g", "c"));
    wait_for("a failed connect", || {
        has(
            &seen,
            |n| matches!(n, Notice::ConnectFailed { reason, .. } if reason.contains(&port.to_string())),
        )
    });
    stop.stop();
    thread.join().unwrap();

    let mut server = Server::start(Flavor::Valkey81);
    let config = Config::new("s", "g", "c").create_group("0").health_every(Duration::from_millis(100));
    let (stop, thread, seen) = start(server.addr(), config);
    wait_for("health", || {
        has(&seen, |n| matches!(n, Notice::Health(h) if h.lag == Some(0) && h.consumers <= 1))
    });
    server.kill9();
    wait_for("connection lost", || has(&seen, |n| matches!(n, Notice::ConnectionLost { .. })));
    server.restart();
    wait_for("reconnected", || has(&seen, |n| matches!(n, Notice::Connected { reconnect: true, .. })));
    stop.stop();
    thread.join().unwrap();
}

/// Two consumers pointed at a port nobody listens on retry at their own delays (each runner
/// seeds its jitter from this process's randomness); `Config::seed` pins them.
#[test]
fn reconnect_delays_differ_between_runners_unless_seeded() {
    let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap(); // freed at once
    let delays = |config: Config| {
        let (stop, thread, seen) =
            start(closed, config.backoff(Duration::from_millis(20), Duration::from_secs(5)));
        let failed = |n: &Notice| matches!(n, Notice::ConnectFailed { .. });
        wait_for("four failed connects", || seen.lock().unwrap().iter().filter(|n| failed(n)).count() >= 4);
        stop.stop();
        thread.join().unwrap();
        let seen = seen.lock().unwrap();
        let delays: Vec<Duration> = seen
            .iter()
            .filter_map(|n| match n {
                Notice::ConnectFailed { retry_in, .. } => Some(*retry_in),
                _ => None,
            })
            .take(4)
            .collect();
        delays
    };
    let config = || Config::new("s", "g", "c").no_client_name();
    assert_ne!(delays(config()), delays(config()), "each runner its own jitter");
    assert_eq!(delays(config().seed(9)), delays(config().seed(9)), "Config::seed pins it");
}
