//! The connection to a sentinel: asks where the master is, then stays open, subscribed, to
//! hear where it moves ([`pelican::locate::SentinelSession`] says what to write and what the
//! answers mean; this moves its bytes).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use pelican::locate::{HostPort, SentinelAnswer, SentinelSession};
use pelican_tls::TlsError;
use smol::future;
use smol::io::{AsyncReadExt, AsyncWriteExt};
use smol::net::TcpStream;
use smol::Timer;

use crate::conn::{self, Conn, HandshakeError};
use crate::resolve::Resolver;
use crate::tls::Tls;

/// Why a sentinel that hung up failed, however it hung up.
const CLOSED: &str = "the sentinel closed the connection";

/// Why an I/O error ended a sentinel's connection: a reset and an end of stream are the same
/// to a reader (one reason, told once); the sentinel's address is the locator's to name.
fn why(err: &std::io::Error) -> String {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
    match err.kind() {
        ConnectionReset | BrokenPipe | ConnectionAborted | UnexpectedEof => CLOSED.into(),
        _ => err.to_string(),
    }
}

/// Why a sentinel could not be asked, or stopped watching.
#[derive(Debug)]
pub(crate) enum ScoutError {
    /// Refused, timed out, closed, or it answered as no sentinel does: try the next one.
    Failed(String),
    /// TLS failed for good (an untrusted certificate, a misnamed one…).
    Tls(TlsError),
}

/// A sentinel that answered, kept open: it tells the master's moves.
pub(crate) struct Watch {
    sentinel: HostPort,
    conn: Conn,
    session: SentinelSession,
    /// Answers heard and not yet taken.
    heard: VecDeque<SentinelAnswer>,
    buf: Vec<u8>,
}

/// What asking a sentinel brings: the connection kept as a watch, and the answer.
pub(crate) type Asked = Result<(Box<Watch>, SentinelAnswer), ScoutError>;

/// A question to a sentinel under way, or a watch open.
pub(crate) enum Scout {
    Asking(Pin<Box<dyn Future<Output = Asked> + Send>>),
    Watching(Box<Watch>),
}

impl Scout {
    /// A question to `sentinel` to poll (see [`ask`]).
    pub(crate) fn asking(
        sentinel: HostPort,
        session: SentinelSession,
        tls: Option<Tls>,
        resolver: Resolver,
        timeout: Duration,
    ) -> Scout {
        Scout::Asking(Box::pin(ask(sentinel, session, tls, resolver, timeout)))
    }
}

/// Connects to `sentinel` (looked up now), over TLS if `tls` (its own host checked), and asks
/// with `session`, all within `timeout`: the answer, and the connection kept as a watch.
pub(crate) async fn ask(
    sentinel: HostPort,
    mut session: SentinelSession,
    tls: Option<Tls>,
    resolver: Resolver,
    timeout: Duration,
) -> Asked {
    let asked = async {
        let failed = |e: std::io::Error| ScoutError::Failed(why(&e));
        let addr = resolver.resolve(&sentinel.host, sentinel.port).await.map_err(failed)?[0];
        // The sentinel's address is the locator's to name (it names each once).
        let stream = TcpStream::connect(addr).await.map_err(failed)?;
        let _ = stream.set_nodelay(true);
        let mut conn = match &tls {
            None => Conn::Plain(stream),
            Some(tls) => conn::secure(stream, tls, &sentinel.host).await.map_err(|e| match e {
                HandshakeError::Tls(err) => ScoutError::Tls(err),
                HandshakeError::Io => ScoutError::Failed("the TLS handshake failed".into()),
            })?,
        };
        while let Some(bytes) = session.poll_transmit() {
            let n = conn.write(bytes).await.map_err(failed)?;
            session.advance_transmit(n);
        }
        conn.flush().await.map_err(failed)?;
        let mut watch = Box::new(Watch {
            sentinel: sentinel.clone(),
            conn,
            session,
            heard: VecDeque::new(),
            buf: vec![0; 4096],
        });
        let answer = watch.next().await.map_err(ScoutError::Failed)?;
        Ok((watch, answer))
    };
    future::or(asked, async {
        Timer::after(timeout).await;
        Err(ScoutError::Failed(format!("no answer within {timeout:?}")))
    })
    .await
}

impl Watch {
    /// The sentinel watched.
    pub(crate) fn sentinel(&self) -> &HostPort {
        &self.sentinel
    }

    /// The next thing the sentinel says (the answer, then the master's moves), or why the
    /// watch is over.
    pub(crate) async fn next(&mut self) -> Result<SentinelAnswer, String> {
        loop {
            if let Some(answer) = self.heard.pop_front() {
                return Ok(answer);
            }
            let n = self.conn.read(&mut self.buf).await.map_err(|e| why(&e))?;
            if n == 0 {
                return Err(CLOSED.into());
            }
            self.session.handle_input(&self.buf[..n]).map_err(|e| e.to_string())?;
            self.heard.extend(std::iter::from_fn(|| self.session.poll_answer()));
        }
    }
}
