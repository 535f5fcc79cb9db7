//! `consume --metrics`: `/metrics` scraped from the running binary agrees with
//! `--stats-json`, and `/healthz` follows the server through an outage and a stop.
//!
//! The counters are scraped once every entry is acknowledged, before the stop: nothing
//! changes them after that, so they must equal what `--stats-json` writes at the stop.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use pelican_tests::server::{Flavor, Options, Server};
use prometheus_parse::{Scrape, Value};
use support::{consume, wait_until, Json, Pelican, Scratch};

/// A loopback port free just now.
fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

/// `GET path` on `addr`: the status and the body; `None` if nothing answers.
fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut conn = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    conn.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes()).ok()?;
    let mut answer = String::new();
    conn.read_to_string(&mut answer).ok()?;
    let status = answer.split(' ').nth(1)?.parse().ok()?;
    let body = answer.split_once("\r\n\r\n")?.1.to_string();
    Some((status, body))
}

/// `/healthz`'s status and body.
fn health(addr: SocketAddr) -> (u16, String) {
    get(addr, "/healthz").unwrap_or_default()
}

/// `/metrics`, parsed as a scraper would (empty if it does not answer yet).
fn scrape(addr: SocketAddr) -> Scrape {
    let Some((status, body)) = get(addr, "/metrics") else {
        return Scrape::parse(std::iter::empty()).unwrap();
    };
    assert_eq!(status, 200, "{body}");
    Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).expect("the text format parses")
}

/// The value of `name` for stream `s` (and `source`, if given); `None` if absent.
fn value(scrape: &Scrape, name: &str, source: Option<&str>) -> Option<f64> {
    let mut found = scrape.samples.iter().filter(|x| {
        x.metric == name && x.labels.get("stream") == Some("s") && x.labels.get("source") == source
    });
    let sample = found.next()?;
    assert!(found.next().is_none(), "{name} twice");
    assert_eq!((sample.labels.get("group"), sample.labels.get("consumer")), (Some("g"), Some("c")));
    match sample.value {
        Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => Some(v),
        ref other => panic!("{name}: {other:?}"),
    }
}

/// `--stats-json`'s name for each consumer counter, and where `/metrics` has it.
fn metric_of(json_name: &str) -> (String, Option<&'static str>) {
    match json_name {
        "drained" => ("pelican_entries_total".into(), Some("pending")),
        "claimed" => ("pelican_entries_total".into(), Some("claimed")),
        "new" => ("pelican_entries_total".into(), Some("new")),
        other => (format!("pelican_{other}_total"), None),
    }
}

/// The counters of `--stats-json` that come from the consumer (not the handler's own).
const CONSUMER_COUNTERS: [&str; 18] = [
    "drained",
    "claimed",
    "new",
    "acked",
    "retried",
    "released",
    "deleted_seen",
    "lost_to_peer",
    "acks_unmatched",
    "reconnects",
    "moved",
    "errors",
    "group_recreated",
    "abandoned_acks",
    "leases_renewed",
    "leases_lost",
    "dead_lettered",
    "reads_shrunk",
];

#[test]
fn metrics_match_the_stats_json_and_health_follows_an_outage() {
    for transport in ["mio", "smol"] {
        let mut server = Server::start_with(Flavor::Redis70, Options::default().with_aof());
        let url = format!("redis://{}", server.addr());
        let mut admin = server.admin();
        admin.xadd_n("s", 3000, 16);
        let scratch = Scratch::new("metrics");
        let stats = scratch.file("stats.json");
        let addr = free_addr();
        let at = addr.to_string();
        let args = consume(&url, transport, &["--metrics", &at, "--stats-json", &stats, "--quiet"]);
        let mut p = Pelican::spawn(&args);
        let acked = |addr| value(&scrape(addr), "pelican_acked_total", None);
        wait_until("the first 3000 acked", || acked(addr) == Some(3000.0));
        assert_eq!(health(addr), (200, "ok\n".into()), "{transport}");

        server.kill9();
        wait_until("/healthz unhealthy", || health(addr).0 == 503);
        assert_eq!(health(addr).1, "not connected to the server (stream s)\n", "{transport}");
        assert_eq!(get(addr, "/readyz"), Some(health(addr)), "{transport}: /healthz is /readyz");
        // Alive all through: a restart would not bring the server back.
        assert_eq!(get(addr, "/livez"), Some((200, "ok\n".into())), "{transport}: an outage is not death");
        assert_eq!(value(&scrape(addr), "pelican_connected", None), Some(0.0), "{transport}");
        server.restart();
        wait_until("/healthz healthy again", || health(addr) == (200, "ok\n".into()));

        server.admin().xadd_n("s", 1000, 16);
        wait_until("all 4000 acked", || acked(addr) == Some(4000.0));
        // The group's health is asked every 5 s: its gauges come to nothing pending.
        let settled = |s: &Scrape| {
            value(s, "pelican_group_pending", None) == Some(0.0)
                && value(s, "pelican_group_lag", None) == Some(0.0)
                && value(s, "pelican_group_oldest_pending_age_seconds", None) == Some(0.0)
        };
        wait_until("the group's gauges", || settled(&scrape(addr)));
        let last = scrape(addr);
        p.stop();

        let json = Json::parse(&std::fs::read_to_string(&stats).unwrap());
        let lane = json.get("streams").get("s");
        for name in CONSUMER_COUNTERS {
            let (metric, source) = metric_of(name);
            let scraped =
                value(&last, &metric, source).unwrap_or_else(|| panic!("{metric} {source:?} missing"));
            assert_eq!(scraped, lane.get(name).num(), "{transport}: {name} ({metric} {source:?})");
            assert_eq!(scraped, json.get(name).num(), "{transport}: {name} in the totals");
        }
        assert_eq!(lane.get("reconnects").num(), 1.0, "{transport}");
        assert_eq!(lane.get("handled").num(), 4000.0, "{transport}");
        let handled = value(&last, "pelican_handler_duration_seconds_count", None);
        assert_eq!(handled, Some(4000.0), "{transport}: every handling timed");
        assert_eq!(value(&last, "pelican_in_hand", None), Some(0.0), "{transport}");
        assert_eq!(get(addr, "/healthz"), None, "{transport}: served until pelican exits, not after");
    }
}

