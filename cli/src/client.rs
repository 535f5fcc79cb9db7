//! A tiny blocking client for `pending`, `produce`, `retire` and `demo`'s bookkeeping:
//! commands go out as RESP arrays of bulk strings over a `std::net::TcpStream` (wrapped in
//! `rustls` for `rediss://`), replies come back through `redis-protocol`'s RESP2 decoder.
//! Logs in and selects the database as the URL says. Every wait is bounded.
//!
//! In a Redis/Valkey Cluster, [`Client::call`] follows the redirects, a few at most: `-MOVED`
//! reconnects to the node named and sends the command again there (that node is kept for
//! the next commands); `-ASK` (the slot is being migrated) sends `ASKING` and the command
//! once to the node named. [`Client::call_after`] does the same for a command that must
//! meet the node of an unkeyed one sent before it (`retire`'s `CLIENT LIST`, then script).

use std::io::{self, BufWriter, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::thread;
use std::time::{Duration, Instant};

use pelican::locate::{
    read_node_role, read_replica_of, read_sentinel_services, Dial, Found, NodeRole, SentinelAnswer,
    MASTER_REQUEST, ROLE_REQUEST,
};
use pelican::{Endpoint, HostPort, Locator};

use pelican_tls::rustls::{self, ClientConnection, StreamOwned};
use pelican_tls::Tls;
use redis_protocol::resp2::decode::decode;
pub use redis_protocol::resp2::types::OwnedFrame as Reply;

use crate::server::{in_flags, login_refused, sentinel_named_as_node, tls_message, Server};

/// How long a connect, a write or a reply may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// How long the first reply may take: a Redis server answers the login at once; a port
/// that accepts and says nothing is not one.
const FIRST_REPLY: Duration = Duration::from_secs(5);

/// How long a TLS handshake may take. A TLS server answers the hello at once; a plaintext
/// Redis takes it for the start of a command and waits for the rest, forever.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// What a plaintext client hears from a TLS port: a reset before any reply.
const RESET_BY_TLS_PORT: &str =
    "the server reset the connection before answering: is it a TLS port? use rediss://";

/// The socket, in plaintext or in TLS (handshake done).
enum Stream {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Stream {
    fn set_read_timeout(&self, timeout: Duration) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.set_read_timeout(Some(timeout)),
            Stream::Tls(s) => s.sock.set_read_timeout(Some(timeout)),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// How long a connect keeps asking the sentinels when the node they name is not a master
/// yet (a failover under way).
const FIND_MASTER: Duration = Duration::from_secs(10);

/// How many redirects one command follows before giving up: a slot moves once, maybe twice
/// (a migration, then a failover); more means the cluster is still settling.
const MAX_REDIRECTS: usize = 5;

/// A connection to the server, logged in, one command or pipeline at a time.
pub struct Client {
    /// The server as given (credentials, database, TLS): redirects connect the same way.
    server: Server,
    /// The address connected to.
    peer: SocketAddr,
    /// The node the last `ASK` named, connected (see [`Client::call`]).
    asked: Option<Box<Client>>,
    stream: Stream,
    /// The TLS settings and the host they check, to explain TLS failures.
    tls: Option<(Tls, String)>,
    /// Whether the server has said anything yet (a reset before that means a TLS port).
    heard: bool,
    /// Whether a whole reply has come yet (bytes that are not one are no Redis server's).
    replied: bool,
    /// How long a reply may take now (the socket's read timeout).
    limit: Duration,
    buf: Vec<u8>,
    pos: usize,
    /// The connection's name in `CLIENT LIST` (`pelican:<command>`).
    name: String,
    /// With Sentinel: the master the sentinels named, connected to.
    master: Option<HostPort>,
}

impl Client {
    /// Connects to the first address of the server that answers (over TLS for
    /// `rediss://`), then `AUTH` and `SELECT`, or a `PING` when neither is needed: the link
    /// is proven before the command's own work, so a server that refuses it (a TLS port to a
    /// plaintext client, a TLS 1.3 server wanting a client certificate) is told apart from
    /// a refused command. A TLS failure is final: other addresses are not tried.
    ///
    /// The URL's host is looked up now (a name a failover moved is followed); with
    /// `redis+sentinel://`, the sentinels are asked in turn where the master is first. Only a
    /// master is used: a replica is refused (with Sentinel, asked again for a while: a
    /// failover may be under way).
    pub fn connect(server: &Server, name: &str) -> Result<Client, String> {
        let give_up = Instant::now() + FIND_MASTER;
        let mut backoff = backoff(Duration::from_millis(100), Duration::from_secs(1));
        loop {
            let (node, host) = match server.endpoint() {
                Endpoint::Sentinel(_) => {
                    let master = find_master(server)?;
                    let host = master.host.clone();
                    (master, host)
                }
                Endpoint::Node(node) => (node.clone(), server.target.tls_host()),
                other => return Err(format!("cannot connect to {other}")),
            };
            let mut client = Client::connect_node_at(server, &node, &host, name)?;
            if matches!(server.endpoint(), Endpoint::Sentinel(_)) {
                client.master = Some(node.clone());
            }
            match client.role()? {
                NodeRole::Replica
                    if matches!(server.endpoint(), Endpoint::Sentinel(_)) && Instant::now() < give_up =>
                {
                    thread::sleep(backoff.next_delay());
                }
                NodeRole::Sentinel => {
                    // Refused before anything is sent to it as to a data node.
                    let services = client.services();
                    let tls = server.tls.is_some();
                    return Err(sentinel_named_as_node(&node.to_string(), tls, services.as_deref()));
                }
                NodeRole::Replica => {
                    let of = client.master_of().map(|m| format!(" (of {m})")).unwrap_or_default();
                    let fix = match server.endpoint() {
                        Endpoint::Sentinel(_) => "the sentinels name it as the master: a failover under way?",
                        _ => "point --url at the master, or name the sentinels with redis+sentinel://…",
                    };
                    return Err(format!("{node} is a replica{of}, not a master: {fix}"));
                }
                _ => return Ok(client),
            }
        }
    }

    /// Connects to the first address `node` resolves to now that answers, checking the
    /// certificate against `host` over TLS.
    fn connect_node_at(server: &Server, node: &HostPort, host: &str, name: &str) -> Result<Client, String> {
        let addrs = resolve(node).map_err(|why| match server.endpoint() {
            Endpoint::Node(_) => server.host_failed(why),
            _ => why,
        })?;
        let mut last = String::new();
        for addr in addrs {
            match Client::connect_to(server, addr, host, name) {
                Ok(client) => return Ok(client),
                Err(Connect::Refused(e)) => last = e,
                Err(Connect::Failed(e)) => return Err(e),
            }
        }
        Err(last)
    }

    /// With Sentinel: whether the sentinels still name the master this connection went to
    /// (`Ok(None)`), or the one a failover moved it to. Without Sentinel: `Ok(None)`.
    pub fn master_moved(&self) -> Result<Option<HostPort>, String> {
        let Some(connected) = &self.master else { return Ok(None) };
        let now = find_master(&self.server)?;
        Ok((&now != connected).then_some(now))
    }

    /// The master the sentinels named for this connection, if they did.
    pub fn master(&self) -> Option<&HostPort> {
        self.master.as_ref()
    }

    /// What the node says it is (a bare `HELLO`'s role, which needs no permission).
    fn role(&mut self) -> Result<NodeRole, String> {
        self.write(&[ROLE_REQUEST])?;
        let reply = self.read_raw()?;
        read_node_role(&reply)
            .map(|role| role.unwrap_or(NodeRole::Unknown))
            .map_err(|e| format!("HELLO: {e}"))
    }

    /// The services a sentinel watches (its `ROLE`: `None` if refused, or not a sentinel).
    fn services(&mut self) -> Option<Vec<String>> {
        self.write(&[MASTER_REQUEST]).ok()?;
        read_sentinel_services(&self.read_raw().ok()?)
    }

    /// The master a replica names (`ROLE`, which needs `@admin`: `None` if refused).
    fn master_of(&mut self) -> Option<HostPort> {
        self.write(&[MASTER_REQUEST]).ok()?;
        read_replica_of(&self.read_raw().ok()?)
    }

    /// Connects to `addr`, over TLS checking that the certificate names `host`, and logs in.
    fn connect_to(server: &Server, addr: SocketAddr, host: &str, name: &str) -> Result<Client, Connect> {
        let socket = TcpStream::connect_timeout(&addr, TIMEOUT)
            .map_err(|e| Connect::Refused(format!("cannot connect to {addr}: {e}")))?;
        let _ = socket.set_nodelay(true);
        socket.set_read_timeout(Some(TIMEOUT)).map_err(|e| Connect::Failed(e.to_string()))?;
        socket.set_write_timeout(Some(TIMEOUT)).map_err(|e| Connect::Failed(e.to_string()))?;
        let stream = match &server.tls {
            None => Stream::Plain(socket),
            Some(tls) => Stream::Tls(Box::new(handshake(tls, host, socket).map_err(Connect::Failed)?)),
        };
        let tls = server.tls.clone().map(|tls| (tls, host.to_string()));
        let mut client = Client {
            server: server.clone(),
            peer: addr,
            asked: None,
            stream,
            tls,
            heard: false,
            replied: false,
            limit: TIMEOUT,
            buf: Vec::new(),
            pos: 0,
            name: name.to_string(),
            master: None,
        };
        client.set_limit(FIRST_REPLY).map_err(Connect::Failed)?;
        client.login().map_err(Connect::Failed)?;
        client.set_limit(TIMEOUT).map_err(Connect::Failed)?;
        Ok(client)
    }

    /// A connection like this one to the cluster node `host:port` (as a redirect names it;
    /// an empty host is this connection's).
    fn connect_node(&self, host: &str, port: u16) -> Result<Client, String> {
        let addr = node_addr(host, port, self.peer)?;
        // A node named by IP address has its certificate checked for that address.
        let host = if host.is_empty() { self.tls.as_ref().map_or("", |(_, h)| h.as_str()) } else { host };
        Client::connect_to(&self.server, addr, host, &self.name).map_err(|e| match e {
            Connect::Refused(e) | Connect::Failed(e) => format!("following a cluster redirect: {e}"),
        })
    }

    /// `AUTH` and `SELECT` as the URL says, then `CLIENT SETNAME`; any reply proves the
    /// link. A login refused, or wanted (`NOAUTH`), is told with its fix.
    fn login(&mut self) -> Result<(), String> {
        let target = self.server.target.clone();
        let who = self.peer.to_string();
        let login = |e: String| login_refused(&who, &e);
        if let Some(password) = &target.password {
            let mut auth: Vec<&[u8]> = vec![b"AUTH"];
            auth.extend(target.user.as_deref());
            auth.push(password);
            refused(self.exchange(&auth)?).map_err(|e| login(e.clone()).unwrap_or(format!("AUTH: {e}")))?;
        }
        if target.db != 0 {
            let select = self.exchange(&[b"SELECT", target.db.to_string().as_bytes()])?;
            refused(select).map_err(|e| login(e.clone()).unwrap_or(format!("SELECT: {e}")))?;
        }
        // Another error (a user not allowed to name itself, a command renamed away…) is for
        // the command to tell, if it matters to it.
        let name = self.name.clone();
        if let Err(e) = refused(self.exchange(&[b"CLIENT", b"SETNAME", name.as_bytes()])?) {
            return login(e).map_or(Ok(()), Err);
        }
        Ok(())
    }

    /// One command; an error reply is an `Err` with the server's text. Cluster redirects
    /// are followed (see the module docs).
    pub fn call(&mut self, args: &[&[u8]]) -> Result<Reply, String> {
        let mut reply = self.exchange(args)?;
        let mut followed = 0;
        while let Some(to) = redirect(&reply) {
            if followed == MAX_REDIRECTS {
                return Err(format!(
                    "the cluster redirected the command {followed} times: is it still settling?"
                ));
            }
            followed += 1;
            reply = match to {
                Redirect::Moved { host, port } => {
                    *self = self.connect_node(&host, port)?;
                    self.exchange(args)?
                }
                Redirect::Ask { host, port } => {
                    let again = self.ask(&host, port, args)?;
                    if let Some(Redirect::Ask { .. }) = redirect(&again) {
                        // `ASK` is followed once: the node asked sends the command on again.
                        return refused(again);
                    }
                    again
                }
            };
        }
        refused(reply)
    }

    /// `ASKING`, then the command, on the node an `ASK` named (the slot is being migrated
    /// there: it serves the key only when asked so).
    fn ask(&mut self, host: &str, port: u16, args: &[&[u8]]) -> Result<Reply, String> {
        let node = self.asked_node(host, port)?;
        refused(node.exchange(&[b"ASKING"])?).map_err(|e| format!("ASKING: {e}"))?;
        node.exchange(args)
    }

    /// The connection to the node an `ASK` named, kept for the next `ASK`, which is likely
    /// while the migration lasts.
    fn asked_node(&mut self, host: &str, port: u16) -> Result<&mut Client, String> {
        let addr = node_addr(host, port, self.peer)?;
        let node = match self.asked.take() {
            Some(node) if node.peer == addr => node,
            _ => Box::new(self.connect_node(host, port)?),
        };
        Ok(self.asked.insert(node))
    }

    /// A keyed command that needs to know something of the node it runs on: `first`, a
    /// command of no key (`CLIENT LIST`), goes to the node connected to, then the command
    /// `then` builds from its reply. Both must meet the same node, the one serving the key,
    /// so a redirect of the command sends both again where it says: after `MOVED`, to that
    /// node (kept for the next commands); after `ASK` (the slot is migrating), `first` goes
    /// to the node named as well and `then` gets both replies (this node's first), since
    /// what it asks about may be on either, then `ASKING` and the command there. An error
    /// reply to `first` is an `Err` with the server's text.
    pub fn call_after(
        &mut self,
        first: &[&[u8]],
        mut then: impl FnMut(&[Reply]) -> Result<Vec<Vec<u8>>, String>,
    ) -> Result<Reply, String> {
        for _ in 0..=MAX_REDIRECTS {
            let here = refused(self.exchange(first)?)?;
            let args = then(std::slice::from_ref(&here))?;
            let reply = self.exchange(&args.iter().map(|a| &a[..]).collect::<Vec<_>>())?;
            match redirect(&reply) {
                None => return refused(reply),
                Some(Redirect::Moved { host, port }) => *self = self.connect_node(&host, port)?,
                Some(Redirect::Ask { host, port }) => {
                    let node = self.asked_node(&host, port)?;
                    let there = refused(node.exchange(first)?)?;
                    let args = then(&[here, there])?;
                    let node = self.asked_node(&host, port)?;
                    refused(node.exchange(&[b"ASKING"])?).map_err(|e| format!("ASKING: {e}"))?;
                    let reply = node.exchange(&args.iter().map(|a| &a[..]).collect::<Vec<_>>())?;
                    if redirect(&reply).is_none() {
                        return refused(reply);
                    }
                    // The migration moved on meanwhile: start again from this node.
                }
            }
        }
        Err(format!("the cluster redirected the command {} times: is it still settling?", MAX_REDIRECTS + 1))
    }

    /// How long each reply may take from now on.
    fn set_limit(&mut self, limit: Duration) -> Result<(), String> {
        self.limit = limit;
        self.stream.set_read_timeout(limit).map_err(|e| e.to_string())
    }

    /// `WAIT replicas timeout` on every node this connection wrote to (the one connected,
    /// and the one an `ASK` named): the fewest replicas that acknowledged everything written
    /// so far, when `timeout` ran out or all of them did. `Ok(Err(text))` is the server's
    /// refusal; `Err` is the connection's failure.
    pub fn wait_replicas(&mut self, replicas: u32, timeout: Duration) -> Result<Result<u64, String>, String> {
        let here = self.wait_here(replicas, timeout)?;
        match (here, self.asked.as_deref_mut()) {
            (Ok(here), Some(asked)) => Ok(asked.wait_here(replicas, timeout)?.map(|there| here.min(there))),
            (here, _) => Ok(here),
        }
    }

    /// [`Client::wait_replicas`] on the node connected to.
    fn wait_here(&mut self, replicas: u32, timeout: Duration) -> Result<Result<u64, String>, String> {
        let (n, ms) = (replicas.to_string(), timeout.as_millis().to_string());
        // The reply comes when the replicas did, or when `timeout` ran out.
        self.set_limit(timeout + TIMEOUT)?;
        let reply = self.exchange(&[b"WAIT", n.as_bytes(), ms.as_bytes()]);
        self.set_limit(TIMEOUT)?;
        Ok(match reply? {
            Reply::Integer(got) => Ok(u64::try_from(got).unwrap_or(0)),
            Reply::Error(text) => Err(text),
            other => Err(format!("WAIT answered {other:?}, not a count of replicas")),
        })
    }

    /// One command and its reply, an error reply included; `Err` only for the connection.
    fn exchange(&mut self, args: &[&[u8]]) -> Result<Reply, String> {
        let mut out = Vec::new();
        encode(&mut out, args);
        self.write(&[&out])?;
        self.read()
    }

    /// Writes pipelined commands (already encoded), in parts: small ones are gathered into
    /// few writes, big ones (a big value) go out from where they are, uncopied.
    pub fn write(&mut self, parts: &[&[u8]]) -> Result<(), String> {
        let mut out = BufWriter::with_capacity(64 << 10, &mut self.stream);
        // The flush reaches rustls too, which may still hold records the socket did not take.
        let written = parts.iter().try_for_each(|part| out.write_all(part)).and_then(|()| out.flush());
        // Not flushed again on drop: a dead connection would be waited on twice.
        let _ = out.into_parts();
        written.map_err(|e| self.link_error(&e, "write"))
    }

    /// The next reply's bytes as they came (error replies included), for the core's readers.
    fn read_raw(&mut self) -> Result<Vec<u8>, String> {
        self.next_frame().map(|(_, raw)| raw)
    }

    /// The next reply (error replies included).
    pub fn read(&mut self) -> Result<Reply, String> {
        self.next_frame().map(|(frame, _)| frame)
    }

    /// The next reply, and its bytes.
    fn next_frame(&mut self) -> Result<(Reply, Vec<u8>), String> {
        loop {
            if self.pos < self.buf.len() {
                match decode(&self.buf[self.pos..]) {
                    Ok(Some((frame, used))) => {
                        let raw = self.buf[self.pos..self.pos + used].to_vec();
                        self.pos += used;
                        self.replied = true;
                        return Ok((frame, raw));
                    }
                    Ok(None) => {}
                    Err(e) if self.replied => {
                        return Err(format!("{} sent a reply that is not RESP: {}", self.peer, e.details()))
                    }
                    Err(_) => {
                        // Its first line tells what it is (`HTTP/1.1 400 Bad Request`).
                        let line =
                            self.buf[self.pos..].split(|b| b"\r\n".contains(b)).next().unwrap_or_default();
                        let said: String = String::from_utf8_lossy(line).chars().take(60).collect();
                        let peer = self.peer;
                        return Err(format!("{peer} did not answer as a Redis server (it said {said:?})"));
                    }
                }
            }
            self.buf.drain(..self.pos);
            self.pos = 0;
            let len = self.buf.len();
            self.buf.resize(len + (64 << 10).max(len), 0);
            let n = self.stream.read(&mut self.buf[len..]);
            self.buf.truncate(len + *n.as_ref().unwrap_or(&0));
            match n {
                Ok(0) => return Err("the server closed the connection".into()),
                Ok(_) => self.heard = true,
                Err(e) => return Err(self.link_error(&e, "read")),
            }
        }
    }

    /// What went wrong with the connection: a TLS failure explained, a plaintext client's
    /// reset by a TLS port, a reply that does not come; else `what` failed.
    fn link_error(&self, err: &io::Error, what: &str) -> String {
        if let (Some((tls, host)), Some(e)) = (&self.tls, rustls_error(err)) {
            return tls_message(&tls.explain(e, host));
        }
        // Redis resets a connection that does not speak TLS to its TLS port, without a word.
        let reset = matches!(err.kind(), io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe);
        if self.tls.is_none() && !self.heard && reset {
            return RESET_BY_TLS_PORT.into();
        }
        if timed_out(err) {
            return format!("{} did not answer within {} s", self.peer, self.limit.as_secs());
        }
        format!("{what} failed: {err}")
    }
}

/// Why a connection failed: `Refused` (the connect itself) lets the next address be tried;
/// `Failed` (TLS, the login) is final.
enum Connect {
    Refused(String),
    Failed(String),
}

/// A cluster redirect, as an error reply says it.
#[derive(Debug, PartialEq, Eq)]
pub enum Redirect {
    /// `MOVED <slot> <host>:<port>`: the slot is served there now.
    Moved {
        /// The node's host as the cluster names it (empty: the one connected to).
        host: String,
        /// The node's port.
        port: u16,
    },
    /// `ASK <slot> <host>:<port>`: the slot is being migrated there; ask it after `ASKING`.
    Ask {
        /// The node's host as the cluster names it (empty: the one connected to).
        host: String,
        /// The node's port.
        port: u16,
    },
}

/// The redirect an error reply is, if it is one.
pub fn redirect(reply: &Reply) -> Option<Redirect> {
    // The core reads cluster replies; this client only follows them.
    let Reply::Error(text) = reply else { return None };
    let pelican::cluster::Redirect { kind, host, port, .. } =
        pelican::cluster::parse_redirect(text.as_bytes())?;
    Some(match kind {
        pelican::cluster::RedirectKind::Moved => Redirect::Moved { host, port },
        pelican::cluster::RedirectKind::Ask => Redirect::Ask { host, port },
    })
}

/// A redirect's node: `host` (an IP address, or a name the cluster announces; empty: the
/// host of `current`) and `port`.
fn node_addr(host: &str, port: u16, current: SocketAddr) -> Result<SocketAddr, String> {
    match host {
        "" => Ok(SocketAddr::new(current.ip(), port)),
        // The cluster does not know the node's address (cluster-preferred-endpoint-type).
        "?" => Err(format!("the cluster redirected to a node of unknown address (port {port})")),
        host => {
            let mut addrs = (host, port)
                .to_socket_addrs()
                .map_err(|e| format!("cannot resolve {host} (a redirect): {e}"))?;
            addrs.next().ok_or_else(|| format!("{host} (a redirect) resolves to no address"))
        }
    }
}

/// The addresses `node` resolves to now.
fn resolve(node: &HostPort) -> Result<Vec<SocketAddr>, String> {
    let addrs: Vec<SocketAddr> = (node.host.as_str(), node.port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {}: {e}", node.host))?
        .collect();
    match addrs.is_empty() {
        true => Err(format!("{} resolves to no address", node.host)),
        false => Ok(addrs),
    }
}

/// The core's backoff (the one every consumer reconnect goes through), for a one-shot
/// command's retries, jittered by [`seed`].
pub fn backoff(min: Duration, max: Duration) -> pelican::Backoff {
    pelican::Backoff::new(min, max, seed())
}

/// A seed for the backoff's jitter of this process: its id and the time, so that processes
/// started together (a fleet of workers restarted at once) spread their retries.
pub fn seed() -> u64 {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    u64::from(std::process::id()) << 32 | u64::from(nanos)
}

/// With a node URL: the services the node watches if it is a sentinel (its `ROLE`), asked on
/// a connection of its own; `None` if it cannot be reached or does not say.
pub fn sentinel_services(server: &Server) -> Option<Vec<String>> {
    let Endpoint::Node(node) = server.endpoint() else { return None };
    let mut client = Client::connect_node_at(server, node, &server.target.tls_host(), "pelican:hint").ok()?;
    client.services()
}

/// The master the sentinels name: each asked in turn (`pelican::locate` says what to ask and
/// what the answers mean), over TLS where the URL says, every wait bounded.
fn find_master(server: &Server) -> Result<HostPort, String> {
    let mut locator = Locator::new(server.endpoint().clone());
    loop {
        let (sentinel, session) = match (locator.dial(), locator.session()) {
            (Some(Dial::Node(master)), _) => return Ok(master.clone()),
            (Some(Dial::Sentinel(sentinel)), Some(session)) => (sentinel.clone(), session),
            _ => return Err("no sentinel to ask: the URL names none".into()),
        };
        match ask_sentinel(server, &sentinel, session) {
            Ok(answer) => {
                if let Found::Failed(Some(all)) = locator.on_answer(answer) {
                    return Err(in_flags(&all));
                }
            }
            Err(why) => {
                if let Some(all) = locator.on_sentinel_failed(why) {
                    return Err(in_flags(&all));
                }
            }
        }
    }
}

/// One sentinel's answer to `session`'s question, on a connection of its own.
fn ask_sentinel(
    server: &Server,
    sentinel: &HostPort,
    mut session: pelican::locate::SentinelSession,
) -> Result<SentinelAnswer, String> {
    let addr = resolve(sentinel)?[0];
    let socket = TcpStream::connect_timeout(&addr, FIRST_REPLY).map_err(|e| format!("{e}"))?;
    let _ = socket.set_nodelay(true);
    socket.set_read_timeout(Some(FIRST_REPLY)).map_err(|e| e.to_string())?;
    socket.set_write_timeout(Some(FIRST_REPLY)).map_err(|e| e.to_string())?;
    let mut stream = match &server.tls {
        None => Stream::Plain(socket),
        Some(tls) => Stream::Tls(Box::new(handshake(tls, &sentinel.host, socket)?)),
    };
    while let Some(bytes) = session.poll_transmit() {
        let n = stream.write(bytes).map_err(|e| e.to_string())?;
        session.advance_transmit(n);
    }
    stream.flush().map_err(|e| e.to_string())?;
    let mut buf = [0u8; 4096];
    loop {
        if let Some(answer) = session.poll_answer() {
            return Ok(answer);
        }
        match stream.read(&mut buf) {
            Ok(0) => return Err("the sentinel closed the connection".into()),
            Ok(n) => session.handle_input(&buf[..n]).map_err(|e| e.to_string())?,
            Err(e) if timed_out(&e) => {
                return Err(format!("no answer within {} s", FIRST_REPLY.as_secs()));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// An error reply as an `Err` with the server's text.
fn refused(reply: Reply) -> Result<Reply, String> {
    match reply {
        Reply::Error(e) => Err(e),
        reply => Ok(reply),
    }
}

/// Shakes hands over `socket`, checking that the certificate names `host`. The socket's
/// read timeout bounds each wait: a plaintext port never answers the hello.
fn handshake(
    tls: &Tls,
    host: &str,
    mut socket: TcpStream,
) -> Result<StreamOwned<ClientConnection, TcpStream>, String> {
    let mut conn = tls.connect(host).map_err(|e| tls_message(&e))?;
    socket.set_read_timeout(Some(HANDSHAKE_TIMEOUT)).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
    let no_answer = || {
        format!(
            "{host} did not answer the TLS handshake within {} s: is it a plaintext port? use redis:// for those",
            HANDSHAKE_TIMEOUT.as_secs()
        )
    };
    while conn.is_handshaking() {
        if Instant::now() >= deadline {
            return Err(no_answer());
        }
        if let Err(e) = conn.complete_io(&mut socket) {
            return Err(match rustls_error(&e) {
                Some(e) => tls_message(&tls.explain(e, host)),
                None if timed_out(&e) => no_answer(),
                None => format!("TLS handshake with {host} failed: {e}"),
            });
        }
    }
    socket.set_read_timeout(Some(TIMEOUT)).map_err(|e| e.to_string())?;
    Ok(StreamOwned::new(conn, socket))
}

/// The `rustls` error inside an I/O error from a TLS stream, if that is what it is.
fn rustls_error(err: &io::Error) -> Option<&rustls::Error> {
    err.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>())
}

/// A socket timeout: `WouldBlock` on Unix, `TimedOut` elsewhere.
fn timed_out(err: &io::Error) -> bool {
    matches!(err.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

/// Appends `args` as a RESP array of bulk strings.
pub fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

/// A bulk or simple string's bytes.
pub fn bytes(reply: &Reply) -> Option<&[u8]> {
    match reply {
        Reply::BulkString(b) | Reply::SimpleString(b) => Some(b),
        _ => None,
    }
}

/// An integer, or a bulk string holding one (`XPENDING` counts consumers' entries that way).
pub fn int(reply: &Reply) -> Option<i64> {
    match reply {
        Reply::Integer(i) => Some(*i),
        other => std::str::from_utf8(bytes(other)?).ok()?.parse().ok(),
    }
}

/// The elements of an array.
pub fn array(reply: &Reply) -> Option<&[Reply]> {
    match reply {
        Reply::Array(items) => Some(items),
        _ => None,
    }
}

/// The value under `key` in a flat `[key, value, …]` array (`XINFO` replies).
pub fn field<'a>(items: &'a [Reply], key: &str) -> Option<&'a Reply> {
    items.chunks(2).find(|kv| kv.len() == 2 && bytes(&kv[0]) == Some(key.as_bytes())).map(|kv| &kv[1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_arrays_of_bulk_strings() {
        let mut out = Vec::new();
        encode(&mut out, &[b"AUTH", b"a b", b""]);
        assert_eq!(out, b"*3\r\n$4\r\nAUTH\r\n$3\r\na b\r\n$0\r\n\r\n");
    }

    #[test]
    fn reads_redirects() {
        let error = |text: &str| Reply::Error(text.to_string());
        assert_eq!(
            redirect(&error("MOVED 3999 127.0.0.1:6381")),
            Some(Redirect::Moved { host: "127.0.0.1".into(), port: 6381 })
        );
        assert_eq!(
            redirect(&error("ASK 3999 :7000")),
            Some(Redirect::Ask { host: String::new(), port: 7000 })
        );
        assert_eq!(
            redirect(&error("MOVED 1 [::1]:7001")),
            Some(Redirect::Moved { host: "::1".into(), port: 7001 })
        );
        assert_eq!(redirect(&error("ERR unknown command")), None);
        assert_eq!(redirect(&error("MOVED 1 nowhere")), None);
        assert_eq!(redirect(&Reply::SimpleString(b"MOVED 1 h:1".to_vec())), None);
        let here: SocketAddr = "127.0.0.1:7000".parse().unwrap();
        assert_eq!(node_addr("", 7001, here), Ok("127.0.0.1:7001".parse().unwrap()));
        assert_eq!(node_addr("::1", 7001, here), Ok("[::1]:7001".parse().unwrap()));
        assert!(node_addr("?", 7001, here).unwrap_err().contains("unknown address"));
    }

    #[test]
    fn reads_fields() {
        let items = vec![
            Reply::BulkString(b"name".to_vec()),
            Reply::BulkString(b"g".to_vec()),
            Reply::BulkString(b"lag".to_vec()),
            Reply::Integer(3),
        ];
        assert_eq!(field(&items, "lag").and_then(int), Some(3));
        assert_eq!(field(&items, "name").and_then(bytes), Some(&b"g"[..]));
        assert_eq!(field(&items, "missing"), None);
        assert_eq!(int(&Reply::BulkString(b"12".to_vec())), Some(12));
    }
}
