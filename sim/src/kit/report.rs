//! What a run tells: [`Report`] (per entry, per fault, the server at the end), the checks
//! ([`Violation`], [`Failure`]) and the duplicate handlings each fault cost ([`Duplicates`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use pelican::{Source, Verdict, Write};

use super::fault::{Fault, FaultKind};
use super::world::{flavor, World};
use crate::{PendingEntry, Sim, Stored};

/// One time an entry was handed to a handler.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Handling {
    /// The consumer's name.
    pub consumer: String,
    /// The consumer's index.
    pub index: usize,
    /// Which life of its process ([`HandlerCtx::life`](super::HandlerCtx::life)).
    pub life: u32,
    /// When it was handed out (virtual ms): when the handler ran.
    pub at_ms: u64,
    /// Its delivery count as the consumer saw it.
    pub deliveries: u64,
    /// How it reached the consumer.
    pub source: Source,
    /// The verdict: the handler's, or the one a fault imposed.
    pub verdict: Verdict,
    /// False when a fault ([`Fault::FailingHandler`], [`Fault::DeadLetterVerdict`]) gave the
    /// verdict and the handler was not called.
    pub by_handler: bool,
    /// When the verdict reached the consumer; `None` if its process died or abandoned the
    /// entry first (the handler's side effects happened, its verdict was lost).
    pub settled_at_ms: Option<u64>,
    /// The entry's key by the consumer's [`order_by`](pelican::Config::order_by); `None` if
    /// it does not order by key or the entry has no key (a key of its own).
    pub key: Option<Vec<u8>>,
    /// Its verdict was a [`Verdict::Commit`] the server made — its writes and the ack in
    /// one step — in the history that survives (a failover loses those its replica had not
    /// copied).
    pub committed: bool,
    /// The writes its handler made itself, outside any commit
    /// ([`HandlerCtx::write`](super::HandlerCtx::write)), in the history that survives.
    pub wrote: Vec<Write>,
}

impl Handling {
    /// Whether its verdict settled the entry: an `Ack`, or a commit made.
    pub fn settled_it(&self) -> bool {
        self.verdict == Verdict::Ack || self.committed
    }
}

impl fmt::Display for Handling {
    /// `c0 (life 1) 120–150 ms: Ack (new, delivery 1, key k2)`; a verdict that never reached
    /// the consumer shows as `120 ms–never settled`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (life {}) {}", self.consumer, self.life, self.at_ms)?;
        match self.settled_at_ms {
            Some(end) => write!(f, "–{end} ms")?,
            None => f.write_str(" ms–never settled")?,
        }
        let source = match self.source {
            Source::New => "new",
            Source::Pending => "drained",
            Source::Claimed => "reclaimed",
            _ => "delivered",
        };
        match &self.verdict {
            Verdict::Commit(writes) => {
                let made = if self.committed { "committed" } else { "not committed" };
                write!(f, ": Commit of {} writes, {made}", writes.len())?
            }
            verdict => write!(f, ": {verdict:?}")?,
        }
        if !self.wrote.is_empty() {
            let commands: Vec<&str> = self.wrote.iter().map(Write::command).collect();
            write!(f, ", having written {} itself", commands.join(" "))?;
        }
        if !self.by_handler {
            f.write_str(" (a fault's, the handler not called)")?;
        }
        write!(f, " ({source}, delivery {}", self.deliveries)?;
        if let Some(key) = &self.key {
            write!(f, ", key {}", String::from_utf8_lossy(key))?;
        }
        f.write_str(")")
    }
}

/// How an entry ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Fate {
    /// A handler's `Ack` reached a consumer (and nothing is left pending at quiescence).
    Acked,
    /// A handler's [`Verdict::Commit`] was made: its writes and its ack in one step, in the
    /// history that survives.
    Committed,
    /// Moved to the dead-letter stream (a `DeadLetter` verdict, or past `max_deliveries`).
    DeadLettered,
    /// Deleted from the stream by a fault ([`Fault::DeletePending`], [`Fault::Trim`])
    /// before it was settled, the deletion surviving any failover.
    Deleted,
    /// Added to a master that failed over ([`Fault::Failover`]) before its replica had it:
    /// the history that survives never had it. Not lost — nothing confirmed it: a producer
    /// that waits for the replica ([`World::confirm_adds`]) has no entry end so — but gone,
    /// with whatever happened to it on the old master (its handlings are still told: the
    /// handler's side effects happened).
    Unreplicated,
    /// None of those when the run ended: lost, or the run did not settle.
    Unsettled,
}

/// The story of one entry.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct EntryReport {
    /// Its id (`1-0`, `2-0`, … in the order added).
    pub id: String,
    /// Its fields as given.
    pub fields: Vec<(Vec<u8>, Vec<u8>)>,
    /// When it was added (virtual ms).
    pub added_at_ms: u64,
    /// Every handling, in order.
    pub handlings: Vec<Handling>,
    /// How it ended.
    pub fate: Fate,
    /// How many times consumers reported moving it to the dead-letter stream.
    pub dead_letter_moves: u32,
    /// Whether a fault deleted it from the stream ([`Fault::DeletePending`],
    /// [`Fault::Trim`]), settled or not, and no failover brought it back.
    pub deleted: bool,
    /// Whether the producer's `WAIT` said the replica had it ([`World::confirm_adds`]).
    pub confirmed: bool,
    /// How many times a commit of it was made, in the history that survives: once, unless a
    /// destroyed group delivered it anew.
    pub commits: u32,
}

impl EntryReport {
    /// The value of its first field called `name`.
    pub fn field(&self, name: &[u8]) -> Option<&[u8]> {
        self.fields.iter().find(|(n, _)| n == name).map(|(_, v)| &v[..])
    }

    /// Whether some handling answered `Ack`, or committed (its side effects are meant to be
    /// applied once).
    pub fn succeeded(&self) -> bool {
        self.handlings.iter().any(Handling::settled_it)
    }

    /// How many handlings came after the first `Ack` (or commit made): each may apply the
    /// handler's side effects again.
    pub fn duplicates(&self) -> usize {
        self.handlings.iter().position(Handling::settled_it).map_or(0, |i| self.handlings.len() - i - 1)
    }
}

