//! Why a runner or a driver gave up.

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
    /// The address did not resolve, or resolved to nothing.
    Resolve(io::Error),
    /// The consumer failed for good ([`pelican::Error::is_fatal`]): wrong credentials, a
    /// missing group, a reply it cannot read…
    Consumer(pelican::Error),
    /// TLS failed for good (see [`DriveError::Tls`]).
    Tls(TlsError),
    /// The `Poll` could not be created or polled, or a worker thread of
    /// [`Runner::run_pool`](crate::Runner::run_pool) could not be started.
    Io(io::Error),
    /// The handler panicked on the entry with this id. The run stopped as for a stop: the
    /// other entries in hand were finished and settled, and every ack earned before was sent
    /// and confirmed. That entry was not acked: it stays pending (settled as
    /// [`Verdict::Retry`](pelican::Verdict::Retry)) and is delivered again, to this
    /// consumer's drain when it restarts or to a peer's reclaim after `min_idle`. (If the
    /// consumer failed for good while stopping, that error is returned instead: its acks were
    /// not confirmed. An [`abandon`](crate::StopHandle::abandon) meanwhile cuts the stop
    /// short as usual: the acks not yet confirmed are given up.)
    HandlerPanicked {
        /// The id of the entry the handler panicked on, e.g. `1700000000000-0`.
        id: String,
        /// The panic's message (its payload, if a `&str` or a `String`), or
        /// `a non-string panic`.
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
            RunError::Resolve(e) => write!(f, "cannot resolve the server address: {e}"),
            RunError::Consumer(e) => write!(f, "consumer failed: {e}"),
            RunError::Tls(e) => write!(f, "TLS failed: {e}"),
            RunError::Io(e) => write!(f, "event loop failed: {e}"),
            RunError::HandlerPanicked { id, message } => {
                write!(f, "the handler panicked on entry {id}: {message}; ")?;
                f.write_str(
                    "the entry stays pending, to be delivered again; the acks earned before were confirmed",
                )
            }
            RunError::Stream { stream, error } => write!(f, "stream {stream}: {error}"),
        }
    }
}

impl std::error::Error for RunError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RunError::Config(e) => Some(e),
            RunError::Resolve(e) | RunError::Io(e) => Some(e),
            RunError::Consumer(e) => Some(e),
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

/// Why a [`Driver`](crate::Driver) gave up.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DriveError {
    /// The consumer failed for good ([`pelican::Error::is_fatal`]).
    Consumer(pelican::Error),
    /// TLS failed for good: an untrusted or expired certificate, a name mismatch, a server
    /// that wants a client certificate or does not speak TLS…
    Tls(TlsError),
}

impl fmt::Display for DriveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DriveError::Consumer(e) => e.fmt(f),
            DriveError::Tls(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for DriveError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DriveError::Consumer(e) => Some(e),
            DriveError::Tls(e) => Some(e),
        }
    }
}

impl From<DriveError> for RunError {
    fn from(e: DriveError) -> Self {
        match e {
            DriveError::Consumer(e) => RunError::Consumer(e),
            DriveError::Tls(e) => RunError::Tls(e),
        }
    }
}
