//! Every command against a master that Sentinel watches (`redis+sentinel://`), on real
//! topologies (a master, its replica, three sentinels): `produce`, `pending`, `retire` and
//! `consume` find the master; `consume` follows a failover on both transports; `produce` tells
//! one; a command pointed at a replica says so; the sentinels' own password; bad URLs; and
//! `consume --ack-replicas` where the replicas do not answer.

mod support;

use std::thread;
use std::time::Duration;

use pelican_tests::sentinel::{Topology, TopologyOptions, SERVICE};
use pelican_tests::server::{Flavor, Options, Server};
use support::*;

/// `redis+sentinel://` URL of the topology's sentinels, with `extra` appended (a db, a query).
fn url(topology: &Topology, userinfo: &str, extra: &str) -> String {
    let nodes: Vec<String> = topology.sentinel_addrs().iter().map(|a| a.to_string()).collect();
    format!("redis+sentinel://{userinfo}{}/{SERVICE}{extra}", nodes.join(","))
}

/// How many entries `produce`'s final line says were sent again.
fn sent_again(out: &str) -> u64 {
    out.split("; ")
        .find_map(|part| part.strip_suffix(" entries sent again")?.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("how many sent again: {out}"))
}

/// Runs `check` on each flavor at once.
fn on_each(flavors: &[Flavor], check: fn(Flavor)) {
    let threads: Vec<_> = flavors.iter().map(|&f| (f, thread::spawn(move || check(f)))).collect();
    let failed: Vec<Flavor> =
        threads.into_iter().filter_map(|(f, t)| t.join().is_err().then_some(f)).collect();
    assert!(failed.is_empty(), "failed on {failed:?}");
}

#[test]
fn every_command_finds_the_master() {
    on_each(&Flavor::ALL, |flavor| {
        let topology = Topology::start(flavor);
        let url = url(&topology, "", "");
        let (status, out, err) = run(&["produce", "--url", &url, "--stream", "s", "--count", "300"]);
        assert!(status.success(), "{flavor}: produce: {err}");
        assert!(out.starts_with("produced 300 entries"), "{out}");
        assert_eq!(topology.admin(topology.master()).xlen("s"), 300);

        let mut consumer = Pelican::spawn(&consume(&url, "mio", &["--quiet"]));
        for _ in 0..300 {
            consumer.line();
        }
        consumer.stop();

        let (status, out, err) = run(&["pending", "--url", &url, "--stream", "s", "--group", "g", "--json"]);
        assert!(status.success(), "{flavor}: pending: {err}");
        assert!(Json::parse(&out).get("pending").num() == 0.0, "{out}");

        let (status, _, err) =
            run(&["retire", "--url", &url, "--stream", "s", "--group", "g", "--idle-ms", "0"]);
        assert!(status.success(), "{flavor}: retire: {err}");
    });
}

#[test]
fn a_replica_is_told_as_one() {
    let topology = Topology::start(Flavor::Redis70);
    topology.admin(topology.master()).xadd("s", &[("f", "v")]);
    let replica = format!("redis://{}", topology.replica());
    let (status, _, err) = run(&["pending", "--url", &replica, "--stream", "s", "--group", "g"]);
    assert_eq!(status.code(), Some(1), "{err}");
    let master = topology.master();
    assert!(
        err.contains(&format!("is a replica (of {master}), not a master"))
            && err.contains("redis+sentinel://"),
        "{err}"
    );
    // `consume` keeps trying, telling it once, and reads nothing from it.
    let mut consumer = Pelican::spawn(&consume(&replica, "smol", &[]));
    thread::sleep(Duration::from_millis(1500));
    assert!(consumer.try_line().is_none(), "read from a replica");
    consumer.stop();
    let told = consumer.stderr();
    assert_eq!(told.matches("connected to a replica of").count(), 1, "told once:\n{told}");
}

