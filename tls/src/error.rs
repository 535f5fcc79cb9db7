//! TLS failures, each named by its cause and what to do about it.

use std::fmt;
use std::path::PathBuf;

#[cfg(feature = "rustls")]
use rustls::{AlertDescription, CertificateError};

/// Why TLS could not be set up or a server could not be trusted. Transports treat every
/// one as fatal: retrying does not fix a certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsError {
    /// A file in the [`TlsConfig`](crate::TlsConfig) cannot be read or holds nothing usable.
    File {
        /// The file.
        path: PathBuf,
        /// What it was meant to hold ("CA file", "client certificate", "client key").
        what: &'static str,
        /// What is wrong with it.
        detail: String,
    },
    /// No CA file was given and the system has no root certificates to trust.
    NoSystemRoots(String),
    /// The host cannot be checked against a certificate (neither a DNS name nor an IP).
    ServerName(String),
    /// `rustls` refused the configuration.
    Setup(String),
    /// The server's certificate does not chain to a trusted root (or its signature is bad).
    Untrusted {
        /// The host connected to.
        host: String,
        /// What the verifier said.
        detail: String,
    },
    /// The server's certificate has expired (or is not valid yet).
    Expired {
        /// The host connected to.
        host: String,
        /// What the verifier said.
        detail: String,
    },
    /// The server's certificate does not name the host connected to.
    NameMismatch {
        /// The host connected to.
        host: String,
        /// The names the certificate carries, when known.
        presented: Vec<String>,
    },
    /// Another problem with the server's certificate.
    BadCertificate {
        /// The host connected to.
        host: String,
        /// What the verifier said.
        detail: String,
    },
    /// The server requires a client certificate (`tls-auth-clients yes`) and none is set.
    ClientCertRequired {
        /// The host connected to.
        host: String,
    },
    /// The server refused the client certificate presented.
    ClientCertRefused {
        /// The host connected to.
        host: String,
        /// The server's alert.
        alert: String,
    },
    /// The server did not answer in TLS: most likely a plaintext port behind `rediss://`.
    NotTls {
        /// The host connected to.
        host: String,
        /// What `rustls` said.
        detail: String,
    },
    /// The server never answered the TLS handshake (a plaintext Redis reads the hello as an
    /// unfinished command and waits): most likely a plaintext port behind `rediss://`.
    NoTlsAnswer {
        /// The host connected to.
        host: String,
        /// Handshakes in a row that timed out.
        attempts: u32,
    },
    /// Plaintext connections were reset before the server said a word (a TLS port does so
    /// to a client that does not speak TLS): most likely a TLS port behind `redis://`.
    ServerWantsTls {
        /// The address connected to.
        addr: String,
        /// Connections in a row reset that way.
        attempts: u32,
    },
    /// Any other handshake failure.
    Handshake {
        /// The host connected to.
        host: String,
        /// What `rustls` said.
        detail: String,
    },
}

#[cfg(feature = "rustls")]
impl TlsError {
    /// Names the cause of `err`, a failure on a TLS connection to `host`; `client_cert`:
    /// whether one was configured.
    pub fn from_rustls(err: &rustls::Error, host: &str, client_cert: bool) -> TlsError {
        let host = host.to_string();
        let detail = err.to_string();
        match err {
            rustls::Error::InvalidCertificate(cert) => match cert {
                CertificateError::UnknownIssuer | CertificateError::BadSignature => {
                    TlsError::Untrusted { host, detail }
                }
                // rustls's own text gives raw UNIX times: say it in days.
                CertificateError::ExpiredContext { time, not_after } => TlsError::Expired {
                    host,
                    detail: format!(
                        "expired {} ago",
                        days(time.as_secs().saturating_sub(not_after.as_secs()))
                    ),
                },
                CertificateError::NotValidYetContext { time, not_before } => TlsError::Expired {
                    host,
                    detail: format!(
                        "valid only in {}",
                        days(not_before.as_secs().saturating_sub(time.as_secs()))
                    ),
                },
                CertificateError::Expired | CertificateError::NotValidYet => {
                    TlsError::Expired { host, detail }
                }
                CertificateError::NotValidForName => TlsError::NameMismatch { host, presented: Vec::new() },
                CertificateError::NotValidForNameContext { presented, .. } => TlsError::NameMismatch {
                    host,
                    presented: presented.iter().map(|p| bare_name(p)).collect(),
                },
                _ => TlsError::BadCertificate { host, detail },
            },
            rustls::Error::AlertReceived(AlertDescription::CertificateRequired) => {
                TlsError::ClientCertRequired { host }
            }
            rustls::Error::AlertReceived(
                alert @ (AlertDescription::BadCertificate
                | AlertDescription::UnsupportedCertificate
                | AlertDescription::CertificateRevoked
                | AlertDescription::CertificateExpired
                | AlertDescription::CertificateUnknown
                | AlertDescription::UnknownCA
                | AlertDescription::AccessDenied
                | AlertDescription::HandshakeFailure),
            ) => {
                if client_cert {
                    TlsError::ClientCertRefused { host, alert: format!("{alert:?}") }
                } else if *alert == AlertDescription::HandshakeFailure {
                    TlsError::Handshake { host, detail }
                } else {
                    TlsError::ClientCertRequired { host }
                }
            }
            rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => {
                TlsError::NotTls { host, detail }
            }
            _ => TlsError::Handshake { host, detail },
        }
    }
}

