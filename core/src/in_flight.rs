//! The commands written and not yet answered, in the order their replies come, with a tally
//! of the kinds the loop asks about on every hand-out and settle (kept as they come and go,
//! rather than counted each time).

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;

use crate::acks::Acks;
use crate::commands::HealthPart;
use crate::dead_letter::Job;
use crate::error::Command;

/// A command written and not yet answered.
#[derive(Debug)]
pub(crate) struct InFlight {
    pub(crate) sent: Sent,
    /// When it was written: no later than the server ran it.
    pub(crate) sent_at: Instant,
    pub(crate) deadline: Instant,
}

/// A command in flight and what its reply needs. A `u32` (`stream`) is the index of the
/// stream it is about among the consumer's.
#[derive(Debug)]
pub(crate) enum Sent {
    Handshake(Command),
    CreateGroup(u32),
    Ack(u32, Acks),
    ReadPending {
        stream: u32,
        count: u32,
    },
    Claim {
        stream: u32,
        count: u32,
    },
    ReadNew {
        /// Entries asked of each stream.
        count: u32,
        /// Parked (`BLOCK` this long), or a read ahead that answers at once (`None`).
        block: Option<std::time::Duration>,
        /// The streams read (the command names them from `turn` on, then from the start).
        streams: std::sync::Arc<[u32]>,
        turn: u32,
    },
    /// Delivery counts for the staged entries; `count` asked.
    Counts {
        stream: u32,
        count: u32,
    },
    Lease(u32, Vec<Bytes>),
    /// `XCLAIM … RETRYCOUNT`: delivery counts given back for entries dropped unhandled.
    GiveBack,
    /// `XCLAIM … pelican:delayed … IDLE`: an entry given a retry that waits, parked with the
    /// group until due ([`crate::delay`]).
    Park(u32, crate::delay::Park),
    /// `XNACK … FAIL` for entries given `Retry`, or `… SILENT` for entries dropped
    /// unhandled (Redis 8.8+). Best effort.
    Release {
        stream: u32,
        ids: Acks,
        silent: bool,
    },
    DeadLetter(u32, Job),
    /// One `EVALSHA` of the commit script: these entries' writes and acks.
    Commit(u32, Vec<crate::commit::Job>),
    /// `SCRIPT LOAD` of the commit script: commits wait for its sha.
    ScriptLoad,
    /// The check that commits can be made ([`Config::commit_to`](crate::Config::commit_to)):
    /// nothing is read before its answer.
    CommitCheck,
    /// The id of the next pending entry, which alone outgrew the frame limit.
    FindTooLarge(u32),
    /// A reply to ignore: the counts pipelined behind a read that failed or was skipped.
    Discard(Command),
    /// One of the group-health commands.
    Health(u32, HealthPart),
    /// The check that dead letters can be moved: nothing is read before its answer.
    DeadLetterCheck,
    /// `ROLE`, asked of a node whose `HELLO` said it is a replica, to name its master.
    Role,
    /// `WAIT` or `WAITAOF` after a batch of `acks` acks or dead-letter moves
    /// ([`Config::ack_wait`](crate::Config::ack_wait)).
    Wait {
        acks: u64,
    },
    /// `WAIT 0 0` (or `WAITAOF 0 0 0`): how many replicas the master has, in sync, for
    /// [`Config::ack_wait`](crate::Config::ack_wait) to be told if it asks for more.
    Replicas,
    /// `CLIENT ID` (`list: false`) or `CLIENT LIST` (`list: true`), looking for twins; at
    /// the first connect (`first`) no read goes out before the answer.
    Twins {
        list: bool,
        first: bool,
    },
    /// Leaving the group of a stream at the end of a clean stop ([`crate::leave`]).
    Leave(u32),
    /// `XPENDING key group - + count consumer` on the connection a stop opened after it cut a
    /// parked read short: what this consumer holds, to give back what the server delivered
    /// since `since` (when the read cut short was sent), which was never handed out.
    Held {
        stream: u32,
        count: u32,
        since: Instant,
    },
}

