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

/// `XPENDING key group start end count [consumer]` (the extended form): `[id, owner,
/// idle_ms, deliveries]` per entry; the ids and their delivery counts, in order.
pub(crate) fn pending_counts(value: Value) -> Result<Vec<(Bytes, u64)>> {
    let Value::Array(items) = value else { return Err(ShapeError("XPENDING: not an array")) };
    items
        .into_iter()
        .map(|item| {
            let Value::Array(fields) = item else {
                return Err(ShapeError("XPENDING: an entry is not an array"));
            };
            let mut it = fields.into_iter();
            match (it.next(), it.next(), it.next(), it.next(), it.next()) {
                (Some(Value::Str(id)), Some(_owner), Some(_idle), Some(Value::Int(n)), None) if n >= 0 => {
                    Ok((id, n as u64))
                }
                _ => Err(ShapeError("XPENDING: an entry is not [id, owner, idle, count]")),
            }
        })
        .collect()
}

/// `XCLAIM … JUSTID`: the ids claimed, in the order asked.
pub(crate) fn ids(value: Value) -> Result<Vec<Bytes>> {
    let Value::Array(items) = value else { return Err(ShapeError("XCLAIM: not an array")) };
    items.into_iter().map(|v| string(v).map_err(|_| ShapeError("XCLAIM: an id is not a string"))).collect()
}

