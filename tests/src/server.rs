//! Real Redis/Valkey servers for tests, each in its own temporary directory on a loopback port.
//!
//! A [`Server`] is a child process started from one of the binaries that
//! `scripts/install-servers` puts into `<workspace>/.servers/` (see [`Flavor`]). It runs with
//! `--daemonize no`, in a fresh directory under [`std::env::temp_dir`], with stdout and stderr
//! appended to `server.log` in that directory. Dropping the `Server` kills the process (by its
//! own pid, through [`std::process::Child::kill`]) and removes the directory.
//!
//! With [`Options::tls`] (Redis 7.0 and 8.10 only: [`Flavor::TLS`]), the server also serves TLS on a second port, with
//! a [`Pki`] generated into its directory.
//!
//! With [`Options::cluster`], the server runs in cluster mode as a lone node (see
//! [`crate::cluster`] for a whole cluster); its cluster bus listens on port + 10000
//! ([`CLUSTER_BUS_OFFSET`]), which is reserved and retried like the port itself.

use std::collections::BTreeSet;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::admin::{info_value, Admin, Reply};
use crate::certs::{Pki, ServerCert};

/// How long a server gets to answer `PING` with `PONG` after being (re)started.
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// How many ports [`Server::start`] tries when the chosen one turns out to be taken.
const PORT_ATTEMPTS: usize = 5;

/// Environment variable that overrides the directory holding the server binaries.
pub const SERVERS_DIR_ENV: &str = "PELICAN_SERVERS_DIR";

/// The name of the log file (server stdout and stderr) inside a server's directory.
pub const LOG_FILE: &str = "server.log";

/// The name of the cluster configuration file (`--cluster-config-file`) inside a cluster
/// node's directory. It survives [`Server::restart`], so a restarted node keeps its id.
pub const CLUSTER_CONFIG_FILE: &str = "nodes.conf";

/// How far a cluster node's bus port is from its port. Redis 6.2 has no `cluster-port`
/// setting and always uses port + 10000; Redis 7.0, Valkey 8.1 and Redis 8.10 are told the
/// same with `--cluster-port`, so one rule holds for every flavor.
pub const CLUSTER_BUS_OFFSET: u16 = 10000;

/// `--cluster-node-timeout` of a cluster node: how long a node may be unreachable before
/// its peers flag it as failing. Short, so failure tests are quick; not so short that a busy
/// machine makes nodes flap.
pub const CLUSTER_NODE_TIMEOUT: Duration = Duration::from_millis(2000);

/// Which server to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Flavor {
    /// Redis 6.2: two-element `XAUTOCLAIM` replies.
    Redis62,
    /// Redis 7.0: three-element `XAUTOCLAIM` replies.
    Redis70,
    /// Valkey 8.1 (reports itself as `redis_version:7.2.4`).
    Valkey81,
    /// Redis 8.10: speaks `XREADGROUP … CLAIM`, `XNACK`, `XACKDEL`, `MAXSIZE`, `XADD … IDMP`.
    Redis810,
}

impl Flavor {
    /// Every flavor, oldest first.
    pub const ALL: [Flavor; 4] = [Flavor::Redis62, Flavor::Redis70, Flavor::Valkey81, Flavor::Redis810];

    /// The flavors whose binaries serve TLS (built with OpenSSL): Redis 7.0 (Debian's) and
    /// Redis 8.10 (built with `BUILD_TLS=yes`). The Redis 6.2 and Valkey 8.1 binaries are
    /// built without it.
    pub const TLS: [Flavor; 2] = [Flavor::Redis70, Flavor::Redis810];

    /// Whether this flavor's binary serves TLS (see [`Flavor::TLS`]).
    pub fn serves_tls(self) -> bool {
        Flavor::TLS.contains(&self)
    }

    /// The flavor's name, which is also its binary's file name: `redis-6.2`, `redis-7.0`,
    /// `valkey-8.1`, `redis-8.10`.
    pub fn name(self) -> &'static str {
        match self {
            Flavor::Redis62 => "redis-6.2",
            Flavor::Redis70 => "redis-7.0",
            Flavor::Valkey81 => "valkey-8.1",
            Flavor::Redis810 => "redis-8.10",
        }
    }

    /// Where this flavor's binary is expected: `<servers dir>/<name>`
    /// (see [`servers_dir`]).
    pub fn binary(self) -> PathBuf {
        servers_dir().join(self.name())
    }
}

impl fmt::Display for Flavor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The directory holding the server binaries: `$PELICAN_SERVERS_DIR` if set, else
/// `<workspace root>/.servers` (where `scripts/install-servers` installs them).
pub fn servers_dir() -> PathBuf {
    match std::env::var_os(SERVERS_DIR_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("the tests crate lives inside the workspace")
            .join(".servers"),
    }
}

