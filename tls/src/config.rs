//! What to trust and what to present, and the `rustls` client configuration built from it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::ClientConnection;
use rustls::crypto::CryptoProvider;
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::error::TlsError;
use crate::insecure::{NoVerification, Provider};

/// TLS settings, before any file is read. [`build`](Self::build) reads them once; the
/// resulting [`Tls`] serves every connection (and reconnection) of a consumer.
///
/// By default the server's certificate must chain to the system's root certificates and
/// name the host connected to (an IP address is checked as an IP address).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsConfig {
    ca_file: Option<PathBuf>,
    client_cert: Option<(PathBuf, PathBuf)>,
    skip_verification: bool,
}

impl TlsConfig {
    /// Trust the system's root certificates; no client certificate.
    pub fn new() -> TlsConfig {
        TlsConfig::default()
    }

    /// Trust the certificates in this PEM file instead of the system roots (`redis-cli
    /// --cacert`), e.g. a private CA.
    #[must_use]
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> TlsConfig {
        self.ca_file = Some(path.into());
        self
    }

    /// Present this certificate chain and private key (PEM files; `redis-cli --cert` and
    /// `--key`) to servers that ask for one (`tls-auth-clients yes`).
    #[must_use]
    pub fn client_cert(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> TlsConfig {
        self.client_cert = Some((cert.into(), key.into()));
        self
    }

    /// **Accept any server certificate, for tests only**: the connection is encrypted but
    /// anyone in the path can pose as the server. Never the default; never for production.
    #[must_use]
    pub fn dangerously_accept_any_server_certificate(mut self) -> TlsConfig {
        self.skip_verification = true;
        self
    }

    /// The CA file, if one is set.
    pub fn ca(&self) -> Option<&Path> {
        self.ca_file.as_deref()
    }

    /// Reads the files and builds the client configuration. Fails on a file that cannot be
    /// read or holds nothing usable, and when no root certificate is found to trust.
    pub fn build(&self) -> Result<Tls, TlsError> {
        let provider = provider();
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Setup(e.to_string()))?;
        let builder = if self.skip_verification {
            builder.dangerous().with_custom_certificate_verifier(Arc::new(NoVerification(provider)))
        } else {
            builder.with_root_certificates(self.roots()?)
        };
        let config = match &self.client_cert {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = read_certs(cert, "client certificate")?;
                let key = PrivateKeyDer::from_pem_file(key).map_err(|e| TlsError::File {
                    path: key.clone(),
                    what: "client key",
                    detail: e.to_string(),
                })?;
                builder.with_client_auth_cert(chain, key).map_err(|e| TlsError::File {
                    path: cert.clone(),
                    what: "client certificate",
                    detail: format!("does not go with its key: {e}"),
                })?
            }
        };
        Ok(Tls { config: Arc::new(config), client_cert: self.client_cert.is_some() })
    }

    fn roots(&self) -> Result<RootCertStore, TlsError> {
        let mut roots = RootCertStore::empty();
        match &self.ca_file {
            Some(path) => {
                for cert in read_certs(path, "CA file")? {
                    roots.add(cert).map_err(|e| TlsError::File {
                        path: path.clone(),
                        what: "CA file",
                        detail: e.to_string(),
                    })?;
                }
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                let (added, _) = roots.add_parsable_certificates(found.certs);
                if added == 0 {
                    let errors: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
                    return Err(TlsError::NoSystemRoots(errors.join("; ")));
                }
            }
        }
        Ok(roots)
    }
}

/// Every certificate in a PEM file; an error if there is none.
fn read_certs(path: &Path, what: &'static str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let file_error = |detail: String| TlsError::File { path: path.to_path_buf(), what, detail };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(e.to_string()))?;
    if certs.is_empty() {
        return Err(file_error("holds no PEM certificate".into()));
    }
    Ok(certs)
}

