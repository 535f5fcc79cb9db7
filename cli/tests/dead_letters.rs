//! `pelican dead-letters list|replay|drop` against real servers: dead letters a consumer
//! moved, listed and replayed to their stream; a thousand replayed, by reason, after a dry
//! run, and again across a `kill -9` of the replay (none lost, none twice); dropped by id and
//! by age; on a cluster, a replay across slots refused and left in place; over TLS and
//! through Sentinel; and the `pelican_dead_letters` gauge of a consumer's `/metrics`.

mod support;

use std::collections::BTreeMap;

use pelican_tests::admin::Admin;
use pelican_tests::cluster::Cluster;
use pelican_tests::server::{Flavor, Server};
use support::{consume, run, wait_until, Json, Pelican};

const DL: &str = "{o}:dead";
const ORIGIN: &str = "{o}";

/// `dead-letters ACTION --dead-letter DL --url URL` and `extra`.
fn dead_letters(url: &str, action: &str, extra: &[&str]) -> (Option<i32>, String, String) {
    let mut args = vec!["dead-letters", action, "--dead-letter", DL, "--url", url];
    args.extend_from_slice(extra);
    let (status, out, err) = run(&args);
    (status.code(), out, err)
}

/// `n` dead letters as the move writes them, of entries `f=0…n-1` of [`ORIGIN`]: every
/// tenth for the reason `verdict`, the others `max-deliveries`.
fn add_dead_letters(admin: &mut Admin, n: usize) {
    let commands: Vec<Vec<String>> = (0..n)
        .map(|i| {
            let reason = if i % 10 == 0 { "verdict" } else { "max-deliveries" };
            [
                "XADD",
                DL,
                "*",
                "f",
                &i.to_string(),
                "pelican-stream",
                ORIGIN,
                "pelican-group",
                "g",
                "pelican-consumer",
                "c",
                "pelican-id",
                &format!("{i}-1"),
                "pelican-deliveries",
                "5",
                "pelican-reason",
                reason,
            ]
            .iter()
            .map(|s| s.to_string())
            .collect()
        })
        .collect();
    admin.pipeline(&commands);
}

/// The values of field `f` in [`ORIGIN`], each with how many times it is there; every entry
/// replayed carries `pelican-replay-of`, the id its dead letter names.
fn replayed(admin: &mut Admin) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    for (id, fields) in admin.xrange(ORIGIN) {
        let get = |name: &str| {
            fields.iter().find(|(n, _)| n == name).map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        };
        let f = get("f").unwrap_or_else(|| panic!("{id}: {fields:?}"));
        assert_eq!(get("pelican-replay-of"), Some(format!("{f}-1")), "{id}: {fields:?}");
        assert!(get("pelican-stream").is_none(), "{id}: no origin fields: {fields:?}");
        *seen.entry(f).or_insert(0) += 1;
    }
    seen
}

