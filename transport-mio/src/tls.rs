//! The TLS types the connection paths use: `pelican-tls`'s and `rustls`'s with the `tls`
//! feature. Without it, types of which no value can exist, carrying the methods those paths
//! call: the paths compile unchanged and are never taken (there is no `tls()` to ask for TLS,
//! so `Driver::tls`'s field is always `None`), and neither `rustls` nor *ring* is built.

#[cfg(feature = "tls")]
pub(crate) use pelican_tls::rustls::{ClientConnection, Error as RustlsError};
#[cfg(feature = "tls")]
pub(crate) use pelican_tls::Tls;

#[cfg(not(feature = "tls"))]
pub(crate) use without::{ClientConnection, RustlsError, Tls};

#[cfg(not(feature = "tls"))]
mod without {
    use std::{fmt, io};

    use pelican_tls::TlsError;

    /// Stands for `pelican_tls::Tls`; never made.
    #[derive(Clone, Debug)]
    pub(crate) enum Tls {}

    impl Tls {
        pub(crate) fn connect(&self, _host: &str) -> Result<ClientConnection, TlsError> {
            match *self {}
        }

        pub(crate) fn explain(&self, _err: &RustlsError, _host: &str) -> TlsError {
            match *self {}
        }
    }

    /// Stands for `rustls::ClientConnection`; never made.
    #[derive(Debug)]
    pub(crate) enum ClientConnection {}

    impl ClientConnection {
        pub(crate) fn is_handshaking(&self) -> bool {
            match *self {}
        }

        pub(crate) fn wants_write(&self) -> bool {
            match *self {}
        }

        pub(crate) fn read_tls(&mut self, _from: &mut dyn io::Read) -> io::Result<usize> {
            match *self {}
        }

        pub(crate) fn write_tls(&mut self, _to: &mut dyn io::Write) -> io::Result<usize> {
            match *self {}
        }

        pub(crate) fn process_new_packets(&mut self) -> Result<(), RustlsError> {
            match *self {}
        }

        pub(crate) fn reader(&mut self) -> io::Empty {
            match *self {}
        }

        pub(crate) fn writer(&mut self) -> io::Sink {
            match *self {}
        }
    }

    /// Stands for `rustls::Error`; never made.
    #[derive(Debug)]
    pub(crate) enum RustlsError {}

    impl fmt::Display for RustlsError {
        fn fmt(&self, _: &mut fmt::Formatter<'_>) -> fmt::Result {
            match *self {}
        }
    }

    impl std::error::Error for RustlsError {}
}
