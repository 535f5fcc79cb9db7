//! Where each stream's lane belongs in a cluster, asked once before the lanes start.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use pelican::cluster::read_slot_map;
use pelican::oneshot::Request;

use crate::resolve::Resolver;
use crate::session::node::Node;
use crate::{SessionConfig, SessionError};

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
    // The one-shot session's connection, unnamed and without a login: nothing but the
    // question is sent.
    let config = SessionConfig::new(seed).timeout(timeout);
    let mut node = Node::open(&config, seed, "").map_err(|e| io_error(e.into_inner()))?;
    let reply = node.exchange(&Request::cluster_slots()).map_err(io_error)?;
    let map = match read_slot_map(reply.as_bytes()) {
        Ok(Some(map)) => map,
        Ok(None) => return Err(io::ErrorKind::UnexpectedEof.into()),
        Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
    };
    let resolver = Resolver::default();
    let homes = keys
        .iter()
        .map(|key| {
            let node = map.owner_of_key(key)?;
            resolver.cluster_node(&node.host, node.port, seed).ok().flatten()
        })
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

/// A session's failure as the I/O error it was (a connect refused, a timeout), or wrapped.
fn io_error(e: SessionError) -> io::Error {
    match e {
        SessionError::Connect { error, .. } | SessionError::Io { error, .. } => error,
        SessionError::Silent { .. } => io::Error::new(io::ErrorKind::TimedOut, e.to_string()),
        SessionError::Closed => io::Error::new(io::ErrorKind::UnexpectedEof, e.to_string()),
        e => io::Error::other(e),
    }
}
