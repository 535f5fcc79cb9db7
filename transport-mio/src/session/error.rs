//! Why a one-shot session failed, each cause with what it needs to be told well.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use pelican::oneshot::ReplyError;
use pelican::HostPort;
use pelican_tls::TlsError;

/// Why a [`Session`](crate::Session) could not connect, or a command failed.
///
/// Only [`Server`](Self::Server) and [`Reply`](Self::Reply) leave the connection as it was;
/// after any other the session needs [`reconnect`](crate::Session::reconnect).
#[derive(Debug)]
#[non_exhaustive]
pub enum SessionError {
    /// The server refused the command: its error reply's text (`NOGROUP No such key …`).
    Server(String),
    /// A reply of another shape than the command's answer.
    Reply(ReplyError),
    /// A host could not be looked up (`error` `None`: it resolves to no address).
    Resolve {
        /// The host.
        host: String,
        /// The lookup's error; `None` when it found no address.
        error: Option<io::Error>,
        /// Named by a cluster's redirect (else: the endpoint's node, or the master the
        /// sentinels named).
        redirect: bool,
    },
    /// No address of the node accepted the connection.
    Connect {
        /// The address tried last.
        addr: SocketAddr,
        /// Why it failed.
        error: io::Error,
    },
    /// TLS failed: a certificate, a client certificate, a handshake refused.
    Tls(TlsError),
    /// The TLS handshake got no answer: most likely a plaintext port behind TLS.
    NoTlsAnswer {
        /// The host the certificate was to be checked against.
        host: String,
        /// How long it waited.
        within: Duration,
    },
    /// The TLS handshake failed in another way (the connection lost).
    Handshake {
        /// The host the certificate was to be checked against.
        host: String,
        /// Why.
        error: io::Error,
    },
    /// A plaintext connection was reset before the server said a word: what a TLS port
    /// does to a client that does not speak TLS.
    WantsTls,
    /// The server did not answer in time.
    Silent {
        /// The server's address.
        peer: SocketAddr,
        /// How long it was waited for.
        within: Duration,
    },
    /// The server answered with bytes that are not RESP ([`ReplyError::NotRedis`]: no Redis
    /// server at all).
    Garbled {
        /// The server's address.
        peer: SocketAddr,
        /// What is wrong.
        error: ReplyError,
    },
    /// The server closed the connection.
    Closed,
    /// A read or write failed.
    Io {
        /// `read` or `write`.
        what: &'static str,
        /// Why.
        error: io::Error,
    },
    /// The login was refused (`AUTH`, `SELECT`), or wanted (`NOAUTH`).
    Login {
        /// The server's address.
        peer: SocketAddr,
        /// The command refused: `AUTH`, `SELECT`, `CLIENT SETNAME`.
        command: &'static str,
        /// The server's text.
        text: String,
    },
    /// `HELLO` was refused: its text.
    Hello(String),
    /// The node is a sentinel, not a data node.
    IsSentinel {
        /// The node.
        node: HostPort,
        /// The services it watches, if it said (`ROLE`).
        services: Option<Vec<String>>,
    },
    /// The node is a replica: neither written to nor read from.
    Replica {
        /// The node.
        node: HostPort,
        /// The master it follows, if it said (`ROLE`, which needs `@admin`).
        master: Option<HostPort>,
        /// Whether the sentinels named it as the master (a failover under way, for longer
        /// than the session waits).
        named_by_sentinels: bool,
    },
    /// Every sentinel failed to name the master: the locator's account of each.
    Sentinels(String),
    /// The endpoint names no sentinel to ask.
    NoSentinel,
    /// The cluster redirected the command again and again.
    Redirected {
        /// How many redirects were followed.
        times: usize,
    },
    /// The cluster redirected to a node whose address it does not know (`?`).
    UnknownNode {
        /// The port it named.
        port: u16,
    },
    /// The node a cluster redirect named could not be used.
    Redirect(Box<SessionError>),
    /// `ASKING` was refused: its text.
    Asking(String),
    /// The retirement's replies did not make sense to the core.
    Retire(pelican::Error),
}

impl SessionError {
    /// The server's text when it refused the command ([`Server`](Self::Server)).
    pub fn server_text(&self) -> Option<&str> {
        match self {
            SessionError::Server(text) => Some(text),
            _ => None,
        }
    }

    /// True when the connection failed (rather than the command): a reconnect may help.
    pub fn is_link(&self) -> bool {
        !matches!(self, SessionError::Server(_) | SessionError::Reply(_))
    }
}

impl From<ReplyError> for SessionError {
    fn from(e: ReplyError) -> SessionError {
        match e {
            ReplyError::Server(text) => SessionError::Server(text),
            e => SessionError::Reply(e),
        }
    }
}

impl fmt::Display for SessionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SessionError::Server(text) => f.write_str(text),
            SessionError::Reply(e) => e.fmt(f),
            SessionError::Resolve { host, error, redirect } => {
                let named = if *redirect { " (a redirect)" } else { "" };
                match error {
                    Some(e) => write!(f, "cannot resolve {host}{named}: {e}"),
                    None => write!(f, "{host}{named} resolves to no address"),
                }
            }
            SessionError::Connect { addr, error } => write!(f, "cannot connect to {addr}: {error}"),
            SessionError::Tls(e) => e.fmt(f),
            SessionError::NoTlsAnswer { host, within } => write!(
                f,
                "{host} did not answer the TLS handshake within {} s: is it a plaintext port? use redis:// for those",
                within.as_secs()
            ),
            SessionError::Handshake { host, error } => write!(f, "TLS handshake with {host} failed: {error}"),
            SessionError::WantsTls => {
                f.write_str("the server reset the connection before answering: is it a TLS port? use rediss://")
            }
            SessionError::Silent { peer, within } => {
                write!(f, "{peer} did not answer within {} s", within.as_secs())
            }
            SessionError::Garbled { peer, error } => write!(f, "{peer} {error}"),
            SessionError::Closed => f.write_str("the server closed the connection"),
            SessionError::Io { what, error } => write!(f, "{what} failed: {error}"),
            SessionError::Login { command, text, .. } => write!(f, "{command}: {text}"),
            SessionError::Hello(text) => write!(f, "HELLO: {text}"),
            SessionError::IsSentinel { node, .. } => write!(f, "{node} is a sentinel, not a data node"),
            SessionError::Replica { node, master, .. } => {
                let of = master.as_ref().map(|m| format!(" (of {m})")).unwrap_or_default();
                write!(f, "{node} is a replica{of}, not a master")
            }
            SessionError::Sentinels(text) => f.write_str(text),
            SessionError::NoSentinel => f.write_str("no sentinel to ask: the endpoint names none"),
            SessionError::Redirected { times } => {
                write!(f, "the cluster redirected the command {times} times: is it still settling?")
            }
            SessionError::UnknownNode { port } => {
                write!(f, "the cluster redirected to a node of unknown address (port {port})")
            }
            SessionError::Redirect(e) => write!(f, "following a cluster redirect: {e}"),
            SessionError::Asking(text) => write!(f, "ASKING: {text}"),
            SessionError::Retire(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for SessionError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SessionError::Reply(e) | SessionError::Garbled { error: e, .. } => Some(e),
            SessionError::Connect { error, .. } | SessionError::Io { error, .. } => Some(error),
            SessionError::Tls(e) => Some(e),
            SessionError::Redirect(e) => Some(e),
            SessionError::Retire(e) => Some(e),
            _ => None,
        }
    }
}
