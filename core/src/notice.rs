//! Happenings worth telling the application or the operator about, that need no answer.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;

/// Something that happened to the consumer's connection or entries, reported through
/// [`Event::Notice`](crate::Event::Notice) (most are also counted in [`Stats`](crate::Stats)).
/// Each has a one-line [`Display`](fmt::Display) for logs; [`Notice::is_trouble`] tells
/// those worth a warning.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Notice {
    /// The server answered on a new connection: it is up and speaks RESP (told at its first
    /// reply, not at the TCP connect, so that a port that accepts and never answers, or
    /// answers in another protocol, is never called connected).
    Connected {
        /// True for every connection after the first.
        reconnect: bool,
        /// The stream verbs the consumer speaks on this connection (what the server has,
        /// unless [`Config::classic_verbs`](crate::Config::classic_verbs)).
        dialect: crate::Dialect,
    },
    /// A connect attempt failed (the server is down, refused, unreachable…), or the
    /// connection was lost before the server ever answered on it.
    ConnectFailed {
        /// Why, as the transport or the consumer saw it.
        reason: String,
        /// When the next attempt is (backoff with jitter).
        retry_in: Duration,
    },
    /// The node connected to is not a master (a replica: after a failover, or a name that
    /// points at the wrong node): nothing is read from it, and it is tried again after the
    /// backoff (with Sentinel, the master is asked for again first). Told once for each
    /// node it names as its master, not at every attempt.
    NotMaster {
        /// What it is, e.g. `a replica of 127.0.0.1:6380 (link connected)`.
        role: String,
        /// When the next attempt is.
        retry_in: Duration,
    },
    /// A working connection was lost, or closed by the consumer (a reply overdue, bytes
    /// that are not RESP, a server error a reconnect may fix).
    ConnectionLost {
        /// Why.
        reason: String,
        /// When the next attempt is.
        retry_in: Duration,
    },
    /// Acks did not reach the replicas (or append-only files) that
    /// [`Config::ack_wait`](crate::Config::ack_wait) asks for within its timeout (a replica
    /// down or lagging): a failover now could bring their entries back. Told when it starts
    /// (not for every batch: [`Stats::acks_unreplicated`](crate::Stats::acks_unreplicated)
    /// counts them), and again after a batch that made it.
    AcksUnreplicated {
        /// The acks in the batch that found it.
        acks: u64,
        /// Replicas that had them.
        replicas: u64,
        /// Replicas asked for.
        wanted: u32,
    },
    /// The master has fewer replicas in sync than
    /// [`Config::ack_wait`](crate::Config::ack_wait) asks each batch of acks to reach (told at
    /// connect, and again when the count changes; `have >= wanted` once it has enough again).
    /// No batch can reach them: each is counted unreplicated
    /// ([`Stats::acks_unreplicated`](crate::Stats::acks_unreplicated)) after a wait of 1 ms, a
    /// round trip per batch for nothing.
    Replicas {
        /// Replicas in sync with the master (`WAIT 0 0`).
        have: u64,
        /// Replicas asked for.
        wanted: u32,
        /// The wait asked for, which a batch would spend without this notice's knowledge.
        timeout: Duration,
    },
    /// `XAUTOCLAIM` (or a read with `CLAIM`, Redis 8.4+) took entries from other owners:
    /// idle past `min_idle` (a dead peer's, or one that stopped on a server without
    /// `XNACK`), or released by their owners (`XNACK`, Redis 8.8+: a peer that stopped).
    /// This consumer's own `Retry` entries coming back for another try are not told.
    Reclaimed {
        /// How many were found idle (deleted ones not included).
        count: u64,
        /// How many had been released.
        released: u64,
    },
    /// The group's health, every [`Config::health_every`](crate::Config::health_every).
    Health(GroupHealth),
    /// A peer took an entry this consumer had read (its `XAUTOCLAIM` found it idle past
    /// `min_idle`), or it was deleted. From the buffer, it is dropped and never handed out;
    /// in hand (`in_hand`), the handler was already running: its ack may count 0
    /// ([`Stats::lost_to_peer`](crate::Stats::lost_to_peer)) and the peer handles it too.
    LeaseLost {
        /// The entry.
        id: Bytes,
        /// True if it was in the application's hands.
        in_hand: bool,
    },
    /// An entry was moved to the dead-letter stream: its fields and its origin were added
    /// there and it was acknowledged here, in one server-side step.
    DeadLettered {
        /// The entry's id in the consumed stream.
        id: Bytes,
        /// Its delivery count.
        deliveries: u64,
        /// Why.
        reason: DeadLetterReason,
    },
    /// A [`Verdict::Commit`](crate::Verdict::Commit) was fenced off: the entry was no
    /// longer this consumer's with the delivery it was handed out with, so none of its
    /// writes were made and it was not acked here ([`Stats::commits_fenced`](crate::Stats::commits_fenced)).
    /// Another delivery owns the entry's outcome: a peer that reclaimed it (this consumer
    /// paused past `min_idle`), or a later delivery to this consumer.
    CommitFenced {
        /// The entry.
        id: Bytes,
        /// The delivery count it was handed out with.
        deliveries: u64,
        /// Who holds it now and its delivery count, or `None` if it is no longer pending:
        /// settled already — by a peer, or by this very commit sent before on a connection
        /// lost before its answer came (its writes were made then, once).
        holder: Option<(Bytes, u64)>,
    },
    /// A [`Verdict::Commit`](crate::Verdict::Commit) could not be made as it stood (a write
    /// that would fail: a key of another type, an `INCRBY` of a non-integer, a key in another
    /// cluster slot, a write without fields): nothing was written
    /// ([`Stats::commits_refused`](crate::Stats::commits_refused)). It counts as a failed
    /// delivery: the entry stays pending, to come again, and at its last allowed delivery
    /// ([`Config::max_deliveries`](crate::Config::max_deliveries); at once without a cap) it
    /// is moved to the dead-letter stream with the refusal's text. Without a dead-letter stream the consumer
    /// stops instead ([`Error::CommitRefused`](crate::Error::CommitRefused)): it would be
    /// refused every time.
    CommitRefused {
        /// The entry.
        id: Bytes,
        /// Why, e.g. `WRONGTYPE out holds a hash, not a stream`.
        reason: String,
    },
    /// Another live connection consumes under this consumer's name (a *twin*), seen by the
    /// check every `min_idle` (at the first connect a twin is an error instead, unless
    /// [`Config::allow_twins`](crate::Config::allow_twins)). Each twin is told once.
    Twin {
        /// The other connection's address, as the server sees it.
        addr: String,
        /// How long it has been idle.
        idle: Duration,
    },
    /// The server refused the commands a watching feature needs (an ACL without them): the
    /// feature is off from now on; consuming goes on. Told once per feature, at its first
    /// use (the look for twins and the group's health are asked at the first connect, before
    /// anything is read).
    Refused {
        /// What is off: [`TWINS`](Notice::TWINS), [`HEALTH`](Notice::HEALTH) or
        /// [`LEAVE`](Notice::LEAVE).
        feature: &'static str,
        /// The server's answer.
        reason: String,
    },
    /// A clean stop asked to leave the group ([`Config::leave_on_stop`](crate::Config::leave_on_stop)):
    /// with nothing held, the consumer was deleted from it; holding entries (its retries
    /// kept pending, or what it read ahead given back on a server without `XNACK`), it was
    /// kept, and its entries go to the peers' reclaims.
    Left {
        /// The entries it holds: 0 if it left.
        holding: u64,
    },
    /// The group was gone and was created again (at [`Config::create_group`](crate::Config::create_group)'s
    /// id): the server lost it (a restart without persistence, a failover to a replica that
    /// never had it) or someone deleted it. Its position and its pending entries are lost:
    /// from `0` every entry comes again; from `$` what was added meanwhile is skipped.
    GroupRecreated {
        /// The id it was created at.
        start: Bytes,
        /// The last new entry this consumer had read before: the group's position, or
        /// near it (peers may have read further). `None` if it read none.
        last_read: Option<Bytes>,
    },
    /// Reads now ask for fewer entries.
    ReadShrunk {
        /// Entries per read from now on (it grows back as the cause passes).
        count: u32,
        /// Why.
        cause: ShrinkCause,
        /// What a handler took for an entry lately (smoothed), from its hand-out to its
        /// settle.
        handler: Duration,
    },
}