impl fmt::Display for EntryReport {
    /// Its story: id, when added, its fields (cut short), how it ended, and each handling on
    /// a line of its own.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fields: Vec<String> = self
            .fields
            .iter()
            .take(4)
            .map(|(n, v)| {
                let v = &v[..v.len().min(24)];
                format!("{}={}", String::from_utf8_lossy(n), String::from_utf8_lossy(v))
            })
            .collect();
        let more = if self.fields.len() > 4 { " …" } else { "" };
        let fate = match self.fate {
            Fate::Acked => "acked",
            Fate::Committed => "committed",
            Fate::DeadLettered => "dead-lettered",
            Fate::Deleted => "deleted",
            Fate::Unreplicated => "never replicated (gone with a failover)",
            Fate::Unsettled => "unsettled",
        };
        write!(f, "{} ({}{more}), added at {} ms", self.id, fields.join(" "), self.added_at_ms)?;
        if self.confirmed {
            f.write_str(" (confirmed on the replica)")?;
        }
        write!(f, ", {fate}")?;
        if self.deleted && self.fate != Fate::Deleted {
            f.write_str(", deleted")?;
        }
        match self.handlings.len() {
            0 => f.write_str(", never handled"),
            n => {
                write!(f, ", handled {n} time{}:", if n == 1 { "" } else { "s" })?;
                for h in self.handlings.iter().take(MAX_STORY_HANDLINGS) {
                    write!(f, "\n      {h}")?;
                }
                if n > MAX_STORY_HANDLINGS {
                    write!(f, "\n      … and {} more", n - MAX_STORY_HANDLINGS)?;
                }
                Ok(())
            }
        }
    }
}

/// How many handlings an entry's story shows.
const MAX_STORY_HANDLINGS: usize = 12;
/// How many entries' stories a failure keeps.
const MAX_STORIES: usize = 10;
/// How many of them its `Display` shows.
const SHOWN_STORIES: usize = 5;

/// The run's record of one entry added.
pub(crate) struct Record {
    pub(crate) id: String,
    pub(crate) fields: Vec<(Vec<u8>, Vec<u8>)>,
    pub(crate) added_at: u64,
    pub(crate) handlings: Vec<Handling>,
    pub(crate) acked: bool,
    pub(crate) deleted: bool,
    pub(crate) dead_letter_moves: u32,
    /// The master's replication offset right after its `XADD`: the replica has it once its
    /// own offset reaches this.
    pub(crate) offset: u64,
    /// A failover lost it before the replica had it.
    pub(crate) unreplicated: bool,
    /// The producer's `WAIT` said the replica had it.
    pub(crate) confirmed: bool,
    /// How many commits of it the server made (in the history that survives).
    pub(crate) commits: u32,
}

impl From<Record> for EntryReport {
    fn from(r: Record) -> EntryReport {
        let fate = if r.unreplicated {
            Fate::Unreplicated
        } else if r.commits > 0 {
            Fate::Committed
        } else if r.acked {
            Fate::Acked
        } else if r.dead_letter_moves > 0 {
            Fate::DeadLettered
        } else if r.deleted {
            Fate::Deleted
        } else {
            Fate::Unsettled
        };
        EntryReport {
            id: r.id,
            fields: r.fields,
            added_at_ms: r.added_at,
            handlings: r.handlings,
            fate,
            dead_letter_moves: r.dead_letter_moves,
            deleted: r.deleted,
            confirmed: r.confirmed,
            commits: r.commits,
        }
    }
}

/// A fault of the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FaultRecord {
    /// When it happened (virtual ms).
    pub at_ms: u64,
    /// The fault.
    pub fault: Fault,
    /// The consumer it was aimed at (its index, taken modulo the number of consumers).
    pub consumer: Option<usize>,
    /// False if it was skipped (its consumer was not running, nothing was pending, the
    /// server was down).
    pub applied: bool,
}

/// An entry of the dead-letter stream.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadLetter {
    /// Its id in the dead-letter stream.
    pub id: String,
    /// The id it had in the consumed stream (`pelican-id`).
    pub origin: String,
    /// Why it was moved (`pelican-reason`: `max-deliveries` or `verdict`).
    pub reason: String,
    /// Its delivery count when moved (`pelican-deliveries`).
    pub deliveries: u64,
    /// All its fields: the original ones, then pelican's.
    pub fields: Vec<(Vec<u8>, Vec<u8>)>,
}

/// What the server holds when the run ends.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerState {
    /// The ids left in the stream.
    pub stream: Vec<String>,
    /// The group's pending entries (empty if the group is gone).
    pub pending: Vec<PendingEntry>,
    /// Whether the group exists.
    pub group_exists: bool,
    /// The group's consumers, by name.
    pub consumers: Vec<String>,
    /// The dead-letter stream's entries (none without a dead-letter stream).
    pub dead_letters: Vec<DeadLetter>,
    /// What the keys the handlers' commits name ([`Verdict::Commit`]) or their own writes
    /// wrote ([`HandlerCtx::write`](super::HandlerCtx::write)) hold, by key (those that hold
    /// nothing left out): the output of a stage.
    pub written: BTreeMap<Vec<u8>, Stored>,
}

/// Duplicate handlings (handlings of an entry after one that answered `Ack`), and the
/// faults they are put down to: for each, the latest fault before it that can cost
/// duplicates ([`FaultKind::may_duplicate`]) aimed at the consumer of an earlier `Ack`
/// handling after that handling ran, or at the whole group (a destroyed group, a server
/// restart) after the entry was added.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Duplicates {
    /// How many.
    pub total: u64,
    /// How many each kind of fault explains.
    pub by_fault: BTreeMap<FaultKind, u64>,
    /// How many no fault explains: the consumer handled an entry twice on its own.
    pub unexplained: u64,
}

