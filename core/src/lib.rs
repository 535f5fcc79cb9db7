//! # pelican
//!
//! A consumer for Redis/Valkey Streams consumer groups, as a sans-IO state machine: no
//! sockets, no clock, no runtime. Bytes, time and the application's verdicts go in; bytes to
//! write, deadlines and entries come out. Transports (`pelican-mio`, `pelican-smol`) move the
//! bytes; tests, simulators and fuzzers can drive it directly.
//!
//! The loop it runs recovers held work in two ways, then waits for new work:
//!
//! 1. **Drain its own pending list** on every (re)connect: `XREADGROUP … STREAMS key <id>`
//!    from `0`, paging by the last id, until an empty page. A restarted consumer gets its
//!    backlog back at once, without waiting for any idle timeout.
//! 2. **Reclaim** dead peers' entries idle past `min_idle` with `XAUTOCLAIM`, once per beat,
//!    carrying the cursor across beats — or, on Redis 8.4+, with the reads themselves
//!    (`XREADGROUP … CLAIM`; see [`Dialect`] for what each server version changes).
//! 3. **Park** on `XREADGROUP … BLOCK <beat> … >`.
//!
//! Each entry is handed out (one at a time, or up to [`Config::concurrency`] at once, in order
//! per key with [`Config::order_by`]) and settled by its id with the application's [`Verdict`]: `Ack` earns
//! an `XACK` (written within [`Config::ack_delay`], so fast handlers share one), `Retry` leaves
//! it pending, `DeadLetter` moves it to [`Config::dead_letter`], `Commit` makes the handler's
//! output writes and the ack in one fenced server-side step (see [`commit`]: exactly-once
//! stages). [`Consumer::stop`] is honored between entries, after earned acks are confirmed.
//!
//! Real handlers are slow, fail for good, or get big entries; the consumer keeps each entry
//! handled once in the normal case (details in [`Consumer`], *Leases…*):
//!
//! - entries read but not yet settled are **leased**: renewed with an owner-checked
//!   `XCLAIM … JUSTID` before a peer's reclaim could take them, and reads shrink to what the
//!   handlers get through well within the lease;
//! - every entry carries its **delivery count**, and one past [`Config::max_deliveries`] is
//!   moved to the **dead-letter** stream in one server-side step
//!   ([`DEAD_LETTER_SCRIPT`]);
//! - a read that would bring more than [`Config::read_bytes`] is skipped as it arrives and
//!   read again smaller; only one entry over [`Limits::max_frame`] is an error;
//! - what happened is told as [`Notice`]s and counted in [`Stats`].
//!
//! ## Run loop
//!
//! A minimal blocking driver over any byte stream (a real one also reconnects, see
//! [`Consumer::wants_connection`], and sets the socket's read timeout from
//! [`Consumer::poll_timeout`]):
//!
//! ```no_run
//! use std::io::{Read, Write};
//! use std::time::Instant;
//! use pelican::{Config, Consumer, Event, Verdict};
//!
//! fn drive(
//!     stream: &mut (impl Read + Write),
//!     clock: impl Fn() -> Instant,
//!     mut handle: impl FnMut(&pelican::Entry) -> Verdict,
//! ) -> Result<(), pelican::Error> {
//!     let mut consumer = Consumer::new(Config::new("orders", "billing", "worker-1")).unwrap();
//!     consumer.on_connected(clock());
//!     let mut buf = vec![0u8; 64 * 1024];
//!     loop {
//!         while let Some(bytes) = consumer.poll_transmit() {
//!             let n = stream.write(bytes).expect("write");
//!             consumer.advance_transmit(n);
//!         }
//!         while let Some(event) = consumer.poll_event() {
//!             match event {
//!                 Event::Entry(entry) => {
//!                     let verdict = handle(&entry);
//!                     consumer.settle(entry.id(), verdict, clock());
//!                 }
//!                 Event::Stopped => return Ok(()),
//!                 _ => {}
//!             }
//!         }
//!         if consumer.poll_transmit().is_some() {
//!             continue; // settling earned acks and the next read: write them first
//!         }
//!         let n = stream.read(&mut buf).expect("read");
//!         consumer.handle_input(&buf[..n], clock())?;
//!     }
//! }
//! ```
//!
//! ## Protocol facts it relies on
//!
//! Written down in the repository's `PROTOCOL.md` notes and pinned by tests against replies
//! captured from Redis 6.2, Redis 7.0, Valkey 8.1 and Redis 8.10: both `XAUTOCLAIM` reply shapes,
//! `[id, nil]` for deleted pending entries, `NOGROUP`/`UNBLOCKED` when the group is gone,
//! `XACK` counting 0 for an entry a peer took first, RESP3 maps.
//!
//! # Minimum supported Rust version
//!
//! Rust 1.77 (`rust-version`): its own use of std (`core::net`, `slice::chunk_by`) sets it;
//! its locked dependencies need 1.71. Raising it is a minor release (see the changelog's
//! semver policy).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod acks;
mod backoff;
pub mod cluster;
mod commands;
pub mod commit;
mod config;
mod consumer;
mod dead_letter;
mod decode;
mod dialect;
mod encode;
mod entry;
mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod held;
mod in_flight;
mod lease;
mod leave;
pub mod locate;
mod notice;
#[cfg(any(test, feature = "fuzzing"))]
mod oracle;
mod pace;
mod release;
mod reply;
pub mod retell;
pub mod retire;
mod retried;
mod stats;
mod stream;
mod stream_reply;
mod twins;

pub use backoff::Backoff;
pub use commit::{Trim, Write, Writes, COMMIT_CHECK_SCRIPT, COMMIT_SCRIPT, MAX_FIELDS_PER_WRITE};
pub use config::{
    key_for, AckWait, Auth, Config, ConfigError, DeleteAcked, GroupGone, KeyFn, Limits, OnRetry, OrderBy,
    Protocol, MAX_CONCURRENCY, MAX_DURATION, MIN_MIN_IDLE, MIN_READ_GRACE,
};
pub use consumer::{Consumer, Event, MAX_STREAMS};
pub use dead_letter::{DEAD_LETTER_CHECK_SCRIPT, DEAD_LETTER_SCRIPT};
pub use dialect::Dialect;
pub use entry::{Entry, Fields, Source, Verdict};
pub use error::{Command, Error};
pub use leave::LEAVE_SCRIPT;
pub use locate::{Endpoint, HostPort, IntoEndpoint, Locator, Sentinels};
pub use notice::{DeadLetterReason, GroupHealth, Notice, OldestPending, ShrinkCause};
pub use stats::{HandlerTimes, OldestInHand, Snapshot, Stats, StreamStats};
pub use stream::StreamChange;
