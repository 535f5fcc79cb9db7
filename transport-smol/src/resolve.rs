//! Host names looked up at every connect (on smol's blocking pool): a managed service's
//! primary endpoint, or a name whose address a failover moves, is followed rather than
//! remembered; so are the addresses cluster redirects name.

use std::fmt;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use pelican::{Endpoint, IntoEndpoint};

use crate::error::RunError;

/// The addresses of `host` and `port`, looked up now on smol's blocking pool. Never empty
/// when `Ok`.
pub(crate) async fn resolve(host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    let addrs = smol::net::resolve((host, port)).await?;
    if addrs.is_empty() {
        return Err(io::Error::new(io::ErrorKind::NotFound, format!("{host} resolves to no address")));
    }
    Ok(addrs)
}

/// A lookup of a host and a port, in place of the system's (see `Runner::resolve_with`).
type Lookup = dyn Fn(&str, u16) -> io::Result<Vec<SocketAddr>> + Send + Sync;

/// How host names are looked up: the system's resolver, or the caller's own; either on
/// smol's blocking pool.
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
    pub(crate) async fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        let Some(lookup) = self.0.clone() else { return resolve(host, port).await };
        let name = host.to_string();
        let addrs = smol::unblock(move || lookup(&name, port)).await?;
        if addrs.is_empty() {
            return Err(io::Error::new(io::ErrorKind::NotFound, format!("{host} resolves to no address")));
        }
        Ok(addrs)
    }
}

impl fmt::Debug for Resolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() { "Resolver(custom)" } else { "Resolver(system)" })
    }
}

/// A redirect's address: `host` (empty: the host of `current`) and `port`. Cluster nodes
/// name themselves by IP address; a name is resolved on smol's blocking pool (`None` if it
/// fails).
pub(crate) async fn redirect_addr(host: &str, port: u16, current: SocketAddr) -> Option<SocketAddr> {
    if host.is_empty() {
        return Some(SocketAddr::new(current.ip(), port));
    }
    resolve(host, port).await.ok()?.first().copied()
}

/// `addr` as an endpoint; a text that is not one, or sentinels without a single address,
/// are [`RunError::Resolve`].
pub(crate) fn endpoint(addr: impl IntoEndpoint) -> Result<Endpoint, RunError> {
    let invalid = |why: String| RunError::Resolve(io::Error::new(io::ErrorKind::InvalidInput, why));
    let endpoint = addr.into_endpoint().map_err(|e| invalid(e.to_string()))?;
    match &endpoint {
        Endpoint::Sentinel(sentinels) if sentinels.nodes.is_empty() => {
            Err(invalid(format!("no sentinel given for {:?}", sentinels.service)))
        }
        _ => Ok(endpoint),
    }
}

/// [`endpoint`], and a node's host looked up now, blocking (most likely a typo if it does
/// not resolve: later lookups that fail are failed connects, retried).
pub(crate) fn checked(addr: impl IntoEndpoint) -> Result<Endpoint, RunError> {
    let endpoint = endpoint(addr)?;
    if let Endpoint::Node(node) = &endpoint {
        let found = (node.host.as_str(), node.port).to_socket_addrs().map_err(RunError::Resolve)?;
        if found.count() == 0 {
            let none =
                io::Error::new(io::ErrorKind::NotFound, format!("{} resolves to no address", node.host));
            return Err(RunError::Resolve(none));
        }
    }
    Ok(endpoint)
}

/// [`checked`], looking the host up on smol's blocking pool.
pub(crate) async fn checked_async(addr: impl IntoEndpoint) -> Result<Endpoint, RunError> {
    let endpoint = endpoint(addr)?;
    if let Endpoint::Node(node) = &endpoint {
        resolve(&node.host, node.port).await.map_err(RunError::Resolve)?;
    }
    Ok(endpoint)
}