impl Sent {
    pub(crate) fn command(&self) -> Command {
        match self {
            Sent::Handshake(c) | Sent::Discard(c) => *c,
            Sent::CreateGroup(_) => Command::CreateGroup,
            Sent::Ack(..) => Command::Ack,
            Sent::ReadPending { .. } => Command::ReadPending,
            Sent::Claim { .. } => Command::Claim,
            Sent::ReadNew { .. } => Command::ReadNew,
            Sent::Counts { .. } | Sent::FindTooLarge(_) | Sent::Held { .. } => Command::Counts,
            Sent::Lease(..) | Sent::GiveBack | Sent::Park(..) => Command::Lease,
            Sent::Release { .. } => Command::Release,
            Sent::DeadLetter(..) => Command::DeadLetter,
            Sent::Commit(..) => Command::Commit,
            Sent::ScriptLoad => Command::ScriptLoad,
            Sent::CommitCheck => Command::CommitCheck,
            Sent::Health(..) => Command::Health,
            Sent::Twins { .. } => Command::Twins,
            Sent::DeadLetterCheck => Command::DeadLetterCheck,
            Sent::Role => Command::Role,
            Sent::Wait { .. } | Sent::Replicas => Command::Wait,
            Sent::Leave(_) => Command::Leave,
        }
    }

    /// Commands whose answer decides what is handed out next: none is handed out meanwhile,
    /// nor another read sent. (A park's answer decides how long the next parked read may
    /// block: until the next parked entry is due.)
    pub(crate) fn holds_handout(&self) -> bool {
        matches!(
            self,
            Sent::ReadPending { .. }
                | Sent::Claim { .. }
                | Sent::ReadNew { .. }
                | Sent::Counts { .. }
                | Sent::Lease(..)
                | Sent::Park(..)
                | Sent::FindTooLarge(_)
                | Sent::Twins { first: true, .. }
                | Sent::DeadLetterCheck
                | Sent::CommitCheck
                | Sent::ScriptLoad
        )
    }

    /// Commands about the group's entries: a missing group is "gone" for them.
    pub(crate) fn reads_group(&self) -> bool {
        self.holds_handout()
            && !matches!(
                self,
                Sent::Twins { .. }
                    | Sent::DeadLetterCheck
                    | Sent::CommitCheck
                    | Sent::ScriptLoad
                    | Sent::Park(..)
            )
    }

    /// The stream a command is about (an ack, a drain page, a renewal…), if it names one.
    pub(crate) fn stream(&self) -> Option<u32> {
        match self {
            Sent::CreateGroup(s)
            | Sent::Ack(s, _)
            | Sent::ReadPending { stream: s, .. }
            | Sent::Claim { stream: s, .. }
            | Sent::Counts { stream: s, .. }
            | Sent::Lease(s, _)
            | Sent::Park(s, _)
            | Sent::Release { stream: s, .. }
            | Sent::DeadLetter(s, _)
            | Sent::Commit(s, _)
            | Sent::FindTooLarge(s)
            | Sent::Health(s, _)
            | Sent::Held { stream: s, .. }
            | Sent::Leave(s) => Some(*s),
            _ => None,
        }
    }

    /// Commands that must be answered before a stop ends.
    pub(crate) fn is_owed(&self) -> bool {
        matches!(
            self,
            Sent::Ack(..)
                | Sent::DeadLetter(..)
                | Sent::Commit(..)
                | Sent::ScriptLoad
                | Sent::Wait { .. }
                | Sent::GiveBack
                | Sent::Park(..)
                | Sent::Release { .. }
                | Sent::ReadPending { .. }
                | Sent::Claim { .. }
                | Sent::ReadNew { block: None, .. }
                | Sent::Counts { .. }
                | Sent::Held { .. }
                | Sent::Leave(_)
        )
    }
}

/// The commands in flight, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Pipeline {
    commands: VecDeque<InFlight>,
    tally: Tally,
}

