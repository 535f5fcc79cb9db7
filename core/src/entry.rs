//! What the application is handed, and what it answers.

use std::fmt;
use std::ops::Range;

use bytes::{BufMut, Bytes, BytesMut};

use crate::decimal::Decimal;
use crate::writes::Writes;

/// Which path brought an entry to this consumer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Source {
    /// This consumer's own pending entries list, drained at (re)start: its own backlog.
    Pending,
    /// Reclaimed with `XAUTOCLAIM` after sitting idle past `min_idle` (a dead peer's, or this
    /// consumer's own retried entry).
    Claimed,
    /// A new entry, read with `>`.
    New,
}

impl Source {
    /// Its name in the command line's output and in the `--pipe` lines: `pending`, `claimed`
    /// or `new`.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Pending => "pending",
            Source::Claimed => "claimed",
            Source::New => "new",
        }
    }
}

/// A stream entry handed to the application.
///
/// It holds its part of the server's reply as it arrived (one reference-counted [`Bytes`],
/// no copy) and reads the id and the fields from it when asked: [`id`](Self::id),
/// [`fields`](Self::fields), [`field`](Self::field). Cloning it is cheap.
#[derive(Clone)]
#[non_exhaustive]
pub struct Entry {
    /// The entry's bytes in the reply: the id's bulk string, then the fields' array header
    /// and the fields' bulk strings (RESP). Offsets into it are `u32` (an entry is less than
    /// 4 GiB), which keeps an entry within a cache line.
    raw: Bytes,
    /// Where the id's bytes start and end within `raw`.
    id: (u32, u32),
    /// Where the first field's header starts within `raw`.
    fields_at: u32,
    /// Field/value pairs.
    pairs: u32,
    /// How it reached this consumer.
    pub source: Source,
    /// How many times the group has delivered it, this delivery included, by the server's
    /// count: 1 for a new entry; for a drained or reclaimed one, what `XPENDING` says right
    /// after the read. Entries read but dropped unhandled (a stop, a lost connection) get
    /// their counts given back; one in hand when the process died keeps that delivery. A
    /// restart from AOF forgets counts raised by drains.
    pub deliveries: u64,
    /// Released by its owner (`XNACK`, Redis 8.8+) rather than found idle: a `CLAIM` read
    /// gives such an entry the server's clock as its idle time. Only for what is told.
    pub(crate) released: bool,
    /// Which of the consumer's streams it came from: its index there.
    pub(crate) stream: u32,
    /// That stream's key, set as it is handed out (shared, not copied).
    pub(crate) stream_key: Bytes,
}

impl Entry {
    /// An entry from its parts (`raw` as the reply parser found it); `None` if it is 4 GiB
    /// or larger.
    pub(crate) fn from_reply(
        raw: Bytes,
        id: Range<usize>,
        fields_at: usize,
        pairs: usize,
        source: Source,
    ) -> Option<Entry> {
        u32::try_from(raw.len()).ok()?;
        // All within `raw`, so all fit.
        let (id, fields_at, pairs) = ((id.start as u32, id.end as u32), fields_at as u32, pairs as u32);
        Some(Entry {
            raw,
            id,
            fields_at,
            pairs,
            source,
            deliveries: 0,
            released: false,
            stream: 0,
            stream_key: Bytes::new(),
        })
    }

