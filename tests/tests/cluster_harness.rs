//! Tests of the cluster harness (`pelican_tests::cluster`) against real 3+3 clusters of every
//! flavor, and (ignored: run by hand) the capture of the cluster reply fixtures in
//! `core/tests/fixtures/`.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pelican_tests::admin::Reply;
use pelican_tests::cluster::{Cluster, MASTERS, NODES, SLOT_RANGES};
use pelican_tests::server::Flavor;

/// Runs `test` once per flavor, each on its own thread named after the flavor (so panic
/// messages say which server failed), and reports which flavors failed.
fn each_flavor(test: fn(Flavor)) {
    let handles: Vec<_> = Flavor::ALL
        .into_iter()
        .map(|flavor| {
            let thread = std::thread::Builder::new()
                .name(flavor.name().to_string())
                .spawn(move || test(flavor))
                .expect("spawn a test thread");
            (flavor, thread)
        })
        .collect();
    let failed: Vec<&str> =
        handles.into_iter().filter_map(|(flavor, h)| h.join().is_err().then_some(flavor.name())).collect();
    assert!(failed.is_empty(), "failed on: {failed:?}");
}

/// The first key of `k0`, `k1`, … that `master` serves.
fn key_on(cluster: &Cluster, master: SocketAddr) -> String {
    (0..1000)
        .map(|i| format!("k{i}"))
        .find(|k| cluster.owner_of(k) == master)
        .unwrap_or_else(|| panic!("no key on {master}"))
}

fn text(reply: &Reply) -> String {
    reply.as_text().unwrap_or_else(|| format!("{reply:?}"))
}