/// An integer reply, sign kept (the dead-letter script answers 1, 0 or -1).
pub(crate) fn int(value: Value) -> Result<i64> {
    match value {
        Value::Int(n) => Ok(n),
        _ => Err(ShapeError("expected an integer")),
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
    fn pending_counts_and_ids() {
        let row = |id: &str, n: i64| Value::Array(vec![s(id), s("c"), Value::Int(5), Value::Int(n)]);
        assert_eq!(
            pending_counts(Value::Array(vec![row("1-0", 1), row("2-0", 7)])),
            Ok(vec![(Bytes::from("1-0"), 1), (Bytes::from("2-0"), 7)])
        );
        for bad in [Value::Nil, Value::Array(vec![s("1-0")]), Value::Array(vec![row("1-0", -1)])] {
            assert!(pending_counts(bad.clone()).is_err(), "{bad:?}");
        }
        assert_eq!(ids(Value::Array(vec![s("1-0")])), Ok(vec![Bytes::from("1-0")]));
        assert!(ids(Value::Array(vec![Value::Int(1)])).is_err());
        assert_eq!(int(Value::Int(-1)), Ok(-1));
    }

    #[test]
    fn counts() {
        assert_eq!(count(Value::Int(3)), Ok(3));
        assert!(count(Value::Int(-1)).is_err());
        assert!(count(s("3")).is_err());
    }
}

/// Every reply shape parsed from bytes captured on the real servers (`scripts/capture-fixtures`).
#[cfg(test)]
mod fixture_tests {
    use super::*;
    use crate::config::{Limits, Protocol};
    use crate::decode::{Decoder, Frame};
    use crate::error::{is_group_gone, is_transient};

    const FLAVORS: [&str; 3] = ["redis-6.2", "redis-7.0", "valkey-8.1"];
    const PROTOS: [(&str, Protocol); 2] = [("resp2", Protocol::Resp2), ("resp3", Protocol::Resp3)];

    fn each(mut check: impl FnMut(&str, &dyn Fn(&str) -> Value)) {
        for flavor in FLAVORS {
            for (proto_dir, proto) in PROTOS {
                let load = move |name: &str| -> Value {
                    let path = format!(
                        "{}/tests/fixtures/{flavor}/{proto_dir}/{name}.resp",
                        env!("CARGO_MANIFEST_DIR")
                    );
                    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
                    let mut d = Decoder::new(Limits::default());
                    d.extend(&bytes);
                    let frame = d.next(proto).unwrap_or_else(|e| panic!("{path}: {e:?}"));
                    assert_eq!(d.buffered(), 0, "{path}: one frame per file");
                    match frame {
                        Some(Frame::Reply(v)) => v,
                        other => panic!("{path}: {other:?}"),
                    }
                };
                check(flavor, &load);
            }
        }
    }

    fn ids(entries: &[RawEntry]) -> Vec<(&str, bool)> {
        entries.iter().map(|e| (std::str::from_utf8(&e.id).unwrap(), e.fields.is_some())).collect()
    }

    #[test]
    fn reads() {
        each(|flavor, load| {
            let new = read(load("read_new")).unwrap();
            assert_eq!(ids(&new), [("1-0", true), ("2-0", true), ("3-0", true)], "{flavor}");
            assert_eq!(new[1].fields.as_deref(), Some(&[(Bytes::from("f"), Bytes::from("v2"))][..]));
            assert_eq!(ids(&read(load("read_pending_page")).unwrap()), [("1-0", true), ("2-0", true)]);
            assert_eq!(read(load("read_pending_empty")).unwrap(), vec![]);
            assert_eq!(read(load("count_zero")).unwrap(), vec![]);
            assert_eq!(read(load("read_new_nil")).unwrap(), vec![]);
            // A deleted pending entry comes back as [id, nil] on every version.
            assert_eq!(
                ids(&read(load("read_pending_deleted")).unwrap()),
                [("1-0", true), ("2-0", false), ("3-0", true)],
                "{flavor}"
            );
            // Only 6.2 moved the deleted id into the claimer's list.
            let after_claim = read(load("read_pending_after_claim")).unwrap();
            if flavor == "redis-6.2" {
                assert_eq!(ids(&after_claim), [("1-0", true), ("2-0", false), ("3-0", true)]);
            } else {
                assert_eq!(ids(&after_claim), [("1-0", true), ("3-0", true)], "{flavor}");
            }
        });
    }

    #[test]
    fn autoclaims() {
        each(|flavor, load| {
            let claim = autoclaim(load("autoclaim")).unwrap();
            assert_eq!(&claim.cursor[..], b"0-0");
            assert_eq!(ids(&claim.claimed), [("1-0", true), ("3-0", true)], "{flavor}");
            if flavor == "redis-6.2" {
                assert_eq!((claim.bare_nils, claim.deleted.len()), (1, 0));
            } else {
                assert_eq!((claim.bare_nils, claim.deleted), (0, vec![Bytes::from("2-0")]), "{flavor}");
            }
            let scan = autoclaim(load("autoclaim_scan_cursor")).unwrap();
            assert_eq!((&scan.cursor[..], scan.claimed.len()), (&b"11-0"[..], 0), "{flavor}");
            let done = autoclaim(load("autoclaim_done")).unwrap();
            assert_eq!((&done.cursor[..], done.claimed.len()), (&b"0-0"[..], 0));
        });
    }

    #[test]
    fn acks_and_oks() {
        each(|flavor, load| {
            assert_eq!(count(load("xack_1")), Ok(1));
            assert_eq!(count(load("xack_0")), Ok(0));
            assert_eq!(count(load("xack_many")), Ok(1));
            for name in ["group_create", "select", "setname", "ping"] {
                assert_eq!(ok(load(name)), Ok(()), "{flavor} {name}");
            }
        });
    }

    #[test]
    fn hello_is_ok() {
        for flavor in FLAVORS {
            let path = format!("{}/tests/fixtures/{flavor}/resp3/hello.resp", env!("CARGO_MANIFEST_DIR"));
            let mut d = Decoder::new(Limits::default());
            d.extend(&std::fs::read(path).unwrap());
            let Some(Frame::Reply(v)) = d.next(Protocol::Resp3).unwrap() else { panic!() };
            assert_eq!(ok(v), Ok(()));
        }
    }

    #[test]
    fn errors() {
        each(|flavor, load| {
            let text = |name: &str| match load(name) {
                Value::Error(t) => t,
                other => panic!("{flavor} {name}: {other:?}"),
            };
            assert!(text("busygroup").starts_with(b"BUSYGROUP"));
            for name in ["nogroup_read", "nogroup_autoclaim", "group_destroyed_while_parked"] {
                assert!(is_group_gone(&text(name)), "{flavor} {name}");
            }
            let wrongpass = text("wrongpass");
            assert!(!is_group_gone(&wrongpass) && !is_transient(&wrongpass));
            // Key deleted while parked: 6.2 stays blocked until the timeout (nil); 7.0 says
            // UNBLOCKED … no longer exists; Valkey says NOGROUP. Both texts mean "gone".
            match load("key_deleted_while_parked") {
                Value::Nil => assert_eq!(flavor, "redis-6.2"),
                Value::Error(t) => assert!(is_group_gone(&t), "{flavor}"),
                other => panic!("{flavor}: {other:?}"),
            }
        });
    }

    #[test]
    fn counts_leases_and_dead_letters() {
        each(|flavor, load| {
            let counts = |name: &str| -> Vec<(String, u64)> {
                let parsed = pending_counts(load(name)).unwrap_or_else(|e| panic!("{flavor} {name}: {e:?}"));
                parsed.into_iter().map(|(id, n)| (String::from_utf8(id.to_vec()).unwrap(), n)).collect()
            };
            let owned = |pairs: &[(&str, u64)]| -> Vec<(String, u64)> {
                pairs.iter().map(|(id, n)| (id.to_string(), *n)).collect()
            };
            assert_eq!(counts("pending_counts_page"), owned(&[("1-0", 2), ("2-0", 2)]), "{flavor}");
            assert_eq!(counts("pending_counts_empty"), vec![]);
            assert_eq!(counts("pending_counts_deleted"), owned(&[("1-0", 3), ("2-0", 2), ("3-0", 2)]));
            // 6.2's claim moved the dead 2-0 to B as well: it fills the first page.
            if flavor == "redis-6.2" {
                assert_eq!(counts("pending_counts_claimed"), owned(&[("1-0", 4), ("2-0", 3)]));
            } else {
                assert_eq!(counts("pending_counts_claimed"), owned(&[("1-0", 4), ("3-0", 3)]), "{flavor}");
            }
            assert_eq!(counts("pending_counts_claimed_next"), owned(&[("3-0", 3)]));
            let lease = |name: &str| super::ids(load(name)).unwrap();
            assert_eq!(lease("lease_partial"), [Bytes::from("2-0"), Bytes::from("3-0")], "{flavor}");
            assert_eq!(lease("lease_all"), [Bytes::from("2-0"), Bytes::from("3-0")]);
            assert_eq!(int(load("dead_letter_moved")), Ok(1));
            assert_eq!(int(load("dead_letter_not_ours")), Ok(0));
            assert_eq!(int(load("dead_letter_deleted")), Ok(-1));
            match load("dead_letter_wrongtype") {
                Value::Error(text) => {
                    assert!(text.windows(9).any(|w| w == b"WRONGTYPE"), "{flavor}");
                    assert!(!is_transient(&text) && !is_group_gone(&text), "{flavor}: fatal");
                }
                other => panic!("{flavor}: {other:?}"),
            }
        });
    }
}
