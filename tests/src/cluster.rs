//! A real Redis/Valkey cluster for tests: three masters and three replicas on loopback.
//!
//! [`Cluster::start`] starts six [`Server`]s in cluster mode ([`Options::cluster`]: each in
//! its own temporary directory, with its `nodes.conf` there, no persistence, bus on
//! port + 10000) and joins them with plain commands through [`Admin`], the way
//! `redis-cli --cluster create` does (`redis-cli` itself is not needed):
//!
//! 1. `CLUSTER SET-CONFIG-EPOCH` 1..6, so no two nodes start on the same epoch;
//! 2. `CLUSTER ADDSLOTS` (in chunks; 6.2 has no `ADDSLOTSRANGE`) on the three masters:
//!    slots 0-5460, 5461-10922 and 10923-16383 ([`SLOT_RANGES`]);
//! 3. `CLUSTER MEET 127.0.0.1 <port>` of every other node, sent to the first;
//! 4. `CLUSTER REPLICATE <master id>` on each replica, retried until the replica has heard
//!    of its master;
//! 5. a bounded wait ([`SETTLE_TIMEOUT`]) until every node reports `cluster_state:ok`, all
//!    16384 slots assigned and ok, six known nodes with the expected roles and slots and
//!    connected links, `CLUSTER SLOTS` listing each master's range with its replica, every
//!    replica `master_link_status:up` with its master, and every master one replica
//!    `state=online`.
//!
//! Node `i` of [`Cluster::nodes`] is a master for `i < 3` and the replica of node `i - 3`
//! otherwise, *as started*; [`Cluster::failover`] swaps roles, so [`Cluster::masters`],
//! [`Cluster::replicas`] and [`Cluster::owner_of`] ask the servers. Nodes are named by their
//! address (what `-MOVED` and `-ASK` name), except in [`Cluster::addr_of`].
//!
//! Resharding ([`Cluster::migrate_slot`], or [`Cluster::begin_migration`] +
//! [`Migration::finish`] to act while the slot is half-moved; on Redis 8.10 also
//! [`Cluster::migrate_slot_atomically`]) and manual failover
//! ([`Cluster::failover`]) wait until every node agrees on the outcome. Every wait is
//! bounded and panics with each node's `CLUSTER INFO`, `CLUSTER NODES`, replication state
//! and log tail. Dropping the `Cluster` kills all six processes and removes their
//! directories.
//!
//! ```no_run
//! use pelican_tests::cluster::Cluster;
//! use pelican_tests::server::Flavor;
//!
//! let cluster = Cluster::start(Flavor::Redis70);
//! let mut admin = cluster.admin_for("s");
//! admin.xadd("s", &[("f", "v")]);
//! let old = cluster.owner_of("s");
//! let to = cluster.masters().into_iter().find(|&m| m != old).unwrap();
//! cluster.migrate_slot(cluster.slot_of("s"), to);
//! assert_eq!(cluster.owner_of("s"), to);
//! let promoted = cluster.failover(to);
//! assert_eq!(cluster.owner_of("s"), promoted);
//! ```

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::thread;
use std::time::{Duration, Instant};

use crate::admin::{info_value, Admin, Reply};
use crate::server::{Flavor, Options, Server};

/// The number of hash slots.
pub const SLOTS: u16 = 16384;

/// The slot ranges (inclusive) of the three masters as started: node 0, 1 and 2.
pub const SLOT_RANGES: [(u16, u16); 3] = [(0, 5460), (5461, 10922), (10923, 16383)];

/// How many masters (nodes 0..3) and how many replicas (nodes 3..6) a [`Cluster`] starts.
pub const MASTERS: usize = 3;

/// The number of nodes in a [`Cluster`].
pub const NODES: usize = 2 * MASTERS;

/// The bound of every wait: the cluster forming, a migration or a failover settling.
pub const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// How many keys [`Cluster::begin_migration`] asks for and moves per `MIGRATE`.
pub const MIGRATE_BATCH: usize = 100;

/// How long one `MIGRATE` may take, in milliseconds (its `timeout` argument).
const MIGRATE_TIMEOUT_MS: &str = "5000";

/// How many slots go into one `CLUSTER ADDSLOTS`.
const ADDSLOTS_CHUNK: usize = 1000;

/// The pause between two polls of a wait.
const POLL: Duration = Duration::from_millis(50);

/// Connect, read and write timeout of the connections that poll the nodes.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// One contiguous range of slots and who serves it, as a node reports in `CLUSTER SLOTS`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotRange {
    /// The first slot of the range.
    pub start: u16,
    /// The last slot of the range (inclusive).
    pub end: u16,
    /// The master serving the range.
    pub master: SocketAddr,
    /// Its replicas, in the order the node lists them.
    pub replicas: Vec<SocketAddr>,
}