/// Start, topology and slot coverage; writes through `admin_for`; a slot migration that
/// carries a group and its pending entry (with `-ASK`/`-MOVED`/`ASKING` checked half-way);
/// a failover that carries the data to the former replica.
#[test]
fn cluster_start_migrate_failover() {
    each_flavor(|flavor| {
        let started = Instant::now();
        let cluster = Cluster::start(flavor);
        eprintln!("{flavor}: cluster started in {:?}", started.elapsed());
        let nodes = cluster.addrs();
        assert_eq!(nodes.len(), NODES);
        assert_eq!(cluster.masters(), nodes[..MASTERS]);
        assert_eq!(cluster.replicas(), nodes[MASTERS..]);
        let ranges = cluster.slot_ranges();
        let layout: Vec<(u16, u16, SocketAddr, Vec<SocketAddr>)> =
            ranges.iter().map(|r| (r.start, r.end, r.master, r.replicas.clone())).collect();
        let expected: Vec<_> = (0..MASTERS)
            .map(|i| (SLOT_RANGES[i].0, SLOT_RANGES[i].1, nodes[i], vec![nodes[i + MASTERS]]))
            .collect();
        assert_eq!(layout, expected);
        let ids: BTreeSet<&str> = nodes.iter().map(|&n| cluster.node_id(n)).collect();
        assert_eq!(ids.len(), NODES);
        for (i, &node) in nodes.iter().enumerate() {
            assert_eq!(cluster.addr_of(i), node);
            assert_eq!(cluster.addr_of_id(cluster.node_id(node)), Some(node));
            let mut admin = cluster.admin(node);
            assert_eq!(text(&admin.call(&["CLUSTER", "MYID"])), cluster.node_id(node));
            let info = text(&admin.call(&["CLUSTER", "INFO"]));
            assert!(info.contains("cluster_state:ok") && info.contains("cluster_slots_ok:16384"), "{info}");
            if i < MASTERS {
                assert_eq!(cluster.replicas_of(node), [nodes[i + MASTERS]]);
            }
        }
        assert_eq!(cluster.slot_of("s"), 3828);
        assert_eq!(cluster.slot_of("{s}x"), 3828);

        // One stream on each master, written through `admin_for`.
        let keys: Vec<String> = nodes[..MASTERS].iter().map(|&m| key_on(&cluster, m)).collect();
        for (i, key) in keys.iter().enumerate() {
            let mut admin = cluster.admin_for(key);
            assert_eq!(admin.addr(), nodes[i]);
            admin.xadd_n(key, 5, 4);
            assert_eq!(admin.xlen(key), 5);
            let slot = cluster.slot_of(key);
            let moved = cluster.admin(nodes[(i + 1) % MASTERS]).cmd(&["XLEN", key]);
            assert_eq!(moved, Reply::Error(format!("MOVED {slot} {}", nodes[i])));
        }

        // Migrate the slot of a stream with a group and a pending entry.
        let key = &keys[0];
        let slot = cluster.slot_of(key);
        let mut source = cluster.admin_for(key);
        source.call(&["XGROUP", "CREATE", key, "g", "0"]);
        source.call(&["XREADGROUP", "GROUP", "g", "c", "COUNT", "2", "STREAMS", key, ">"]);
        let pending = source.xpending_all(key, "g");
        assert_eq!(pending.len(), 2);
        let to = nodes[1];
        let migration = cluster.begin_migration(slot, to);
        assert_eq!((migration.slot(), migration.source(), migration.target()), (slot, nodes[0], to));
        assert_eq!(migration.keys_moved(), 1);
        let ask = source.cmd(&["XLEN", key]);
        assert_eq!(ask, Reply::Error(format!("ASK {slot} {to}")));
        let mut target = cluster.admin(to);
        let moved = target.cmd(&["XLEN", key]);
        assert_eq!(moved, Reply::Error(format!("MOVED {slot} {}", nodes[0])));
        assert!(target.call(&["ASKING"]).is_ok());
        assert_eq!(target.cmd(&["XLEN", key]), Reply::Int(5));
        assert!(target.cmd(&["XLEN", key]).is_error_with("MOVED"), "one command per ASKING");
        migration.finish();
        assert_eq!(cluster.owner_of(key), to);
        let mut owner = cluster.admin_for(key);
        assert_eq!(owner.addr(), to);
        let moved_pending = owner.xpending_all(key, "g");
        let ids = |p: &[(String, String, i64, i64)]| {
            p.iter().map(|e| (e.0.clone(), e.1.clone(), e.3)).collect::<Vec<_>>()
        };
        assert_eq!(ids(&moved_pending), ids(&pending));
        assert_eq!(owner.xlen(key), 5);
        assert_eq!(source.cmd(&["XLEN", key]), Reply::Error(format!("MOVED {slot} {to}")));

        // Fail the new owner over to its replica: the data and the pending entries follow.
        let replica = nodes[1 + MASTERS];
        let failover_started = Instant::now();
        let promoted = cluster.failover(to);
        eprintln!("{flavor}: failover took {:?}", failover_started.elapsed());
        assert_eq!(promoted, replica);
        assert_eq!(cluster.owner_of(key), replica);
        assert_eq!(cluster.owner_of(&keys[1]), replica);
        assert_eq!(cluster.masters(), [nodes[0], nodes[2], replica]);
        assert_eq!(cluster.replicas(), [nodes[1], nodes[3], nodes[5]]);
        assert_eq!(cluster.replicas_of(replica), [to]);
        let mut owner = cluster.admin_for(key);
        assert_eq!(owner.addr(), replica);
        assert_eq!(owner.xlen(key), 5);
        assert_eq!(owner.xlen(&keys[1]), 5);
        assert_eq!(ids(&owner.xpending_all(key, "g")), ids(&pending));
        let role = cluster.admin(to).call(&["ROLE"]);
        assert_eq!(
            role.as_array().and_then(|r| r.first()).and_then(Reply::as_text).as_deref(),
            Some("slave")
        );
        let moved = cluster.admin(to).cmd(&["XLEN", key]);
        assert_eq!(moved, Reply::Error(format!("MOVED {slot} {replica}")));
    });
}