/// A group's state on the server, as `XINFO GROUPS`, `XPENDING` and `TIME` tell it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupHealth {
    /// Entries delivered to the group's consumers and not yet acknowledged (all consumers).
    pub pending: u64,
    /// Entries in the stream not yet delivered to the group; `None` on Redis 6.2 (no `lag`
    /// before 7.0) or when the server cannot tell (after some deletions).
    pub lag: Option<u64>,
    /// The group's consumers.
    pub consumers: u64,
    /// The oldest pending entry, if any.
    pub oldest: Option<OldestPending>,
    /// Entries in the stream's dead-letter stream (`XLEN`), if
    /// [`Config::dead_letter`](crate::Config::dead_letter) is set; `None` without one, or if
    /// the server refused to tell (an ACL without `XLEN` on it: not asked again).
    pub dead_letters: Option<u64>,
}

/// The oldest entry of a group's pending list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OldestPending {
    /// Its id.
    pub id: Bytes,
    /// Its age: the server's time now less the time in its id (zero for an id from the
    /// future, e.g. an explicit id).
    pub age: Duration,
    /// Since it was last delivered (or claimed); `None` if it is released.
    pub idle: Option<Duration>,
    /// Times it was delivered.
    pub deliveries: u64,
    /// The consumer that holds it; `None` if it is *released* (`XNACK`, Redis 8.8+): no
    /// consumer holds it, and the next read or reclaim of any consumer takes it.
    pub owner: Option<Bytes>,
}

