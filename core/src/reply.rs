//! Typed replies for the stream commands, parsed from [`Value`]s of either protocol.
//! Shapes are those observed on Redis 6.2, 7.0, 8.10 and Valkey 8.1 (written down, item by
//! item, in the repository's `PROTOCOL.md`); anything else is a [`ShapeError`], never a panic.

use bytes::Bytes;

use crate::decode::Value;

/// The reply did not have the expected shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ShapeError(pub &'static str);

type Result<T> = std::result::Result<T, ShapeError>;

pub(crate) fn string(value: Value) -> Result<Bytes> {
    match value {
        Value::Str(s) => Ok(s),
        _ => Err(ShapeError("expected a string")),
    }
}

/// `XACK`: how many ids the server removed.
pub(crate) fn count(value: Value) -> Result<u64> {
    match value {
        Value::Int(n) if n >= 0 => Ok(n as u64),
        _ => Err(ShapeError("expected a non-negative integer")),
    }
}

/// One entry of the extended `XPENDING`'s answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Pending {
    pub(crate) id: Bytes,
    /// Since its last delivery, by the server's clock (`-1` on Redis 8.8+ once released:
    /// read as 0).
    pub(crate) idle_ms: u64,
    pub(crate) deliveries: u64,
}

/// `XPENDING key group start end count [consumer]` (the extended form): `[id, owner,
/// idle_ms, deliveries]` per entry, in order.
pub(crate) fn pending(value: Value) -> Result<Vec<Pending>> {
    let Value::Array(items) = value else { return Err(ShapeError("XPENDING: not an array")) };
    items
        .into_iter()
        .map(|item| {
            let Value::Array(fields) = item else {
                return Err(ShapeError("XPENDING: an entry is not an array"));
            };
            let mut it = fields.into_iter();
            match (it.next(), it.next(), it.next(), it.next(), it.next()) {
                (Some(Value::Str(id)), Some(_owner), Some(Value::Int(idle)), Some(Value::Int(n)), None)
                    if n >= 0 =>
                {
                    Ok(Pending { id, idle_ms: idle.max(0) as u64, deliveries: n as u64 })
                }
                _ => Err(ShapeError("XPENDING: an entry is not [id, owner, idle, count]")),
            }
        })
        .collect()
}

/// [`pending`]: the ids and their delivery counts, in order.
pub(crate) fn pending_counts(value: Value) -> Result<Vec<(Bytes, u64)>> {
    Ok(pending(value)?.into_iter().map(|p| (p.id, p.deliveries)).collect())
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

/// `XACKDEL`'s answer, one result per id: 1 acked and deleted, 2 acked and kept (other groups
/// still reference it), -1 not pending. How many were acked.
pub(crate) fn acked_deleted(value: Value) -> Result<u64> {
    let Value::Array(results) = value else { return Err(ShapeError("XACKDEL: not an array")) };
    results.iter().try_fold(0, |n, r| match r {
        Value::Int(1 | 2) => Ok(n + 1),
        Value::Int(-1) => Ok(n),
        _ => Err(ShapeError("XACKDEL: a result is not 1, 2 or -1")),
    })
}

/// `+OK`-style replies (and `HELLO`'s map): anything but an error.
pub(crate) fn ok(value: Value) -> Result<()> {
    match value {
        Value::Text(_) | Value::Str(_) | Value::Map(_) | Value::Array(_) => Ok(()),
        _ => Err(ShapeError("expected OK")),
    }
}

/// The fields of one group in `XINFO GROUPS`: a flat `[name, value, …]` list (RESP2) or a
/// map (RESP3).
fn group_fields(group: Value) -> Result<Vec<(Value, Value)>> {
    match group {
        Value::Map(pairs) => Ok(pairs),
        Value::Array(flat) if flat.len() % 2 == 0 => {
            let mut it = flat.into_iter();
            Ok(std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect())
        }
        _ => Err(ShapeError("XINFO GROUPS: a group is neither a map nor a flat list")),
    }
}

/// An empty array (an `XRANGE` that found nothing).
pub(crate) fn is_empty(value: &Value) -> bool {
    matches!(value, Value::Array(items) if items.is_empty())
}

/// One group's row of `XINFO GROUPS`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GroupInfo {
    pub(crate) pending: u64,
    /// Absent before Redis 7.0, nil when the server cannot tell.
    pub(crate) lag: Option<u64>,
    pub(crate) consumers: u64,
    pub(crate) last_delivered: Option<Bytes>,
}

