//! What can go wrong in a [`World`](super::World): the faults, their kinds, and how a random
//! one is drawn.

use std::fmt;

use super::rng::Rng;

/// Something that goes wrong at a moment of a run. `consumer` is an index, taken modulo the
/// number of consumers (so that any value is valid and a schedule survives shrinking); a
/// fault aimed at a consumer that is not running (crashed, dead, stopping) is skipped, and
/// so is one that needs the server while it is down ([`Fault::ServerRestart`]), as reported
/// in [`FaultRecord::applied`](super::FaultRecord::applied).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Fault {
    /// The consumer's process dies: its state, the entries in hand (whose handlers already
    /// ran: their side effects stay, their verdicts are lost) and its acks not yet confirmed. A new
    /// process starts under the same name `restart_ms` later and drains its pending list.
    Crash {
        /// Which consumer.
        consumer: usize,
        /// How long until the new process starts.
        restart_ms: u64,
    },
    /// The consumer's process dies for good, like [`Fault::Crash`] without a restart: its
    /// peers reclaim its entries after `min_idle`. Skipped if it is the last one alive.
    Death {
        /// Which consumer.
        consumer: usize,
    },
    /// The consumer's connection drops; the consumer reconnects after its backoff.
    Disconnect {
        /// Which consumer.
        consumer: usize,
    },
    /// The consumer's next handling takes `ms` (the driver keeps driving meanwhile, so the
    /// entry's lease is renewed); other entries in hand at once take their own time.
    SlowHandler {
        /// Which consumer.
        consumer: usize,
        /// How long the handling takes.
        ms: u64,
    },
    /// The consumer's next handling fails before it does anything: the handler is not
    /// called and the verdict is [`Verdict::Retry`](pelican::Verdict::Retry) (its database
    /// was unreachable, say).
    FailingHandler {
        /// Which consumer.
        consumer: usize,
    },
    /// The consumer's next handling gives up on its entry: the handler is not called and the
    /// verdict is [`Verdict::DeadLetter`](pelican::Verdict::DeadLetter).
    DeadLetterVerdict {
        /// Which consumer.
        consumer: usize,
    },
    /// `XDEL` of a pending entry: the `pick`-th (modulo their number) of the group's pending
    /// entries in id order. Skipped when nothing is pending.
    DeletePending {
        /// Which pending entry.
        pick: u32,
    },
    /// `XTRIM … MAXLEN`: the `count` oldest entries of the stream go (at least one, at most
    /// all), pending or not. Skipped when nothing is pending.
    Trim {
        /// How many entries go.
        count: u32,
    },
    /// `XGROUP DESTROY`: the group and its pending list are gone. The consumers create it
    /// again from the stream's start, so every entry still in the stream is delivered anew.
    DestroyGroup,
    /// The consumer is asked to stop ([`Consumer::stop`](pelican::Consumer::stop)): the
    /// entries in hand are settled as their handlings finish; once it has stopped, a new
    /// process starts under the same name `restart_ms` later.
    Stop {
        /// Which consumer.
        consumer: usize,
        /// How long after it stopped the new process starts.
        restart_ms: u64,
    },
    /// The consumer is told to stop at once ([`Consumer::abandon`](pelican::Consumer::abandon)):
    /// the entries in hand are dropped (their handlers already ran) and acks not yet confirmed
    /// are given up; a new process starts `restart_ms` after it stopped.
    Abandon {
        /// Which consumer.
        consumer: usize,
        /// How long after it stopped the new process starts.
        restart_ms: u64,
    },
    /// The server restarts from its append-only file ([`Sim::restart`](crate::Sim::restart)):
    /// every connection drops, connecting fails for `down_ms`, and the delivery counts and
    /// idle times raised by reads of a consumer's own pending list are forgotten (the
    /// servers never write them to the file). Entries due meanwhile are added when it is
    /// back (the producer waits too).
    ServerRestart {
        /// How long the server refuses connections.
        down_ms: u64,
    },
    /// A failover ([`Sim::failover_with`](crate::Sim::failover_with)): the replica is
    /// promoted with the data as it last copied it, so what the master took since is lost —
    /// entries the producer added (for the surviving history they never were:
    /// [`Fate::Unreplicated`](super::Fate::Unreplicated)), acks (their entries come again:
    /// duplicates), deliveries (made anew) and dead-letter moves (made again). The world's
    /// server has a replica for it ([`World::replica_lag`](super::World::replica_lag)).
    ///
    /// With `stale_ms` 0 the old master's clients are cut off (it died, or Sentinel demoted
    /// it and killed them) and the consumers' next connections reach the new master. Else it
    /// is demoted in place ([`OldMaster::Demoted`](crate::OldMaster::Demoted)) and for
    /// `stale_ms` the consumers' address still leads to it (a DNS name or a load balancer
    /// not yet moved): their open connections stay on it — a parked read answers
    /// `-UNBLOCKED` and closes, a write `-READONLY` — and their new ones reach it too, where
    /// `HELLO` says `role replica` (pelican's [`Notice::NotMaster`](pelican::Notice::NotMaster):
    /// it waits and tries again). The kit's producer finds the new master at once.
    Failover {
        /// How long the consumers' connections still reach the old master, a replica now
        /// (0: they are cut off and reach the new one).
        stale_ms: u64,
    },
    /// The replica loses its link to the master for `ms`: it copies nothing, a `WAIT` for
    /// writes it lacks waits for its link or its timeout (consumers with
    /// [`Config::ack_wait`](pelican::Config::ack_wait) count those acks unreplicated), and
    /// a [`Fault::Failover`] meanwhile loses everything the master took since the link went
    /// down (the failover ends it: the new master's replica is linked). Skipped while the
    /// link is down already. It loses nothing by itself.
    ReplicaLinkDown {
        /// How long the link is down.
        ms: u64,
    },
    /// The consumer's process is paused for `ms` (a stop-the-world pause, a frozen VM,
    /// `SIGSTOP`): its driver does nothing — no reads, no writes, no lease renewals, no
    /// timeouts — and its handlers stand still, while its connection stays open. Paused past
    /// `min_idle`, it is a zombie: peers reclaim its entries and handle them, and when it
    /// resumes it settles what it had in hand as if nothing happened (a commit of one is
    /// then fenced off). Faults aimed at it meanwhile are skipped, but for a crash or a death.
    Pause {
        /// Which consumer.
        consumer: usize,
        /// How long it stands still.
        ms: u64,
    },
    /// The consumer's connection drops right after its next commit
    /// ([`Verdict::Commit`](pelican::Verdict::Commit)'s `EVALSHA`; or its next `XACK`, for
    /// a consumer that only acks) reaches the server, before the answer: the commit is made,
    /// and the consumer cannot tell. It sends the commit again on its next connection, which
    /// must find the entry settled and write nothing twice. Armed until then (or until its
    /// process ends).
    CutAfterCommit {
        /// Which consumer.
        consumer: usize,
    },
}

