//! A blocking connection to one node, logged in: commands out, whole replies in, every wait
//! bounded by the socket's timeouts. Plaintext or TLS through the same [`Conn`] as the
//! driver's (here over a blocking `std` socket, where `WouldBlock` is a timeout run out).

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use pelican::locate::{read_node_role, read_replica_of, read_sentinel_services, NodeRole};
use pelican::oneshot::{read_count, Replies, Reply, Request};
use pelican::HostPort;

use super::config::SessionConfig;
use super::error::SessionError;
use crate::conn::Conn;
use crate::tls::{RustlsError, Tls};

/// How long the first reply may take: a Redis server answers the login at once; a port
/// that accepts and says nothing is not one.
pub(crate) const FIRST_REPLY: Duration = Duration::from_secs(5);

/// How long a TLS handshake may take. A TLS server answers the hello at once; a plaintext
/// Redis takes it for the start of a command and waits for the rest, forever.
const HANDSHAKE: Duration = Duration::from_secs(5);

/// Writes are gathered up to this much: small commands go out in few writes, a bigger part
/// (a big value) from where it is.
const GATHER: usize = 64 << 10;

/// Why a connection could not be opened: `Refused` (the connect itself) lets the next
/// address be tried; `Failed` (TLS, the login) is final.
pub(crate) enum Open {
    Refused(SessionError),
    Failed(SessionError),
}

impl Open {
    pub(crate) fn into_inner(self) -> SessionError {
        match self {
            Open::Refused(e) | Open::Failed(e) => e,
        }
    }
}

/// One node, connected and logged in.
#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) peer: SocketAddr,
    conn: Conn<TcpStream>,
    /// TLS, and the host the certificate was checked against, to explain TLS failures.
    tls: Option<(Tls, String)>,
    /// Whether the server said anything yet (a reset before that means a TLS port).
    heard: bool,
    /// How long a reply may take now (the socket's read timeout).
    limit: Duration,
    /// How long a reply may take once logged in.
    timeout: Duration,
    replies: Replies,
    buf: Box<[u8]>,
    out: Vec<u8>,
}

impl Node {
    /// Connects to `addr`, over TLS checking that the certificate names `host`, and logs in
    /// as `config` says: `AUTH`, `SELECT`, `CLIENT SETNAME`, each reply within
    /// [`FIRST_REPLY`], so that the link is proven before the command's own work.
    pub(crate) fn open(config: &SessionConfig, addr: SocketAddr, host: &str) -> Result<Node, Open> {
        let socket = TcpStream::connect_timeout(&addr, config.timeout)
            .map_err(|error| Open::Refused(SessionError::Connect { addr, error }))?;
        let setup = |error| Open::Failed(SessionError::Io { what: "connect", error });
        let _ = socket.set_nodelay(true);
        socket.set_write_timeout(Some(config.timeout)).map_err(setup)?;
        socket.set_read_timeout(Some(HANDSHAKE)).map_err(setup)?;
        let tls = config.tls.as_ref().map(|(tls, _)| (tls.clone(), host.to_string()));
        let conn = match &tls {
            None => Conn::Plain(socket),
            Some((tls, host)) => {
                let session = tls.connect(host).map_err(|e| Open::Failed(SessionError::Tls(e)))?;
                let mut conn = Conn::Tls(socket, Box::new(session));
                shake_hands(&mut conn, tls, host).map_err(Open::Failed)?;
                conn
            }
        };
        let mut node = Node {
            peer: addr,
            conn,
            tls,
            heard: false,
            limit: HANDSHAKE,
            timeout: config.timeout,
            replies: Replies::new(),
            buf: vec![0; 64 << 10].into_boxed_slice(),
            out: Vec::new(),
        };
        node.set_limit(FIRST_REPLY).map_err(Open::Failed)?;
        node.login(config).map_err(Open::Failed)?;
        node.set_limit(config.timeout).map_err(Open::Failed)?;
        Ok(node)
    }

    /// The host the certificate was checked against (empty in plaintext).
    pub(crate) fn tls_host(&self) -> &str {
        self.tls.as_ref().map_or("", |(_, host)| host)
    }

    /// `AUTH` and `SELECT` where asked, then `CLIENT SETNAME`: any reply proves the link. A
    /// name refused is no failure (a user not allowed to name itself…), unless the server
    /// wants a login first.
    fn login(&mut self, config: &SessionConfig) -> Result<(), SessionError> {
        let peer = self.peer;
        let refused = |command, reply: Reply| match reply.error() {
            Some(text) => Err(SessionError::Login { peer, command, text: text.into_owned() }),
            None => Ok(()),
        };
        if let Some((user, password)) = &config.auth {
            refused("AUTH", self.exchange(&Request::auth(user.as_deref(), password))?)?;
        }
        if config.db != 0 {
            refused("SELECT", self.exchange(&Request::select(config.db))?)?;
        }
        if let Some(name) = &config.name {
            let reply = self.exchange(&Request::client_setname(name))?;
            if reply.wants_login() {
                refused("CLIENT SETNAME", reply)?;
            }
        }
        Ok(())
    }

    /// What the node says it is (a bare `HELLO`'s role, which needs no permission).
    pub(crate) fn role(&mut self) -> Result<NodeRole, SessionError> {
        let reply = self.exchange(&Request::hello())?;
        read_node_role(reply.as_bytes())
            .map(|role| role.unwrap_or(NodeRole::Unknown))
            .map_err(SessionError::Hello)
    }

