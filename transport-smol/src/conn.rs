//! A connected socket, plain or TLS (`futures-rustls` over smol's socket), as one async
//! stream.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

#[cfg(feature = "tls")]
use futures_rustls::client::TlsStream;
#[cfg(feature = "tls")]
use futures_rustls::TlsConnector;
use pelican_tls::TlsError;
use smol::io::{AsyncRead, AsyncWrite};
use smol::net::TcpStream;

use crate::tls::{RustlsError, Tls};

/// The connection.
pub(crate) enum Conn {
    Plain(TcpStream),
    #[cfg(feature = "tls")]
    Tls(Box<TlsStream<TcpStream>>),
}

/// Why a TLS handshake failed: the network (try again), or TLS for good. (Without the `tls`
/// feature no handshake happens, so neither is made.)
#[cfg_attr(not(feature = "tls"), allow(dead_code))]
pub(crate) enum HandshakeError {
    Io,
    Tls(TlsError),
}

/// Shakes hands over `stream` with the server named `host`.
#[cfg(feature = "tls")]
pub(crate) async fn secure(stream: TcpStream, tls: &Tls, host: &str) -> Result<Conn, HandshakeError> {
    let name = pelican_tls::server_name(host).map_err(HandshakeError::Tls)?;
    match TlsConnector::from(tls.client_config()).connect(name, stream).await {
        Ok(stream) => Ok(Conn::Tls(Box::new(stream))),
        Err(e) => Err(match tls_failure(&e) {
            Some(err) => HandshakeError::Tls(tls.explain(err, host)),
            None => HandshakeError::Io,
        }),
    }
}

/// Without the `tls` feature there is no `Tls` to shake hands with.
#[cfg(not(feature = "tls"))]
pub(crate) async fn secure(_: TcpStream, tls: &Tls, _: &str) -> Result<Conn, HandshakeError> {
    match *tls {}
}

/// The TLS failure behind an I/O error, if that is what it is.
pub(crate) fn tls_failure(err: &io::Error) -> Option<&RustlsError> {
    err.get_ref()?.downcast_ref()
}

impl AsyncRead for Conn {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            #[cfg(feature = "tls")]
            Conn::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            #[cfg(feature = "tls")]
            Conn::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            #[cfg(feature = "tls")]
            Conn::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_close(cx),
            #[cfg(feature = "tls")]
            Conn::Tls(s) => Pin::new(&mut **s).poll_close(cx),
        }
    }
}
