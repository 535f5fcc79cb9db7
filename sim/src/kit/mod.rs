//! # A test kit for your handler: crashes, restarts and redeliveries, deterministically
//!
//! The hardest thing to test in a stream consumer is the handler under redelivery: a crash
//! between applying an entry and acknowledging it, a restart that drains the backlog, a dead
//! peer's entries reclaimed, a slow handler, a deleted entry, a dead letter. This kit plays
//! all of that against your handler, in milliseconds, the same way every time for a seed.
//!
//! A [`World`] is N consumers running pelican's real core (the same state machine the
//! transports drive) with your handler, against the simulated server ([`Sim`](crate::Sim))
//! on a virtual clock. Entries are added on a schedule, faults ([`Fault`]) happen on a
//! schedule or at random from the seed, and [`World::run`] plays it until everything is
//! settled. The [`Report`] tells each entry's story (every handling: by whom, in which life
//! of its process, with which verdict, whether the verdict arrived), what the server holds
//! at the end, the duplicate handlings and the faults they are put down to; its
//! [`check`](Report::check) lists what went wrong ([`Violation`]): an entry lost, entries
//! left pending, a duplicate no fault explains, … and [`check_with`](Report::check_with)
//! adds your own invariant over your handler's side effects.
//!
//! Your handler gets `&mut S`, a state shared by all consumers that survives crashes (your
//! database), the [`HandlerCtx`] (the consumer, its life, the virtual time) and the entry. It
//! runs when the entry is handed out; its verdict reaches the consumer when the handling's
//! time is up. A crash in between loses the verdict but not the side effects, so a handler
//! that is not idempotent shows it:
//!
//! ```
//! use std::collections::BTreeSet;
//! use pelican::Verdict;
//! use pelican_sim::kit::{Fault, World};
//!
//! #[derive(Default)]
//! struct Bank {
//!     balance: u64,
//!     applied: BTreeSet<String>, // written with the balance, atomically
//! }
//!
//! let world = World::new(7)
//!     .consumers(2)
//!     .fault(1_000, Fault::Crash { consumer: 0, restart_ms: 300 })
//!     .fault(2_500, Fault::Death { consumer: 1 });
//! let report = world.run(Bank::default(), |bank, _ctx, entry| {
//!     let id = String::from_utf8_lossy(entry.id()).into_owned();
//!     if bank.applied.insert(id) {
//!         bank.balance += 1; // applied once, however often the entry comes
//!     }
//!     Verdict::Ack
//! });
//! let succeeded = report.entries.iter().filter(|e| e.succeeded()).count() as u64;
//! report
//!     .check_with(|bank| {
//!         if bank.balance == succeeded { Ok(()) } else { Err(format!("balance {}", bank.balance)) }
//!     })
//!     .unwrap_or_else(|failure| panic!("{failure}"));
//! ```
//!
//! To find a failing world and shrink it to a small one: [`search`] (no dependency), or
//! proptest with the strategies of `kit::strategy` (feature `proptest`). A [`Failure`] prints
//! the seed, the violations, the story of each entry they are about (every handling: by
//! whom, in which life, from when to when, with which verdict; for an invariant of yours that
//! names no entry, the entries handled again after an `Ack`, or name them with
//! [`Report::check_entries`]) and the Rust code of the world, to replay it. For fuzzing,
//! [`World::from_bytes`] makes a world of any input.
//!
//! ## Many entries in hand, and an order by key
//!
//! [`World::concurrency`] lets each consumer hold up to n entries in hand
//! ([`Config::concurrency`](pelican::Config::concurrency)): each handling takes its own time
//! and gets its own verdict, and verdicts reach the consumer as handlings finish, each by
//! its id. A crash, a death or an abandon drops every entry in hand, a stop waits for them
//! all, a slow or failing handler is one handling's. [`World::order_by`] orders entries by a
//! field ([`Config::order_by`](pelican::Config::order_by); the entries drawn from the seed
//! carry it, with [`World::keys`] values), and the checks then hold each consumer to
//! [`OrderBy`](pelican::OrderBy)'s promise: never two entries of one key in hand at once
//! ([`Violation::KeyInHandTwice`]), and each key's entries handed out first in the order it
//! read them ([`Violation::OutOfOrder`], which says what the promise leaves out: reclaimed
//! entries, a retried one coming back, what an earlier life left pending, a destroyed
//! group).
//!
//! ## What the kit models, and how
//!
//! - The drivers keep driving while handlers work (like `pelican-smol`), so acks go out
//!   within `ack_delay` and leases are renewed; the kit checks that the entries the core
//!   has in hand are those it handed to the handler, never more than the concurrency.
//! - A [`Fault::ServerRestart`] is a restart from an append-only file written on every
//!   command ([`Sim::restart`](crate::Sim::restart)): the data survives, but the delivery
//!   counts and idle times raised by reads of a consumer's own pending list do not (the
//!   servers never write them), so entries may be delivered more often than
//!   `max_deliveries` says and be reclaimed from a consumer still handling them. Writes lost
//!   to a less frequent `fsync` are not modelled.
//! - A [`Fault::Failover`] promotes a replica that copies the master every
//!   [`World::replica_lag`] ms ([`Sim::failover_with`](crate::Sim::failover_with)), or
//!   not at all while its link is down ([`Fault::ReplicaLinkDown`]): what the master took
//!   since the last copy is lost — acks (their entries come again), deliveries (entries
//!   delivered anew), dead-letter moves (made again), deletions (the entries come back), and
//!   entries the producer added. For the history that survives those never were: they end
//!   [`Fate::Unreplicated`], neither lost nor settled, with their handlings on the old
//!   master still told. Which entries the replica had is known from the replication offset
//!   of each `XADD`, apart from what the promoted data holds, and the check holds every one
//!   of them to be there ([`Violation::ReplicatedLost`]). A producer that confirms its adds
//!   with `WAIT 1` ([`World::confirm_adds`]) has them on the replica: a failover never loses
//!   one ([`Violation::ConfirmedLost`]). The old master's clients are cut off, or, with a
//!   failover's `stale_ms`, left on it as a replica for that long, the consumers' new
//!   connections reaching it too (`-UNBLOCKED`, `-READONLY`, `HELLO` saying `replica`:
//!   pelican waits and tries again). Consumers that wait for their acks to reach the
//!   replica ([`World::ack_wait`]) lose fewer of them; those a `WAIT` could not confirm (the
//!   link down) are counted in [`Report::acks_unreplicated`].
//! - A handler may answer [`Verdict::Commit`](pelican::Verdict::Commit): its writes and the
//!   entry's ack in one fenced step on the server (the simulator runs pelican's commit
//!   script). The entry ends [`Fate::Committed`] when a commit of it was made in the history
//!   that survives ([`EntryReport::commits`], [`Handling::committed`]), and the checks hold
//!   the commits to exactly once: no entry committed twice but after a destroyed group
//!   ([`Violation::CommittedTwice`]), and each key written by commits alone — a stream by
//!   their untrimmed `XADD`s, a counter by their `INCRBY`s — holding exactly what they made
//!   ([`Violation::CommitWrites`]; [`ServerState::written`] has what those keys hold). A
//!   [`Fault::Pause`] makes a zombie (paused past `min_idle`, its entries taken by peers, its
//!   late commits fenced off), a [`Fault::CutAfterCommit`] loses a commit's answer after the
//!   commit was made (sent again, it must write nothing twice).
//! - A handler may also write its output itself, outside any commit, through the simulated
//!   server ([`HandlerCtx::write`], the same [`Writes`](pelican::Writes)): made at once, on
//!   the application's own connection, its verdict reaching the consumer later. The checks
//!   hold each entry's output to once whichever way it was written: an `XADD`, `INCRBY` or
//!   `HINCRBY` to a key by two handlings of one entry (one of them writing itself) is a
//!   [`Violation::WrittenTwice`] — the write-then-ack stage a crash, a zombie or a lost ack
//!   catches, with no invariant of yours — and those keys too must hold exactly what was
//!   written ([`Violation::CommitWrites`]; [`Handling::wrote`] tells each handling's writes).
//! - Duplicates are handlings after one that answered `Ack` (or whose commit was made). Crashes, deaths and abandons
//!   (the process's memory), a destroyed group (its pending list), server restarts (the
//!   counts and idle times), failovers (the last writes) and pauses (a zombie's entries
//!   handled by peers) may cost some
//!   ([`FaultKind::may_duplicate`]); a duplicate no such fault explains is a
//!   [`Violation::UnexplainedDuplicate`].

mod fault;
mod report;
mod rng;
mod run;
mod search;
#[cfg(feature = "proptest")]
pub mod strategy;
mod world;

pub use fault::{Fault, FaultKind};
pub use report::{
    DeadLetter, Duplicates, EntryReport, Failure, Fate, FaultRecord, Handling, Report, ServerState, Violation,
};
pub use run::HandlerCtx;
pub use search::{search, shrink, Found};
pub use world::{NewEntry, World};