    /// The services a sentinel watches (its `ROLE`: `None` if refused, or not a sentinel).
    pub(crate) fn services(&mut self) -> Option<Vec<String>> {
        read_sentinel_services(self.exchange(&Request::role()).ok()?.as_bytes())
    }

    /// The master a replica names (`ROLE`, which needs `@admin`: `None` if refused).
    pub(crate) fn master_of(&mut self) -> Option<HostPort> {
        read_replica_of(self.exchange(&Request::role()).ok()?.as_bytes())
    }

    /// `WAIT replicas timeout`: the reply comes when the replicas did, or when `timeout`
    /// ran out, so it may take that much longer than any other.
    pub(crate) fn wait(&mut self, replicas: u32, timeout: Duration) -> Result<u64, SessionError> {
        self.set_limit(timeout + self.timeout)?;
        let reply = self.exchange(&Request::wait(replicas, timeout));
        self.set_limit(self.timeout)?;
        Ok(read_count(&reply?)?)
    }

    /// One command and its reply, an error reply included; `Err` only for the connection.
    pub(crate) fn exchange(&mut self, request: &Request) -> Result<Reply, SessionError> {
        self.send(&[request.as_bytes()])?;
        self.receive()
    }

    /// Writes `parts` (commands already encoded), gathered into few writes.
    pub(crate) fn send(&mut self, parts: &[&[u8]]) -> Result<(), SessionError> {
        let mut out = std::mem::take(&mut self.out);
        let written = gathered(&mut self.conn, &mut out, parts);
        out.clear();
        self.out = out;
        written.map_err(|e| self.link_error(e, "write"))
    }

    /// The next reply (an error reply included).
    pub(crate) fn receive(&mut self) -> Result<Reply, SessionError> {
        loop {
            match self.replies.next_reply() {
                Ok(Some(reply)) => return Ok(reply),
                Ok(None) => {}
                Err(error) => return Err(SessionError::Garbled { peer: self.peer, error }),
            }
            match self.conn.read(&mut self.buf) {
                Ok(0) => return Err(SessionError::Closed),
                Ok(n) => {
                    self.heard = true;
                    self.replies.extend(&self.buf[..n]);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.link_error(e, "read")),
            }
        }
    }

    /// How long each reply may take from now on.
    fn set_limit(&mut self, limit: Duration) -> Result<(), SessionError> {
        self.limit = limit;
        self.conn
            .socket()
            .set_read_timeout(Some(limit))
            .map_err(|error| SessionError::Io { what: "read", error })
    }

    /// What went wrong with the connection: a TLS failure explained, a plaintext client's
    /// reset by a TLS port, a reply that does not come; else `what` failed.
    fn link_error(&self, error: io::Error, what: &'static str) -> SessionError {
        if let (Some((tls, host)), Some(e)) = (&self.tls, rustls_error(&error)) {
            return SessionError::Tls(tls.explain(e, host));
        }
        // Redis resets a connection that does not speak TLS to its TLS port, without a word
        // (PROTOCOL.md 28).
        let reset = matches!(error.kind(), io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe);
        if self.tls.is_none() && !self.heard && reset {
            return SessionError::WantsTls;
        }
        if timed_out(&error) {
            return SessionError::Silent { peer: self.peer, within: self.limit };
        }
        SessionError::Io { what, error }
    }
}

/// Writes `parts`: small ones gathered in `out` first, big ones from where they are.
fn gathered(conn: &mut Conn<TcpStream>, out: &mut Vec<u8>, parts: &[&[u8]]) -> io::Result<()> {
    for part in parts {
        if !out.is_empty() && out.len() + part.len() > GATHER {
            write_all(conn, out)?;
            out.clear();
        }
        match part.len() >= GATHER {
            true => write_all(conn, part)?,
            false => out.extend_from_slice(part),
        }
    }
    write_all(conn, out)?;
    // Over TLS, what the session still holds goes out now.
    match conn.flush()? {
        false => Ok(()),
        true => Err(io::ErrorKind::WouldBlock.into()),
    }
}

/// Writes all of `bytes` (a blocking socket: `WouldBlock` is the write timeout run out).
fn write_all(conn: &mut Conn<TcpStream>, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        match conn.write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Shakes hands over `conn`, checking that the certificate names `host`. The socket's read
/// timeout bounds each wait: a plaintext port never answers the hello.
fn shake_hands(conn: &mut Conn<TcpStream>, tls: &Tls, host: &str) -> Result<(), SessionError> {
    let deadline = Instant::now() + HANDSHAKE;
    let no_answer = || SessionError::NoTlsAnswer { host: host.to_string(), within: HANDSHAKE };
    loop {
        if Instant::now() >= deadline {
            return Err(no_answer());
        }
        match conn.handshake() {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(match rustls_error(&e) {
                    Some(e) => SessionError::Tls(tls.explain(e, host)),
                    None if timed_out(&e) => no_answer(),
                    None => SessionError::Handshake { host: host.to_string(), error: e },
                })
            }
        }
    }
}

/// The `rustls` error inside an I/O error from a TLS connection, if that is what it is.
fn rustls_error(err: &io::Error) -> Option<&RustlsError> {
    err.get_ref().and_then(|e| e.downcast_ref::<RustlsError>())
}

/// A socket timeout: `WouldBlock` on Unix, `TimedOut` elsewhere.
fn timed_out(err: &io::Error) -> bool {
    matches!(err.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}
