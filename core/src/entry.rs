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
}

impl Entry {
    /// An entry, for tests of handlers.
    pub fn new(id: impl Into<Bytes>, fields: Vec<(Bytes, Bytes)>, source: Source) -> Entry {
        Entry { id: id.into(), fields, source }
    }

    /// The value of the first field called `name`.
    pub fn field(&self, name: &[u8]) -> Option<&Bytes> {
        self.fields.iter().find(|(f, _)| f == name).map(|(_, v)| v)
    }
}

/// The application's verdict on the entry in hand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Done: `XACK` it (batched, sent before the next read).
    Ack,
    /// Not done: leave it pending. It comes back after `min_idle` via `XAUTOCLAIM`, or at the
    /// next drain (restart, reconnect). At-least-once: handlers must be idempotent.
    Retry,
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
    }
}