/// Why an entry went to the dead-letter stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DeadLetterReason {
    /// Delivered more than [`Config::max_deliveries`](crate::Config::max_deliveries) times.
    MaxDeliveries,
    /// The handler said [`Verdict::DeadLetter`](crate::Verdict::DeadLetter).
    Verdict,
    /// Its [`Verdict::Commit`](crate::Verdict::Commit) was refused at its last allowed
    /// delivery ([`Config::max_deliveries`](crate::Config::max_deliveries)): its writes
    /// could not be made as they stood. The dead-letter entry's `pelican-error` says why.
    CommitRefused,
}

impl DeadLetterReason {
    /// The word written in the dead-letter entry's `pelican-reason` field.
    pub fn as_str(self) -> &'static str {
        match self {
            DeadLetterReason::MaxDeliveries => "max-deliveries",
            DeadLetterReason::Verdict => "verdict",
            DeadLetterReason::CommitRefused => "commit-refused",
        }
    }
}

/// Why reads were made smaller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ShrinkCause {
    /// Handlers are slow: each read brings the handlers about 10 ms of work, which is now a
    /// single entry each (reads paced to quicker handlers are not told).
    SlowHandler,
    /// Entries are big: a full read would pass [`Config::read_bytes`](crate::Config::read_bytes),
    /// or handlers take 10 ms or more an entry only as their entries are big (they get
    /// through 10 MiB/s or more).
    BigEntries,
}

impl Notice {
    /// True for what an operator should hear about at once (a warning rather than
    /// information): a failed connect, a lost connection, a lost lease, a dead letter.
    pub fn is_trouble(&self) -> bool {
        if let Notice::Replicas { have, wanted, .. } = self {
            return *have < u64::from(*wanted);
        }
        matches!(
            self,
            Notice::ConnectFailed { .. }
                | Notice::NotMaster { .. }
                | Notice::AcksUnreplicated { .. }
                | Notice::ConnectionLost { .. }
                | Notice::LeaseLost { .. }
                | Notice::DeadLettered { .. }
                | Notice::CommitFenced { .. }
                | Notice::CommitRefused { .. }
                | Notice::Twin { .. }
                | Notice::Refused { .. }
                | Notice::GroupRecreated { .. }
        )
    }
}