/// A [`Fault`] without its parameters: to pick which faults a world draws at random
/// ([`World::random_faults`](super::World::random_faults)) and to count them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum FaultKind {
    /// [`Fault::Crash`].
    Crash,
    /// [`Fault::Death`].
    Death,
    /// [`Fault::Disconnect`].
    Disconnect,
    /// [`Fault::SlowHandler`].
    SlowHandler,
    /// [`Fault::FailingHandler`].
    FailingHandler,
    /// [`Fault::DeadLetterVerdict`].
    DeadLetterVerdict,
    /// [`Fault::DeletePending`].
    DeletePending,
    /// [`Fault::Trim`].
    Trim,
    /// [`Fault::DestroyGroup`].
    DestroyGroup,
    /// [`Fault::Stop`].
    Stop,
    /// [`Fault::Abandon`].
    Abandon,
    /// [`Fault::ServerRestart`].
    ServerRestart,
    /// [`Fault::Failover`].
    Failover,
    /// [`Fault::ReplicaLinkDown`].
    ReplicaLinkDown,
    /// [`Fault::Pause`].
    Pause,
    /// [`Fault::CutAfterCommit`].
    CutAfterCommit,
}

impl FaultKind {
    /// Every kind (a slice: a kind added later lengthens it without breaking a caller).
    pub const ALL: &'static [FaultKind] = &[
        FaultKind::Crash,
        FaultKind::Death,
        FaultKind::Disconnect,
        FaultKind::SlowHandler,
        FaultKind::FailingHandler,
        FaultKind::DeadLetterVerdict,
        FaultKind::DeletePending,
        FaultKind::Trim,
        FaultKind::DestroyGroup,
        FaultKind::Stop,
        FaultKind::Abandon,
        FaultKind::ServerRestart,
        FaultKind::Failover,
        FaultKind::ReplicaLinkDown,
        FaultKind::Pause,
        FaultKind::CutAfterCommit,
    ];

    /// Whether a fault of this kind may, by design, have an entry handled again after its
    /// handler succeeded: it loses a process's memory (its unsent acks, its verdicts on the
    /// entries in hand), the group's pending list, or the delivery counts and idle times that
    /// keep a peer from reclaiming an entry still being handled, or freezes a process past
    /// `min_idle` (a zombie's entries are handled by peers while it holds them). Other faults
    /// never do (a duplicate after them alone is a bug): a cut after a commit must not.
    pub fn may_duplicate(self) -> bool {
        matches!(
            self,
            FaultKind::Crash
                | FaultKind::Death
                | FaultKind::Abandon
                | FaultKind::DestroyGroup
                | FaultKind::ServerRestart
                | FaultKind::Failover
                | FaultKind::Pause
        )
    }
}