/// How to configure a [`Server`]. `Options::default()` is a plain in-memory server with no
/// persistence and no authentication.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Persist with an append-only file (`--appendonly yes --appendfsync always`) in the
    /// server's directory, so that data survives [`Server::kill9`] + [`Server::restart`].
    pub aof: bool,
    /// `--requirepass`: the password of the `default` user.
    pub requirepass: Option<String>,
    /// ACL users, one rule line each, passed as `--user` arguments, e.g.
    /// `"alice on >secret ~* &* +@all"` (a leading `user ` is accepted and dropped); for a
    /// sentinel, written as `user …` lines into its `sentinel.conf` (every flavor's sentinel
    /// takes them: Redis 6.2, 7.0, Valkey 8.1, Redis 8.10). The line is split on whitespace,
    /// so passwords cannot contain spaces here. The readiness probe and [`Server::admin`] log
    /// in as `default`, so keep that user enabled.
    pub acl_users: Vec<String>,
    /// Also serve TLS on a second port (see [`Tls`]); only the [`Flavor::TLS`] flavors can.
    pub tls: Option<Tls>,
    /// Run in cluster mode: `--cluster-enabled yes`, `--cluster-config-file` in the server's
    /// directory ([`CLUSTER_CONFIG_FILE`]), `--cluster-node-timeout`
    /// ([`CLUSTER_NODE_TIMEOUT`]), `--repl-diskless-sync-delay 0` (a replica syncs at once),
    /// `--repl-ping-replica-period 1` (Redis 7.0 and Valkey 8.1 list a replica in
    /// `CLUSTER SLOTS` only once its replication offset is not 0, which on an idle master
    /// takes one such ping: 10 s by default), and the bus on port + [`CLUSTER_BUS_OFFSET`]
    /// (reserved with the port; `--cluster-port` on all but 6.2). The node starts alone,
    /// owning no slots: [`crate::cluster::Cluster`] joins six of them. Not combinable with
    /// [`Options::tls`].
    pub cluster: bool,
    /// Start as a replica of the master at this address (`--replicaof`; with
    /// `requirepass`, `--masterauth` the same password), syncing at once
    /// (`--repl-diskless-sync-delay 0`, `--repl-ping-replica-period 1`).
    pub replica_of: Option<SocketAddr>,
    /// How this node logs in to its master, now or once a failover makes it a replica:
    /// `--masteruser` (if a user is given) and `--masterauth`. Without it, `requirepass` is
    /// the `masterauth`.
    pub master_login: Option<(Option<String>, String)>,
    /// Run as a Redis Sentinel (`<binary> sentinel.conf --sentinel`) watching a master (see
    /// [`Watch`]); `requirepass` is then the sentinel's own password, and with
    /// [`Options::tls`] it serves TLS on its TLS port and speaks TLS to the nodes. Not
    /// combinable with `cluster`, `aof` or `replica_of`.
    pub sentinel: Option<Watch>,
    /// With [`Options::tls`]: serve with this PKI's certificates rather than a new one of
    /// the server's own, so that the nodes of a topology trust each other (replication and
    /// sentinels speak TLS to them with `tls-replication yes`).
    pub shared_pki: Option<Pki>,
}

/// What a sentinel watches ([`Options::sentinel`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Watch {
    /// The service's name (`sentinel monitor <name> …`).
    pub service: String,
    /// The master's address when the sentinel starts (it learns the replicas and the other
    /// sentinels from it).
    pub master: SocketAddr,
    /// How many sentinels must agree the master is down.
    pub quorum: u32,
    /// `down-after-milliseconds`: how long the master may not answer before it is down.
    pub down_after: Duration,
    /// `failover-timeout`.
    pub failover_timeout: Duration,
    /// The data nodes' password (`sentinel auth-pass`), if they want one.
    pub auth_pass: Option<String>,
    /// The ACL user the sentinel logs in to the data nodes as (`sentinel auth-user`, with
    /// `auth_pass` its password); `None`: `default`.
    pub auth_user: Option<String>,
    /// How the sentinel logs in to the other sentinels (`sentinel sentinel-user`, if a user
    /// is given, and `sentinel sentinel-pass`). `None`: with its own `requirepass`, that
    /// password.
    pub peer_login: Option<(Option<String>, String)>,
    /// The master's TLS port, when the sentinel talks to the nodes over TLS.
    pub master_tls_port: Option<u16>,
}

/// The name of a sentinel's configuration file in its directory (the sentinel rewrites it
/// with what it learns, and reads it back at a restart).
pub const SENTINEL_CONFIG_FILE: &str = "sentinel.conf";

/// How a [`Server`] serves TLS. The plain port stays open alongside (for [`Server::admin`]
/// and the readiness probe); the TLS port is [`Server::tls_port`]. The server trusts the
/// test CA ([`Pki::ca`]) for client certificates.
///
/// `Tls::default()`: the good server certificate, no client certificate required.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Tls {
    /// `--tls-auth-clients yes`: clients must present a certificate signed by the test CA
    /// (such as [`Pki::client_cert`]); otherwise `no`.
    pub client_auth: bool,
    /// Which certificate the server presents.
    pub cert: ServerCert,
}

impl Options {
    /// Turns on AOF persistence (see [`Options::aof`]).
    #[must_use]
    pub fn with_aof(mut self) -> Options {
        self.aof = true;
        self
    }

    /// Sets `requirepass` (see [`Options::requirepass`]).
    #[must_use]
    pub fn with_requirepass(mut self, pass: &str) -> Options {
        self.requirepass = Some(pass.to_string());
        self
    }

    /// Serves TLS too (see [`Options::tls`]).
    #[must_use]
    pub fn with_tls(mut self, tls: Tls) -> Options {
        self.tls = Some(tls);
        self
    }

    /// Starts as a replica of `master` (see [`Options::replica_of`]).
    #[must_use]
    pub fn with_replica_of(mut self, master: SocketAddr) -> Options {
        self.replica_of = Some(master);
        self
    }

    /// Runs as a sentinel (see [`Options::sentinel`]).
    #[must_use]
    pub fn with_sentinel(mut self, watch: Watch) -> Options {
        self.sentinel = Some(watch);
        self
    }

    /// Runs in cluster mode (see [`Options::cluster`]).
    #[must_use]
    pub fn with_cluster(mut self) -> Options {
        self.cluster = true;
        self
    }

    /// Sets how the node logs in to its master (see [`Options::master_login`]).
    #[must_use]
    pub fn with_master_login(mut self, user: Option<&str>, pass: &str) -> Options {
        self.master_login = Some((user.map(str::to_string), pass.to_string()));
        self
    }

    /// Adds an ACL user rule line (see [`Options::acl_users`]).
    #[must_use]
    pub fn with_acl_user(mut self, rule: &str) -> Options {
        self.acl_users.push(rule.to_string());
        self
    }

