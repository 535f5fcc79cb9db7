//! Commands, each encoded by the core's encoder: arrays of bulk strings.

use std::fmt;
use std::time::Duration;

use bytes::{Bytes, BytesMut};

use crate::decimal::Decimal;
use crate::encode::command;

/// One command, encoded (a RESP array of bulk strings), ready to write.
///
/// Its `Debug` names the command and how many arguments it has, never the arguments (an
/// `AUTH`'s password stays out of logs).
#[derive(Clone, PartialEq, Eq)]
pub struct Request {
    bytes: Bytes,
    /// The command's name, for `Debug`.
    name: Bytes,
    args: usize,
}

impl Request {
    /// The command made of `args` (the command's name first).
    pub fn new(args: &[&[u8]]) -> Request {
        let mut out = BytesMut::new();
        command(&mut out, args);
        let name = args.first().map_or_else(Bytes::new, |n| Bytes::copy_from_slice(n));
        Request { bytes: out.freeze(), name, args: args.len() }
    }

    /// A command already encoded (by [`Xadd`](super::Xadd)), `args` long, named `name`.
    pub(crate) fn encoded(bytes: Vec<u8>, name: &'static [u8], args: usize) -> Request {
        Request { bytes: bytes.into(), name: Bytes::from_static(name), args }
    }

    /// The bytes to write.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// `PING`.
    pub fn ping() -> Request {
        Request::new(&[b"PING"])
    }

    /// A bare `HELLO` (no protocol version): the server's name, version, role and mode,
    /// the protocol unchanged, whatever the user may run (`PROTOCOL.md` 19); read with
    /// [`Hello::read`](super::Hello::read), or its role with
    /// [`read_node_role`](crate::locate::read_node_role).
    pub fn hello() -> Request {
        Request::new(&[b"HELLO"])
    }

    /// `ROLE` (needs `@admin`): a replica's master
    /// ([`read_replica_of`](crate::locate::read_replica_of)), a sentinel's services
    /// ([`read_sentinel_services`](crate::locate::read_sentinel_services)).
    pub fn role() -> Request {
        Request::new(&[b"ROLE"])
    }

    /// `AUTH [user] password` (no user: the `default` one).
    pub fn auth(user: Option<&[u8]>, password: &[u8]) -> Request {
        match user {
            Some(user) => Request::new(&[b"AUTH", user, password]),
            None => Request::new(&[b"AUTH", password]),
        }
    }

    /// `SELECT db`.
    pub fn select(db: u32) -> Request {
        Request::new(&[b"SELECT", Decimal::new(u64::from(db)).as_bytes()])
    }

    /// `CLIENT SETNAME name`: the connection's name in `CLIENT LIST`.
    pub fn client_setname(name: &[u8]) -> Request {
        Request::new(&[b"CLIENT", b"SETNAME", name])
    }

    /// `CLIENT LIST TYPE normal`: the clients' connections (not replicas' nor pub/sub ones),
    /// read with [`ClientInfo::read_all`](super::ClientInfo::read_all).
    pub fn client_list() -> Request {
        Request::new(&[b"CLIENT", b"LIST", b"TYPE", b"normal"])
    }

    /// `ASKING`: the next command is for a slot being migrated to this node (after `ASK`).
    pub fn asking() -> Request {
        Request::new(&[b"ASKING"])
    }

    /// `WAIT replicas timeout-ms`: how many replicas have everything written so far on this
    /// connection, once that many do or `timeout` ran out ([`read_count`](super::read_count)).
    pub fn wait(replicas: u32, timeout: Duration) -> Request {
        let ms = Decimal::new(timeout.as_millis().min(u128::from(u64::MAX)) as u64);
        Request::new(&[b"WAIT", Decimal::new(u64::from(replicas)).as_bytes(), ms.as_bytes()])
    }

    /// `DEL key`.
    pub fn del(key: &[u8]) -> Request {
        Request::new(&[b"DEL", key])
    }

