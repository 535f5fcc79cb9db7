//! Tests of the harness itself, against every server flavor.

use std::time::Instant;

use pelican_tests::admin::{Admin, Reply};
use pelican_tests::server::{Flavor, Options, Server};

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

#[test]
fn flavor_names_and_binaries() {
    let names: Vec<_> = Flavor::ALL.iter().map(|f| f.name()).collect();
    assert_eq!(names, ["redis-6.2", "redis-7.0", "valkey-8.1", "redis-8.10"]);
    for flavor in Flavor::ALL {
        let binary = flavor.binary();
        assert!(binary.ends_with(format!(".servers/{}", flavor.name())), "{binary:?}");
    }
}

#[test]
fn ping_and_pipelined_xadd() {
    each_flavor(|flavor| {
        let server = Server::start(flavor);
        assert_eq!(server.flavor(), flavor);
        assert_eq!(server.addr().port(), server.port());
        let mut admin = Admin::connect(server.addr());
        assert_eq!(admin.cmd(&["PING"]), Reply::Simple("PONG".into()));

        let ids = admin.xadd_n("s", 1000, 16);
        assert_eq!(ids.len(), 1000);
        assert_eq!(admin.xlen("s"), 1000);
        let first = admin.call(&["XRANGE", "s", "-", "+", "COUNT", "1"]);
        let entry = &first.as_array().unwrap()[0];
        let entry = entry.as_array().unwrap();
        assert_eq!(entry[0].as_text().as_deref(), Some(ids[0].as_str()));
        assert_eq!(
            entry[1],
            Reply::Array(vec![Reply::Bulk(b"f".to_vec()), Reply::Bulk(b"0000000000000000".to_vec())])
        );

        let id = admin.xadd("s", &[("k", "v"), ("k2", "v2")]);
        assert!(id.contains('-'), "{id}");
        assert_eq!(admin.xlen("s"), 1001);
        assert!(admin.cmd(&["XADD"]).is_error());
    });
}

#[test]
fn xadd_n_handles_100k_entries_quickly() {
    let server = Server::start(Flavor::Redis70);
    let mut admin = server.admin();
    let started = Instant::now();
    let ids = admin.xadd_n("big", 100_000, 16);
    let took = started.elapsed();
    assert_eq!(ids.len(), 100_000);
    assert_eq!(admin.xlen("big"), 100_000);
    assert!(took.as_secs() < 10, "100k XADDs took {took:?}");
    eprintln!("100k pipelined XADDs took {took:?}");
}

#[test]
fn groups_and_pending() {
    each_flavor(|flavor| {
        let server = Server::start(flavor);
        let mut admin = server.admin();
        assert!(!admin.group_exists("s", "g"), "missing key");
        admin.xadd_n("s", 10, 8);
        assert!(!admin.group_exists("s", "g"), "missing group");
        admin.call(&["XGROUP", "CREATE", "s", "g", "0"]);
        assert!(admin.group_exists("s", "g"));
        assert!(!admin.group_exists("s", "other"));
        assert_eq!(admin.xpending_count("s", "g"), 0);
        assert!(admin.xpending_all("s", "g").is_empty());

        admin.call(&["XREADGROUP", "GROUP", "g", "c1", "COUNT", "3", "STREAMS", "s", ">"]);
        admin.call(&["XREADGROUP", "GROUP", "g", "c2", "COUNT", "4", "STREAMS", "s", ">"]);
        assert_eq!(admin.xpending_count("s", "g"), 7);
        let c1 = admin.xpending_consumer("s", "g", "c1");
        assert_eq!(c1.len(), 3);
        assert!(c1.iter().all(|(_, owner, idle, n)| owner == "c1" && *idle >= 0 && *n == 1));
        let all = admin.xpending_all("s", "g");
        assert_eq!(all.len(), 7);
        assert_eq!(all.iter().filter(|p| p.1 == "c2").count(), 4);

        let acked = admin.call(&["XACK", "s", "g", &c1[0].0]);
        assert_eq!(acked, Reply::Int(1));
        assert_eq!(admin.xpending_count("s", "g"), 6);
    });
}

#[test]
#[should_panic(expected = "NOGROUP")]
fn xpending_on_missing_group_panics() {
    let server = Server::start(Flavor::Redis62);
    let mut admin = server.admin();
    admin.xadd_n("s", 1, 1);
    admin.xpending_count("s", "nope");
}