/// A thousand dead letters listed, a dry run, a replay of one reason, then of all; ids gone
/// or unknown refused; drops by id and by age. On every server.
#[test]
fn a_thousand_dead_letters_are_listed_replayed_and_dropped() {
    for flavor in Flavor::ALL {
        let server = Server::start(flavor);
        let mut admin = server.admin();
        let url = format!("redis://{}", server.addr());
        add_dead_letters(&mut admin, 1000);

        let (status, out, err) = dead_letters(&url, "list", &["--count", "3", "--json"]);
        assert_eq!(status, Some(0), "{flavor}: {err}");
        let lines: Vec<Json> = out.lines().map(Json::parse).collect();
        assert_eq!(lines.len(), 3, "{out}");
        let first = &lines[0];
        assert_eq!((first.get("stream").str(), first.get("origin_id").str()), (ORIGIN, "0-1"));
        assert_eq!((first.get("group").str(), first.get("consumer").str()), ("g", "c"));
        assert_eq!((first.get("deliveries").num(), first.get("reason").str()), (5.0, "verdict"));
        assert_eq!(first.get("fields").get("f").str(), "0");
        assert!(first.get("age_ms").num() >= 0.0);
        let (status, text, _) = dead_letters(&url, "list", &["--count", "2"]);
        assert_eq!(status, Some(0));
        assert!(text.starts_with(&format!("{DL}: 1000 dead letters, the oldest 2 shown\n")), "{text}");
        assert!(
            text.contains("from {o} 1-1  group g  consumer c  deliveries 5  reason max-deliveries  age "),
            "{text}"
        );

        let (status, out, err) = dead_letters(&url, "replay", &["--all", "--reason", "verdict", "--dry-run"]);
        assert_eq!(status, Some(0), "{flavor}: {err}");
        assert!(out.ends_with("100 would be moved, 900 skipped, 0 failed"), "{out}");
        assert_eq!((admin.xlen(DL), admin.xlen(ORIGIN)), (1000, 0), "{flavor}: a dry run moves nothing");

        let (status, out, err) = dead_letters(&url, "replay", &["--all", "--reason", "verdict"]);
        assert_eq!(status, Some(0), "{flavor}: {err}");
        assert!(out.ends_with("100 moved, 900 skipped, 0 failed"), "{out}");
        assert_eq!((admin.xlen(DL), admin.xlen(ORIGIN)), (900, 100));
        let line = out.lines().next().unwrap();
        assert!(line.contains(&format!(" → {ORIGIN} ")), "{line}");

        let (status, out, err) = dead_letters(&url, "replay", &["--all"]);
        assert_eq!(status, Some(0), "{flavor}: {err}");
        assert!(out.ends_with("900 moved, 0 skipped, 0 failed"), "{out}");
        assert_eq!(admin.xlen(DL), 0);
        let seen = replayed(&mut admin);
        assert_eq!(seen.len(), 1000, "{flavor}: every one replayed");
        assert!(seen.values().all(|n| *n == 1), "{flavor}: none twice");

        // A dead letter already replayed is not there: refused, nothing done.
        let (status, _, err) = dead_letters(&url, "replay", &["--id", "1-0"]);
        assert_eq!(status, Some(1), "{err}");
        assert!(err.contains("1-0: not in {o}:dead (replayed or dropped already?)"), "{err}");
        assert_eq!(admin.xlen(ORIGIN), 1000);

        add_dead_letters(&mut admin, 3);
        let id = admin.xrange(DL)[0].0.clone();
        let (status, out, err) = dead_letters(&url, "drop", &["--id", &id]);
        assert_eq!((status, out.as_str()), (Some(0), "1 dropped from {o}:dead"), "{err}");
        let (status, _, err) = dead_letters(&url, "drop", &["--id", &id]);
        assert_eq!(status, Some(1), "{err}");
        assert!(err.contains("1 of the 1 ids given were not there"), "{err}");
        let (status, out, _) = dead_letters(&url, "drop", &["--older-than", "1d"]);
        assert_eq!(status, Some(0));
        assert!(out.starts_with("0 dropped"), "{out}: none a day old");
        std::thread::sleep(std::time::Duration::from_millis(5));
        let (status, out, _) = dead_letters(&url, "drop", &["--older-than", "1ms"]);
        assert_eq!(status, Some(0));
        assert!(out.starts_with("2 dropped"), "{out}");
        assert_eq!(admin.xlen(DL), 0);
    }
}

/// Bad usage: each action's flags, checked before connecting (exit 2).
#[test]
fn flags_that_do_not_fit_the_action_are_refused() {
    let url = "redis://127.0.0.1:1";
    for (action, extra, want) in [
        ("replay", &[][..], "which dead letters? give --id ID or --all"),
        ("drop", &[][..], "which dead letters? give --id ID or --older-than DURATION"),
        ("list", &["--dry-run"][..], "--dry-run does not go with list"),
        ("drop", &["--all"][..], "--all does not go with drop"),
        ("drop", &["--older-than", "7"][..], "a whole number and a unit"),
        ("replay", &["--id", "1-0", "--all"][..], "cannot be used with"),
    ] {
        let (status, _, err) = dead_letters(url, action, extra);
        assert_eq!(status, Some(2), "{action} {extra:?}: {err}");
        assert!(err.contains(want), "{action} {extra:?}: {err}");
    }
}