impl Notice {
    /// [`Notice::Refused`]'s feature: looking for twins (`CLIENT ID`, `CLIENT LIST`).
    pub const TWINS: &'static str =
        "looking for another process under this consumer's name (CLIENT ID, CLIENT LIST)";
    /// [`Notice::Refused`]'s feature: the group's health (`XINFO GROUPS`, `XPENDING`, `TIME`).
    pub const HEALTH: &'static str = "the group's health (XINFO GROUPS, XPENDING, TIME)";
    /// [`Notice::Refused`]'s feature: leaving the group at a clean stop (`EVAL` of
    /// [`LEAVE_SCRIPT`](crate::LEAVE_SCRIPT): `XPENDING`, `XGROUP DELCONSUMER`).
    pub const LEAVE: &'static str = "leaving the group at a stop (EVAL: XPENDING, XGROUP DELCONSUMER)";
}

impl fmt::Display for Notice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Notice::Connected { reconnect, dialect } => {
                f.write_str(if *reconnect { "reconnected" } else { "connected" })?;
                match dialect.is_classic() {
                    true => Ok(()),
                    false => write!(f, " (speaking {dialect})"),
                }
            }
            Notice::ConnectFailed { reason, retry_in } => {
                write!(f, "cannot connect: {reason}; retrying in {}", Secs(*retry_in))
            }
            Notice::NotMaster { role, retry_in } => write!(
                f,
                "connected to {role}, not a master: waiting for a master (retrying in {}, told once)",
                Secs(*retry_in)
            ),
            Notice::AcksUnreplicated { acks, replicas, wanted } => {
                let what = if *acks == 1 { "ack" } else { "acks" };
                write!(
                    f,
                    "{acks} {what} reached {replicas} of the {wanted} replicas asked for in time: \
                     a failover now would deliver their entries again (counted until they do)"
                )
            }
            Notice::ConnectionLost { reason, retry_in } => {
                write!(f, "connection lost: {reason}; reconnecting in {}", Secs(*retry_in))
            }
            Notice::Replicas { have, wanted, .. } if *have >= u64::from(*wanted) => {
                write!(
                    f,
                    "the master has {have} replicas in sync again: acks can reach the {wanted} asked for"
                )
            }
            Notice::Replicas { have, wanted, timeout } => {
                let replicas = if *have == 1 { "replica" } else { "replicas" };
                write!(
                    f,
                    "the master has {have} {replicas} in sync, fewer than the {wanted} each batch of acks is \
                     to reach: none can, so every batch is counted unreplicated after waiting 1 ms (not \
                     the {} asked), a round trip per batch for nothing; ask for at most {have}",
                    Secs(*timeout)
                )
            }
            Notice::Reclaimed { count, released } => {
                let entries = |n: u64| if n == 1 { "entry" } else { "entries" };
                match (*count, *released) {
                    (n, 0) => write!(f, "reclaimed {n} idle {} from their owners", entries(n)),
                    (0, r) => write!(f, "took over {r} {} their owners released", entries(r)),
                    (n, r) => write!(
                        f,
                        "reclaimed {n} idle {} from their owners and took over {r} they released",
                        entries(n)
                    ),
                }
            }
            Notice::Health(health) => health.fmt(f),
            Notice::LeaseLost { id, in_hand: false } => {
                write!(f, "lease lost: {} was taken by a peer before it was handed out", Id(id))
            }
            Notice::LeaseLost { id, in_hand: true } => {
                write!(f, "lease lost: {} was taken by a peer while its handler ran", Id(id))
            }
            Notice::DeadLettered { id, deliveries, reason } => {
                let why = match reason {
                    DeadLetterReason::MaxDeliveries => "past the delivery cap",
                    DeadLetterReason::Verdict => "by the handler's verdict",
                    DeadLetterReason::CommitRefused => "its commit refused at the last allowed delivery",
                };
                let times = if *deliveries == 1 { "delivery" } else { "deliveries" };
                write!(f, "dead-lettered {} after {deliveries} {times}, {why}", Id(id))
            }
            Notice::CommitFenced { id, deliveries, holder: Some((owner, now)) } => write!(
                f,
                "commit of {} fenced off: handed out as delivery {deliveries}, it is now {}'s, \
                 delivery {now}; nothing written",
                Id(id),
                owner.escape_ascii()
            ),
            Notice::CommitFenced { id, holder: None, .. } => write!(
                f,
                "commit of {} fenced off: no longer pending (settled by a peer, or by this \
                 commit sent before its connection was lost); nothing written again",
                Id(id)
            ),
            Notice::CommitRefused { id, reason } => {
                write!(f, "commit of {} refused, nothing written (a failed delivery): {reason}", Id(id))
            }
            Notice::Twin { addr, idle } => write!(
                f,
                "another live connection ({addr}, idle {}) consumes under this consumer's name: \
                 entries will be handled twice",
                Secs(*idle)
            ),
            Notice::Refused { feature, reason } => {
                write!(f, "{feature} is off: the server refused it ({reason})")
            }
            Notice::Left { holding: 0 } => f.write_str("left the group (holding nothing)"),
            Notice::Left { holding } => {
                let entries = if *holding == 1 { "entry" } else { "entries" };
                write!(
                    f,
                    "stays in the group: it holds {holding} pending {entries}, for the peers' \
                     reclaims (`pelican retire` removes it once it holds none)"
                )
            }
            Notice::GroupRecreated { start, last_read } => {
                write!(
                    f,
                    "the group was gone (lost by the server, or deleted) and is created again at {}",
                    Id(start)
                )?;
                if let Some(last) = last_read {
                    write!(f, "; this consumer had read up to {}", Id(last))?;
                }
                match &start[..] {
                    b"$" => write!(
                        f,
                        ": entries added while it was gone are skipped, and its pending ones forgotten"
                    ),
                    _ => write!(f, ": entries after {} are delivered again", Id(start)),
                }
            }
            Notice::ReadShrunk { count, cause, handler } => {
                let entries = if *count == 1 { "entry" } else { "entries" };
                match cause {
                    ShrinkCause::SlowHandler => write!(
                        f,
                        "reads shrunk to {count} {entries}: handlers are slow ({} an entry, from hand-out \
                         to verdict)",
                        Secs(*handler)
                    ),
                    ShrinkCause::BigEntries => {
                        write!(f, "reads shrunk to {count} {entries}: entries are big")
                    }
                }
            }
        }
    }
}

