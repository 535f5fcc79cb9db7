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
//!
//! # Features
//!
//! - `rustls` (default): the TLS client, [`TlsConfig`] and [`Tls`], with `rustls` and *ring*.
//!   Without it the crate holds [`TlsError`] alone: what a transport built without TLS
//!   (`pelican-mio` or `pelican-smol` with `default-features = false`) still names, e.g. a
//!   TLS port reached in plaintext ([`TlsError::ServerWantsTls`]).
//!
//! # Minimum supported Rust version
//!
//! Rust 1.85 (`rust-version`), the floor of its locked dependencies (`zeroize` 1.9,
//! `security-framework` 3.7 on Apple platforms); see the changelog's semver policy.

#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "rustls")]
mod config;
mod error;
#[cfg(feature = "rustls")]
mod insecure;

#[cfg(feature = "rustls")]
pub use config::{server_name, Tls, TlsConfig};
pub use error::TlsError;

/// The `rustls` version this crate is built with, for callers that need its types
/// (`ClientConnection`, `ClientConfig`).
#[cfg(feature = "rustls")]
pub use rustls;