/// Migrations between every pair of masters and back, of slots with and without keys, and
/// a failover there and back again: the harness keeps its view straight.
#[test]
fn migrations_and_failovers_back_and_forth() {
    each_flavor(|flavor| {
        let cluster = Cluster::start(flavor);
        let nodes = cluster.addrs();
        let mut admin = cluster.admin_for("s");
        admin.xadd_n("s", 250, 8);
        let sets: Vec<Vec<String>> =
            (0..250).map(|i| vec!["SET".into(), format!("{{s}}{i}"), "v".into()]).collect();
        assert!(admin.pipeline(&sets).iter().all(Reply::is_ok));
        let slot = cluster.slot_of("s");
        for to in [nodes[2], nodes[1], nodes[0]] {
            let migration = cluster.begin_migration(slot, to);
            assert_eq!(migration.keys_moved(), 251);
            migration.finish();
            assert_eq!(cluster.owner_of("s"), to);
            assert_eq!(cluster.admin(to).xlen("s"), 250);
        }
        cluster.migrate_slot(0, nodes[2]);
        assert_eq!(cluster.owner_of_slot(0), nodes[2]);
        assert_eq!(cluster.slot_ranges().len(), 4);
        let promoted = cluster.failover(nodes[0]);
        assert_eq!(promoted, nodes[3]);
        let back = cluster.failover(promoted);
        assert_eq!(back, nodes[0]);
        assert_eq!(cluster.masters(), nodes[..MASTERS]);
        assert_eq!(cluster.admin_for("s").xlen("s"), 250);
    });
}

/// Atomic slot migration (`CLUSTER MIGRATION IMPORT`, Redis 8.10 only) of a stream's slot
/// with a group and pending entries: a client parked on the source gets `-MOVED <slot>
/// <target>`, the group and its pending list arrive as they were, the source answers
/// `-MOVED` after (never `-ASK`) and drops the keys; the slot moves back the same way and
/// then by `MIGRATE`.
#[test]
fn atomic_slot_migration_on_redis_810() {
    let cluster = Cluster::start(Flavor::Redis810);
    let nodes = cluster.addrs();
    let key = key_on(&cluster, nodes[0]);
    let slot = cluster.slot_of(&key);
    let mut source = cluster.admin_for(&key);
    source.xadd_n(&key, 5, 4);
    source.call(&["XGROUP", "CREATE", &key, "g", "0"]);
    source.call(&["XREADGROUP", "GROUP", "g", "c", "COUNT", "2", "STREAMS", &key, ">"]);
    let pending = source.xpending_all(&key, "g");
    assert_eq!(pending.len(), 2);
    // A reader of a group of its own, parked on the source while the slot moves.
    source.call(&["XGROUP", "CREATE", &key, "w", "$"]);
    let parked = {
        let (at, key) = (nodes[0], key.clone());
        std::thread::spawn(move || {
            let mut conn = pelican_tests::admin::Admin::connect(at);
            conn.cmd(&["XREADGROUP", "GROUP", "w", "p", "BLOCK", "8000", "STREAMS", &key, ">"])
        })
    };
    let mut blocked =
        || text(&source.call(&["CLIENT", "LIST"])).lines().any(|l| l.contains("cmd=xreadgroup"));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !blocked() {
        assert!(Instant::now() < deadline, "the reader never parked");
        std::thread::sleep(Duration::from_millis(10));
    }

    let to = nodes[1];
    let task = cluster.migrate_slot_atomically(slot, to);
    assert_eq!(parked.join().unwrap(), Reply::Error(format!("MOVED {slot} {to}")));
    let status = cluster.admin(to).call(&["CLUSTER", "MIGRATION", "STATUS", "ID", &task]);
    let fields: Vec<String> = status.as_array().unwrap()[0].as_array().unwrap().iter().map(text).collect();
    for (name, value) in [
        ("slots", format!("{slot}-{slot}")),
        ("source", cluster.node_id(nodes[0]).to_string()),
        ("dest", cluster.node_id(to).to_string()),
        ("operation", "import".to_string()),
        ("state", "completed".to_string()),
    ] {
        let at = fields.iter().position(|f| f == name).unwrap_or_else(|| panic!("no {name}: {fields:?}"));
        assert_eq!(fields[at + 1], value, "{name}");
    }
    assert_eq!(cluster.owner_of(&key), to);
    let mut owner = cluster.admin_for(&key);
    let ids = |p: &[(String, String, i64, i64)]| {
        p.iter().map(|e| (e.0.clone(), e.1.clone(), e.3)).collect::<Vec<_>>()
    };
    assert_eq!(ids(&owner.xpending_all(&key, "g")), ids(&pending));
    assert_eq!(owner.xlen(&key), 5);
    let groups = format!("{:?}", owner.call(&["XINFO", "GROUPS", &key]));
    let last = format!("Bulk(\"last-delivered-id\"), Bulk(\"{}\")", pending[1].0);
    assert!(groups.contains(&last), "last-delivered-id kept: {groups}");
    assert_eq!(source.cmd(&["XLEN", &key]), Reply::Error(format!("MOVED {slot} {to}")));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = source.call(&["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()]);
        if left == Reply::Int(0) {
            break;
        }
        assert!(Instant::now() < deadline, "the source kept the slot's keys: {left:?}");
        std::thread::sleep(Duration::from_millis(20));
    }

    cluster.migrate_slot_atomically(slot, nodes[0]);
    assert_eq!(cluster.owner_of(&key), nodes[0]);
    cluster.migrate_slot(slot, nodes[2]);
    let mut owner = cluster.admin_for(&key);
    assert_eq!(owner.addr(), nodes[2]);
    assert_eq!(ids(&owner.xpending_all(&key, "g")), ids(&pending));
}

// ---------------------------------------------------------------- fixture capture

/// Where the cluster fixtures go: `core/tests/fixtures`.
fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/tests/fixtures")
}

