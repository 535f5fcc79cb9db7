//! Which master serves each hash slot, from a `CLUSTER SHARDS` or `CLUSTER SLOTS` reply in
//! either protocol. Shapes are those of Redis 6.2 (`SLOTS` only), Redis 7.0 and Valkey 8.1;
//! anything else is a [`ShapeError`], never a panic.

use std::collections::HashMap;

use crate::decode::Value;
use crate::reply::ShapeError;

use super::slot::{key_slot, SLOTS};

type Result<T> = std::result::Result<T, ShapeError>;

/// A master node, as the cluster describes it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Node {
    /// The endpoint the server gave (an IP address, or a host name when the cluster prefers
    /// them), else its `ip`. Empty when the server knew neither (a node that has met no
    /// peer, or `cluster-preferred-endpoint-type unknown-endpoint` without an `ip`): then it
    /// is the host the reply came from.
    pub host: String,
    /// The port to connect to: the plaintext port, or the TLS one for a node that serves only
    /// TLS. From `CLUSTER SLOTS` it is the port of the asking connection's kind (Redis 7.0
    /// answers a TLS client with TLS ports).
    pub port: u16,
    /// The TLS port, when the reply lists one (`CLUSTER SHARDS` on a TLS-enabled cluster).
    pub tls_port: Option<u16>,
    /// The node's id (40 hex characters), when listed.
    pub id: Option<String>,
}

/// For each of the 16384 slots, the master serving it, if the reply named one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotMap {
    /// The distinct masters, in the order the reply named them.
    nodes: Vec<Node>,
    /// Per slot, an index into `nodes`, or [`NO_OWNER`]. Flat rather than ranges: 32 KiB
    /// buys a lookup without a search on every command.
    owners: Vec<u16>,
}

/// No master serves the slot.
const NO_OWNER: u16 = u16::MAX;

impl SlotMap {
    /// Builds the map from a `CLUSTER SHARDS` reply (Redis 7.0+, Valkey): per shard a map
    /// (RESP3) or flat key/value array (RESP2) of `slots` (`[start, end, …]`) and `nodes`.
    /// Each shard's slots go to its `role` `master` node, an `online` one if several claim it
    /// (a failed master still listed beside the promoted one); a shard with none listed
    /// leaves its slots unowned. Redis 6.2 has no `SHARDS` (it answers `ERR Unknown
    /// subcommand…`): ask it for `CLUSTER SLOTS`.
    pub(crate) fn from_shards(reply: &Value) -> Result<SlotMap> {
        let Value::Array(shards) = reply else { return Err(ShapeError("CLUSTER SHARDS: not an array")) };
        let mut map = Builder::default();
        for shard in shards {
            let mut ranges = None;
            let mut nodes = None;
            for (key, value) in fields(shard, "CLUSTER SHARDS: a shard is not a map")? {
                match key {
                    b"slots" => ranges = Some(value),
                    b"nodes" => nodes = Some(value),
                    _ => {}
                }
            }
            let (Some(Value::Array(ranges)), Some(Value::Array(nodes))) = (ranges, nodes) else {
                return Err(ShapeError("CLUSTER SHARDS: a shard lacks its slots or nodes array"));
            };
            if ranges.len() % 2 != 0 {
                return Err(ShapeError("CLUSTER SHARDS: slots are not start/end pairs"));
            }
            let mut master: Option<(Node, bool)> = None;
            for node in nodes {
                let (node, role, online) = shard_node(node)?;
                // Keep the first master, unless a later one is online and it is not.
                if role && master.as_ref().map_or(true, |(_, first_online)| online && !first_online) {
                    master = Some((node, online));
                }
            }
            // Check every range even when no master takes them: garbage is garbage.
            let ranges = ranges
                .chunks(2)
                .map(|pair| slot_range(&pair[0], &pair[1], "CLUSTER SHARDS: a slot range is not two slots"))
                .collect::<Result<Vec<_>>>()?;
            if let Some((node, _)) = master {
                for (start, end) in ranges {
                    map.assign(start, end, &node)?;
                }
            }
        }
        Ok(map.done())
    }

    /// Builds the map from a `CLUSTER SLOTS` reply (every version): `[[start, end, master,
    /// replica…], …]`, each node `[endpoint, port, id, metadata]` (6.2: no metadata; 7.0+:
    /// a map, or flat array in RESP2, that may hold `ip` and `hostname`). Replicas are
    /// skipped.
    pub(crate) fn from_slots(reply: &Value) -> Result<SlotMap> {
        let Value::Array(ranges) = reply else { return Err(ShapeError("CLUSTER SLOTS: not an array")) };
        let mut map = Builder::default();
        for range in ranges {
            let Value::Array(items) = range else {
                return Err(ShapeError("CLUSTER SLOTS: a range is not an array"));
            };
            let [start, end, master, ..] = items.as_slice() else {
                return Err(ShapeError("CLUSTER SLOTS: a range is not [start, end, master, …]"));
            };
            let (start, end) =
                slot_range(start, end, "CLUSTER SLOTS: a range does not start with two slots")?;
            let node = slots_node(master)?;
            map.assign(start, end, &node)?;
        }
        Ok(map.done())
    }

    /// The master serving `slot`, if the reply named one (`None` too for a slot past 16383).
    pub fn owner(&self, slot: u16) -> Option<&Node> {
        match *self.owners.get(usize::from(slot))? {
            NO_OWNER => None,
            i => self.nodes.get(usize::from(i)),
        }
    }

    /// The master serving `key`'s slot.
    pub fn owner_of_key(&self, key: &[u8]) -> Option<&Node> {
        self.owner(key_slot(key))
    }

    /// The distinct masters the reply gave slots to, in the order it named them.
    pub fn masters(&self) -> &[Node] {
        &self.nodes
    }

    /// How many of the 16384 slots have a master (all of them in a healthy cluster).
    pub fn covered(&self) -> usize {
        self.owners.iter().filter(|&&o| o != NO_OWNER).count()
    }
}

/// `CLUSTER SLOTS`, to ask any node of a cluster for its slot map (on a fresh connection:
/// RESP2; every server here answers it, Redis 6.2 included).
pub const SLOTS_REQUEST: &[u8] = b"*2\r\n$7\r\nCLUSTER\r\n$5\r\nSLOTS\r\n";