/// `XINFO GROUPS key`, for the group `name`. `None`: no such group.
pub(crate) fn group_info(value: Value, name: &[u8]) -> Result<Option<GroupInfo>> {
    let Value::Array(groups) = value else { return Err(ShapeError("XINFO GROUPS: not an array")) };
    for group in groups {
        let (mut found, mut pending, mut lag, mut consumers, mut last) = (false, None, None, None, None);
        for (key, value) in group_fields(group)? {
            let (Value::Str(key) | Value::Text(key)) = key else { continue };
            match (&key[..], value) {
                (b"name", Value::Str(n) | Value::Text(n)) => found = &n[..] == name,
                (b"pending", Value::Int(n)) if n >= 0 => pending = Some(n as u64),
                (b"consumers", Value::Int(n)) if n >= 0 => consumers = Some(n as u64),
                (b"lag", Value::Int(n)) if n >= 0 => lag = Some(n as u64),
                (b"last-delivered-id", Value::Str(id) | Value::Text(id)) => last = Some(id),
                _ => {}
            }
        }
        if found {
            return match (pending, consumers) {
                (Some(pending), Some(consumers)) => {
                    Ok(Some(GroupInfo { pending, lag, consumers, last_delivered: last }))
                }
                _ => Err(ShapeError("XINFO GROUPS: no pending or consumers count")),
            };
        }
    }
    Ok(None)
}

/// The oldest pending entry: id, owner and idle ms (none if released), deliveries.
pub(crate) type Oldest = (Bytes, Option<(Bytes, u64)>, u64);

/// `XPENDING key group - + 1`: the oldest pending entry as (id, owner and idle ms, deliveries);
/// no owner for an entry released by `XNACK` (Redis 8.8+ lists it under `""`, idle `-1`).
pub(crate) fn oldest_pending(value: Value) -> Result<Option<Oldest>> {
    let Value::Array(items) = value else { return Err(ShapeError("XPENDING: not an array")) };
    let Some(first) = items.into_iter().next() else { return Ok(None) };
    let Value::Array(fields) = first else { return Err(ShapeError("XPENDING: an entry is not an array")) };
    let mut it = fields.into_iter();
    match (it.next(), it.next(), it.next(), it.next()) {
        (Some(Value::Str(id)), Some(Value::Str(owner)), Some(Value::Int(-1)), Some(Value::Int(n)))
            if owner.is_empty() && n >= 0 =>
        {
            Ok(Some((id, None, n as u64)))
        }
        (Some(Value::Str(id)), Some(Value::Str(owner)), Some(Value::Int(idle)), Some(Value::Int(n)))
            if idle >= 0 && n >= 0 =>
        {
            Ok(Some((id, Some((owner, idle as u64)), n as u64)))
        }
        _ => Err(ShapeError("XPENDING: an entry is not [id, owner, idle, count]")),
    }
}

/// `WAITAOF`: `[local, replicas]`, how many append-only files have the writes.
pub(crate) fn wait_aof(value: Value) -> Result<(u64, u64)> {
    match value {
        Value::Array(items) => match &items[..] {
            [Value::Int(local), Value::Int(replicas)] if *local >= 0 && *replicas >= 0 => {
                Ok((*local as u64, *replicas as u64))
            }
            _ => Err(ShapeError("WAITAOF: not two counts")),
        },
        _ => Err(ShapeError("WAITAOF: not an array")),
    }
}

/// What `ROLE` says a node is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    Master,
    /// A replica of `master` (`host:port`), its link to it in `state` (`connected`,
    /// `connecting`, `sync`…).
    Replica {
        master: crate::endpoint::HostPort,
        state: String,
    },
    /// A sentinel, or anything else: its first word.
    Other(String),
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Role::Master => f.write_str("a master"),
            Role::Replica { master, state } => write!(f, "a replica of {master} (link {state})"),
            Role::Other(role) => write!(f, "a {role}"),
        }
    }
}