/// How many commands in flight are of each kind the loop asks about.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Tally {
    /// Reads of new entries that answer at once.
    reads_ahead: usize,
    /// Parked reads (`BLOCK`).
    parked: usize,
    /// Lease renewals.
    leases: usize,
    /// Commands but reads ahead that hold the hand-out (see [`Sent::holds_handout`]).
    holding: usize,
}

impl Tally {
    fn of(sent: &Sent) -> Tally {
        let mut one = Tally::default();
        match sent {
            Sent::ReadNew { block: None, .. } => one.reads_ahead = 1,
            Sent::ReadNew { block: Some(_), .. } => {
                one.parked = 1;
                one.holding = 1;
            }
            // A park too: like a renewal, its answer says whether the entry is still ours
            // (and decides how long the next parked read may block).
            Sent::Lease(..) | Sent::Park(..) => {
                one.leases = 1;
                one.holding = 1;
            }
            other if other.holds_handout() => one.holding = 1,
            _ => {}
        }
        one
    }

    fn add(&mut self, other: Tally) {
        self.reads_ahead += other.reads_ahead;
        self.parked += other.parked;
        self.leases += other.leases;
        self.holding += other.holding;
    }

    fn sub(&mut self, other: Tally) {
        self.reads_ahead -= other.reads_ahead;
        self.parked -= other.parked;
        self.leases -= other.leases;
        self.holding -= other.holding;
    }
}

impl Pipeline {
    pub(crate) fn push(&mut self, command: InFlight) {
        self.tally.add(Tally::of(&command.sent));
        self.commands.push_back(command);
        self.check();
    }

    /// The oldest: the one the next reply answers.
    pub(crate) fn pop_front(&mut self) -> Option<InFlight> {
        let command = self.commands.pop_front()?;
        self.tally.sub(Tally::of(&command.sent));
        self.check();
        Some(command)
    }

    /// All of them, oldest first, leaving none.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = InFlight> + '_ {
        self.tally = Tally::default();
        self.commands.drain(..)
    }

    /// The delivery counts asked behind a read that failed or was skipped will answer for
    /// nothing: their reply is ignored.
    pub(crate) fn discard_counts(&mut self) {
        if let Some(c) = self.commands.iter_mut().find(|c| matches!(c.sent, Sent::Counts { .. })) {
            self.tally.sub(Tally::of(&c.sent));
            c.sent = Sent::Discard(Command::Counts);
        }
        self.check();
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &InFlight> {
        self.commands.iter()
    }

    /// Moves the deadlines of the commands after the first `skip` to no earlier than
    /// `deadline`.
    pub(crate) fn postpone(&mut self, skip: usize, deadline: Instant) {
        for c in self.commands.iter_mut().skip(skip) {
            c.deadline = c.deadline.max(deadline);
        }
    }

    pub(crate) fn front(&self) -> Option<&InFlight> {
        self.commands.front()
    }

    pub(crate) fn len(&self) -> usize {
        self.commands.len()
    }

    /// Reads of new entries in flight that answer at once.
    pub(crate) fn reads_ahead(&self) -> usize {
        self.tally.reads_ahead
    }

    /// Whether a parked read is in flight.
    pub(crate) fn parked(&self) -> bool {
        self.tally.parked > 0
    }

    /// When the parked read in flight, if any, was written.
    pub(crate) fn parked_since(&self) -> Option<Instant> {
        let parked = |c: &&InFlight| matches!(c.sent, Sent::ReadNew { block: Some(_), .. });
        self.commands.iter().find(parked).map(|c| c.sent_at)
    }

    /// Whether lease renewals (or parks) are in flight.
    pub(crate) fn leasing(&self) -> bool {
        self.tally.leases > 0
    }

    /// Whether a command other than a read ahead holds the hand-out.
    pub(crate) fn holding(&self) -> bool {
        self.tally.holding > 0
    }

    /// In debug builds (every test of the consumer, and the fuzz entry points run as tests),
    /// the tally always matches a count from scratch.
    fn check(&self) {
        if cfg!(debug_assertions) {
            let mut recount = Tally::default();
            self.commands.iter().for_each(|c| recount.add(Tally::of(&c.sent)));
            debug_assert_eq!(self.tally, recount);
        }
    }
}
