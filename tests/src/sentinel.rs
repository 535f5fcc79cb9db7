//! A real Redis/Valkey Sentinel topology for tests: a master, its replica, and three
//! sentinels watching them, on loopback.
//!
//! [`Topology::start`] starts the two data nodes ([`Server`]s: the replica with
//! [`Options::replica_of`], both with `repl-diskless-sync-delay 0` and
//! `repl-ping-replica-period 1`) and three sentinels ([`Options::sentinel`]: each the same
//! binary run as `<binary> sentinel.conf --sentinel` in its own directory on a reserved
//! loopback port, quorum 2, `down-after-milliseconds` 1000 by default
//! ([`TopologyOptions::down_after`]), `failover-timeout` 5000), then waits until every
//! sentinel names the master, knows its replica (`num-slaves` 1) and the two other sentinels
//! (`num-other-sentinels` 2), and the replica's link is up. A topology can also be started
//! without sentinels ([`Topology::start_pair`]), for failovers done by hand
//! ([`Topology::swap_roles`]).
//!
//! Options ([`TopologyOptions`]): AOF, `requirepass` and TLS on the data nodes
//! ([`TopologyOptions::data`]); a least-privilege ACL user on the data nodes that the replica
//! and the sentinels log in as ([`TopologyOptions::data_user`], [`DATA_USER_RULE`]); the
//! sentinels' own password and ACL user ([`TopologyOptions::sentinel_pass`],
//! [`TopologyOptions::sentinel_user`]). What each server takes: all four sentinels (Redis 6.2,
//! 7.0, Valkey 8.1, Redis 8.10) accept `requirepass`, `user …` lines, `sentinel auth-user`,
//! `sentinel sentinel-user`/`sentinel-pass`, `sentinel resolve-hostnames` and
//! `announce-hostnames` in `sentinel.conf`, and `ACL WHOAMI`, `AUTH user pass` and
//! `HELLO 3 AUTH user pass` from clients; TLS (`tls-port` on nodes and sentinels,
//! `tls-replication yes`, the plain ports kept open for the harness) only on Redis 7.0 and
//! 8.10, whose sentinels then name the nodes by their TLS ports.
//!
//! Failovers: [`Topology::kill_master`] kills the master with SIGKILL and waits until the
//! sentinels have promoted the replica; [`Topology::failover`] asks for one
//! (`SENTINEL FAILOVER`, retried while refused). Both wait ([`Topology::wait_for_master`])
//! until every live sentinel names the new master and it answers `ROLE` master and accepts a
//! write. The old master, restarted ([`Topology::restart`]), comes back as the new one's
//! replica once the sentinels have turned it ([`Topology::wait_replica_of`],
//! [`Topology::wait_settled`]). Every wait is bounded ([`SETTLE_TIMEOUT`]) and panics with each
//! data node's `INFO replication`, what each sentinel says (`SENTINEL MASTER`) and the logs'
//! tails. Dropping the topology kills every process and removes their directories (and the
//! shared PKI's, with TLS).
//!
//! # Measured
//!
//! Here (2 cores, loopback, three sentinels, quorum 2, `down-after-milliseconds` 1000; the
//! harness tests print these):
//!
//! - **kill -9 of the master → every sentinel names the replica, which answers `ROLE` master
//!   and takes a write**: 2.25–2.30 s on each of Redis 6.2, 7.0, Valkey 8.1 and Redis 8.10
//!   (down-after 1 s, then the vote and the promotion).
//! - **`SENTINEL FAILOVER`**: the sentinels name the new master 1.10–1.21 s after it is
//!   accepted; the old master goes on answering `ROLE` master — and taking writes, which its
//!   demotion drops — until 11.2–11.4 s after the request (about 10 s after the switch: the
//!   sentinels look at a replica's `INFO` every 10 s), on every server.
//! - **The old master restarted after a kill** (without AOF: empty) answers `ROLE`
//!   `[master, 0, []]` for 10.07–10.10 s before the sentinels turn it into a replica.
//!
//! # What the servers do (observed on all four; `tests/SENTINEL_NOTES.md` has the bytes)
//!
//! - `SENTINEL get-master-addr-by-name` → `[host, port]` (two bulk strings, an array in RESP3
//!   too); an unknown name → `*-1` / `_`. `SUBSCRIBE +switch-master` → `[subscribe,
//!   +switch-master, 1]` and the message `[message, +switch-master, "<name> <old-ip>
//!   <old-port> <new-ip> <new-port>"]`: arrays in RESP2, pushes `>3` in RESP3.
//! - A sentinel's `HELLO` has `mode sentinel` and **no `role`** (`*12` / `%6`); its `ROLE` is
//!   `[sentinel, [<names>]]`; it has no `SELECT` (`-ERR unknown command …`). With a
//!   `requirepass`, anything before `AUTH` is `-NOAUTH Authentication required.`; without
//!   one, `AUTH pw` is `-ERR AUTH <password> called without any password configured for the
//!   default user. …` and `AUTH user pw` is `-WRONGPASS …`.
//! - A data node's `HELLO` names its `role` (`master`/`replica`) to any user, also while
//!   loading; `ROLE` is `@admin`: a `+@stream +@connection` user gets `-NOPERM`.
//! - `REPLICAOF` sent to a master (a role swap by hand): a reader parked in
//!   `XREADGROUP … BLOCK` gets `-UNBLOCKED force unblock from blocking operation, instance
//!   state changed (master -> replica?)` at once and the server closes its connection; idle
//!   connections stay open and every write (`XACK`, `XREADGROUP` with `>` or an id) answers
//!   `-READONLY You can't write against a read only replica.`
//! - The sentinels demote an old master with `REPLICAOF` and `CLIENT KILL` inside one
//!   `MULTI`/`EXEC` (its log and command stats show them): every client connection is
//!   closed, a parked reader's without an answer (no `-UNBLOCKED`, no `-READONLY`).

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::thread;
use std::time::{Duration, Instant};

