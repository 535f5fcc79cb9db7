//! Where each stream's lane belongs in a cluster, asked once before the lanes start.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use pelican::cluster::{read_slot_map, SLOTS_REQUEST};

use crate::resolve::redirect_addr;

/// The master serving each of `keys`, asked of the cluster node at `seed` (`CLUSTER SLOTS`,
/// on a short blocking connection bounded by `timeout`): start each stream's
/// [`Driver`](crate::Driver) there rather than at `seed`, and it reads at once instead of being
/// redirected first. `None` for a key whose slot has no master now.
///
/// Fails if `seed` is not a cluster node (a [`pelican::cluster::SlotMapError`] inside the
/// error), needs
/// authentication, or does not answer: start the lanes at `seed` then (each follows `MOVED`
/// to its master anyway). Plaintext only.
pub fn locate(seed: SocketAddr, keys: &[&[u8]], timeout: Duration) -> io::Result<Vec<Option<SocketAddr>>> {
    let (homes, _) = locate_with_masters(seed, keys, timeout)?;
    Ok(homes)
}

/// [`locate`], and every master the slot map names (as the cluster names them): the nodes a
/// stream tries in turn when its own is gone ([`Driver::fallbacks`](crate::Driver::fallbacks)),
/// until one leads it (`MOVED`) to where a failover moved its slot.
pub fn locate_with_masters(
    seed: SocketAddr,
    keys: &[&[u8]],
    timeout: Duration,
) -> io::Result<(Vec<Option<SocketAddr>>, Vec<pelican::HostPort>)> {
    let mut socket = TcpStream::connect_timeout(&seed, timeout)?;
    socket.set_read_timeout(Some(timeout))?;
    socket.set_write_timeout(Some(timeout))?;
    socket.write_all(SLOTS_REQUEST)?;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let map = loop {
        let n = socket.read(&mut chunk)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        reply.extend_from_slice(&chunk[..n]);
        match read_slot_map(&reply) {
            Ok(Some(map)) => break map,
            Ok(None) => {}
            Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
        }
    };
    let homes = keys
        .iter()
        .map(|key| map.owner_of_key(key).and_then(|node| redirect_addr(&node.host, node.port, seed)))
        .collect();
    let nodes = map
        .masters()
        .iter()
        .map(|node| match node.host.as_str() {
            "" => pelican::HostPort::new(seed.ip().to_string(), node.port),
            host => pelican::HostPort::new(host, node.port),
        })
        .collect();
    Ok((homes, nodes))
}