/// Something a run did that it must not: [`Report::check`] lists them.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Violation {
    /// The entry was never acked, moved to the dead-letter stream or deleted (and no failover
    /// took it with the writes its replica never had: [`Fate::Unreplicated`]).
    Lost {
        /// Its id.
        id: String,
    },
    /// Entries were still pending when the run ended.
    PendingLeft {
        /// Their ids (the first 20).
        ids: Vec<String>,
    },
    /// The run had not settled by its deadline.
    NoQuiescence {
        /// When it gave up (virtual ms).
        at_ms: u64,
    },
    /// A consumer sent `XACK` for an entry its handler had not answered `Ack` for.
    AckWithoutVerdict {
        /// The consumer.
        consumer: String,
        /// The entry.
        id: String,
        /// When (virtual ms).
        at_ms: u64,
    },
    /// An entry was handed out with more deliveries than `max_deliveries`.
    OverDelivered {
        /// The entry.
        id: String,
        /// Its delivery count.
        deliveries: u64,
        /// The cap.
        max: u64,
    },
    /// An entry was reported moved to the dead-letter stream twice (with no destroyed group
    /// to deliver it anew).
    DeadLetteredTwice {
        /// The entry.
        id: String,
    },
    /// The dead-letter stream does not hold exactly the moves reported, each with the
    /// entry's fields and its origin.
    DeadLetterStream {
        /// What differs.
        detail: String,
    },
    /// An entry given a retry that waits ([`Verdict::RetryAfter`], or `Retry` under
    /// [`OnRetry::Backoff`](pelican::OnRetry::Backoff), the default: at least half the
    /// backoff's ceiling for its deliveries) was handed out again before its wait was over,
    /// with no fault to explain it: a crash, a death or an abandon of the consumer before
    /// its park was made, a stop or a pause of one re-parking a wait longer than `min_idle`,
    /// a failover that lost the park, a destroyed group.
    RetriedEarly {
        /// The entry.
        id: String,
        /// The consumer that handed it out again.
        consumer: String,
        /// When (virtual ms).
        at_ms: u64,
        /// When its wait was over (virtual ms).
        due_ms: u64,
    },
    /// An entry was handled again after an `Ack` with no fault to explain it.
    UnexplainedDuplicate {
        /// The entry.
        id: String,
        /// The consumer that handled it again.
        consumer: String,
        /// When (virtual ms).
        at_ms: u64,
    },
    /// A consumer failed for good.
    Fatal {
        /// The consumer.
        consumer: String,
        /// The error.
        error: String,
        /// When (virtual ms).
        at_ms: u64,
    },
    /// A consumer broke the driving contract: more entries in hand than its concurrency, an
    /// entry after its stop, a stop with entries in hand or unasked, an entry never added, a
    /// settle refused, entries in hand other than those the kit handed to the handler.
    Contract {
        /// The consumer.
        consumer: String,
        /// When (virtual ms).
        at_ms: u64,
        /// What it did.
        what: String,
    },
    /// A consumer kept doing things at one instant without end.
    Livelock {
        /// The consumer.
        consumer: String,
        /// When (virtual ms).
        at_ms: u64,
    },
    /// The world could not be set up or played as asked (a refused configuration, a
    /// refused `XADD`).
    Kit {
        /// What went wrong.
        detail: String,
    },
    /// A consumer ordering by key ([`Config::order_by`](pelican::Config::order_by)) handed
    /// out an entry while another entry of its key was in hand.
    KeyInHandTwice {
        /// The consumer.
        consumer: String,
        /// The key (lossy UTF-8).
        key: String,
        /// The entry handed out.
        id: String,
        /// The entry of the same key in hand.
        in_hand: String,
        /// When (virtual ms).
        at_ms: u64,
    },
    /// A consumer ordering by key first handed out an entry, in one life of its process,
    /// after a later entry of the same key, though it read both as new entries (`XREADGROUP
    /// … >`, which reads in id order) in that life: [`OrderBy`](pelican::OrderBy) promises
    /// each key's entries in the order read. Only such entries are held to it (the simulated
    /// server tells how each reached its consumer, [`Sim::origin`](crate::Sim::origin)): not
    /// one reclaimed from a peer, handled in the reclaimer's own order however it comes (a
    /// reclaim, or a drain after a reclaim's reply was too big to keep); not one an earlier
    /// life left pending (a restart drains those first); not reads on either side of a
    /// destroyed group (which delivers the stream anew), nor an entry held unacked across
    /// one (read from both groups, either copy may be handed out). Only first handings
    /// count: `Retry`
    /// frees the key, and the retried entry comes back after later ones.
    OutOfOrder {
        /// The consumer.
        consumer: String,
        /// The life of its process.
        life: u32,
        /// The key (lossy UTF-8).
        key: String,
        /// The entry handed out late.
        id: String,
        /// The later entry of its key handed out before it.
        after: String,
        /// When (virtual ms).
        at_ms: u64,
    },
    /// An entry the replica had (by the replication offset of its `XADD`) was missing after
    /// a failover, though no fault deleted it and it was not settled: a promotion may lose
    /// only what the replica had not copied.
    ReplicatedLost {
        /// The entry.
        id: String,
    },
    /// An entry the producer's `WAIT 1` confirmed ([`World::confirm_adds`]) was lost in a
    /// failover.
    ConfirmedLost {
        /// The entry.
        id: String,
    },
    /// An entry was committed ([`Verdict::Commit`]) more than once, its writes made each
    /// time, though no destroyed group delivered it anew after its first commit.
    CommittedTwice {
        /// The entry.
        id: String,
        /// How many commits of it were made.
        commits: u32,
    },
    /// An entry's output — what its handlings wrote to a key with `XADD`, `INCRBY` or
    /// `HINCRBY`, writes that add again each time they are made — was written by more than
    /// one handling, in the history that survives, though no destroyed group delivered it
    /// anew after the first: a handler that writes its output itself
    /// ([`HandlerCtx::write`](super::HandlerCtx::write)) and then acks, handled again after
    /// a crash, a pause or a lost ack between the two. (Commits alone are held to once by
    /// [`Violation::CommittedTwice`].) `SET`, `HSET` and `DEL` make the same again, and are
    /// not counted.
    WrittenTwice {
        /// The entry.
        id: String,
        /// The key (lossy UTF-8).
        key: String,
        /// How many handlings wrote it.
        handlings: u32,
    },
    /// A key the commits (and the handlers' own writes,
    /// [`HandlerCtx::write`](super::HandlerCtx::write)) wrote does not hold what they made,
    /// once each: a stream written by `XADD`s alone (untrimmed) holds exactly their entries,
    /// a counter written by `INCRBY`s alone their sum, a hash written by `HINCRBY`s alone
    /// each field's sum.
    CommitWrites {
        /// The key (lossy UTF-8).
        key: String,
        /// What differs.
        detail: String,
    },
    /// Your invariant ([`Report::check_with`]) does not hold.
    Invariant(String),
    /// Your invariant on one entry ([`Report::check_entries`]) does not hold.
    EntryInvariant {
        /// The entry.
        id: String,
        /// What your invariant said.
        text: String,
    },
}

