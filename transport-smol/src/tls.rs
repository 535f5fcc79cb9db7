//! The TLS types the connection paths use: `pelican-tls`'s and `rustls`'s with the `tls`
//! feature. Without it, types of which no value can exist, carrying the methods those paths
//! call: the runner's and the scout's paths compile unchanged and are never taken (there is
//! no `tls()` to ask for TLS, so a runner's TLS is always `None`), `conn` leaves out the TLS
//! stream and its handshake, and neither `rustls` nor *ring* is built.

#[cfg(feature = "tls")]
pub(crate) use pelican_tls::rustls::Error as RustlsError;
#[cfg(feature = "tls")]
pub(crate) use pelican_tls::Tls;

#[cfg(not(feature = "tls"))]
pub(crate) use without::{RustlsError, Tls};

#[cfg(not(feature = "tls"))]
mod without {
    use std::fmt;

    use pelican_tls::TlsError;

    /// Stands for `pelican_tls::Tls`; never made.
    #[derive(Clone, Debug)]
    pub(crate) enum Tls {}

    impl Tls {
        pub(crate) fn explain(&self, _err: &RustlsError, _host: &str) -> TlsError {
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