/// Why [`read_slot_map`] found no map.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SlotMapError {
    /// The server answered an error: not a cluster node (`ERR This instance has cluster
    /// support disabled`), or it wants authentication first.
    Server(String),
    /// The reply is not RESP, or not the shape of a slot map.
    Invalid(String),
}

impl std::fmt::Display for SlotMapError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SlotMapError::Server(text) => write!(f, "CLUSTER SLOTS refused: {text}"),
            SlotMapError::Invalid(detail) => write!(f, "CLUSTER SLOTS answered oddly: {detail}"),
        }
    }
}

impl std::error::Error for SlotMapError {}

/// The slot map in the RESP2 reply to [`SLOTS_REQUEST`] (or to `CLUSTER SHARDS`), sans-IO:
/// `Ok(None)` until the reply is whole; `bytes` is everything read so far.
pub fn read_slot_map(bytes: &[u8]) -> std::result::Result<Option<SlotMap>, SlotMapError> {
    use crate::config::{Limits, Protocol};
    use crate::decode::{Decoder, Frame};
    let limits = Limits::default();
    let mut decoder = Decoder::new(limits);
    decoder.extend(bytes);
    let value = match decoder.next(Protocol::Resp2) {
        Ok(None) => return Ok(None),
        Ok(Some(Frame::Reply(value))) => value,
        Ok(Some(other)) => return Err(SlotMapError::Invalid(format!("{other:?}"))),
        Err(e) => return Err(SlotMapError::Invalid(format!("{e:?}"))),
    };
    let shards = matches!(&value, Value::Array(items) if items.first().is_some_and(|s| !is_slots_entry(s)));
    match value {
        Value::Error(text) => Err(SlotMapError::Server(String::from_utf8_lossy(&text).into_owned())),
        value if shards => {
            SlotMap::from_shards(&value).map(Some).map_err(|e| SlotMapError::Invalid(e.0.into()))
        }
        value => SlotMap::from_slots(&value).map(Some).map_err(|e| SlotMapError::Invalid(e.0.into())),
    }
}

/// A `CLUSTER SLOTS` entry starts with its first slot, a number.
fn is_slots_entry(value: &Value) -> bool {
    matches!(value, Value::Array(items) if matches!(items.first(), Some(Value::Int(_))))
}

/// A [`SlotMap`] being filled in.
struct Builder {
    map: SlotMap,
    /// Each master's index in `map.nodes`. Within one reply a master is listed the same way
    /// every time, so the whole `Node` identifies it; a map keeps a garbage reply naming
    /// thousands of masters from costing a quadratic search.
    index: HashMap<Node, u16>,
}

impl Default for Builder {
    fn default() -> Builder {
        let map = SlotMap { nodes: Vec::new(), owners: vec![NO_OWNER; usize::from(SLOTS)] };
        Builder { map, index: HashMap::new() }
    }
}

impl Builder {
    /// Gives `start..=end` (already checked to be slots) to `node`, listing it once.
    fn assign(&mut self, start: u16, end: u16, node: &Node) -> Result<()> {
        let index = match self.index.get(node) {
            Some(&i) => i,
            // A real cluster has at most one master per slot; only a garbage reply (ranges
            // overwriting each other) could name more, and an index must stay below NO_OWNER.
            None if self.map.nodes.len() >= usize::from(SLOTS) => {
                return Err(ShapeError("more masters than slots"));
            }
            None => {
                let i = self.map.nodes.len() as u16;
                self.map.nodes.push(node.clone());
                self.index.insert(node.clone(), i);
                i
            }
        };
        self.map.owners[usize::from(start)..=usize::from(end)].fill(index);
        Ok(())
    }

    fn done(self) -> SlotMap {
        self.map
    }
}

/// One `nodes` element of a shard: the node, whether its role is master, whether it is online.
fn shard_node(value: &Value) -> Result<(Node, bool, bool)> {
    const NOT_MAP: &str = "CLUSTER SHARDS: a node is not a map";
    let (mut id, mut port, mut tls_port, mut ip, mut endpoint) = (None, None, None, None, None);
    let (mut master, mut online) = (false, false);
    for (key, value) in fields(value, NOT_MAP)? {
        match key {
            b"id" => id = Some(text(value).ok_or(ShapeError("CLUSTER SHARDS: a node id is not a string"))?),
            b"port" => port = Some(port_of(value, "CLUSTER SHARDS: a port is not a port number")?),
            b"tls-port" => {
                tls_port = Some(port_of(value, "CLUSTER SHARDS: a tls-port is not a port number")?)
            }
            b"ip" => ip = text(value),
            b"endpoint" => endpoint = text(value),
            // Valkey may come to say `primary`; Redis and Valkey 8.1 say `master`.
            b"role" => master = matches!(bytes(value), Some(b"master" | b"primary")),
            b"health" => online = bytes(value) == Some(b"online"),
            _ => {}
        }
    }
    // A node without a plaintext port (TLS only: no `port`, or 0) is reached on its TLS port.
    let port =
        port.filter(|&p| p != 0).or(tls_port).ok_or(ShapeError("CLUSTER SHARDS: a node has no port"))?;
    let host = preferred_host(endpoint, ip);
    Ok((Node { host, port, tls_port, id }, master, online))
}

/// A `CLUSTER SLOTS` node: `[endpoint, port, id?, metadata?, …]`.
fn slots_node(value: &Value) -> Result<Node> {
    let Value::Array(items) = value else { return Err(ShapeError("CLUSTER SLOTS: a node is not an array")) };
    let [endpoint, port, rest @ ..] = items.as_slice() else {
        return Err(ShapeError("CLUSTER SLOTS: a node is not [endpoint, port, …]"));
    };
    // `unknown-endpoint` clusters send nil here.
    let endpoint = match endpoint {
        Value::Nil => None,
        other => Some(text(other).ok_or(ShapeError("CLUSTER SLOTS: an endpoint is not a string"))?),
    };
    let port = port_of(port, "CLUSTER SLOTS: a port is not a port number")?;
    let id = match rest.first() {
        None => None,
        Some(id) => Some(text(id).ok_or(ShapeError("CLUSTER SLOTS: a node id is not a string"))?),
    };
    let mut ip = None;
    if let Some(metadata) = rest.get(1) {
        for (key, value) in fields(metadata, "CLUSTER SLOTS: node metadata is not a map")? {
            if key == b"ip" {
                ip = text(value);
            }
        }
    }
    Ok(Node { host: preferred_host(endpoint, ip), port, tls_port: None, id })
}