#[test]
fn consume_follows_a_failover_on_both_transports() {
    on_each(&[Flavor::Redis62, Flavor::Valkey81], |flavor| {
        let topology = Topology::start(flavor);
        let url = url(&topology, "", "");
        let mut consumers: Vec<Pelican> = ["mio", "smol"]
            .iter()
            .map(|t| {
                let stream = format!("s-{t}");
                let args = [
                    "consume",
                    "--url",
                    &url,
                    "--stream",
                    &stream,
                    "--group",
                    "g",
                    "--consumer",
                    "c",
                    "--create-group",
                    "0",
                    "--transport",
                    t,
                    "--ack-replicas",
                    "1",
                ];
                Pelican::spawn(&args)
            })
            .collect();
        let master = topology.master();
        for t in ["mio", "smol"] {
            topology.admin(master).xadd_n(&format!("s-{t}"), 50, 8);
        }
        for c in &mut consumers {
            for _ in 0..50 {
                c.line();
            }
        }
        let new = topology.failover();
        topology.wait_settled();
        for t in ["mio", "smol"] {
            topology.admin(new).xadd_n(&format!("s-{t}"), 50, 8);
        }
        for c in &mut consumers {
            for _ in 0..50 {
                c.line();
            }
            c.stop();
            let err = c.stderr();
            assert!(err.contains("a failover moved the master from"), "{flavor}:\n{err}");
        }
        for t in ["mio", "smol"] {
            assert_eq!(topology.admin(new).xpending_count(&format!("s-{t}"), "g"), 0, "{flavor} {t}");
        }
    });
}

#[test]
fn produce_tells_a_failover_during_the_run() {
    let topology = Topology::start(Flavor::Redis70);
    let url = url(&topology, "", "");
    let mut producer = Pelican::spawn(&["produce", "--url", &url, "--stream", "s", "--count", "4000000"]);
    thread::sleep(Duration::from_millis(800));
    let new = topology.failover();
    let status = producer.wait();
    let err = producer.stderr();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("a failover moved the master from") && err.contains(&new.to_string()), "{err}");
    assert!(err.contains("XLEN on the new master tells what is there"), "{err}");
    assert!(topology.admin(new).xlen("s") > 0, "it went on with the new master");
}

#[test]
fn sentinels_with_their_own_password() {
    let options = TopologyOptions { sentinel_pass: Some("s3ntinel".into()), ..TopologyOptions::default() };
    let topology = Topology::start_with(Flavor::Valkey81, options);
    let produce = |url: &str, env: &[(&str, &str)]| {
        run_env(&["produce", "--url", url, "--stream", "s", "--count", "5"], env)
    };
    let (status, _, err) = produce(&url(&topology, "", "?sentinel_password=s3ntinel"), &[]);
    assert!(status.success(), "{err}");
    let (status, _, err) = produce(&url(&topology, "", ""), &[("PELICAN_SENTINEL_PASSWORD", "s3ntinel")]);
    assert!(status.success(), "{err}");
    let (status, _, err) = produce(&url(&topology, "", "?sentinel_password=wrong"), &[]);
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("no sentinel named the master") && !err.contains("wrong"), "{err}");
    let (status, _, err) = produce(&url(&topology, "", ""), &[]);
    assert_eq!(status.code(), Some(1));
    assert!(err.contains("NOAUTH") || err.contains("Authentication"), "{err}");
    assert_eq!(topology.admin(topology.master()).xlen("s"), 10);
}

#[test]
fn data_nodes_with_a_password_behind_sentinels() {
    let options =
        TopologyOptions { data: Options::default().with_requirepass("d4ta"), ..TopologyOptions::default() };
    let topology = Topology::start_with(Flavor::Redis810, options);
    let (status, _, err) =
        run(&["produce", "--url", &url(&topology, ":d4ta@", "/0"), "--stream", "s", "--count", "7"]);
    assert!(status.success(), "{err}");
    assert_eq!(topology.admin(topology.master()).xlen("s"), 7);
}

#[test]
fn bad_sentinel_urls_are_usage_without_echoing_passwords() {
    for (url, why) in [
        ("redis+sentinel://127.0.0.1:1", "service name is missing"),
        ("redis+sentinel://127.0.0.1:1/m?sentinel_pass=x", "unknown query parameter"),
        ("redis+sentinel://:hunter2@127.0.0.1:1/m/x", "database"),
    ] {
        let (status, _, err) = run(&["pending", "--url", url, "--stream", "s", "--group", "g"]);
        assert_eq!(status.code(), Some(2), "{url}: {err}");
        assert!(err.contains(why) && !err.contains("hunter2"), "{url}: {err}");
    }
    let (status, _, err) = run(&[
        "pending",
        "--url",
        "redis://127.0.0.1:1",
        "--sentinel-password",
        "x",
        "--stream",
        "s",
        "--group",
        "g",
    ]);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("--sentinel-password is for redis+sentinel://"), "{err}");
}

