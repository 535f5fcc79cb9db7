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
//! A driver does four things, in this order, every turn; a driver that skips one can hang or
//! strand entries, so the example does each. `examples/std-driver` in the repository is the
//! same loop over `std`'s `TcpStream`, with a stop flag and its tests against real servers.
//!
//! 1. **Connect when the consumer says** — [`Consumer::wants_connection`] is true at the
//!    start, after a lost connection, *and while a connection is open* when a stop drops a
//!    parked one to finish on a new one: drop the socket then. Connect once
//!    [`Consumer::connect_due`], and tell [`Consumer::on_connected`] (or
//!    [`Consumer::on_disconnected_because`] if the connect failed).
//! 2. **Write** what [`Consumer::poll_transmit`] gives, then **handle every event**
//!    ([`Consumer::poll_event`]): entries (settle each with its verdict), notices, `Stopped`.
//!    Settles queue more to write: go round again while there is.
//! 3. **Wait for input until [`Consumer::poll_timeout`]** ([`Consumer::timeout_from`] gives it
//!    as a read timeout: never zero, a deadline already past is due at once), then feed what
//!    came to [`Consumer::handle_input`], or call [`Consumer::handle_timeout`].
//! 4. **On an `Err`** from either, drop the socket; a fatal one ([`Error::is_fatal`]) ends
//!    the consumer, any other is followed by a reconnect (rule 1).
//!
//! ```no_run
//! use std::io::{self, Read, Write};
//! use std::time::{Duration, Instant};
//! use pelican::{Config, Consumer, Entry, Error, Event, Stats, Verdict};
//!
//! /// What the driver needs of its environment: a socket it can open, read with a timeout
//! /// and write (a TCP stream, a TLS stream…), a clock and a way to wait.
//! trait Env {
//!     type Socket: Read + Write;
//!     fn connect(&mut self) -> io::Result<Self::Socket>;
//!     fn set_read_timeout(&mut self, socket: &Self::Socket, wait: Option<Duration>) -> io::Result<()>;
//!     fn now(&self) -> Instant;
//!     fn sleep(&self, wait: Duration);
//!     fn stop_asked(&self) -> bool;
//! }
//!
//! fn run<E: Env>(env: &mut E, config: Config, mut handle: impl FnMut(&Entry) -> Verdict) -> Result<Stats, Error> {
//!     let mut consumer = Consumer::new(config).expect("a valid config");
//!     consumer.reseed(0x1234_5678); // your process's own randomness: reconnects not in step
//!     let (mut socket, mut stopping) = (None, false);
//!     let mut buf = vec![0u8; 64 * 1024];
//!     loop {
//!         let now = env.now();
//!         if env.stop_asked() && !stopping {
//!             stopping = true;
//!             consumer.stop(); // ends after the entries in hand, between two of them
//!         }
//!         // 1. Connect when the consumer says, dropping an open socket it no longer wants.
//!         if consumer.wants_connection() {
//!             socket = None;
//!             if consumer.connect_due(now) {
//!                 match env.connect() {
//!                     Ok(s) => {
//!                         socket = Some(s);
//!                         consumer.on_connected(now);
//!                     }
//!                     Err(e) => consumer.on_disconnected_because(now, e),
//!                 }
//!             }
//!         }
//!         // 2. Write, then every event.
//!         if let Some(s) = socket.as_mut() {
//!             while let Some(bytes) = consumer.poll_transmit() {
//!                 match s.write(bytes) {
//!                     Ok(n) => consumer.advance_transmit(n),
//!                     Err(e) => {
//!                         consumer.on_disconnected_because(now, e);
//!                         break;
//!                     }
//!                 }
//!             }
//!         }
//!         while let Some(event) = consumer.poll_event() {
//!             match event {
//!                 Event::Entry(entry) => {
//!                     let verdict = handle(&entry);
//!                     consumer.settle_entry(&entry, verdict, env.now());
//!                 }
//!                 Event::Stopped => return Ok(consumer.stats().clone()),
//!                 _ => {} // notices: log them
//!             }
//!         }
//!         if consumer.wants_connection() || (socket.is_some() && consumer.poll_transmit().is_some()) {
//!             continue;
//!         }
//!         // 3. Wait for input until the next deadline.
//!         let wait = consumer.timeout_from(env.now());
//!         let Some(s) = socket.as_mut() else {
//!             env.sleep(wait.unwrap_or(Duration::from_millis(100)));
//!             continue;
//!         };
//!         let read = env.set_read_timeout(s, wait).and_then(|()| s.read(&mut buf));
//!         let outcome = match read {
//!             Ok(n) if n > 0 => consumer.handle_input(&buf[..n], env.now()),
//!             Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
//!                 consumer.handle_timeout(env.now())
//!             }
//!             // Closed by the server (0 bytes), or broken: the consumer schedules a reconnect.
//!             lost => {
//!                 socket = None;
//!                 let why = lost.err().map_or("the server closed the connection".into(), |e| e.to_string());
//!                 consumer.on_disconnected_because(env.now(), why);
//!                 Ok(())
//!             }
//!         };
//!         // 4. An error ends the connection (the consumer has scheduled what follows); a fatal
//!         // one ends the consumer.
//!         if let Err(e) = outcome {
//!             socket = None;
//!             if e.is_fatal() {
//!                 return Err(e);
//!             }
//!         }
//!     }
//! }
//! ```
//!
//! ## Protocol facts it relies on
//!
//! Redis and Valkey versions do not all answer alike, and the core is written against what
//! they were seen to answer: Redis 6.2.14, 7.0.15 and 8.10.2 and Valkey 8.1.8, in RESP2 and
//! RESP3. Each fact is written down in `PROTOCOL.md` at the root of the pelican repository,
//! numbered, with the captured replies or the
//! tests against real servers that pin it; the code's comments cite it by number. Those a
//! user of this crate meets:
//!
//! - **The drain** reads the pending list by id, which is exclusive; the page past the end is
//!   an empty list, never nil; and each such read is a delivery: it raises the entry's count
//!   by one (items 1–2), so [`Entry::deliveries`] counts the drain's own read.
//! - **Deleted entries**: a pending entry whose message was deleted (`XDEL`, `XTRIM`) reads
//!   as `[id, nil]` on every server until it is acked; it is acked away, never handed out, and
//!   counted in [`Stats::deleted_seen`] (item 3).
//! - **`XAUTOCLAIM`** answers `[cursor, claimed]` on Redis 6.2 (a deleted entry claimed is a
//!   bare nil there, its id moved into the claimer's pending list) and `[cursor, claimed,
//!   deleted_ids]` on 7.0+ and Valkey; the shape is told by its length. It scans at most
//!   `COUNT` × 10 entries a call, so the cursor is carried across beats (items 5–7).
//! - **Leases**: `XCLAIM … JUSTID` with an idle time a little under the time since the read
//!   renews the entries still this consumer's and skips one a peer took meanwhile (item 8b).
//! - **Parking**: a command pipelined behind a parked `XREADGROUP … BLOCK` waits for it, so
//!   nothing is written behind one; a parked read ends up to ~100 ms late, hence
//!   [`Config::read_grace`] (items 10–11).
//! - **A group that is gone**: a parked read gets `NOGROUP …`, or on Redis 7.0 `UNBLOCKED the
//!   stream key no longer exists`, which a cluster slot migration causes too, so that one is
//!   only transient (items 12, 23); [`Config::on_group_gone`] says what follows.
//! - **`XACK`** answers how many it removed: 0 for an entry a peer took first, counted in
//!   [`Stats::lost_to_peer`] (item 15).
//! - **RESP3** answers reads with a map of streams whose entries' fields stay flat arrays
//!   (item 19).
//! - **Group health**: Redis 7.0 can keep a group's `lag` wrong after a failover, so a lag is
//!   checked before it is told (item 20, [`GroupHealth`]).
//! - **Redis 8's verbs** (`XREADGROUP … CLAIM`, `XNACK`, `XACKDEL`, `MAXSIZE`) are used where
//!   `HELLO` names a server that has them ([`Dialect`], items 37–41).
//!
//! # Minimum supported Rust version
//!
//! Rust 1.77 (`rust-version`): its own use of std (`core::net`, `slice::chunk_by`) sets it;
//! its locked dependencies need 1.71. Raising it is a minor release (see the changelog's
//! semver policy).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

