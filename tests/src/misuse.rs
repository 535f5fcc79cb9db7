//! Fixtures for the misuse stories (a client pointed slightly wrong must never flood, hang or
//! stay silent): a data node watched by one sentinel ([`Lone`]), a port that refuses
//! ([`refused_port`]), a listener that counts and drops what it accepts ([`Doorman`]), and the
//! count of connections a real server accepted ([`Connections`]) over a window, held to the
//! bound every client must keep ([`Window::assert_paced`]).
//!
//! The bound: whatever is misconfigured, after the first second a client dials one address a
//! handful of times a second at most ([`PER_SECOND`]); in the first, a few more
//! ([`FIRST_SECOND`]: a first try and quick retries).

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::admin::{info_value, Admin};
use crate::server::{Flavor, Options, Server, Watch};

/// The service the lone sentinel watches.
pub const SERVICE: &str = "mymaster";

/// Connections to one address allowed in a window's first second.
pub const FIRST_SECOND: u64 = 10;

/// Connections to one address allowed in each second after the first.
pub const PER_SECOND: u64 = 5;

/// A data node and one sentinel watching it (quorum 1), of one flavor.
#[derive(Debug)]
pub struct Lone {
    /// The data node, the master of [`SERVICE`].
    pub node: Server,
    /// The sentinel, with `requirepass` if one was asked.
    pub sentinel: Server,
}

impl Lone {
    /// A data node of `flavor` and a sentinel watching it as [`SERVICE`]; the sentinel wants
    /// `sentinel_pass` if given. Returns once the sentinel names the master.
    pub fn start(flavor: Flavor, sentinel_pass: Option<&str>) -> Lone {
        let node = Server::start(flavor);
        let watch = Watch {
            service: SERVICE.to_string(),
            master: node.addr(),
            quorum: 1,
            down_after: Duration::from_secs(5),
            failover_timeout: Duration::from_secs(10),
            auth_pass: None,
            auth_user: None,
            peer_login: None,
            master_tls_port: None,
        };
        let options = Options { requirepass: sentinel_pass.map(str::to_string), ..Options::default() };
        let sentinel = Server::start_with(flavor, options.with_sentinel(watch));
        let lone = Lone { node, sentinel };
        let named = crate::conformance::kit::wait_until(Duration::from_secs(20), || {
            let reply = lone.sentinel.admin().cmd(&["SENTINEL", "get-master-addr-by-name", SERVICE]);
            reply.as_array().is_some_and(|a| a.len() == 2)
        });
        assert!(named, "pelican-tests misuse: the sentinel ({flavor}) does not name {SERVICE}");
        lone
    }

    /// The sentinels as a consumer is given them (no login), watching `service`.
    pub fn sentinels(&self, service: &str) -> pelican::Sentinels {
        let at = self.sentinel.addr();
        pelican::Sentinels::new(service, [pelican::HostPort::new(at.ip().to_string(), at.port())])
    }
}

/// A loopback port nothing listens on: a connect there is refused.
pub fn refused_port() -> SocketAddr {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("a loopback port");
    let addr = listener.local_addr().expect("its address");
    drop(listener);
    addr
}

/// A listener that accepts every connection, counts it, and closes it at once without a
/// word: a server that is down in the way a crashed proxy or a half-dead host is. Stopped on
/// drop.
#[derive(Debug)]
pub struct Doorman {
    addr: SocketAddr,
    accepted: Arc<AtomicU64>,
    done: Arc<AtomicBool>,
}

impl Doorman {
    /// Listens on a loopback port.
    pub fn start() -> Doorman {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("a loopback port");
        let addr = listener.local_addr().expect("its address");
        let (accepted, done) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
        let (count, stop) = (accepted.clone(), done.clone());
        thread::spawn(move || {
            for conn in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                if conn.is_ok() {
                    count.fetch_add(1, Ordering::SeqCst);
                }
                // Dropped: closed without a word.
            }
        });
        Doorman { addr, accepted, done }
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Doorman {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
        // Wakes the accept loop so that it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
    }
}

/// Connections a real server (or sentinel) has accepted (`INFO stats`
/// `total_connections_received`), read over one admin connection kept open, so that reading
/// adds none.
pub struct Connections {
    admin: Admin,
}

impl Connections {
    /// Counts at `server` (logged in as its `requirepass` says).
    pub fn at(server: &Server) -> Connections {
        Connections { admin: server.admin() }
    }

    /// Connections accepted since the server started (this counter's own among them).
    pub fn total(&mut self) -> u64 {
        let stats = self.admin.info("stats");
        info_value(&stats, "total_connections_received")
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("pelican-tests misuse: no total_connections_received in {stats}"))
    }
}

/// Connections counted over a window from a client's start: in its first second, and after.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    /// Connections in the first second.
    pub first: u64,
    /// Connections after the first second, until the window ended.
    pub after: u64,
    /// How long "after" lasted.
    pub rest: Duration,
}

/// How long a window lasts in all.
pub const WINDOW: Duration = Duration::from_secs(5);

impl Window {
    /// Counts with `count` (a running total) over [`WINDOW`] from a client's start: `start`
    /// starts it (after a first count, so that its first connections are counted), and its
    /// result is returned with the window.
    pub fn around<T>(mut count: impl FnMut() -> u64, start: impl FnOnce() -> T) -> (Window, T) {
        let at_start = count();
        let began = Instant::now();
        let started = start();
        thread::sleep(Duration::from_secs(1).saturating_sub(began.elapsed()));
        let at_first = count();
        let second = Instant::now();
        thread::sleep(WINDOW.saturating_sub(began.elapsed()));
        let at_end = count();
        let window = Window { first: at_first - at_start, after: at_end - at_first, rest: second.elapsed() };
        (window, started)
    }

    /// The connections in the whole window.
    pub fn total(&self) -> u64 {
        self.first + self.after
    }

    /// Asserts the bound ([`FIRST_SECOND`], then [`PER_SECOND`]), naming `what` if broken.
    pub fn assert_paced(&self, what: &str) {
        let allowed = PER_SECOND * self.rest.as_secs_f64().ceil() as u64;
        assert!(
            self.first <= FIRST_SECOND && self.after <= allowed,
            "{what}: {} connections in the first second (at most {FIRST_SECOND}), {} in the next {:.1} s \
             (at most {allowed}): a flood",
            self.first,
            self.after,
            self.rest.as_secs_f64()
        );
    }
}

/// The CPU time (user and system) a process has used so far, from `/proc/<pid>/stat`
/// (Linux); `None` elsewhere or once it is gone.
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command's name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let (utime, stime): (u64, u64) = (fields.get(11)?.parse().ok()?, fields.get(12)?.parse().ok()?);
    // Clock ticks: 100 a second on every Linux this runs on (USER_HZ).
    Some(Duration::from_millis((utime + stime) * 10))
}
