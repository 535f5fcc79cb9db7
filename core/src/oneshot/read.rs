//! The answers of one-shot commands, typed. Each reader takes either protocol (RESP3's maps
//! where RESP2 has flat `[name, value, …]` lists), answers an error reply with
//! [`ReplyError::Server`] and a reply of another shape with [`ReplyError::Shape`].

use std::time::Duration;

use bytes::Bytes;

use super::reply::{Reply, ReplyError};
use super::Request;
use crate::decode::Value;

/// A string's bytes (bulk or simple).
fn string(value: &Value) -> Option<&Bytes> {
    match value {
        Value::Str(s) | Value::Text(s) => Some(s),
        _ => None,
    }
}

/// An integer, or a string holding one (`XPENDING`'s summary counts a consumer's entries so).
fn int(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n) => Some(*n),
        other => std::str::from_utf8(string(other)?).ok()?.parse().ok(),
    }
}

/// A count: an integer of 0 or more.
fn count(value: &Value) -> Option<u64> {
    int(value).and_then(|n| u64::try_from(n).ok())
}

/// The name/value pairs of a RESP3 map or a RESP2 flat list; `None` for anything else.
fn pairs(value: Value) -> Option<Vec<(Value, Value)>> {
    match value {
        Value::Map(pairs) => Some(pairs),
        Value::Array(flat) if flat.len() % 2 == 0 => {
            let mut it = flat.into_iter();
            Some(std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect())
        }
        _ => None,
    }
}

/// The value named `name` among `pairs`.
fn field<'a>(pairs: &'a [(Value, Value)], name: &str) -> Option<&'a Value> {
    pairs.iter().find(|(key, _)| string(key).is_some_and(|k| &k[..] == name.as_bytes())).map(|(_, v)| v)
}

/// The elements of an array reply.
fn array(reply: &Reply, command: &'static str) -> Result<Vec<Value>, ReplyError> {
    match reply.value()? {
        Value::Array(items) => Ok(items),
        _ => Err(ReplyError::Shape { command, detail: "not an array" }),
    }
}

/// A count: `WAIT` (replicas), `XDEL`, `DEL`, `XGROUP DELCONSUMER` (entries it dropped),
/// `XACK`.
pub fn read_count(reply: &Reply) -> Result<u64, ReplyError> {
    match reply.value()? {
        Value::Int(n) if n >= 0 => Ok(n as u64),
        _ => Err(ReplyError::Shape { command: "a count", detail: "not an integer of 0 or more" }),
    }
}

/// The ids of the entries an `XRANGE` answered ([`Request::xrange_after`]), in order.
pub fn read_entry_ids(reply: &Reply) -> Result<Vec<Bytes>, ReplyError> {
    let shape = |detail| ReplyError::Shape { command: "XRANGE", detail };
    array(reply, "XRANGE")?
        .iter()
        .map(|entry| match entry {
            Value::Array(parts) => {
                parts.first().and_then(string).cloned().ok_or(shape("an entry without its id"))
            }
            _ => Err(shape("an entry is not an array")),
        })
        .collect()
}

/// An entry as `XRANGE` answers it: its id and its fields, in order.
pub type RangeEntry = (Bytes, Vec<(Bytes, Bytes)>);

/// The entries an `XRANGE` or `XREVRANGE` answered ([`Request::xrange`],
/// [`Request::xrevrange_last`]), each its id and its fields, in the reply's order.
pub fn read_entries(reply: &Reply) -> Result<Vec<RangeEntry>, ReplyError> {
    let shape = |detail| ReplyError::Shape { command: "XRANGE", detail };
    array(reply, "XRANGE")?
        .into_iter()
        .map(|entry| {
            let Value::Array(parts) = entry else { return Err(shape("an entry is not an array")) };
            let mut parts = parts.into_iter();
            let id =
                parts.next().as_ref().and_then(string).cloned().ok_or(shape("an entry without its id"))?;
            let fields = parts.next().and_then(pairs).ok_or(shape("an entry's fields are not pairs"))?;
            let fields = fields
                .iter()
                .map(|(name, value)| Some((string(name)?.clone(), string(value)?.clone())))
                .collect::<Option<Vec<_>>>()
                .ok_or(shape("a field that is not a string"))?;
            Ok((id, fields))
        })
        .collect()
}