/// A replay of a thousand killed with SIGKILL midway, then run again: every dead letter
/// replayed once — none lost, none twice — each move being one script.
#[test]
fn a_replay_killed_midway_loses_none_and_duplicates_none() {
    let server = Server::start(Flavor::Redis70);
    let mut admin = server.admin();
    let url = format!("redis://{}", server.addr());
    add_dead_letters(&mut admin, 1000);
    let mut p = Pelican::spawn(&["dead-letters", "replay", "--dead-letter", DL, "--all", "--url", &url]);
    wait_until("some replayed", || admin.xlen(ORIGIN) >= 50);
    p.kill9();
    let (left, moved) = (admin.xlen(DL), admin.xlen(ORIGIN));
    eprintln!("killed with {moved} moved, {left} left");
    assert_eq!(left + moved, 1000, "none lost, none twice at the kill");
    let (status, _, err) = dead_letters(&url, "replay", &["--all"]);
    assert_eq!(status, Some(0), "{err}");
    let seen = replayed(&mut admin);
    assert_eq!((seen.len(), admin.xlen(DL)), (1000, 0));
    assert!(seen.values().all(|n| *n == 1), "none twice");
}

/// Entries a consumer moved (exit 65), listed and replayed as they are: the consumer's own
/// origin fields read back, the entry back in its stream with its fields.
#[test]
fn what_a_consumer_moved_is_replayed_to_its_stream() {
    let server = Server::start(Flavor::Valkey81);
    let mut admin = server.admin();
    let url = format!("redis://{}", server.addr());
    for i in 0..5 {
        admin.xadd("s", &[("n", i.to_string())]);
    }
    let mut p = Pelican::spawn(&consume(&url, "mio", &["--exec", "exit 65", "--dead-letter", DL]));
    wait_until("moved", || admin.xlen(DL) == 5);
    p.stop();
    let (status, out, err) = dead_letters(&url, "list", &["--json"]);
    assert_eq!(status, Some(0), "{err}");
    let first = Json::parse(out.lines().next().unwrap());
    assert_eq!((first.get("stream").str(), first.get("reason").str()), ("s", "verdict"));
    assert_eq!((first.get("group").str(), first.get("consumer").str()), ("g", "c"));
    assert_eq!((first.get("deliveries").num(), first.get("fields").get("n").str()), (1.0, "0"));
    let (status, out, err) = dead_letters(&url, "replay", &["--all"]);
    assert_eq!(status, Some(0), "{err}");
    assert!(out.ends_with("5 moved, 0 skipped, 0 failed"), "{out}");
    let entries = admin.xrange("s");
    assert_eq!(entries.len(), 10);
    let back: Vec<String> = entries[5..]
        .iter()
        .map(|(_, f)| {
            f.iter().map(|(n, v)| format!("{n}={}", String::from_utf8_lossy(v))).collect::<Vec<_>>().join(",")
        })
        .collect();
    assert_eq!(back[0], format!("n=0,pelican-replay-of={}", entries[0].0), "{back:?}");
}

/// On a cluster: dead letters of a stream in their slot are replayed atomically; one whose
/// origin is in another slot is refused (CROSSSLOT), told and left in place.
#[test]
fn on_a_cluster_a_replay_across_slots_is_refused_and_left_in_place() {
    let cluster = Cluster::start(Flavor::Redis70);
    let url = format!("redis://{}", cluster.masters()[0]);
    let mut admin = cluster.admin_for(DL);
    add_dead_letters(&mut admin, 3);
    admin.call(&[
        "XADD",
        DL,
        "*",
        "f",
        "x",
        "pelican-stream",
        "elsewhere",
        "pelican-id",
        "9-9",
        "pelican-reason",
        "verdict",
    ]);
    assert_ne!(cluster.slot_of("elsewhere"), cluster.slot_of(DL));
    let (status, out, err) = dead_letters(&url, "replay", &["--all"]);
    assert_eq!(status, Some(1), "{out}{err}");
    assert!(out.ends_with("3 moved, 0 skipped, 1 failed"), "{out}");
    assert!(
        err.contains(
            "not replayed: its origin elsewhere is in another cluster slot than {o}:dead (CROSSSLOT)"
        ),
        "{err}"
    );
    assert_eq!((admin.xlen(DL), cluster.admin_for(ORIGIN).xlen(ORIGIN)), (1, 3));
}