#[test]
fn aof_data_survives_kill9_and_restart() {
    each_flavor(|flavor| {
        let mut server = Server::start_with(flavor, Options::default().with_aof());
        let port = server.port();
        let pid = server.pid();
        let mut admin = server.admin();
        admin.xadd_n("s", 500, 16);
        admin.call(&["XGROUP", "CREATE", "s", "g", "0"]);
        admin.call(&["XREADGROUP", "GROUP", "g", "c", "COUNT", "5", "STREAMS", "s", ">"]);
        drop(admin);

        server.kill9();
        assert!(!server.is_running());
        assert_eq!(server.pid(), None);
        assert!(Admin::try_connect(server.addr(), std::time::Duration::from_secs(1)).is_err());

        server.restart();
        assert!(server.is_running());
        assert_eq!(server.port(), port);
        assert_ne!(server.pid(), pid);
        let mut admin = server.admin();
        assert_eq!(admin.xlen("s"), 500);
        assert!(admin.group_exists("s", "g"));
        assert_eq!(admin.xpending_count("s", "g"), 5);
        assert_eq!(admin.xpending_consumer("s", "g", "c").len(), 5);
    });
}

#[test]
fn restart_without_aof_starts_empty() {
    let mut server = Server::start(Flavor::Valkey81);
    server.admin().xadd_n("s", 3, 1);
    server.restart();
    assert_eq!(server.admin().xlen("s"), 0);
}

#[test]
fn acl_users_and_requirepass() {
    each_flavor(|flavor| {
        let options = Options::default()
            .with_requirepass("top-secret")
            .with_full_user("alice", "s3cret")
            .with_acl_user("user bob on >b0b ~* +@all");
        let server = Server::start_with(flavor, options);
        let addr = server.addr();

        let mut alice = Admin::connect_auth(addr, "alice", "s3cret").expect("alice");
        assert_eq!(alice.call(&["ACL", "WHOAMI"]).as_text().as_deref(), Some("alice"));
        alice.xadd("s", &[("f", "v")]);
        let mut bob = Admin::connect_auth(addr, "bob", "b0b").expect("bob");
        assert_eq!(bob.xlen("s"), 1);

        let err = Admin::connect_auth(addr, "alice", "wrong").expect_err("wrong password");
        assert!(err.starts_with("WRONGPASS"), "{err}");
        assert!(Admin::connect_auth(addr, "mallory", "x").is_err());

        // requirepass protects the default user.
        let mut anon = Admin::connect(addr);
        assert!(anon.cmd(&["XLEN", "s"]).is_error_with("NOAUTH"));
        assert!(Admin::connect_auth(addr, "default", "top-secret").is_ok());
        assert_eq!(server.admin().xlen("s"), 1);
    });
}

#[test]
fn clients_by_name() {
    each_flavor(|flavor| {
        let server = Server::start(flavor);
        let mut admin = server.admin();
        let mut victim = server.admin();
        victim.client_setname("victim");
        let mut twin = server.admin();
        twin.client_setname("victim");
        assert!(admin.client_id_by_name("victim").is_some());
        assert_eq!(admin.client_ids_by_name("victim").len(), 2);
        assert_eq!(admin.client_id_by_name("nobody"), None);

        assert_eq!(admin.client_kill_by_name("victim"), 2);
        assert!(victim.try_cmd(&["PING"]).is_err());
        assert!(twin.try_cmd(&["PING"]).is_err());
        assert_eq!(admin.client_kill_by_name("victim"), 0);
        assert_eq!(admin.cmd(&["PING"]), Reply::Simple("PONG".into()));
    });
}

#[test]
fn servers_are_independent_and_clean_up() {
    let a = Server::start(Flavor::Redis62);
    let b = Server::start(Flavor::Redis62);
    assert_ne!(a.port(), b.port());
    assert_ne!(a.dir(), b.dir());
    a.admin().xadd("only-a", &[("f", "v")]);
    assert_eq!(b.admin().xlen("only-a"), 0);

    let dir = a.dir().to_path_buf();
    let addr = a.addr();
    assert!(dir.is_dir());
    assert!(a.log_path().is_file());
    let log = a.log_tail(100);
    assert!(log.contains("eady to accept connections"), "{log}");
    drop(a);
    assert!(!dir.exists(), "{dir:?} not removed");
    assert!(Admin::try_connect(addr, std::time::Duration::from_secs(1)).is_err());
}

#[test]
#[should_panic(expected = "scripts/install-servers")]
fn missing_binary_panics_with_install_hint() {
    // Not the env var: tests run in parallel threads of one process.
    let nowhere = std::env::temp_dir().join(format!("pelican-tests-no-servers-{}", std::process::id()));
    let binary = nowhere.join(Flavor::Redis70.name());
    Server::start_from(Flavor::Redis70, binary, Options::default());
}

#[test]
fn restart_reloads_a_large_aof() {
    each_flavor(|flavor| {
        let mut server = Server::start_with(flavor, Options::default().with_aof());
        let started = Instant::now();
        server.admin().xadd_n("s", 100_000, 16);
        let wrote = started.elapsed();
        server.kill9();
        let started = Instant::now();
        server.restart();
        let reloaded = started.elapsed();
        assert_eq!(server.admin().xlen("s"), 100_000);
        eprintln!("{flavor}: 100k XADDs with AOF {wrote:?}, kill -9 + restart {reloaded:?}");
    });
}