    /// A new entry delivered once, for tests of handlers: `fields` are its name/value pairs.
    ///
    /// # Panics
    ///
    /// If the entry would take 4 GiB or more.
    pub fn new<N, V>(id: impl AsRef<[u8]>, fields: impl IntoIterator<Item = (N, V)>, source: Source) -> Entry
    where
        N: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        let mut out = BytesMut::new();
        bulk(&mut out, id.as_ref());
        let id_len = id.as_ref().len();
        let id_at = out.len() - id_len - 2;
        let mut body = BytesMut::new();
        let mut pairs = 0;
        for (name, value) in fields {
            bulk(&mut body, name.as_ref());
            bulk(&mut body, value.as_ref());
            pairs += 1;
        }
        out.put_u8(b'*');
        out.put_slice(Decimal::new(2 * pairs as u64).as_bytes());
        out.put_slice(b"\r\n");
        let fields_at = out.len();
        out.put_slice(&body);
        let raw = out.freeze();
        let entry = Entry::from_reply(raw, id_at..id_at + id_len, fields_at, pairs, source);
        entry.expect("an entry under 4 GiB").with_deliveries(1)
    }

    /// The same entry with another delivery count, for tests of handlers.
    #[must_use]
    pub fn with_deliveries(mut self, deliveries: u64) -> Entry {
        self.deliveries = deliveries;
        self
    }

    fn id_range(&self) -> Range<usize> {
        self.id.0 as usize..self.id.1 as usize
    }

    /// The entry id, e.g. `1700000000000-0`.
    pub fn id(&self) -> &[u8] {
        &self.raw[self.id_range()]
    }

    /// The entry's bytes, which start with its id as the bulk string it came as
    /// (`$<n>\r\n<id>\r\n`), and the id's place in them.
    pub(crate) fn id_parts(&self) -> (&[u8], Range<usize>) {
        (&self.raw, self.id_range())
    }

    /// The key of the stream it came from (empty for an entry made with [`Entry::new`]).
    pub fn stream(&self) -> &[u8] {
        &self.stream_key
    }

    /// The entry id as its own [`Bytes`] (sharing the reply's bytes, no copy).
    pub fn id_bytes(&self) -> Bytes {
        self.raw.slice(self.id_range())
    }

    /// The field/value pairs, in stream order (a name may repeat).
    pub fn fields(&self) -> Fields<'_> {
        Fields { raw: &self.raw, at: self.fields_at as usize, left: self.pairs as usize }
    }

    /// The value of the first field called `name`.
    pub fn field(&self, name: &[u8]) -> Option<&[u8]> {
        self.fields().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    /// A field's value as its own [`Bytes`] (sharing the reply's bytes, no copy).
    pub fn field_bytes(&self, name: &[u8]) -> Option<Bytes> {
        self.field(name).map(|v| self.raw.slice_ref(v))
    }

    /// `part` (a slice of this entry's bytes) as its own `Bytes`.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn raw_slice(&self, part: &[u8]) -> Bytes {
        self.raw.slice_ref(part)
    }

    /// How many field/value pairs it has.
    pub fn len(&self) -> usize {
        self.pairs as usize
    }

    /// True if it has no fields (servers never send such an entry; [`Entry::new`] can make one).
    pub fn is_empty(&self) -> bool {
        self.pairs == 0
    }
}

/// The field/value pairs of an [`Entry`], read from its bytes as iterated.
#[derive(Clone, Debug)]
pub struct Fields<'a> {
    raw: &'a [u8],
    at: usize,
    left: usize,
}

impl<'a> Iterator for Fields<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let name = next_bulk(self.raw, &mut self.at);
        let value = next_bulk(self.raw, &mut self.at);
        Some((name, value))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Fields<'_> {}

/// The bulk string at `*at` (`$<len>\r\n<bytes>\r\n`, checked when the reply was parsed);
/// moves `*at` past it.
fn next_bulk<'a>(raw: &'a [u8], at: &mut usize) -> &'a [u8] {
    let mut i = *at + 1;
    let mut len = 0usize;
    while let Some(d) = raw.get(i).filter(|b| b.is_ascii_digit()) {
        len = len * 10 + usize::from(d - b'0');
        i += 1;
    }
    let start = (i + 2).min(raw.len());
    let end = (start + len).min(raw.len());
    *at = end + 2;
    &raw[start..end]
}

fn bulk(out: &mut BytesMut, s: &[u8]) {
    out.put_u8(b'$');
    out.put_slice(Decimal::new(s.len() as u64).as_bytes());
    out.put_slice(b"\r\n");
    out.put_slice(s);
    out.put_slice(b"\r\n");
}

impl PartialEq for Entry {
    fn eq(&self, other: &Entry) -> bool {
        self.id() == other.id()
            && self.source == other.source
            && self.deliveries == other.deliveries
            && self.pairs == other.pairs
            && self.fields().eq(other.fields())
    }
}

impl Eq for Entry {}

impl fmt::Debug for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Text<'a>(&'a [u8]);
        impl fmt::Debug for Text<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "\"{}\"", self.0.escape_ascii())
            }
        }
        f.debug_struct("Entry")
            .field("id", &Text(self.id()))
            .field("fields", &self.fields().map(|(n, v)| (Text(n), Text(v))).collect::<Vec<_>>())
            .field("source", &self.source)
            .field("deliveries", &self.deliveries)
            .finish()
    }
}