    /// `XDEL stream id`.
    pub fn xdel(stream: &[u8], id: &[u8]) -> Request {
        Request::new(&[b"XDEL", stream, id])
    }

    /// `XDEL stream id…`: how many of `ids` were there ([`read_count`](super::read_count)).
    pub fn xdel_ids<I: AsRef<[u8]>>(stream: &[u8], ids: &[I]) -> Request {
        let mut args: Vec<&[u8]> = vec![b"XDEL", stream];
        args.extend(ids.iter().map(AsRef::as_ref));
        Request::new(&args)
    }

    /// `XTRIM stream MINID id`, exact: every entry with an id below `id` deleted, how many
    /// ([`read_count`](super::read_count)).
    pub fn xtrim_minid(stream: &[u8], id: &[u8]) -> Request {
        Request::new(&[b"XTRIM", stream, b"MINID", id])
    }

    /// `XLEN stream` ([`read_count`](super::read_count); 0 for a missing key).
    pub fn xlen(stream: &[u8]) -> Request {
        Request::new(&[b"XLEN", stream])
    }

    /// `TIME`: the server's clock ([`read_time`](super::read_time)).
    pub fn time() -> Request {
        Request::new(&[b"TIME"])
    }

    /// `XRANGE stream start end COUNT count` (`-`, `+`, an id, `(id` exclusive), entries with
    /// their fields ([`read_entries`](super::read_entries)).
    pub fn xrange(stream: &[u8], start: &[u8], end: &[u8], count: u64) -> Request {
        Request::new(&[b"XRANGE", stream, start, end, b"COUNT", Decimal::new(count).as_bytes()])
    }

    /// `XREVRANGE stream + - COUNT count`: the last `count` entries, newest first
    /// ([`read_entries`](super::read_entries)).
    pub fn xrevrange_last(stream: &[u8], count: u64) -> Request {
        Request::new(&[b"XREVRANGE", stream, b"+", b"-", b"COUNT", Decimal::new(count).as_bytes()])
    }

    /// `XPENDING stream group`: the summary of the group's pending entries list
    /// ([`PendingSummary::read`](super::PendingSummary::read)).
    pub fn xpending(stream: &[u8], group: &[u8]) -> Request {
        Request::new(&[b"XPENDING", stream, group])
    }

    /// `XPENDING stream group - + count [consumer]`: the oldest `count` pending entries, of
    /// `consumer` only if given ([`PendingEntry::read_all`](super::PendingEntry::read_all)).
    pub fn xpending_oldest(stream: &[u8], group: &[u8], count: u64, consumer: Option<&[u8]>) -> Request {
        let count = Decimal::new(count);
        let mut args: Vec<&[u8]> = vec![b"XPENDING", stream, group, b"-", b"+", count.as_bytes()];
        args.extend(consumer);
        Request::new(&args)
    }

    /// `XINFO GROUPS stream` ([`GroupInfo::read_all`](super::GroupInfo::read_all)).
    pub fn xinfo_groups(stream: &[u8]) -> Request {
        Request::new(&[b"XINFO", b"GROUPS", stream])
    }

    /// `XINFO CONSUMERS stream group` ([`ConsumerInfo::read_all`](super::ConsumerInfo::read_all)).
    pub fn xinfo_consumers(stream: &[u8], group: &[u8]) -> Request {
        Request::new(&[b"XINFO", b"CONSUMERS", stream, group])
    }

    /// `XINFO STREAM stream` ([`StreamInfo::read`](super::StreamInfo::read)).
    pub fn xinfo_stream(stream: &[u8]) -> Request {
        Request::new(&[b"XINFO", b"STREAM", stream])
    }

    /// `XRANGE stream (id + COUNT count`: up to `count` entries after `id`
    /// ([`read_entry_ids`](super::read_entry_ids)).
    pub fn xrange_after(stream: &[u8], id: &[u8], count: u64) -> Request {
        let after = [b"(", id].concat();
        Request::new(&[b"XRANGE", stream, &after, b"+", b"COUNT", Decimal::new(count).as_bytes()])
    }

