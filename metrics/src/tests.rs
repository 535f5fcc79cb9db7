//! The exposition read back by a Prometheus text parser, and the HTTP side answered over
//! real loopback sockets.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use pelican::{GroupHealth, OldestInHand, OldestPending, Snapshot};
use prometheus_parse::{Sample, Scrape, Value};

use super::*;

/// A snapshot with every counter set to a value of its own, some entries in hand and
/// buffered, connected, and handler times in three buckets.
fn busy() -> Snapshot {
    let mut s = Snapshot::default();
    let st = &mut s.stats;
    (st.drained, st.claimed, st.new, st.acked, st.retried, st.released) = (3, 5, 1000, 990, 7, 2);
    (st.deleted_seen, st.lost_to_peer, st.acks_unmatched, st.reconnects, st.moved) = (11, 13, 17, 19, 23);
    (st.errors, st.group_recreated, st.abandoned_acks, st.leases_renewed) = (29, 31, 37, 41);
    (st.leases_lost, st.dead_lettered, st.reads_shrunk, st.acks_unreplicated) = (43, 47, 53, 59);
    (st.committed, st.commits_fenced, st.commits_refused, st.retries_delayed) = (61, 67, 71, 73);
    for ms in [1, 2, 3, 40, 40, 12_000] {
        st.handler_time.record(Duration::from_millis(ms));
    }
    (s.in_hand, s.buffered, s.connected) = (4, 60, true);
    s
}

fn parse(text: &str) -> Scrape {
    Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("parses")
}

/// The samples named `name` for `stream`.
fn samples<'a>(scrape: &'a Scrape, name: &str, stream: &str) -> Vec<&'a Sample> {
    scrape.samples.iter().filter(|s| s.metric == name && s.labels.get("stream") == Some(stream)).collect()
}

/// The one value of `name` for `stream` (counter, gauge or untyped).
fn value(scrape: &Scrape, name: &str, stream: &str) -> f64 {
    let found = samples(scrape, name, stream);
    assert_eq!(found.len(), 1, "{name} for {stream}: {found:?}");
    match &found[0].value {
        Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
        other => panic!("{name}: {other:?}"),
    }
}

#[test]
fn every_counter_is_exported_with_its_labels_and_value() {
    let metrics = Metrics::new()
        .stream(Labels::new("orders", "billing", "w1"), busy)
        .stream(Labels::new("refunds", "billing", "w1"), Snapshot::default);
    let text = metrics.encode();
    let scrape = parse(&text);
    let s = busy().stats;
    for (source, want) in [("pending", s.drained), ("claimed", s.claimed), ("new", s.new)] {
        let found: Vec<&Sample> = samples(&scrape, "pelican_entries_total", "orders")
            .into_iter()
            .filter(|x| x.labels.get("source") == Some(source))
            .collect();
        assert_eq!(found.len(), 1, "{source}");
        assert_eq!(found[0].value, Value::Counter(want as f64), "{source}");
        assert_eq!(found[0].labels.get("group"), Some("billing"));
        assert_eq!(found[0].labels.get("consumer"), Some("w1"));
    }
    let want = [
        ("acked", s.acked),
        ("retried", s.retried),
        ("released", s.released),
        ("retries_delayed", s.retries_delayed),
        ("dead_lettered", s.dead_lettered),
        ("lost_to_peer", s.lost_to_peer),
        ("leases_lost", s.leases_lost),
        ("leases_renewed", s.leases_renewed),
        ("reconnects", s.reconnects),
        ("deleted_seen", s.deleted_seen),
        ("acks_unmatched", s.acks_unmatched),
        ("acks_unreplicated", s.acks_unreplicated),
        ("moved", s.moved),
        ("errors", s.errors),
        ("group_recreated", s.group_recreated),
        ("abandoned_acks", s.abandoned_acks),
        ("reads_shrunk", s.reads_shrunk),
        ("committed", s.committed),
        ("commits_fenced", s.commits_fenced),
        ("commits_refused", s.commits_refused),
    ];
    for (name, n) in want {
        let name = format!("pelican_{name}_total");
        assert!(text.contains(&format!("\n# TYPE {name} counter\n")), "{name}:\n{text}");
        assert_eq!(value(&scrape, &name, "orders"), n as f64, "{name}");
        assert_eq!(value(&scrape, &name, "refunds"), 0.0, "{name}");
    }
    // The 23 Stats counters: 3 by source in one family, and 20 families of their own.
    let counters: Vec<&str> =
        text.lines().filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter")).collect();
    assert_eq!(counters.len(), 21, "{counters:?}");
    assert_eq!(value(&scrape, "pelican_in_hand", "orders"), 4.0);
    assert_eq!(value(&scrape, "pelican_buffered", "orders"), 60.0);
    assert_eq!(value(&scrape, "pelican_connected", "orders"), 1.0);
    assert_eq!(value(&scrape, "pelican_connected", "refunds"), 0.0);
}

