//! `--stream-pattern`: the streams whose keys match a glob, found with `SCAN … MATCH GLOB
//! TYPE stream` (on each master of a cluster, where keys are spread), at the start and again
//! every `--rescan-ms` for those created since.

use pelican::oneshot::StreamScan;
use pelican::{Endpoint, HostPort};

use crate::server::Server;

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
    let mut session = server.connect("pelican:stream-pattern")?;
    let mut scan = StreamScan::new(pattern);
    while let Some(request) = scan.request() {
        let reply = session.call(&request).map_err(|e| server.said(e))?;
        keys.extend(scan.read(&reply).map_err(|e| e.to_string())?.iter().map(|key| key.to_vec()));
    }
    Ok(())
}