/// A built TLS client configuration: cheap to clone, shared by every connection.
#[derive(Clone)]
pub struct Tls {
    config: Arc<ClientConfig>,
    client_cert: bool,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls").field("client_cert", &self.client_cert).finish_non_exhaustive()
    }
}

impl Tls {
    /// A new client connection (sans-IO: drive it with `read_tls`, `process_new_packets`,
    /// `write_tls`) to `host`, whose certificate must name it: a DNS name, or an IP
    /// address checked as an IP address.
    pub fn connect(&self, host: &str) -> Result<ClientConnection, TlsError> {
        let name = server_name(host)?;
        ClientConnection::new(self.config.clone(), name).map_err(|e| TlsError::Setup(e.to_string()))
    }

    /// The `rustls` configuration, for async TLS streams (`futures-rustls`).
    pub fn client_config(&self) -> Arc<ClientConfig> {
        self.config.clone()
    }

    /// Whether a client certificate is configured (it shapes the advice when a server
    /// refuses the connection for want of one).
    pub fn has_client_cert(&self) -> bool {
        self.client_cert
    }

    /// Explains a TLS failure on a connection to `host` (see [`TlsError::from_rustls`]).
    pub fn explain(&self, err: &rustls::Error, host: &str) -> TlsError {
        TlsError::from_rustls(err, host, self.client_cert)
    }
}

/// `host` as the name the server's certificate must carry: a DNS name, or an IP address
/// (`[::1]` as written in URLs too) checked as an IP address.
pub fn server_name(host: &str) -> Result<ServerName<'static>, TlsError> {
    // `[::1]` as written in URLs.
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    ServerName::try_from(bare.to_string()).map_err(|_| TlsError::ServerName(host.to_string()))
}

/// The cryptography: the process default if the application installed one
/// ([`CryptoProvider::install_default`], e.g. aws-lc-rs for post-quantum key exchange),
/// else *ring*, which builds anywhere with a C compiler alone.
fn provider() -> Provider {
    if let Some(installed) = CryptoProvider::get_default() {
        return installed.clone();
    }
    // Deprecated in rustls 0.23.48 for having no post-quantum key exchange: an application
    // that wants it installs aws-lc-rs as the process default, which is then used above.
    #[allow(deprecated)]
    Arc::new(rustls::crypto::ring::default_provider())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_installed_provider_is_used() {
        // ring unless the application installed another; then that one, shared.
        let before = provider();
        assert!(!before.cipher_suites.is_empty());
        #[allow(deprecated)]
        let _ = CryptoProvider::install_default(rustls::crypto::ring::default_provider());
        let installed = CryptoProvider::get_default().expect("installed");
        assert!(Arc::ptr_eq(&provider(), installed));
    }

    #[test]
    fn names_and_addresses() {
        assert!(matches!(server_name("redis.example.com"), Ok(ServerName::DnsName(_))));
        assert!(matches!(server_name("127.0.0.1"), Ok(ServerName::IpAddress(_))));
        assert!(matches!(server_name("[::1]"), Ok(ServerName::IpAddress(_))));
        assert!(matches!(server_name("not a name"), Err(TlsError::ServerName(_))));
    }

    #[test]
    fn missing_and_empty_files_are_named() {
        let err = TlsConfig::new().ca_file("/no/such/ca.pem").build().unwrap_err();
        assert!(matches!(&err, TlsError::File { what: "CA file", .. }), "{err}");
        assert!(err.to_string().contains("/no/such/ca.pem"), "{err}");
        let dir = std::env::temp_dir().join(format!("pelican-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let err = TlsConfig::new().ca_file(&empty).build().unwrap_err();
        assert!(err.to_string().contains("no PEM certificate"), "{err}");
        let err = TlsConfig::new()
            .dangerously_accept_any_server_certificate()
            .client_cert(&empty, dir.join("missing-key.pem"))
            .build()
            .unwrap_err();
        assert!(matches!(&err, TlsError::File { what: "client certificate", .. }), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