impl Violation {
    /// The ids of the entries it is about (none for a violation of the whole run).
    pub fn entry_ids(&self) -> Vec<&str> {
        match self {
            Violation::Lost { id }
            | Violation::AckWithoutVerdict { id, .. }
            | Violation::OverDelivered { id, .. }
            | Violation::DeadLetteredTwice { id }
            | Violation::UnexplainedDuplicate { id, .. }
            | Violation::RetriedEarly { id, .. }
            | Violation::ReplicatedLost { id }
            | Violation::ConfirmedLost { id }
            | Violation::CommittedTwice { id, .. }
            | Violation::WrittenTwice { id, .. }
            | Violation::EntryInvariant { id, .. } => vec![id],
            Violation::KeyInHandTwice { id, in_hand, .. } => vec![id, in_hand],
            Violation::OutOfOrder { id, after, .. } => vec![id, after],
            Violation::PendingLeft { ids } => ids.iter().map(String::as_str).collect(),
            Violation::NoQuiescence { .. }
            | Violation::DeadLetterStream { .. }
            | Violation::Fatal { .. }
            | Violation::Contract { .. }
            | Violation::Livelock { .. }
            | Violation::Kit { .. }
            | Violation::CommitWrites { .. }
            | Violation::Invariant(_) => Vec::new(),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Lost { id } => write!(f, "{id} was lost: never acked, dead-lettered or deleted"),
            Violation::PendingLeft { ids } => write!(f, "still pending at the end: {}", ids.join(", ")),
            Violation::NoQuiescence { at_ms } => write!(f, "not settled by {at_ms} ms"),
            Violation::AckWithoutVerdict { consumer, id, at_ms } => {
                write!(f, "{consumer} sent XACK {id} at {at_ms} ms without an Ack verdict")
            }
            Violation::OverDelivered { id, deliveries, max } => {
                write!(f, "{id} handed out after {deliveries} deliveries (max {max})")
            }
            Violation::DeadLetteredTwice { id } => write!(f, "{id} moved to the dead-letter stream twice"),
            Violation::DeadLetterStream { detail } => write!(f, "the dead-letter stream: {detail}"),
            Violation::UnexplainedDuplicate { id, consumer, at_ms } => {
                write!(
                    f,
                    "{consumer} handled {id} again at {at_ms} ms, after an Ack, with no fault to explain it"
                )
            }
            Violation::RetriedEarly { id, consumer, at_ms, due_ms } => write!(
                f,
                "{consumer} handled {id} again at {at_ms} ms, before its retry was due at {due_ms} ms, \
                 with no fault to explain it"
            ),
            Violation::Fatal { consumer, error, at_ms } => {
                write!(f, "{consumer} failed for good at {at_ms} ms: {error}")
            }
            Violation::Contract { consumer, at_ms, what } => write!(f, "{consumer} {what} at {at_ms} ms"),
            Violation::Livelock { consumer, at_ms } => write!(f, "{consumer} livelocked at {at_ms} ms"),
            Violation::Kit { detail } => write!(f, "the world could not be played: {detail}"),
            Violation::ReplicatedLost { id } => {
                write!(f, "{id} was on the replica, yet a failover lost it")
            }
            Violation::ConfirmedLost { id } => {
                write!(f, "{id} was confirmed on the replica (WAIT 1), yet a failover lost it")
            }
            Violation::KeyInHandTwice { consumer, key, id, in_hand, at_ms } => {
                write!(
                    f,
                    "{consumer} handed out {id} at {at_ms} ms with {in_hand} of the same key {key} in hand"
                )
            }
            Violation::OutOfOrder { consumer, life, key, id, after, at_ms } => write!(
                f,
                "{consumer} (life {life}) first handed out {id} at {at_ms} ms after {after} of the same key \
                 {key}, though it read {id} first (both as new entries)"
            ),
            Violation::CommittedTwice { id, commits } => {
                write!(f, "{id} was committed {commits} times (its writes made each time)")
            }
            Violation::WrittenTwice { id, key, handlings } => write!(
                f,
                "{id}'s output to {key} was written by {handlings} handlings: written, then acked, \
                 is not one step (Verdict::Commit makes the writes with the ack)"
            ),
            Violation::CommitWrites { key, detail } => write!(f, "{key}, written by commits: {detail}"),
            Violation::Invariant(text) => write!(f, "invariant: {text}"),
            Violation::EntryInvariant { id, text } => write!(f, "invariant on {id}: {text}"),
        }
    }
}

/// A world that failed its checks: the violations, the stories of the entries they are
/// about, and the world to replay (its [`Display`](fmt::Display) prints the seed, the
/// violations, those stories and the code of the world).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Failure {
    /// The world, with drawn entries and faults written out: it fails the same way again.
    pub world: Box<World>,
    /// What went wrong.
    pub violations: Vec<Violation>,
    /// The stories of the entries the violations are about (up to 10): those they name
    /// ([`Violation::entry_ids`]); for a broken [`Violation::Invariant`], which names none,
    /// the entries handled again after an `Ack` (whose side effects may have been applied
    /// twice), if no violation names an entry.
    pub entries: Vec<EntryReport>,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.violations.len();
        writeln!(f, "seed {}: {n} violation{}", self.world.seed, if n == 1 { "" } else { "s" })?;
        for v in self.violations.iter().take(20) {
            writeln!(f, "  - {v}")?;
        }
        if n > 20 {
            writeln!(f, "  - … and {} more", n - 20)?;
        }
        if !self.entries.is_empty() {
            let named = self.violations.iter().any(|v| !v.entry_ids().is_empty());
            f.write_str(if named { "the entries:\n" } else { "the entries handled again after an Ack:\n" })?;
            for e in self.entries.iter().take(SHOWN_STORIES) {
                writeln!(f, "  - {e}")?;
            }
            if self.entries.len() > SHOWN_STORIES {
                writeln!(f, "  - … and {} more (Failure::entries)", self.entries.len() - SHOWN_STORIES)?;
            }
        }
        write!(f, "replay:\n{}", self.world)
    }
}

