//! Replays the fixture capture script (core/tests/fixtures/README.md) against the simulator
//! and compares every reply, byte for byte, with what the real servers answered.

mod common;

use std::path::PathBuf;

use common::{cmd, zero_pending_idle};
use pelican_sim::{Sim, SimOptions};

fn fixture(flavor: &str, proto: &str, name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../core/tests/fixtures")
        .join(flavor)
        .join(proto)
        .join(format!("{name}.resp"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn options(flavor: &str) -> SimOptions {
    match flavor {
        "redis-6.2" => SimOptions::redis62(),
        "redis-7.0" => SimOptions::redis70(),
        "redis-8.10" => SimOptions::redis810(),
        _ => SimOptions::valkey81(),
    }
}

fn check(flavor: &str, proto: &str, name: &str, got: &[u8]) {
    let mut want = fixture(flavor, proto, name);
    let mut got = got.to_vec();
    if name == "xpending_extended" {
        want = zero_pending_idle(&want);
        got = zero_pending_idle(&got);
    }
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&want),
        "{flavor}/{proto}/{name}.resp differs"
    );
}

/// A `HELLO` reply with the value of its `id` field blanked, and its `modules` list (the
/// last field) cut off: Redis 8 lists its built-in `vectorset` module there, the simulator
/// has none.
fn without_client_id(reply: &[u8]) -> String {
    let text = String::from_utf8_lossy(reply).into_owned();
    let mut parts: Vec<&str> = text.split("\r\n").collect();
    for i in 1..parts.len() {
        if parts[i - 1] == "id" {
            parts[i] = ":<id>";
        }
    }
    if let Some(at) = parts.iter().position(|p| *p == "modules") {
        parts.truncate(at + 1);
    }
    parts.join("\r\n")
}

fn replay(flavor: &str, proto: &str) {
    let mut sim = Sim::new(options(flavor));
    let hello = |sim: &mut Sim| {
        let c = sim.connect();
        if proto == "resp3" {
            let _ = cmd(sim, c, "HELLO 3");
        }
        c
    };
    let c = sim.connect();
    if proto == "resp3" {
        let got = cmd(&mut sim, c, "HELLO 3");
        // The client id differs (the capture had opened other connections before).
        assert_eq!(without_client_id(&got), without_client_id(&fixture(flavor, proto, "hello")));
    }
    let run = |sim: &mut Sim, name: Option<&str>, line: &str| {
        let got = cmd(sim, c, line);
        match name {
            Some(name) => check(flavor, proto, name, &got),
            None => assert!(!got.starts_with(b"-"), "{line}: {}", String::from_utf8_lossy(&got)),
        }
    };
    run(&mut sim, None, "FLUSHALL");
    run(&mut sim, Some("group_create"), "XGROUP CREATE s g 0 MKSTREAM");
    run(&mut sim, Some("busygroup"), "XGROUP CREATE s g 0 MKSTREAM");
    for n in 1..=3 {
        run(&mut sim, None, &format!("XADD s {n}-0 f v{n}"));
    }
    run(&mut sim, Some("read_new"), "XREADGROUP GROUP g A COUNT 10 STREAMS s >");
    run(&mut sim, Some("read_pending_page"), "XREADGROUP GROUP g A COUNT 2 STREAMS s 0");
    run(&mut sim, Some("read_pending_empty"), "XREADGROUP GROUP g A COUNT 2 STREAMS s 3-0");
    run(&mut sim, Some("xdel"), "XDEL s 2-0");
    run(&mut sim, Some("read_pending_deleted"), "XREADGROUP GROUP g A STREAMS s 0");
    // BLOCK 10 with nothing new parks; the timeout answers nil.
    let got = cmd(&mut sim, c, "XREADGROUP GROUP g A COUNT 10 BLOCK 10 STREAMS s >");
    assert!(got.is_empty() && sim.is_blocked(c));
    assert_eq!(sim.next_wakeup(), Some(sim.now() + 10));
    sim.advance_to(sim.now() + 10);
    check(flavor, proto, "read_new_nil", &sim.output(c));
    sim.advance_to(sim.now() + 50);
    run(&mut sim, Some("autoclaim"), "XAUTOCLAIM s g B 10 0-0");
    run(&mut sim, Some("read_pending_after_claim"), "XREADGROUP GROUP g B STREAMS s 0");
    run(&mut sim, Some("xack_1"), "XACK s g 1-0");
    run(&mut sim, Some("xack_0"), "XACK s g 1-0");
    run(&mut sim, Some("xack_many"), "XACK s g 3-0 9-0");
    run(&mut sim, None, "XGROUP CREATE s2 g2 0 MKSTREAM");
    for n in 1..=30 {
        run(&mut sim, None, &format!("XADD s2 {n}-0 f v{n}"));
    }
    run(&mut sim, None, "XREADGROUP GROUP g2 A COUNT 100 STREAMS s2 >");
    run(&mut sim, Some("autoclaim_scan_cursor"), "XAUTOCLAIM s2 g2 B 3600000 0-0 COUNT 1");
    run(&mut sim, Some("autoclaim_done"), "XAUTOCLAIM s2 g2 B 3600000 0-0 COUNT 100");
    run(&mut sim, Some("nogroup_read"), "XREADGROUP GROUP nog A STREAMS s 0");
    run(&mut sim, Some("nogroup_autoclaim"), "XAUTOCLAIM s nog A 10 0-0");
    run(&mut sim, Some("count_zero"), "XREADGROUP GROUP g A COUNT 0 STREAMS s 0");

    for (name, key, group, action) in [
        ("key_deleted_while_parked", "s3", "g3", "DEL s3"),
        ("group_destroyed_while_parked", "s4", "g4", "XGROUP DESTROY s4 g4"),
    ] {
        let c1 = hello(&mut sim);
        let c2 = hello(&mut sim);
        assert_eq!(cmd(&mut sim, c1, &format!("XGROUP CREATE {key} {group} $ MKSTREAM")), b"+OK\r\n");
        let got =
            cmd(&mut sim, c1, &format!("XREADGROUP GROUP {group} A COUNT 10 BLOCK 600 STREAMS {key} >"));
        assert!(got.is_empty() && sim.is_blocked(c1));
        sim.advance_to(sim.now() + 100);
        assert_eq!(cmd(&mut sim, c2, action), b":1\r\n");
        if sim.is_blocked(c1) {
            sim.advance_to(sim.now() + 500);
        }
        check(flavor, proto, name, &sim.output(c1));
        assert_eq!(cmd(&mut sim, c1, "PING"), b"+PONG\r\n");
    }

    run(&mut sim, Some("xpending_extended"), "XPENDING s g - + 10");
    run(&mut sim, Some("xpending_summary"), "XPENDING s g");
    run(&mut sim, Some("xinfo_groups"), "XINFO GROUPS s");
    run(&mut sim, Some("select"), "SELECT 0");
    run(&mut sim, Some("setname"), "CLIENT SETNAME pelican-test");
    run(&mut sim, Some("ping"), "PING");
    run(&mut sim, Some("wrongpass"), "AUTH nobody wrongpass");

    // A bare HELLO: the server map, in the connection's protocol, with `role master`.
    let got = cmd(&mut sim, c, "HELLO");
    assert_eq!(without_client_id(&got), without_client_id(&fixture(flavor, proto, "hello_info")));
    // WAIT 1 10 without a replica: 0, after the timeout.
    let got = cmd(&mut sim, c, "WAIT 1 10");
    assert!(got.is_empty() && sim.is_blocked(c));
    sim.advance_to(sim.now() + 10);
    check(flavor, proto, "wait_0", &sim.output(c));
    if flavor == "redis-6.2" || flavor == "redis-7.0" {
        run(&mut sim, Some("waitaof"), "WAITAOF 0 1 10");
    } // (Valkey and 8.10, without `appendonly`, answer [0, 0]: the sim's file is always written.)
}

/// A `ROLE` reply with its numbers (ports, offsets: not stable across captures) blanked.
fn role_shape(reply: &[u8]) -> String {
    let text = String::from_utf8_lossy(reply).into_owned();
    let mut parts: Vec<String> = text.split("\r\n").map(str::to_string).collect();
    for i in 0..parts.len() {
        let number = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
        if parts[i].starts_with(':') && number(&parts[i][1..]) {
            parts[i] = ":<n>".into();
        } else if number(&parts[i]) {
            parts[i] = "<n>".into();
            parts[i - 1] = "$<len>".into();
        }
    }
    parts.join("\r\n")
}

/// The replies of a master and its replica (`NAMES_FAILOVER` in the capture script).
fn replay_replication(flavor: &str, proto: &str) {
    let mut sim = Sim::new(options(flavor).with_replica(100));
    let m = sim.connect();
    let r = sim.connect_replica().expect("a replica");
    if proto == "resp3" {
        let _ = cmd(&mut sim, m, "HELLO 3");
    }
    assert_eq!(cmd(&mut sim, m, "XGROUP CREATE s g 0 MKSTREAM"), b"+OK\r\n");
    assert_eq!(cmd(&mut sim, m, "XADD s 1-0 f v"), b"$3\r\n1-0\r\n");
    check(flavor, proto, "wait_1", &cmd(&mut sim, m, "WAIT 1 1000"));
    let hello = cmd(&mut sim, r, if proto == "resp3" { "HELLO 3" } else { "HELLO" });
    assert_eq!(without_client_id(&hello), without_client_id(&fixture(flavor, proto, "hello_replica")));
    let role = cmd(&mut sim, r, "ROLE");
    assert_eq!(role_shape(&role), role_shape(&fixture(flavor, proto, "role_replica")), "{flavor} {proto}");
    let role = cmd(&mut sim, m, "ROLE");
    assert_eq!(role_shape(&role), role_shape(&fixture(flavor, proto, "role_master")), "{flavor} {proto}");
    check(flavor, proto, "readonly", &cmd(&mut sim, r, "XACK s g 1-0"));
}

#[test]
fn every_fixture_matches() {
    for flavor in ["redis-6.2", "redis-7.0", "valkey-8.1", "redis-8.10"] {
        for proto in ["resp2", "resp3"] {
            replay(flavor, proto);
            replay_replication(flavor, proto);
        }
    }
}
