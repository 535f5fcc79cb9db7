//! Where a server is: a node by host and port, or a service that sentinels watch — the
//! address a transport is given ([`IntoEndpoint`]) and a [`Locator`](crate::Locator) follows.

use std::fmt;

use crate::config::Auth;

/// A host name or IP address and a port.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostPort {
    /// A host name, or an IP address (an IPv6 one without brackets).
    pub host: String,
    /// The port.
    pub port: u16,
}

impl HostPort {
    /// A host and a port.
    pub fn new(host: impl Into<String>, port: u16) -> HostPort {
        HostPort { host: host.into(), port }
    }

    /// Parses `host:port`, `[v6]:port` or a bare IPv6 address with its port after the last
    /// colon (`::1:6379`), as `std`'s resolver and cluster redirects write them.
    pub fn parse(text: &str) -> Result<HostPort, EndpointError> {
        let bad = |why: &'static str| EndpointError { text: text.to_string(), why };
        let (host, port) = text.rsplit_once(':').ok_or(bad("no port (host:port)"))?;
        let port = port.parse::<u16>().ok().filter(|p| *p != 0).ok_or(bad("the port is not 1-65535"))?;
        let host = match host.strip_prefix('[') {
            Some(inner) => inner.strip_suffix(']').ok_or(bad("unclosed [ in the host"))?,
            None => host,
        };
        if host.is_empty() {
            return Err(bad("the host is missing"));
        }
        Ok(HostPort::new(host, port))
    }
}

impl std::str::FromStr for HostPort {
    type Err = EndpointError;

    fn from_str(text: &str) -> Result<HostPort, EndpointError> {
        HostPort::parse(text)
    }
}

impl std::str::FromStr for Endpoint {
    type Err = EndpointError;

    /// `host:port` (see [`HostPort::parse`]).
    fn from_str(text: &str) -> Result<Endpoint, EndpointError> {
        HostPort::parse(text).map(Endpoint::Node)
    }
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.host.contains(':') {
            true => write!(f, "[{}]:{}", self.host, self.port),
            false => write!(f, "{}:{}", self.host, self.port),
        }
    }
}

/// The sentinels that watch a service, and how to log in to them.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Sentinels {
    /// The sentinels, asked in turn; the one that answered last is asked first.
    pub nodes: Vec<HostPort>,
    /// The service's name, as in the sentinels' `sentinel monitor <name> …`.
    pub service: String,
    /// The sentinels' own credentials (their `requirepass`, or an ACL user of theirs): not
    /// the data nodes', which [`Config::auth`](crate::Config::auth) gives. `None`: the
    /// sentinels want none.
    pub auth: Option<Auth>,
}

impl Sentinels {
    /// The service `service` (its master's name in the sentinels' configuration), watched by
    /// these sentinels.
    pub fn new(service: impl Into<String>, nodes: impl IntoIterator<Item = HostPort>) -> Sentinels {
        Sentinels { nodes: nodes.into_iter().collect(), service: service.into(), auth: None }
    }

    /// Logs in to the sentinels as `user` (`None`: their `default` user) with `password`.
    #[must_use]
    pub fn auth(mut self, user: Option<impl AsRef<[u8]>>, password: impl AsRef<[u8]>) -> Sentinels {
        self.auth = Some(Auth {
            user: user.map(|u| bytes::Bytes::copy_from_slice(u.as_ref())),
            password: bytes::Bytes::copy_from_slice(password.as_ref()),
        });
        self
    }
}

impl fmt::Debug for Sentinels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `Auth`'s own Debug hides the password.
        f.debug_struct("Sentinels")
            .field("nodes", &self.nodes)
            .field("service", &self.service)
            .field("auth", &self.auth)
            .finish()
    }
}

impl fmt::Display for Sentinels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the master of {:?} (sentinels ", self.service)?;
        for (i, node) in self.nodes.iter().enumerate() {
            write!(f, "{}{node}", if i == 0 { "" } else { ", " })?;
        }
        f.write_str(")")
    }
}

