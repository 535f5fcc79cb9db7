//! The connection to a sentinel: asks where the master is, then stays open, subscribed, to
//! hear where it moves ([`pelican::locate::SentinelSession`] says what to write and what the
//! answers mean; this moves its bytes). Registered under the driver's own token, beside the
//! consumer's socket.

use std::io;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use pelican::locate::{HostPort, SentinelAnswer, SentinelSession};
use pelican_tls::TlsError;

use crate::conn::{connect_outcome, Conn};
use crate::resolve::Resolver;
use crate::tls::{RustlsError, Tls};

/// Why a sentinel that hung up failed, however it hung up.
const CLOSED: &str = "the sentinel closed the connection";

/// Whether `err` is the peer hanging up (a reset, a broken pipe, an end of stream).
fn closed(err: &io::Error) -> bool {
    use io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
    matches!(err.kind(), ConnectionReset | BrokenPipe | ConnectionAborted | UnexpectedEof)
}

/// Size of one read: a sentinel says little.
const READ_CHUNK: usize = 4 * 1024;

/// The socket's state.
#[derive(Debug)]
enum Socket {
    Connecting(TcpStream),
    Securing(Conn),
    Up(Conn),
    /// Only while a state is moved out to make the next.
    Closed,
}

/// Why a sentinel could not be asked, or stopped watching.
#[derive(Debug)]
pub(crate) enum ScoutError {
    /// Refused, timed out, closed, or it answered as no sentinel does: try the next one.
    Failed(String),
    /// TLS failed for good (an untrusted certificate, a misnamed one…): retrying will not help.
    Tls(TlsError),
}

/// A sentinel being asked, or watched.
#[derive(Debug)]
pub(crate) struct Scout {
    sentinel: HostPort,
    socket: Socket,
    session: SentinelSession,
    tls: Option<Tls>,
    /// Until the question is answered: the connect, the handshake and the answer must come
    /// by then. None once it only watches.
    deadline: Option<Instant>,
    timeout: Duration,
}

impl Scout {
    /// Connects to `sentinel` (looked up now) to ask with `session`, over TLS if `tls`
    /// (checking the sentinel's own host), registered under `token`. The question must be
    /// answered within `timeout`.
    pub(crate) fn start(
        sentinel: &HostPort,
        session: SentinelSession,
        tls: Option<&Tls>,
        resolver: &Resolver,
        registry: &Registry,
        token: Token,
        (now, timeout): (Instant, Duration),
    ) -> Result<Scout, ScoutError> {
        let failed = |e: io::Error| ScoutError::Failed(e.to_string());
        let addr = resolver.resolve(&sentinel.host, sentinel.port).map_err(failed)?[0];
        let mut stream = TcpStream::connect(addr).map_err(failed)?;
        let _ = stream.set_nodelay(true);
        registry.register(&mut stream, token, Interest::READABLE | Interest::WRITABLE).map_err(failed)?;
        Ok(Scout {
            sentinel: sentinel.clone(),
            socket: Socket::Connecting(stream),
            session,
            tls: tls.cloned(),
            deadline: Some(now + timeout),
            timeout,
        })
    }

    /// The sentinel asked.
    pub(crate) fn sentinel(&self) -> &HostPort {
        &self.sentinel
    }

    /// True once the master was named: it only watches now.
    pub(crate) fn answered(&self) -> bool {
        self.session.answered()
    }

    /// When it fails unless answered.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Moves it on as far as the socket allows: connects, shakes hands, writes, reads.
    /// Returns the answers heard, or why it is done (then [`close`](Self::close) it).
    pub(crate) fn drive(&mut self, now: Instant) -> Result<Vec<SentinelAnswer>, ScoutError> {
        if self.deadline.is_some_and(|at| now >= at) {
            let what = match self.socket {
                Socket::Connecting(_) => "no answer to the connect",
                Socket::Securing(_) => "no answer to the TLS handshake",
                Socket::Up(_) | Socket::Closed => "no answer",
            };
            return Err(ScoutError::Failed(format!("{what} within {:?}", self.timeout)));
        }
        self.socket = match std::mem::replace(&mut self.socket, Socket::Closed) {
            Socket::Connecting(stream) => match connect_outcome(&stream) {
                Ok(false) => Socket::Connecting(stream),
                Ok(true) => match &self.tls {
                    None => Socket::Up(Conn::Plain(stream)),
                    Some(tls) => {
                        let session = tls.connect(&self.sentinel.host).map_err(ScoutError::Tls)?;
                        Socket::Securing(Conn::Tls(stream, Box::new(session)))
                    }
                },
                Err(e) => return Err(ScoutError::Failed(e.to_string())),
            },
            other => other,
        };
        if let Socket::Securing(conn) = &mut self.socket {
            match conn.handshake() {
                Ok(false) => return Ok(Vec::new()),
                Ok(true) => {
                    if let Socket::Securing(conn) = std::mem::replace(&mut self.socket, Socket::Closed) {
                        self.socket = Socket::Up(conn);
                    }
                }
                Err(e) => return Err(self.io_failed(&e)),
            }
        }
        let Socket::Up(conn) = &mut self.socket else { return Ok(Vec::new()) };
        while let Some(bytes) = self.session.poll_transmit() {
            match conn.write(bytes) {
                Ok(n) => self.session.advance_transmit(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.io_failed(&e)),
            }
        }
        let _ = conn.flush();
        let mut buf = [0u8; READ_CHUNK];
        let mut answers = Vec::new();
        while let Socket::Up(conn) = &mut self.socket {
            match conn.read(&mut buf) {
                Ok(0) => return Err(ScoutError::Failed(CLOSED.into())),
                Ok(n) => {
                    self.session.handle_input(&buf[..n]).map_err(|e| ScoutError::Failed(e.to_string()))?;
                    answers.extend(std::iter::from_fn(|| self.session.poll_answer()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.io_failed(&e)),
            }
        }
        if self.session.answered() {
            self.deadline = None;
        }
        Ok(answers)
    }

    /// A read, write or handshake failed: TLS failures explained (and fatal), the rest a
    /// failed sentinel.
    fn io_failed(&self, err: &io::Error) -> ScoutError {
        let rustls = err.get_ref().and_then(|e| e.downcast_ref::<RustlsError>());
        match (rustls, &self.tls) {
            (Some(e), Some(tls)) => ScoutError::Tls(tls.explain(e, &self.sentinel.host)),
            // A reset and an end of stream are the same to a reader: one reason, told once.
            _ if closed(err) => ScoutError::Failed(CLOSED.into()),
            // The sentinel's address is the locator's to name (it names each once).
            _ => ScoutError::Failed(err.to_string()),
        }
    }

    /// Closes the connection.
    pub(crate) fn close(self, registry: &Registry) {
        match self.socket {
            Socket::Connecting(mut stream) => {
                let _ = registry.deregister(&mut stream);
            }
            Socket::Securing(mut conn) | Socket::Up(mut conn) => {
                let _ = registry.deregister(conn.socket());
            }
            Socket::Closed => {}
        }
    }
}
