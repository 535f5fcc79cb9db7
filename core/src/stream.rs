//! What a consumer keeps for each stream it reads, apart from what it keeps for its
//! connection ([`Consumer`](crate::Consumer)): where its drain and its reclaim sweep are, what
//! it owes the server for it (acks, dead-letter moves, commits, give-backs, releases), and its
//! group's health. A consumer reads one stream or many, all on its one connection.

use std::time::Instant;

use bytes::Bytes;

use crate::acks::Acks;
use crate::cluster;
use crate::commit;
use crate::dead_letter::Job;
use crate::delay::Delays;
use crate::entry::Entry;
use crate::notice::GroupHealth;
use crate::release::Releases;
use crate::retried::Retried;

/// Where a stream's drain starts: the top of its own pending list.
pub(crate) const DRAIN_START: &[u8] = b"0";
/// Where a reclaim sweep starts (and `XAUTOCLAIM` says it ended).
pub(crate) const CURSOR_START: &[u8] = b"0-0";

/// A change to a running consumer's streams ([`Consumer::change_streams`](crate::Consumer::change_streams)),
/// as a driver queues them from other threads.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamChange {
    /// Read this stream too ([`Consumer::add_stream`](crate::Consumer::add_stream)).
    Add(Bytes),
    /// Read this stream no more ([`Consumer::remove_stream`](crate::Consumer::remove_stream)).
    Remove(Bytes),
}

/// The read a stream needs before it joins the parked read.
#[derive(Debug)]
pub(crate) enum Next {
    /// A page of its own pending list after this id.
    Drain { after: Bytes },
    /// Drained: reclaimed when due, else read with the others.
    Beat,
}

/// An entry read and not yet handed out (its stream is the entry's): in the consumer's
/// buffer, or among a stream's [`returns`](Stream::returns).
#[derive(Debug)]
pub(crate) struct Buffered {
    pub(crate) entry: Entry,
    /// When the reply that delivered or last renewed it arrived.
    pub(crate) read_at: Instant,
    /// `read_at` + the lease: from then on it is renewed before it is handed out. Kept so
    /// that the hot path compares instants instead of subtracting them.
    pub(crate) due: Instant,
    /// Its key's hash, with [`Config::order_by`](crate::Config::order_by).
    pub(crate) key: Option<u64>,
}

/// One stream of the consumer's group.
#[derive(Debug)]
pub(crate) struct Stream {
    pub(crate) key: Bytes,
    /// Its hash slot, for commits' keys and redirects in a cluster.
    pub(crate) slot: u16,
    /// Read, or removed ([`Consumer::remove_stream`](crate::Consumer::remove_stream)): what
    /// it still owes is sent, nothing more is read.
    pub(crate) active: bool,
    pub(crate) next: Next,
    /// Acks earned and not yet written.
    pub(crate) acks: Acks,
    /// Dead-letter moves owed and not yet written.
    pub(crate) dead_letters: Vec<Job>,
    /// Commits owed and not yet written (they go out with the acks).
    pub(crate) commits: Vec<commit::Job>,
    /// Entries read but dropped unhandled (a stop, a lost connection), whose delivery counts
    /// are to be given back.
    pub(crate) returns: Vec<Buffered>,
    /// Where the next `XAUTOCLAIM` continues.
    pub(crate) cursor: Bytes,
    /// When the next reclaim is due; `None` is now.
    pub(crate) claim_at: Option<Instant>,
    /// Reads of new entries in a row that brought as many as they asked of this stream.
    pub(crate) full: u8,
    /// More are likely waiting: its last read brought its whole share, larger than one (or
    /// any, read alone), or two in a row brought a share of one (one entry of many streams
    /// could as well be all there was).
    pub(crate) backlog: bool,
    /// Named in the read reply being walked (for the walk's bookkeeping only).
    pub(crate) in_reply: bool,
    /// Its entries in hand: at most [`Config::concurrency`](crate::Config::concurrency).
    pub(crate) in_hand: u32,
    /// Whether the group was found or created once (a later creation is a re-creation).
    pub(crate) group_made: bool,
    /// Added while running: its group is to be made before its drain.
    pub(crate) make_group: bool,
    /// Added while running (not in the [`Config`](crate::Config) it started with): its group
    /// is made at [`Config::create_added_group`](crate::Config::create_added_group).
    pub(crate) added: bool,
    /// The last new entry read, with [`Config::create_group`](crate::Config::create_group)
    /// set: what a re-created group lost is told from it.
    pub(crate) last_read: Option<Bytes>,
    /// Entries given `Retry`, to release (`XNACK … FAIL`), now or later.
    pub(crate) releases: Releases,
    /// Entries lately given `Retry`: back through a reclaim, they are not a peer's.
    pub(crate) retried: Retried,
    /// Entries given a retry that waits: parks owed, and parked entries watched.
    pub(crate) delays: Delays,
    /// When the group's health is next asked after; `None`: at the first chance.
    pub(crate) health_at: Option<Instant>,
    /// The last health gathered, for snapshots.
    pub(crate) last_health: Option<GroupHealth>,
    /// Its part of the consumer's counts.
    pub(crate) stats: crate::stats::StreamStats,
}

impl Stream {
    pub(crate) fn new(key: Bytes) -> Stream {
        Stream {
            slot: cluster::key_slot(&key),
            key,
            active: true,
            next: Next::Drain { after: Bytes::from_static(DRAIN_START) },
            acks: Acks::default(),
            dead_letters: Vec::new(),
            commits: Vec::new(),
            returns: Vec::new(),
            cursor: Bytes::from_static(CURSOR_START),
            claim_at: None,
            full: 0,
            backlog: false,
            in_reply: false,
            in_hand: 0,
            group_made: false,
            make_group: false,
            added: false,
            last_read: None,
            releases: Releases::default(),
            retried: Retried::default(),
            delays: Delays::default(),
            health_at: None,
            last_health: None,
            stats: crate::stats::StreamStats::default(),
        }
    }

    /// Its drain starts again from the top (a new connection, a skipped read).
    pub(crate) fn restart_drain(&mut self) {
        self.next = Next::Drain { after: Bytes::from_static(DRAIN_START) };
    }

    /// Where the `XPENDING` of its next drain page starts: after the last page's last id,
    /// or from the first.
    pub(crate) fn counts_from(&self) -> Vec<u8> {
        match &self.next {
            Next::Drain { after } if &after[..] != DRAIN_START => crate::commands::after(after),
            _ => b"-".to_vec(),
        }
    }

    pub(crate) fn drains_from_top(&self) -> bool {
        matches!(&self.next, Next::Drain { after } if &after[..] == DRAIN_START)
    }

    /// Acks, dead-letter moves or commits owed (not yet written).
    pub(crate) fn owes_settles(&self) -> bool {
        !self.acks.is_empty() || !self.dead_letters.is_empty() || !self.commits.is_empty()
    }

    /// True if `id` was settled and its ack (dead-letter move, commit) is owed, not yet
    /// written.
    pub(crate) fn settling(&self, id: &[u8]) -> bool {
        self.acks.contains(id)
            || self.dead_letters.iter().any(|job| job.id == id)
            || self.commits.iter().any(|job| job.id == id)
    }
}
