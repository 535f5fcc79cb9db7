//! A connected socket, plain or TLS: reads and writes the consumer's bytes, non-blocking
//! (the driver's and the scout's `mio` sockets, and before that whether a non-blocking connect
//! has finished), or blocking with timeouts (the one-shot [`Session`](crate::Session)'s `std`
//! ones, where `WouldBlock` means a timeout ran out).
//!
//! Over TLS, `rustls`'s own sans-IO connection sits between the consumer and the socket:
//! plaintext written before the handshake ends waits in it, and every read and write also
//! moves the handshake along, so the driver's loop is the same either way.

use std::io::{self, Read, Write};

use mio::net::TcpStream;

use crate::tls::ClientConnection;

/// The socket, and the TLS session over it if any.
#[derive(Debug)]
pub(crate) enum Conn<S = TcpStream> {
    Plain(S),
    Tls(S, Box<ClientConnection>),
}

impl<S: Read + Write> Conn<S> {
    pub(crate) fn socket(&mut self) -> &mut S {
        match self {
            Conn::Plain(s) | Conn::Tls(s, _) => s,
        }
    }

    /// Moves a TLS handshake on as far as the socket allows: `Ok(true)` once it is done.
    /// A TLS failure is an `InvalidData` error wrapping the `rustls::Error`; the end of the
    /// stream is `UnexpectedEof`.
    pub(crate) fn handshake(&mut self) -> io::Result<bool> {
        let Conn::Tls(socket, tls) = self else { return Ok(true) };
        loop {
            flush_tls(socket, tls)?;
            if !tls.is_handshaking() {
                return Ok(true);
            }
            match tls.read_tls(socket) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(_) => {
                    tls.process_new_packets().map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Plaintext into `buf`: `Ok(0)` at the end of the stream, `WouldBlock` when nothing
    /// more can be read now. A TLS failure is an `InvalidData` error wrapping the
    /// `rustls::Error`.
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let (socket, tls) = match self {
            Conn::Plain(s) => return s.read(buf),
            Conn::Tls(s, tls) => (s, tls),
        };
        loop {
            match tls.reader().read(buf) {
                Ok(n) => return Ok(n), // 0: the server closed the session cleanly
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e), // closed without close_notify
            }
            if tls.read_tls(socket)? == 0 {
                return Ok(0);
            }
            tls.process_new_packets().map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            // Handshake messages (and alerts) to answer go out at once.
            flush_tls(socket, tls)?;
        }
    }

    /// Writes plaintext: `Ok(n)` once `n` bytes are taken (over TLS, into the session, which
    /// sends what the socket takes), `WouldBlock` if none could be.
    pub(crate) fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let (socket, tls) = match self {
            Conn::Plain(s) => return s.write(bytes),
            Conn::Tls(s, tls) => (s, tls),
        };
        // What the session holds goes first: the socket's room decides how much more it takes.
        flush_tls(socket, tls)?;
        if tls.wants_write() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = tls.writer().write(bytes)?;
        if n == 0 {
            // The session's buffer is full during the handshake: the next read moves it on.
            return Err(io::ErrorKind::WouldBlock.into());
        }
        match flush_tls(socket, tls) {
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => Err(e),
            _ => Ok(n),
        }
    }
}

impl<S: Read + Write> Conn<S> {
    /// Sends what a TLS session still holds. `Ok(true)` if the socket would block with bytes
    /// left (a writable event will follow).
    pub(crate) fn flush(&mut self) -> io::Result<bool> {
        match self {
            Conn::Plain(_) => Ok(false),
            Conn::Tls(socket, tls) => {
                flush_tls(socket, tls)?;
                Ok(tls.wants_write())
            }
        }
    }
}

/// Sends what the TLS session has ready until the socket would block.
fn flush_tls(socket: &mut impl Write, tls: &mut ClientConnection) -> io::Result<()> {
    while tls.wants_write() {
        match tls.write_tls(socket) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Whether a non-blocking connect has finished: `Ok(true)` connected, `Ok(false)` still
/// under way, `Err` failed (the recipe from `mio::net::TcpStream::connect`'s docs).
pub(crate) fn connect_outcome(stream: &TcpStream) -> io::Result<bool> {
    if let Some(err) = stream.take_error()? {
        return Err(err);
    }
    match stream.peer_addr() {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
        Err(e) => Err(e),
    }
}