impl Failure {
    /// A failure of these violations in the run `report` tells, with the stories of the
    /// entries they are about.
    fn of<S>(report: &Report<S>, violations: Vec<Violation>) -> Failure {
        let mut entries: Vec<EntryReport> = Vec::new();
        let mut named = false;
        for id in violations.iter().flat_map(Violation::entry_ids) {
            named = true;
            if entries.len() < MAX_STORIES && !entries.iter().any(|e| e.id == id) {
                entries.extend(report.entry(id).cloned());
            }
        }
        if !named && violations.iter().any(|v| matches!(v, Violation::Invariant(_))) {
            let twice = report.entries.iter().filter(|e| e.duplicates() > 0);
            entries.extend(twice.take(MAX_STORIES).cloned());
        }
        Failure { world: Box::new(report.world.clone()), violations, entries }
    }
}

impl std::error::Error for Failure {}

/// The outcome of [`World::run`].
#[derive(Debug)]
pub struct Report<S> {
    /// The application's state, as the handlers left it.
    pub state: S,
    /// The world that ran, with the entries and random faults it drew written out: it runs
    /// the same way again.
    pub world: World,
    /// Every entry added, in id order.
    pub entries: Vec<EntryReport>,
    /// Every fault, in the order it happened.
    pub faults: Vec<FaultRecord>,
    /// What the server holds at the end.
    pub server: ServerState,
    /// How many notices of each kind the consumers gave (`connected`, `reconnected`,
    /// `connect-failed`, `connection-lost`, `not-master`, `acks-unreplicated`, `reclaimed`,
    /// `lease-lost`, `lease-lost-in-hand`, `dead-lettered`, `read-shrunk-slow-handler`,
    /// `read-shrunk-big-entries`, `health`).
    pub notices: BTreeMap<&'static str, u64>,
    /// How many acks (and dead-letter moves) the consumers' `WAIT`s said had not reached the
    /// replica in time ([`Stats::acks_unreplicated`](pelican::Stats::acks_unreplicated),
    /// over every consumer and life; 0 without [`World::ack_wait`]).
    pub acks_unreplicated: u64,
    /// When the run ended (virtual ms).
    pub ended_at_ms: u64,
    /// Whether it settled: every entry acked, moved, deleted or gone with a failover,
    /// nothing pending, every consumer idle.
    pub quiescent: bool,
    /// The story of the run, if [`World::trace`] asked for it.
    pub trace: Vec<String>,
    /// Every violation found (what [`check`](Report::check) reports).
    pub violations: Vec<Violation>,
}

impl<S> Report<S> {
    /// The checks pelican promises: nothing lost (every entry acked, moved to the
    /// dead-letter stream, deleted, or never replicated before a failover), nothing that the
    /// replica had or the producer confirmed lost in a failover, nothing left pending, no `XACK` without an `Ack`
    /// verdict, no entry handed out past `max_deliveries` or moved twice, the dead-letter
    /// stream as reported, no duplicate handling that a fault does not explain, no consumer
    /// failed, the driving contract kept (no more entries in hand than the concurrency), and,
    /// for consumers ordering by key, never two entries of one key in hand at once and each
    /// key's entries first handed out in id order as [`OrderBy`](pelican::OrderBy) promises
    /// ([`Violation::OutOfOrder`] says what explains a departure).
    pub fn check(&self) -> Result<(), Failure> {
        self.check_with(|_| Ok(()))
    }

    /// [`check`](Report::check), and your invariant over the application's state (e.g. "the
    /// balance is the sum of the amounts of the entries that succeeded": the idempotency
    /// check).
    pub fn check_with(&self, invariant: impl FnOnce(&S) -> Result<(), String>) -> Result<(), Failure> {
        let mut violations = self.violations.clone();
        if let Err(text) = invariant(&self.state) {
            violations.push(Violation::Invariant(text));
        }
        if violations.is_empty() {
            Ok(())
        } else {
            Err(Failure::of(self, violations))
        }
    }

    /// [`check`](Report::check), and your invariant on each entry, given the application's
    /// state and the entry's story (e.g. "an entry that succeeded was applied exactly
    /// once"): a failure names the entries that broke it ([`Violation::EntryInvariant`]) and
    /// tells their stories.
    pub fn check_entries(
        &self,
        mut invariant: impl FnMut(&S, &EntryReport) -> Result<(), String>,
    ) -> Result<(), Failure> {
        let mut violations = self.violations.clone();
        for entry in &self.entries {
            if let Err(text) = invariant(&self.state, entry) {
                violations.push(Violation::EntryInvariant { id: entry.id.clone(), text });
            }
        }
        if violations.is_empty() {
            Ok(())
        } else {
            Err(Failure::of(self, violations))
        }
    }

    /// The entry with this id.
    pub fn entry(&self, id: &str) -> Option<&EntryReport> {
        self.entries.iter().find(|e| e.id == id)
    }

    /// The duplicate handlings, and the faults they are put down to.
    pub fn duplicates(&self) -> Duplicates {
        let mut out = Duplicates::default();
        for entry in &self.entries {
            for (_, cause) in duplicates_of(entry, &self.faults) {
                out.total += 1;
                match cause {
                    Some(kind) => *out.by_fault.entry(kind).or_default() += 1,
                    None => out.unexplained += 1,
                }
            }
        }
        out
    }

    /// How many faults of each kind were applied.
    pub fn faults_applied(&self) -> BTreeMap<FaultKind, u64> {
        let mut out = BTreeMap::new();
        for f in self.faults.iter().filter(|f| f.applied) {
            *out.entry(f.fault.kind()).or_default() += 1;
        }
        out
    }
}

