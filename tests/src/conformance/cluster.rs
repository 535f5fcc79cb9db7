//! Cluster stories (3 masters + 3 replicas of each server): lanes that find their master
//! from any node, slot migrations while a lane is parked and while it is busy (by `MIGRATE`
//! on every server, and by atomic slot migration on Redis 8.10), a failover. Part of the
//! conformance suite (see the parent module). Each story runs on every server at once,
//! Redis 6.2 in RESP2, the others in RESP3.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use pelican::{Config, Entry, Protocol, Verdict};

use super::kit::{wait_until, Handler, Running, Transport, GROUP};
use crate::cluster::Cluster;
use crate::server::{Endpoint, Flavor};

/// How long a story waits for its entries.
const CONSUMED: Duration = Duration::from_secs(30);

/// Runs `story` on a cluster of each server, in parallel; fails naming those that failed.
pub fn on_every_cluster(name: &str, story: fn(&Cluster, Protocol)) {
    on_every_cluster_mut(name, move |cluster, protocol| story(cluster, protocol));
}

/// [`on_every_cluster`], for stories that kill and restart nodes.
pub fn on_every_cluster_mut(name: &str, story: impl Fn(&mut Cluster, Protocol) + Copy + Send + 'static) {
    let threads: Vec<_> = Flavor::ALL
        .into_iter()
        .map(|flavor| {
            let label = format!("{name} on a {} cluster", flavor.name());
            let protocol = if flavor == Flavor::Redis62 { Protocol::Resp2 } else { Protocol::Resp3 };
            let run = move || story(&mut Cluster::start(flavor), protocol);
            (label.clone(), thread::Builder::new().name(label).spawn(run).unwrap())
        })
        .collect();
    let failed: Vec<String> =
        threads.into_iter().filter_map(|(label, th)| th.join().is_err().then_some(label)).collect();
    assert!(failed.is_empty(), "{} of {} clusters failed: {failed:?}", failed.len(), Flavor::ALL.len());
}

/// Every delivery, per stream.
#[derive(Clone, Default)]
struct Deliveries(Arc<Mutex<BTreeMap<String, Vec<String>>>>);

impl Deliveries {
    fn handler(&self, stream: &str, pause: Duration) -> Handler {
        let (all, stream) = (self.0.clone(), stream.to_string());
        Box::new(move |e: &Entry| {
            all.lock()
                .unwrap()
                .entry(stream.clone())
                .or_default()
                .push(String::from_utf8_lossy(e.id()).into());
            thread::sleep(pause);
            Verdict::Ack
        })
    }

    fn of(&self, stream: &str) -> Vec<String> {
        self.0.lock().unwrap().get(stream).cloned().unwrap_or_default()
    }
}

fn config(stream: &str, protocol: Protocol) -> Config {
    Config::new(stream, GROUP, "c1")
        .protocol(protocol)
        .count(50)
        .beat(Duration::from_millis(200))
        .min_idle(Duration::from_secs(3600))
        .backoff(Duration::from_millis(20), Duration::from_millis(200))
}

fn lane<T: Transport>(
    at: SocketAddr,
    stream: &str,
    protocol: Protocol,
    seen: &Deliveries,
    pause: Duration,
) -> Running {
    let to = Endpoint::new(at);
    T::spawn(to, config(stream, protocol), seen.handler(stream, pause))
}

/// `n` entries added to `stream` (on its owner), after its group.
fn fill(cluster: &Cluster, stream: &str, n: usize) -> Vec<String> {
    let mut admin = cluster.admin_for(stream);
    admin.cmd(&["XGROUP", "CREATE", stream, GROUP, "0", "MKSTREAM"]);
    admin.xadd_n(stream, n, 8)
}

/// Each of `ids` handled exactly once on `stream`, nothing pending on its owner now.
fn consumed_once(cluster: &Cluster, seen: &Deliveries, stream: &str, ids: &[String]) {
    assert!(
        wait_until(CONSUMED, || seen.of(stream).len() >= ids.len()),
        "{stream}: {} of {}",
        seen.of(stream).len(),
        ids.len()
    );
    let got = seen.of(stream);
    let mut twice: Vec<&String> =
        got.iter().filter(|id| got.iter().filter(|g| g == id).count() > 1).collect();
    twice.dedup();
    let missing: Vec<&String> = ids.iter().filter(|id| !got.contains(id)).collect();
    assert!(twice.is_empty() && missing.is_empty(), "{stream}: handled twice {twice:?}, never {missing:?}");
    assert_eq!(got.len(), ids.len(), "{stream}: only the entries added");
    assert!(
        wait_until(CONSUMED, || cluster.admin_for(stream).xpending_count(stream, GROUP) == 0),
        "{stream}: acks confirmed on the owner"
    );
}