    /// Adds a user `name` with password `pass` and every permission
    /// (`name on >pass ~* &* +@all`).
    #[must_use]
    pub fn with_full_user(self, name: &str, pass: &str) -> Options {
        self.with_acl_user(&format!("{name} on >{pass} ~* &* +@all"))
    }
}

/// A lookup of host names in place of the system's (a primary endpoint that moves).
pub type Lookup = std::sync::Arc<dyn Fn(&str, u16) -> io::Result<Vec<SocketAddr>> + Send + Sync>;

/// Where a consumer's notices are passed, as they come.
pub type NoticeSink = std::sync::Arc<dyn Fn(&pelican::Notice) + Send + Sync>;

/// Where a consumer connects, and how.
#[derive(Clone)]
pub struct Endpoint {
    /// Where: an address, a host name, or sentinels.
    pub at: pelican::Endpoint,
    /// Nodes to try in turn after a connect to `at` fails (a cluster's others).
    pub fallbacks: Vec<SocketAddr>,
    /// TLS settings and the name the server's certificate must carry, if over TLS.
    pub tls: Option<(pelican_tls::Tls, String)>,
    /// How long a connect (and TLS handshake) may take; `None`: the transport's default.
    pub connect_timeout: Option<std::time::Duration>,
    /// How host names are looked up; `None`: the system's resolver.
    pub lookup: Option<Lookup>,
    /// Where the consumer's notices go too (a transport's `on_notice`), if anywhere.
    pub notices: Option<NoticeSink>,
}

impl Endpoint {
    /// `at`, in plaintext, with the transport's defaults.
    pub fn new(at: impl Into<pelican::Endpoint>) -> Endpoint {
        Endpoint {
            at: at.into(),
            fallbacks: Vec::new(),
            tls: None,
            connect_timeout: None,
            lookup: None,
            notices: None,
        }
    }
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("at", &self.at)
            .field("fallbacks", &self.fallbacks)
            .field("tls", &self.tls.as_ref().map(|(_, host)| host))
            .field("connect_timeout", &self.connect_timeout)
            .field("lookup", &self.lookup.is_some())
            .field("notices", &self.notices.is_some())
            .finish()
    }
}

/// A running server process, owned by the test that started it.
#[derive(Debug)]
pub struct Server {
    flavor: Flavor,
    binary: PathBuf,
    options: Options,
    dir: PathBuf,
    port: u16,
    /// Set whenever `options.tls` is (0 between failed attempts, like `port`).
    tls_port: Option<u16>,
    /// `port + CLUSTER_BUS_OFFSET` whenever `options.cluster` is (0 between failed attempts).
    bus_port: Option<u16>,
    pki: Option<Pki>,
    child: Option<Child>,
}

/// Why one launch did not produce a ready server.
enum LaunchError {
    /// The port could not be bound (or someone else's server answers on it): try another.
    PortTaken(String),
    /// Anything else: give up.
    Fatal(String),
}

impl Server {
    /// Starts `flavor` with default [`Options`]. Panics if the binary is missing (run
    /// `scripts/install-servers`) or the server does not answer `PING` within 10 s.
    pub fn start(flavor: Flavor) -> Server {
        Server::start_with(flavor, Options::default())
    }

    /// Starts `flavor` with `options`; panics like [`Server::start`].
    pub fn start_with(flavor: Flavor, options: Options) -> Server {
        Server::start_from(flavor, flavor.binary(), options)
    }

    /// Starts the server binary at `binary`, labelled `flavor` (in messages and
    /// [`Server::flavor`]), with `options`. Panics like [`Server::start`].
    pub fn start_from(flavor: Flavor, binary: impl Into<PathBuf>, options: Options) -> Server {
        let pick = if options.cluster { reserve_cluster_port } else { reserve_port };
        Server::start_on(flavor, binary.into(), options, pick)
    }

    /// Starts on ports from `pick` (each one reserved in [`PORTS`]) until one works: the
    /// plain port first, then (with TLS) the TLS port. In cluster mode `pick` must have
    /// reserved the bus port (port + [`CLUSTER_BUS_OFFSET`]) too, as [`reserve_cluster_port`]
    /// does; both are released together.
    fn start_on(flavor: Flavor, binary: PathBuf, options: Options, mut pick: impl FnMut() -> u16) -> Server {
        if options.cluster && options.tls.is_some() {
            panic!(
                "pelican-tests: cannot start {flavor} with both TLS and cluster mode (not supported here)"
            );
        }
        if options.tls.is_some() && !flavor.serves_tls() {
            panic!(
                "pelican-tests: cannot start {flavor} with TLS: only redis-7.0 and redis-8.10 serve TLS \
                 (the other test binaries are built without it)"
            );
        }
        if !binary.is_file() {
            panic!(
                "pelican-tests: the {flavor} server binary is missing: {} does not exist. \
                 Run scripts/install-servers (from the workspace root) to install the test \
                 servers, or point {SERVERS_DIR_ENV} at a directory holding them.",
                binary.display()
            );
        }
        let dir = make_temp_dir(flavor);
        let tls = options.tls.is_some();
        let cluster = options.cluster;
        let mut server = Server {
            flavor,
            binary,
            options,
            dir,
            port: 0,
            tls_port: None,
            bus_port: None,
            pki: None,
            child: None,
        };
        if let Some(pki) = server.options.shared_pki.clone().filter(|_| tls) {
            server.pki = Some(pki);
        } else if tls {
            match Pki::generate(&server.dir) {
                Ok(pki) => server.pki = Some(pki),
                Err(e) => panic!("{}", server.failure(&format!("cannot write the test PKI: {e}"))),
            }
        }
        // Ports refused in this call stay reserved until it ends, so each retry gets a
        // different one. The log does not say which of the two ports was taken: both go.
        let mut refused: Vec<(Vec<u16>, String)> = Vec::new();
        let mut outcome = Err(String::new());
        for _ in 0..PORT_ATTEMPTS {
            server.port = pick();
            server.tls_port = tls.then(&mut pick);
            server.bus_port = cluster.then(|| bus_port_of(server.port));
            match server.launch() {
                Ok(()) => {
                    outcome = Ok(());
                    break;
                }
                Err(LaunchError::PortTaken(why)) => {
                    refused.push((server.ports(), why));
                    // A sentinel's configuration names its port and is written once (it
                    // keeps what it learns there for its restarts): the next port needs a
                    // new one, or every attempt would ask for the port just refused.
                    let _ = fs::remove_file(server.dir.join(SENTINEL_CONFIG_FILE));
                    server.port = 0;
                    server.tls_port = tls.then_some(0);
                    server.bus_port = cluster.then_some(0);
                }
                Err(LaunchError::Fatal(why)) => {
                    outcome = Err(why);
                    break;
                }
            }
        }
        for port in refused.iter().flat_map(|(ports, _)| ports) {
            release_port(*port);
        }
        match outcome {
            Ok(()) => server,
            Err(why) if why.is_empty() => {
                let tried: Vec<String> = refused.iter().map(|(p, w)| format!("{p:?}: {w}")).collect();
                panic!(
                    "{}",
                    server.failure(&format!(
                        "no usable port after {PORT_ATTEMPTS} attempts: {}",
                        tried.join("; ")
                    ))
                )
            }
            Err(why) => panic!("{}", server.failure(&why)),
        }
    }