#[test]
fn healthz_says_stopping_while_a_stop_waits_for_the_command_and_livez_alive() {
    let server = Server::start(Flavor::Redis70);
    let url = format!("redis://{}", server.addr());
    server.admin().xadd_n("s", 1, 8);
    let scratch = Scratch::new("metrics-stop");
    let (started, go) = (scratch.file("started"), scratch.file("go"));
    // The command holds its entry until the test says go.
    let exec = format!("touch {started}; while [ ! -e {go} ]; do sleep 0.02; done");
    let addr = free_addr();
    let at = addr.to_string();
    let args = consume(&url, "mio", &["--exec", &exec, "--metrics", &at, "--quiet"]);
    let mut p = Pelican::spawn(&args);
    wait_until("the command started", || std::path::Path::new(&started).exists());
    wait_until("healthy", || health(addr).0 == 200);
    assert_eq!(value(&scrape(addr), "pelican_in_hand", None), Some(1.0));
    p.term();
    wait_until("/healthz stopping", || health(addr).0 == 503);
    assert_eq!(health(addr).1, "stopping: finishing the entries in hand and confirming their acks\n");
    assert_eq!(get(addr, "/livez"), Some((200, "ok\n".into())), "a stop is not death");
    std::fs::write(&go, "").unwrap();
    assert_eq!(p.wait().code(), Some(0), "{}", p.stderr());
}

#[test]
fn a_metrics_port_in_use_is_bad_usage() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = taken.local_addr().unwrap().to_string();
    let (status, _, stderr) = support::run(&[
        "consume",
        "--url",
        "redis://127.0.0.1:1",
        "--stream",
        "s",
        "--group",
        "g",
        "--consumer",
        "c",
        "--metrics",
        &at,
    ]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.starts_with(&format!("pelican: --metrics {at}: cannot listen there: ")), "{stderr}");
}

/// `/healthz` of a consumer pointed at a replica says so, naming its master, not "not
/// connected" (it is connected, to a node it must not read from).
#[test]
fn healthz_on_a_replica_names_it() {
    let master = Server::start(Flavor::Redis70);
    let replica = Server::start_with(Flavor::Redis70, Options::default().with_replica_of(master.addr()));
    let url = format!("redis://{}", replica.addr());
    let addr = free_addr();
    let at = addr.to_string();
    for transport in ["mio", "smol"] {
        let mut p = Pelican::spawn(&consume(&url, transport, &["--metrics", &at]));
        wait_until("/healthz names the replica", || health(addr).1.contains("connected to a replica of"));
        let (status, body) = health(addr);
        assert_eq!(status, 503);
        let want = format!(
            "connected to a replica of {} (link connected), not a master: nothing is read (stream s)\n",
            master.addr()
        );
        assert_eq!(body, want, "{transport}");
        p.stop();
    }
}

/// A lag the server counts wrong — above zero with nothing past the group's last-delivered id,
/// as Redis 7.0 keeps after a failover (set here with `XGROUP SETID … ENTRIESREAD`) — is
/// unknown in `/metrics` (no `pelican_group_lag`) and in `pending`, not 3; a true lag is
/// shown as it is.
#[test]
fn a_lag_the_server_counts_wrong_is_unknown() {
    let server = Server::start(Flavor::Redis70);
    let mut admin = server.admin();
    admin.call(&["XGROUP", "CREATE", "s", "g", "0", "MKSTREAM"]);
    let ids = admin.xadd_n("s", 5, 8);
    admin.call(&["XREADGROUP", "GROUP", "g", "other", "STREAMS", "s", ">"]);
    let mut ack = vec!["XACK", "s", "g"];
    ack.extend(ids.iter().map(String::as_str));
    admin.call(&ack);
    admin.call(&["XGROUP", "SETID", "s", "g", &ids[4], "ENTRIESREAD", "2"]);
    let said = admin.call(&["XINFO", "GROUPS", "s"]);
    assert!(format!("{said:?}").contains(r#"Bulk("lag"), Int(3)"#), "the server says 3: {said:?}");
    let url = format!("redis://{}", server.addr());
    let (status, out, err) =
        support::run(&["pending", "--url", &url, "--stream", "s", "--group", "g", "--json"]);
    assert!(status.success(), "{err}");
    assert!(out.contains(r#""lag":null"#), "{out}");

    let addr = free_addr();
    let at = addr.to_string();
    let mut p = Pelican::spawn(&consume(&url, "mio", &["--metrics", &at]));
    wait_until("the group's health asked", || value(&scrape(addr), "pelican_group_pending", None).is_some());
    assert_eq!(value(&scrape(addr), "pelican_group_lag", None), None, "unknown, not 3");
    p.stop();

    // A true lag: entries past the last-delivered id, for a group nobody reads.
    admin.call(&["XGROUP", "CREATE", "s", "idle", "0"]);
    let (_, out, _) = support::run(&["pending", "--url", &url, "--stream", "s", "--group", "idle", "--json"]);
    assert!(out.contains(r#""lag":5"#), "{out}");
}