impl SlotRange {
    /// Whether `slot` is in this range.
    pub fn contains(&self, slot: u16) -> bool {
        (self.start..=self.end).contains(&slot)
    }
}

/// Three masters and three replicas, each a [`Server`] in cluster mode on 127.0.0.1.
#[derive(Debug)]
pub struct Cluster {
    flavor: Flavor,
    nodes: Vec<Server>,
    /// The node ids, in the order of `nodes` (fixed: kept in each node's `nodes.conf`).
    ids: Vec<String>,
}

/// One line of `CLUSTER NODES`.
#[derive(Clone, Debug)]
struct NodeLine {
    id: String,
    addr: Option<SocketAddr>,
    flags: Vec<String>,
    master_id: Option<String>,
    link: String,
    /// Owned slot ranges (migrating/importing markers left out).
    slots: Vec<(u16, u16)>,
}

impl NodeLine {
    fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }
}

impl Cluster {
    /// Starts six `flavor` nodes, makes nodes 0..3 masters of [`SLOT_RANGES`] and node
    /// `3 + i` the replica of node `i`, and waits (at most [`SETTLE_TIMEOUT`]) until the
    /// cluster is whole and agreed (see the [module docs](self)). Panics if a server does
    /// not start (like [`Server::start`]) or the cluster does not settle, with every node's
    /// state and log tail.
    pub fn start(flavor: Flavor) -> Cluster {
        let nodes: Vec<Server> =
            (0..NODES).map(|_| Server::start_with(flavor, Options::default().with_cluster())).collect();
        let mut cluster = Cluster { flavor, nodes, ids: Vec::new() };
        for (i, node) in cluster.nodes.iter().enumerate() {
            let mut admin = node.admin();
            let id = admin.call(&["CLUSTER", "MYID"]).as_text().unwrap_or_default();
            assert_eq!(id.len(), 40, "{flavor}: CLUSTER MYID of {} answered {id:?}", node.addr());
            cluster.ids.push(id);
            admin.call(&["CLUSTER", "SET-CONFIG-EPOCH", &(i + 1).to_string()]);
        }
        for (node, &(start, end)) in cluster.nodes.iter().zip(&SLOT_RANGES) {
            let slots: Vec<String> = (start..=end).map(|s| s.to_string()).collect();
            let mut admin = node.admin();
            for chunk in slots.chunks(ADDSLOTS_CHUNK) {
                let mut args = vec!["CLUSTER", "ADDSLOTS"];
                args.extend(chunk.iter().map(String::as_str));
                admin.call(&args);
            }
        }
        let mut first = cluster.nodes[0].admin();
        for node in &cluster.nodes[1..] {
            first.call(&["CLUSTER", "MEET", &node.addr().ip().to_string(), &node.port().to_string()]);
        }
        for (replica, master_id) in cluster.nodes[MASTERS..].iter().zip(&cluster.ids[..MASTERS]) {
            let mut admin = replica.admin();
            cluster.wait_for(&format!("CLUSTER REPLICATE on {}", replica.addr()), || {
                match admin.cmd(&["CLUSTER", "REPLICATE", master_id]) {
                    r if r.is_ok() => Ok(()),
                    other => Err(format!("CLUSTER REPLICATE {master_id} answered {other:?}")),
                }
            });
        }
        cluster.wait_for("the cluster to form", || cluster.check_formed());
        cluster
    }

    /// The flavor of every node.
    pub fn flavor(&self) -> Flavor {
        self.flavor
    }

    /// The six nodes, in the order started: masters 0..3, then the replica of each.
    pub fn nodes(&self) -> &[Server] {
        &self.nodes
    }

    /// The node at `addr`, to kill or restart it ([`Server::kill9`], [`Server::restart`];
    /// a restarted node keeps its id). Panics if no node has that address.
    pub fn node_mut(&mut self, addr: SocketAddr) -> &mut Server {
        let i = self.index_of(addr);
        &mut self.nodes[i]
    }

    /// The address of node `node` (an index into [`Cluster::nodes`]).
    pub fn addr_of(&self, node: usize) -> SocketAddr {
        self.nodes[node].addr()
    }