#[test]
fn handler_times_are_a_histogram_in_the_default_buckets() {
    let metrics = Metrics::new().stream(Labels::new("orders", "g", "c"), busy);
    let text = metrics.encode();
    assert!(text.contains("\n# TYPE pelican_handler_duration_seconds histogram\n"), "{text}");
    let scrape = parse(&text);
    let found = samples(&scrape, "pelican_handler_duration_seconds", "orders");
    assert_eq!(found.len(), 1, "{found:?}");
    let Value::Histogram(buckets) = &found[0].value else { panic!("{:?}", found[0]) };
    let got: Vec<(f64, f64)> = buckets.iter().map(|b| (b.less_than, b.count)).collect();
    // Cumulative: 3 under 5 ms, 2 more under 50 ms, the 12 s one only in +Inf.
    let want = [
        (0.005, 3.0),
        (0.01, 3.0),
        (0.025, 3.0),
        (0.05, 5.0),
        (0.1, 5.0),
        (0.25, 5.0),
        (0.5, 5.0),
        (1.0, 5.0),
        (2.5, 5.0),
        (5.0, 5.0),
        (10.0, 5.0),
        (f64::INFINITY, 6.0),
    ];
    assert_eq!(got, want);
    assert_eq!(value(&scrape, "pelican_handler_duration_seconds_count", "orders"), 6.0);
    let sum = value(&scrape, "pelican_handler_duration_seconds_sum", "orders");
    assert!((sum - 12.086).abs() < 1e-9, "{sum}");
}

#[test]
fn the_group_gauges_follow_its_health() {
    let mut known = busy();
    let mut oldest = OldestPending::default();
    (oldest.id, oldest.age, oldest.idle) =
        (Bytes::from_static(b"1-0"), Duration::from_millis(2500), Some(Duration::from_secs(1)));
    (oldest.deliveries, oldest.owner) = (2, Some(Bytes::from_static(b"w1")));
    let health = |pending, lag, consumers, oldest| {
        let mut health = GroupHealth::default();
        (health.pending, health.lag, health.consumers, health.oldest) = (pending, lag, consumers, oldest);
        health
    };
    known.health = Some(health(12, Some(300), 3, Some(oldest)));
    if let Some(h) = known.health.as_mut() {
        h.dead_letters = Some(7);
    }
    let mut quiet = busy();
    quiet.health = Some(health(0, None, 1, None));
    let metrics = Metrics::new()
        .stream(Labels::new("a", "g", "c"), move || known.clone())
        .stream(Labels::new("b", "g", "c"), move || quiet.clone())
        .stream(Labels::new("c", "g", "c"), busy);
    let scrape = parse(&metrics.encode());
    assert_eq!(value(&scrape, "pelican_group_pending", "a"), 12.0);
    assert_eq!(value(&scrape, "pelican_group_lag", "a"), 300.0);
    assert_eq!(value(&scrape, "pelican_group_consumers", "a"), 3.0);
    assert_eq!(value(&scrape, "pelican_group_oldest_pending_age_seconds", "a"), 2.5);
    // Nothing pending: the oldest is 0 s old; no lag told (6.2): no sample.
    assert_eq!(value(&scrape, "pelican_group_oldest_pending_age_seconds", "b"), 0.0);
    assert_eq!(value(&scrape, "pelican_group_pending", "b"), 0.0);
    assert!(samples(&scrape, "pelican_group_lag", "b").is_empty());
    // The dead-letter stream's length where there is one; none asked (no stream): no sample.
    assert_eq!(value(&scrape, "pelican_dead_letters", "a"), 7.0);
    assert!(samples(&scrape, "pelican_dead_letters", "b").is_empty());
    // Health never asked: no group sample at all.
    for name in ["pelican_group_pending", "pelican_group_lag", "pelican_group_oldest_pending_age_seconds"] {
        assert!(samples(&scrape, name, "c").is_empty(), "{name}");
    }
    // And with no stream's health known, no group family at all.
    let text = Metrics::new().stream(Labels::new("c", "g", "c"), busy).encode();
    assert!(!text.contains("pelican_group_pending"), "{text}");
}

