//! The tree parsers of read and claim replies: `redis-protocol` decodes the frame into a
//! value tree, and these walk it. The consumer reads entries with the one-pass parser of
//! [`stream_reply`](crate::stream_reply); these are the oracle it is checked against (property
//! test, fuzz target, captured replies): both accept exactly the same replies.

use bytes::Bytes;

use crate::config::{Limits, Protocol};
use crate::decode::{Budget, Decoder, Frame, Value};
use crate::reply::{string, ShapeError};
use crate::span::Span;

type Result<T> = std::result::Result<T, ShapeError>;

/// One entry of a read or claim reply. `fields == None` is a pending entry whose message was
/// deleted (`XDEL`/`XTRIM`): the server answers `[id, nil]`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RawEntry {
    pub id: Bytes,
    pub fields: Option<Vec<(Bytes, Bytes)>>,
    /// A `CLAIM` read's `[id, fields, idle_ms, deliveries_before]`: the two numbers.
    pub claim: Option<(u64, u64)>,
}

/// An `XAUTOCLAIM` reply, either shape.
#[derive(Debug, PartialEq)]
pub(crate) struct AutoClaim {
    /// Where the next call continues; `0-0` when the sweep is done.
    pub cursor: Bytes,
    pub claimed: Vec<RawEntry>,
    /// Redis 6.2's stand-ins for deleted entries: bare nils, no id (the ids moved to our PEL).
    pub bare_nils: u64,
    /// Redis 7+/Valkey's third element: ids the server dropped from the PEL itself.
    pub deleted: Vec<Bytes>,
}

/// `XREADGROUP` for one stream or several, every stream's entries in order (see
/// [`read_streams`]).
pub(crate) fn read(value: Value) -> Result<Vec<RawEntry>> {
    Ok(read_streams(value)?.into_iter().flat_map(|(_, entries)| entries).collect())
}

/// `XREADGROUP`: nil (nothing new), `[[key, entries], …]` (RESP2) or `{key: entries, …}`
/// (RESP3): each stream's key and entries. An empty entry list reads like nil.
pub(crate) fn read_streams(value: Value) -> Result<Vec<(Bytes, Vec<RawEntry>)>> {
    let streams: Vec<(Value, Value)> = match value {
        Value::Nil => return Ok(Vec::new()),
        Value::Array(streams) => streams
            .into_iter()
            .map(|s| match s {
                Value::Array(pair) => pair_of(pair),
                _ => Err(ShapeError("XREADGROUP: a stream is not [key, entries]")),
            })
            .collect::<Result<_>>()?,
        Value::Map(streams) => streams,
        _ => return Err(ShapeError("XREADGROUP: neither nil, array nor map")),
    };
    streams
        .into_iter()
        .map(|(key, entries)| {
            let Value::Str(key) = key else {
                return Err(ShapeError("XREADGROUP: the stream key is not a string"));
            };
            let entries = match entries {
                Value::Nil => Vec::new(),
                Value::Array(items) => items.into_iter().map(entry).collect::<Result<_>>()?,
                _ => return Err(ShapeError("XREADGROUP: entries are not an array")),
            };
            Ok((key, entries))
        })
        .collect()
}

fn pair_of(pair: Vec<Value>) -> Result<(Value, Value)> {
    let mut it = pair.into_iter();
    match (it.next(), it.next(), it.next()) {
        (Some(a), Some(b), None) => Ok((a, b)),
        _ => Err(ShapeError("expected a pair")),
    }
}

/// `[id, [field, value, …]]` or `[id, nil]`, and from a read with `CLAIM` (Redis 8.4+) the
/// same with two numbers after: `[id, fields, idle_ms, deliveries_before]`.
fn entry(value: Value) -> Result<RawEntry> {
    let Value::Array(mut pair) = value else { return Err(ShapeError("entry is not [id, fields]")) };
    let claim = match pair.len() {
        4 => match (pair.pop(), pair.pop()) {
            (Some(Value::Int(before)), Some(Value::Int(idle))) if before >= 0 && idle >= 0 => {
                Some((idle as u64, before as u64))
            }
            _ => return Err(ShapeError("a CLAIM read's entry: idle time or count is not a number")),
        },
        _ => None,
    };
    let (id, fields) = pair_of(pair).map_err(|_| ShapeError("entry is not [id, fields]"))?;
    let Value::Str(id) = id else { return Err(ShapeError("entry id is not a string")) };
    // Fields are a flat array in RESP3 too (PROTOCOL.md 19).
    let fields = match fields {
        Value::Nil => None,
        Value::Array(flat) => Some(field_pairs(flat)?),
        _ => return Err(ShapeError("entry fields are not an array")),
    };
    Ok(RawEntry { id, fields, claim })
}