/// Two streams on each master, one lane each, all started against one replica (which owns
/// nothing): every lane finds its master by the `MOVED` it gets, and consumes its stream.
pub fn cluster_lanes_find_their_masters<T: Transport>() {
    on_every_cluster("cluster_lanes_find_their_masters", |cluster, protocol| {
        let mut streams = Vec::new();
        for master in cluster.masters() {
            let mine = (0..).map(|i| format!("s{i}")).filter(|s| cluster.owner_of(s) == master).take(2);
            streams.extend(mine);
        }
        let seen = Deliveries::default();
        let ids: Vec<Vec<String>> = streams.iter().map(|s| fill(cluster, s, 100)).collect();
        let seed = cluster.replicas()[0];
        let lanes: Vec<Running> =
            streams.iter().map(|s| lane::<T>(seed, s, protocol, &seen, Duration::ZERO)).collect();
        for (stream, ids) in streams.iter().zip(&ids) {
            consumed_once(cluster, &seen, stream, ids);
        }
        for (stream, lane) in streams.iter().zip(lanes) {
            let stats = lane.finish();
            assert!(stats.moved >= 1, "{stream}: {stats:?}");
            assert_eq!(stats.acked, 100, "{stream}");
        }
    });
}

/// A lane parked on its stream while the stream's slot migrates to another master (each
/// server tells it differently: `UNBLOCKED` on 7.0, `ASK` on Valkey 8.1 and Redis 8.10, or
/// `MOVED` after the move on 6.2): it follows
/// the slot and consumes what comes after, each entry once.
pub fn cluster_migration_while_parked<T: Transport>() {
    on_every_cluster("cluster_migration_while_parked", |cluster, protocol| {
        let stream = "parked";
        let mut ids = fill(cluster, stream, 20);
        let seen = Deliveries::default();
        let run = lane::<T>(cluster.owner_of(stream), stream, protocol, &seen, Duration::ZERO);
        assert!(wait_until(CONSUMED, || seen.of(stream).len() >= 20));
        thread::sleep(Duration::from_millis(300)); // parked
        let from = cluster.owner_of(stream);
        let to = cluster.masters().into_iter().find(|m| *m != from).unwrap();
        let migration = cluster.begin_migration(cluster.slot_of(stream), to);
        thread::sleep(Duration::from_millis(300));
        migration.finish();
        assert_eq!(cluster.owner_of(stream), to);
        ids.extend(cluster.admin_for(stream).xadd_n(stream, 20, 8));
        consumed_once(cluster, &seen, stream, &ids);
        run.finish();
    });
}

/// A lane working through a backlog while its slot migrates: it follows the `ASK` to the
/// new owner (each command after `ASKING`) or the `MOVED` after; acks owed go there first,
/// entries read but not handed out are drained again there; none lost, none twice.
pub fn cluster_migration_while_busy<T: Transport>() {
    on_every_cluster("cluster_migration_while_busy", |cluster, protocol| {
        let stream = "busy";
        let ids = fill(cluster, stream, 300);
        let seen = Deliveries::default();
        let run = lane::<T>(cluster.owner_of(stream), stream, protocol, &seen, Duration::from_millis(2));
        assert!(wait_until(CONSUMED, || seen.of(stream).len() >= 60));
        let from = cluster.owner_of(stream);
        let to = cluster.masters().into_iter().find(|m| *m != from).unwrap();
        cluster.migrate_slot(cluster.slot_of(stream), to);
        consumed_once(cluster, &seen, stream, &ids);
        // It followed the slot (an `ASK` while it moved, or a `MOVED` after).
        assert!(run.finish().reconnects >= 1);
    });
}

/// The master of a lane's stream fails over to its replica while the lane works: it
/// reconnects, follows the `MOVED` to the new master (which has the pending list), and
/// consumes everything, each entry once.
pub fn cluster_failover<T: Transport>() {
    on_every_cluster("cluster_failover", |cluster, protocol| {
        let stream = "failover";
        let mut ids = fill(cluster, stream, 100);
        let seen = Deliveries::default();
        let run = lane::<T>(cluster.owner_of(stream), stream, protocol, &seen, Duration::from_millis(1));
        assert!(wait_until(CONSUMED, || seen.of(stream).len() >= 30));
        let new_master = cluster.failover(cluster.owner_of(stream));
        assert_eq!(cluster.owner_of(stream), new_master);
        ids.extend(cluster.admin_for(stream).xadd_n(stream, 50, 8));
        consumed_once(cluster, &seen, stream, &ids);
        run.finish();
    });
}

