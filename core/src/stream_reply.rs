//! `XREADGROUP` and `XAUTOCLAIM` replies parsed in one pass, straight into [`Entry`]s that
//! share the reply's bytes: no value tree, no copy, no allocation per entry.
//!
//! The frame has already been delimited by the decoder's scanner (lengths and CRLFs checked).
//! What is accepted is exactly what the tree parsers of [`reply`](crate::reply) accept after
//! `redis-protocol` has decoded the same bytes — they are the oracle this is tested against
//! (property test and fuzz target): on every input both give the same entries or both fail.

use std::ops::Range;

use bytes::Bytes;

use crate::config::Protocol;
use crate::entry::{Entry, Source};
use crate::reply::ShapeError;
use crate::span::{plain_span, Span};

/// One element of a read or claim reply's entry list.
#[derive(Debug, PartialEq)]
pub(crate) enum Item {
    /// A live entry. Its delivery count is 0 (unknown here), except from a read with
    /// `CLAIM` (Redis 8.4+), whose entries are `[id, fields, idle_ms, deliveries_before]`:
    /// then it is known, and one idle or delivered before is [`Source::Claimed`].
    Entry(Entry),
    /// `[id, nil]`: a pending entry whose message was deleted.
    Deleted(Bytes),
}

/// An `XAUTOCLAIM` reply but its claimed entries, which go to the callback.
#[derive(Debug, PartialEq)]
pub(crate) struct Claim {
    /// Where the next call continues; `0-0` when the sweep is done.
    pub cursor: Bytes,
    /// Redis 6.2's stand-ins for deleted entries: bare nils, no id.
    pub bare_nils: u64,
    /// Redis 7+/Valkey's third element: ids the server dropped from the PEL itself.
    pub deleted: Vec<Bytes>,
}

type Result<T> = std::result::Result<T, ShapeError>;

const TOO_LARGE: ShapeError = ShapeError("an entry of 4 GiB or more");

/// `XREADGROUP` for one stream or several: nil, `[[key, entries], …]` (RESP2) or
/// `{key: entries, …}` (RESP3); each entry goes to `each` in order, with its stream's key.
/// Returns how many there were. `spans` are the plain entries the decoder found in it (any,
/// in order; none is fine).
pub(crate) fn read(
    frame: &Bytes,
    spans: &[Span],
    protocol: Protocol,
    source: Source,
    mut each: impl FnMut(&[u8], Item),
) -> Result<usize> {
    let mut w = Walk { frame, at: 0, resp3: protocol == Protocol::Resp3, spans };
    let (streams, map) = match w.head()? {
        Head::Nil => return w.end(0),
        Head::Array(n) => (n, false),
        Head::Map(n) => (n, true),
        _ => return Err(ShapeError("XREADGROUP: neither nil, array nor map")),
    };
    let mut n = 0;
    for _ in 0..streams {
        if !map && w.head()? != Head::Array(2) {
            return Err(ShapeError("XREADGROUP: a stream is not [key, entries]"));
        }
        let key = w.bulk().map_err(|_| ShapeError("XREADGROUP: the stream key is not a string"))?;
        let key = &frame[key];
        n += w.entries(source, |item| each(key, item))?;
    }
    w.end(n)
}