/// `DnsName("db.example")`, `IpAddress(10.0.0.1)` (how rustls lists a certificate's names)
/// as `db.example`, `10.0.0.1`.
#[cfg(feature = "rustls")]
fn bare_name(presented: &str) -> String {
    let inner = match presented.split_once('(') {
        Some((_, rest)) => rest.strip_suffix(')').unwrap_or(rest),
        None => presented,
    };
    inner.trim_matches('"').to_string()
}

/// Seconds as whole days (or "less than a day").
#[cfg(feature = "rustls")]
fn days(seconds: u64) -> String {
    match seconds / 86_400 {
        0 => "less than a day".to_string(),
        1 => "1 day".to_string(),
        n => format!("{n} days"),
    }
}

/// "once", "3 times in a row".
fn times(n: u32) -> String {
    if n == 1 {
        "once".to_string()
    } else {
        format!("{n} times in a row")
    }
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsError::File { path, what, detail } => write!(f, "TLS {what} {}: {detail}", path.display()),
            TlsError::NoSystemRoots(detail) => write!(
                f,
                "no system root certificates to trust (install ca-certificates, or give a CA file){}",
                if detail.is_empty() { String::new() } else { format!(": {detail}") }
            ),
            TlsError::ServerName(host) => {
                write!(f, "{host:?} is neither a host name nor an IP address a certificate can name")
            }
            TlsError::Setup(detail) => write!(f, "TLS setup failed: {detail}"),
            TlsError::Untrusted { host, detail } => write!(
                f,
                "the certificate of {host} is not trusted ({detail}): give the CA that signed it as the CA file"
            ),
            TlsError::Expired { host, detail } => {
                write!(f, "the certificate of {host} is out of its validity period ({detail})")
            }
            TlsError::NameMismatch { host, presented } if presented.is_empty() => {
                write!(f, "the certificate of {host} does not name {host}")
            }
            TlsError::NameMismatch { host, presented } => write!(
                f,
                "the certificate of {host} does not name {host} (it names {}): connect by a name it carries",
                presented.join(", ")
            ),
            TlsError::BadCertificate { host, detail } => {
                write!(f, "the certificate of {host} is not acceptable: {detail}")
            }
            TlsError::ClientCertRequired { host } => write!(
                f,
                "{host} requires a client certificate (tls-auth-clients): give a client certificate and key"
            ),
            TlsError::ClientCertRefused { host, alert } => {
                write!(f, "{host} refused the client certificate (alert {alert})")
            }
            TlsError::NotTls { host, detail } => write!(
                f,
                "{host} did not answer in TLS ({detail}): is it a plaintext port? use redis:// for those"
            ),
            TlsError::NoTlsAnswer { host, attempts } => write!(
                f,
                "{host} did not answer the TLS handshake ({}): is it a plaintext port? use redis:// for those",
                times(*attempts)
            ),
            TlsError::ServerWantsTls { addr, attempts } => write!(
                f,
                "{addr} reset the connection before answering ({}): is it a TLS port? use rediss:// (and TLS settings) for those",
                times(*attempts)
            ),
            TlsError::Handshake { host, detail } => write!(f, "TLS handshake with {host} failed: {detail}"),
        }
    }
}

impl std::error::Error for TlsError {}

#[cfg(all(test, feature = "rustls"))]
mod tests {
    use super::*;

    #[test]
    fn causes_are_named() {
        let h = "db.example";
        let expired = rustls::Error::InvalidCertificate(CertificateError::Expired);
        assert!(matches!(TlsError::from_rustls(&expired, h, false), TlsError::Expired { .. }));
        let unknown = rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer);
        assert!(TlsError::from_rustls(&unknown, h, false).to_string().contains("not trusted"));
        let name = rustls::Error::InvalidCertificate(CertificateError::NotValidForName);
        assert!(matches!(TlsError::from_rustls(&name, h, false), TlsError::NameMismatch { .. }));
        let named = rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext {
            expected: rustls::pki_types::ServerName::try_from("db.example").unwrap(),
            presented: vec!["DnsName(\"wrong.example\")".into(), "IpAddress(10.0.0.1)".into()],
        });
        let named = TlsError::from_rustls(&named, h, false).to_string();
        assert!(
            named.ends_with("(it names wrong.example, 10.0.0.1): connect by a name it carries"),
            "{named}"
        );
        let when = |s| rustls::pki_types::UnixTime::since_unix_epoch(std::time::Duration::from_secs(s));
        let old = rustls::Error::InvalidCertificate(CertificateError::ExpiredContext {
            time: when(10 * 86_400),
            not_after: when(86_400),
        });
        assert!(TlsError::from_rustls(&old, h, false).to_string().contains("(expired 9 days ago)"));
        let once = TlsError::NoTlsAnswer { host: h.into(), attempts: 1 }.to_string();
        assert!(once.contains("handshake (once)"), "{once}");
        let required = rustls::Error::AlertReceived(AlertDescription::CertificateRequired);
        assert!(TlsError::from_rustls(&required, h, false)
            .to_string()
            .contains("requires a client certificate"));
        let refused = rustls::Error::AlertReceived(AlertDescription::UnknownCA);
        assert!(matches!(TlsError::from_rustls(&refused, h, true), TlsError::ClientCertRefused { .. }));
        let plain = rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType);
        assert!(TlsError::from_rustls(&plain, h, false).to_string().contains("plaintext port"));
    }
}