    /// `XGROUP CREATE stream group start [MKSTREAM]`: `+OK`, or `-BUSYGROUP …` for a group
    /// that exists (`PROTOCOL.md` 16).
    pub fn xgroup_create(stream: &[u8], group: &[u8], start: &[u8], mkstream: bool) -> Request {
        match mkstream {
            true => Request::new(&[b"XGROUP", b"CREATE", stream, group, start, b"MKSTREAM"]),
            false => Request::new(&[b"XGROUP", b"CREATE", stream, group, start]),
        }
    }

    /// `XGROUP DELCONSUMER stream group consumer`: how many pending entries went with it
    /// ([`read_count`](super::read_count)). They go where no reclaim reaches them:
    /// [`retire`](crate::retire) removes only consumers that hold none.
    pub fn xgroup_delconsumer(stream: &[u8], group: &[u8], consumer: &[u8]) -> Request {
        Request::new(&[b"XGROUP", b"DELCONSUMER", stream, group, consumer])
    }

    /// `CLUSTER SLOTS` ([`read_slot_map`](crate::cluster::read_slot_map)).
    pub fn cluster_slots() -> Request {
        Request::new(&[b"CLUSTER", b"SLOTS"])
    }

    /// `CLUSTER SHARDS` (7.0+; [`read_slot_map`](crate::cluster::read_slot_map)).
    pub fn cluster_shards() -> Request {
        Request::new(&[b"CLUSTER", b"SHARDS"])
    }
}

impl fmt::Debug for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Request({:?}, {} args)", String::from_utf8_lossy(&self.name), self.args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_as_sent() {
        assert_eq!(Request::hello().as_bytes(), crate::locate::ROLE_REQUEST);
        assert_eq!(Request::role().as_bytes(), crate::locate::MASTER_REQUEST);
        assert_eq!(Request::cluster_slots().as_bytes(), crate::cluster::SLOTS_REQUEST);
        assert_eq!(Request::auth(None, b"pw").as_bytes(), b"*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n");
        assert_eq!(
            Request::auth(Some(b"u"), b"pw").as_bytes(),
            b"*3\r\n$4\r\nAUTH\r\n$1\r\nu\r\n$2\r\npw\r\n"
        );
        assert_eq!(Request::select(12).as_bytes(), b"*2\r\n$6\r\nSELECT\r\n$2\r\n12\r\n");
        assert_eq!(
            Request::wait(1, Duration::from_millis(1500)).as_bytes(),
            b"*3\r\n$4\r\nWAIT\r\n$1\r\n1\r\n$4\r\n1500\r\n"
        );
        assert_eq!(
            Request::xpending_oldest(b"s", b"g", 10, Some(b"c")).as_bytes(),
            b"*7\r\n$8\r\nXPENDING\r\n$1\r\ns\r\n$1\r\ng\r\n$1\r\n-\r\n$1\r\n+\r\n$2\r\n10\r\n$1\r\nc\r\n"
        );
        assert_eq!(
            Request::xrange_after(b"s", b"5-0", 1).as_bytes(),
            b"*6\r\n$6\r\nXRANGE\r\n$1\r\ns\r\n$4\r\n(5-0\r\n$1\r\n+\r\n$5\r\nCOUNT\r\n$1\r\n1\r\n"
        );
        assert_eq!(
            Request::xgroup_create(b"s", b"g", b"$", true).as_bytes(),
            b"*6\r\n$6\r\nXGROUP\r\n$6\r\nCREATE\r\n$1\r\ns\r\n$1\r\ng\r\n$1\r\n$\r\n$8\r\nMKSTREAM\r\n"
        );
    }

    #[test]
    fn debug_hides_the_arguments() {
        let auth = format!("{:?}", Request::auth(Some(b"u"), b"secret"));
        assert_eq!(auth, "Request(\"AUTH\", 3 args)");
    }
}