/// `XAUTOCLAIM`: `[cursor, claimed]` (Redis 6.2) or `[cursor, claimed, deleted_ids]` (Redis 7+,
/// Valkey), chosen by length; each claimed entry goes to `each` in order.
pub(crate) fn autoclaim(
    frame: &Bytes,
    spans: &[Span],
    protocol: Protocol,
    mut each: impl FnMut(Item),
) -> Result<Claim> {
    let mut w = Walk { frame, at: 0, resp3: protocol == Protocol::Resp3, spans };
    let parts = match w.head()? {
        Head::Array(n @ 2..=3) => n,
        Head::Array(_) => return Err(ShapeError("XAUTOCLAIM: neither 2 nor 3 elements")),
        _ => return Err(ShapeError("XAUTOCLAIM: not an array")),
    };
    let cursor = w.bulk().map_err(|_| ShapeError("XAUTOCLAIM: cursor is not a string"))?;
    let Head::Array(claimed) = w.head()? else {
        return Err(ShapeError("XAUTOCLAIM: claimed is not an array"));
    };
    let mut bare_nils = 0;
    for _ in 0..claimed {
        let start = w.at;
        match w.head()? {
            Head::Nil => bare_nils += 1,
            _ => {
                w.at = start;
                each(w.entry(Source::Claimed)?);
            }
        }
    }
    let mut deleted = Vec::new();
    if parts == 3 {
        let Head::Array(n) = w.head()? else {
            return Err(ShapeError("XAUTOCLAIM: deleted ids are not an array"));
        };
        for _ in 0..n {
            deleted.push(frame.slice(w.bulk()?));
        }
    }
    w.end(Claim { cursor: frame.slice(cursor), bare_nils, deleted })
}

/// Past this "idle time" (about 31 years, in ms) a `CLAIM` read's entry was released, not
/// idle: `XNACK` leaves no delivery time, and the read reports the server's clock.
const RELEASED_IDLE_MS: u64 = 1_000_000_000_000;

/// What a `CLAIM` read says of an entry: its delivery count, and whether it was claimed
/// (idle, or delivered before) rather than new (`0, 0`), or released by its owner.
fn claimed(mut entry: Entry, claim: Option<(u64, u64)>) -> Entry {
    if let Some((idle, before)) = claim {
        entry.deliveries = before.saturating_add(1);
        if (idle, before) != (0, 0) {
            entry.source = Source::Claimed;
        }
        entry.released = idle >= RELEASED_IDLE_MS;
    }
    entry
}

/// An aggregate's or a scalar's header.
#[derive(Debug, PartialEq)]
enum Head {
    Nil,
    Array(usize),
    Map(usize),
    Bulk(usize),
    /// Anything else (numbers, simple strings, sets, pushes, attributes…).
    Other,
}

/// A cursor over one complete frame.
struct Walk<'a> {
    frame: &'a Bytes,
    at: usize,
    resp3: bool,
    /// The plain entries the decoder found, in order: the next one not yet passed first.
    spans: &'a [Span],
}

