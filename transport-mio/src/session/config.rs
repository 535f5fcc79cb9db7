//! What a [`Session`](crate::Session) connects to, and how: the settings alone, which the
//! session and its node connections both read.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use pelican::{Endpoint, HostPort};

use crate::resolve::Resolver;
use crate::tls::Tls;

/// How long a connect, a write or a reply may take, unless [`SessionConfig::timeout`] says
/// otherwise.
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a [`Session`](crate::Session) connects, and how: the endpoint (a node, or the sentinels of a
/// service), TLS, the data nodes' login and database, the connection's name, the timeout of
/// each step. Cheap to clone: a session keeps its own, to connect again and to follow
/// redirects the same way.
///
/// ```no_run
/// use pelican::oneshot::{PendingSummary, Request};
/// use pelican_mio::SessionConfig;
///
/// let mut session = SessionConfig::new(("127.0.0.1", 6379)).name("my-tool").connect()?;
/// let reply = session.call(&Request::xpending(b"orders", b"billing"))?;
/// println!("{} pending", PendingSummary::read(&reply)?.count);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct SessionConfig {
    pub(crate) endpoint: Endpoint,
    /// TLS, and the host the endpoint's node's certificate must name (empty: the host
    /// dialled, as with Sentinel).
    pub(crate) tls: Option<(Tls, String)>,
    pub(crate) auth: Option<(Option<Vec<u8>>, Vec<u8>)>,
    pub(crate) db: u32,
    pub(crate) name: Option<Vec<u8>>,
    pub(crate) timeout: Duration,
    pub(crate) resolver: Resolver,
}

impl SessionConfig {
    /// Sessions with `endpoint` (a `SocketAddr`, a `(host, port)`, a [`HostPort`],
    /// [`Sentinels`](pelican::Sentinels)…): in plaintext, without login, unnamed.
    pub fn new(endpoint: impl Into<Endpoint>) -> SessionConfig {
        SessionConfig {
            endpoint: endpoint.into(),
            tls: None,
            auth: None,
            db: 0,
            name: None,
            timeout: DEFAULT_SESSION_TIMEOUT,
            resolver: Resolver::default(),
        }
    }

    /// Over TLS, the endpoint's node's certificate checked against `host` (with Sentinel,
    /// or `host` empty: each node by the host it is dialled by, each sentinel by its own; a
    /// node a redirect names by the name the redirect gives). A certificate or handshake
    /// failure is [`SessionError::Tls`](crate::SessionError::Tls).
    #[cfg(feature = "tls")]
    #[must_use]
    pub fn tls(mut self, tls: Tls, host: impl Into<String>) -> SessionConfig {
        self.tls = Some((tls, host.into()));
        self
    }

    /// Logs in to the data nodes as `user` (`None`: the `default` user) with `password`.
    /// The sentinels' own login is [`Sentinels::auth`](pelican::Sentinels::auth)'s.
    #[must_use]
    pub fn auth(mut self, user: Option<impl AsRef<[u8]>>, password: impl AsRef<[u8]>) -> SessionConfig {
        self.auth = Some((user.map(|u| u.as_ref().to_vec()), password.as_ref().to_vec()));
        self
    }

    /// Selects database `db` (0, the default, sends nothing).
    #[must_use]
    pub fn db(mut self, db: u32) -> SessionConfig {
        self.db = db;
        self
    }

    /// Names the connections (`CLIENT SETNAME`), as `CLIENT LIST` shows them. A name the
    /// server refuses is no failure.
    #[must_use]
    pub fn name(mut self, name: impl AsRef<[u8]>) -> SessionConfig {
        self.name = Some(name.as_ref().to_vec());
        self
    }

    /// How long a connect, a write or a reply may take (default
    /// [`DEFAULT_SESSION_TIMEOUT`]); the login's replies, a TLS handshake and a sentinel's
    /// answer get 5 s at most.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> SessionConfig {
        self.timeout = timeout;
        self
    }

    /// Looks host names up with `lookup` instead of the system's resolver (see
    /// [`Driver::resolve_with`](crate::Driver::resolve_with)).
    #[must_use]
    pub fn resolve_with(
        mut self,
        lookup: impl Fn(&str, u16) -> io::Result<Vec<SocketAddr>> + Send + Sync + 'static,
    ) -> SessionConfig {
        self.resolver = Resolver::with(lookup);
        self
    }

    /// The same settings for `node` itself (a cluster's master, to scan its keys): its
    /// certificate is checked by its own host.
    #[must_use]
    pub fn at(mut self, node: HostPort) -> SessionConfig {
        self.endpoint = Endpoint::Node(node);
        if let Some((_, host)) = &mut self.tls {
            host.clear();
        }
        self
    }
}

impl fmt::Debug for SessionConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionConfig")
            .field("endpoint", &self.endpoint)
            .field("tls", &self.tls.as_ref().map(|(_, host)| host))
            .field(
                "auth",
                &self.auth.as_ref().map(|(user, _)| (user.as_deref().map(String::from_utf8_lossy), "…")),
            )
            .field("db", &self.db)
            .field("name", &self.name.as_deref().map(String::from_utf8_lossy))
            .field("timeout", &self.timeout)
            .finish()
    }
}