    /// Every node's address, in the order of [`Cluster::nodes`].
    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.nodes.iter().map(Server::addr).collect()
    }

    /// The 40-character id of the node at `node` (fixed for the cluster's life). Panics if
    /// no node has that address.
    pub fn node_id(&self, node: SocketAddr) -> &str {
        &self.ids[self.index_of(node)]
    }

    /// The address of the node whose id is `id`, if it is one of ours.
    pub fn addr_of_id(&self, id: &str) -> Option<SocketAddr> {
        self.ids.iter().position(|i| i == id).map(|i| self.addr_of(i))
    }

    /// A new admin connection to the node at `node`.
    pub fn admin(&self, node: SocketAddr) -> Admin {
        Admin::connect(node)
    }

    /// The nodes that are masters now (each asked with `ROLE`), in the order of
    /// [`Cluster::nodes`]. Nodes that do not answer (killed) are left out.
    pub fn masters(&self) -> Vec<SocketAddr> {
        self.with_role("master")
    }

    /// The nodes that are replicas now (each asked with `ROLE`), in the order of
    /// [`Cluster::nodes`]. Nodes that do not answer (killed) are left out.
    pub fn replicas(&self) -> Vec<SocketAddr> {
        self.with_role("slave")
    }

    /// The replicas of `master`, as `CLUSTER NODES` on `master` lists them now.
    pub fn replicas_of(&self, master: SocketAddr) -> Vec<SocketAddr> {
        let id = self.node_id(master).to_string();
        let lines = self.nodes_of(master).unwrap_or_else(|e| panic!("{}", self.failure(&e)));
        lines
            .iter()
            .filter(|l| l.has_flag("slave") && l.master_id.as_deref() == Some(&id))
            .filter_map(|l| l.addr)
            .collect()
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT`, asked of the first node that answers).
    pub fn slot_of(&self, key: &str) -> u16 {
        let reply = self.ask_any(&["CLUSTER", "KEYSLOT", key]);
        reply.as_int().and_then(|s| u16::try_from(s).ok()).unwrap_or_else(|| {
            panic!("{}", self.failure(&format!("CLUSTER KEYSLOT {key} answered {reply:?}")))
        })
    }

    /// The slot map (`CLUSTER SLOTS`) as the first node that answers reports it now, sorted
    /// by first slot.
    pub fn slot_ranges(&self) -> Vec<SlotRange> {
        let reply = self.ask_any(&["CLUSTER", "SLOTS"]);
        let mut ranges = parse_slots(&reply).unwrap_or_else(|e| panic!("{}", self.failure(&e)));
        ranges.sort_by_key(|r| r.start);
        ranges
    }

    /// The master serving `slot` now (from `CLUSTER SLOTS`, see [`Cluster::slot_ranges`]).
    /// Panics if no node serves it.
    pub fn owner_of_slot(&self, slot: u16) -> SocketAddr {
        let ranges = self.slot_ranges();
        match ranges.iter().find(|r| r.contains(slot)) {
            Some(range) => range.master,
            None => panic!("{}", self.failure(&format!("no node serves slot {slot}: {ranges:?}"))),
        }
    }

    /// The master serving `key`'s slot now.
    pub fn owner_of(&self, key: &str) -> SocketAddr {
        self.owner_of_slot(self.slot_of(key))
    }

    /// A new admin connection to the master serving `key` now.
    pub fn admin_for(&self, key: &str) -> Admin {
        Admin::connect(self.owner_of(key))
    }

    /// Moves `slot` (and its keys) from its current master to the master at `to`:
    /// [`Cluster::begin_migration`], then [`Migration::finish`].
    pub fn migrate_slot(&self, slot: u16, to: SocketAddr) {
        self.begin_migration(slot, to).finish();
    }

    /// Starts moving `slot` to the master at `to`, the documented way: on the target
    /// `CLUSTER SETSLOT slot IMPORTING <source id>`, on the source
    /// `CLUSTER SETSLOT slot MIGRATING <target id>`, then `CLUSTER GETKEYSINSLOT slot 100`
    /// and `MIGRATE <ip> <port> "" 0 5000 KEYS …` until the source holds no key of the slot.
    /// The slot is then half-moved: the source answers `-ASK` for its keys, the target
    /// serves them only after `ASKING`. [`Migration::finish`] completes it.
    ///
    /// Panics if `to` is not a master, already serves `slot`, or a step fails.
    pub fn begin_migration(&self, slot: u16, to: SocketAddr) -> Migration<'_> {
        assert!(slot < SLOTS, "no slot {slot}");
        let from = self.owner_of_slot(slot);
        assert_ne!(from, to, "{}: slot {slot} is already served by {to}", self.flavor);
        let (from_id, to_id) = (self.node_id(from).to_string(), self.node_id(to).to_string());
        let slot_arg = slot.to_string();
        let mut target = Admin::connect(to);
        let mut source = Admin::connect(from);
        target.call(&["CLUSTER", "SETSLOT", &slot_arg, "IMPORTING", &from_id]);
        source.call(&["CLUSTER", "SETSLOT", &slot_arg, "MIGRATING", &to_id]);
        let (ip, port) = (to.ip().to_string(), to.port().to_string());
        let mut keys_moved = 0;
        loop {
            let batch = MIGRATE_BATCH.to_string();
            let reply = source.call(&["CLUSTER", "GETKEYSINSLOT", &slot_arg, &batch]);
            let keys: Vec<Vec<u8>> = match reply.as_array() {
                Some(keys) => keys.iter().filter_map(|k| k.as_bytes().map(<[u8]>::to_vec)).collect(),
                None => panic!("{}", self.failure(&format!("GETKEYSINSLOT answered {reply:?}"))),
            };
            if keys.is_empty() {
                break;
            }
            let mut args: Vec<&[u8]> = vec![
                b"MIGRATE",
                ip.as_bytes(),
                port.as_bytes(),
                b"",
                b"0",
                MIGRATE_TIMEOUT_MS.as_bytes(),
                b"KEYS",
            ];
            args.extend(keys.iter().map(Vec::as_slice));
            // `+OK`, or `+NOKEY` if they all expired meanwhile; errors panic.
            source.call(&args);
            keys_moved += keys.len();
        }
        Migration { cluster: self, slot, source: from, target: to, keys_moved }
    }

    /// Moves `slot` (and its keys) to the master at `to` by atomic slot migration (Redis
    /// 8.4+; here [`Flavor::Redis810`] only): `CLUSTER MIGRATION IMPORT slot slot` sent to the
    /// target, which copies the slot from its owner (a snapshot, then the writes made
    /// meanwhile), pauses writes to it on the source for the handoff and takes it over; the
    /// source then drops its keys. There is no `MIGRATING`/`IMPORTING` state and no `-ASK`:
    /// the source serves the slot until the handoff, then answers `-MOVED`. Polls
    /// `CLUSTER MIGRATION STATUS ID <task>` on the target until the task is `completed`, then
    /// waits (at most [`SETTLE_TIMEOUT`]) until every running node reports the target as the
    /// slot's master and `cluster_state:ok`. Returns the task id.
    ///
    /// Panics if the flavor has no atomic slot migration, `to` already serves `slot`, or the
    /// task fails, is cancelled or does not complete within [`SETTLE_TIMEOUT`].
    pub fn migrate_slot_atomically(&self, slot: u16, to: SocketAddr) -> String {
        assert!(slot < SLOTS, "no slot {slot}");
        assert_eq!(
            self.flavor,
            Flavor::Redis810,
            "atomic slot migration (CLUSTER MIGRATION) needs Redis 8.4+"
        );
        let from = self.owner_of_slot(slot);
        assert_ne!(from, to, "{}: slot {slot} is already served by {to}", self.flavor);
        let slot_arg = slot.to_string();
        let mut target = Admin::connect(to);
        let reply = target.cmd(&["CLUSTER", "MIGRATION", "IMPORT", &slot_arg, &slot_arg]);
        let Some(task) = reply.as_text().filter(|_| !reply.is_error()) else {
            panic!("{}", self.failure(&format!("CLUSTER MIGRATION IMPORT {slot} answered {reply:?}")))
        };
        self.wait_for(&format!("migration task {task} (slot {slot} to {to})"), || {
            let status = target.cmd(&["CLUSTER", "MIGRATION", "STATUS", "ID", &task]);
            match migration_field(&status, "state").as_deref() {
                Some("completed") => Ok(()),
                Some(state @ ("failed" | "canceled")) => panic!(
                    "{}",
                    self.failure(&format!(
                        "migration task {task} {state}: {:?}",
                        migration_field(&status, "last_error")
                    ))
                ),
                state => Err(format!("task {task} is {state:?}")),
            }
        });
        self.wait_for(&format!("slot {slot} to move to {to}"), || self.check_agreed(&[slot], to));
        task
    }

    /// Promotes a replica of the master at `master` with `CLUSTER FAILOVER` (the manual,
    /// coordinated kind) and waits until the replica reports role master, the old master
    /// reports role slave with its link to the new master up, and every running node reports
    /// `cluster_state:ok`, the old master's slots served by the new one, and (in
    /// `CLUSTER NODES` and `CLUSTER SLOTS`) the old master as the new one's replica. Returns the new
    /// master's address. Panics if `master` has no replica or the failover does not settle
    /// within [`SETTLE_TIMEOUT`].
    pub fn failover(&self, master: SocketAddr) -> SocketAddr {
        let Some(&replica) = self.replicas_of(master).first() else {
            panic!("{}", self.failure(&format!("{master} has no replica to fail over to")))
        };
        let owned: Vec<u16> =
            self.slot_ranges().iter().filter(|r| r.master == master).map(|r| r.start).collect();
        Admin::connect(replica).call(&["CLUSTER", "FAILOVER"]);
        self.wait_for(&format!("the failover of {master} to {replica}"), || {
            let role = replication_of(replica)?;
            if info_value(&role, "role").as_deref() != Some("master") {
                return Err(format!("{replica} is not master yet"));
            }
            let old = replication_of(master)?;
            if info_value(&old, "role").as_deref() != Some("slave")
                || info_value(&old, "master_port") != Some(replica.port().to_string())
                || info_value(&old, "master_link_status").as_deref() != Some("up")
            {
                return Err(format!("{master} is not a connected replica of {replica} yet"));
            }
            self.check_agreed(&owned, replica)?;
            self.check_swapped(master, replica)
        });
        replica
    }

    /// Kills the master at `master` with SIGKILL and waits until the cluster promotes its
    /// replica on its own (after `cluster-node-timeout`, [`CLUSTER_NODE_TIMEOUT`]): the
    /// replica reports role master and every running node reports `cluster_state:ok` with
    /// the dead master's slots served by it. Returns the new master's address. The dead node
    /// stays down ([`Server::restart`] through [`Cluster::node_mut`] brings it back, as a
    /// replica once it has heard of the failover). Panics if `master` has no replica or the
    /// failover does not settle within [`SETTLE_TIMEOUT`].
    ///
    /// [`CLUSTER_NODE_TIMEOUT`]: crate::server::CLUSTER_NODE_TIMEOUT
    pub fn kill_master(&mut self, master: SocketAddr) -> SocketAddr {
        let Some(&replica) = self.replicas_of(master).first() else {
            panic!("{}", self.failure(&format!("{master} has no replica to take over")))
        };
        let owned: Vec<u16> =
            self.slot_ranges().iter().filter(|r| r.master == master).map(|r| r.start).collect();
        self.node_mut(master).kill9();
        self.wait_for(&format!("{replica} to take over from {master}, killed"), || {
            let role = replication_of(replica)?;
            if info_value(&role, "role").as_deref() != Some("master") {
                return Err(format!("{replica} is not master yet"));
            }
            self.check_agreed(&owned, replica)
        });
        replica
    }

    /// The nodes whose `ROLE` starts with `role`.
    fn with_role(&self, role: &str) -> Vec<SocketAddr> {
        self.addrs()
            .into_iter()
            .filter(|&addr| {
                let Ok(mut admin) = Admin::try_connect(addr, PROBE_TIMEOUT) else { return false };
                match admin.try_cmd(&["ROLE"]) {
                    Ok(Reply::Array(items)) => {
                        items.first().and_then(Reply::as_text).as_deref() == Some(role)
                    }
                    _ => false,
                }
            })
            .collect()
    }

    fn index_of(&self, addr: SocketAddr) -> usize {
        self.nodes
            .iter()
            .position(|n| n.addr() == addr)
            .unwrap_or_else(|| panic!("pelican-tests cluster: no node at {addr} (nodes: {:?})", self.addrs()))
    }

    /// `args` sent to each node in turn until one answers (without an error).
    fn ask_any(&self, args: &[&str]) -> Reply {
        let mut why = Vec::new();
        for addr in self.addrs() {
            match ask(addr, args) {
                Ok(reply) => return reply,
                Err(e) => why.push(e),
            }
        }
        panic!("{}", self.failure(&format!("no node answered `{}`: {}", args.join(" "), why.join("; "))))
    }

    /// `CLUSTER NODES` of the node at `addr`, parsed.
    fn nodes_of(&self, addr: SocketAddr) -> Result<Vec<NodeLine>, String> {
        let text = ask(addr, &["CLUSTER", "NODES"])?.as_text().unwrap_or_default();
        parse_nodes(&text).map_err(|e| format!("{addr}: {e}"))
    }

    /// Polls `check` every [`POLL`] until it passes; panics with its last complaint and the
    /// nodes' state after [`SETTLE_TIMEOUT`].
    fn wait_for(&self, what: &str, mut check: impl FnMut() -> Result<(), String>) {
        let start = Instant::now();
        loop {
            let why = match check() {
                Ok(()) => return,
                Err(why) => why,
            };
            if start.elapsed() >= SETTLE_TIMEOUT {
                panic!(
                    "{}",
                    self.failure(&format!("waiting for {what}: not within {SETTLE_TIMEOUT:?}: {why}"))
                );
            }
            thread::sleep(POLL);
        }
    }

    /// Whether every node sees the cluster exactly as [`Cluster::start`] built it.
    fn check_formed(&self) -> Result<(), String> {
        for (i, node) in self.nodes.iter().enumerate() {
            let addr = node.addr();
            let info = ask(addr, &["CLUSTER", "INFO"])?.as_text().unwrap_or_default();
            for (field, want) in [
                ("cluster_state", "ok"),
                ("cluster_slots_assigned", "16384"),
                ("cluster_slots_ok", "16384"),
                ("cluster_known_nodes", "6"),
            ] {
                let got = info_value(&info, field);
                if got.as_deref() != Some(want) {
                    return Err(format!("{addr}: {field} is {got:?}, not {want}"));
                }
            }
            let lines = self.nodes_of(addr)?;
            if lines.len() != NODES {
                return Err(format!("{addr} lists {} nodes", lines.len()));
            }
            for (j, id) in self.ids.iter().enumerate() {
                let Some(line) = lines.iter().find(|l| &l.id == id) else {
                    return Err(format!("{addr} does not list {id}"));
                };
                let bad = ["handshake", "noaddr", "fail", "fail?"];
                if let Some(flag) = bad.iter().find(|f| line.has_flag(f)) {
                    return Err(format!("{addr} flags {} {flag}", self.addr_of(j)));
                }
                if line.link != "connected" || line.addr != Some(self.addr_of(j)) {
                    return Err(format!("{addr} sees {} as {line:?}", self.addr_of(j)));
                }
                let role_ok = if j < MASTERS {
                    line.has_flag("master") && line.slots == [SLOT_RANGES[j]]
                } else {
                    line.has_flag("slave") && line.master_id.as_ref() == Some(&self.ids[j - MASTERS])
                };
                if !role_ok {
                    return Err(format!("{addr} sees {} as {line:?}", self.addr_of(j)));
                }
            }
            let mut ranges = parse_slots(&ask(addr, &["CLUSTER", "SLOTS"])?)?;
            ranges.sort_by_key(|r| r.start);
            let expected: Vec<SlotRange> = (0..MASTERS)
                .map(|m| SlotRange {
                    start: SLOT_RANGES[m].0,
                    end: SLOT_RANGES[m].1,
                    master: self.addr_of(m),
                    replicas: vec![self.addr_of(m + MASTERS)],
                })
                .collect();
            if ranges != expected {
                return Err(format!("{addr}: CLUSTER SLOTS is {ranges:?}"));
            }
            let replication = replication_of(addr)?;
            if i < MASTERS {
                let online = info_value(&replication, "slave0").is_some_and(|s| s.contains("state=online"));
                if !online || info_value(&replication, "connected_slaves").as_deref() != Some("1") {
                    return Err(format!("{addr} has no online replica yet"));
                }
            } else if info_value(&replication, "master_port")
                != Some(self.nodes[i - MASTERS].port().to_string())
                || info_value(&replication, "master_link_status").as_deref() != Some("up")
            {
                return Err(format!("{addr}'s link to its master is not up yet"));
            }
        }
        Ok(())
    }

    /// Whether every running node (not killed with [`Server::kill9`]) reports
    /// `cluster_state:ok` and `slots` served by `owner`.
    fn check_agreed(&self, slots: &[u16], owner: SocketAddr) -> Result<(), String> {
        for addr in self.nodes.iter().filter(|n| n.pid().is_some()).map(Server::addr) {
            let info = ask(addr, &["CLUSTER", "INFO"])?.as_text().unwrap_or_default();
            let state = info_value(&info, "cluster_state");
            if state.as_deref() != Some("ok") {
                return Err(format!("{addr}: cluster_state is {state:?}"));
            }
            let ranges = parse_slots(&ask(addr, &["CLUSTER", "SLOTS"])?)?;
            for &slot in slots {
                let served = ranges.iter().find(|r| r.contains(slot)).map(|r| r.master);
                if served != Some(owner) {
                    return Err(format!("{addr} says slot {slot} is served by {served:?}, not {owner}"));
                }
            }
        }
        Ok(())
    }

    /// Whether every running node lists `new` as a master and `old` as its replica, in
    /// `CLUSTER NODES` and (for `new`'s slots) in `CLUSTER SLOTS`.
    fn check_swapped(&self, old: SocketAddr, new: SocketAddr) -> Result<(), String> {
        let (old_id, new_id) = (self.node_id(old), self.node_id(new));
        for addr in self.nodes.iter().filter(|n| n.pid().is_some()).map(Server::addr) {
            let lines = self.nodes_of(addr)?;
            let line = |id: &str| lines.iter().find(|l| l.id == id).cloned();
            let swapped = line(new_id).is_some_and(|l| l.has_flag("master"))
                && line(old_id)
                    .is_some_and(|l| l.has_flag("slave") && l.master_id.as_deref() == Some(new_id));
            if !swapped {
                return Err(format!("{addr}'s CLUSTER NODES does not show {old} as replica of {new} yet"));
            }
            let ranges = parse_slots(&ask(addr, &["CLUSTER", "SLOTS"])?)?;
            if let Some(r) = ranges.iter().find(|r| r.master == new && !r.replicas.contains(&old)) {
                return Err(format!("{addr}'s CLUSTER SLOTS does not list {old} as replica: {r:?}"));
            }
        }
        Ok(())
    }

    /// A panic message: `why`, then each node's cluster and replication state and log tail.
    fn failure(&self, why: &str) -> String {
        let mut out = format!("pelican-tests cluster ({}): {why}", self.flavor);
        for (i, node) in self.nodes.iter().enumerate() {
            let addr = node.addr();
            let id = self.ids.get(i).map_or("?", String::as_str);
            let _ = write!(out, "\n=== node {i} {addr} {id} ({})", node.dir().display());
            for (what, args) in [
                ("CLUSTER INFO", &["CLUSTER", "INFO"][..]),
                ("CLUSTER NODES", &["CLUSTER", "NODES"]),
                ("INFO replication", &["INFO", "replication"]),
            ] {
                let text = match ask(addr, args) {
                    Ok(reply) => reply.as_text().unwrap_or_else(|| format!("{reply:?}")),
                    Err(e) => e,
                };
                // Message counters say nothing about the cluster's shape: left out.
                let text: Vec<&str> =
                    text.lines().map(str::trim_end).filter(|l| !l.starts_with("cluster_stats_")).collect();
                let text = text.join("\n");
                let _ = write!(out, "\n--- {what}\n{text}");
            }
            let _ = write!(out, "\n--- last lines of the log\n{}", node.log_tail(15));
        }
        out
    }
}

/// A slot being moved: [`Cluster::begin_migration`] has moved its keys; the slot is
/// `MIGRATING` on the source and `IMPORTING` on the target until [`Migration::finish`].
/// Dropping it without `finish` leaves the slot so.
#[derive(Debug)]
#[must_use = "the slot stays half-moved until Migration::finish"]
pub struct Migration<'a> {
    cluster: &'a Cluster,
    slot: u16,
    source: SocketAddr,
    target: SocketAddr,
    keys_moved: usize,
}

impl Migration<'_> {
    /// The slot being moved.
    pub fn slot(&self) -> u16 {
        self.slot
    }

    /// The master the slot is moving from.
    pub fn source(&self) -> SocketAddr {
        self.source
    }

    /// The master the slot is moving to.
    pub fn target(&self) -> SocketAddr {
        self.target
    }

    /// How many keys `MIGRATE` moved.
    pub fn keys_moved(&self) -> usize {
        self.keys_moved
    }

    /// Completes the move: `CLUSTER SETSLOT slot NODE <target id>` on the target, then the
    /// source, then every other master; then waits (at most [`SETTLE_TIMEOUT`]) until every
    /// running node reports the target as the slot's master and `cluster_state:ok`.
    pub fn finish(self) {
        let cluster = self.cluster;
        let (slot, target_id) = (self.slot.to_string(), cluster.node_id(self.target).to_string());
        let others = cluster.masters().into_iter().filter(|&m| m != self.target && m != self.source);
        for addr in [self.target, self.source].into_iter().chain(others) {
            Admin::connect(addr).call(&["CLUSTER", "SETSLOT", &slot, "NODE", &target_id]);
        }
        cluster.wait_for(&format!("slot {slot} to move to {}", self.target), || {
            cluster.check_agreed(&[self.slot], self.target)
        });
    }
}

/// A field of the one task in a `CLUSTER MIGRATION STATUS ID <task>` reply (RESP2: an
/// array holding the task as a flat `[name, value, …]` array).
fn migration_field(status: &Reply, name: &str) -> Option<String> {
    let [task] = status.as_array()? else { return None };
    let fields = task.as_array()?;
    let at = fields.chunks(2).position(|kv| kv[0].as_text().as_deref() == Some(name))?;
    fields.get(at * 2 + 1)?.as_text()
}

/// One command on a fresh connection to `addr`; connection failures, timeouts and error
/// replies are `Err` (a description).
fn ask(addr: SocketAddr, args: &[&str]) -> Result<Reply, String> {
    let mut admin = Admin::try_connect(addr, PROBE_TIMEOUT).map_err(|e| format!("{addr}: connect: {e}"))?;
    match admin.try_cmd(args) {
        Ok(Reply::Error(e)) => Err(format!("{addr}: `{}` answered -{e}", args.join(" "))),
        Ok(reply) => Ok(reply),
        Err(e) => Err(format!("{addr}: `{}`: {e}", args.join(" "))),
    }
}

/// `INFO replication` of the node at `addr`.
fn replication_of(addr: SocketAddr) -> Result<String, String> {
    Ok(ask(addr, &["INFO", "replication"])?.as_text().unwrap_or_default())
}

/// Parses a `CLUSTER SLOTS` reply (RESP2): `[[start, end, [ip, port, id, …], replica…], …]`.
fn parse_slots(reply: &Reply) -> Result<Vec<SlotRange>, String> {
    let bad = |what: &str| format!("unexpected CLUSTER SLOTS {what}: {reply:?}");
    let node = |entry: &Reply| -> Option<SocketAddr> {
        let [ip, port, ..] = entry.as_array()? else { return None };
        let ip: IpAddr = ip.as_text()?.parse().ok()?;
        Some(SocketAddr::new(ip, u16::try_from(port.as_int()?).ok()?))
    };
    let ranges = reply.as_array().ok_or_else(|| bad("reply"))?;
    ranges
        .iter()
        .map(|range| {
            let [start, end, master, replicas @ ..] = range.as_array().ok_or_else(|| bad("range"))? else {
                return Err(bad("range"));
            };
            let slot = |r: &Reply| r.as_int().and_then(|s| u16::try_from(s).ok()).ok_or_else(|| bad("slot"));
            Ok(SlotRange {
                start: slot(start)?,
                end: slot(end)?,
                master: node(master).ok_or_else(|| bad("node"))?,
                replicas: replicas
                    .iter()
                    .map(|r| node(r).ok_or_else(|| bad("node")))
                    .collect::<Result<_, _>>()?,
            })
        })
        .collect()
}

/// Parses `CLUSTER NODES`: `<id> <ip:port@cport[,hostname]> <flags> <master|-> <ping-sent>
/// <pong-recv> <config-epoch> <link-state> <slot>…`.
fn parse_nodes(text: &str) -> Result<Vec<NodeLine>, String> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 {
                return Err(format!("short CLUSTER NODES line {line:?}"));
            }
            let host_port = fields[1].split(['@', ',']).next().unwrap_or_default();
            let slots = fields[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .map(|s| {
                    let (a, b) = s.split_once('-').unwrap_or((s, s));
                    Ok((a.parse().map_err(|_| line.to_string())?, b.parse().map_err(|_| line.to_string())?))
                })
                .collect::<Result<_, String>>()
                .map_err(|l| format!("bad slots in CLUSTER NODES line {l:?}"))?;
            Ok(NodeLine {
                id: fields[0].to_string(),
                addr: host_port.parse().ok(),
                flags: fields[2].split(',').map(String::from).collect(),
                master_id: Some(fields[3]).filter(|m| *m != "-").map(String::from),
                link: fields[7].to_string(),
                slots,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cluster_nodes_of_every_version() {
        let text = "\
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@40001 myself,master - 0 0 1 connected 0-5460 \
[5461->-292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f]
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@40002,host-b slave \
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238316232 2 connected
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f :0@0 master,fail?,noaddr - 1 2 3 disconnected 7 9-10
";
        let lines = parse_nodes(text).unwrap();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0].addr, Some("127.0.0.1:30001".parse().unwrap()));
        assert!(lines[0].has_flag("master") && lines[0].has_flag("myself"));
        assert_eq!(lines[0].slots, [(0, 5460)]);
        assert_eq!(lines[1].addr, Some("127.0.0.1:30002".parse().unwrap()));
        assert_eq!(lines[1].master_id.as_deref(), Some("e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca"));
        assert_eq!(lines[2].addr, None);
        assert!(lines[2].has_flag("fail?"));
        assert_eq!(
            (lines[2].link.as_str(), lines[2].slots.as_slice()),
            ("disconnected", &[(7, 7), (9, 10)][..])
        );
        assert!(parse_nodes("x y z").is_err());
    }

    #[test]
    fn parses_cluster_slots() {
        let node = |port: i64, extra: Option<Reply>| {
            let mut items =
                vec![Reply::Bulk(b"127.0.0.1".to_vec()), Reply::Int(port), Reply::Bulk(b"id".to_vec())];
            items.extend(extra);
            Reply::Array(items)
        };
        let reply = Reply::Array(vec![Reply::Array(vec![
            Reply::Int(0),
            Reply::Int(5460),
            node(30001, None),
            node(30004, Some(Reply::Array(vec![]))),
        ])]);
        let ranges = parse_slots(&reply).unwrap();
        assert_eq!(
            ranges,
            [SlotRange {
                start: 0,
                end: 5460,
                master: "127.0.0.1:30001".parse().unwrap(),
                replicas: vec!["127.0.0.1:30004".parse().unwrap()],
            }]
        );
        assert!(ranges[0].contains(5460) && !ranges[0].contains(5461));
        assert!(parse_slots(&Reply::Int(1)).is_err());
    }
}