/// `TIME`: the server's clock, as the time since the Unix epoch ([`Request::time`]).
pub fn read_time(reply: &Reply) -> Result<Duration, ReplyError> {
    let parts = array(reply, "TIME")?;
    match (parts.first().and_then(count), parts.get(1).and_then(count)) {
        (Some(s), Some(us)) if parts.len() == 2 => Ok(Duration::from_secs(s) + Duration::from_micros(us)),
        _ => Err(ReplyError::Shape { command: "TIME", detail: "not seconds and microseconds" }),
    }
}

/// `XPENDING stream group`: the summary of the group's pending entries list
/// ([`Request::xpending`]). Nothing pending: count 0, no ids, no consumers (the server says
/// nil for each).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PendingSummary {
    /// Entries pending, released ones (Redis 8.8+, `XNACK`) included.
    pub count: u64,
    /// The smallest pending id.
    pub first: Option<Bytes>,
    /// The greatest pending id.
    pub last: Option<Bytes>,
    /// Each consumer holding entries, with how many; released entries are no one's.
    pub consumers: Vec<(Bytes, u64)>,
}

impl PendingSummary {
    /// Reads the answer to [`Request::xpending`].
    pub fn read(reply: &Reply) -> Result<PendingSummary, ReplyError> {
        let shape = |detail| ReplyError::Shape { command: "XPENDING", detail };
        let items = array(reply, "XPENDING")?;
        let [total, first, last, owners] = &items[..] else {
            return Err(shape("not [count, first, last, consumers]"));
        };
        let consumers = match owners {
            Value::Nil => Vec::new(),
            Value::Array(rows) => rows
                .iter()
                .map(|row| match row {
                    Value::Array(pair) => match &pair[..] {
                        [name, n] => Some((string(name)?.clone(), count(n)?)),
                        _ => None,
                    },
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()
                .ok_or(shape("a consumer is not [name, count]"))?,
            _ => return Err(shape("the consumers are not an array")),
        };
        Ok(PendingSummary {
            count: count(total).ok_or(shape("the count is not a count"))?,
            first: string(first).cloned(),
            last: string(last).cloned(),
            consumers,
        })
    }
}

/// One entry of `XPENDING stream group - + count [consumer]` ([`Request::xpending_oldest`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PendingEntry {
    /// Its id.
    pub id: Bytes,
    /// The consumer holding it; `None` once released by `XNACK` (Redis 8.8+, which lists
    /// it under `""` with idle `-1`, `PROTOCOL.md` 39).
    pub consumer: Option<Bytes>,
    /// Since its last delivery, by the server's clock; `None` when released.
    pub idle: Option<Duration>,
    /// How many times it was delivered.
    pub deliveries: u64,
}

impl PendingEntry {
    /// Reads the answer to [`Request::xpending_oldest`], oldest first.
    pub fn read_all(reply: &Reply) -> Result<Vec<PendingEntry>, ReplyError> {
        let shape =
            ReplyError::Shape { command: "XPENDING", detail: "an entry is not [id, consumer, idle, count]" };
        array(reply, "XPENDING")?
            .iter()
            .map(|row| {
                let Value::Array(fields) = row else { return None };
                let [id, consumer, idle, n] = &fields[..] else { return None };
                let (consumer, idle) = (string(consumer)?, int(idle)?);
                let released = consumer.is_empty() && idle < 0;
                Some(PendingEntry {
                    id: string(id)?.clone(),
                    consumer: (!released).then(|| consumer.clone()),
                    idle: (!released).then(|| Duration::from_millis(idle.max(0) as u64)),
                    deliveries: count(n)?,
                })
            })
            .collect::<Option<Vec<_>>>()
            .ok_or(shape)
    }

    /// Released by `XNACK`: no consumer's, for the next claim to take.
    pub fn released(&self) -> bool {
        self.consumer.is_none()
    }
}

/// One consumer of `XINFO CONSUMERS stream group` ([`Request::xinfo_consumers`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConsumerInfo {
    /// Its name.
    pub name: Bytes,
    /// Entries it holds.
    pub pending: u64,
    /// `idle`: since the server last heard from it (a read, a claim, an ack; on Redis 7.0 a
    /// read that found nothing does not count, `PROTOCOL.md` 20).
    pub idle: Option<Duration>,
    /// `inactive` (7.2+): since its last read or claim that got entries; `None` where not
    /// told, or never.
    pub inactive: Option<Duration>,
}