impl<S> fmt::Display for Report<S> {
    /// A one-line summary.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = |fate| self.entries.iter().filter(|e| e.fate == fate).count();
        let applied = self.faults.iter().filter(|r| r.applied).count();
        write!(
            f,
            "seed {}, {}, {} consumers{}: {} entries ({} acked, {}{} dead-lettered, {} deleted, {} unreplicated, \
             {} unsettled), {} faults ({applied} applied), {} duplicates, {} at {} ms, {} violations",
            self.world.seed,
            flavor(&self.world.server),
            self.world.consumers,
            match (self.world.concurrency, &self.world.order_by) {
                (1, None) => String::new(),
                (n, None) => format!(" of concurrency {n}"),
                (n, Some(field)) => format!(" of concurrency {n} ordered by {}", String::from_utf8_lossy(field)),
            },
            self.entries.len(),
            count(Fate::Acked),
            match count(Fate::Committed) {
                0 => String::new(),
                n => format!("{n} committed, "),
            },
            count(Fate::DeadLettered),
            count(Fate::Deleted),
            count(Fate::Unreplicated),
            count(Fate::Unsettled),
            self.faults.len(),
            self.duplicates().total,
            if self.quiescent { "settled" } else { "unsettled" },
            self.ended_at_ms,
            self.violations.len(),
        )
    }
}

/// Each duplicate handling of `entry` (its index) and the fault kind it is put down to: the
/// latest fault before it that may cost duplicates, aimed at the consumer of an `Ack`
/// handling before it (after that handling ran), a pause of its own consumer (a zombie), or
/// at the whole group after the entry was
/// added (after a destroyed group, consumers may hand out the entry as read from any of the
/// group's incarnations: when they read it cannot be told from the handlings).
fn duplicates_of(entry: &EntryReport, faults: &[FaultRecord]) -> Vec<(usize, Option<FaultKind>)> {
    let mut out = Vec::new();
    let mut acks: Vec<&Handling> = Vec::new();
    for (i, h) in entry.handlings.iter().enumerate() {
        if !acks.is_empty() {
            let explains = |f: &&FaultRecord| {
                f.applied
                    && f.fault.kind().may_duplicate()
                    && f.at_ms <= h.at_ms
                    && match f.consumer {
                        // A zombie hands out, when it resumes, what the server delivered to
                        // it before or while it stood still: a peer may have taken it since.
                        Some(c) if f.fault.kind() == FaultKind::Pause && c == h.index => true,
                        Some(c) => acks.iter().any(|p| p.index == c && f.at_ms >= p.at_ms),
                        None => f.at_ms >= entry.added_at_ms,
                    }
            };
            let cause = faults.iter().rev().find(explains).map(|f| f.fault.kind());
            out.push((i, cause));
        }
        if h.settled_it() {
            acks.push(h);
        }
    }
    out
}

/// Up to `max` bytes as text, for traces.
pub(crate) fn text(bytes: &[u8], max: usize) -> String {
    let shown = &bytes[..bytes.len().min(max)];
    let more = if bytes.len() > max { "…" } else { "" };
    format!("{:?}{more}", String::from_utf8_lossy(shown))
}

/// What the server holds (`entries`: for the keys their commits name).
pub(crate) fn server_state(
    sim: &Sim,
    stream: &[u8],
    group: &[u8],
    dead_letter: Option<&[u8]>,
    entries: &[EntryReport],
) -> ServerState {
    let written = entries
        .iter()
        .flat_map(|e| &e.handlings)
        .flat_map(|h| commit_writes(h).chain(&h.wrote))
        .map(|w| w.key().to_vec())
        .collect::<BTreeSet<Vec<u8>>>()
        .into_iter()
        .filter_map(|key| Some((key.clone(), sim.value(&key)?)))
        .collect();
    let lossy = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let field = |fields: &[(Vec<u8>, Vec<u8>)], name: &[u8]| {
        fields.iter().rev().find(|(n, _)| n == name).map(|(_, v)| lossy(v)).unwrap_or_default()
    };
    let dead_letters = dead_letter
        .map(|key| sim.entries(key))
        .unwrap_or_default()
        .into_iter()
        .map(|(id, fields)| DeadLetter {
            id: id.to_string(),
            origin: field(&fields, b"pelican-id"),
            reason: field(&fields, b"pelican-reason"),
            deliveries: field(&fields, b"pelican-deliveries").parse().unwrap_or(0),
            fields,
        })
        .collect();
    ServerState {
        stream: sim.stream_ids(stream).iter().map(|id| id.to_string()).collect(),
        pending: sim.pending(stream, group).unwrap_or_default(),
        group_exists: sim.group_exists(stream, group),
        consumers: sim.consumers(stream, group).iter().map(|c| lossy(c)).collect(),
        dead_letters,
        written,
    }
}

/// The writes of a handling's [`Verdict::Commit`], made or not (none for another verdict).
fn commit_writes(h: &Handling) -> std::slice::Iter<'_, Write> {
    match &h.verdict {
        Verdict::Commit(writes) => writes.iter(),
        _ => [].iter(),
    }
}

/// Whether making `write` again adds again (`XADD`, `INCRBY`, `HINCRBY`), rather than making
/// the same again: what an entry's output is held to once by.
fn adds_again(write: &Write) -> bool {
    matches!(write, Write::Add { .. } | Write::IncrBy { .. } | Write::HashIncrBy { .. })
}

/// What the commits and the handlers' own writes made to one key, to hold it to.
struct Made {
    /// The field lists of their `XADD`s.
    adds: Vec<Vec<(Vec<u8>, Vec<u8>)>>,
    /// The sum of their `INCRBY`s.
    sum: i128,
    /// The sums of their `HINCRBY`s, by field.
    fields: BTreeMap<Vec<u8>, i128>,
    /// Only untrimmed `XADD`s, only `INCRBY`s or only `HINCRBY`s wrote it (else it is not
    /// checked).
    only_adds: bool,
    only_incr: bool,
    only_hincr: bool,
}