/// A raw connection that returns each reply's exact bytes: one complete RESP2 or RESP3
/// frame per command, nothing more.
struct Raw {
    label: String,
    stream: TcpStream,
    resp3: bool,
    buf: Vec<u8>,
}

impl Raw {
    /// Connects to `addr`; with `resp3`, sends `HELLO 3` first and checks it answered a map.
    fn connect(addr: SocketAddr, resp3: bool, label: &str) -> Raw {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut raw = Raw { label: label.to_string(), stream, resp3, buf: Vec::new() };
        if resp3 {
            let hello = raw.cmd(&["HELLO", "3"]);
            assert!(
                hello.starts_with(b"%"),
                "{label}: HELLO 3 answered {:?}",
                String::from_utf8_lossy(&hello)
            );
        }
        raw
    }

    /// Sends one command (an array of bulk strings) and returns its reply's bytes.
    fn cmd(&mut self, args: &[&str]) -> Vec<u8> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            out.extend_from_slice(format!("${}\r\n{arg}\r\n", arg.len()).as_bytes());
        }
        self.stream.write_all(&out).expect("write");
        loop {
            let len = if self.resp3 {
                redis_protocol::resp3::decode::complete::decode(&self.buf).map(|f| f.map(|(_, n)| n))
            } else {
                redis_protocol::resp2::decode::decode(&self.buf).map(|f| f.map(|(_, n)| n))
            };
            match len {
                Ok(Some(n)) => {
                    let frame: Vec<u8> = self.buf.drain(..n).collect();
                    assert!(self.buf.is_empty(), "{}: bytes after a reply: {:?}", self.label, self.buf);
                    assert!(!frame.starts_with(b">"), "{}: a push frame", self.label);
                    return frame;
                }
                Ok(None) => {}
                Err(e) => panic!(
                    "{}: undecodable reply {:?}: {e:?}",
                    self.label,
                    String::from_utf8_lossy(&self.buf)
                ),
            }
            let mut chunk = [0u8; 65536];
            let n = self.stream.read(&mut chunk).expect("read");
            assert!(n > 0, "{}: connection closed", self.label);
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// Captures the cluster fixtures of one flavor, both protocols; returns
/// `(proto, name, bytes)` for each.
fn capture(flavor: Flavor) -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let cluster = Cluster::start(flavor);
    let nodes = cluster.addrs();
    // Node 1 serves 5461-10922: `s` (3828) is node 0's, `k` (7629) is node 1's, `a` (15495)
    // and `b` (3300) are in two slots.
    assert_eq!((cluster.slot_of("s"), cluster.slot_of("k")), (3828, 7629));
    assert_eq!((cluster.owner_of("s"), cluster.owner_of("k")), (nodes[0], nodes[1]));
    let mut setup = cluster.admin(nodes[1]);
    setup.call(&["XGROUP", "CREATE", "k", "g", "0", "MKSTREAM"]);
    setup.call(&["XADD", "k", "1-0", "f", "v1"]);

    let mut got = Vec::new();
    let mut conns: Vec<(&'static str, Raw)> = ["resp2", "resp3"]
        .into_iter()
        .map(|proto| (proto, Raw::connect(nodes[1], proto == "resp3", &format!("{flavor}/{proto}"))))
        .collect();
    for (proto, conn) in &mut conns {
        let mut fx = |name: &'static str, args: &[&str]| {
            let reply = conn.cmd(args);
            got.push((*proto, name, reply.clone()));
            reply
        };
        let myid = fx("cluster-myid", &["CLUSTER", "MYID"]);
        assert!(String::from_utf8_lossy(&myid).contains(cluster.node_id(nodes[1])));
        fx("cluster-slots", &["CLUSTER", "SLOTS"]);
        let shards = fx("cluster-shards", &["CLUSTER", "SHARDS"]);
        assert_eq!(
            shards.starts_with(b"-"),
            flavor == Flavor::Redis62,
            "{:?}",
            String::from_utf8_lossy(&shards)
        );
        let moved = fx("moved", &["XREADGROUP", "GROUP", "g", "c", "COUNT", "10", "STREAMS", "s", ">"]);
        assert_eq!(moved, format!("-MOVED 3828 {}\r\n", nodes[0]).into_bytes());
        let cross =
            fx("crossslot", &["XREADGROUP", "GROUP", "g", "c", "COUNT", "10", "STREAMS", "a", "b", ">", ">"]);
        assert!(cross.starts_with(b"-CROSSSLOT "), "{:?}", String::from_utf8_lossy(&cross));
    }
    let migration = cluster.begin_migration(7629, nodes[2]);
    for (proto, conn) in &mut conns {
        let ask = conn.cmd(&["XREADGROUP", "GROUP", "g", "c", "COUNT", "10", "STREAMS", "k", ">"]);
        assert_eq!(ask, format!("-ASK 7629 {}\r\n", nodes[2]).into_bytes());
        got.push((*proto, "ask", ask));
    }
    migration.finish();
    got
}