/// The endpoint, unless the server did not know it (`?` when host names are preferred but
/// the node has none, empty or nil for `unknown-endpoint`): then the IP, which may be empty.
fn preferred_host(endpoint: Option<String>, ip: Option<String>) -> String {
    let known = |h: &String| !h.is_empty() && h != "?";
    endpoint.filter(known).or(ip.filter(known)).unwrap_or_default()
}

/// The key/value pairs of a RESP3 map or of a RESP2 flat `[key, value, …]` array, keys as
/// bytes.
fn fields<'a>(value: &'a Value, err: &'static str) -> Result<Vec<(&'a [u8], &'a Value)>> {
    match value {
        Value::Map(pairs) => pairs.iter().map(|(k, v)| Ok((bytes(k).ok_or(ShapeError(err))?, v))).collect(),
        Value::Array(flat) if flat.len() % 2 == 0 => {
            flat.chunks(2).map(|kv| Ok((bytes(&kv[0]).ok_or(ShapeError(err))?, &kv[1]))).collect()
        }
        _ => Err(ShapeError(err)),
    }
}

fn bytes(value: &Value) -> Option<&[u8]> {
    match value {
        Value::Str(s) | Value::Text(s) => Some(s),
        _ => None,
    }
}

fn text(value: &Value) -> Option<String> {
    bytes(value).and_then(|b| std::str::from_utf8(b).ok()).map(str::to_owned)
}

/// An integer reply, or (leniently) a string of digits: every server sends integers here,
/// but nothing is lost by reading a number sent as text.
fn int(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n) => Some(*n),
        other => std::str::from_utf8(bytes(other)?).ok()?.parse().ok(),
    }
}

fn port_of(value: &Value, err: &'static str) -> Result<u16> {
    int(value).and_then(|n| u16::try_from(n).ok()).ok_or(ShapeError(err))
}

