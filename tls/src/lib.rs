//! TLS for pelican's transports (`pelican-mio`, `pelican-smol`) and its CLI: the settings
//! users of `redis-cli` and the `redis` crate know — trust a CA file or the system roots,
//! optionally present a client certificate, check the server's name — turned into a
//! [`rustls`] client configuration (with the `ring` provider, so nothing but a C compiler is
//! needed to build; a provider the application installed as the process default, e.g.
//! aws-lc-rs for post-quantum key exchange, is used instead), and TLS failures turned into
//! errors that name their cause.
//!
//! The core (`pelican`) never sees any of it: TLS is the transport's business.
//!
//! ```no_run
//! use pelican_tls::TlsConfig;
//!
//! // Trust a private CA, present a client certificate (for `tls-auth-clients yes`).
//! let tls = TlsConfig::new()
//!     .ca_file("ca.pem")
//!     .client_cert("client.pem", "client-key.pem")
//!     .build()?;
//! // What a transport does per connection: the server's name is checked as given.
//! let connection = tls.connect("redis.example.com")?;
//! # drop(connection);
//! # Ok::<(), pelican_tls::TlsError>(())
//! ```

mod config;
mod error;
mod insecure;

pub use config::{server_name, Tls, TlsConfig};
pub use error::TlsError;

/// The `rustls` version this crate is built with, for callers that need its types
/// (`ClientConnection`, `ClientConfig`).
pub use rustls;