#[test]
fn the_applications_counters_are_exported_without_labels() {
    let restarts = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let read = restarts.clone();
    let metrics = Metrics::new().stream(Labels::new("orders", "g", "c"), busy).counter(
        "pelican_handler_restarts",
        "Handler processes started again.",
        move || read.load(std::sync::atomic::Ordering::Relaxed),
    );
    restarts.store(3, std::sync::atomic::Ordering::Relaxed);
    let text = metrics.encode();
    assert!(text.contains("# TYPE pelican_handler_restarts_total counter\n"), "{text}");
    let scrape = parse(&text);
    let found: Vec<&Sample> =
        scrape.samples.iter().filter(|s| s.metric == "pelican_handler_restarts_total").collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(matches!(found[0].value, Value::Counter(v) if v == 3.0), "{:?}", found[0].value);
    assert!(found[0].labels.is_empty(), "{:?}", found[0].labels);
}

#[test]
fn label_values_are_escaped() {
    let metrics = Metrics::new().stream(Labels::new("a\"b\\c\nd", "g", "c"), Snapshot::default);
    let text = metrics.encode();
    assert!(text.contains(r#"pelican_acked_total{stream="a\"b\\c\nd",group="g",consumer="c"} 0"#), "{text}");
}

#[test]
fn health_says_why_not() {
    let connected = Arc::new(AtomicBool::new(false));
    let c = connected.clone();
    let read = move || {
        let mut s = Snapshot::default();
        s.connected = c.load(Relaxed);
        s
    };
    assert_eq!(Metrics::new().healthy(), Err("no stream to consume".into()));
    let one = Metrics::new().stream(Labels::new("orders", "g", "c"), read.clone());
    assert_eq!(one.healthy(), Err("not connected to the server (stream orders)".into()));
    connected.store(true, Relaxed);
    assert_eq!(one.healthy(), Ok(()));
    let two = one.clone().stream(Labels::new("b", "g", "c"), Snapshot::default);
    assert_eq!(two.healthy(), Err("not connected to the server: streams b".into()));
    // Reached, but a replica: said as such.
    let replica = || {
        let mut s = Snapshot::default();
        s.not_master = Some("a replica of 10.0.0.1:6379".into());
        s
    };
    let on_a_replica = Metrics::new().stream(Labels::new("orders", "g", "c"), replica);
    assert_eq!(
        on_a_replica.healthy(),
        Err("connected to a replica of 10.0.0.1:6379, not a master: nothing is read (stream orders)".into())
    );
    let stopping = Arc::new(AtomicBool::new(false));
    let s = stopping.clone();
    let checked = one.check(move || if s.load(Relaxed) { Err("stopping".into()) } else { Ok(()) });
    assert_eq!(checked.healthy(), Ok(()));
    stopping.store(true, Relaxed);
    assert_eq!(checked.healthy(), Err("stopping".into()));
}

/// An entry in hand past the limit makes the consumer unhealthy, naming it and its wait;
/// its age is a gauge either way (0 with nothing in hand).
#[test]
fn an_entry_in_hand_too_long_is_unhealthy_and_its_age_a_gauge() {
    let since = std::time::Instant::now() - Duration::from_secs(40);
    let mut held = busy();
    held.oldest_in_hand = Some(OldestInHand::new("orders", "7-0", since));
    let held = move || held.clone();
    let metrics =
        Metrics::new().stream(Labels::new("orders", "g", "c"), held).stream(Labels::new("b", "g", "c"), busy);
    let scrape = parse(&metrics.encode());
    let age = value(&scrape, "pelican_in_hand_oldest_age_seconds", "orders");
    assert!((40.0..60.0).contains(&age), "{age}");
    assert_eq!(value(&scrape, "pelican_in_hand_oldest_age_seconds", "b"), 0.0);
    assert_eq!(metrics.healthy(), Ok(()), "no limit, no verdict on it");
    let limited = metrics.clone().overdue_after(Duration::from_secs(30));
    let said = limited.healthy().unwrap_err();
    assert!(
        said.starts_with("entry 7-0 of stream orders has been in hand for 4")
            && said.ends_with("with no verdict from its handler (the limit is 30 s)"),
        "{said}"
    );
    assert_eq!(metrics.overdue_after(Duration::from_millis(60_500)).healthy(), Ok(()));
    assert_eq!(crate::exporter::seconds(Duration::from_millis(2500)), "2.5");
}

/// Sends `request` as it is and returns the whole answer (the server closes the
/// connection after answering `Connection: close`, or on bad input).
fn http(addr: std::net::SocketAddr, request: &[u8]) -> String {
    let mut conn = TcpStream::connect(addr).expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    conn.write_all(request).expect("send");
    let mut answer = Vec::new();
    let _ = conn.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

fn get(addr: std::net::SocketAddr, path: &str) -> String {
    http(addr, format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
}

#[test]
fn serves_metrics_and_health_and_survives_bad_requests() {
    let latest = Arc::new(Mutex::new(busy()));
    let l = latest.clone();
    let metrics = Metrics::new().stream(Labels::new("orders", "g", "c"), move || l.lock().unwrap().clone());
    let serving = metrics.serve("127.0.0.1:0").expect("binds");
    let addr = serving.addr();
    assert_ne!(addr.port(), 0);
    let answer = get(addr, "/metrics");
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    assert!(answer.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"), "{answer}");
    let body = answer.split("\r\n\r\n").nth(1).unwrap();
    assert_eq!(body, metrics.encode());
    let answer = get(addr, "/healthz");
    assert!(answer.starts_with("HTTP/1.1 200 ") && answer.ends_with("\r\n\r\nok\n"), "{answer}");
    latest.lock().unwrap().connected = false;
    let answer = get(addr, "/healthz?verbose");
    assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
    assert!(answer.ends_with("\r\n\r\nnot connected to the server (stream orders)\n"), "{answer}");
    assert!(get(addr, "/").starts_with("HTTP/1.1 404 "));
    let post =
        http(addr, b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    assert!(post.starts_with("HTTP/1.1 405 ") && post.contains("Allow: GET, HEAD\r\n"), "{post}");
    let head = http(addr, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 200 ") && head.ends_with("\r\n\r\n"), "{head}");
    // Not HTTP, half a request, bytes that are not text, a huge header: each is refused
    // or dropped, and the next request is answered.
    for junk in [
        &b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n"[..],
        b"GET /metrics",
        b"GET /\xff\xfe HTTP/1.1\r\nHost: \xff\r\n\r\n",
        b"BREW /coffee HTCPCP/1.0\r\n\r\n",
        format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(100_000)).as_bytes(),
    ] {
        let mut conn = TcpStream::connect(addr).expect("connect");
        conn.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
        let _ = conn.write_all(junk);
        let _ = conn.shutdown(std::net::Shutdown::Write);
        let _ = conn.read_to_end(&mut Vec::new());
        assert!(
            get(addr, "/metrics").starts_with("HTTP/1.1 200 "),
            "after {:?}",
            String::from_utf8_lossy(junk)
        );
    }
    serving.stop();
    // tiny_http's accepting thread lets go of the port as it notices the stop.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while TcpStream::connect(addr).is_ok() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(TcpStream::connect(addr).is_err(), "the port is closed after the stop");
}

#[test]
fn a_port_in_use_is_an_error() {
    let first = Metrics::new().serve("127.0.0.1:0").expect("binds");
    let err = Metrics::new().serve(first.addr()).expect_err("the port is taken");
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse, "{err}");
}

/// Alive and ready are two verdicts: a server that cannot be reached, a replica and a
/// readiness check are not ready but alive; an entry overdue, a loop that stopped turning
/// and a liveness check are neither.
#[test]
fn alive_is_apart_from_ready() {
    let connected = Arc::new(AtomicBool::new(false));
    let c = connected.clone();
    let read = move || {
        let mut s = Snapshot::default();
        s.connected = c.load(Relaxed);
        s
    };
    let metrics =
        Metrics::new().stream(Labels::new("orders", "g", "c"), read).check(|| Err("stopping".into()));
    assert_eq!(metrics.live(), Ok(()), "an outage of the server is no reason to restart");
    assert_eq!(metrics.ready(), Err("stopping".into()));
    assert_eq!(metrics.healthy(), metrics.ready());
    let replica = || {
        let mut s = Snapshot::default();
        s.not_master = Some("a replica of 10.0.0.1:6379".into());
        s
    };
    assert_eq!(Metrics::new().stream(Labels::new("orders", "g", "c"), replica).live(), Ok(()));
    assert_eq!(Metrics::new().live(), Ok(()), "no stream is not ready, but alive");

    // A liveness check fails both, and is told first.
    connected.store(true, Relaxed);
    let wedged = Arc::new(AtomicBool::new(false));
    let w = wedged.clone();
    let metrics = metrics.live_check(move || if w.load(Relaxed) { Err("wedged".into()) } else { Ok(()) });
    assert_eq!(metrics.live(), Ok(()));
    wedged.store(true, Relaxed);
    assert_eq!((metrics.live(), metrics.ready()), (Err("wedged".into()), Err("wedged".into())));

    // An entry overdue: not alive (a restart ends the silent handler), and so not ready.
    let mut held = Snapshot::default();
    held.connected = true;
    held.oldest_in_hand =
        Some(OldestInHand::new("orders", "7-0", std::time::Instant::now() - Duration::from_secs(40)));
    let overdue = Metrics::new()
        .stream(Labels::new("orders", "g", "c"), move || held.clone())
        .overdue_after(Duration::from_secs(30));
    let said = overdue.live().unwrap_err();
    assert!(said.starts_with("entry 7-0 of stream orders has been in hand for 4"), "{said}");
    assert_eq!(overdue.ready(), Err(said));
}

/// A loop that stops beating its heartbeat is not alive past the limit, naming it.
#[test]
fn a_loop_that_stops_turning_is_not_alive() {
    let beat = Heartbeat::new();
    let metrics = Metrics::new().heartbeat("the event loop", &beat, Duration::from_secs(1));
    assert_eq!(metrics.live(), Ok(()), "made now: beaten now");
    // Slept past the limit (a sleep never ends early): not alive.
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(metrics.live(), Err("the event loop has not turned for 1 s (the limit is 1 s)".into()));
    assert!(beat.since() >= Duration::from_millis(1100));
    beat.clone().beat();
    assert_eq!(metrics.live(), Ok(()), "a clone beats the same heart");
}

/// `/livez` and `/readyz` answer their verdicts; `/healthz` is `/readyz`.
#[test]
fn serves_livez_and_readyz() {
    let latest = Arc::new(Mutex::new(busy()));
    let l = latest.clone();
    let metrics = Metrics::new().stream(Labels::new("orders", "g", "c"), move || l.lock().unwrap().clone());
    let serving = metrics.serve("127.0.0.1:0").expect("binds");
    let addr = serving.addr();
    for path in ["/livez", "/readyz", "/healthz"] {
        let answer = get(addr, path);
        assert!(answer.starts_with("HTTP/1.1 200 ") && answer.ends_with("\r\n\r\nok\n"), "{path}: {answer}");
    }
    latest.lock().unwrap().connected = false;
    assert!(get(addr, "/livez").ends_with("\r\n\r\nok\n"), "alive through an outage");
    for path in ["/readyz", "/healthz"] {
        let answer = get(addr, path);
        assert!(answer.starts_with("HTTP/1.1 503 "), "{path}: {answer}");
        assert!(answer.ends_with("\r\n\r\nnot connected to the server (stream orders)\n"), "{answer}");
    }
    assert!(get(addr, "/live").starts_with("HTTP/1.1 404 "));
}
