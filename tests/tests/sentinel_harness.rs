//! The Sentinel topology harness itself, on every server: it forms, a killed master is
//! replaced and comes back as a replica, `SENTINEL FAILOVER` swaps the nodes, a pair swaps
//! roles by hand, sentinels with a password of their own, and TLS (Redis 7.0 and 8.10).

use std::thread;
use std::time::Instant;

use pelican_tests::sentinel::{Topology, TopologyOptions};
use pelican_tests::server::{Flavor, Options, Tls};

/// Runs `check` on each flavor at once; fails naming those that failed.
fn on_each(name: &str, flavors: &[Flavor], check: fn(Flavor)) {
    let threads: Vec<_> = flavors
        .iter()
        .map(|&flavor| {
            let label = format!("{name} on {flavor}");
            (label.clone(), thread::Builder::new().name(label).spawn(move || check(flavor)).unwrap())
        })
        .collect();
    let failed: Vec<String> =
        threads.into_iter().filter_map(|(label, th)| th.join().is_err().then_some(label)).collect();
    assert!(failed.is_empty(), "failed: {failed:?}");
}

#[test]
fn a_killed_master_is_replaced_and_comes_back_as_a_replica() {
    on_each("kill", &Flavor::ALL, |flavor| {
        let mut topology = Topology::start(flavor);
        let (master, replica) = (topology.master(), topology.replica());
        assert_eq!(master, topology.nodes()[0].addr());
        topology.admin(master).xadd("s", &[("f", "v")]);
        let killed_at = Instant::now();
        let old = topology.kill_master();
        eprintln!("{flavor}: the sentinels named a new master {:?} after the kill", killed_at.elapsed());
        assert_eq!((old, topology.master()), (master, replica));
        assert_eq!(topology.admin(replica).xlen("s"), 1, "the promoted replica has the entry");
        topology.restart(old);
        let master = topology.wait_settled();
        let entries = topology.admin(master).xlen("s");
        assert_eq!(entries, 1, "{flavor}: the entry survived on the master it settled on");
    });
}

#[test]
fn two_failovers_by_request() {
    on_each("failover", &Flavor::ALL, |flavor| {
        let topology = Topology::start(flavor);
        let (master, replica) = (topology.master(), topology.replica());
        assert_eq!(topology.failover(), replica);
        topology.wait_replica_of(master, replica);
        assert_eq!(topology.failover(), master);
    });
}

#[test]
fn a_pair_swaps_roles_by_hand() {
    on_each("swap", &Flavor::ALL, |flavor| {
        let topology = Topology::start_pair(flavor);
        let (master, replica) = (topology.master(), topology.replica());
        assert_eq!(topology.swap_roles(), replica);
        assert_eq!(topology.master(), replica);
        assert_eq!(topology.replica(), master);
    });
}

#[test]
fn sentinels_with_a_password_of_their_own() {
    on_each("sentinel password", &[Flavor::Redis62, Flavor::Valkey81], |flavor| {
        let options = TopologyOptions {
            sentinel_pass: Some("s3ntinel".into()),
            data: Options::default().with_requirepass("d4ta"),
            ..TopologyOptions::default()
        };
        let topology = Topology::start_with(flavor, options);
        let sentinels = topology.sentinels();
        assert!(sentinels.auth.is_some());
        let old = topology.master();
        assert_ne!(topology.failover(), old);
    });
}

#[test]
fn tls_topologies() {
    on_each("tls", &Flavor::TLS, |flavor| {
        let options = TopologyOptions {
            data: Options::default().with_tls(Tls::default()),
            ..TopologyOptions::default()
        };
        let topology = Topology::start_with(flavor, options);
        assert_eq!(topology.sentinels().nodes.len(), 3);
        let old = topology.master();
        assert_ne!(topology.failover(), old);
    });
}