fn field_pairs(flat: Vec<Value>) -> Result<Vec<(Bytes, Bytes)>> {
    if flat.len() % 2 != 0 {
        return Err(ShapeError("entry fields are not pairs"));
    }
    let mut out = Vec::with_capacity(flat.len() / 2);
    let mut it = flat.into_iter();
    while let (Some(f), Some(v)) = (it.next(), it.next()) {
        out.push((string(f)?, string(v)?));
    }
    Ok(out)
}

/// `XAUTOCLAIM`: `[cursor, claimed]` (Redis 6.2) or `[cursor, claimed, deleted_ids]`
/// (Redis 7+, Valkey), chosen by length, not by server version.
pub(crate) fn autoclaim(value: Value) -> Result<AutoClaim> {
    let Value::Array(parts) = value else { return Err(ShapeError("XAUTOCLAIM: not an array")) };
    if !(2..=3).contains(&parts.len()) {
        return Err(ShapeError("XAUTOCLAIM: neither 2 nor 3 elements"));
    }
    let mut it = parts.into_iter();
    let cursor = string(it.next().unwrap_or(Value::Nil))
        .map_err(|_| ShapeError("XAUTOCLAIM: cursor is not a string"))?;
    let Some(Value::Array(items)) = it.next() else {
        return Err(ShapeError("XAUTOCLAIM: claimed is not an array"));
    };
    let mut claimed = Vec::with_capacity(items.len());
    let mut bare_nils = 0;
    for item in items {
        match item {
            Value::Nil => bare_nils += 1,
            other => claimed.push(entry(other)?),
        }
    }
    let deleted = match it.next() {
        None => Vec::new(),
        Some(Value::Array(ids)) => ids.into_iter().map(string).collect::<Result<_>>()?,
        Some(_) => return Err(ShapeError("XAUTOCLAIM: deleted ids are not an array")),
    };
    Ok(AutoClaim { cursor, claimed, bare_nils, deleted })
}