impl Walk<'_> {
    /// Reads the next header: its type and, for aggregates and bulk strings, the count.
    fn head(&mut self) -> Result<Head> {
        let b: &[u8] = self.frame;
        let kind = *b.get(self.at).ok_or(ShapeError("the reply ends early"))?;
        let start = self.at + 1;
        // The common case: a plain length and CRLF.
        let mut i = start;
        let mut n = 0usize;
        while let Some(d) = b.get(i).filter(|c| c.is_ascii_digit()) {
            n = n.saturating_mul(10).saturating_add(usize::from(d - b'0'));
            i += 1;
        }
        if i > start && b.get(i..i + 2) == Some(b"\r\n") {
            self.at = i + 2;
            return Ok(match kind {
                b'*' => Head::Array(n),
                b'%' if self.resp3 => Head::Map(n),
                b'$' => {
                    self.at += n + 2;
                    Head::Bulk(n)
                }
                // `redis-protocol` reads `_` as null whatever follows it, digits too.
                b'_' if self.resp3 => Head::Nil,
                _ => Head::Other,
            });
        }
        // Anything else is a whole line: a nil, a simple string, junk.
        let end = start + b[start..].windows(2).position(|w| w == b"\r\n").ok_or(ShapeError("bad line"))?;
        self.at = end + 2;
        Ok(match (kind, &b[start..end]) {
            (b'*' | b'$', b"-1") if !self.resp3 => Head::Nil,
            // `redis-protocol` reads `_` as null whatever follows it on the line; so do we.
            (b'_', _) if self.resp3 => Head::Nil,
            _ => Head::Other,
        })
    }

    /// A bulk string, where its bytes are in the frame.
    fn bulk(&mut self) -> Result<Range<usize>> {
        match self.head()? {
            Head::Bulk(n) => Ok(self.at - n - 2..self.at - 2),
            _ => Err(ShapeError("expected a string")),
        }
    }

    /// An entry list (nil or an array of entries), each to `each`; how many.
    fn entries(&mut self, source: Source, mut each: impl FnMut(Item)) -> Result<usize> {
        match self.head()? {
            Head::Nil => Ok(0),
            Head::Array(n) => {
                for _ in 0..n {
                    each(self.entry(source)?);
                }
                Ok(n)
            }
            _ => Err(ShapeError("XREADGROUP: entries are not an array")),
        }
    }

    /// `[id, [field, value, …]]` or `[id, nil]`.
    fn entry(&mut self, source: Source) -> Result<Item> {
        // Spans the walk has passed (found where it saw no entry) are of no use.
        while self.spans.first().is_some_and(|s| s.start < self.at) {
            self.spans = &self.spans[1..];
        }
        let span = match self.spans.split_first() {
            Some((span, rest)) if span.start == self.at => {
                self.spans = rest;
                Some(*span)
            }
            _ => plain_span(self.frame, self.at),
        };
        match span {
            Some(span) => {
                self.at = span.end;
                // The entry's bytes from its id's bulk string on (after `*2\r\n`).
                let from = span.start + 4;
                let raw = self.frame.slice(from..span.fields_end);
                let id = span.id_at - from;
                let fields_at = span.fields_at - from;
                Entry::from_reply(raw, id..id + span.id_len, fields_at, span.pairs, source)
                    .map(|e| Item::Entry(claimed(e, span.claim)))
                    .ok_or(TOO_LARGE)
            }
            None => self.any_entry(source),
        }
    }

    /// Any entry: the general path.
    fn any_entry(&mut self, source: Source) -> Result<Item> {
        let claim_read = match self.head()? {
            Head::Array(2) => false,
            Head::Array(4) => true,
            _ => return Err(ShapeError("entry is not [id, fields]")),
        };
        let start = self.at;
        let Head::Bulk(len) = self.head()? else { return Err(ShapeError("entry id is not a string")) };
        let id = self.at - len - 2..self.at - 2;
        let item = match self.head()? {
            Head::Nil => Item::Deleted(self.frame.slice(id)),
            Head::Array(n) if n % 2 == 0 => {
                let fields_at = self.at;
                for _ in 0..n {
                    if !matches!(self.head()?, Head::Bulk(_)) {
                        return Err(ShapeError("expected a string"));
                    }
                }
                let raw = self.frame.slice(start..self.at);
                let shift = |i: usize| i - start;
                let entry =
                    Entry::from_reply(raw, shift(id.start)..shift(id.end), shift(fields_at), n / 2, source)
                        .ok_or(TOO_LARGE)?;
                Item::Entry(entry)
            }
            Head::Array(_) => return Err(ShapeError("entry fields are not pairs")),
            _ => return Err(ShapeError("entry fields are not an array")),
        };
        if !claim_read {
            return Ok(item);
        }
        let claim = (self.number()?, self.number()?);
        Ok(match item {
            Item::Entry(entry) => Item::Entry(claimed(entry, Some(claim))),
            deleted => deleted,
        })
    }

    /// A number that is not negative (`:n`), read as `redis-protocol` reads it.
    fn number(&mut self) -> Result<u64> {
        const NOT: ShapeError = ShapeError("a CLAIM read's entry: idle time or count is not a number");
        let b: &[u8] = self.frame;
        if b.get(self.at) != Some(&b':') {
            return Err(NOT);
        }
        let start = self.at + 1;
        let end = start + b[start..].windows(2).position(|w| w == b"\r\n").ok_or(NOT)?;
        self.at = end + 2;
        let n = std::str::from_utf8(&b[start..end]).ok().and_then(|n| n.parse::<i64>().ok()).ok_or(NOT)?;
        u64::try_from(n).map_err(|_| NOT)
    }

    /// The reply must end here.
    fn end<T>(&self, value: T) -> Result<T> {
        if self.at == self.frame.len() {
            Ok(value)
        } else {
            Err(ShapeError("trailing bytes in the reply"))
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::config::Limits;
    use crate::decode::{Budget, Decoder, Frame};
    use crate::oracle::{agree, said_by_stream_parser};

    const FLAVORS: [&str; 4] = ["redis-6.2", "redis-7.0", "valkey-8.1", "redis-8.10"];
    const PROTOS: [(&str, Protocol); 2] = [("resp2", Protocol::Resp2), ("resp3", Protocol::Resp3)];

    fn fixture(flavor: &str, proto: &str, name: &str) -> Vec<u8> {
        let path = format!("{}/tests/fixtures/{flavor}/{proto}/{name}.resp", env!("CARGO_MANIFEST_DIR"));
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// A captured reply as the consumer gets it: raw bytes (an error reply comes decoded).
    fn raw(bytes: &[u8], protocol: Protocol) -> Bytes {
        let mut d = Decoder::new(Limits::default());
        d.extend(bytes);
        let budget = Budget { bytes: 1 << 20, skip: None, raw: true };
        match d.next_within(protocol, budget) {
            Ok(Some((Frame::Raw { bytes, .. }, _))) => bytes,
            other => panic!("{other:?}"),
        }
    }

    /// Ids, and whether each has fields, as read.
    fn ids(frame: &Bytes, protocol: Protocol) -> Vec<(String, bool)> {
        let said = said_by_stream_parser(frame, &[], protocol, false).unwrap();
        said.entries.iter().map(|(id, f, _)| (String::from_utf8(id.to_vec()).unwrap(), f.is_some())).collect()
    }

    fn owned(pairs: &[(&str, bool)]) -> Vec<(String, bool)> {
        pairs.iter().map(|(id, f)| (id.to_string(), *f)).collect()
    }

    #[test]
    fn captured_reads() {
        for flavor in FLAVORS {
            for (dir, p) in PROTOS {
                let read = |name: &str| raw(&fixture(flavor, dir, name), p);
                assert_eq!(ids(&read("read_new"), p), owned(&[("1-0", true), ("2-0", true), ("3-0", true)]));
                let mut fields = Vec::new();
                super::read(&read("read_new"), &[], p, Source::New, |_, item| {
                    if let Item::Entry(e) = item {
                        fields.push((e.field(b"f").map(<[u8]>::to_vec), e.source, e.len()));
                    }
                })
                .unwrap();
                assert_eq!(fields[1], (Some(b"v2".to_vec()), Source::New, 1), "{flavor} {dir}");
                assert_eq!(ids(&read("read_pending_page"), p), owned(&[("1-0", true), ("2-0", true)]));
                for empty in ["read_pending_empty", "count_zero", "read_new_nil"] {
                    assert_eq!(ids(&read(empty), p), vec![], "{flavor} {dir} {empty}");
                }
                // A deleted pending entry comes back as [id, nil] on every version.
                let deleted = owned(&[("1-0", true), ("2-0", false), ("3-0", true)]);
                assert_eq!(ids(&read("read_pending_deleted"), p), deleted, "{flavor}");
                // Only 6.2 moved the deleted id into the claimer's list.
                let after_claim = ids(&read("read_pending_after_claim"), p);
                if flavor == "redis-6.2" {
                    assert_eq!(after_claim, deleted);
                } else {
                    assert_eq!(after_claim, owned(&[("1-0", true), ("3-0", true)]), "{flavor}");
                }
                assert_eq!(
                    said_by_stream_parser(&read("read_new_big"), &[], p, false).unwrap().entries.len(),
                    3
                );
            }
        }
    }

    /// Redis 8.10's reads with `CLAIM`: `[id, fields, idle, count]`, claimed first.
    #[test]
    fn captured_claim_reads() {
        for (dir, p) in PROTOS {
            let read = |name: &str| raw(&fixture("redis-8.10", dir, name), p);
            let mut got = Vec::new();
            super::read(&read("read_claim"), &[], p, Source::New, |_, item| {
                if let Item::Entry(e) = item {
                    got.push((e.id_bytes(), e.source, e.deliveries, e.field(b"f").map(<[u8]>::to_vec)));
                }
            })
            .unwrap();
            let want = [
                (Bytes::from("1-0"), Source::Claimed, 2, Some(b"v1".to_vec())),
                (Bytes::from("2-0"), Source::Claimed, 2, Some(b"v2".to_vec())),
                (Bytes::from("3-0"), Source::New, 1, Some(b"v3".to_vec())),
            ];
            assert_eq!(got, want, "{dir}");
            assert_eq!(ids(&read("read_claim_none"), p), vec![], "{dir}");
            // Released by XNACK FAIL with 2 deliveries: idle is the server's clock.
            let said = said_by_stream_parser(&read("read_claim_released"), &[], p, false).unwrap();
            assert_eq!(said.entries.len(), 1);
            assert_eq!(said.entries[0].2, Some((true, 3)), "{dir}");
            let released = |name: &str| {
                let mut flags = Vec::new();
                super::read(&read(name), &[], p, Source::New, |_, item| {
                    if let Item::Entry(e) = item {
                        flags.push(e.released);
                    }
                })
                .unwrap();
                flags
            };
            assert_eq!(released("read_claim_released"), [true], "{dir}: released, not idle");
            assert_eq!(released("read_claim"), [false; 3], "{dir}");
            // The fast scan finds the same entries.
            let frame = read("read_claim");
            let spans: Vec<Span> = (0..frame.len()).filter_map(|at| plain_span(&frame, at)).collect();
            assert_eq!(spans.len(), 3, "{dir}");
            assert_eq!(spans[0].claim.map(|(_, n)| n), Some(1));
            assert_eq!(spans[2].claim, Some((0, 0)));
            assert_eq!(
                said_by_stream_parser(&frame, &spans, p, false),
                said_by_stream_parser(&frame, &[], p, false)
            );
        }
    }

    #[test]
    fn captured_claims() {
        for flavor in FLAVORS {
            for (dir, p) in PROTOS {
                let claim = |name: &str| {
                    said_by_stream_parser(&raw(&fixture(flavor, dir, name), p), &[], p, true).unwrap()
                };
                let c = claim("autoclaim");
                let (cursor, bare_nils, deleted) = c.claim.unwrap();
                assert_eq!(&cursor[..], b"0-0");
                let got: Vec<&[u8]> = c.entries.iter().map(|(id, ..)| &id[..]).collect();
                assert_eq!(got, [&b"1-0"[..], b"3-0"], "{flavor}");
                if flavor == "redis-6.2" {
                    assert_eq!((bare_nils, deleted.len()), (1, 0));
                } else {
                    assert_eq!((bare_nils, deleted), (0, vec![Bytes::from("2-0")]), "{flavor}");
                }
                let (cursor, ..) = claim("autoclaim_scan_cursor").claim.unwrap();
                assert_eq!(&cursor[..], b"11-0", "{flavor}");
                let done = claim("autoclaim_done");
                assert_eq!((&done.claim.unwrap().0[..], done.entries.len()), (&b"0-0"[..], 0));
            }
        }
    }

    /// Every captured reply, read as a read and as a claim, whole and split: the one-pass
    /// parser agrees with the tree parsers.
    #[test]
    fn captured_replies_agree_with_the_oracle() {
        let dir = format!("{}/tests/fixtures", env!("CARGO_MANIFEST_DIR"));
        for flavor in FLAVORS {
            for (proto, p) in PROTOS {
                for file in std::fs::read_dir(format!("{dir}/{flavor}/{proto}")).unwrap() {
                    let bytes = std::fs::read(file.unwrap().path()).unwrap();
                    for chunk in [1, 7, bytes.len().max(1)] {
                        agree(&bytes, p, chunk, false);
                        agree(&bytes, p, chunk, true);
                    }
                }
            }
        }
    }

    /// Parts from which replies are built: what servers send, and what they never do.
    fn part() -> impl Strategy<Value = &'static [u8]> {
        prop::sample::select(vec![
            &b"*1\r\n"[..],
            b"*2\r\n",
            b"*3\r\n",
            b"*0\r\n",
            b"*-1\r\n",
            b"$-1\r\n",
            b"_\r\n",
            b"%1\r\n",
            b"%2\r\n",
            b"$1\r\ns\r\n",
            b"$3\r\n1-0\r\n",
            b"$3\r\n2-0\r\n",
            b"$3\r\n0-0\r\n",
            b"$1\r\nf\r\n",
            b"$2\r\nv1\r\n",
            b"$0\r\n\r\n",
            b"+OK\r\n",
            b":1\r\n",
            b"~1\r\n",
            b">1\r\n",
            b"|1\r\n+a\r\n+b\r\n",
            b"=7\r\ntxt:abc\r\n",
            b"-ERR no\r\n",
            b"#t\r\n",
        ])
    }

    /// A read reply as the servers shape it, with its entries.
    fn read_reply(entries: &[(u8, Option<u8>)], resp3: bool) -> Vec<u8> {
        let mut out: Vec<u8> =
            if resp3 { b"%1\r\n$1\r\ns\r\n".to_vec() } else { b"*1\r\n*2\r\n$1\r\ns\r\n".to_vec() };
        out.extend(format!("*{}\r\n", entries.len()).bytes());
        for (id, fields) in entries {
            out.extend(format!("*2\r\n$3\r\n{id}-0\r\n").bytes());
            match fields {
                None if resp3 => out.extend(b"_\r\n"),
                None => out.extend(b"*-1\r\n"),
                Some(n) => {
                    out.extend(format!("*{}\r\n", 2 * n).bytes());
                    for i in 0..*n {
                        out.extend(format!("$2\r\nf{i}\r\n$3\r\nv{i:02}\r\n").bytes());
                    }
                }
            }
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Replies as servers shape them, then mutated (bytes flipped, parts spliced in), in
        /// any split: the one-pass parser and the oracle agree on each, as a read and as a
        /// claim.
        #[test]
        fn both_parsers_agree_on_any_input_in_any_split(
            entries in prop::collection::vec((0u8..10, prop::option::of(0u8..4)), 0..6),
            resp3 in any::<bool>(),
            splices in prop::collection::vec((any::<prop::sample::Index>(), part()), 0..3),
            flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..2),
            chunk in 1usize..40,
            claim in any::<bool>(),
        ) {
            let mut bytes = if claim {
                let mut c = b"*3\r\n$3\r\n0-0\r\n".to_vec();
                let r = read_reply(&entries, false);
                // The claimed list is the read's entry list: skip `*1 *2 $1 s`.
                c.extend_from_slice(&r[15..]);
                c.extend_from_slice(b"*1\r\n$3\r\n9-0\r\n");
                c
            } else {
                read_reply(&entries, resp3)
            };
            for (at, part) in splices {
                let i = at.index(bytes.len() + 1);
                bytes.splice(i..i, part.iter().copied());
            }
            for (at, b) in flips {
                let i = at.index(bytes.len());
                bytes[i] = b;
            }
            let protocol = if resp3 { Protocol::Resp3 } else { Protocol::Resp2 };
            agree(&bytes, protocol, chunk, claim);
            agree(&bytes, protocol, bytes.len().max(1), !claim);
        }
    }
}