/// The master of a lane's stream is killed (`kill -9`) while the lane works through a
/// backlog: the cluster promotes its replica on its own, after `cluster-node-timeout`. The
/// lane, whose node is gone, tries the cluster's other nodes in turn until one leads it
/// (`MOVED`) to the new master, where the pending list is: every entry is handled, the
/// pending list ends empty, and nothing is lost. Entries were replicated before the kill
/// (`WAIT 1`), acks may not have been: those entries come again (counted, not refused).
pub fn cluster_master_killed<T: Transport>() {
    on_every_cluster_mut("cluster_master_killed", |cluster, protocol| {
        let stream = "killed";
        let mut ids = fill(cluster, stream, 200);
        let owner = cluster.owner_of(stream);
        let replicated = cluster.admin_for(stream).cmd(&["WAIT", "1", "5000"]);
        assert_eq!(replicated.as_int(), Some(1), "the entries reached the replica");
        let seen = Deliveries::default();
        let to = Endpoint { fallbacks: cluster.addrs(), ..Endpoint::new(owner) };
        let config = config(stream, protocol).ack_replicas(1, Duration::from_secs(1));
        let run = T::spawn(to, config, seen.handler(stream, Duration::from_millis(5)));
        assert!(wait_until(CONSUMED, || seen.of(stream).len() >= 50));
        let killed_at = std::time::Instant::now();
        let new_master = cluster.kill_master(owner);
        assert_eq!(cluster.owner_of(stream), new_master);
        ids.extend(cluster.admin_for(stream).xadd_n(stream, 50, 8));
        let duplicates = consumed_at_least_once(cluster, &seen, stream, &ids);
        eprintln!(
            "{} {protocol:?}: every entry handled {:?} after the kill ({duplicates} handled twice)",
            cluster.flavor(),
            killed_at.elapsed()
        );
        let stats = run.finish();
        assert!(stats.moved >= 1, "followed a -MOVED to the new master: {stats:?}");
    });
}

/// Each of `ids` handled at least once on `stream`, nothing else, the pending list empty on
/// its owner; returns how many were handled more than once (a failover may lose acks).
fn consumed_at_least_once(cluster: &Cluster, seen: &Deliveries, stream: &str, ids: &[String]) -> usize {
    let all_seen = || {
        let got = seen.of(stream);
        ids.iter().all(|id| got.contains(id))
    };
    assert!(
        wait_until(CONSUMED, all_seen),
        "{stream}: {} handlings of {} entries",
        seen.of(stream).len(),
        ids.len()
    );
    let got = seen.of(stream);
    assert!(got.iter().all(|id| ids.contains(id)), "{stream}: only the entries added");
    assert!(
        wait_until(CONSUMED, || cluster.admin_for(stream).xpending_count(stream, GROUP) == 0),
        "{stream}: acks confirmed on the owner"
    );
    got.len() - ids.len()
}

/// Redis 8.10 moves slots by atomic slot migration (`CLUSTER MIGRATION IMPORT`, what
/// `redis-cli --cluster reshard` uses there): the source keeps serving the slot while it is
/// copied, then hands it over. A lane parked on its stream gets `-MOVED <slot> <target>`
/// at the handoff (no `-ASK`, no `UNBLOCKED`); a lane working through a backlog gets `-MOVED`
/// on its next command. Both follow the slot and consume everything, each entry once, the
/// pending lists empty on the new owner. Then the parked lane's slot moves back by
/// `MIGRATE` (its `-ASK`) and it follows again.
pub fn cluster_atomic_migration<T: Transport>() {
    let cluster = Cluster::start(Flavor::Redis810);
    let protocol = Protocol::Resp3;
    let (parked, busy) = ("parked", "busy");
    assert_ne!(cluster.slot_of(parked), cluster.slot_of(busy));
    let seen = Deliveries::default();
    let mut parked_ids = fill(&cluster, parked, 20);
    let busy_ids = fill(&cluster, busy, 300);
    let parked_run = lane::<T>(cluster.owner_of(parked), parked, protocol, &seen, Duration::ZERO);
    let busy_run = lane::<T>(cluster.owner_of(busy), busy, protocol, &seen, Duration::from_millis(2));
    assert!(wait_until(CONSUMED, || seen.of(parked).len() >= 20));
    assert!(wait_until(CONSUMED, || seen.of(busy).len() >= 60));
    let other = |stream: &str| {
        let from = cluster.owner_of(stream);
        cluster.masters().into_iter().find(|m| *m != from).unwrap()
    };
    // The busy lane's slot first, while it still has most of its backlog to go (240 entries
    // of 2 ms each at least).
    assert!(seen.of(busy).len() < busy_ids.len());
    cluster.migrate_slot_atomically(cluster.slot_of(busy), other(busy));
    eprintln!("busy lane: {} of {} handled once its slot had moved", seen.of(busy).len(), busy_ids.len());
    let (parked_home, to) = (cluster.owner_of(parked), other(parked));
    cluster.migrate_slot_atomically(cluster.slot_of(parked), to);
    assert_eq!(cluster.owner_of(parked), to);
    parked_ids.extend(cluster.admin_for(parked).xadd_n(parked, 20, 8));
    consumed_once(&cluster, &seen, parked, &parked_ids);
    consumed_once(&cluster, &seen, busy, &busy_ids);

    cluster.migrate_slot(cluster.slot_of(parked), parked_home);
    parked_ids.extend(cluster.admin_for(parked).xadd_n(parked, 20, 8));
    consumed_once(&cluster, &seen, parked, &parked_ids);
    for (stream, run) in [(parked, parked_run), (busy, busy_run)] {
        let stats = run.finish();
        assert!(stats.moved >= 1, "{stream}: followed a -MOVED: {stats:?}");
    }
}
