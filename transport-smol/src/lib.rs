//! # pelican-smol
//!
//! Drives [`pelican`] consumers over [`smol`]'s async sockets, with async handlers: consumers
//! of Redis/Valkey Streams consumer groups that drain their own pending entries at every
//! (re)connect, reclaim dead peers' idle entries, park on a blocking read and settle each
//! entry by the application's verdict. The async transport (`pelican-mio` serves blocking
//! code and `mio` event loops). Thin: sockets, timers and reconnects; everything about the
//! protocol is the core's.
//!
//! - [`run`]: consume one stream until the consumer fails for good (or a handler panics),
//!   handing each entry to an async handler and settling it with the verdict it returns.
//! - [`Runner`]: the same, with a [`StopHandle`] to stop it from any task or thread, and a
//!   [`StatsHandle`] to read its counters, the entries in hand and buffered and whether it is
//!   connected while it runs.
//! - [`Streams`]: several streams in one call, one runner (and connection) each, all polled
//!   inside one future, one handler for all, which is given each entry's stream
//!   (`|stream, entry| async move { … }`), one [`StopHandle`] for all. In a cluster each
//!   stream starts at the master serving it.
//!
//! [`StopHandle::stop`] waits for the server to confirm the acks earned, however long an
//! outage lasts; [`StopHandle::stop_within`] gives that wait a deadline, past which the stop
//! becomes an [`abandon`](StopHandle::abandon): what a process told to exit wants
//! (`examples/smol_signals.rs`: the first SIGTERM or SIGINT stops within a grace period, a second
//! abandons).
//!
//! The futures work on any executor: sockets and timers are served by `async-io`'s reactor
//! (driven by [`smol::block_on`], or by its own thread under any other executor), so
//! `smol::block_on`, `futures_lite::future::block_on` and an `async_executor::Executor` all
//! do. Many consumers can run as tasks on one executor; each has its own connection, so
//! one consumer's parked read never delays another's. One consumer reads many streams on it
//! (`Config::streams`, one parked read for all), added and removed while it runs
//! ([`Runner::stream_set`]).
//!
//! TLS (`rustls` through `futures-rustls`): build a [`pelican_tls::Tls`] and pass it to
//! [`Runner::tls`]; certificate and handshake failures end the run with [`RunError::Tls`].
//!
//! # Entries in hand
//!
//! Up to [`Config::concurrency`](pelican::Config::concurrency) entries are in hand at once
//! (one by default: each is handled to completion before the next is handed out). Their
//! handler futures are polled inside [`Runner::run`], not spawned, so they may borrow what the
//! caller owns (no `Arc`, no `'static`; `Send` only if the run itself is spawned on a
//! multi-threaded executor), and each settles its entry by its verdict as it finishes, in any
//! order. With [`Config::order_by`](pelican::Config::order_by) two entries of one key are never
//! in hand at once. While they run, the connection keeps working: earned acks go out, leases
//! are renewed. A stop never cuts a handler short: nothing more is handed out, the futures
//! running finish, the acks are confirmed, then `run` returns; an abandon drops them.
//!
//! A handler that panics (called, or its future polled) loses no earned ack: its entry stays
//! pending (not acked, to come again), the run stops as for a stop, and `run` returns
//! [`RunError::HandlerPanicked`] naming the entry.
//!
//! ```no_run
//! use pelican::{Config, Entry, Verdict};
//!
//! struct Db; // the application's own client
//! impl Db {
//!     async fn write(&self, _entry: &Entry) { /* its own I/O */ }
//! }
//!
//! let db = Db;
//! let config = Config::new("orders", "billing", "worker-1").create_group("0").concurrency(8);
//! let db = &db; // borrowed by every handler future
//! let stats = smol::block_on(pelican_smol::run("127.0.0.1:6379", config, |entry| async move {
//!     db.write(&entry).await;
//!     Verdict::Ack
//! }))?;
//! println!("{stats:?}");
//! # Ok::<(), pelican_smol::RunError>(())
//! ```
//!
//! # Features
//!
//! - `tls` (default): TLS with `rustls` and *ring* (through `pelican-tls` and
//!   `futures-rustls`): [`Runner::tls`], [`Streams::tls`]. With `default-features = false`
//!   neither `rustls` nor *ring* is built and those methods do not exist; a TLS port reached
//!   in plaintext still ends the run with [`RunError::Tls`] naming it
//!   ([`TlsError::ServerWantsTls`](pelican_tls::TlsError::ServerWantsTls)).
//!
//! # Minimum supported Rust version
//!
//! Rust 1.85 (`rust-version`): the floor of its locked dependencies (smol 2's `async-lock`
//! and `async-signal`; with TLS, `zeroize` 1.9 too). Raising it is a minor release (see the
//! changelog's semver policy).

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod conn;
mod error;
mod handler;
mod resolve;
mod run;
mod scout;
mod seed;
mod stats;
mod stop;
mod stream_set;
mod streams;
mod tls;

pub use error::RunError;
pub use run::{run, Runner, DEFAULT_CONNECT_TIMEOUT};
pub use stats::StatsHandle;
pub use stop::StopHandle;
pub use stream_set::StreamSet;
pub use streams::{StreamStats, Streams};