/// The checks of what handlers wrote: no entry committed twice but for a destroyed group
/// after its first commit; no entry's output written by two handlings, one writing it
/// itself, but for a destroyed group after the first; each key written by commits and the
/// handlers' own writes alone — a stream by untrimmed `XADD`s, a counter by `INCRBY`s, a
/// hash by `HINCRBY`s — holds what they made, each once.
fn commit_checks(
    entries: &[EntryReport],
    server: &ServerState,
    faults: &[FaultRecord],
    stream: &[u8],
    dead_letter: Option<&[u8]>,
    violations: &mut Vec<Violation>,
) {
    let anew_since = |t: u64| {
        faults.iter().any(|f| f.applied && f.fault.kind() == FaultKind::DestroyGroup && f.at_ms >= t)
    };
    for e in entries.iter().filter(|e| e.commits > 1) {
        let first = e.handlings.iter().filter(|h| h.committed).filter_map(|h| h.settled_at_ms).min();
        if !first.map_or(true, anew_since) {
            violations.push(Violation::CommittedTwice { id: e.id.clone(), commits: e.commits });
        }
    }
    for e in entries {
        // Per key: the handlings whose output to it the surviving history holds, and whether
        // one of them wrote it itself.
        let mut by_key: BTreeMap<&[u8], (Vec<&Handling>, bool)> = BTreeMap::new();
        for h in &e.handlings {
            let committed = commit_writes(h).filter(|_| h.committed).map(|w| (w, false));
            let mut keys: BTreeMap<&[u8], bool> = BTreeMap::new();
            for (w, itself) in
                committed.chain(h.wrote.iter().map(|w| (w, true))).filter(|(w, _)| adds_again(w))
            {
                *keys.entry(&w.key()[..]).or_default() |= itself;
            }
            for (key, itself) in keys {
                let (handlings, any_itself) = by_key.entry(key).or_default();
                handlings.push(h);
                *any_itself |= itself;
            }
        }
        for (key, (handlings, itself)) in by_key {
            if handlings.len() > 1 && itself && !anew_since(handlings[0].at_ms) {
                violations.push(Violation::WrittenTwice {
                    id: e.id.clone(),
                    key: String::from_utf8_lossy(key).into_owned(),
                    handlings: handlings.len() as u32,
                });
            }
        }
    }
    let mut keys: BTreeMap<Vec<u8>, Made> = BTreeMap::new();
    for h in entries.iter().flat_map(|e| &e.handlings) {
        let named = commit_writes(h).map(|w| (w, h.committed));
        for (w, made_it) in named.chain(h.wrote.iter().map(|w| (w, true))) {
            let made = keys.entry(w.key().to_vec()).or_insert(Made {
                adds: Vec::new(),
                sum: 0,
                fields: BTreeMap::new(),
                only_adds: true,
                only_incr: true,
                only_hincr: true,
            });
            match w {
                Write::Add { fields, trim, .. } => {
                    (made.only_incr, made.only_hincr) = (false, false);
                    made.only_adds &= trim.is_none();
                    if made_it {
                        made.adds.push(fields.iter().map(|(f, v)| (f.to_vec(), v.to_vec())).collect());
                    }
                }
                Write::IncrBy { by, .. } => {
                    (made.only_adds, made.only_hincr) = (false, false);
                    if made_it {
                        made.sum += i128::from(*by);
                    }
                }
                Write::HashIncrBy { field, by, .. } => {
                    (made.only_adds, made.only_incr) = (false, false);
                    if made_it {
                        *made.fields.entry(field.to_vec()).or_default() += i128::from(*by);
                    }
                }
                _ => (made.only_adds, made.only_incr, made.only_hincr) = (false, false, false),
            }
        }
    }
    for (key, made) in keys {
        if key == stream || dead_letter == Some(&key[..]) {
            continue;
        }
        let held = server.written.get(&key);
        let name = String::from_utf8_lossy(&key).into_owned();
        if made.only_adds {
            let mut want = made.adds;
            let mut got: Vec<Vec<(Vec<u8>, Vec<u8>)>> = match held {
                None => Vec::new(),
                Some(Stored::Stream(entries)) => entries.iter().map(|(_, f)| f.clone()).collect(),
                Some(other) => {
                    let detail = format!("holds {other:?}, not a stream");
                    violations.push(Violation::CommitWrites { key: name, detail });
                    continue;
                }
            };
            want.sort();
            got.sort();
            if want != got {
                let (w, g) = (want.len(), got.len());
                let twice = got.windows(2).filter(|p| p[0] == p[1]).count();
                let detail = format!("holds {g} entries, the commits made {w} ({twice} repeated)");
                violations.push(Violation::CommitWrites { key: name, detail });
            }
        } else if made.only_incr {
            let got = match held {
                None => Some(0),
                Some(Stored::String(text)) => std::str::from_utf8(text).ok().and_then(|t| t.parse().ok()),
                Some(_) => None,
            };
            if got != Some(made.sum) {
                let detail = format!("holds {got:?}, the commits added {}", made.sum);
                violations.push(Violation::CommitWrites { key: name, detail });
            }
        } else if made.only_hincr {
            let number = |v: &[u8]| std::str::from_utf8(v).ok().and_then(|t| t.parse::<i128>().ok());
            let got: Option<BTreeMap<Vec<u8>, i128>> = match held {
                None => Some(BTreeMap::new()),
                Some(Stored::Hash(fields)) => {
                    fields.iter().map(|(f, v)| Some((f.clone(), number(v)?))).collect()
                }
                Some(_) => None,
            };
            // A field the increments left at 0 may be there or not.
            let want: BTreeMap<Vec<u8>, i128> = made.fields.into_iter().filter(|(_, n)| *n != 0).collect();
            let got = got.map(|g| g.into_iter().filter(|(_, n)| *n != 0).collect::<BTreeMap<_, _>>());
            if got.as_ref() != Some(&want) {
                let show = |m: &BTreeMap<Vec<u8>, i128>| {
                    m.iter()
                        .map(|(f, n)| format!("{}={n}", String::from_utf8_lossy(f)))
                        .collect::<Vec<_>>()
                        .join(" ")
                };
                let held = got.as_ref().map_or_else(|| format!("{held:?}"), show);
                let detail = format!("holds {held}, the commits added {}", show(&want));
                violations.push(Violation::CommitWrites { key: name, detail });
            }
        }
    }
}

