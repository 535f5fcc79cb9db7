//! # pelican-mio
//!
//! Drives [`pelican`] consumers over [`mio`] sockets: consumers of Redis/Valkey Streams
//! consumer groups that drain their own pending entries at every (re)connect, reclaim dead
//! peers' idle entries, park on a blocking read and settle each entry by the application's
//! verdict. The transport for blocking code and for your own `mio` event loop
//! (`pelican-smol` is the async one). Thin: sockets, readiness, timers and reconnects;
//! everything about the protocol is the core's.
//!
//! - [`run`]: the common case. Blocks the calling thread consuming one stream, reconnecting
//!   with the consumer's backoff, until stopped or failed for good.
//! - [`Runner`]: the same, with a [`StopHandle`] to stop it from another thread, and two ways
//!   to run the handler:
//!   - [`Runner::run`] runs it inline on the calling thread, one entry at a time: the fastest
//!     for quick handlers, but nothing else happens on the connection while it runs, so a
//!     handler longer than `min_idle` may lose its entry to a peer.
//!   - [`Runner::run_pool`] runs it on [`Config::concurrency`](pelican::Config::concurrency)
//!     worker threads (scoped: the handler may borrow your state) while the calling thread
//!     drives the connection: several entries at once (in order per key with
//!     [`Config::order_by`](pelican::Config::order_by)), acks sent within `ack_delay`, and
//!     the leases of the entries being handled renewed however long the handlers take. For
//!     handlers that wait on I/O or run long, even one at a time.
//! - [`Streams`]: several streams in one call, one consumer (and connection) each, all on one
//!   `Poll` on the calling thread, one handler for all, which is told each entry's stream
//!   (`|stream, entry|`); [`Streams::run`] inline or [`Streams::run_pool`] on workers, one
//!   [`StopHandle`] for all. In a cluster each stream starts at the master serving it.
//! - [`Driver`]: one consumer and its socket, registered on *your* `mio::Poll` under *your*
//!   `Token`, so that many consumers share one thread inside your own event loop. It hands
//!   entries to a handler inline ([`Driver::drive`]), or out to your own workers
//!   ([`Driver::drive_deferred`], up to the concurrency in hand at once), each settled by its
//!   id as it completes ([`Driver::settle`]); `examples/pool.rs` shows such a loop.
//!   [`Driver::drive_mixed`] decides per entry: inline when the handler can answer at once,
//!   out to a worker when it would have to wait.
//!
//! While a runner runs, [`Runner::stats_handle`] (and [`Streams::stats_handles`]) read its
//! counters, the entries in hand and buffered and whether it is connected from any thread.
//! [`StopHandle::stop`] waits for the server to confirm the acks earned, however long an
//! outage lasts; [`StopHandle::stop_within`] gives that wait a deadline, past which the stop
//! becomes an [`abandon`](StopHandle::abandon): what a process told to exit wants
//! (`examples/signals.rs`: the first SIGTERM or SIGINT stops within a grace period, a second
//! abandons).
//!
//! Cluster: a [`Driver`] started at any node follows `MOVED` to the master serving its
//! stream; [`locate`] asks a node once where each stream belongs, so lanes start there.
//!
//! One-shot commands (an inspection of a group, a producer's appends, a retirement): a
//! [`Session`] is one blocking connection that resolves, connects, logs in, vets the node
//! (a replica or a sentinel is refused), finds the master through Sentinel and follows
//! cluster redirects, with the same parts as a [`Driver`] (the core's `Locator`, the
//! sentinel connection, TLS); what it sends and reads is the core's
//! ([`pelican::oneshot`]). The command line's `pending`, `produce`, `retire` and `demo` run
//! on it.
//!
//! TLS (`rustls`, driven by the driver itself, so TLS consumers share a `Poll` too): build a
//! [`pelican_tls::Tls`] and pass it to [`Runner::tls`] or [`Driver::tls`].
//!
//! Each consumer has its own connection, so one consumer's parked read never delays
//! another's; one consumer reads many streams on it (`Config::streams`, one parked read for
//! all), added and removed while it runs ([`Runner::stream_set`]). A handler that panics under a [`Runner`] does not unwind through it: its
//! entry stays pending, the consumer stops as for a stop (the acks earned before are
//! confirmed), and the run returns [`RunError::HandlerPanicked`] naming the entry. (Under
//! your own loop, [`Driver::drive`] lets a handler's panic unwind to you.)
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
//!
//! # Features
//!
//! - `tls` (default): TLS with `rustls` and *ring* (through `pelican-tls`): [`Runner::tls`],
//!   [`Streams::tls`], [`Driver::tls`]. With `default-features = false` neither `rustls` nor
//!   *ring* is built and those methods do not exist; a TLS port reached in plaintext still
//!   ends the run with [`RunError::Tls`] naming it
//!   ([`TlsError::ServerWantsTls`](pelican_tls::TlsError::ServerWantsTls)).
//!
//! # Minimum supported Rust version
//!
//! Rust 1.85 (`rust-version`): the floor of its locked dependencies with TLS (`zeroize` 1.9,
//! `security-framework` 3.7 on Apple platforms). Raising it is a minor release (see the
//! changelog's semver policy).

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod cluster;
mod conn;
mod driver;
mod error;
mod pool;
mod resolve;
mod retire;
mod run;
mod scout;
mod seed;
mod session;
mod stats;
mod stop;
mod stream_set;
mod streams;
mod tls;

pub use cluster::{locate, locate_with_masters};
pub use driver::{Driver, Status, DEFAULT_CONNECT_TIMEOUT, NOTICES_KEPT};
pub use error::{DriveError, RunError};
pub use retire::retire;
pub use run::{run, Runner};
pub use session::{Session, SessionConfig, SessionError, DEFAULT_SESSION_TIMEOUT};
pub use stats::StatsHandle;
pub use stop::StopHandle;
pub use stream_set::StreamSet;
pub use streams::{StreamStats, Streams};
