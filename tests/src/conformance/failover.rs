//! Failover stories (a master, its replica and three sentinels of each server: see
//! [`crate::sentinel`]): a master killed under load, failovers by request under load, a
//! consumer started while the master is down, one pointed at a replica, and a primary
//! endpoint (a host name) that moves to the promoted node. Part of the conformance suite (see
//! the parent module); each story runs on every server at once, Redis 6.2 in RESP2, the others
//! in RESP3.
//!
//! A producer beside the consumer adds entries to whatever master the sentinels name, each
//! confirmed with `WAIT 1` (it reached the replica): a confirmed entry must never be lost,
//! whatever the failover; one that was not may be (replication is asynchronous), and an ack
//! may be lost too, so entries may come twice (counted and told, not refused).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use pelican::{Config, Entry, HostPort, Protocol, Verdict};

use super::kit::{wait_until, Handler, Transport, GROUP};
use crate::admin::{Admin, Reply};
use crate::sentinel::{Topology, TopologyOptions, SERVICE};
use crate::server::{Endpoint, Flavor, Lookup, Options, Tls};

/// The stream of every story.
const STREAM: &str = "orders";

/// How long a story waits for the entries it expects.
const CONSUMED: Duration = Duration::from_secs(40);

/// Runs `story` on a topology of each server (started as `options` says), in parallel; fails
/// naming those that failed.
fn on_every_topology(
    name: &str,
    flavors: &[Flavor],
    options: TopologyOptions,
    story: fn(Topology, Protocol),
) {
    let threads: Vec<_> = flavors
        .iter()
        .map(|&flavor| {
            let label = format!("{name} on {}", flavor.name());
            let protocol = if flavor == Flavor::Redis62 { Protocol::Resp2 } else { Protocol::Resp3 };
            let options = options.clone();
            let run = move || story(Topology::start_with(flavor, options), protocol);
            (label.clone(), thread::Builder::new().name(label).spawn(run).unwrap())
        })
        .collect();
    let failed: Vec<String> =
        threads.into_iter().filter_map(|(label, th)| th.join().is_err().then_some(label)).collect();
    assert!(failed.is_empty(), "{} of {} topologies failed: {failed:?}", failed.len(), flavors.len());
}

/// A consumer's settings for the stories: short beats and backoff, as the suite's.
fn config(protocol: Protocol) -> Config {
    Config::new(STREAM, GROUP, "c1")
        .protocol(protocol)
        .count(50)
        .beat(Duration::from_millis(200))
        .min_idle(Duration::from_secs(3600))
        .backoff(Duration::from_millis(20), Duration::from_millis(500))
}

/// Every handling, with when it happened.
#[derive(Clone, Default)]
struct Handled(Arc<Mutex<Vec<(String, Instant)>>>);

impl Handled {
    fn handler(&self) -> Handler {
        let all = self.0.clone();
        Box::new(move |e: &Entry| {
            all.lock().unwrap().push((String::from_utf8_lossy(e.id()).into_owned(), Instant::now()));
            Verdict::Ack
        })
    }

    fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    /// When each id was first handled, and how many handlings there were in all.
    fn firsts(&self) -> (BTreeMap<String, Instant>, usize) {
        let all = self.0.lock().unwrap();
        let mut firsts = BTreeMap::new();
        for (id, at) in all.iter() {
            firsts.entry(id.clone()).or_insert(*at);
        }
        (firsts, all.len())
    }
}

/// An entry the producer added: its id, when, and whether `WAIT 1` confirmed it reached the
/// replica.
#[derive(Clone, Debug)]
struct Added {
    id: String,
    at: Instant,
    confirmed: bool,
}

/// A producer adding an entry every 2 ms to the master the sentinels name (asked again
/// whenever a write fails), each followed by `WAIT 1 200`.
struct Producer {
    added: Arc<Mutex<Vec<Added>>>,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl Producer {
    fn start(sentinels: Vec<SocketAddr>, password: Option<String>) -> Producer {
        let added = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (list, halt) = (added.clone(), stop.clone());
        let thread = thread::spawn(move || {
            let mut admin: Option<Admin> = None;
            let mut n = 0u64;
            while !halt.load(Ordering::Relaxed) {
                let Some(to) = admin.as_mut() else {
                    admin = master_of(&sentinels).and_then(|addr| connect(addr, password.as_deref()));
                    thread::sleep(Duration::from_millis(20));
                    continue;
                };
                n += 1;
                let added = to.try_cmd(&["XADD", STREAM, "*", "n", &n.to_string()]);
                let Ok(Reply::Bulk(id)) = added else {
                    admin = None; // a failover: find the master again
                    continue;
                };
                let at = Instant::now();
                let confirmed = matches!(to.try_cmd(&["WAIT", "1", "200"]), Ok(Reply::Int(1..)));
                let id = String::from_utf8_lossy(&id).into_owned();
                list.lock().unwrap().push(Added { id, at, confirmed });
                thread::sleep(Duration::from_millis(2));
            }
        });
        Producer { added, stop, thread }
    }

    fn added(&self) -> Vec<Added> {
        self.added.lock().unwrap().clone()
    }

    fn finish(self) -> Vec<Added> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("the producer");
        self.added.lock().unwrap().clone()
    }
}