    /// The flavor this server was started as.
    pub fn flavor(&self) -> Flavor {
        self.flavor
    }

    /// The options this server was started with.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// The loopback port the server listens on (unchanged by [`Server::restart`]).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The TLS port (unchanged by [`Server::restart`]), or `None` without [`Options::tls`].
    pub fn tls_port(&self) -> Option<u16> {
        self.tls_port
    }

    /// The cluster bus port (port + [`CLUSTER_BUS_OFFSET`]), or `None` without
    /// [`Options::cluster`].
    pub fn bus_port(&self) -> Option<u16> {
        self.bus_port
    }

    /// `127.0.0.1:<tls port>`, or `None` without [`Options::tls`].
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.tls_port.map(|port| SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
    }

    /// The test PKI in the server's directory (generated at start, kept across
    /// [`Server::restart`]), or `None` without [`Options::tls`].
    pub fn pki(&self) -> Option<&Pki> {
        self.pki.as_ref()
    }

    /// Where a consumer connects: the TLS port, trusting the test CA (and presenting the
    /// test client certificate when the server asks for one), checking the name
    /// `127.0.0.1`; or the plain port.
    pub fn endpoint(&self) -> Endpoint {
        let (Some(addr), Some(pki), Some(tls)) = (self.tls_addr(), self.pki(), self.options.tls) else {
            return Endpoint::new(self.addr());
        };
        let mut config = pelican_tls::TlsConfig::new().ca_file(pki.ca());
        if tls.client_auth {
            config = config.client_cert(pki.client_cert(), pki.client_key());
        }
        let built = config.build().expect("the test PKI makes a valid TLS configuration");
        Endpoint { tls: Some((built, "127.0.0.1".to_string())), ..Endpoint::new(addr) }
    }