/// The check of retries that wait: each handed out again (reclaimed or drained, not
/// delivered anew as a new entry) no earlier than asked (for a backoff's `Retry`, than the
/// least it may have drawn: half its ceiling), unless a fault between the handling and the
/// next may explain it ([`Violation::RetriedEarly`]).
pub(crate) fn retry_checks(
    entries: &[EntryReport],
    faults: &[FaultRecord],
    on_retry: pelican::OnRetry,
    min_idle_ms: u64,
    violations: &mut Vec<Violation>,
) {
    let min_idle = std::time::Duration::from_millis(min_idle_ms);
    // As for a duplicate: a fault of the server's since the entry was added (a failover
    // that lost the park, or delivered the entry twice; a restart; a destroyed group), or one
    // of either consumer's from the handling on (a crash before the park was made, a stop or
    // a pause that ended the parks of a long wait, a zombie's read).
    let explains = |e: &EntryReport, h: &Handling, next: &Handling| {
        faults.iter().any(|f| {
            let kind = f.fault.kind();
            f.applied
                && f.at_ms <= next.at_ms
                && (kind.may_duplicate() || kind == FaultKind::Stop)
                && match f.consumer {
                    // A zombie hands out, when it resumes, what the server gave it before or
                    // while it stood still: perhaps before the handling whose wait it breaks.
                    Some(c) if kind == FaultKind::Pause && c == next.index => true,
                    Some(c) => (c == h.index || c == next.index) && f.at_ms >= h.at_ms,
                    None => f.at_ms >= e.added_at_ms,
                }
        })
    };
    for e in entries {
        for (h, next) in e.handlings.iter().zip(e.handlings.iter().skip(1)) {
            let Some(settled) = h.settled_at_ms else { continue };
            let wait = match (&h.verdict, on_retry) {
                (Verdict::RetryAfter(d), _) => *d,
                (Verdict::Retry, pelican::OnRetry::Backoff(b)) => b.ceiling(h.deliveries, min_idle) / 2,
                _ => continue,
            };
            let due = settled.saturating_add(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
            // Delivered anew as a new entry (a destroyed group, a failover that lost the
            // delivery): not the retry coming back. A fault from the handling's start on
            // may have lost the park.
            if next.at_ms < due && next.source != Source::New && !explains(e, h, next) {
                violations.push(Violation::RetriedEarly {
                    id: e.id.clone(),
                    consumer: next.consumer.clone(),
                    at_ms: next.at_ms,
                    due_ms: due,
                });
            }
        }
    }
}

/// The checks made once the run is over, added to those found while it ran.
#[allow(clippy::too_many_arguments)]
pub(crate) fn final_checks(
    entries: &[EntryReport],
    server: &ServerState,
    faults: &[FaultRecord],
    quiescent: bool,
    now: u64,
    stream: &[u8],
    dead_letter: Option<&[u8]>,
    violations: &mut Vec<Violation>,
) {
    if violations.iter().any(|v| matches!(v, Violation::Kit { .. })) {
        return; // the world was not played as asked: the rest would only echo that
    }
    commit_checks(entries, server, faults, stream, dead_letter, violations);
    if !quiescent {
        if !violations.iter().any(|v| matches!(v, Violation::Livelock { .. })) {
            violations.push(Violation::NoQuiescence { at_ms: now });
        }
        for e in entries.iter().filter(|e| e.fate == Fate::Unsettled) {
            violations.push(Violation::Lost { id: e.id.clone() });
        }
        if !server.pending.is_empty() {
            let ids = server.pending.iter().take(20).map(|p| p.id.to_string()).collect();
            violations.push(Violation::PendingLeft { ids });
        }
    }
    // The dead-letter stream holds exactly the moves reported, each with the entry's fields
    // and its origin (a group created again delivers entries anew, and may move them again).
    let mut in_stream: BTreeMap<&str, u32> = BTreeMap::new();
    for d in &server.dead_letters {
        *in_stream.entry(&d.origin).or_default() += 1;
        let Some(e) = entries.iter().find(|e| e.id == d.origin) else {
            let detail = format!("{} holds {:?}, which was never added", d.id, d.origin);
            violations.push(Violation::DeadLetterStream { detail });
            continue;
        };
        let original: Vec<(Vec<u8>, Vec<u8>)> =
            if e.fields.is_empty() { vec![(b"_".to_vec(), Vec::new())] } else { e.fields.clone() };
        let origin_ok = d.fields.iter().any(|(n, v)| n == b"pelican-stream" && v == stream);
        if !d.fields.starts_with(&original) || !origin_ok {
            let detail = format!("{} (for {}) lacks the entry's fields or its origin", d.id, e.id);
            violations.push(Violation::DeadLetterStream { detail });
        }
    }
    let reported: BTreeMap<&str, u32> = entries
        .iter()
        .filter(|e| e.dead_letter_moves > 0)
        .map(|e| (e.id.as_str(), e.dead_letter_moves))
        .collect();
    // A failover loses the moves the replica had not copied (the entries come back, and
    // may be moved again): the stream then holds at most the moves reported.
    let failed_over = faults.iter().any(|f| f.applied && f.fault.kind() == FaultKind::Failover);
    let as_reported = match failed_over {
        false => in_stream == reported,
        true => in_stream.iter().all(|(id, n)| reported.get(id).is_some_and(|r| n <= r)),
    };
    if !as_reported {
        let detail = format!("it holds {in_stream:?}, the moves reported were {reported:?}");
        violations.push(Violation::DeadLetterStream { detail });
    }
    for e in entries {
        for (i, cause) in duplicates_of(e, faults) {
            if cause.is_none() {
                let h = &e.handlings[i];
                violations.push(Violation::UnexplainedDuplicate {
                    id: e.id.clone(),
                    consumer: h.consumer.clone(),
                    at_ms: h.at_ms,
                });
            }
        }
    }
}
