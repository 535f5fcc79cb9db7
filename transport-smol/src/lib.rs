//! # pelican-smol
//!
//! Drives [`pelican`] consumers over [`smol`]'s async sockets, with async handlers. Thin:
//! sockets, timers and reconnects; everything about the protocol is the core's.
//!
//! - [`run`]: consume one stream until the consumer fails for good, handing each entry to an
//!   async handler and settling it with the verdict the handler returns.
//! - [`Runner`]: the same, with a [`StopHandle`] to stop it from any task or thread.
//!
//! The futures work on any executor: sockets and timers are served by `async-io`'s reactor
//! (driven by [`smol::block_on`], or by its own thread under any other executor), so
//! `smol::block_on`, `futures_lite::future::block_on` and an `async_executor::Executor` all
//! do. Many consumers can run as tasks on one executor; each has its own connection, so
//! one consumer's parked read never delays another's.
//!
//! TLS (`rustls` through `futures-rustls`): build a [`pelican_tls::Tls`] and pass it to
//! [`Runner::tls`]; certificate and handshake failures end the run with [`RunError::Tls`].
//!
//! Each entry is handled to completion before the next is handed out: a stop never cuts a
//! handler short. The handler may await its own I/O meanwhile.
//!
//! ```no_run
//! use pelican::{Config, Verdict};
//!
//! let config = Config::new("orders", "billing", "worker-1").create_group("0");
//! let stats = smol::block_on(pelican_smol::run("127.0.0.1:6379", config, |entry| async move {
//!     println!("{:?}", entry);
//!     Verdict::Ack
//! }))?;
//! println!("{stats:?}");
//! # Ok::<(), pelican_smol::RunError>(())
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod conn;
mod error;
mod run;
mod stop;

pub use error::RunError;
pub use run::{run, Runner, DEFAULT_CONNECT_TIMEOUT};
pub use stop::StopHandle;
