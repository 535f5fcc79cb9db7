//! The command line pointed slightly wrong, on real servers: a sentinel that wants a password
//! and gets none or a wrong one, a data node named as a sentinel, a sentinel named as the
//! node, a service the sentinel does not watch, every sentinel down, a node that refuses the
//! login. For each, `consume` (both transports) runs five seconds while the server (or a
//! listener standing for it) counts the connections it accepts: a handful a second at most
//! after the first (`pelican_tests::misuse`), the process's CPU low, and what it prints names
//! the cause and its fix, once. The one-shot commands (`pending`, `retire`, `produce`, `demo
//! --url`) fail at once with the same words (exit 1), after a handful of connections.

mod support;

use std::net::SocketAddr;

use pelican_tests::misuse::{cpu_time, refused_port, Connections, Doorman, Lone, Window, SERVICE, WINDOW};
use pelican_tests::server::{Flavor, Options, Server};
use support::*;

/// The server every case runs on (the library's misuse suite covers the four).
const FLAVOR: Flavor = Flavor::Redis70;

/// The most CPU `consume` may use while it waits out a misconfiguration, as a share of one
/// core (a flood spins at 70–100 %).
const CPU_SHARE: f64 = 0.25;

/// A misconfigured `consume` on `transport` over a window, counted with `count`: the window,
/// the process's CPU share over it, and what it printed. Left running: stopped afterwards
/// (SIGTERM; it must exit 0), or it exited by itself (its status).
fn consume_counted(
    url: &str,
    transport: &str,
    extra: &[&str],
    count: impl FnMut() -> u64,
) -> (Window, f64, String, Option<i32>) {
    let (window, mut p) = Window::around(count, || Pelican::spawn(&consume(url, transport, extra)));
    // Its CPU over the whole window (a flood spins from the start).
    let share = cpu_time(p.pid()).map_or(0.0, |cpu| cpu.as_secs_f64() / WINDOW.as_secs_f64());
    let exited = match p.try_exited() {
        Some(code) => Some(code),
        None => {
            p.stop();
            None
        }
    };
    (window, share, p.stderr(), exited)
}

/// The usual checks of a misconfigured `consume` that keeps trying: paced, quiet on the CPU,
/// the cause printed (every one of `says`), and each line once.
fn keeps_trying(what: &str, (window, share, err, exited): (Window, f64, String, Option<i32>), says: &[&str]) {
    eprintln!("{what}: {window:?}, CPU {:.0} %: {err}", share * 100.0);
    window.assert_paced(what);
    assert!(share < CPU_SHARE, "{what}: {:.0} % CPU while waiting", share * 100.0);
    assert_eq!(exited, None, "{what}: exited: {err}");
    for said in says {
        assert!(err.contains(said), "{what}: {said:?} not said: {err}");
    }
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("cannot connect")).collect();
    assert!(!lines.is_empty() && lines.len() <= 2, "{what}: the cause once (twice at most): {err}");
}

/// `redis+sentinel://` at `addrs`, watching `service`, with `query` (`?sentinel_password=…`).
fn sentinel_url(addrs: &[SocketAddr], service: &str, query: &str) -> String {
    let nodes: Vec<String> = addrs.iter().map(SocketAddr::to_string).collect();
    format!("redis+sentinel://{}/{service}{query}", nodes.join(","))
}

/// Every one-shot command against `url` (with `extra` flags): exit 1 at once, each of `says`
/// in what it prints, and `count` (if given) grows by a handful at most for each.
fn one_shots_fail(what: &str, url: &str, extra: &[&str], says: &[&str], mut count: impl FnMut() -> u64) {
    let commands: [Vec<&str>; 4] = [
        vec!["pending", "--stream", "s", "--group", "g"],
        vec!["retire", "--stream", "s", "--group", "g", "--idle-ms", "0"],
        vec!["produce", "--stream", "s", "--count", "1"],
        vec!["demo"],
    ];
    for mut args in commands {
        let name = args[0];
        args.extend(["--url", url]);
        args.extend_from_slice(extra);
        let before = count();
        let (status, _, err) = run(&args);
        let made = count() - before;
        assert_eq!(status.code(), Some(1), "{what}: {name}: {err}");
        for said in says {
            assert!(err.contains(said), "{what}: {name}: {said:?} not said: {err}");
        }
        assert!(made <= 4, "{what}: {name}: {made} connections for one command");
    }
}

#[test]
fn a_sentinel_that_wants_a_password() {
    let lone = Lone::start(FLAVOR, Some("s3cret"));
    let url = sentinel_url(&[lone.sentinel.addr()], SERVICE, "");
    let says = ["NOAUTH", "--sentinel-password"];
    for transport in ["mio", "smol"] {
        let mut at = Connections::at(&lone.sentinel);
        let seen = consume_counted(&url, transport, &[], || at.total());
        keeps_trying(&format!("{transport}: a sentinel that wants a password"), seen, &says);
    }
    let mut at = Connections::at(&lone.sentinel);
    one_shots_fail("a sentinel that wants a password", &url, &[], &says, || at.total());
}