use crate::admin::{info_value, Admin, Reply};
use crate::certs::Pki;
use crate::server::{Flavor, Options, Server, Tls, Watch};

/// The service's name the sentinels watch.
pub const SERVICE: &str = "mymaster";

/// How many sentinels a topology runs.
pub const SENTINELS: usize = 3;

/// The bound of every wait: the topology forming, a failover, a node turned into a replica.
pub const SETTLE_TIMEOUT: Duration = Duration::from_secs(40);

/// The pause between two polls of a wait.
const POLL: Duration = Duration::from_millis(50);

/// An ACL user and its password.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Login {
    /// The user's name.
    pub user: String,
    /// Its password.
    pub pass: String,
}

impl Login {
    /// `user` with `pass`.
    pub fn new(user: &str, pass: &str) -> Login {
        Login { user: user.to_string(), pass: pass.to_string() }
    }
}

/// The ACL rule of [`TopologyOptions::data_user`]: what a replica and a sentinel need of a
/// data node and no more (the permissions the Redis Sentinel documentation lists, taken by
/// all four servers).
pub const DATA_USER_RULE: &str = "on ~* &* +psync +replconf +ping +multi +exec +slaveof +replicaof \
    +subscribe +publish +role +info +config|rewrite +client|setname +client|kill +script|kill";

/// How a [`Topology`] is set up.
#[derive(Clone, Debug)]
pub struct TopologyOptions {
    /// `down-after-milliseconds`: how long a master may not answer before the sentinels
    /// start a failover. Default 1 s.
    pub down_after: Duration,
    /// The data nodes' options (AOF, a password, TLS); the replica's `replica_of` is set
    /// here. With TLS, every node and sentinel shares one PKI and speaks TLS to the others.
    pub data: Options,
    /// An ACL user on the data nodes ([`DATA_USER_RULE`]) that the replica logs in to its
    /// master as (`masteruser`/`masterauth`) and the sentinels to the nodes as
    /// (`sentinel auth-user`/`auth-pass`), in place of `default` with `requirepass`. Give the
    /// data nodes a `requirepass` too, so that nothing gets in without a login.
    pub data_user: Option<Login>,
    /// The sentinels' own password (their `requirepass`), if they want one; they log in to
    /// each other with it (`sentinel sentinel-pass`) unless they have a `sentinel_user`.
    pub sentinel_pass: Option<String>,
    /// An ACL user on the sentinels (a `user … ~* &* +@all` line in `sentinel.conf`, which
    /// every flavor's sentinel takes), the one they log in to each other as
    /// (`sentinel sentinel-user`/`sentinel-pass`) and the one [`Topology::sentinels`] gives
    /// a consumer.
    pub sentinel_user: Option<Login>,
    /// Start the sentinels (`false`: the two data nodes only).
    pub sentinels: bool,
}

