//! `--stream-pattern`: the streams whose keys match a glob, found with `SCAN … MATCH GLOB
//! TYPE stream` (on each master of a cluster, where keys are spread), at the start and again
//! every `--rescan-ms` for those created since.

use pelican::{Endpoint, HostPort};

use crate::client::{array, bytes, Client};
use crate::server::Server;

/// Keys asked per `SCAN` call: a hint to the server, which may answer with more or fewer.
const SCAN_COUNT: &[u8] = b"1000";

/// Every stream key matching `pattern` on `server` (on each of `masters` in a cluster),
/// sorted, without repeats.
pub fn scan(server: &Server, masters: &[HostPort], pattern: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let mut keys = Vec::new();
    match masters {
        [] => scan_node(server, pattern, &mut keys)?,
        masters => {
            for master in masters {
                // The URL's settings (login, TLS) at each master's address.
                let mut node = server.clone();
                node.target.endpoint = Endpoint::Node(master.clone());
                scan_node(&node, pattern, &mut keys).map_err(|e| format!("{master}: {e}"))?;
            }
        }
    }
    keys.sort();
    keys.dedup();
    Ok(keys)
}

/// The whole `SCAN` of one node, its stream keys matching `pattern` added to `keys`.
fn scan_node(server: &Server, pattern: &[u8], keys: &mut Vec<Vec<u8>>) -> Result<(), String> {
    let mut client = Client::connect(server, "pelican:stream-pattern")?;
    let mut cursor = b"0".to_vec();
    loop {
        let reply =
            client.call(&[b"SCAN", &cursor, b"MATCH", pattern, b"COUNT", SCAN_COUNT, b"TYPE", b"stream"])?;
        let shape = || "SCAN: an answer of another shape".to_string();
        let [next, found] = array(&reply).ok_or_else(shape)? else { return Err(shape()) };
        for key in array(found).ok_or_else(shape)? {
            keys.push(bytes(key).ok_or_else(shape)?.to_vec());
        }
        cursor = bytes(next).ok_or_else(shape)?.to_vec();
        if cursor == b"0" {
            return Ok(());
        }
    }
}