#[test]
fn a_wrong_sentinel_password() {
    let lone = Lone::start(FLAVOR, Some("s3cret"));
    let url = sentinel_url(&[lone.sentinel.addr()], SERVICE, "");
    let says = ["WRONGPASS", "--sentinel-password"];
    for transport in ["mio", "smol"] {
        let mut at = Connections::at(&lone.sentinel);
        let seen = consume_counted(&url, transport, &["--sentinel-password", "wrong"], || at.total());
        keeps_trying(&format!("{transport}: a wrong sentinel password"), seen, &says);
    }
    let mut at = Connections::at(&lone.sentinel);
    one_shots_fail("a wrong sentinel password", &url, &["--sentinel-password", "wrong"], &says, || {
        at.total()
    });
}

#[test]
fn a_data_node_named_as_a_sentinel() {
    let node = Server::start(FLAVOR);
    let url = sentinel_url(&[node.addr()], SERVICE, "");
    let says = ["a data node (a master), not a sentinel", "in a redis:// URL to use the node itself"];
    for transport in ["mio", "smol"] {
        let mut at = Connections::at(&node);
        let seen = consume_counted(&url, transport, &[], || at.total());
        keeps_trying(&format!("{transport}: a data node named as a sentinel"), seen, &says);
    }
    let mut at = Connections::at(&node);
    one_shots_fail("a data node named as a sentinel", &url, &[], &says, || at.total());
}

#[test]
fn a_sentinel_named_as_the_node() {
    let lone = Lone::start(FLAVOR, None);
    let url = format!("redis://{}", lone.sentinel.addr());
    let fix = sentinel_url(&[lone.sentinel.addr()], SERVICE, "");
    let says = ["is a sentinel", fix.as_str()];
    for transport in ["mio", "smol"] {
        let mut at = Connections::at(&lone.sentinel);
        let (window, _, err, exited) = consume_counted(&url, transport, &[], || at.total());
        assert_eq!(exited, Some(1), "{transport}: {err}");
        assert!(window.total() <= 3, "{transport}: {window:?}");
        assert!(!err.contains("connected"), "{transport}: told connected to a sentinel: {err}");
        for said in says {
            assert!(err.contains(said), "{transport}: {said:?} not said: {err}");
        }
    }
    let mut at = Connections::at(&lone.sentinel);
    one_shots_fail("a sentinel named as the node", &url, &[], &says, || at.total());
}

#[test]
fn a_service_the_sentinel_does_not_watch() {
    let lone = Lone::start(FLAVOR, None);
    let url = sentinel_url(&[lone.sentinel.addr()], "nosuch", "");
    let says = ["no service named \"nosuch\"", "\"mymaster\""];
    for transport in ["mio", "smol"] {
        let mut at = Connections::at(&lone.sentinel);
        let seen = consume_counted(&url, transport, &[], || at.total());
        keeps_trying(&format!("{transport}: an unknown service"), seen, &says);
    }
    let mut at = Connections::at(&lone.sentinel);
    one_shots_fail("an unknown service", &url, &[], &says, || at.total());
}

#[test]
fn every_sentinel_down() {
    let (refused, doorman) = (refused_port(), Doorman::start());
    let url = sentinel_url(&[refused, doorman.addr()], SERVICE, "");
    for transport in ["mio", "smol"] {
        let seen = consume_counted(&url, transport, &[], || doorman.accepted());
        let err = seen.2.clone();
        keeps_trying(&format!("{transport}: every sentinel down"), seen, &[]);
        let line = err.lines().find(|l| l.contains("cannot connect")).unwrap_or_default();
        for addr in [refused, doorman.addr()] {
            assert_eq!(line.matches(&addr.to_string()).count(), 1, "{transport}: {addr} once: {line}");
        }
    }
    one_shots_fail("every sentinel down", &url, &[], &[], || doorman.accepted());
}

#[test]
fn a_node_that_refuses_the_login() {
    let node = Server::start_with(FLAVOR, Options::default().with_requirepass("s3cret"));
    for (url, said) in [
        (format!("redis://{}", node.addr()), "NOAUTH"),
        (format!("redis://:wrong@{}", node.addr()), "WRONGPASS"),
    ] {
        for transport in ["mio", "smol"] {
            let mut at = Connections::at(&node);
            let (window, _, err, exited) = consume_counted(&url, transport, &[], || at.total());
            assert_eq!(exited, Some(1), "{transport}: {err}");
            assert!(window.total() <= 3, "{transport}: {window:?}");
            assert!(err.contains(said) && err.contains("redis://:PASSWORD@"), "{transport}: {err}");
        }
        let mut at = Connections::at(&node);
        one_shots_fail("a node that refuses the login", &url, &[], &[said], || at.total());
    }
}