/// `--ack-replicas` on a server without a replica: every entry is handled, the shortfall is
/// told once, at connect, with the count and its cost (each batch's acks then wait a moment
/// only), and counted in `--stats-json`; `--ack-aof` on a server without `WAITAOF` (Redis
/// 7.0) fails at connect, naming it. `--ack-replicas 2` on a master with one replica: told at
/// connect, with the count.
#[test]
fn ack_replicas_without_a_replica_are_told_and_counted() {
    let server = Server::start(Flavor::Redis70);
    server.admin().xadd_n("s", 5, 8);
    let url = format!("redis://{}", server.addr());
    let scratch = Scratch::new("ack-replicas");
    let stats = scratch.file("stats.json");
    let extra = ["--ack-replicas", "1", "--ack-timeout-ms", "50", "--stats-json", &stats];
    let mut consumer = Pelican::spawn(&consume(&url, "mio", &extra));
    for _ in 0..5 {
        consumer.line();
    }
    wait_until("the acks confirmed", || server.admin().xpending_count("s", "g") == 0);
    consumer.stop();
    let told = consumer.stderr();
    let short = "the master has 0 replicas in sync, fewer than the 1 each batch of acks is to reach";
    assert_eq!(told.matches(short).count(), 1, "told once:\n{told}");
    assert!(told.contains("ask for at most 0"), "{told}");
    let json = Json::parse(&std::fs::read_to_string(&stats).expect("written at the stop"));
    assert_eq!((json.get("acked").num(), json.get("acks_unreplicated").num()), (5.0, 5.0), "{json:?}");

    let (status, _, err) = run(&consume(&url, "smol", &["--ack-replicas", "1", "--ack-aof"]));
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("WAITAOF (Redis 7.2 or later, or Valkey)"), "{err}");

    on_each(&[Flavor::Redis62, Flavor::Valkey81], |flavor| {
        let pair = Topology::start_pair(flavor);
        // The replica in sync and acknowledging before the consumer counts it.
        assert_eq!(pair.admin(pair.master()).call(&["WAIT", "1", "10000"]).as_int(), Some(1));
        let url = format!("redis://{}", pair.master());
        for transport in ["mio", "smol"] {
            let mut consumer = Pelican::spawn(&consume(&url, transport, &["--ack-replicas", "2"]));
            // One replica, or none for a moment if its link is being made again under load:
            // either way fewer than the 2 asked for, told with the count.
            let told = " in sync, fewer than the 2 each batch of acks is to reach";
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while !consumer.stderr().contains(told) && std::time::Instant::now() < deadline {
                thread::sleep(Duration::from_millis(20));
            }
            consumer.stop();
            assert!(consumer.stderr().contains(told), "{flavor} {transport}: {}", consumer.stderr());
        }
    });
}

/// `produce --wait-replicas 1` across a `SENTINEL FAILOVER`: it goes on with the new master,
/// sends again what the replica had not confirmed, holds until the new master has a replica
/// confirming (the old one, which the sentinels turn into its replica ~10 s after the
/// failover), and exits 0 with every entry it counted on the new master (with
/// `--idempotent`, on Redis 8.10, exactly once each).
#[test]
fn produce_waiting_for_a_replica_loses_nothing_across_a_failover() {
    on_each(&[Flavor::Redis70, Flavor::Valkey81, Flavor::Redis810], |flavor| {
        let topology = Topology::start(flavor);
        let url = url(&topology, "", "");
        let idempotent = flavor == Flavor::Redis810;
        // With --idempotent, pipelines are of 100 (the stream's IDMP window): slower.
        let count: u64 = if idempotent { 100_000 } else { 500_000 };
        let count_arg = count.to_string();
        let mut args =
            vec!["produce", "--url", &url, "--stream", "s", "--count", &count_arg, "--wait-replicas", "1"];
        if idempotent {
            args.push("--idempotent");
        }
        let started = std::time::Instant::now();
        let mut producer = Pelican::spawn(&args);
        let old = topology.master();
        wait_until("the first entries", || topology.admin(old).xlen("s") > 0);
        let new = topology.failover();
        let failed_over = started.elapsed();
        // The sentinels' ~10 s, the entries before and after, on two busy cores.
        let status = producer.wait_within(Duration::from_secs(60));
        let err = producer.stderr();
        let out = producer.line();
        eprintln!("{flavor}: failover done at {failed_over:?}, run {:?}: {out}", started.elapsed());
        assert_eq!(status.code(), Some(0), "{flavor}: {err}");
        assert!(out.starts_with(&format!("produced {count} entries")), "{flavor}: {out}");
        assert!(err.contains(&format!("a failover moved the master from {old} to {new}")), "{flavor}: {err}");
        let resent = sent_again(&out);
        topology.wait_settled();
        let there = topology.admin(new).xlen("s");
        match idempotent {
            true => assert_eq!(there, count as i64, "{flavor}: each once"),
            false => assert!(
                (count as i64..=(count + resent) as i64).contains(&there),
                "{flavor}: {there} on the new master, {count} counted, {resent} sent again"
            ),
        }
    });
}

