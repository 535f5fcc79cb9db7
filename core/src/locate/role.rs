//! Whether a node is a master, for clients of their own (the command line's): ask
//! [`ROLE_REQUEST`], read the answer with [`read_node_role`]; a replica's master, to name it:
//! ask [`MASTER_REQUEST`], read the answer with [`read_replica_of`]; a sentinel's services,
//! to name them: ask [`MASTER_REQUEST`] too, read the answer with [`read_sentinel_services`].
//! The consumer asks the same itself at every connect (its handshake's `HELLO`, then `ROLE`
//! of a replica).

use crate::config::{Limits, Protocol};
use crate::decode::{Decoder, Frame, Value};
use crate::endpoint::HostPort;
use crate::reply::{hello_fields, role, Role};

/// A bare `HELLO` (RESP2): it switches nothing and answers the server's name, version and
/// role (Redis 6.0+, Valkey), whatever the user may run.
pub const ROLE_REQUEST: &[u8] = b"*1\r\n$5\r\nHELLO\r\n";

/// What a node said it is.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeRole {
    /// A master: read from it and write to it.
    Master,
    /// A replica (outside a cluster): neither.
    Replica,
    /// It does not say (a server without `HELLO`, a proxy): its writes will tell. A
    /// cluster's replica is this too: it redirects a stream command to its master (`MOVED`).
    Unknown,
    /// A sentinel (its `HELLO` says `mode sentinel`): no data node at all. Name it among
    /// the sentinels of a service instead.
    Sentinel,
}

/// The role in the RESP2 reply to [`ROLE_REQUEST`], sans-IO: `Ok(None)` until the reply is
/// whole (`bytes` is everything read so far), `Err` with the text of an error that is not
/// "unknown command" (`NOAUTH`: log in first), or of bytes that are not RESP.
pub fn read_node_role(bytes: &[u8]) -> Result<Option<NodeRole>, String> {
    let mut decoder = Decoder::new(Limits::default());
    decoder.extend(bytes);
    let value = match decoder.next(Protocol::Resp2) {
        Ok(None) => return Ok(None),
        Ok(Some(Frame::Reply(value))) => value,
        Ok(Some(_)) => return Err("HELLO answered with something that is not a reply".into()),
        Err(e) => return Err(format!("HELLO answered with bytes that are not RESP: {e:?}")),
    };
    match value {
        Value::Error(text) if text.starts_with(b"ERR unknown command") => Ok(Some(NodeRole::Unknown)),
        Value::Error(text) => Err(String::from_utf8_lossy(&text).into_owned()),
        value => Ok(Some(match hello_fields(value) {
            Some(hello) if hello.mode.as_deref() == Some(b"sentinel") => NodeRole::Sentinel,
            Some(hello) if hello.is_standalone_replica() => NodeRole::Replica,
            Some(hello) if hello.role.as_deref() == Some(b"master") => NodeRole::Master,
            _ => NodeRole::Unknown,
        })),
    }
}

/// `ROLE` (RESP2), to ask a replica which master it follows. It needs `@admin`: a user
/// without it is refused.
pub const MASTER_REQUEST: &[u8] = b"*1\r\n$4\r\nROLE\r\n";

/// The master a replica names in its RESP2 reply to [`MASTER_REQUEST`], sans-IO: `None`
/// until `bytes` (everything read so far) hold the whole reply, and for any reply but a
/// replica's (a master's, a sentinel's, a refusal, bytes that are not RESP).
pub fn read_replica_of(bytes: &[u8]) -> Option<HostPort> {
    let mut decoder = Decoder::new(Limits::default());
    decoder.extend(bytes);
    let Ok(Some(Frame::Reply(value))) = decoder.next(Protocol::Resp2) else { return None };
    match role(value) {
        Ok(Role::Replica { master, .. }) => Some(master),
        _ => None,
    }
}

/// The services a sentinel watches, from its RESP2 reply to [`MASTER_REQUEST`]
/// (`[sentinel, [<names>]]`), sans-IO: `None` until `bytes` hold the whole reply, and for
/// any reply but a sentinel's.
pub fn read_sentinel_services(bytes: &[u8]) -> Option<Vec<String>> {
    let mut decoder = Decoder::new(Limits::default());
    decoder.extend(bytes);
    let Ok(Some(Frame::Reply(value))) = decoder.next(Protocol::Resp2) else { return None };
    sentinel_names(&value)
}

/// A sentinel's `ROLE`: `[sentinel, [<names>]]`, the names of the services it watches.
pub(crate) fn sentinel_names(value: &Value) -> Option<Vec<String>> {
    let Value::Array(items) = value else { return None };
    let [Value::Str(kind) | Value::Text(kind), Value::Array(names)] = &items[..] else { return None };
    if &kind[..] != b"sentinel" {
        return None;
    }
    let name = |v: &Value| match v {
        Value::Str(b) | Value::Text(b) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    };
    names.iter().map(name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles() {
        let hello = |role: &str| {
            format!(
                "*6\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n$4\r\nrole\r\n${}\r\n{role}\r\n",
                role.len()
            )
            .into_bytes()
        };
        assert_eq!(read_node_role(&hello("master")), Ok(Some(NodeRole::Master)));
        assert_eq!(read_node_role(&hello("replica")), Ok(Some(NodeRole::Replica)));
        let whole = hello("replica");
        assert_eq!(read_node_role(&whole[..whole.len() - 1]), Ok(None));
        assert_eq!(read_node_role(b"-ERR unknown command 'HELLO'\r\n"), Ok(Some(NodeRole::Unknown)));
        assert_eq!(
            read_node_role(b"-NOAUTH Authentication required.\r\n"),
            Err("NOAUTH Authentication required.".into())
        );
        assert!(read_node_role(b"HTTP/1.1 400\r\n").is_err());
    }

    #[test]
    fn a_replicas_master() {
        // Captured from each server (core/tests/fixtures).
        let replicas: [(&[u8], u16); 4] = [
            (include_bytes!("../../tests/fixtures/redis-6.2/resp2/role_replica.resp"), 42011),
            (include_bytes!("../../tests/fixtures/redis-7.0/resp2/role_replica.resp"), 33277),
            (include_bytes!("../../tests/fixtures/valkey-8.1/resp2/role_replica.resp"), 39981),
            (include_bytes!("../../tests/fixtures/redis-8.10/resp2/role_replica.resp"), 53615),
        ];
        for (replica, port) in replicas {
            let master = read_replica_of(replica).expect("a replica names its master");
            assert_eq!(master, HostPort::new("127.0.0.1", port));
            assert_eq!(read_replica_of(&replica[..replica.len() - 3]), None, "not whole yet");
        }
        let master = include_bytes!("../../tests/fixtures/redis-7.0/resp2/role_master.resp");
        assert_eq!(read_replica_of(master), None);
        // A replica whose master is down names it still.
        let link_down = include_bytes!("../../tests/fixtures/redis-7.0/resp2/role_replica_link_down.resp");
        assert_eq!(read_replica_of(link_down), Some(HostPort::new("127.0.0.1", 55305)));
        // A user without @admin is refused ROLE: the master goes unnamed.
        let refused = include_bytes!("../../tests/fixtures/valkey-8.1/resp2/role_noperm.resp");
        assert_eq!(read_replica_of(refused), None);
        assert_eq!(read_replica_of(b"HTTP/1.1 400\r\n"), None);
    }
}
