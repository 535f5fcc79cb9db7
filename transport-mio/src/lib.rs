//! # pelican-mio
//!
//! Drives [`pelican`] consumers over [`mio`] sockets. Thin: sockets, readiness, timers and
//! reconnects; everything about the protocol is the core's.
//!
//! - [`run`]: the common case. Blocks the calling thread consuming one stream, reconnecting
//!   with the consumer's backoff, until stopped or failed for good.
//! - [`Runner`]: the same, with a [`StopHandle`] to stop it from another thread.
//! - [`Driver`]: one consumer and its socket, registered on *your* `mio::Poll` under *your*
//!   `Token`, so that many consumers share one thread inside your own event loop.
//!
//! Cluster: a [`Driver`] started at any node follows `MOVED` to the master serving its
//! stream; [`locate`] asks a node once where each stream belongs, so lanes start there.
//!
//! TLS (`rustls`, driven by the driver itself, so TLS consumers share a `Poll` too): build a
//! [`pelican_tls::Tls`] and pass it to [`Runner::tls`] or [`Driver::tls`].
//!
//! Each consumer has its own connection, so one consumer's parked read never delays
//! another's. Handlers run on the driving thread, one entry at a time; a slow handler delays
//! the other drivers on the same thread, and its own entry cannot be re-leased while it runs
//! (a handler longer than `min_idle` may lose its entry to a peer). To hand entries to other
//! threads and keep them leased meanwhile, use [`Driver::drive_deferred`] and
//! [`Driver::settle`].
//!
//! ```no_run
//! use pelican::{Config, Verdict};
//!
//! let config = Config::new("orders", "billing", "worker-1").create_group("0");
//! let stats = pelican_mio::run("127.0.0.1:6379", config, |entry| {
//!     println!("{:?}", entry);
//!     Verdict::Ack
//! })?;
//! println!("{stats:?}");
//! # Ok::<(), pelican_mio::RunError>(())
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod cluster;
mod conn;
mod driver;
mod error;
mod pool;
mod retire;
mod run;
mod stop;

pub use cluster::locate;
pub use driver::{Driver, Status, DEFAULT_CONNECT_TIMEOUT, NOTICES_KEPT};
pub use error::{DriveError, RunError};
pub use retire::retire;
pub use run::{run, Runner};
pub use stop::StopHandle;