/// The master the first sentinel that answers names.
fn master_of(sentinels: &[SocketAddr]) -> Option<SocketAddr> {
    sentinels.iter().find_map(|&sentinel| {
        let mut admin = Admin::try_connect(sentinel, Duration::from_millis(500)).ok()?;
        let reply = admin.try_cmd(&["SENTINEL", "get-master-addr-by-name", SERVICE]).ok()?;
        let [host, port] = reply.as_array()? else { return None };
        format!("{}:{}", host.as_text()?, port.as_text()?).parse().ok()
    })
}

fn connect(addr: SocketAddr, password: Option<&str>) -> Option<Admin> {
    let mut admin = Admin::try_connect(addr, Duration::from_millis(500)).ok()?;
    if let Some(pass) = password {
        admin.try_cmd(&["AUTH", pass]).ok()?;
    }
    Some(admin)
}

/// Every confirmed entry handled (within [`CONSUMED`]), nothing pending on the master in the
/// end; returns the handlings in all and the distinct entries handled.
fn every_confirmed_handled(topology: &Topology, handled: &Handled, added: &[Added]) -> (usize, usize) {
    let confirmed: Vec<&Added> = added.iter().filter(|a| a.confirmed).collect();
    assert!(!confirmed.is_empty(), "{}: no entry was confirmed", topology.flavor());
    let all_in = || {
        let (firsts, _) = handled.firsts();
        confirmed.iter().all(|a| firsts.contains_key(&a.id))
    };
    if !wait_until(CONSUMED, all_in) {
        let (firsts, _) = handled.firsts();
        let lost: Vec<&str> =
            confirmed.iter().filter(|a| !firsts.contains_key(&a.id)).map(|a| &a.id[..]).collect();
        panic!(
            "{}: {} confirmed entries never handled: {:?}…",
            topology.flavor(),
            lost.len(),
            &lost[..lost.len().min(5)]
        );
    }
    let pending = || topology.admin(topology.master()).xpending_count(STREAM, GROUP) == 0;
    assert!(wait_until(CONSUMED, pending), "{}: entries left pending", topology.flavor());
    let (firsts, total) = handled.firsts();
    (total, firsts.len())
}

/// The group, from the start of the stream, on the master, replicated.
fn make_group(topology: &Topology) {
    let mut admin = topology.admin(topology.master());
    admin.cmd(&["XGROUP", "CREATE", STREAM, GROUP, "0", "MKSTREAM"]);
    admin.cmd(&["WAIT", "1", "5000"]);
}

/// The master is killed (`kill -9`) under load: the sentinels promote the replica, the
/// consumer hears of it (a lost connection, then `+switch-master`) and goes on there; the old
/// master, restarted, comes back as a replica and the consumer stays where the sentinels say.
/// Every confirmed entry is handled; the time from the kill to the first entry added to the
/// new master and handled is told (the goal: within `down-after-milliseconds` + 2 s).
pub fn sentinel_master_killed<T: Transport>() {
    let options = TopologyOptions { data: Options::default().with_aof(), ..TopologyOptions::default() };
    on_every_topology("sentinel_master_killed", &Flavor::ALL, options, |mut topology, protocol| {
        make_group(&topology);
        let handled = Handled::default();
        let run = T::spawn(Endpoint::new(topology.sentinels()), config(protocol), handled.handler());
        let producer = Producer::start(topology.sentinel_addrs(), None);
        assert!(wait_until(CONSUMED, || handled.count() >= 300), "{}: consuming", topology.flavor());
        let old = topology.master();
        topology.node_mut(old).kill9();
        let killed_at = Instant::now();
        topology.wait_for_master(old);
        let named = killed_at.elapsed();
        let new_master_first = wait_until(CONSUMED, || {
            let (firsts, _) = handled.firsts();
            producer.added().iter().any(|a| a.at > killed_at && firsts.contains_key(&a.id))
        });
        assert!(new_master_first, "{}: nothing added after the kill was handled", topology.flavor());
        topology.restart(old);
        topology.wait_settled();
        thread::sleep(Duration::from_millis(500));
        let added = producer.finish();
        let (firsts, _) = handled.firsts();
        let first_after = added
            .iter()
            .filter(|a| a.at > killed_at)
            .filter_map(|a| firsts.get(&a.id))
            .min()
            .map(|at| at.duration_since(killed_at));
        let (total, distinct) = every_confirmed_handled(&topology, &handled, &added);
        let lost_unconfirmed =
            added.iter().filter(|a| !a.confirmed && !handled.firsts().0.contains_key(&a.id)).count();
        eprintln!(
            "sentinel_master_killed on {}: new master named {named:?} after the kill; first entry of the new master \
             handled {first_after:?} after it; {} added ({} confirmed), {distinct} handled, {} twice, \
             {lost_unconfirmed} unconfirmed never handled",
            topology.flavor(),
            added.len(),
            added.iter().filter(|a| a.confirmed).count(),
            total - distinct,
        );
        let stats = run.finish();
        assert!(stats.reconnects >= 1, "{stats:?}");
    });
}