impl Default for TopologyOptions {
    fn default() -> TopologyOptions {
        TopologyOptions {
            down_after: Duration::from_millis(1000),
            data: Options::default(),
            data_user: None,
            sentinel_pass: None,
            sentinel_user: None,
            sentinels: true,
        }
    }
}

/// A master, its replica and three sentinels (see the [module docs](self)).
#[derive(Debug)]
pub struct Topology {
    flavor: Flavor,
    options: TopologyOptions,
    /// The two data nodes, in the order started (the first was the master).
    nodes: Vec<Server>,
    sentinels: Vec<Server>,
    /// The shared PKI's directory, with TLS; last, so it goes after the processes using it.
    _pki_dir: Option<RemovedOnDrop>,
}

/// A directory removed (with what it holds) when this is dropped.
#[derive(Debug)]
struct RemovedOnDrop(std::path::PathBuf);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Topology {
    /// A master, its replica and three sentinels of `flavor`, with default options.
    pub fn start(flavor: Flavor) -> Topology {
        Topology::start_with(flavor, TopologyOptions::default())
    }

    /// A master and its replica, without sentinels: failovers are done by hand
    /// ([`Topology::swap_roles`]).
    pub fn start_pair(flavor: Flavor) -> Topology {
        Topology::start_with(flavor, TopologyOptions { sentinels: false, ..TopologyOptions::default() })
    }

    /// A topology of `flavor` set up as `options` say. Panics if it does not form within
    /// [`SETTLE_TIMEOUT`].
    pub fn start_with(flavor: Flavor, options: TopologyOptions) -> Topology {
        let mut data = options.data.clone();
        if let Some(login) = &options.data_user {
            data = data
                .with_acl_user(&format!("{} >{} {DATA_USER_RULE}", login.user, login.pass))
                .with_master_login(Some(&login.user), &login.pass);
        }
        let tls = data.tls.is_some();
        let mut pki_dir = None;
        if tls {
            let dir = std::env::temp_dir().join(format!("pelican-pki-{}-{}", std::process::id(), unique()));
            std::fs::create_dir_all(&dir).expect("a directory for the shared PKI");
            let dir = pki_dir.insert(RemovedOnDrop(dir));
            data.shared_pki = Some(Pki::generate(&dir.0).expect("the shared test PKI"));
        }
        let master = Server::start_with(flavor, data.clone());
        // Over TLS the nodes (and sentinels) reach each other on the TLS ports.
        let reach =
            |server: &Server| if tls { server.tls_addr().expect("a TLS port") } else { server.addr() };
        let replica = Server::start_with(flavor, data.clone().with_replica_of(reach(&master)));
        let mut sentinels = Vec::new();
        if options.sentinels {
            for _ in 0..SENTINELS {
                let (auth_user, auth_pass) = match &options.data_user {
                    Some(login) => (Some(login.user.clone()), Some(login.pass.clone())),
                    None => (None, data.requirepass.clone()),
                };
                let watch = Watch {
                    service: SERVICE.to_string(),
                    master: master.addr(),
                    quorum: 2,
                    down_after: options.down_after,
                    failover_timeout: Duration::from_secs(5),
                    auth_pass,
                    auth_user,
                    peer_login: options
                        .sentinel_user
                        .as_ref()
                        .map(|l| (Some(l.user.clone()), l.pass.clone())),
                    master_tls_port: master.tls_port(),
                };
                let mut sentinel_options = Options {
                    requirepass: options.sentinel_pass.clone(),
                    tls: data.tls.map(|_| Tls::default()),
                    shared_pki: data.shared_pki.clone(),
                    ..Options::default()
                }
                .with_sentinel(watch);
                if let Some(login) = &options.sentinel_user {
                    sentinel_options = sentinel_options.with_full_user(&login.user, &login.pass);
                }
                sentinels.push(Server::start_with(flavor, sentinel_options));
            }
        }
        let topology =
            Topology { flavor, options, nodes: vec![master, replica], sentinels, _pki_dir: pki_dir };
        let (master, replica) = (topology.nodes[0].addr(), topology.nodes[1].addr());
        topology.wait_for("the topology to form", || {
            topology.check_replica(replica, master)?;
            for sentinel in topology.sentinel_addrs() {
                let named = topology.named_by(sentinel)?;
                if named != topology.reach(master) {
                    return Err(format!("sentinel {sentinel} names {named}, not {master}"));
                }
                let about = topology.sentinel_cmd(sentinel, &["SENTINEL", "MASTER", SERVICE])?;
                let about = pairs(&about);
                if about.get("num-slaves").map(String::as_str) != Some("1") {
                    return Err(format!("sentinel {sentinel} does not know the replica yet"));
                }
                let others = about.get("num-other-sentinels").map(String::as_str);
                if others != Some("2") {
                    return Err(format!("sentinel {sentinel} knows {others:?} other sentinels, not 2"));
                }
            }
            Ok(())
        });
        topology
    }