fn slot_range(start: &Value, end: &Value, err: &'static str) -> Result<(u16, u16)> {
    let slot = |v: &Value| int(v).and_then(|n| u16::try_from(n).ok()).filter(|&s| s < SLOTS);
    match (slot(start), slot(end)) {
        (Some(start), Some(end)) if start <= end => Ok((start, end)),
        _ => Err(ShapeError(err)),
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::config::{Limits, Protocol};
    use crate::decode::{Decoder, Frame};

    /// Decodes one whole captured frame.
    fn decode(bytes: &[u8], protocol: Protocol) -> Value {
        let mut d = Decoder::new(Limits::default());
        d.extend(bytes);
        let frame = d.next(protocol).unwrap();
        assert_eq!(d.buffered(), 0, "one frame");
        match frame {
            Some(Frame::Reply(v)) => v,
            other => panic!("{other:?}"),
        }
    }

    fn s(x: &str) -> Value {
        Value::Str(Bytes::copy_from_slice(x.as_bytes()))
    }

    fn node(host: &str, port: u16, id: &str) -> Node {
        Node { host: host.into(), port, tls_port: None, id: Some(id.into()) }
    }

    const ID1: &str = "ae489b78b3d573eb40546da354da41f9d0857466";
    const ID2: &str = "3fe16584105df155488a973092cccddcc3b53679";
    const ID3: &str = "30604548fcc8f7714893f30c50ebe5293533a14a";

    /// The three masters of the throwaway Redis 7.0.15 cluster the replies below come from
    /// (0-5460, 5461-10922, 10923-16383).
    fn three() -> Vec<Node> {
        vec![node("127.0.0.1", 27301, ID1), node("127.0.0.1", 27302, ID2), node("127.0.0.1", 27303, ID3)]
    }

    fn check_three(map: &SlotMap) {
        assert_eq!(map.covered(), 16384);
        let [n1, n2, n3] = <[Node; 3]>::try_from(three()).unwrap();
        assert_eq!(map.owner(0), Some(&n1));
        assert_eq!(map.owner(5460), Some(&n1));
        assert_eq!(map.owner(5461), Some(&n2));
        assert_eq!(map.owner(10922), Some(&n2));
        assert_eq!(map.owner(10923), Some(&n3));
        assert_eq!(map.owner(16383), Some(&n3));
        assert_eq!(map.owner(16384), None);
        assert_eq!(map.owner_of_key(b"foo"), Some(&n3)); // slot 12182, as MOVED said
        assert_eq!(map.owner_of_key(b"bar"), Some(&n1)); // slot 5061
        let mut masters = map.masters().to_vec();
        masters.sort_by_key(|n| n.port);
        assert_eq!(masters, three());
    }

    // Captured from Redis 7.0.15: 3 masters, no replicas yet.
    const SLOTS_RESP2: &[u8] = b"*3\r\n*3\r\n:0\r\n:5460\r\n*4\r\n$9\r\n127.0.0.1\r\n:27301\r\n$40\r\nae489b78b3d573eb40546da354da41f9d0857466\r\n*0\r\n*3\r\n:5461\r\n:10922\r\n*4\r\n$9\r\n127.0.0.1\r\n:27302\r\n$40\r\n3fe16584105df155488a973092cccddcc3b53679\r\n*0\r\n*3\r\n:10923\r\n:16383\r\n*4\r\n$9\r\n127.0.0.1\r\n:27303\r\n$40\r\n30604548fcc8f7714893f30c50ebe5293533a14a\r\n*0\r\n";
    const SLOTS_RESP3: &[u8] = b"*3\r\n*3\r\n:0\r\n:5460\r\n*4\r\n$9\r\n127.0.0.1\r\n:27301\r\n$40\r\nae489b78b3d573eb40546da354da41f9d0857466\r\n%0\r\n*3\r\n:5461\r\n:10922\r\n*4\r\n$9\r\n127.0.0.1\r\n:27302\r\n$40\r\n3fe16584105df155488a973092cccddcc3b53679\r\n%0\r\n*3\r\n:10923\r\n:16383\r\n*4\r\n$9\r\n127.0.0.1\r\n:27303\r\n$40\r\n30604548fcc8f7714893f30c50ebe5293533a14a\r\n%0\r\n";
    const SHARDS_RESP2: &[u8] = b"*3\r\n*4\r\n$5\r\nslots\r\n*2\r\n:10923\r\n:16383\r\n$5\r\nnodes\r\n*1\r\n*14\r\n$2\r\nid\r\n$40\r\n30604548fcc8f7714893f30c50ebe5293533a14a\r\n$4\r\nport\r\n:27303\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n$6\r\nonline\r\n*4\r\n$5\r\nslots\r\n*2\r\n:5461\r\n:10922\r\n$5\r\nnodes\r\n*1\r\n*14\r\n$2\r\nid\r\n$40\r\n3fe16584105df155488a973092cccddcc3b53679\r\n$4\r\nport\r\n:27302\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n$6\r\nonline\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:5460\r\n$5\r\nnodes\r\n*1\r\n*14\r\n$2\r\nid\r\n$40\r\nae489b78b3d573eb40546da354da41f9d0857466\r\n$4\r\nport\r\n:27301\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n$6\r\nonline\r\n";
    const SHARDS_RESP3: &[u8] = b"*3\r\n%2\r\n$5\r\nslots\r\n*2\r\n:10923\r\n:16383\r\n$5\r\nnodes\r\n*1\r\n%7\r\n$2\r\nid\r\n$40\r\n30604548fcc8f7714893f30c50ebe5293533a14a\r\n$4\r\nport\r\n:27303\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n$6\r\nonline\r\n%2\r\n$5\r\nslots\r\n*2\r\n:5461\r\n:10922\r\n$5\r\nnodes\r\n*1\r\n%7\r\n$2\r\nid\r\n$40\r\n3fe16584105df155488a973092cccddcc3b53679\r\n$4\r\nport\r\n:27302\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n$6\r\nonline\r\n%2\r\n$5\r\nslots\r\n*2\r\n:0\r\n:5460\r\n$5\r\nnodes\r\n*1\r\n%7\r\n$2\r\nid\r\n$40\r\nae489b78b3d573eb40546da354da41f9d0857466\r\n$4\r\nport\r\n:27301\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n$6\r\nonline\r\n";

    // The same cluster with a replica per master (27304-6, still `loading` in the RESP3
    // SHARDS, and then left out of SLOTS), and slot 100 given to the second master: its first
    // shard lists `slots [0, 99, 101, 5460]`.
    const SLOTS_SPLIT_RESP2: &[u8] = b"*5\r\n*4\r\n:0\r\n:99\r\n*4\r\n$9\r\n127.0.0.1\r\n:27301\r\n$40\r\nae489b78b3d573eb40546da354da41f9d0857466\r\n*0\r\n*4\r\n$9\r\n127.0.0.1\r\n:27304\r\n$40\r\n3d9d687880888431679b24c1cd51c0f672875670\r\n*0\r\n*4\r\n:100\r\n:100\r\n*4\r\n$9\r\n127.0.0.1\r\n:27302\r\n$40\r\n3fe16584105df155488a973092cccddcc3b53679\r\n*0\r\n*4\r\n$9\r\n127.0.0.1\r\n:27305\r\n$40\r\n4eea4ced4edef4a4054ba057ac18a9df648122bc\r\n*0\r\n*4\r\n:101\r\n:5460\r\n*4\r\n$9\r\n127.0.0.1\r\n:27301\r\n$40\r\nae489b78b3d573eb40546da354da41f9d0857466\r\n*0\r\n*4\r\n$9\r\n127.0.0.1\r\n:27304\r\n$40\r\n3d9d687880888431679b24c1cd51c0f672875670\r\n*0\r\n*4\r\n:5461\r\n:10922\r\n*4\r\n$9\r\n127.0.0.1\r\n:27302\r\n$40\r\n3fe16584105df155488a973092cccddcc3b53679\r\n*0\r\n*4\r\n$9\r\n127.0.0.1\r\n:27305\r\n$40\r\n4eea4ced4edef4a4054ba057ac18a9df648122bc\r\n*0\r\n*4\r\n:10923\r\n:16383\r\n*4\r\n$9\r\n127.0.0.1\r\n:27303\r\n$40\r\n30604548fcc8f7714893f30c50ebe5293533a14a\r\n*0\r\n*4\r\n$9\r\n127.0.0.1\r\n:27306\r\n$40\r\n34ace6f8f2206ea98f7c7f0a531e666ae6177676\r\n*0\r\n";
    const SHARDS_SPLIT_RESP2: &[u8] = b"*3\r\n*4\r\n$5\r\nslots\r\n*4\r\n:0\r\n:99\r\n:101\r\n:5460\r\n$5\r\nnodes\r\n*2\r\n*14\r\n$2\r\nid\r\n$40\r\nae489b78b3d573eb40546da354da41f9d0857466\r\n$4\r\nport\r\n:27301\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:28\r\n$6\r\nhealth\r\n$6\r\nonline\r\n*14\r\n$2\r\nid\r\n$40\r\n3d9d687880888431679b24c1cd51c0f672875670\r\n$4\r\nport\r\n:27304\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$7\r\nreplica\r\n$18\r\nreplication-offset\r\n:14\r\n$6\r\nhealth\r\n$6\r\nonline\r\n*4\r\n$5\r\nslots\r\n*2\r\n:10923\r\n:16383\r\n$5\r\nnodes\r\n*2\r\n*14\r\n$2\r\nid\r\n$40\r\n30604548fcc8f7714893f30c50ebe5293533a14a\r\n$4\r\nport\r\n:27303\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:28\r\n$6\r\nhealth\r\n$6\r\nonline\r\n*14\r\n$2\r\nid\r\n$40\r\n34ace6f8f2206ea98f7c7f0a531e666ae6177676\r\n$4\r\nport\r\n:27306\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$7\r\nreplica\r\n$18\r\nreplication-offset\r\n:28\r\n$6\r\nhealth\r\n$6\r\nonline\r\n*4\r\n$5\r\nslots\r\n*4\r\n:100\r\n:100\r\n:5461\r\n:10922\r\n$5\r\nnodes\r\n*2\r\n*14\r\n$2\r\nid\r\n$40\r\n3fe16584105df155488a973092cccddcc3b53679\r\n$4\r\nport\r\n:27302\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:28\r\n$6\r\nhealth\r\n$6\r\nonline\r\n*14\r\n$2\r\nid\r\n$40\r\n4eea4ced4edef4a4054ba057ac18a9df648122bc\r\n$4\r\nport\r\n:27305\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$7\r\nreplica\r\n$18\r\nreplication-offset\r\n:14\r\n$6\r\nhealth\r\n$6\r\nonline\r\n";
    const SHARDS_LOADING_RESP3: &[u8] = b"*3\r\n%2\r\n$5\r\nslots\r\n*2\r\n:0\r\n:5460\r\n$5\r\nnodes\r\n*2\r\n%7\r\n$2\r\nid\r\n$40\r\nae489b78b3d573eb40546da354da41f9d0857466\r\n$4\r\nport\r\n:27301\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:14\r\n$6\r\nhealth\r\n$6\r\nonline\r\n%7\r\n$2\r\nid\r\n$40\r\n3d9d687880888431679b24c1cd51c0f672875670\r\n$4\r\nport\r\n:27304\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$7\r\nreplica\r\n$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n$7\r\nloading\r\n%2\r\n$5\r\nslots\r\n*2\r\n:10923\r\n:16383\r\n$5\r\nnodes\r\n*2\r\n%7\r\n$2\r\nid\r\n$40\r\n30604548fcc8f7714893f30c50ebe5293533a14a\r\n$4\r\nport\r\n:27303\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n$6\r\nonline\r\n%7\r\n$2\r\nid\r\n$40\r\n34ace6f8f2206ea98f7c7f0a531e666ae6177676\r\n$4\r\nport\r\n:27306\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$7\r\nreplica\r\n$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n$7\r\nloading\r\n%2\r\n$5\r\nslots\r\n*2\r\n:5461\r\n:10922\r\n$5\r\nnodes\r\n*2\r\n%7\r\n$2\r\nid\r\n$40\r\n3fe16584105df155488a973092cccddcc3b53679\r\n$4\r\nport\r\n:27302\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n$6\r\nonline\r\n%7\r\n$2\r\nid\r\n$40\r\n4eea4ced4edef4a4054ba057ac18a9df648122bc\r\n$4\r\nport\r\n:27305\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$7\r\nreplica\r\n$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n$7\r\nloading\r\n";

    // `cluster-preferred-endpoint-type hostname` on the second master, first without a
    // hostname anywhere (endpoint `?`, SLOTS metadata `[ip …]`), then with
    // `cluster-announce-hostname node2.example` on that node only.
    const SLOTS_HOSTNAME_RESP2: &[u8] = b"*3\r\n*3\r\n:0\r\n:5460\r\n*4\r\n$1\r\n?\r\n:27301\r\n$40\r\nae489b78b3d573eb40546da354da41f9d0857466\r\n*2\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n*3\r\n:5461\r\n:10922\r\n*4\r\n$13\r\nnode2.example\r\n:27302\r\n$40\r\n3fe16584105df155488a973092cccddcc3b53679\r\n*2\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n*3\r\n:10923\r\n:16383\r\n*4\r\n$1\r\n?\r\n:27303\r\n$40\r\n30604548fcc8f7714893f30c50ebe5293533a14a\r\n*2\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n";
    const SLOTS_HOSTNAME_RESP3: &[u8] = b"*3\r\n*3\r\n:0\r\n:5460\r\n*4\r\n$1\r\n?\r\n:27301\r\n$40\r\nae489b78b3d573eb40546da354da41f9d0857466\r\n%1\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n*3\r\n:5461\r\n:10922\r\n*4\r\n$13\r\nnode2.example\r\n:27302\r\n$40\r\n3fe16584105df155488a973092cccddcc3b53679\r\n%1\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n*3\r\n:10923\r\n:16383\r\n*4\r\n$1\r\n?\r\n:27303\r\n$40\r\n30604548fcc8f7714893f30c50ebe5293533a14a\r\n%1\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n";
    const SHARDS_HOSTNAME_RESP2: &[u8] = b"*3\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:5460\r\n$5\r\nnodes\r\n*1\r\n*14\r\n$2\r\nid\r\n$40\r\nae489b78b3d573eb40546da354da41f9d0857466\r\n$4\r\nport\r\n:27301\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$1\r\n?\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n$6\r\nonline\r\n*4\r\n$5\r\nslots\r\n*2\r\n:5461\r\n:10922\r\n$5\r\nnodes\r\n*1\r\n*16\r\n$2\r\nid\r\n$40\r\n3fe16584105df155488a973092cccddcc3b53679\r\n$4\r\nport\r\n:27302\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$13\r\nnode2.example\r\n$8\r\nhostname\r\n$13\r\nnode2.example\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n$6\r\nonline\r\n*4\r\n$5\r\nslots\r\n*2\r\n:10923\r\n:16383\r\n$5\r\nnodes\r\n*1\r\n*14\r\n$2\r\nid\r\n$40\r\n30604548fcc8f7714893f30c50ebe5293533a14a\r\n$4\r\nport\r\n:27303\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$1\r\n?\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n$6\r\nonline\r\n";

    // `cluster-preferred-endpoint-type unknown-endpoint`: SLOTS sends a nil endpoint, SHARDS
    // an empty one (and MOVED `:port`); the `ip` is still there.
    const SLOTS_UNKNOWN_RESP2: &[u8] = b"*3\r\n*3\r\n:0\r\n:5460\r\n*4\r\n$-1\r\n:27301\r\n$40\r\nae489b78b3d573eb40546da354da41f9d0857466\r\n*2\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n*3\r\n:5461\r\n:10922\r\n*4\r\n$-1\r\n:27302\r\n$40\r\n3fe16584105df155488a973092cccddcc3b53679\r\n*4\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nhostname\r\n$13\r\nnode2.example\r\n*3\r\n:10923\r\n:16383\r\n*4\r\n$-1\r\n:27303\r\n$40\r\n30604548fcc8f7714893f30c50ebe5293533a14a\r\n*2\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n";
    const SLOTS_UNKNOWN_RESP3: &[u8] = b"*3\r\n*3\r\n:0\r\n:5460\r\n*4\r\n_\r\n:27301\r\n$40\r\nae489b78b3d573eb40546da354da41f9d0857466\r\n%1\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n*3\r\n:5461\r\n:10922\r\n*4\r\n_\r\n:27302\r\n$40\r\n3fe16584105df155488a973092cccddcc3b53679\r\n%2\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nhostname\r\n$13\r\nnode2.example\r\n*3\r\n:10923\r\n:16383\r\n*4\r\n_\r\n:27303\r\n$40\r\n30604548fcc8f7714893f30c50ebe5293533a14a\r\n%1\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n";
    const SHARDS_UNKNOWN_RESP3: &[u8] = b"*3\r\n%2\r\n$5\r\nslots\r\n*2\r\n:0\r\n:5460\r\n$5\r\nnodes\r\n*1\r\n%7\r\n$2\r\nid\r\n$40\r\nae489b78b3d573eb40546da354da41f9d0857466\r\n$4\r\nport\r\n:27301\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$0\r\n\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n$6\r\nonline\r\n%2\r\n$5\r\nslots\r\n*2\r\n:5461\r\n:10922\r\n$5\r\nnodes\r\n*1\r\n%8\r\n$2\r\nid\r\n$40\r\n3fe16584105df155488a973092cccddcc3b53679\r\n$4\r\nport\r\n:27302\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$0\r\n\r\n$8\r\nhostname\r\n$13\r\nnode2.example\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n$6\r\nonline\r\n%2\r\n$5\r\nslots\r\n*2\r\n:10923\r\n:16383\r\n$5\r\nnodes\r\n*1\r\n%7\r\n$2\r\nid\r\n$40\r\n30604548fcc8f7714893f30c50ebe5293533a14a\r\n$4\r\nport\r\n:27303\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$0\r\n\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n$6\r\nonline\r\n";

    // A lone Redis 7.0.15 node with `--tls-port 27312 --tls-cluster yes`, all slots added: it
    // has met no peer, so its `ip` and `endpoint` are empty.
    const SHARDS_TLS_RESP2: &[u8] = b"*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:16383\r\n$5\r\nnodes\r\n*1\r\n*16\r\n$2\r\nid\r\n$40\r\nfc429fb947c68b69490b289c5bca7a3d297514b2\r\n$4\r\nport\r\n:27311\r\n$8\r\ntls-port\r\n:27312\r\n$2\r\nip\r\n$0\r\n\r\n$8\r\nendpoint\r\n$0\r\n\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n$6\r\nonline\r\n";
    const SHARDS_TLS_RESP3: &[u8] = b"*1\r\n%2\r\n$5\r\nslots\r\n*2\r\n:0\r\n:16383\r\n$5\r\nnodes\r\n*1\r\n%8\r\n$2\r\nid\r\n$40\r\nfc429fb947c68b69490b289c5bca7a3d297514b2\r\n$4\r\nport\r\n:27311\r\n$8\r\ntls-port\r\n:27312\r\n$2\r\nip\r\n$0\r\n\r\n$8\r\nendpoint\r\n$0\r\n\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n$6\r\nonline\r\n";
    const SLOTS_TLS_RESP2: &[u8] = b"*1\r\n*3\r\n:0\r\n:16383\r\n*4\r\n$0\r\n\r\n:27311\r\n$40\r\nfc429fb947c68b69490b289c5bca7a3d297514b2\r\n*0\r\n";

    // Lone nodes with slots 0-10 and 12182 added: Redis 6.2.14 (SLOTS nodes have no metadata,
    // and there is no SHARDS) and Valkey 8.1.8.
    const SLOTS_62: &[u8] = b"*2\r\n*3\r\n:0\r\n:10\r\n*3\r\n$0\r\n\r\n:27321\r\n$40\r\nf60cf342e240ffb96ad95fb61d066b9160d6b6ab\r\n*3\r\n:12182\r\n:12182\r\n*3\r\n$0\r\n\r\n:27321\r\n$40\r\nf60cf342e240ffb96ad95fb61d066b9160d6b6ab\r\n";
    const SHARDS_VALKEY_RESP3: &[u8] = b"*1\r\n%2\r\n$5\r\nslots\r\n*4\r\n:0\r\n:10\r\n:12182\r\n:12182\r\n$5\r\nnodes\r\n*1\r\n%7\r\n$2\r\nid\r\n$40\r\n374e05c9b2b261f1cf32acecd545412d89aaf5c9\r\n$4\r\nport\r\n:27322\r\n$2\r\nip\r\n$0\r\n\r\n$8\r\nendpoint\r\n$0\r\n\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n$6\r\nonline\r\n";
    const SLOTS_VALKEY_RESP3: &[u8] = b"*2\r\n*3\r\n:0\r\n:10\r\n*4\r\n$0\r\n\r\n:27322\r\n$40\r\n374e05c9b2b261f1cf32acecd545412d89aaf5c9\r\n%0\r\n*3\r\n:12182\r\n:12182\r\n*4\r\n$0\r\n\r\n:27322\r\n$40\r\n374e05c9b2b261f1cf32acecd545412d89aaf5c9\r\n%0\r\n";

    #[test]
    fn three_masters_from_either_reply_and_protocol() {
        check_three(&SlotMap::from_slots(&decode(SLOTS_RESP2, Protocol::Resp2)).unwrap());
        check_three(&SlotMap::from_slots(&decode(SLOTS_RESP3, Protocol::Resp3)).unwrap());
        check_three(&SlotMap::from_shards(&decode(SHARDS_RESP2, Protocol::Resp2)).unwrap());
        check_three(&SlotMap::from_shards(&decode(SHARDS_RESP3, Protocol::Resp3)).unwrap());
        // Replicas (some `loading`) change nothing.
        check_three(&SlotMap::from_shards(&decode(SHARDS_LOADING_RESP3, Protocol::Resp3)).unwrap());
    }

    #[test]
    fn split_ranges_and_replicas() {
        let slots = SlotMap::from_slots(&decode(SLOTS_SPLIT_RESP2, Protocol::Resp2)).unwrap();
        let shards = SlotMap::from_shards(&decode(SHARDS_SPLIT_RESP2, Protocol::Resp2)).unwrap();
        for map in [&slots, &shards] {
            assert_eq!(map.covered(), 16384);
            assert_eq!(map.masters().len(), 3, "{:?}", map.masters());
            assert_eq!(map.owner(99).unwrap().port, 27301);
            assert_eq!(map.owner(100).unwrap().port, 27302);
            assert_eq!(map.owner(101).unwrap().port, 27301);
            assert_eq!(map.owner(16383).unwrap().port, 27303);
            assert!(map.masters().iter().all(|n| [27301, 27302, 27303].contains(&n.port)));
        }
        assert_eq!(
            slots.owners,
            shards.owners.iter().map(|&i| [0, 2, 1][usize::from(i)]).collect::<Vec<_>>()
        );
    }

    #[test]
    fn endpoint_preferred_over_ip_unless_unknown() {
        for map in [
            SlotMap::from_slots(&decode(SLOTS_HOSTNAME_RESP2, Protocol::Resp2)).unwrap(),
            SlotMap::from_slots(&decode(SLOTS_HOSTNAME_RESP3, Protocol::Resp3)).unwrap(),
            SlotMap::from_shards(&decode(SHARDS_HOSTNAME_RESP2, Protocol::Resp2)).unwrap(),
        ] {
            // `?` falls back to the ip; a host name given is kept.
            assert_eq!(map.owner(0), Some(&node("127.0.0.1", 27301, ID1)));
            assert_eq!(map.owner(5461), Some(&node("node2.example", 27302, ID2)));
            assert_eq!(map.owner(16383), Some(&node("127.0.0.1", 27303, ID3)));
        }
        for map in [
            SlotMap::from_slots(&decode(SLOTS_UNKNOWN_RESP2, Protocol::Resp2)).unwrap(),
            SlotMap::from_slots(&decode(SLOTS_UNKNOWN_RESP3, Protocol::Resp3)).unwrap(),
            SlotMap::from_shards(&decode(SHARDS_UNKNOWN_RESP3, Protocol::Resp3)).unwrap(),
        ] {
            // Nil or empty endpoint: the ip, not the `hostname` metadata.
            check_three(&map);
        }
    }

    #[test]
    fn tls_ports() {
        let tls = Node {
            host: String::new(),
            port: 27311,
            tls_port: Some(27312),
            id: Some("fc429fb947c68b69490b289c5bca7a3d297514b2".into()),
        };
        for map in [
            SlotMap::from_shards(&decode(SHARDS_TLS_RESP2, Protocol::Resp2)).unwrap(),
            SlotMap::from_shards(&decode(SHARDS_TLS_RESP3, Protocol::Resp3)).unwrap(),
        ] {
            assert_eq!(map.covered(), 16384);
            assert_eq!(map.masters(), std::slice::from_ref(&tls));
        }
        // SLOTS has no tls-port: its port is the one for the asking connection's kind.
        let map = SlotMap::from_slots(&decode(SLOTS_TLS_RESP2, Protocol::Resp2)).unwrap();
        assert_eq!(map.masters(), [Node { tls_port: None, ..tls }]);
    }

    #[test]
    fn partial_maps_from_lone_nodes() {
        let maps = [
            SlotMap::from_slots(&decode(SLOTS_62, Protocol::Resp2)).unwrap(),
            SlotMap::from_slots(&decode(SLOTS_62, Protocol::Resp3)).unwrap(),
            SlotMap::from_slots(&decode(SLOTS_VALKEY_RESP3, Protocol::Resp3)).unwrap(),
            SlotMap::from_shards(&decode(SHARDS_VALKEY_RESP3, Protocol::Resp3)).unwrap(),
        ];
        for map in &maps {
            assert_eq!(map.covered(), 12);
            assert_eq!(map.masters().len(), 1);
            assert_eq!(map.masters()[0].host, "");
            assert!(map.owner(10).is_some() && map.owner_of_key(b"foo").is_some());
            assert!(map.owner(11).is_none() && map.owner(12181).is_none() && map.owner(16383).is_none());
        }
        assert_eq!(maps[0].masters()[0].port, 27321);
        assert_eq!(maps[3].masters()[0].port, 27322);
    }

    fn map(pairs: &[(&str, Value)]) -> Value {
        Value::Map(pairs.iter().map(|(k, v)| (s(k), v.clone())).collect())
    }

    fn shard_node_value(id: &str, port: Option<i64>, tls: Option<i64>, role: &str, health: &str) -> Value {
        let mut pairs = vec![("id", s(id)), ("ip", s("10.0.0.1")), ("endpoint", s("10.0.0.1"))];
        pairs.extend(port.map(|p| ("port", Value::Int(p))));
        pairs.extend(tls.map(|p| ("tls-port", Value::Int(p))));
        pairs.extend([("role", s(role)), ("health", s(health))]);
        map(&pairs)
    }

    fn shard(slots: &[i64], nodes: Vec<Value>) -> Value {
        map(&[
            ("slots", Value::Array(slots.iter().map(|&n| Value::Int(n)).collect())),
            ("nodes", Value::Array(nodes)),
        ])
    }

    #[test]
    fn shard_master_choice() {
        // A failed master still listed beside the replica promoted in its place.
        let reply = Value::Array(vec![shard(
            &[0, 16383],
            vec![
                shard_node_value("old", Some(7000), None, "master", "fail"),
                shard_node_value("new", Some(7001), None, "master", "online"),
                shard_node_value("rep", Some(7002), None, "replica", "online"),
            ],
        )]);
        let map = SlotMap::from_shards(&reply).unwrap();
        assert_eq!(map.owner(0).unwrap().id.as_deref(), Some("new"));
        // A TLS-only node (no plaintext port, or 0) is reached on its TLS port.
        for port in [None, Some(0)] {
            let reply = Value::Array(vec![shard(
                &[0, 1],
                vec![shard_node_value("t", port, Some(7443), "master", "online")],
            )]);
            let owner = SlotMap::from_shards(&reply).unwrap().owner(1).cloned().unwrap();
            assert_eq!((owner.port, owner.tls_port), (7443, Some(7443)));
        }
        // Slots but no master: left unowned; no slots: nothing.
        let reply = Value::Array(vec![
            shard(&[0, 99], vec![shard_node_value("r", Some(7000), None, "replica", "online")]),
            shard(&[], vec![shard_node_value("m", Some(7001), None, "master", "online")]),
        ]);
        let map = SlotMap::from_shards(&reply).unwrap();
        assert_eq!((map.covered(), map.masters().len()), (0, 0));
        // Numbers sent as strings are read all the same.
        let reply = Value::Array(vec![map_shard_with_string_numbers()]);
        assert_eq!(SlotMap::from_shards(&reply).unwrap().owner(5).unwrap().port, 7000);
        assert_eq!(SlotMap::from_shards(&Value::Array(vec![])).unwrap().covered(), 0);
    }

    fn map_shard_with_string_numbers() -> Value {
        map(&[
            ("slots", Value::Array(vec![s("0"), s("10")])),
            ("nodes", Value::Array(vec![map(&[("id", s("x")), ("port", s("7000")), ("role", s("master"))])])),
        ])
    }

    #[test]
    fn garbage_is_a_shape_error() {
        let int = Value::Int;
        let slots_node = |port: Value| Value::Array(vec![s("h"), port, s("id")]);
        let range = |a: Value, b: Value| Value::Array(vec![a, b, slots_node(int(7000))]);
        for bad in [
            Value::Nil,
            int(1),
            s("x"),
            Value::Map(vec![]),
            Value::Array(vec![int(1)]),
            Value::Array(vec![Value::Array(vec![int(0), int(1)])]),
            Value::Array(vec![range(int(5), int(1))]),
            Value::Array(vec![range(int(0), int(16384))]),
            Value::Array(vec![range(int(-1), int(1))]),
            Value::Array(vec![range(s("a"), int(1))]),
            Value::Array(vec![Value::Array(vec![int(0), int(1), slots_node(int(70000))])]),
            Value::Array(vec![Value::Array(vec![int(0), int(1), slots_node(int(-1))])]),
            Value::Array(vec![Value::Array(vec![int(0), int(1), Value::Array(vec![s("h")])])]),
            Value::Array(vec![Value::Array(vec![int(0), int(1), Value::Array(vec![int(1), int(7000)])])]),
            Value::Array(vec![Value::Array(vec![
                int(0),
                int(1),
                Value::Array(vec![s("h"), int(1), int(2)]),
            ])]),
            Value::Array(vec![Value::Array(vec![
                int(0),
                int(1),
                Value::Array(vec![s("h"), int(1), s("i"), int(3)]),
            ])]),
        ] {
            assert!(SlotMap::from_slots(&bad).is_err(), "SLOTS {bad:?}");
        }
        let good_node = shard_node_value("m", Some(7000), None, "master", "online");
        for bad in [
            Value::Nil,
            Value::Array(vec![int(1)]),
            Value::Array(vec![Value::Array(vec![s("slots")])]),
            Value::Array(vec![map(&[("slots", Value::Array(vec![]))])]),
            Value::Array(vec![map(&[("nodes", Value::Array(vec![]))])]),
            Value::Array(vec![map(&[("slots", Value::Nil), ("nodes", Value::Array(vec![]))])]),
            Value::Array(vec![shard(&[0], vec![good_node.clone()])]),
            Value::Array(vec![shard(&[0, 1, 2], vec![good_node.clone()])]),
            Value::Array(vec![shard(&[3, 2], vec![good_node.clone()])]),
            Value::Array(vec![shard(&[0, 16384], vec![good_node.clone()])]),
            Value::Array(vec![shard(&[0, 1], vec![int(1)])]),
            Value::Array(vec![shard(&[0, 1], vec![Value::Array(vec![s("id")])])]),
            Value::Array(vec![shard(&[0, 1], vec![Value::Map(vec![(int(1), int(2))])])]),
            Value::Array(vec![shard(&[0, 1], vec![map(&[("id", s("m")), ("role", s("master"))])])]),
            Value::Array(vec![shard(&[0, 1], vec![map(&[("id", int(1)), ("port", int(1))])])]),
            Value::Array(vec![shard(&[0, 1], vec![map(&[("id", s("m")), ("port", int(65536))])])]),
            Value::Array(vec![shard(
                &[0, 1],
                vec![map(&[("id", s("m")), ("port", int(1)), ("tls-port", s("x"))])],
            )]),
        ] {
            assert!(SlotMap::from_shards(&bad).is_err(), "SHARDS {bad:?}");
        }
    }

    #[test]
    fn more_masters_than_slots_is_an_error() {
        let node = |i: i64| Value::Array(vec![s("h"), Value::Int(i % 65536), s(&i.to_string())]);
        let reply = Value::Array(
            (0..i64::from(SLOTS) + 1)
                .map(|i| Value::Array(vec![Value::Int(0), Value::Int(0), node(i)]))
                .collect(),
        );
        assert!(SlotMap::from_slots(&reply).is_err());
    }

    /// Every element of the real replies replaced in turn by each of a few wrong values:
    /// either parser may accept or refuse the result, but neither may panic.
    #[test]
    fn mutations_never_panic() {
        fn paths(value: &Value, at: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
            out.push(at.clone());
            let children: Vec<&Value> = match value {
                Value::Array(items) | Value::Other(items) => items.iter().collect(),
                Value::Map(pairs) => pairs.iter().flat_map(|(k, v)| [k, v]).collect(),
                _ => vec![],
            };
            for (i, child) in children.into_iter().enumerate() {
                at.push(i);
                paths(child, at, out);
                at.pop();
            }
        }
        fn at_path<'a>(value: &'a mut Value, path: &[usize]) -> &'a mut Value {
            let Some((&first, rest)) = path.split_first() else { return value };
            let child = match value {
                Value::Array(items) | Value::Other(items) => &mut items[first],
                Value::Map(pairs) => {
                    let (k, v) = &mut pairs[first / 2];
                    if first % 2 == 0 {
                        k
                    } else {
                        v
                    }
                }
                _ => unreachable!(),
            };
            at_path(child, rest)
        }
        let wrong = [
            Value::Nil,
            Value::Int(-1),
            Value::Int(1 << 40),
            s(""),
            s("?"),
            s("\u{fffd}"),
            Value::Error(Bytes::from_static(b"ERR")),
            Value::Array(vec![]),
            Value::Map(vec![]),
            Value::Double(1.5),
        ];
        let replies = [
            (SLOTS_SPLIT_RESP2, Protocol::Resp2),
            (SHARDS_SPLIT_RESP2, Protocol::Resp2),
            (SLOTS_HOSTNAME_RESP3, Protocol::Resp3),
            (SHARDS_TLS_RESP3, Protocol::Resp3),
        ];
        for (bytes, protocol) in replies {
            let original = decode(bytes, protocol);
            let mut all = Vec::new();
            paths(&original, &mut Vec::new(), &mut all);
            for path in all {
                for w in &wrong {
                    let mut value = original.clone();
                    *at_path(&mut value, &path) = w.clone();
                    let _ = SlotMap::from_slots(&value);
                    let _ = SlotMap::from_shards(&value);
                }
            }
        }
    }
}