impl fmt::Display for GroupHealth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "group: {} pending", self.pending)?;
        if let Some(oldest) = &self.oldest {
            write!(f, ", oldest {} old ({} ", Secs(oldest.age), Id(&oldest.id))?;
            match &oldest.owner {
                Some(owner) => write!(f, "held by {})", Id(owner))?,
                None => f.write_str("released, for any consumer)")?,
            }
        }
        if let Some(lag) = self.lag {
            write!(f, ", lag {lag}")?;
        }
        let s = if self.consumers == 1 { "" } else { "s" };
        write!(f, ", {} consumer{s}", self.consumers)
    }
}

/// A duration for messages: `250 ms`, `2.5 s`, `12 s`, `3 min 5 s`.
pub(crate) struct Secs(pub Duration);

impl fmt::Display for Secs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        match ms {
            0..=999 => write!(f, "{ms} ms"),
            1_000..=9_999 => write!(f, "{:.1} s", ms as f64 / 1000.0),
            10_000..=119_999 => write!(f, "{} s", ms / 1000),
            _ => write!(f, "{} min {} s", ms / 60_000, ms / 1000 % 60),
        }
    }
}

/// An entry id for messages (ids are ASCII; anything else is shown escaped).
struct Id<'a>(&'a Bytes);

impl fmt::Display for Id<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0.escape_ascii())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_entry() {
        let lost = Notice::LeaseLost { id: Bytes::from_static(b"1-0"), in_hand: true };
        assert_eq!(lost.to_string(), "lease lost: 1-0 was taken by a peer while its handler ran");
        let dead = Notice::DeadLettered {
            id: Bytes::from_static(b"5-1"),
            deliveries: 4,
            reason: DeadLetterReason::MaxDeliveries,
        };
        assert_eq!(dead.to_string(), "dead-lettered 5-1 after 4 deliveries, past the delivery cap");
        let once = Notice::DeadLettered {
            id: Bytes::from_static(b"5-2"),
            deliveries: 1,
            reason: DeadLetterReason::Verdict,
        };
        assert_eq!(once.to_string(), "dead-lettered 5-2 after 1 delivery, by the handler's verdict");
        let shrunk = Notice::ReadShrunk { count: 3, cause: ShrinkCause::BigEntries, handler: Duration::ZERO };
        assert_eq!(shrunk.to_string(), "reads shrunk to 3 entries: entries are big");
        let slow = Notice::ReadShrunk {
            count: 1,
            cause: ShrinkCause::SlowHandler,
            handler: Duration::from_millis(14),
        };
        assert_eq!(
            slow.to_string(),
            "reads shrunk to 1 entry: handlers are slow (14 ms an entry, from hand-out to verdict)"
        );
    }

    #[test]
    fn leaving_says_whether_it_left() {
        assert_eq!(Notice::Left { holding: 0 }.to_string(), "left the group (holding nothing)");
        assert_eq!(
            Notice::Left { holding: 1 }.to_string(),
            "stays in the group: it holds 1 pending entry, for the peers' reclaims \
             (`pelican retire` removes it once it holds none)"
        );
    }

    #[test]
    fn connection_and_health_messages() {
        let lost = Notice::ConnectionLost {
            reason: "Connection reset by peer (os error 104)".into(),
            retry_in: Duration::from_millis(250),
        };
        assert_eq!(
            lost.to_string(),
            "connection lost: Connection reset by peer (os error 104); reconnecting in 250 ms"
        );
        assert!(lost.is_trouble());
        let failed = Notice::ConnectFailed { reason: "refused".into(), retry_in: Duration::from_secs(5) };
        assert_eq!(failed.to_string(), "cannot connect: refused; retrying in 5.0 s");
        assert_eq!(Secs(Duration::from_millis(12_345)).to_string(), "12 s");
        let connected = Notice::Connected { reconnect: true, dialect: crate::Dialect::CLASSIC };
        assert!(!connected.is_trouble());
        assert_eq!(connected.to_string(), "reconnected");
        let dialect = crate::Dialect::of(b"redis", b"8.10.2");
        assert_eq!(
            Notice::Connected { reconnect: false, dialect }.to_string(),
            "connected (speaking XREADGROUP CLAIM, XNACK, XACKDEL, MAXSIZE)"
        );
        assert_eq!(
            Notice::Reclaimed { count: 1, released: 0 }.to_string(),
            "reclaimed 1 idle entry from their owners"
        );
        assert_eq!(
            Notice::Reclaimed { count: 0, released: 100 }.to_string(),
            "took over 100 entries their owners released"
        );
        assert_eq!(
            Notice::Reclaimed { count: 2, released: 1 }.to_string(),
            "reclaimed 2 idle entries from their owners and took over 1 they released"
        );
        let oldest = OldestPending {
            id: Bytes::from_static(b"1-0"),
            age: Duration::from_secs(185),
            idle: Some(Duration::from_secs(3)),
            deliveries: 2,
            owner: Some(Bytes::from_static(b"w1")),
        };
        let mut health =
            GroupHealth { pending: 4, lag: Some(10), consumers: 2, oldest: Some(oldest), dead_letters: None };
        assert_eq!(
            health.to_string(),
            "group: 4 pending, oldest 3 min 5 s old (1-0 held by w1), lag 10, 2 consumers"
        );
        if let Some(oldest) = &mut health.oldest {
            (oldest.owner, oldest.idle) = (None, None);
        }
        assert_eq!(
            health.to_string(),
            "group: 4 pending, oldest 3 min 5 s old (1-0 released, for any consumer), lag 10, 2 consumers"
        );
        let quiet = GroupHealth { pending: 0, lag: None, consumers: 1, oldest: None, dead_letters: None };
        assert_eq!(Notice::Health(quiet).to_string(), "group: 0 pending, 1 consumer");
    }
}