/// Where the consumer connects.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Endpoint {
    /// One node, looked up again at every connect. In a cluster, any node: the consumer
    /// follows `MOVED` to the one serving its stream.
    Node(HostPort),
    /// The master of a service that these sentinels watch.
    Sentinel(Sentinels),
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Node(node) => node.fmt(f),
            Endpoint::Sentinel(sentinels) => sentinels.fmt(f),
        }
    }
}

impl From<HostPort> for Endpoint {
    fn from(node: HostPort) -> Endpoint {
        Endpoint::Node(node)
    }
}

impl From<Sentinels> for Endpoint {
    fn from(sentinels: Sentinels) -> Endpoint {
        Endpoint::Sentinel(sentinels)
    }
}

impl From<core::net::SocketAddr> for Endpoint {
    fn from(addr: core::net::SocketAddr) -> Endpoint {
        Endpoint::Node(HostPort::new(addr.ip().to_string(), addr.port()))
    }
}

impl From<(core::net::IpAddr, u16)> for Endpoint {
    fn from((ip, port): (core::net::IpAddr, u16)) -> Endpoint {
        Endpoint::Node(HostPort::new(ip.to_string(), port))
    }
}

impl From<(&str, u16)> for Endpoint {
    fn from((host, port): (&str, u16)) -> Endpoint {
        Endpoint::Node(HostPort::new(host, port))
    }
}

impl From<(String, u16)> for Endpoint {
    fn from((host, port): (String, u16)) -> Endpoint {
        Endpoint::Node(HostPort::new(host, port))
    }
}

/// A `host:port` text that does not name a node.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct EndpointError {
    /// The text given.
    pub text: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl fmt::Display for EndpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} is not an address: {}", self.text, self.why)
    }
}

impl std::error::Error for EndpointError {}

/// What a transport's constructor takes as the server's address: `"host:port"` text, a
/// `(host, port)` pair, a `SocketAddr`, or an [`Endpoint`] (e.g. [`Sentinels`]).
pub trait IntoEndpoint {
    /// The endpoint, or why the text is not one.
    fn into_endpoint(self) -> Result<Endpoint, EndpointError>;
}

impl<T: Into<Endpoint>> IntoEndpoint for T {
    fn into_endpoint(self) -> Result<Endpoint, EndpointError> {
        Ok(self.into())
    }
}

impl IntoEndpoint for &str {
    fn into_endpoint(self) -> Result<Endpoint, EndpointError> {
        HostPort::parse(self).map(Endpoint::Node)
    }
}

impl IntoEndpoint for &String {
    fn into_endpoint(self) -> Result<Endpoint, EndpointError> {
        self.as_str().into_endpoint()
    }
}

impl IntoEndpoint for String {
    fn into_endpoint(self) -> Result<Endpoint, EndpointError> {
        self.as_str().into_endpoint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hp(text: &str) -> HostPort {
        HostPort::parse(text).unwrap()
    }

    #[test]
    fn host_ports() {
        assert_eq!(hp("127.0.0.1:6379"), HostPort::new("127.0.0.1", 6379));
        assert_eq!(hp("[::1]:7000"), HostPort::new("::1", 7000));
        assert_eq!(hp("::1:7000"), HostPort::new("::1", 7000));
        assert_eq!(hp("redis.example:6380").to_string(), "redis.example:6380");
        assert_eq!(hp("[::1]:7000").to_string(), "[::1]:7000");
        for bad in ["", "h", "h:", "h:0", "h:65536", ":1", "[::1:7000", "h:x"] {
            assert!(HostPort::parse(bad).is_err(), "{bad}");
        }
        let addr: core::net::SocketAddr = "[::1]:7000".parse().unwrap();
        assert_eq!(Endpoint::from(addr), Endpoint::Node(HostPort::new("::1", 7000)));
        assert_eq!("h:1".into_endpoint(), Ok(Endpoint::Node(HostPort::new("h", 1))));
        assert!("h".into_endpoint().unwrap_err().to_string().contains("no port"));
    }
}
