//! What the application is handed, and what it answers.

use bytes::Bytes;

/// Which path brought an entry to this consumer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// This consumer's own pending entries list, drained at (re)start: its own backlog.
    Pending,
    /// Reclaimed with `XAUTOCLAIM` after sitting idle past `min_idle` (a dead peer's, or this
    /// consumer's own retried entry).
    Claimed,
    /// A new entry, read with `>`.
    New,
}

/// A stream entry handed to the application. Fields are zero-copy slices of the read buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Entry {
    /// The entry id, e.g. `1700000000000-0`.
    pub id: Bytes,
    /// Field/value pairs in stream order.
    pub fields: Vec<(Bytes, Bytes)>,
    /// How it reached this consumer.
    pub source: Source,
    /// How many times the group has delivered it, this delivery included, by the server's
    /// count: 1 for a new entry; for a drained or reclaimed one, what `XPENDING` says right
    /// after the read. Approximate in two ways the servers impose: a drain after a reconnect
    /// counts entries that were read but never handed out, and a restart from AOF forgets
    /// counts raised by drains.
    pub deliveries: u64,
}

impl Entry {
    /// A new entry delivered once, for tests of handlers.
    pub fn new(id: impl Into<Bytes>, fields: Vec<(Bytes, Bytes)>, source: Source) -> Entry {
        Entry { id: id.into(), fields, source, deliveries: 1 }
    }

    /// The same entry with another delivery count, for tests of handlers.
    pub fn with_deliveries(mut self, deliveries: u64) -> Entry {
        self.deliveries = deliveries;
        self
    }

    /// The value of the first field called `name`.
    pub fn field(&self, name: &[u8]) -> Option<&Bytes> {
        self.fields.iter().find(|(f, _)| f == name).map(|(_, v)| v)
    }
}

/// The application's verdict on the entry in hand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Verdict {
    /// Done: `XACK` it (promptly, see [`Config::ack_delay`](crate::Config::ack_delay)).
    Ack,
    /// Not done: leave it pending. It comes back after `min_idle` via `XAUTOCLAIM`, or at the
    /// next drain (restart, reconnect). At-least-once: handlers must be idempotent. With
    /// [`Config::max_deliveries`](crate::Config::max_deliveries) set, an entry retried too
    /// often goes to the dead-letter stream instead of coming back.
    Retry,
    /// It can never be processed: move it to the dead-letter stream now
    /// ([`Config::dead_letter`](crate::Config::dead_letter), which this verdict requires: without
    /// it the consumer fails with [`Error::NoDeadLetter`](crate::Error::NoDeadLetter) and the
    /// entry stays pending).
    DeadLetter,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_lookup_takes_the_first() {
        let e = Entry::new(
            "1-0",
            vec![(Bytes::from("a"), Bytes::from("1")), (Bytes::from("a"), Bytes::from("2"))],
            Source::New,
        );
        assert_eq!(e.field(b"a"), Some(&Bytes::from("1")));
        assert_eq!(e.field(b"b"), None);
        assert_eq!((e.deliveries, e.with_deliveries(3).deliveries), (1, 3));
    }
}