/// Two failovers by request (`SENTINEL FAILOVER`) under load, the consumer waiting for each
/// batch of acks to reach the replica (`ack_replicas`): the consumer follows each one at the
/// sentinels' word (`+switch-master`), while the old master still says it is one; every
/// confirmed entry is handled.
pub fn sentinel_failover_twice<T: Transport>() {
    on_every_topology(
        "sentinel_failover_twice",
        &Flavor::ALL,
        TopologyOptions::default(),
        |topology, protocol| {
            make_group(&topology);
            let handled = Handled::default();
            let config = config(protocol).ack_replicas(1, Duration::from_millis(500));
            let run = T::spawn(Endpoint::new(topology.sentinels()), config, handled.handler());
            let producer = Producer::start(topology.sentinel_addrs(), None);
            for round in 1..=2 {
                let before = handled.count();
                assert!(
                    wait_until(CONSUMED, || handled.count() >= before + 200),
                    "{}: round {round}",
                    topology.flavor()
                );
                topology.failover();
                topology.wait_settled();
            }
            let after = handled.count();
            assert!(wait_until(CONSUMED, || handled.count() >= after + 100), "{}: after", topology.flavor());
            let added = producer.finish();
            let (total, distinct) = every_confirmed_handled(&topology, &handled, &added);
            eprintln!(
                "sentinel_failover_twice on {}: {} added, {distinct} handled, {} twice",
                topology.flavor(),
                added.len(),
                total - distinct
            );
            let stats = run.finish();
            assert!(stats.reconnects >= 2, "{stats:?}");
        },
    );
}

/// A consumer started while the master is down (killed, the sentinels not yet agreed): it
/// tries the master they name, then the promoted one, and consumes what is added there.
pub fn sentinel_start_while_master_down<T: Transport>() {
    on_every_topology(
        "sentinel_start_while_master_down",
        &Flavor::ALL,
        TopologyOptions::default(),
        |mut topology, protocol| {
            make_group(&topology);
            let ids = topology.admin(topology.master()).xadd_n(STREAM, 50, 8);
            topology.admin(topology.master()).cmd(&["WAIT", "1", "5000"]);
            let old = topology.master();
            topology.node_mut(old).kill9();
            let handled = Handled::default();
            let run = T::spawn(Endpoint::new(topology.sentinels()), config(protocol), handled.handler());
            let new = topology.wait_for_master(old);
            let mut ids = ids;
            ids.extend(topology.admin(new).xadd_n(STREAM, 50, 8));
            let all = || {
                let (firsts, _) = handled.firsts();
                ids.iter().all(|id| firsts.contains_key(id))
            };
            assert!(
                wait_until(CONSUMED, all),
                "{}: {} of {} handled",
                topology.flavor(),
                handled.count(),
                ids.len()
            );
            run.finish();
        },
    );
}