impl Fault {
    /// Its kind.
    pub fn kind(&self) -> FaultKind {
        match self {
            Fault::Crash { .. } => FaultKind::Crash,
            Fault::Death { .. } => FaultKind::Death,
            Fault::Disconnect { .. } => FaultKind::Disconnect,
            Fault::SlowHandler { .. } => FaultKind::SlowHandler,
            Fault::FailingHandler { .. } => FaultKind::FailingHandler,
            Fault::DeadLetterVerdict { .. } => FaultKind::DeadLetterVerdict,
            Fault::DeletePending { .. } => FaultKind::DeletePending,
            Fault::Trim { .. } => FaultKind::Trim,
            Fault::DestroyGroup => FaultKind::DestroyGroup,
            Fault::Stop { .. } => FaultKind::Stop,
            Fault::Abandon { .. } => FaultKind::Abandon,
            Fault::ServerRestart { .. } => FaultKind::ServerRestart,
            Fault::Failover { .. } => FaultKind::Failover,
            Fault::ReplicaLinkDown { .. } => FaultKind::ReplicaLinkDown,
            Fault::Pause { .. } => FaultKind::Pause,
            Fault::CutAfterCommit { .. } => FaultKind::CutAfterCommit,
        }
    }

    /// The consumer it is aimed at (as given, not yet taken modulo the number of
    /// consumers), if any.
    pub fn consumer(&self) -> Option<usize> {
        match *self {
            Fault::Crash { consumer, .. }
            | Fault::Death { consumer }
            | Fault::Disconnect { consumer }
            | Fault::SlowHandler { consumer, .. }
            | Fault::FailingHandler { consumer }
            | Fault::DeadLetterVerdict { consumer }
            | Fault::Stop { consumer, .. }
            | Fault::Abandon { consumer, .. }
            | Fault::Pause { consumer, .. }
            | Fault::CutAfterCommit { consumer } => Some(consumer),
            Fault::DeletePending { .. }
            | Fault::Trim { .. }
            | Fault::DestroyGroup
            | Fault::ServerRestart { .. }
            | Fault::Failover { .. }
            | Fault::ReplicaLinkDown { .. } => None,
        }
    }

    /// The same fault aimed at another consumer (unchanged if it is aimed at none).
    pub(crate) fn with_consumer(mut self, to: usize) -> Fault {
        match &mut self {
            Fault::Crash { consumer, .. }
            | Fault::Death { consumer }
            | Fault::Disconnect { consumer }
            | Fault::SlowHandler { consumer, .. }
            | Fault::FailingHandler { consumer }
            | Fault::DeadLetterVerdict { consumer }
            | Fault::Stop { consumer, .. }
            | Fault::Abandon { consumer, .. }
            | Fault::Pause { consumer, .. }
            | Fault::CutAfterCommit { consumer } => *consumer = to,
            Fault::DeletePending { .. }
            | Fault::Trim { .. }
            | Fault::DestroyGroup
            | Fault::ServerRestart { .. }
            | Fault::Failover { .. }
            | Fault::ReplicaLinkDown { .. } => {}
        }
        self
    }

    /// A fault of `kind` with parameters drawn from `rng`, aimed at one of `consumers`;
    /// slow handlings are drawn around `min_idle_ms` (half of it up to well past it).
    pub(crate) fn draw(kind: FaultKind, consumers: usize, min_idle_ms: u64, rng: &mut Rng) -> Fault {
        let consumer = rng.below(consumers as u64) as usize;
        match kind {
            FaultKind::Crash => Fault::Crash { consumer, restart_ms: 100 + rng.below(2_000) },
            FaultKind::Death => Fault::Death { consumer },
            FaultKind::Disconnect => Fault::Disconnect { consumer },
            FaultKind::SlowHandler => {
                // Under min_idle, or over it (the lease must then be renewed meanwhile).
                let ms = if rng.chance(50) {
                    min_idle_ms / 2 + rng.below(min_idle_ms / 2)
                } else {
                    min_idle_ms + 500 + rng.below(1_000)
                };
                Fault::SlowHandler { consumer, ms }
            }
            FaultKind::FailingHandler => Fault::FailingHandler { consumer },
            FaultKind::DeadLetterVerdict => Fault::DeadLetterVerdict { consumer },
            FaultKind::DeletePending => Fault::DeletePending { pick: rng.next() as u32 },
            FaultKind::Trim => Fault::Trim { count: 1 + rng.below(5) as u32 },
            FaultKind::DestroyGroup => Fault::DestroyGroup,
            FaultKind::Stop => Fault::Stop { consumer, restart_ms: 50 + rng.below(500) },
            FaultKind::Abandon => Fault::Abandon { consumer, restart_ms: 50 + rng.below(500) },
            FaultKind::ServerRestart => {
                let down_ms = if rng.chance(25) { 0 } else { rng.below(2_000) };
                Fault::ServerRestart { down_ms }
            }
            FaultKind::Failover => {
                // Half the time cut off at once, else demoted in place and still reached a while.
                let stale_ms = if rng.chance(50) { 0 } else { 100 + rng.below(1_500) };
                Fault::Failover { stale_ms }
            }
            FaultKind::ReplicaLinkDown => Fault::ReplicaLinkDown { ms: 200 + rng.below(2_000) },
            // Past min_idle: a zombie whose entries peers reclaim.
            FaultKind::Pause => Fault::Pause { consumer, ms: min_idle_ms + 200 + rng.below(2_000) },
            FaultKind::CutAfterCommit => Fault::CutAfterCommit { consumer },
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}