/// `ROLE`: `["master", offset, replicas]`, `["slave", host, port, state, offset]`, or
/// `["sentinel", names]`.
pub(crate) fn role(value: Value) -> Result<Role> {
    let Value::Array(items) = value else { return Err(ShapeError("ROLE: not an array")) };
    let word = |v: &Value| match v {
        Value::Str(b) | Value::Text(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    };
    let kind = items.first().and_then(word).ok_or(ShapeError("ROLE: no role"))?;
    Ok(match kind.as_str() {
        "master" => Role::Master,
        "slave" | "replica" => {
            let (Some(host), Some(port), Some(state)) =
                (items.get(1).and_then(word), items.get(2).and_then(word), items.get(3).and_then(word))
            else {
                return Err(ShapeError("ROLE: a replica without its master"));
            };
            let master = crate::endpoint::HostPort { host, port: port.parse().unwrap_or(0) };
            Role::Replica { master, state }
        }
        _ => Role::Other(kind),
    })
}

/// `TIME`: `[seconds, microseconds]`, as milliseconds since the epoch.
pub(crate) fn time_ms(value: Value) -> Result<u64> {
    let number = |v: &Value| match v {
        Value::Str(s) | Value::Text(s) => std::str::from_utf8(s).ok()?.parse::<u64>().ok(),
        _ => None,
    };
    match value {
        Value::Array(parts) if parts.len() == 2 => match (number(&parts[0]), number(&parts[1])) {
            (Some(secs), Some(micros)) => Ok(secs.saturating_mul(1000).saturating_add(micros / 1000)),
            _ => Err(ShapeError("TIME: not two numbers")),
        },
        _ => Err(ShapeError("TIME: not [seconds, microseconds]")),
    }
}

/// A client in a `CLIENT LIST` reply.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Client {
    pub(crate) id: u64,
    pub(crate) addr: String,
    pub(crate) name: Bytes,
    pub(crate) idle_secs: u64,
}

/// `CLIENT LIST`: one line per client of `key=value` fields separated by spaces (a bulk
/// string in RESP2, a verbatim `txt` string in RESP3). Names hold no spaces (the server
/// refuses them), so splitting on spaces is exact; fields a client line lacks are left empty.
pub(crate) fn client_list(value: Value) -> Result<Vec<Client>> {
    let text = match value {
        Value::Str(s) | Value::Text(s) => s,
        _ => return Err(ShapeError("CLIENT LIST: not a string")),
    };
    // RESP3 verbatim strings start with their format.
    let text = text.strip_prefix(b"txt:").map_or(text.clone(), |rest| text.slice_ref(rest));
    let mut clients = Vec::new();
    for line in text.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let mut client = Client { id: 0, addr: String::new(), name: Bytes::new(), idle_secs: 0 };
        for field in line.split(|b| *b == b' ') {
            let Some(eq) = field.iter().position(|b| *b == b'=') else { continue };
            let (key, value) = (&field[..eq], &field[eq + 1..]);
            let number = || std::str::from_utf8(value).ok().and_then(|v| v.trim().parse::<u64>().ok());
            match key {
                b"id" => client.id = number().ok_or(ShapeError("CLIENT LIST: an id that is not a number"))?,
                b"addr" => client.addr = String::from_utf8_lossy(value).into_owned(),
                b"name" => client.name = text.slice_ref(value),
                b"idle" => client.idle_secs = number().unwrap_or(0),
                _ => {}
            }
        }
        clients.push(client);
    }
    Ok(clients)
}

/// What `HELLO` tells of the server, from its map (RESP3) or flat array (RESP2).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Hello {
    /// `server` and `version` (`redis`, `8.10.2`), when both are there.
    pub(crate) server: Option<(Bytes, Bytes)>,
    /// `role`: `master` or `replica` (Redis 6.0+, Valkey); `None` where not said.
    pub(crate) role: Option<Bytes>,
    /// `mode`: `standalone`, `cluster` or `sentinel`.
    pub(crate) mode: Option<Bytes>,
}

