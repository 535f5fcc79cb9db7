//! Why a runner gave up.

use std::fmt;
use std::io;

use pelican::ConfigError;
use pelican_tls::TlsError;

/// Why [`run`](crate::run) or [`Runner`](crate::Runner) gave up.
#[derive(Debug)]
#[non_exhaustive]
pub enum RunError {
    /// The configuration was refused.
    Config(ConfigError),
    /// The consumer failed for good ([`pelican::Error::is_fatal`]): wrong credentials, a
    /// missing group, a reply it cannot read…
    Consumer(pelican::Error),
    /// The address did not resolve, or resolved to nothing.
    Resolve(io::Error),
    /// TLS failed for good: an untrusted or expired certificate, a name mismatch, a server
    /// that wants a client certificate or does not speak TLS…
    Tls(TlsError),
    /// The handler panicked on the entry with this id: calling it, or polling the future it
    /// returned. That entry was not acked (it stays pending, its delivery counted, and comes
    /// again: to this consumer's drain when it restarts, or to a peer's reclaim); the run
    /// stopped as for a [`StopHandle::stop`](crate::StopHandle::stop), the other entries in
    /// hand finished and their acks confirmed, before `run` returned this.
    HandlerPanicked {
        /// The entry's id, e.g. `1700000000000-0`.
        id: String,
        /// What the handler panicked with (its `&str` or `String` payload), or
        /// "a non-string panic".
        message: String,
    },
    /// One stream of a [`Streams`](crate::Streams) ended with this error (failed for good,
    /// or its handler panicked); the other streams were stopped as for a stop (their entries
    /// in hand finished, their earned acks confirmed) before the run returned it. The first
    /// such error, if several streams failed.
    Stream {
        /// The stream's key (its bytes as UTF-8, lossily).
        stream: String,
        /// What ended it.
        error: Box<RunError>,
    },
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Config(e) => write!(f, "invalid configuration: {e}"),
            RunError::Consumer(e) => write!(f, "consumer failed: {e}"),
            RunError::Resolve(e) => write!(f, "cannot resolve the server address: {e}"),
            RunError::Tls(e) => write!(f, "TLS failed: {e}"),
            RunError::HandlerPanicked { id, message } => {
                write!(f, "the handler panicked on entry {id} ({message}); that entry stays pending")
            }
            RunError::Stream { stream, error } => write!(f, "stream {stream}: {error}"),
        }
    }
}

impl std::error::Error for RunError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RunError::Config(e) => Some(e),
            RunError::Consumer(e) => Some(e),
            RunError::Resolve(e) => Some(e),
            RunError::Tls(e) => Some(e),
            RunError::HandlerPanicked { .. } => None,
            RunError::Stream { error, .. } => Some(&**error),
        }
    }
}

impl From<ConfigError> for RunError {
    fn from(e: ConfigError) -> Self {
        RunError::Config(e)
    }
}

impl From<pelican::Error> for RunError {
    fn from(e: pelican::Error) -> Self {
        RunError::Consumer(e)
    }
}
