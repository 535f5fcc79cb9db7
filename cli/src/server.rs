//! The server a command talks to: `--url` and the `--tls-*` flags every command shares,
//! checked together, and TLS failures told in terms of those flags.

use std::path::PathBuf;

use pelican_tls::{Tls, TlsConfig, TlsError};

use crate::args::{default_url, Args, Failure};
use crate::url::{self, Target};

/// Where to connect, and how.
#[derive(Clone, Debug)]
pub struct Server {
    /// The parsed URL.
    pub target: Target,
    /// The TLS settings, for a `rediss://` URL; `None` for `redis://`.
    pub tls: Option<Tls>,
}

impl Server {
    /// A plaintext server with nothing but an address (the demo's simulator).
    pub fn plain(host: String, port: u16) -> Server {
        Server { target: Target { host, port, tls: false, user: None, password: None, db: 0 }, tls: None }
    }
}

/// `--url` and the `--tls-*` flags, as given, until [`ServerArgs::into_server`] checks them.
#[derive(Debug, Default)]
pub struct ServerArgs {
    url: Option<String>,
    ca: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
}

impl ServerArgs {
    /// Takes `flag` and its value if it is `--url` or a `--tls-*` flag (then `Ok(true)`).
    pub fn take(&mut self, flag: &str, args: &mut Args) -> Result<bool, Failure> {
        let slot = match flag {
            "--url" => {
                self.url = Some(args.value()?);
                return Ok(true);
            }
            "--tls-ca" => &mut self.ca,
            "--tls-cert" => &mut self.cert,
            "--tls-key" => &mut self.key,
            _ => return Ok(false),
        };
        *slot = Some(args.value()?.into());
        Ok(true)
    }

    /// Whether `--url` was given (without it, `demo` runs on its own simulator).
    pub fn has_url(&self) -> bool {
        self.url.is_some()
    }

    /// The first `--tls-*` flag given, if any.
    pub fn tls_flag(&self) -> Option<&'static str> {
        [(&self.ca, "--tls-ca"), (&self.cert, "--tls-cert"), (&self.key, "--tls-key")]
            .into_iter()
            .find_map(|(value, flag)| value.as_ref().map(|_| flag))
    }

    /// The server: the URL (`--url`, else `$PELICAN_URL`, else the local server) parsed, the
    /// TLS flags checked against it, their files read. Misused flags are usage errors (exit
    /// 2), as is a bad URL; a TLS file that cannot be used fails the command (exit 1).
    pub fn into_server(self, args: &Args) -> Result<Server, Failure> {
        if self.cert.is_some() != self.key.is_some() {
            return Err(args.error("--tls-cert and --tls-key go together: give both, or neither"));
        }
        let target = url::parse(&self.url.clone().unwrap_or_else(default_url)).map_err(Failure::Bad)?;
        if !target.tls {
            return match self.tls_flag() {
                // The URL is not repeated: it may hold a password.
                Some(flag) => Err(args.error(format_args!(
                    "{flag} is for TLS, but the URL is redis:// (plaintext): use rediss://"
                ))),
                None => Ok(Server { target, tls: None }),
            };
        }
        let tls = self.tls_config().build().map_err(|e| Failure::Failed(tls_message(&e)))?;
        Ok(Server { target, tls: Some(tls) })
    }

    /// What the flags ask for: the CA file, else the system roots; the client certificate.
    fn tls_config(&self) -> TlsConfig {
        let mut config = TlsConfig::new();
        if let Some(ca) = &self.ca {
            config = config.ca_file(ca);
        }
        if let (Some(cert), Some(key)) = (&self.cert, &self.key) {
            config = config.client_cert(cert, key);
        }
        config
    }
}

/// A TLS failure's message, and the flag that fixes it where there is one.
pub fn tls_message(err: &TlsError) -> String {
    let flag = match err {
        TlsError::Untrusted { .. } | TlsError::NoSystemRoots(_) => " (--tls-ca FILE)",
        TlsError::ClientCertRequired { .. } => " (--tls-cert FILE --tls-key FILE)",
        _ => "",
    };
    format!("{err}{flag}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses `items` as a command's flags, then checks them as [`ServerArgs::into_server`] does.
    fn server(items: &[&str]) -> Result<Server, Failure> {
        let mut args = Args::new(items.iter().map(|s| s.to_string()).collect(), "usage");
        let mut flags = ServerArgs::default();
        while let Some(flag) = args.next_flag()? {
            assert!(flags.take(&flag, &mut args)?, "{flag} is a server flag");
        }
        flags.into_server(&args)
    }

    fn usage(items: &[&str]) -> String {
        match server(items) {
            Err(Failure::Usage(message, _)) => message,
            other => panic!("{items:?}: {other:?}"),
        }
    }

    #[test]
    fn plaintext_needs_no_tls_flag() {
        let server = server(&["--url", "redis://h:7"]).unwrap();
        assert!(server.tls.is_none() && !server.target.tls);
        assert_eq!(
            usage(&["--url", "redis://h", "--tls-ca", "ca.pem"]),
            "--tls-ca is for TLS, but the URL is redis:// (plaintext): use rediss://"
        );
        let message = usage(&["--url=redis://:secret@h", "--tls-cert", "c", "--tls-key", "k"]);
        assert!(message.starts_with("--tls-cert is for TLS") && !message.contains("secret"), "{message}");
    }

    #[test]
    fn cert_and_key_go_together() {
        for flags in [&["--tls-cert", "c.pem"][..], &["--tls-key", "k.pem"]] {
            let mut items = vec!["--url", "rediss://h"];
            items.extend_from_slice(flags);
            assert_eq!(usage(&items), "--tls-cert and --tls-key go together: give both, or neither");
        }
    }

    #[test]
    fn unreadable_files_fail_naming_the_file() {
        let failure = server(&["--url", "rediss://h", "--tls-ca", "/no/such/ca.pem"]).unwrap_err();
        match failure {
            Failure::Failed(message) => assert!(message.contains("/no/such/ca.pem"), "{message}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn flags_are_named_in_tls_messages() {
        let host = "h".to_string();
        let untrusted = TlsError::Untrusted { host: host.clone(), detail: "unknown issuer".into() };
        assert!(tls_message(&untrusted).ends_with("(--tls-ca FILE)"));
        let required = TlsError::ClientCertRequired { host: host.clone() };
        assert!(tls_message(&required).ends_with("(--tls-cert FILE --tls-key FILE)"));
        let expired = TlsError::Expired { host, detail: "expired".into() };
        assert_eq!(tls_message(&expired), expired.to_string());
    }
}