impl Hello {
    /// True if the node says it is a replica (`replica`, or `slave` as older servers say).
    pub(crate) fn is_replica(&self) -> bool {
        matches!(self.role.as_deref(), Some(b"replica" | b"slave"))
    }

    /// True if the node is a replica that will not redirect: a cluster's replica answers a
    /// stream command with `MOVED` to its master, which a consumer follows; any other
    /// replica refuses writes (`READONLY`), and is not to be read from.
    pub(crate) fn is_standalone_replica(&self) -> bool {
        self.is_replica() && self.mode.as_deref() != Some(b"cluster")
    }
}

/// `HELLO`'s reply, read; `None` if it is neither a map nor a flat array of pairs.
pub(crate) fn hello_fields(value: Value) -> Option<Hello> {
    let pairs: Vec<(Value, Value)> = match value {
        Value::Map(pairs) => pairs,
        Value::Array(flat) if flat.len() % 2 == 0 => {
            let mut it = flat.into_iter();
            std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect()
        }
        _ => return None,
    };
    let (mut server, mut version, mut role, mut mode) = (None, None, None, None);
    for (key, value) in pairs {
        let (Value::Str(key) | Value::Text(key), Value::Str(value) | Value::Text(value)) = (key, value)
        else {
            continue;
        };
        match &key[..] {
            b"server" => server = Some(value),
            b"version" => version = Some(value),
            b"role" => role = Some(value),
            b"mode" => mode = Some(value),
            _ => {}
        }
    }
    Some(Hello { server: server.zip(version), role, mode })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: &str) -> Value {
        Value::Str(Bytes::copy_from_slice(x.as_bytes()))
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
pub(crate) mod fixture_tests {
    use super::*;
    use crate::config::{Limits, Protocol};
    use crate::decode::{Decoder, Frame};
    use crate::error::{is_group_gone, is_transient};

    const FLAVORS: [&str; 4] = ["redis-6.2", "redis-7.0", "valkey-8.1", "redis-8.10"];
    const PROTOS: [(&str, Protocol); 2] = [("resp2", Protocol::Resp2), ("resp3", Protocol::Resp3)];

    /// Runs `check` with each flavor's name and a loader of its captured replies, in both
    /// protocols.
    pub(crate) fn each(check: impl FnMut(&str, &dyn Fn(&str) -> Value)) {
        each_of(&FLAVORS, check)
    }

    /// [`each`] over some flavors only.
    pub(crate) fn each_of(flavors: &[&'static str], mut check: impl FnMut(&str, &dyn Fn(&str) -> Value)) {
        for &flavor in flavors {
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

    #[test]
    fn group_health_replies() {
        each(|flavor, load| {
            let info = group_info(load("xinfo_groups"), b"g")
                .unwrap()
                .map(|g| (g.pending, g.lag, g.consumers, g.last_delivered.is_some()));
            let oldest = oldest_pending(load("xpending_extended")).unwrap();
            if flavor == "redis-6.2" {
                // No lag before 7.0; the deleted 2-0 stays in B's pending list.
                assert_eq!(info, Some((1, None, 2, true)), "{flavor}");
                let (id, held, n) = oldest.unwrap();
                assert_eq!((&id[..], &held.unwrap().0[..], n), (&b"2-0"[..], &b"B"[..], 3));
            } else {
                assert_eq!(info, Some((0, Some(0), 2, true)), "{flavor}");
                assert_eq!(oldest, None, "{flavor}");
            }
            assert_eq!(group_info(load("xinfo_groups"), b"other"), Ok(None));
            let ms = time_ms(load("time")).unwrap();
            assert!(ms > 1_600_000_000_000, "{flavor}: {ms}");
        });
        assert!(group_info(Value::Array(vec![Value::Array(vec![Value::Nil])]), b"g").is_err());
        assert!(time_ms(Value::Array(vec![Value::Int(1), Value::Int(2)])).is_err());
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
            // UNBLOCKED … no longer exists (which a cluster slot migration also says: only
            // transient, the next read tells); Valkey says NOGROUP.
            match load("key_deleted_while_parked") {
                Value::Nil => assert_eq!(flavor, "redis-6.2"),
                Value::Error(t) if flavor == "redis-7.0" => assert!(is_transient(&t) && !is_group_gone(&t)),
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
