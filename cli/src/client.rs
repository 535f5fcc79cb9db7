//! A tiny blocking client for `pending`, `produce` and `demo`'s bookkeeping: commands go out
//! as RESP arrays of bulk strings over a `std::net::TcpStream` (wrapped in `rustls` for
//! `rediss://`), replies come back through `redis-protocol`'s RESP2 decoder. Logs in and
//! selects the database as the URL says. Every wait is bounded.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use pelican_tls::rustls::{self, ClientConnection, StreamOwned};
use pelican_tls::Tls;
use redis_protocol::resp2::decode::decode;
pub use redis_protocol::resp2::types::OwnedFrame as Reply;

use crate::server::{tls_message, Server};
use crate::url::Target;

/// How long a connect, a write or a reply may take.
const TIMEOUT: Duration = Duration::from_secs(10);

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

/// A connection to the server, logged in, one command or pipeline at a time.
pub struct Client {
    stream: Stream,
    /// The TLS settings and the host they check, to explain TLS failures.
    tls: Option<(Tls, String)>,
    /// Whether the server has said anything yet (a reset before that means a TLS port).
    heard: bool,
    buf: Vec<u8>,
    pos: usize,
}

impl Client {
    /// Connects to the first address of the server that answers (over TLS for
    /// `rediss://`), then `AUTH` and `SELECT`, or a `PING` when neither is needed: the link
    /// is proven before the command's own work, so a server that refuses it (a TLS port to a
    /// plaintext client, a TLS 1.3 server wanting a client certificate) is told apart from
    /// a refused command. A TLS failure is final: other addresses are not tried.
    pub fn connect(server: &Server) -> Result<Client, String> {
        let target = &server.target;
        let mut last = String::new();
        for addr in target.resolve()? {
            let socket = match TcpStream::connect_timeout(&addr, TIMEOUT) {
                Ok(socket) => socket,
                Err(e) => {
                    last = format!("cannot connect to {addr}: {e}");
                    continue;
                }
            };
            let _ = socket.set_nodelay(true);
            socket.set_read_timeout(Some(TIMEOUT)).map_err(|e| e.to_string())?;
            socket.set_write_timeout(Some(TIMEOUT)).map_err(|e| e.to_string())?;
            let stream = match &server.tls {
                None => Stream::Plain(socket),
                Some(tls) => Stream::Tls(Box::new(handshake(tls, &target.host, socket)?)),
            };
            let tls = server.tls.clone().map(|tls| (tls, target.host.clone()));
            let mut client = Client { stream, tls, heard: false, buf: Vec::new(), pos: 0 };
            client.login(target)?;
            return Ok(client);
        }
        Err(last)
    }

    /// `AUTH` and `SELECT` as the URL says, else a `PING`; any reply to it proves the link
    /// (an error one too: `NOAUTH` is for the command to report).
    fn login(&mut self, target: &Target) -> Result<(), String> {
        if let Some(password) = &target.password {
            let mut auth: Vec<&[u8]> = vec![b"AUTH"];
            auth.extend(target.user.as_deref());
            auth.push(password);
            refused(self.exchange(&auth)?).map_err(|e| format!("AUTH: {e}"))?;
        }
        if target.db != 0 {
            let select = self.exchange(&[b"SELECT", target.db.to_string().as_bytes()])?;
            refused(select).map_err(|e| format!("SELECT: {e}"))?;
        }
        if !self.heard {
            self.exchange(&[b"PING"])?;
        }
        Ok(())
    }

    /// One command; an error reply is an `Err` with the server's text.
    pub fn call(&mut self, args: &[&[u8]]) -> Result<Reply, String> {
        refused(self.exchange(args)?)
    }

    /// One command and its reply, an error reply included; `Err` only for the connection.
    fn exchange(&mut self, args: &[&[u8]]) -> Result<Reply, String> {
        let mut out = Vec::new();
        encode(&mut out, args);
        self.write(&out)?;
        self.read()
    }

    /// Writes pipelined commands (already encoded).
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), String> {
        // rustls may still hold records the socket did not take: the flush hands them over.
        let written = self.stream.write_all(bytes).and_then(|()| self.stream.flush());
        written.map_err(|e| self.link_error(&e, "write"))
    }

    /// The next reply (error replies included).
    pub fn read(&mut self) -> Result<Reply, String> {
        loop {
            if self.pos < self.buf.len() {
                match decode(&self.buf[self.pos..]) {
                    Ok(Some((frame, used))) => {
                        self.pos += used;
                        return Ok(frame);
                    }
                    Ok(None) => {}
                    Err(e) => return Err(format!("undecodable reply: {e:?}")),
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
            return format!("{what} failed: timed out after {} s", TIMEOUT.as_secs());
        }
        format!("{what} failed: {err}")
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