/// Captures `cluster-myid`, `cluster-slots`, `cluster-shards`, `moved`, `crossslot` and `ask`
/// into `core/tests/fixtures/<flavor>/<proto>/` (see the README there). Run by hand:
/// `cargo test -p pelican-tests --test cluster_harness -- --ignored capture_cluster_fixtures`.
#[test]
#[ignore = "writes core/tests/fixtures; run by hand to recapture"]
fn capture_cluster_fixtures() {
    let handles: Vec<_> = Flavor::ALL
        .into_iter()
        .map(|flavor| {
            std::thread::Builder::new()
                .name(flavor.name().to_string())
                .spawn(move || (flavor, capture(flavor)))
                .expect("spawn a capture thread")
        })
        .collect();
    let captured: Vec<_> = handles.into_iter().map(|h| h.join().expect("a capture failed")).collect();
    for (flavor, fixtures) in captured {
        for (proto, name, bytes) in fixtures {
            let dir = fixtures_dir().join(flavor.name()).join(proto);
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join(format!("{name}.resp"));
            let part = dir.join(format!("{name}.resp.part"));
            std::fs::write(&part, &bytes).unwrap();
            std::fs::rename(&part, &path).unwrap();
            eprintln!("wrote {} ({} bytes)", path.display(), bytes.len());
        }
    }
}