    /// The flavor every process runs.
    pub fn flavor(&self) -> Flavor {
        self.flavor
    }

    /// The service's name the sentinels watch ([`SERVICE`]).
    pub fn service(&self) -> &'static str {
        SERVICE
    }

    /// The options the topology was started with.
    pub fn options(&self) -> &TopologyOptions {
        &self.options
    }

    /// The two data nodes, in the order started (the first was the master then).
    pub fn nodes(&self) -> &[Server] {
        &self.nodes
    }

    /// The data node at `addr` (its plain or TLS address).
    pub fn node(&self, addr: SocketAddr) -> &Server {
        &self.nodes[self.index_of(addr)]
    }

    /// The data node at `addr` (its plain address), to kill or restart.
    pub fn node_mut(&mut self, addr: SocketAddr) -> &mut Server {
        let i = self.index_of(addr);
        &mut self.nodes[i]
    }

    /// The sentinels, in the order started (killed ones too).
    pub fn sentinel_nodes(&self) -> &[Server] {
        &self.sentinels
    }

    /// The sentinels' plain addresses (killed ones too).
    pub fn sentinel_addrs(&self) -> Vec<SocketAddr> {
        self.sentinels.iter().map(Server::addr).collect()
    }

    /// The sentinels' TLS addresses (with TLS).
    pub fn sentinel_tls_addrs(&self) -> Vec<SocketAddr> {
        self.sentinels.iter().filter_map(Server::tls_addr).collect()
    }

    /// The sentinels as a consumer is given them: their plain addresses (TLS ones with TLS),
    /// the service, and their login if they want one ([`TopologyOptions::sentinel_user`],
    /// else [`TopologyOptions::sentinel_pass`]).
    pub fn sentinels(&self) -> pelican::Sentinels {
        let addrs =
            if self.options.data.tls.is_some() { self.sentinel_tls_addrs() } else { self.sentinel_addrs() };
        let nodes = addrs.iter().map(|a| pelican::HostPort::new(a.ip().to_string(), a.port()));
        let sentinels = pelican::Sentinels::new(SERVICE, nodes);
        match self.sentinel_login() {
            Some((user, pass)) => sentinels.auth(user, pass),
            None => sentinels,
        }
    }

    /// An admin connection to the sentinel at `addr` (its plain address), logged in as
    /// [`sentinels`](Self::sentinels) says. Panics if it cannot connect or log in.
    pub fn sentinel_admin(&self, addr: SocketAddr) -> Admin {
        let mut admin = Admin::connect(addr);
        if let Some((user, pass)) = self.sentinel_login() {
            let mut args = vec!["AUTH"];
            args.extend(user);
            args.push(pass);
            let reply = admin.cmd(&args);
            assert!(reply.is_ok(), "pelican-tests sentinel: sentinel {addr} refused its login: {reply:?}");
        }
        admin
    }

    /// The shared PKI, with TLS.
    pub fn pki(&self) -> Option<&Pki> {
        self.nodes[0].pki()
    }

    /// The master now, as every sentinel names it (their answers must agree), by its plain
    /// address. Without sentinels, the data node whose `ROLE` is master.
    pub fn master(&self) -> SocketAddr {
        if self.sentinels.is_empty() {
            return self.with_role("master").unwrap_or_else(|| panic!("{}", self.failure("no master")));
        }
        let mut named = Vec::new();
        for sentinel in self.live_sentinels() {
            match self.named_by(sentinel) {
                Ok(addr) => named.push(self.plain(addr)),
                Err(e) => panic!("{}", self.failure(&e)),
            }
        }
        named.dedup();
        match &named[..] {
            [one] => *one,
            _ => panic!("{}", self.failure(&format!("the sentinels disagree: {named:?}"))),
        }
    }

    /// The data node that is not [`master`](Self::master).
    pub fn replica(&self) -> SocketAddr {
        let master = self.master();
        self.nodes.iter().map(Server::addr).find(|a| *a != master).expect("two data nodes")
    }

    /// An admin connection to the data node at `addr` (logged in if it wants a password).
    pub fn admin(&self, addr: SocketAddr) -> Admin {
        self.nodes[self.index_of(addr)].admin()
    }

    /// Kills the master with SIGKILL and waits until the sentinels have promoted the replica
    /// ([`wait_for_master`](Self::wait_for_master)). Returns the killed node's address.
    pub fn kill_master(&mut self) -> SocketAddr {
        let old = self.master();
        self.node_mut(old).kill9();
        self.wait_for_master(old);
        old
    }

    /// Asks for a failover (`SENTINEL FAILOVER` to the first live sentinel, retried while
    /// it answers that it cannot yet: `-INPROG`, `-NOGOODSLAVE`) and waits until it is done
    /// ([`wait_for_master`](Self::wait_for_master)). Returns the new master. The old one
    /// still answers `ROLE` master for about 10 s after this returns (see the module docs):
    /// [`wait_replica_of`](Self::wait_replica_of) waits until it has been turned.
    ///
    /// A failover the sentinels accept can still abort (`-failover-abort-slave-timeout`:
    /// seen on a loaded machine, the promoted replica turned back by a sentinel that had not
    /// heard of the new epoch yet) and is not tried again on its own: it is asked again.
    pub fn failover(&self) -> SocketAddr {
        let old = self.master();
        let sentinel = *self.live_sentinels().first().expect("a live sentinel");
        for _ in 0..2 {
            self.ask_failover(sentinel);
            // The failover timeout (5 s) and then some.
            let until = Instant::now() + Duration::from_secs(12);
            while Instant::now() < until {
                if self.new_master(old).is_ok() {
                    return self.wait_for_master(old);
                }
                thread::sleep(POLL);
            }
        }
        self.ask_failover(sentinel);
        self.wait_for_master(old)
    }

    /// `SENTINEL FAILOVER`, sent until it is taken.
    fn ask_failover(&self, sentinel: SocketAddr) {
        self.wait_for("SENTINEL FAILOVER to be taken", || {
            match self.sentinel_cmd(sentinel, &["SENTINEL", "FAILOVER", SERVICE])? {
                Reply::Simple(ok) if ok == "OK" => Ok(()),
                other => Err(format!("SENTINEL FAILOVER answered {other:?}")),
            }
        });
    }

    /// Waits until every sentinel names a master other than `old`, which answers `ROLE`
    /// master and accepts a write; returns it.
    pub fn wait_for_master(&self, old: SocketAddr) -> SocketAddr {
        let mut new = None;
        self.wait_for(&format!("a new master in place of {old}"), || {
            new = Some(self.new_master(old)?);
            Ok(())
        });
        new.expect("set by the wait")
    }

    /// The master the sentinels all name in place of `old`, if it answers `ROLE` master and
    /// takes a write; else why not.
    fn new_master(&self, old: SocketAddr) -> Result<SocketAddr, String> {
        let mut named = Vec::new();
        for sentinel in self.live_sentinels() {
            named.push(self.plain(self.named_by(sentinel)?));
        }
        named.dedup();
        let [master] = named[..] else { return Err(format!("the sentinels name {named:?}")) };
        if master == old {
            return Err(format!("the sentinels still name {old}"));
        }
        let role = self.node_cmd(master, &["ROLE"])?;
        if role.as_array().and_then(|r| r.first()).and_then(Reply::as_text).as_deref() != Some("master") {
            return Err(format!("{master} does not answer ROLE master yet"));
        }
        match self.node_cmd(master, &["SET", "pelican-tests:probe", "1"])? {
            Reply::Error(e) => Err(format!("{master} refuses a write: {e}")),
            _ => Ok(master),
        }
    }

    /// Restarts the (killed) data node at `addr` on its port, with its directory (its AOF).
    pub fn restart(&mut self, addr: SocketAddr) {
        self.node_mut(addr).restart();
    }

    /// Waits until the sentinels agree on a master and the other data node replicates it
    /// with its link up, whichever way round (a node restarted after a kill may be promoted
    /// again by a later failover); returns the master.
    pub fn wait_settled(&self) -> SocketAddr {
        let mut settled = None;
        self.wait_for("the topology to settle", || {
            let mut named = Vec::new();
            for sentinel in self.live_sentinels() {
                named.push(self.plain(self.named_by(sentinel)?));
            }
            named.dedup();
            let [master] = named[..] else { return Err(format!("the sentinels name {named:?}")) };
            let replica = self.nodes.iter().map(Server::addr).find(|a| *a != master).expect("two data nodes");
            self.check_replica(replica, master)?;
            settled = Some(master);
            Ok(())
        });
        settled.expect("set by the wait")
    }

    /// Waits until the data node at `replica` is a replica of `master` with its link up.
    pub fn wait_replica_of(&self, replica: SocketAddr, master: SocketAddr) {
        self.wait_for(&format!("{replica} to replicate {master}"), || self.check_replica(replica, master));
    }

    /// Without sentinels: the replica becomes the master (`REPLICAOF NO ONE`) and the master
    /// its replica (`REPLICAOF`), as an operator (or a managed service) does; waits until
    /// both say so and the link is up. Returns the new master.
    pub fn swap_roles(&self) -> SocketAddr {
        let (old, new) = (self.master(), self.replica());
        let reach = self.reach(new);
        self.node_cmd(new, &["REPLICAOF", "NO", "ONE"]).expect("REPLICAOF NO ONE");
        let (host, port) = (reach.ip().to_string(), reach.port().to_string());
        self.node_cmd(old, &["REPLICAOF", &host, &port]).expect("REPLICAOF");
        self.wait_replica_of(old, new);
        new
    }

    /// Kills sentinel `i` (SIGKILL). The others go on; a failover still needs two.
    pub fn kill_sentinel(&mut self, i: usize) {
        self.sentinels[i].kill9();
    }

    /// Restarts sentinel `i` with what it had learned (its rewritten configuration).
    pub fn restart_sentinel(&mut self, i: usize) {
        self.sentinels[i].restart();
    }

    /// The plain addresses of the sentinels that run.
    fn live_sentinels(&self) -> Vec<SocketAddr> {
        self.sentinels.iter().filter(|s| s.pid().is_some()).map(Server::addr).collect()
    }

    /// How a client logs in to the sentinels, if they want it.
    fn sentinel_login(&self) -> Option<(Option<&str>, &str)> {
        match (&self.options.sentinel_user, &self.options.sentinel_pass) {
            (Some(login), _) => Some((Some(login.user.as_str()), login.pass.as_str())),
            (None, Some(pass)) => Some((None, pass.as_str())),
            (None, None) => None,
        }
    }

    /// Where the other processes reach the data node at `addr`: its TLS address with TLS.
    fn reach(&self, addr: SocketAddr) -> SocketAddr {
        match self.options.data.tls {
            Some(_) => self.nodes[self.index_of(addr)].tls_addr().expect("a TLS port"),
            None => addr,
        }
    }

    /// The plain address of the data node reached at `addr` (its TLS address, with TLS).
    fn plain(&self, addr: SocketAddr) -> SocketAddr {
        self.nodes.iter().find(|n| n.tls_addr() == Some(addr)).map_or(addr, Server::addr)
    }

    fn index_of(&self, addr: SocketAddr) -> usize {
        self.nodes
            .iter()
            .position(|n| n.addr() == addr || n.tls_addr() == Some(addr))
            .unwrap_or_else(|| panic!("pelican-tests sentinel: no data node at {addr}"))
    }

    /// The data node whose `ROLE` is `role`, if one is.
    fn with_role(&self, role: &str) -> Option<SocketAddr> {
        self.nodes.iter().filter(|n| n.pid().is_some()).map(Server::addr).find(|&addr| {
            let reply = self.node_cmd(addr, &["ROLE"]);
            reply.ok().and_then(|r| r.as_array().and_then(|r| r.first()).and_then(Reply::as_text)).as_deref()
                == Some(role)
        })
    }

    /// The master `sentinel` names (`SENTINEL get-master-addr-by-name`).
    fn named_by(&self, sentinel: SocketAddr) -> Result<SocketAddr, String> {
        let reply = self.sentinel_cmd(sentinel, &["SENTINEL", "get-master-addr-by-name", SERVICE])?;
        let parts = reply.as_array().unwrap_or_default();
        let (Some(host), Some(port)) =
            (parts.first().and_then(Reply::as_text), parts.get(1).and_then(Reply::as_text))
        else {
            return Err(format!("sentinel {sentinel} answered {reply:?}"));
        };
        format!("{host}:{port}").parse().map_err(|e| format!("sentinel {sentinel} named {host}:{port}: {e}"))
    }

    /// Whether `replica` replicates `master` (by its address as reached) with its link up.
    fn check_replica(&self, replica: SocketAddr, master: SocketAddr) -> Result<(), String> {
        let info = self.node_cmd(replica, &["INFO", "replication"])?.as_text().unwrap_or_default();
        let want = self.reach(master).port().to_string();
        if info_value(&info, "role").as_deref() != Some("slave")
            || info_value(&info, "master_port") != Some(want)
        {
            return Err(format!("{replica} is not a replica of {master} yet"));
        }
        if info_value(&info, "master_link_status").as_deref() != Some("up") {
            return Err(format!("{replica}'s link to {master} is not up yet"));
        }
        Ok(())
    }

    /// A command to the data node at `addr` on a fresh connection (logged in).
    fn node_cmd(&self, addr: SocketAddr, args: &[&str]) -> Result<Reply, String> {
        let node = &self.nodes[self.index_of(addr)];
        let mut admin =
            Admin::try_connect(node.addr(), Duration::from_secs(1)).map_err(|e| format!("{addr}: {e}"))?;
        if let Some(pass) = &self.options.data.requirepass {
            admin.try_cmd(&["AUTH", pass]).map_err(|e| format!("{addr}: AUTH: {e}"))?;
        }
        admin.try_cmd(args).map_err(|e| format!("{addr}: {}: {e}", args.join(" ")))
    }

    /// A command to `sentinel` on a fresh connection (logged in if it wants it).
    fn sentinel_cmd(&self, sentinel: SocketAddr, args: &[&str]) -> Result<Reply, String> {
        let mut admin = Admin::try_connect(sentinel, Duration::from_secs(1))
            .map_err(|e| format!("sentinel {sentinel}: {e}"))?;
        if let Some((user, pass)) = self.sentinel_login() {
            let mut auth = vec!["AUTH"];
            auth.extend(user);
            auth.push(pass);
            match admin.try_cmd(&auth) {
                Ok(reply) if reply.is_ok() => {}
                Ok(reply) => return Err(format!("sentinel {sentinel}: AUTH answered {reply:?}")),
                Err(e) => return Err(format!("sentinel {sentinel}: AUTH: {e}")),
            }
        }
        admin.try_cmd(args).map_err(|e| format!("sentinel {sentinel}: {}: {e}", args.join(" ")))
    }

    /// Polls `check` every [`POLL`] until it passes; panics with its last complaint and every
    /// process's state after [`SETTLE_TIMEOUT`].
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

    /// A panic message: `why`, then each process's role (or what its sentinel says) and the
    /// tail of its log.
    fn failure(&self, why: &str) -> String {
        let mut out = format!("pelican-tests sentinel topology ({}): {why}", self.flavor);
        for node in &self.nodes {
            let addr = node.addr();
            let role = match self.node_cmd(addr, &["INFO", "replication"]) {
                Ok(reply) => reply.as_text().unwrap_or_default(),
                Err(e) => e,
            };
            let _ = write!(out, "\n=== data node {addr}\n{role}\n--- log\n{}", node.log_tail(12));
        }
        for sentinel in &self.sentinels {
            let addr = sentinel.addr();
            let said = match self.sentinel_cmd(addr, &["SENTINEL", "MASTER", SERVICE]) {
                Ok(reply) => format!("{:?}", pairs(&reply)),
                Err(e) => e,
            };
            let _ = write!(out, "\n=== sentinel {addr}\n{said}\n--- log\n{}", sentinel.log_tail(12));
        }
        out
    }
}

/// A flat `[key, value, …]` reply as a map of texts (`SENTINEL MASTER`).
fn pairs(reply: &Reply) -> std::collections::BTreeMap<String, String> {
    let items = reply.as_array().unwrap_or_default();
    items.chunks(2).filter_map(|kv| Some((kv.first()?.as_text()?, kv.get(1)?.as_text()?))).collect()
}

/// A number unique in this process (for directory names).
fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