impl ConsumerInfo {
    /// Reads the answer to [`Request::xinfo_consumers`].
    pub fn read_all(reply: &Reply) -> Result<Vec<ConsumerInfo>, ReplyError> {
        let shape = |detail| ReplyError::Shape { command: "XINFO CONSUMERS", detail };
        array(reply, "XINFO CONSUMERS")?
            .into_iter()
            .map(|row| {
                let fields = pairs(row).ok_or(shape("a consumer is neither a map nor a flat list"))?;
                let ms = |name| field(&fields, name).and_then(count).map(Duration::from_millis);
                Ok(ConsumerInfo {
                    name: field(&fields, "name")
                        .and_then(string)
                        .cloned()
                        .ok_or(shape("a consumer without its name"))?,
                    pending: field(&fields, "pending").and_then(count).unwrap_or(0),
                    idle: ms("idle"),
                    inactive: ms("inactive"),
                })
            })
            .collect()
    }
}

/// One group of `XINFO GROUPS stream` ([`Request::xinfo_groups`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupInfo {
    /// Its name.
    pub name: Bytes,
    /// Its consumers.
    pub consumers: u64,
    /// Entries pending (delivered, not acknowledged).
    pub pending: u64,
    /// The last id delivered to one of its consumers.
    pub last_delivered_id: Option<Bytes>,
    /// Entries not yet delivered, as the server counts them: 7.0+; `None` before, and where
    /// the server cannot tell. A count above 0 may be wrong on 7.0 after a failover: see
    /// [`lag_check`](Self::lag_check).
    pub lag: Option<u64>,
}

impl GroupInfo {
    /// Reads the answer to [`Request::xinfo_groups`].
    pub fn read_all(reply: &Reply) -> Result<Vec<GroupInfo>, ReplyError> {
        let shape = |detail| ReplyError::Shape { command: "XINFO GROUPS", detail };
        array(reply, "XINFO GROUPS")?
            .into_iter()
            .map(|row| {
                let fields = pairs(row).ok_or(shape("a group is neither a map nor a flat list"))?;
                Ok(GroupInfo {
                    name: field(&fields, "name")
                        .and_then(string)
                        .cloned()
                        .ok_or(shape("a group without its name"))?,
                    consumers: field(&fields, "consumers").and_then(count).unwrap_or(0),
                    pending: field(&fields, "pending").and_then(count).unwrap_or(0),
                    last_delivered_id: field(&fields, "last-delivered-id").and_then(string).cloned(),
                    lag: field(&fields, "lag").and_then(count),
                })
            })
            .collect()
    }

    /// The group named `name` in the answer to [`Request::xinfo_groups`]; `None` if the
    /// stream has no such group.
    pub fn read_named(reply: &Reply, name: &[u8]) -> Result<Option<GroupInfo>, ReplyError> {
        Ok(GroupInfo::read_all(reply)?.into_iter().find(|g| g.name == name))
    }

    /// The question that tells whether a lag above 0 is true (`PROTOCOL.md` 20: Redis 7.0
    /// can keep one for good with nothing left to deliver): `XRANGE stream
    /// (<last-delivered-id> + COUNT 1`. `None`: the lag needs no check.
    pub fn lag_check(&self, stream: &[u8]) -> Option<Request> {
        match (self.lag, &self.last_delivered_id) {
            (Some(1..), Some(last)) => Some(Request::xrange_after(stream, last, 1)),
            _ => None,
        }
    }

    /// The lag, told the answer to [`lag_check`](Self::lag_check)'s question: unknown
    /// (`None`) when nothing lies past the last-delivered id, rather than wrong.
    pub fn checked_lag(&self, reply: &Reply) -> Result<Option<u64>, ReplyError> {
        Ok(if read_entry_ids(reply)?.is_empty() { None } else { self.lag })
    }
}

/// What `XINFO STREAM stream` tells ([`Request::xinfo_stream`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamInfo {
    /// Entries in the stream.
    pub length: u64,
    /// Its consumer groups.
    pub groups: u64,
    /// The id of the last entry added (the greatest ever, deleted or not).
    pub last_generated_id: Option<Bytes>,
    /// What it remembers of `XADD … IDMP` (Redis 8.6+); `None` where the server tells none.
    pub idmp: Option<IdmpWindow>,
}