/// Feeds `input` in `chunk`s to one decoder that hands read replies over raw (to the one-pass
/// parser) and to one that decodes them with `redis-protocol` (for the tree parsers): reply for
/// reply, both parsers give the same reading (as reads, or as claims), or both fail. The
/// fuzz target `stream_reply` and the property test run it.
pub(crate) fn agree(input: &[u8], protocol: Protocol, chunk: usize, claim: bool) {
    // Watching the entry list, as the consumer does: its plain entries are noted as spans.
    let depth = match (claim, protocol) {
        (false, Protocol::Resp2) => 2,
        _ => 1,
    };
    let raw = Budget { bytes: Limits::default().max_frame, skip: Some(depth), raw: true };
    let (mut fast, mut tree) = (Decoder::new(Limits::default()), Decoder::new(Limits::default()));
    let (mut fast_frames, mut tree_frames) = (Vec::new(), Vec::new());
    // A frame `redis-protocol` refuses is consumed all the same (the scanner delimited it):
    // it is a failed reply, in its place. A scanner error leaves the decoder stuck: stop. A
    // frame past the budget is skipped where the oracle's decoder fails: stop there too.
    let (mut fast_stuck, mut tree_stuck, mut skipping) = (false, false, false);
    for part in input.chunks(chunk) {
        fast.extend(part);
        tree.extend(part);
        while !fast_stuck {
            let held = fast.buffered();
            match fast.next_within(protocol, raw) {
                Ok(Some((Frame::Skipped { .. }, _))) => (fast_stuck, skipping) = (true, true),
                _ if fast.skipping().is_some() => (fast_stuck, skipping) = (true, true),
                Ok(Some((frame, _))) => fast_frames.push(Some(frame)),
                Ok(None) => break,
                Err(_) if fast.buffered() == held => fast_stuck = true,
                Err(_) => fast_frames.push(None),
            }
        }
        while !tree_stuck {
            let held = tree.buffered();
            match tree.next(protocol) {
                Ok(Some(frame)) => tree_frames.push(Some(frame)),
                Ok(None) => break,
                Err(_) if tree.buffered() == held => tree_stuck = true,
                Err(_) => tree_frames.push(None),
            }
        }
    }
    assert_eq!(fast_frames.len(), tree_frames.len(), "the same frames both ways");
    assert!(!skipping || tree_stuck, "skipped a frame the oracle's decoder took");
    for (f, t) in fast_frames.into_iter().zip(tree_frames) {
        let by_tree = match t {
            Some(Frame::Reply(value)) if !matches!(value, Value::Error(_)) => {
                if matches!(&f, Some(Frame::Raw { bytes, .. }) if lossy_map(bytes, &value)) {
                    continue; // redis-protocol's HashMap merged repeated keys: no oracle
                }
                said_by_tree(value, claim).ok()
            }
            _ => None,
        };
        let by_stream = match &f {
            Some(Frame::Raw { bytes, spans }) => {
                let said = said_by_stream_parser(bytes, spans, protocol, claim).ok();
                // The spans only spare the walk a second look: without them, the same.
                let unaided = said_by_stream_parser(bytes, &[], protocol, claim).ok();
                assert_eq!(said, unaided, "the spans changed what was read: {spans:?}");
                said
            }
            _ => None,
        };
        assert_eq!(by_stream, by_tree, "the one-pass parser and the oracle disagree on {f:?}");
    }
}

/// A top-level RESP3 map whose repeated keys `redis-protocol` merged (its `HashMap`): the
/// decoded value no longer says what the bytes said.
fn lossy_map(bytes: &[u8], value: &Value) -> bool {
    let Value::Map(pairs) = value else { return false };
    let line = bytes.split(|b| *b == b'\r').next().unwrap_or_default();
    let declared = std::str::from_utf8(&line[1..]).ok().and_then(|n| n.parse::<usize>().ok());
    declared != Some(pairs.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: &str) -> Value {
        Value::Str(Bytes::copy_from_slice(x.as_bytes()))
    }
    fn e(id: &str, fields: &[&str]) -> Value {
        Value::Array(vec![s(id), Value::Array(fields.iter().map(|f| s(f)).collect())])
    }

    #[test]
    fn read_nil_and_empty_are_nothing() {
        assert_eq!(read(Value::Nil), Ok(vec![]));
        assert_eq!(read(Value::Array(vec![Value::Array(vec![s("s"), Value::Array(vec![])])])), Ok(vec![]));
        assert_eq!(read(Value::Map(vec![(s("s"), Value::Array(vec![]))])), Ok(vec![]));
        assert_eq!(read(Value::Array(vec![])), Ok(vec![]));
    }

    #[test]
    fn read_odd_shapes_are_errors() {
        for v in [
            Value::Int(1),
            Value::Array(vec![Value::Int(1)]),
            Value::Array(vec![Value::Array(vec![s("s")])]),
            Value::Array(vec![Value::Array(vec![s("s"), Value::Array(vec![e("1-0", &["f"])])])]),
            Value::Array(vec![Value::Array(vec![
                s("s"),
                Value::Array(vec![Value::Array(vec![Value::Int(1), Value::Nil])]),
            ])]),
            Value::Array(vec![Value::Array(vec![s("s"), Value::Int(3)])]),
        ] {
            assert!(read(v.clone()).is_err(), "{v:?}");
        }
    }

    #[test]
    fn autoclaim_odd_shapes_are_errors() {
        for v in [
            Value::Nil,
            Value::Array(vec![s("0-0")]),
            Value::Array(vec![s("0-0"), Value::Array(vec![]), Value::Array(vec![]), Value::Array(vec![])]),
            Value::Array(vec![Value::Int(0), Value::Array(vec![])]),
            Value::Array(vec![s("0-0"), Value::Nil]),
            Value::Array(vec![s("0-0"), Value::Array(vec![]), Value::Int(1)]),
        ] {
            assert!(autoclaim(v.clone()).is_err(), "{v:?}");
        }
    }
}