/// The master killed (`kill -9`) under `produce`: the connection lost, the sentinels name the
/// replica. Without `--wait-replicas`, the failover is told and the run exits 1 (the dead
/// master took what it had not passed on). With `--wait-replicas 1`, the run goes on with the
/// new master, holds until it has a replica again (the old master, restarted, which the
/// sentinels attach to it), and exits 0 with every entry it counted there.
#[test]
fn produce_tells_a_master_killed_under_it_and_loses_nothing_waiting_for_a_replica() {
    on_each(&[Flavor::Redis70, Flavor::Valkey81], |flavor| {
        let waits = flavor == Flavor::Valkey81;
        let mut topology = Topology::start(flavor);
        let url = url(&topology, "", "");
        let count: u64 = 500_000;
        let count_arg = count.to_string();
        let mut args = vec!["produce", "--url", &url, "--stream", "s", "--count", &count_arg];
        if waits {
            args.extend(["--wait-replicas", "1"]);
        }
        let mut producer = Pelican::spawn(&args);
        let old = topology.master();
        wait_until("the first entries", || topology.admin(old).xlen("s") > 0);
        topology.kill_master();
        let new = topology.master();
        if waits {
            topology.restart(old);
        }
        let status = producer.wait_within(Duration::from_secs(60));
        let err = producer.stderr();
        assert!(err.contains(&format!("a failover moved the master from {old} to {new}")), "{flavor}: {err}");
        if !waits {
            assert_eq!(status.code(), Some(1), "{flavor}: {err}");
            assert!(err.contains("may be lost") && err.contains("--wait-replicas prevents that"), "{err}");
            return;
        }
        assert_eq!(status.code(), Some(0), "{flavor}: {err}");
        let out = producer.line();
        assert!(out.starts_with(&format!("produced {count} entries")), "{flavor}: {out}");
        let resent = sent_again(&out);
        let there = topology.admin(new).xlen("s");
        assert!(
            (count as i64..=(count + resent) as i64).contains(&there),
            "{flavor}: {there} on the new master, {count} counted, {resent} sent again"
        );
    });
}

/// `consume` names its sentinel connection (`CLIENT SETNAME pelican:sentinel:<service>`),
/// which every flavor's sentinel takes: the one it keeps open, subscribed, shows in that
/// sentinel's `CLIENT LIST`, on both transports.
#[test]
fn the_sentinel_connection_is_named() {
    on_each(&Flavor::ALL, |flavor| {
        let topology = Topology::start(flavor);
        let url = url(&topology, "", "");
        for transport in ["mio", "smol"] {
            let mut consumer = Pelican::spawn(&consume(&url, transport, &[]));
            wait_until("connected", || consumer.stderr().contains("pelican: connected"));
            let named = |topology: &Topology| {
                topology.sentinel_addrs().iter().any(|&addr| {
                    let list =
                        topology.sentinel_admin(addr).call(&["CLIENT", "LIST"]).as_text().unwrap_or_default();
                    list.lines().any(|l| l.contains(&format!(" name=pelican:sentinel:{SERVICE} ")))
                })
            };
            wait_until("a sentinel lists the named connection", || named(&topology));
            consumer.stop();
        }
    });
}