/// The application's verdict on the entry in hand.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Verdict {
    /// Done: `XACK` it (promptly, see [`Config::ack_delay`](crate::Config::ack_delay)).
    Ack,
    /// Not done: it comes back later, to this consumer or a peer, as
    /// [`Config::on_retry`](crate::Config::on_retry) says — by default after a wait that
    /// grows with its deliveries ([`RetryBackoff`](crate::RetryBackoff): 1 s, 2 s, 4 s… up to
    /// `min_idle`), as a [`RetryAfter`](Verdict::RetryAfter) of that wait. At-least-once:
    /// handlers must be idempotent. With
    /// [`Config::max_deliveries`](crate::Config::max_deliveries) set, an entry retried too
    /// often goes to the dead-letter stream instead of coming back.
    Retry,
    /// It can never be processed: move it to the dead-letter stream now
    /// ([`Config::dead_letter`](crate::Config::dead_letter), which this verdict requires: without
    /// it the consumer fails with [`Error::NoDeadLetter`](crate::Error::NoDeadLetter) and the
    /// entry stays pending).
    DeadLetter,
    /// Done, with these writes (the handler's output): made together with the ack in one
    /// server-side step, and only if the entry is still this consumer's with the delivery it
    /// was handed out with — a peer that reclaimed it meanwhile fences this commit off, and
    /// nothing is written ([`Notice::CommitFenced`](crate::Notice::CommitFenced)). A write
    /// that would fail (a key of another type) leaves the entry pending, nothing written
    /// ([`Notice::CommitRefused`](crate::Notice::CommitRefused)). Batched like acks. See
    /// [`Writes`] and the guarantee in [`commit`](crate::commit).
    Commit(Writes),
    /// Not handled, and not failed either: the handler cannot finish it now (its process is
    /// being stopped past a deadline). It is given back to the group at once, for any
    /// consumer to take: released (`XNACK … FAIL`, Redis 8.8+) where it is surely still this
    /// consumer's, else made claimable by a peer's next reclaim (`XCLAIM … JUSTID IDLE`,
    /// owner-checked, as a stop gives back what it read ahead). Unlike a stop's give-back, its
    /// delivery stays counted: a handler that hangs on an entry every time still brings it to
    /// [`Config::max_deliveries`](crate::Config::max_deliveries). Not held back by
    /// [`Config::on_retry`](crate::Config::on_retry) (it is no failure of the entry's). Not
    /// given back if a peer took it meanwhile; while the connection is down, given back once
    /// it is up again — unless a stop ends first, and then it stays pending, as after a
    /// crash.
    GiveBack,
    /// Not done, and not to be tried again before this long: handed out again — to this
    /// consumer or a peer — no earlier than the delay after the verdict, and soon after it is
    /// due (the next reclaim, a beat at most; at once on Redis 8.4+, whose parked reads
    /// wake for it), on every server. A `Retry` that waits ([`OnRetry::Backoff`](crate::OnRetry::Backoff)) is one.
    ///
    /// The server keeps the wait, not this process: the entry is *parked* — claimed
    /// (owner-checked, as a lease renewal is) to the group's consumer
    /// [`PARKING_CONSUMER`](crate::PARKING_CONSUMER) with its idle time set to `min_idle`
    /// less the delay (`XCLAIM … JUSTID RETRYCOUNT n IDLE ms`), so that any consumer's
    /// reclaim takes it once the delay has passed, and this consumer's drain after a restart
    /// does not find it. Its delivery stays counted; the one that takes it counts the next.
    ///
    /// A delay longer than `min_idle` cannot be set so at once (the server counts idle time
    /// from now, never from the future): the entry is parked idle 0 and parked again every
    /// lease while this consumer runs, until what is left fits. If this process stops or
    /// dies meanwhile, the entry comes back `min_idle` after its last park (no earlier than
    /// `min_idle − lease` after the process ended), not at its due time. Delays of at most
    /// `min_idle` survive any crash.
    ///
    /// Before the park is made the entry is still this consumer's: a crash then (or a
    /// failover that loses the park) brings it back at the next drain, as a plain `Retry`
    /// would. A delay over 365 days is taken as 365 days.
    RetryAfter(std::time::Duration),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_read_from_the_bytes() {
        let e = Entry::new("1-0", [("a", "1"), ("a", "2"), ("", "long value")], Source::New);
        assert_eq!(e.id(), b"1-0");
        assert_eq!(&e.id_bytes()[..], b"1-0");
        assert_eq!(e.len(), 3);
        let all: Vec<(&[u8], &[u8])> = e.fields().collect();
        assert_eq!(all, [(&b"a"[..], &b"1"[..]), (b"a", b"2"), (b"", b"long value")]);
        assert_eq!(e.field(b"a"), Some(&b"1"[..]), "the first of a repeated name");
        assert_eq!(e.field(b"b"), None);
        assert_eq!(e.field_bytes(b""), Some(Bytes::from_static(b"long value")));
        assert_eq!((e.deliveries, e.clone().with_deliveries(3).deliveries), (1, 3));
        assert_eq!(e.fields().len(), 3);
    }

    #[test]
    fn equality_is_by_content() {
        let a = Entry::new("1-0", [("f", "v")], Source::New);
        assert_eq!(a, Entry::new(b"1-0", [(b"f", b"v")], Source::New));
        assert_ne!(a, Entry::new("1-0", [("f", "w")], Source::New));
        assert_ne!(a, a.clone().with_deliveries(2));
        assert_eq!(
            format!("{a:?}"),
            r#"Entry { id: "1-0", fields: [("f", "v")], source: New, deliveries: 1 }"#
        );
        assert!(Entry::new("2-0", Vec::<(&str, &str)>::new(), Source::Pending).is_empty());
    }
}