// The modules stand in layers — vocabulary, wire, duties, consumer — and each imports only
// from its own layer and those below it: core/ARCHITECTURE.md says which file is in which,
// and where a new one goes; `scripts/layers --check` (in scripts/test) holds it.
mod acks;
mod backoff;
pub mod cluster;
mod commands;
pub mod commit;
mod config;
mod consumer;
pub mod dead_letter;
mod decimal;
mod decode;
mod delay;
mod dialect;
mod encode;
mod endpoint;
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
pub mod oneshot;
#[cfg(any(test, feature = "fuzzing"))]
mod oracle;
mod pace;
mod release;
mod reply;
pub mod retell;
pub mod retire;
mod retried;
mod span;
mod stats;
mod stream;
mod stream_changes;
mod stream_reply;
// The unit tests' one clock read, kept outside `core/src` with the integration tests'.
#[cfg(test)]
#[path = "../tests/support/origin.rs"]
mod test_origin;
mod twins;
mod writes;

pub use backoff::Backoff;
pub use commit::{COMMIT_CHECK_SCRIPT, COMMIT_SCRIPT};
pub use config::{
    key_for, AckWait, Auth, Config, ConfigError, DeleteAcked, GroupGone, KeyFn, Limits, OnRetry, OrderBy,
    Protocol, RetryBackoff, MAX_CONCURRENCY, MAX_DURATION, MAX_STREAMS, MIN_MIN_IDLE, MIN_READ_GRACE,
};
pub use consumer::{Consumer, Event};
pub use dead_letter::{DEAD_LETTER_CHECK_SCRIPT, DEAD_LETTER_SCRIPT};
pub use delay::PARKING_CONSUMER;
pub use dialect::Dialect;
pub use endpoint::{Endpoint, HostPort, IntoEndpoint, Sentinels};
pub use entry::{Entry, Fields, Source, Verdict};
pub use error::{Command, Error};
pub use leave::LEAVE_SCRIPT;
pub use locate::Locator;
pub use notice::{DeadLetterReason, GroupHealth, Notice, OldestPending, ShrinkCause};
pub use stats::{HandlerTimes, OldestInHand, Snapshot, Stats, StreamStats};
pub use stream::StreamChange;
pub use stream_changes::StreamChanges;
pub use writes::{Trim, Write, Writes, MAX_FIELDS_PER_WRITE};