    /// The server's private directory (its `--dir`: AOF files and `server.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The log file that receives the server's stdout and stderr.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join(LOG_FILE)
    }

    /// The last `lines` lines of the server's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = fs::read_to_string(self.log_path()).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// The pid of the running process, or `None` after [`Server::kill9`].
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// A new admin connection, authenticated as `default` when `requirepass` is set.
    pub fn admin(&self) -> Admin {
        match &self.options.requirepass {
            None => Admin::connect(self.addr()),
            Some(pass) => Admin::connect_auth(self.addr(), "default", pass).unwrap_or_else(|e| {
                panic!("pelican-tests: {} refused its own requirepass: {e}", self.flavor)
            }),
        }
    }

    /// Kills the process with SIGKILL (by its own pid) and waits for it to exit. Its
    /// directory stays, so [`Server::restart`] reloads what the AOF persisted. Does nothing
    /// if the server is not running.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            // An error here means it already exited; `wait` reaps it either way.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same ports with the same directory, options and PKI (so an
    /// AOF server reloads its data), and waits until it answers `PING` with `PONG` (not
    /// `-LOADING`). If it is still running, it is killed with [`Server::kill9`] first.
    /// Panics if it cannot listen on its ports again or is not ready within 10 s.
    pub fn restart(&mut self) {
        self.kill9();
        match self.launch() {
            Ok(()) => {}
            Err(LaunchError::PortTaken(why)) => panic!(
                "{}",
                self.failure(&format!("restart: port(s) {:?} no longer available: {why}", self.ports()))
            ),
            Err(LaunchError::Fatal(why)) => panic!("{}", self.failure(&format!("restart: {why}"))),
        }
    }

    /// The plain port, then the TLS port if any, then the cluster bus port if any.
    fn ports(&self) -> Vec<u16> {
        std::iter::once(self.port).chain(self.tls_port).chain(self.bus_port).collect()
    }

    /// A sentinel's configuration (see [`Options::sentinel`]).
    fn sentinel_conf(&self, watch: &Watch) -> String {
        let name = &watch.service;
        let (host, port) = match watch.master_tls_port {
            Some(port) => (watch.master.ip(), port),
            None => (watch.master.ip(), watch.master.port()),
        };
        let mut conf = format!(
            "port {}\nbind 127.0.0.1\ndir {}\ndaemonize no\n\
             sentinel monitor {name} {host} {port} {}\n\
             sentinel down-after-milliseconds {name} {}\n\
             sentinel failover-timeout {name} {}\n\
             sentinel parallel-syncs {name} 1\n",
            self.port,
            self.dir.display(),
            watch.quorum,
            watch.down_after.as_millis(),
            watch.failover_timeout.as_millis(),
        );
        if let Some(user) = &watch.auth_user {
            conf += &format!("sentinel auth-user {name} {user}\n");
        }
        if let Some(pass) = &watch.auth_pass {
            conf += &format!("sentinel auth-pass {name} {pass}\n");
        }
        if let Some(pass) = &self.options.requirepass {
            conf += &format!("requirepass {pass}\n");
        }
        for rule in &self.options.acl_users {
            let rule = rule.trim();
            conf += &format!("user {}\n", rule.strip_prefix("user ").unwrap_or(rule));
        }
        // How it logs in to the other sentinels (it asks them to vote in a failover).
        let peer = watch.peer_login.clone().or_else(|| self.options.requirepass.clone().map(|p| (None, p)));
        if let Some((user, pass)) = peer {
            if let Some(user) = user {
                conf += &format!("sentinel sentinel-user {user}\n");
            }
            conf += &format!("sentinel sentinel-pass {pass}\n");
        }
        if let (Some(port), Some(pki)) = (self.tls_port, &self.pki) {
            let cert = self.options.tls.map(|t| t.cert).unwrap_or_default();
            conf += &format!(
                "tls-port {port}\ntls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\n\
                 tls-auth-clients no\ntls-replication {}\n",
                pki.server_cert_of(cert).display(),
                pki.server_key_of(cert).display(),
                pki.ca().display(),
                if watch.master_tls_port.is_some() { "yes" } else { "no" },
            );
        }
        conf
    }

    /// The command line arguments for the current ports.
    fn args(&self) -> Vec<String> {
        if let Some(watch) = &self.options.sentinel {
            let conf = self.dir.join(SENTINEL_CONFIG_FILE);
            // Written once: the sentinel rewrites it with what it learns, for its restarts.
            if !conf.exists() {
                let _ = fs::write(&conf, self.sentinel_conf(watch));
            }
            return vec![conf.display().to_string(), "--sentinel".into()];
        }
        let mut args: Vec<String> = vec![
            "--port".into(),
            self.port.to_string(),
            "--bind".into(),
            "127.0.0.1".into(),
            "--save".into(),
            String::new(),
            "--appendonly".into(),
            if self.options.aof { "yes" } else { "no" }.into(),
        ];
        if self.options.aof {
            args.extend(["--appendfsync".into(), "always".into()]);
        }
        args.extend(["--dir".into(), self.dir.display().to_string(), "--daemonize".into(), "no".into()]);
        if let Some(pass) = &self.options.requirepass {
            args.extend(["--requirepass".into(), pass.clone()]);
        }
        // A replica (or a master demoted by a failover) logs in to its master with it.
        let master_login =
            self.options.master_login.clone().or_else(|| self.options.requirepass.clone().map(|p| (None, p)));
        if let Some((user, pass)) = master_login {
            if let Some(user) = user {
                args.extend(["--masteruser".into(), user]);
            }
            args.extend(["--masterauth".into(), pass]);
        }
        if let Some(master) = self.options.replica_of {
            args.extend(["--replicaof".into(), master.ip().to_string(), master.port().to_string()]);
        }
        if self.bus_port.is_none() {
            // Replication starts at once (a master does not wait for more replicas to share
            // a transfer), and a replica's offset moves every second (as in a cluster).
            args.extend(["--repl-diskless-sync-delay".into(), "0".into()]);
            args.extend(["--repl-ping-replica-period".into(), "1".into()]);
        }
        if let Some(bus_port) = self.bus_port {
            args.extend([
                "--cluster-enabled".into(),
                "yes".into(),
                "--cluster-config-file".into(),
                self.dir.join(CLUSTER_CONFIG_FILE).display().to_string(),
                "--cluster-node-timeout".into(),
                CLUSTER_NODE_TIMEOUT.as_millis().to_string(),
                // A replica's full sync starts at once (7.0 and 8.1 wait 5 s by default for
                // more replicas to share a diskless transfer).
                "--repl-diskless-sync-delay".into(),
                "0".into(),
                // A master pings its replicas every second (not 10), so their replication
                // offset leaves 0 at once: 7.0 and 8.1 leave a replica at offset 0 out of
                // `CLUSTER SLOTS`.
                "--repl-ping-replica-period".into(),
                "1".into(),
            ]);
            // 6.2 has no such setting (and refuses unknown ones): its bus is always
            // port + 10000, which is what the others are told.
            if self.flavor != Flavor::Redis62 {
                args.extend(["--cluster-port".into(), bus_port.to_string()]);
            }
        }
        for rule in &self.options.acl_users {
            let rule = rule.trim();
            let rule = rule.strip_prefix("user ").unwrap_or(rule);
            args.push("--user".into());
            args.extend(rule.split_whitespace().map(String::from));
        }
        if let (Some(tls), Some(port), Some(pki)) = (&self.options.tls, self.tls_port, &self.pki) {
            let path = |p: PathBuf| p.display().to_string();
            args.extend([
                "--tls-port".into(),
                port.to_string(),
                "--tls-cert-file".into(),
                path(pki.server_cert_of(tls.cert)),
                "--tls-key-file".into(),
                path(pki.server_key_of(tls.cert)),
                "--tls-ca-cert-file".into(),
                path(pki.ca()),
                "--tls-auth-clients".into(),
                if tls.client_auth { "yes" } else { "no" }.into(),
                // A replica (or a master a failover demotes) syncs from its master over TLS.
                "--tls-replication".into(),
                "yes".into(),
            ]);
        }
        args
    }

    /// Spawns the process on its ports and waits until it is ready. Redis binds every port
    /// before it accepts on any, so `PONG` on the plain port means the TLS port (and the
    /// cluster bus) is up too.
    fn launch(&mut self) -> Result<(), LaunchError> {
        let log_path = self.log_path();
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| LaunchError::Fatal(format!("cannot open {}: {e}", log_path.display())))?;
        let log_start = log.metadata().map(|m| m.len()).unwrap_or(0);
        let err_log =
            log.try_clone().map_err(|e| LaunchError::Fatal(format!("cannot clone the log handle: {e}")))?;
        let child = Command::new(&self.binary)
            .args(self.args())
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err_log)
            .spawn()
            .map_err(|e| {
                LaunchError::Fatal(format!(
                    "cannot run {}: {e} (run scripts/install-servers?)",
                    self.binary.display()
                ))
            })?;
        self.child = Some(child);
        let result = self.wait_ready();
        if result.is_err() {
            self.kill9();
            if let Err(LaunchError::Fatal(_)) = &result {
                // A bind failure can also surface as an early exit: look at what it logged.
                if let Some(line) = bind_failure(&log_path, log_start) {
                    return Err(LaunchError::PortTaken(line));
                }
            }
        }
        result
    }

    /// Polls until our own process answers `PING` with `PONG`, within [`READY_TIMEOUT`].
    fn wait_ready(&mut self) -> Result<(), LaunchError> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let addr = self.addr();
        let mut last = String::from("no connection yet");
        loop {
            let child = self.child.as_mut().expect("launch sets the child");
            let pid = child.id();
            match child.try_wait() {
                Ok(Some(status)) => {
                    return Err(LaunchError::Fatal(format!(
                        "the server exited during startup ({status}); last probe: {last}"
                    )))
                }
                Ok(None) => {}
                Err(e) => return Err(LaunchError::Fatal(format!("cannot poll the process: {e}"))),
            }
            match probe(addr, self.options.requirepass.as_deref()) {
                Ok(Some(their_pid)) if their_pid == pid => return Ok(()),
                Ok(Some(their_pid)) => {
                    return Err(LaunchError::PortTaken(format!(
                        "another server (pid {their_pid}, not ours: {pid}) answers on {addr}"
                    )))
                }
                Ok(None) => last = "answered, but not ready yet".into(),
                Err(e) => last = e,
            }
            if Instant::now() >= deadline {
                return Err(LaunchError::Fatal(format!(
                    "no PONG within {READY_TIMEOUT:?}; last probe: {last}"
                )));
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// A panic message with the server's identity and the tail of its log.
    fn failure(&self, why: &str) -> String {
        format!(
            "pelican-tests: {} server ({}) on port(s) {:?} in {}: {why}\n--- last lines of {} ---\n{}",
            self.flavor,
            self.binary.display(),
            self.ports(),
            self.dir.display(),
            LOG_FILE,
            self.log_tail(30)
        )
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
        for port in self.ports() {
            if port != 0 {
                release_port(port);
            }
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// One readiness probe: `Ok(Some(pid))` when the server answers `PONG` (with the pid from
/// `INFO server`), `Ok(None)` when it answers something else (e.g. `-LOADING`), `Err` when
/// it cannot be reached.
fn probe(addr: SocketAddr, requirepass: Option<&str>) -> Result<Option<u32>, String> {
    let mut admin = Admin::try_connect(addr, Duration::from_secs(1)).map_err(|e| format!("connect: {e}"))?;
    if let Some(pass) = requirepass {
        match admin.try_cmd(&["AUTH", pass]) {
            Ok(r) if r.is_ok() => {}
            Ok(other) => return Err(format!("AUTH answered {other:?}")),
            Err(e) => return Err(format!("AUTH: {e}")),
        }
    }
    match admin.try_cmd(&["PING"]) {
        Ok(Reply::Simple(s)) if s == "PONG" => {}
        Ok(_) => return Ok(None),
        Err(e) => return Err(format!("PING: {e}")),
    }
    let info = admin.try_cmd(&["INFO", "server"]).map_err(|e| format!("INFO: {e}"))?;
    let pid = info
        .as_text()
        .and_then(|text| info_value(&text, "process_id"))
        .and_then(|pid| pid.parse().ok())
        .ok_or_else(|| format!("INFO server has no process_id: {info:?}"))?;
    Ok(Some(pid))
}

/// The log line reporting a failed bind, if the log grew one after byte `from`.
fn bind_failure(log_path: &Path, from: u64) -> Option<String> {
    let mut file = File::open(log_path).ok()?;
    file.seek(SeekFrom::Start(from)).ok()?;
    let mut text = String::new();
    file.read_to_string(&mut text).ok()?;
    text.lines().find(|line| line.contains("Address already in use")).map(|line| line.trim().to_string())
}

/// Ports handed out to live servers of this process, so that no two get the same one.
static PORTS: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// A free loopback port (the kernel's pick for `127.0.0.1:0`), not already used by another
/// server of this process. Another process may still grab it before the server binds it;
/// [`Server::start`] retries on another port when that happens.
fn reserve_port() -> u16 {
    for _ in 0..100 {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or_else(|e| panic!("pelican-tests: cannot bind 127.0.0.1:0: {e}"));
        let mut ports = PORTS.lock().unwrap_or_else(|e| e.into_inner());
        if ports.insert(port) {
            return port;
        }
    }
    panic!("pelican-tests: the kernel keeps handing out ports already in use by our servers");
}

fn release_port(port: u16) {
    PORTS.lock().unwrap_or_else(|e| e.into_inner()).remove(&port);
}

/// The cluster bus port of a node on `port`.
fn bus_port_of(port: u16) -> u16 {
    port.checked_add(CLUSTER_BUS_OFFSET).expect("cluster ports leave room for the bus port")
}

/// A free loopback port for a cluster node whose bus port (port + [`CLUSTER_BUS_OFFSET`]) is
/// free too (at the time of asking); both are reserved in [`PORTS`]. Ports too high to have
/// a bus port are skipped. Like [`reserve_port`], the two can still be taken before the
/// server binds them: [`Server::start`] then retries.
fn reserve_cluster_port() -> u16 {
    // Candidates turned down stay reserved until the end, so the kernel's picks move on.
    let mut turned_down = Vec::new();
    let mut found = None;
    for _ in 0..100 {
        let port = reserve_port();
        if let Some(bus) = port.checked_add(CLUSTER_BUS_OFFSET) {
            let free = TcpListener::bind((Ipv4Addr::LOCALHOST, bus)).is_ok();
            if free && PORTS.lock().unwrap_or_else(|e| e.into_inner()).insert(bus) {
                found = Some(port);
                break;
            }
        }
        turned_down.push(port);
    }
    for port in turned_down {
        release_port(port);
    }
    found.unwrap_or_else(|| {
        panic!("pelican-tests: no free loopback port with a free port + {CLUSTER_BUS_OFFSET}")
    })
}

/// Creates a fresh, uniquely named directory under the system temp dir.
fn make_temp_dir(flavor: Flavor) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let base = std::env::temp_dir();
    for _ in 0..100 {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
        let dir = base.join(format!(
            "pelican-tests-{}-{}-{}-{nanos:09}",
            flavor.name(),
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed),
        ));
        match fs::create_dir(&dir) {
            Ok(()) => return dir,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => panic!("pelican-tests: cannot create {}: {e}", dir.display()),
        }
    }
    panic!("pelican-tests: cannot find a free directory name under {}", base.display());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpStream;

    /// A port that something else listens on, reserved like ours so the test can hand it in.
    fn occupied() -> (TcpListener, u16) {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(PORTS.lock().unwrap().insert(port));
        (listener, port)
    }

    #[test]
    fn args_for_options() {
        let server = Server {
            flavor: Flavor::Redis62,
            binary: PathBuf::from("/nowhere"),
            options: Options::default()
                .with_aof()
                .with_requirepass("p")
                .with_acl_user("user a on >x ~* +@all")
                .with_full_user("b", "y"),
            dir: PathBuf::from("/d"),
            port: 7,
            tls_port: None,
            bus_port: None,
            pki: None,
            child: None,
        };
        let args = server.args().join(" ");
        assert_eq!(
            args,
            "--port 7 --bind 127.0.0.1 --save  --appendonly yes --appendfsync always --dir /d \
             --daemonize no --requirepass p --masterauth p --repl-diskless-sync-delay 0 \
             --repl-ping-replica-period 1 --user a on >x ~* +@all --user b on >y ~* &* +@all"
        );
        std::mem::forget(server); // nothing to clean up, and `/d` is not ours to remove
    }

    #[test]
    fn sentinel_conf_logins() {
        let watch = Watch {
            service: "svc".into(),
            master: "127.0.0.1:9".parse().unwrap(),
            quorum: 2,
            down_after: Duration::from_millis(1000),
            failover_timeout: Duration::from_secs(5),
            auth_pass: Some("dp".into()),
            auth_user: Some("du".into()),
            peer_login: Some((Some("su".into()), "sp".into())),
            master_tls_port: None,
        };
        let server = Server {
            flavor: Flavor::Redis62,
            binary: PathBuf::from("/nowhere"),
            options: Options::default()
                .with_requirepass("own")
                .with_full_user("su", "sp")
                .with_sentinel(watch.clone()),
            dir: PathBuf::from("/d"),
            port: 7,
            tls_port: None,
            bus_port: None,
            pki: None,
            child: None,
        };
        assert_eq!(
            server.sentinel_conf(&watch),
            "port 7\nbind 127.0.0.1\ndir /d\ndaemonize no\nsentinel monitor svc 127.0.0.1 9 2\n\
             sentinel down-after-milliseconds svc 1000\nsentinel failover-timeout svc 5000\n\
             sentinel parallel-syncs svc 1\nsentinel auth-user svc du\nsentinel auth-pass svc dp\n\
             requirepass own\nuser su on >sp ~* &* +@all\nsentinel sentinel-user su\n\
             sentinel sentinel-pass sp\n"
        );
        // Without a peer login, the sentinel's own password.
        let watch = Watch { peer_login: None, auth_user: None, ..watch };
        let conf = server.sentinel_conf(&watch);
        assert!(conf.ends_with("requirepass own\nuser su on >sp ~* &* +@all\nsentinel sentinel-pass own\n"));
        std::mem::forget(server); // nothing to clean up, and `/d` is not ours to remove
    }

    #[test]
    fn master_login_args() {
        let server = Server {
            flavor: Flavor::Redis70,
            binary: PathBuf::from("/nowhere"),
            options: Options::default().with_requirepass("p").with_master_login(Some("repl"), "r"),
            dir: PathBuf::from("/d"),
            port: 7,
            tls_port: None,
            bus_port: None,
            pki: None,
            child: None,
        };
        assert!(server.args().join(" ").contains("--requirepass p --masteruser repl --masterauth r "));
        std::mem::forget(server);
    }

    #[test]
    fn retries_when_the_port_is_taken() {
        let (_listener, taken) = occupied();
        let mut ports = vec![taken];
        let server = Server::start_on(Flavor::Redis70, Flavor::Redis70.binary(), Options::default(), || {
            ports.pop().unwrap_or_else(reserve_port)
        });
        assert_ne!(server.port(), taken);
        assert!(server.log_tail(100).contains("Address already in use"));
        let mut admin = server.admin();
        assert_eq!(admin.cmd(&["PING"]), Reply::Simple("PONG".into()));
        assert!(!PORTS.lock().unwrap().contains(&taken), "refused port released");
    }

    #[test]
    fn retries_when_the_tls_port_is_taken() {
        let (_listener, taken) = occupied();
        // Popped from the back: a free plain port, then the taken TLS port.
        let mut ports = vec![taken, reserve_port()];
        let options = Options::default().with_tls(Tls::default());
        let mut server = Server::start_on(Flavor::Redis70, Flavor::Redis70.binary(), options, || {
            ports.pop().unwrap_or_else(reserve_port)
        });
        let tls_port = server.tls_port().unwrap();
        assert_ne!(tls_port, taken);
        assert!(server.log_tail(100).contains("Address already in use"));
        assert!(TcpStream::connect(server.tls_addr().unwrap()).is_ok());
        assert!(!PORTS.lock().unwrap().contains(&taken), "refused port released");
        assert!(PORTS.lock().unwrap().contains(&tls_port));

        server.restart();
        assert_eq!(server.tls_port(), Some(tls_port));
        assert!(TcpStream::connect(server.tls_addr().unwrap()).is_ok());
        drop(server);
        assert!(!PORTS.lock().unwrap().contains(&tls_port), "released on drop");
    }

    #[test]
    fn tls_args() {
        let dir = make_temp_dir(Flavor::Redis70);
        let pki = Pki::generate(&dir).unwrap();
        let server = Server {
            flavor: Flavor::Redis70,
            binary: PathBuf::from("/nowhere"),
            options: Options::default().with_tls(Tls { client_auth: true, cert: ServerCert::Expired }),
            dir: dir.clone(),
            port: 7,
            tls_port: Some(8),
            bus_port: None,
            pki: Some(pki),
            child: None,
        };
        let d = dir.display();
        assert!(server.args().join(" ").ends_with(&format!(
            "--daemonize no --repl-diskless-sync-delay 0 --repl-ping-replica-period 1 --tls-port 8 \
             --tls-cert-file {d}/expired.pem --tls-key-file \
             {d}/expired-key.pem --tls-ca-cert-file {d}/ca.pem --tls-auth-clients yes --tls-replication yes"
        )));
        drop(server); // removes the directory; ports 7 and 8 were never reserved
        assert!(!dir.exists());
    }

    #[test]
    fn cluster_args() {
        for (flavor, cluster_port) in [
            (Flavor::Redis62, ""),
            (Flavor::Redis70, " --cluster-port 10007"),
            (Flavor::Valkey81, " --cluster-port 10007"),
            (Flavor::Redis810, " --cluster-port 10007"),
        ] {
            let server = Server {
                flavor,
                binary: PathBuf::from("/nowhere"),
                options: Options::default().with_cluster(),
                dir: PathBuf::from("/d"),
                port: 7,
                tls_port: None,
                bus_port: Some(bus_port_of(7)),
                pki: None,
                child: None,
            };
            assert!(server.args().join(" ").ends_with(&format!(
                "--daemonize no --cluster-enabled yes --cluster-config-file /d/nodes.conf \
                 --cluster-node-timeout 2000 --repl-diskless-sync-delay 0 \
                 --repl-ping-replica-period 1{cluster_port}"
            )));
            assert_eq!(server.ports(), [7, 10007]);
            std::mem::forget(server); // nothing to clean up, and `/d` is not ours to remove
        }
    }

    #[test]
    fn cluster_ports_leave_room_for_the_bus() {
        let ports: Vec<u16> = (0..20).map(|_| reserve_cluster_port()).collect();
        for &port in &ports {
            let bus = bus_port_of(port);
            let reserved = PORTS.lock().unwrap();
            assert!(reserved.contains(&port) && reserved.contains(&bus), "{port} and {bus} reserved");
            drop(reserved);
            release_port(port);
            release_port(bus);
        }
    }

    #[test]
    fn cluster_retries_when_the_bus_port_is_taken() {
        // Something listens on a bus port whose plain port is free.
        let (listener, plain) = loop {
            let (listener, taken) = occupied();
            let plain = taken - CLUSTER_BUS_OFFSET;
            let free = TcpListener::bind((Ipv4Addr::LOCALHOST, plain)).is_ok();
            if free && PORTS.lock().unwrap().insert(plain) {
                break (listener, plain);
            }
            release_port(taken);
        };
        let taken = listener.local_addr().unwrap().port();
        for flavor in Flavor::ALL {
            let mut first = Some(plain);
            let server = Server::start_on(flavor, flavor.binary(), Options::default().with_cluster(), || {
                first.take().unwrap_or_else(reserve_cluster_port)
            });
            assert_ne!(server.port(), plain, "{flavor}");
            assert_eq!(server.bus_port(), Some(server.port() + CLUSTER_BUS_OFFSET), "{flavor}");
            assert!(server.log_tail(100).contains("Address already in use"), "{flavor}");
            let info = server.admin().call(&["CLUSTER", "INFO"]).as_text().unwrap();
            assert_eq!(info_value(&info, "cluster_known_nodes").as_deref(), Some("1"), "{flavor}");
            assert!(server.dir().join(CLUSTER_CONFIG_FILE).is_file(), "{flavor}");
            assert!(TcpStream::connect((Ipv4Addr::LOCALHOST, server.bus_port().unwrap())).is_ok());
            let mut ports = PORTS.lock().unwrap();
            assert!(!ports.contains(&plain) && !ports.contains(&taken), "{flavor}: refused ports released");
            // Hand the pair back for the next flavor.
            ports.insert(plain);
            ports.insert(taken);
        }
        release_port(plain);
        release_port(taken);
    }

    #[test]
    fn restart_panics_when_its_port_was_taken() {
        let mut server = Server::start(Flavor::Redis62);
        server.kill9();
        let _thief = TcpListener::bind((Ipv4Addr::LOCALHOST, server.port())).unwrap();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| server.restart()));
        let message = *caught.expect_err("restart must fail").downcast::<String>().unwrap();
        assert!(message.contains("no longer available"), "{message}");
        assert!(message.contains("Address already in use"), "{message}");
    }

    #[test]
    fn fatal_startup_errors_panic_with_the_log() {
        let caught = std::panic::catch_unwind(|| {
            Server::start_with(Flavor::Valkey81, Options::default().with_acl_user("eve bogus"))
        });
        let message = *caught.expect_err("bad ACL rule").downcast::<String>().unwrap();
        assert!(message.contains("exited during startup"), "{message}");
        assert!(message.contains("last lines of server.log"), "{message}");
    }
}