/// An entry's field/value pairs.
type Pairs = Vec<(Bytes, Bytes)>;

/// An entry as [`Said`] has it: id, fields, and (claimed, delivery count) from a `CLAIM` read.
pub(crate) type SaidEntry = (Bytes, Option<Pairs>, Option<(bool, u64)>);

/// What a read or claim reply says, in a form both parsers can be compared on: each entry's
/// id, fields (`None` for `[id, nil]`) and, from a `CLAIM` read, its delivery count and
/// whether it was claimed; for a claim its cursor, bare nils and deleted ids.
#[derive(Debug, PartialEq)]
pub(crate) struct Said {
    pub entries: Vec<SaidEntry>,
    /// Each entry's stream key (a read's; none for a claim).
    pub keys: Vec<Bytes>,
    pub claim: Option<(Bytes, u64, Vec<Bytes>)>,
}

/// The oracle's reading of a decoded reply, as a read (`claim` false) or a claim.
pub(crate) fn said_by_tree(value: Value, claim: bool) -> Result<Said> {
    let raw = |e: RawEntry| {
        // What the one-pass parser makes of a `CLAIM` read's numbers (a deleted entry's are
        // checked, then dropped).
        let count = e
            .fields
            .as_ref()
            .and(e.claim)
            .map(|(idle, before)| (claim || (idle, before) != (0, 0), before.saturating_add(1)));
        (e.id, e.fields, count)
    };
    if claim {
        let c = autoclaim(value)?;
        Ok(Said {
            entries: c.claimed.into_iter().map(raw).collect(),
            keys: Vec::new(),
            claim: Some((c.cursor, c.bare_nils, c.deleted)),
        })
    } else {
        let (mut entries, mut keys) = (Vec::new(), Vec::new());
        for (key, raws) in read_streams(value)? {
            keys.extend(raws.iter().map(|_| key.clone()));
            entries.extend(raws.into_iter().map(raw));
        }
        Ok(Said { entries, keys, claim: None })
    }
}

/// The one-pass parser's reading of a raw reply, in the same form.
pub(crate) fn said_by_stream_parser(
    frame: &Bytes,
    spans: &[Span],
    protocol: Protocol,
    claim: bool,
) -> Result<Said> {
    use crate::entry::Source;
    use crate::stream_reply::{self, Item};
    let mut entries = Vec::new();
    let mut each = |item: Item| {
        entries.push(match item {
            Item::Entry(e) => {
                // The id as its bulk string, for `XACK`: exactly what encoding it gives.
                let mut bulk = format!("${}\r\n", e.id().len()).into_bytes();
                bulk.extend_from_slice(e.id());
                bulk.extend_from_slice(b"\r\n");
                let mut acks = crate::acks::Acks::default();
                acks.push(e.id());
                let mut xack = bytes::BytesMut::new();
                acks.encode(&mut xack, b"s", b"g");
                assert!(xack.ends_with(&bulk), "the id's bulk string");
                let fields = e.fields().map(|(n, v)| (e.raw_slice(n), e.raw_slice(v))).collect();
                let count = (e.deliveries > 0).then_some((e.source == Source::Claimed, e.deliveries));
                (e.id_bytes(), Some(fields), count)
            }
            Item::Deleted(id) => (id, None, None),
        })
    };
    if claim {
        let c = stream_reply::autoclaim(frame, spans, protocol, &mut each)?;
        Ok(Said { entries, keys: Vec::new(), claim: Some((c.cursor, c.bare_nils, c.deleted)) })
    } else {
        let mut keys = Vec::new();
        stream_reply::read(frame, spans, protocol, Source::New, |key, item| {
            keys.push(Bytes::copy_from_slice(key));
            each(item)
        })?;
        Ok(Said { entries, keys, claim: None })
    }
}
