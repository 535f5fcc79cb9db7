//! # pelican-sim
//!
//! An in-memory model of Redis/Valkey streams with consumer groups that speaks RESP bytes in
//! and out on a **virtual clock**, for deterministic tests of stream consumers (pelican's
//! own simulation tests, fuzzing, users' handler tests with the [`kit`], the demo). It is kept honest by a
//! differential test against Redis 6.2, Redis 7.0 and Valkey 8.1 (`tests/differential.rs`).
//! It is not a server for production use.
//!
//! ```
//! use pelican_sim::{Sim, SimOptions};
//!
//! let mut sim = Sim::new(SimOptions::redis70());
//! let c = sim.connect();
//! sim.input(c, b"XGROUP CREATE s g 0 MKSTREAM\r\nXADD s 1-0 f v\r\n");
//! sim.input(c, b"*7\r\n$10\r\nXREADGROUP\r\n$5\r\nGROUP\r\n$1\r\ng\r\n$1\r\nA\r\n$7\r\nSTREAMS\r\n$1\r\ns\r\n$1\r\n>\r\n");
//! assert_eq!(
//!     sim.output(c),
//!     b"+OK\r\n$3\r\n1-0\r\n*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n"
//! );
//! assert_eq!(sim.pending(b"s", b"g").unwrap()[0].delivery_count, 1);
//! ```
//!
//! ## The test kit
//!
//! [`kit`] runs your handler in a deterministic [`kit::World`]: consumers running pelican's
//! real core against this simulator, with crashes, restarts, dead peers, slow and failing
//! handlers, deleted entries, destroyed groups and server restarts on a schedule or drawn from
//! a seed; its [`kit::Report`] tells every handling and checks that nothing was lost and that
//! your invariant holds:
//!
//! ```
//! use pelican::Verdict;
//! use pelican_sim::kit::{FaultKind, World};
//!
//! // Count each entry once, whatever is redelivered (an idempotent handler).
//! let world = World::new(11).random_faults([FaultKind::Crash, FaultKind::Death]);
//! let report = world.run(std::collections::BTreeSet::new(), |seen, _ctx, entry| {
//!     seen.insert(entry.id().to_vec());
//!     Verdict::Ack
//! });
//! report
//!     .check_with(|seen| {
//!         let succeeded = report.entries.iter().filter(|e| e.succeeded()).count();
//!         if seen.len() == succeeded { Ok(()) } else { Err(format!("{} seen", seen.len())) }
//!     })
//!     .unwrap_or_else(|failure| panic!("{failure}")); // the seed, what failed, the replay
//! assert!(report.faults_applied().len() == 2, "{report}");
//! ```
//!
//! ## Commands
//!
//! `PING`, `QUIT`, `HELLO [2|3] [AUTH user pass] [SETNAME name]`, `AUTH [user] pass`,
//! `CLIENT ID|SETNAME|GETNAME|LIST [TYPE t]`, `SELECT 0`, `FLUSHALL`, `FLUSHDB`, `DEL`, `XLEN`, `XADD`
//! (`NOMKSTREAM`, `MAXLEN`/`MINID`), `XTRIM`, `XDEL`, `XGROUP
//! CREATE|DESTROY|DELCONSUMER|CREATECONSUMER`, `XREADGROUP` (one stream), `XAUTOCLAIM`,
//! `XCLAIM` (`JUSTID`, `IDLE`, `RETRYCOUNT`), `XRANGE`, `XACK`, `XPENDING` (both forms), `XINFO GROUPS`, and
//! `EVAL` of pelican's dead-letter script (`pelican::DEAD_LETTER_SCRIPT`, run natively) and of its
//! check (`pelican::DEAD_LETTER_CHECK_SCRIPT`). Requests are RESP arrays of bulk strings
//! or inline commands. Replies follow RESP2, or RESP3 after `HELLO 3`.
//!
//! Where the servers differ, [`SimOptions`] picks a behaviour ([`SimOptions::redis62`],
//! [`SimOptions::redis70`], [`SimOptions::valkey81`]).
//!
//! ## Known differences from the real servers
//!
//! - Only streams exist: no other data types, no `WRONGTYPE`; one database (`SELECT n` with
//!   n ≠ 0 answers `-ERR DB index is out of range`).
//! - Trimming (`MAXLEN ~`, `MINID ~`) is always exact; real servers trim whole nodes only.
//! - `XREADGROUP` reads one stream per call; several answer an error.
//! - `XADD 0-0` answers the 7.0 text (`must be greater than 0-0`) on every flavor.
//! - `XINFO GROUPS` `entries-read`/`lag` follow Redis 7's algorithm (a logical read counter
//!   that `XGROUP CREATE` leaves unknown unless `ENTRIESREAD` is given, re-estimated from
//!   the first entry when `XDEL` holes lie ahead of the group) but are approximate: they
//!   drift from the servers' values after some delete/trim/re-create sequences, so the
//!   differential test does not compare them.
//! - Timeouts are exact on the virtual clock (real servers add up to ~100 ms).
//! - Error texts for argument errors are the 7.x wording where versions differ, and a few
//!   rare ones (arity of subcommands, unknown commands) are only approximately worded.
//! - The parser waits for a declared bulk length up to 512 MiB (it remembers where a partial
//!   request's scan stopped, so a request fed in tiny pieces costs time linear in its size).
//! - [`serve`] polls its sockets (about every millisecond when idle) on one thread.
//! - `EVAL` runs only pelican's dead-letter script; `XCLAIM` knows `JUSTID`, `IDLE` and
//!   `RETRYCOUNT` of its options (`TIME`, `FORCE`, `LASTID` answer an error).
//! - Not modelled: `XREVRANGE`, `XREAD`, `XSETID`, `XINFO STREAM|CONSUMERS`, `CLIENT UNBLOCK`,
//!   `MULTI`, other scripts, replication, ACL users other than `default`; persistence only as
//!   [`Sim::restart`] (an append-only file written on every command).

mod command;
mod conn;
mod id;
pub mod kit;
mod model;
mod net;
mod options;
mod reply;
mod sim;

pub use conn::ConnId;
pub use id::EntryId;
pub use model::{Origin, PendingEntry};
pub use net::{serve, ServerHandle};
pub use options::{ClaimShape, GroupGoneWhileParked, KeyDeletedWhileParked, Redis8Verbs, SimOptions};
pub use sim::{Sim, StreamEntry};