/// A consumer pointed at a replica (by its address, without sentinels) reads nothing from
/// it, whatever waits on the master, and keeps trying; once the replica is made the master
/// (the roles swapped by hand), it consumes everything there.
pub fn pointed_at_a_replica<T: Transport>() {
    let pair = TopologyOptions { sentinels: false, ..TopologyOptions::default() };
    on_every_topology("pointed_at_a_replica", &Flavor::ALL, pair, |topology, protocol| {
        make_group(&topology);
        let (master, replica) = (topology.master(), topology.replica());
        let mut ids = topology.admin(master).xadd_n(STREAM, 30, 8);
        topology.admin(master).cmd(&["WAIT", "1", "5000"]);
        let handled = Handled::default();
        let run = T::spawn(Endpoint::new(replica), config(protocol), handled.handler());
        thread::sleep(Duration::from_millis(1500));
        assert_eq!(handled.count(), 0, "{}: read from a replica", topology.flavor());
        assert_eq!(topology.admin(master).xpending_count(STREAM, GROUP), 0, "nothing delivered");
        assert_eq!(topology.swap_roles(), replica);
        ids.extend(topology.admin(replica).xadd_n(STREAM, 30, 8));
        let all = || handled.firsts().0.len() == ids.len();
        assert!(
            wait_until(CONSUMED, all),
            "{}: {} of {} handled",
            topology.flavor(),
            handled.count(),
            ids.len()
        );
        let stats = run.finish();
        assert!(stats.errors >= 1, "the replica was refused: {stats:?}");
    });
}

/// A primary endpoint (a host name, as managed services give) that a failover moves to the
/// promoted node: the roles are swapped by hand, then the name points at the new master; the
/// consumer, which looks the name up at every connect, follows it: every entry handled, the
/// pending list empty on the new master. (The name's lookup is the test's, through the
/// transports' `resolve_with`: the servers stay on 127.0.0.1.)
pub fn moving_primary_endpoint<T: Transport>() {
    let pair = TopologyOptions { sentinels: false, ..TopologyOptions::default() };
    on_every_topology("moving_primary_endpoint", &Flavor::ALL, pair, |topology, protocol| {
        make_group(&topology);
        let (master, replica) = (topology.master(), topology.replica());
        let primary = Arc::new(Mutex::new(master));
        let points = primary.clone();
        // `localhost:1` stands for the primary endpoint: the lookup gives the primary's address.
        let lookup: Lookup = Arc::new(move |host: &str, port: u16| match (host, port) {
            ("localhost", 1) => Ok(vec![*points.lock().unwrap()]),
            other => {
                Err(std::io::Error::new(std::io::ErrorKind::NotFound, format!("no such endpoint {other:?}")))
            }
        });
        let to = Endpoint { lookup: Some(lookup), ..Endpoint::new(HostPort::new("localhost", 1)) };
        let handled = Handled::default();
        let run = T::spawn(to, config(protocol), handled.handler());
        let mut ids = topology.admin(master).xadd_n(STREAM, 30, 8);
        assert!(wait_until(CONSUMED, || handled.firsts().0.len() == 30), "{}: before", topology.flavor());
        assert_eq!(topology.swap_roles(), replica);
        // The name moves a little after the roles (as DNS does).
        thread::sleep(Duration::from_millis(300));
        *primary.lock().unwrap() = replica;
        ids.extend(topology.admin(replica).xadd_n(STREAM, 30, 8));
        let all = || handled.firsts().0.len() == ids.len();
        assert!(
            wait_until(CONSUMED, all),
            "{}: {} of {} handled",
            topology.flavor(),
            handled.count(),
            ids.len()
        );
        let pending = || topology.admin(replica).xpending_count(STREAM, GROUP) == 0;
        assert!(wait_until(CONSUMED, pending), "{}: acks confirmed on the new master", topology.flavor());
        run.finish();
    });
}

/// Sentinels and data nodes over TLS (Redis 7.0 and 8.10): the consumer asks the sentinels
/// over TLS (each checked by its own address), consumes from the master over TLS, and follows
/// a failover.
pub fn sentinel_over_tls<T: Transport>() {
    let options =
        TopologyOptions { data: Options::default().with_tls(Tls::default()), ..TopologyOptions::default() };
    on_every_topology("sentinel_over_tls", &Flavor::TLS, options, |topology, protocol| {
        make_group(&topology);
        let pki = topology.pki().expect("a TLS topology");
        let tls = pelican_tls::TlsConfig::new().ca_file(pki.ca()).build().expect("the test CA");
        let to = Endpoint { tls: Some((tls, String::new())), ..Endpoint::new(topology.sentinels()) };
        let handled = Handled::default();
        let run = T::spawn(to, config(protocol), handled.handler());
        let mut ids = topology.admin(topology.master()).xadd_n(STREAM, 30, 8);
        assert!(wait_until(CONSUMED, || handled.firsts().0.len() == 30), "{}: before", topology.flavor());
        let new = topology.failover();
        ids.extend(topology.admin(new).xadd_n(STREAM, 30, 8));
        let all = || handled.firsts().0.len() == ids.len();
        assert!(
            wait_until(CONSUMED, all),
            "{}: {} of {} handled",
            topology.flavor(),
            handled.count(),
            ids.len()
        );
        let stats = run.finish();
        assert!(stats.reconnects >= 1, "{stats:?}");
    });
}