/// `/metrics` of a consumer with a dead-letter stream: `pelican_dead_letters` counts what it
/// holds (the group's health, asked every 5 s), the entries this consumer moved and others.
#[test]
fn the_dead_letter_gauge_counts_the_dead_letter_stream() {
    use std::io::{Read, Write};
    let server = Server::start(Flavor::Redis810);
    let mut admin = server.admin();
    let url = format!("redis://{}", server.addr());
    add_dead_letters(&mut admin, 2);
    for i in 0..3 {
        admin.xadd("s", &[("n", i.to_string())]);
    }
    let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let addr_text = addr.to_string();
    let args = consume(&url, "smol", &["--exec", "exit 65", "--dead-letter", DL, "--metrics", &addr_text]);
    let mut p = Pelican::spawn(&args);
    let scrape = || {
        let Ok(mut conn) = std::net::TcpStream::connect(addr) else { return String::new() };
        let _ = conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let mut body = String::new();
        let _ = conn.read_to_string(&mut body);
        body
    };
    let want = "pelican_dead_letters{stream=\"s\",group=\"g\",consumer=\"c\"} 5";
    wait_until("the gauge counts 5", || scrape().contains(want));
    p.stop();
}

/// Over TLS (Redis 7.0's TLS port), as every command: listed and replayed.
#[test]
fn dead_letters_over_tls() {
    use pelican_tests::certs::ServerCert;
    use pelican_tests::server::{Options, Tls};
    let tls = Tls { client_auth: false, cert: ServerCert::Good };
    let server = Server::start_with(Flavor::Redis70, Options::default().with_tls(tls));
    let mut admin = server.admin();
    add_dead_letters(&mut admin, 10);
    let ca = server.pki().unwrap().ca().display().to_string();
    let url = format!("rediss://localhost:{}", server.tls_port().expect("a TLS server"));
    let (status, out, err) = dead_letters(&url, "list", &["--tls-ca", &ca, "--json"]);
    assert_eq!((status, out.lines().count()), (Some(0), 10), "{err}");
    let (status, out, err) = dead_letters(&url, "replay", &["--tls-ca", &ca, "--all"]);
    assert_eq!(status, Some(0), "{err}");
    assert!(out.ends_with("10 moved, 0 skipped, 0 failed"), "{out}");
    assert_eq!((admin.xlen(DL), replayed(&mut admin).len()), (0, 10));
}

/// Through Sentinel (`redis+sentinel://`), as every command: the master found, replayed there.
#[test]
fn dead_letters_through_sentinel() {
    use pelican_tests::sentinel::{Topology, SERVICE};
    let topology = Topology::start(Flavor::Redis70);
    let nodes: Vec<String> = topology.sentinel_addrs().iter().map(|a| a.to_string()).collect();
    let url = format!("redis+sentinel://{}/{SERVICE}", nodes.join(","));
    let mut admin = topology.admin(topology.master());
    add_dead_letters(&mut admin, 10);
    let (status, out, err) = dead_letters(&url, "replay", &["--all", "--reason", "verdict"]);
    assert_eq!(status, Some(0), "{err}");
    assert!(out.ends_with("1 moved, 9 skipped, 0 failed"), "{out}");
    let (status, out, err) = dead_letters(&url, "drop", &["--older-than", "0ms"]);
    assert_eq!(status, Some(0), "{err}");
    assert!(out.starts_with("9 dropped"), "{out}");
    assert_eq!((admin.xlen(DL), admin.xlen(ORIGIN)), (0, 1));
}
