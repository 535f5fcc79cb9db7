//! Typed replies for the stream commands, parsed from [`Value`]s of either protocol.
//! Shapes are those observed on Redis 6.2, 7.0 and Valkey 8.1 (PROTOCOL.md); anything else is
//! a [`ShapeError`], never a panic.

use bytes::Bytes;

use crate::decode::Value;

/// One entry of a read or claim reply. `fields == None` is a pending entry whose message was
/// deleted (`XDEL`/`XTRIM`): the server answers `[id, nil]`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RawEntry {
    pub id: Bytes,
    pub fields: Option<Vec<(Bytes, Bytes)>>,
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

/// The reply did not have the expected shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ShapeError(pub &'static str);

type Result<T> = std::result::Result<T, ShapeError>;

/// `XREADGROUP` for one stream: nil (nothing new), `[[key, entries]]` (RESP2) or
/// `{key: entries}` (RESP3). An empty entry list reads like nil.
pub(crate) fn read(value: Value) -> Result<Vec<RawEntry>> {
    let entries = match value {
        Value::Nil => return Ok(Vec::new()),
        Value::Array(streams) => one_stream(streams.into_iter().map(|s| match s {
            Value::Array(pair) => pair_of(pair),
            _ => Err(ShapeError("XREADGROUP: a stream is not [key, entries]")),
        }))?,
        Value::Map(streams) => one_stream(streams.into_iter().map(Ok))?,
        _ => return Err(ShapeError("XREADGROUP: neither nil, array nor map")),
    };
    match entries {
        Value::Nil => Ok(Vec::new()),
        Value::Array(items) => items.into_iter().map(entry).collect(),
        _ => Err(ShapeError("XREADGROUP: entries are not an array")),
    }
}

/// The entries of the single stream asked for (or an empty list if the server named none).
fn one_stream(mut streams: impl Iterator<Item = Result<(Value, Value)>>) -> Result<Value> {
    let Some(first) = streams.next() else { return Ok(Value::Nil) };
    let (_key, entries) = first?;
    if streams.next().is_some() {
        return Err(ShapeError("XREADGROUP: more than one stream"));
    }
    Ok(entries)
}

fn pair_of(pair: Vec<Value>) -> Result<(Value, Value)> {
    let mut it = pair.into_iter();
    match (it.next(), it.next(), it.next()) {
        (Some(a), Some(b), None) => Ok((a, b)),
        _ => Err(ShapeError("expected a pair")),
    }
}

/// `[id, [field, value, …]]` or `[id, nil]`.
fn entry(value: Value) -> Result<RawEntry> {
    let Value::Array(pair) = value else { return Err(ShapeError("entry is not [id, fields]")) };
    let (id, fields) = pair_of(pair).map_err(|_| ShapeError("entry is not [id, fields]"))?;
    let Value::Str(id) = id else { return Err(ShapeError("entry id is not a string")) };
    let fields = match fields {
        Value::Nil => None,
        Value::Array(flat) => Some(field_pairs(flat)?),
        // A RESP3 server could send fields as a map; take it too.
        Value::Map(map) => {
            Some(map.into_iter().map(|(f, v)| Ok((string(f)?, string(v)?))).collect::<Result<_>>()?)
        }
        _ => return Err(ShapeError("entry fields are not an array")),
    };
    Ok(RawEntry { id, fields })
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

fn string(value: Value) -> Result<Bytes> {
    match value {
        Value::Str(s) => Ok(s),
        _ => Err(ShapeError("expected a string")),
    }
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

/// `XACK`: how many ids the server removed.
pub(crate) fn count(value: Value) -> Result<u64> {
    match value {
        Value::Int(n) if n >= 0 => Ok(n as u64),
        _ => Err(ShapeError("expected a non-negative integer")),
    }
}

/// `+OK`-style replies (and `HELLO`'s map): anything but an error.
pub(crate) fn ok(value: Value) -> Result<()> {
    match value {
        Value::Str(_) | Value::Map(_) | Value::Array(_) => Ok(()),
        _ => Err(ShapeError("expected OK")),
    }
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

    #[test]
    fn counts() {
        assert_eq!(count(Value::Int(3)), Ok(3));
        assert!(count(Value::Int(-1)).is_err());
        assert!(count(s("3")).is_err());
    }
}