/// What a stream remembers of each producer's `XADD … IDMP` (`PROTOCOL.md` 42): the last
/// `maxsize` numbers, each for `duration`. A repeat within it adds nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct IdmpWindow {
    /// `idmp-maxsize`: how many of a producer's last numbers.
    pub maxsize: u64,
    /// `idmp-duration`: for how long.
    pub duration: Duration,
}

impl IdmpWindow {
    /// The server's defaults (`stream-idmp-maxsize` 100, `stream-idmp-duration` 100 s): a
    /// stream's window where the server takes `IDMP` but does not tell it.
    pub const DEFAULT: IdmpWindow = IdmpWindow { maxsize: 100, duration: Duration::from_secs(100) };
}

impl StreamInfo {
    /// Reads the answer to [`Request::xinfo_stream`].
    pub fn read(reply: &Reply) -> Result<StreamInfo, ReplyError> {
        let shape = |detail| ReplyError::Shape { command: "XINFO STREAM", detail };
        let fields = pairs(reply.value()?).ok_or(shape("neither a map nor a flat list"))?;
        let number = |name| field(&fields, name).and_then(count);
        let idmp = match (number("idmp-maxsize"), number("idmp-duration")) {
            (Some(maxsize), Some(secs)) => Some(IdmpWindow { maxsize, duration: Duration::from_secs(secs) }),
            _ => None,
        };
        Ok(StreamInfo {
            length: number("length").ok_or(shape("no length"))?,
            groups: number("groups").unwrap_or(0),
            last_generated_id: field(&fields, "last-generated-id").and_then(string).cloned(),
            idmp,
        })
    }
}

/// What a bare `HELLO` tells of the server ([`Request::hello`]): its name, version, role and
/// mode, where it says them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Hello {
    /// `server`: `redis`, `valkey`.
    pub server: Option<String>,
    /// `version`: `8.10.2`.
    pub version: Option<String>,
    /// `role`: `master` or `replica`.
    pub role: Option<String>,
    /// `mode`: `standalone`, `cluster` or `sentinel`.
    pub mode: Option<String>,
}

impl Hello {
    /// Reads the answer to [`Request::hello`].
    pub fn read(reply: &Reply) -> Result<Hello, ReplyError> {
        let fields = pairs(reply.value()?)
            .ok_or(ReplyError::Shape { command: "HELLO", detail: "neither a map nor a flat list" })?;
        let text =
            |name| field(&fields, name).and_then(string).map(|s| String::from_utf8_lossy(s).into_owned());
        Ok(Hello { server: text("server"), version: text("version"), role: text("role"), mode: text("mode") })
    }

    /// The version's major and minor numbers (`8.10.2`: 8, 10).
    pub fn version_number(&self) -> Option<(u32, u32)> {
        let mut parts = self.version.as_deref()?.split('.').map(|p| p.parse::<u32>().ok());
        Some((parts.next()??, parts.next()??))
    }

    /// Whether the server takes `XADD … IDMP` (Redis 8.6+ by the release notes,
    /// `PROTOCOL.md` 42).
    pub fn has_idmp(&self) -> bool {
        self.server.as_deref() == Some("redis") && self.version_number() >= Some((8, 6))
    }
}

/// One connection of `CLIENT LIST` ([`Request::client_list`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientInfo {
    /// Its id.
    pub id: u64,
    /// The client's address.
    pub addr: String,
    /// Its name (`CLIENT SETNAME`), empty if none.
    pub name: Bytes,
    /// Since its last command.
    pub idle: Duration,
}

impl ClientInfo {
    /// Reads the answer to [`Request::client_list`] (a bulk string in RESP2, a verbatim
    /// string in RESP3: `PROTOCOL.md` 43).
    pub fn read_all(reply: &Reply) -> Result<Vec<ClientInfo>, ReplyError> {
        let clients = crate::reply::client_list(reply.value()?)
            .map_err(|e| ReplyError::Shape { command: "CLIENT LIST", detail: e.0 })?;
        Ok(clients
            .into_iter()
            .map(|c| ClientInfo {
                id: c.id,
                addr: c.addr,
                name: c.name,
                idle: Duration::from_secs(c.idle_secs),
            })
            .collect())
    }
}
