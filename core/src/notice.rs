//! Happenings worth telling the application or the operator about, that need no answer.

use std::fmt;

use bytes::Bytes;

/// Something that happened to the consumer's entries, reported through
/// [`Event::Notice`](crate::Event::Notice) and counted in [`Stats`](crate::Stats).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Notice {
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
    /// Reads now ask for fewer entries.
    ReadShrunk {
        /// Entries per read from now on (it grows back as the cause passes).
        count: u32,
        /// Why.
        cause: ShrinkCause,
    },
}

/// Why an entry went to the dead-letter stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DeadLetterReason {
    /// Delivered more than [`Config::max_deliveries`](crate::Config::max_deliveries) times.
    MaxDeliveries,
    /// The handler said [`Verdict::DeadLetter`](crate::Verdict::DeadLetter).
    Verdict,
}

impl DeadLetterReason {
    /// The word written in the dead-letter entry's `pelican-reason` field.
    pub fn as_str(self) -> &'static str {
        match self {
            DeadLetterReason::MaxDeliveries => "max-deliveries",
            DeadLetterReason::Verdict => "verdict",
        }
    }
}

/// Why reads were made smaller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ShrinkCause {
    /// Handlers are slow: a full read would not be handed out within the lease.
    SlowHandler,
    /// Entries are big: a full read would pass [`Config::read_bytes`](crate::Config::read_bytes).
    BigEntries,
}

impl fmt::Display for Notice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
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
                };
                write!(f, "dead-lettered {} after {deliveries} deliveries, {why}", Id(id))
            }
            Notice::ReadShrunk { count, cause } => {
                let why = match cause {
                    ShrinkCause::SlowHandler => "handlers are slow",
                    ShrinkCause::BigEntries => "entries are big",
                };
                let entries = if *count == 1 { "entry" } else { "entries" };
                write!(f, "reads shrunk to {count} {entries}: {why}")
            }
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
        let shrunk = Notice::ReadShrunk { count: 3, cause: ShrinkCause::BigEntries };
        assert_eq!(shrunk.to_string(), "reads shrunk to 3 entries: entries are big");
    }
}
