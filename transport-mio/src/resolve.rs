//! Host names looked up at every connect: a managed service's primary endpoint, or a name
//! whose address a failover moves, is followed rather than remembered; so are the addresses
//! cluster redirects name.

use std::fmt;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;

/// A lookup of a host and a port, in place of the system's (see `Driver::resolve_with`).
type Lookup = dyn Fn(&str, u16) -> io::Result<Vec<SocketAddr>> + Send + Sync;

/// How host names are looked up: `std`'s resolver, or the caller's own.
#[derive(Clone, Default)]
pub(crate) struct Resolver(Option<Arc<Lookup>>);

impl Resolver {
    /// The caller's own lookup.
    pub(crate) fn with(
        lookup: impl Fn(&str, u16) -> io::Result<Vec<SocketAddr>> + Send + Sync + 'static,
    ) -> Resolver {
        Resolver(Some(Arc::new(lookup)))
    }

    /// The addresses of `host` and `port` now. Never empty when `Ok`.
    pub(crate) fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        let addrs = self.lookup(host, port)?;
        if addrs.is_empty() {
            return Err(io::Error::new(io::ErrorKind::NotFound, format!("{host} resolves to no address")));
        }
        Ok(addrs)
    }

    /// The address of a node a cluster names (in a redirect, in its slot map): `host` an IP
    /// address, or a name the cluster announces, looked up now (its first address); empty:
    /// the host of `current`, the node that named it. `Ok(None)`: it resolves to no address,
    /// or is `?` (the cluster knows none: `cluster-preferred-endpoint-type`).
    pub(crate) fn cluster_node(
        &self,
        host: &str,
        port: u16,
        current: SocketAddr,
    ) -> io::Result<Option<SocketAddr>> {
        match host {
            "" => Ok(Some(SocketAddr::new(current.ip(), port))),
            "?" => Ok(None),
            host => Ok(self.lookup(host, port)?.first().copied()),
        }
    }

    /// The addresses of `host` and `port` now, maybe none.
    pub(crate) fn lookup(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        match &self.0 {
            Some(lookup) => lookup(host, port),
            None => Ok((host, port).to_socket_addrs()?.collect()),
        }
    }
}

impl fmt::Debug for Resolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() { "Resolver(custom)" } else { "Resolver(system)" })
    }
}

/// The addresses of `host` (a name, or an IP address) and `port`, looked up now with `std`'s
/// resolver (blocking: a name the system caches answers at once). Never empty when `Ok`.
pub(crate) fn resolve(host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    let addrs: Vec<SocketAddr> = (host, port).to_socket_addrs()?.collect();
    if addrs.is_empty() {
        let why = format!("{host} resolves to no address");
        return Err(io::Error::new(io::ErrorKind::NotFound, why));
    }
    Ok(addrs)
}

/// `addr` as an endpoint, checked now: a `host:port` text that is not one, a host that does
/// not resolve now (most likely a typo: later lookups that fail are failed connects, retried),
/// or sentinels without a single address are [`RunError::Resolve`].
pub(crate) fn endpoint(addr: impl pelican::IntoEndpoint) -> Result<pelican::Endpoint, crate::RunError> {
    let invalid = |why: String| crate::RunError::Resolve(io::Error::new(io::ErrorKind::InvalidInput, why));
    let endpoint = addr.into_endpoint().map_err(|e| invalid(e.to_string()))?;
    match &endpoint {
        pelican::Endpoint::Node(node) => {
            resolve(&node.host, node.port).map_err(crate::RunError::Resolve)?;
        }
        pelican::Endpoint::Sentinel(sentinels) if sentinels.nodes.is_empty() => {
            return Err(invalid(format!("no sentinel given for {:?}", sentinels.service)));
        }
        _ => {}
    }
    Ok(endpoint)
}
