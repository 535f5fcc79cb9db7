//! The server a command talks to: `--url` and the `--tls-*` flags every command shares,
//! checked together, and failures told in terms of those flags.

use std::net::SocketAddr;
use std::path::PathBuf;

use pelican::Endpoint;

use pelican_mio::{Session, SessionConfig, SessionError};
use pelican_tls::{Tls, TlsConfig, TlsError};

use crate::failure::Failure;
use crate::url::{self, Target};

/// Where to connect, and how.
#[derive(Clone, Debug)]
pub struct Server {
    /// The parsed URL: a node (its host looked up again at every connect), or the sentinels
    /// that name the master.
    pub target: Target,
    /// The TLS settings, for a `rediss://` URL; `None` for `redis://`.
    pub tls: Option<Tls>,
    /// Whether the URL came from `$PELICAN_URL`, for messages.
    pub url_from_env: bool,
}

impl Server {
    /// A plaintext server with nothing but an address (the demo's simulator).
    pub fn plain(addr: SocketAddr) -> Server {
        let target = Target { endpoint: addr.into(), tls: false, user: None, password: None, db: 0 };
        Server { target, tls: None, url_from_env: false }
    }

    /// Where the consumers connect.
    pub fn endpoint(&self) -> &Endpoint {
        &self.target.endpoint
    }

    /// TLS, and the host the certificate of the URL's node must name (with Sentinel, none:
    /// each node and sentinel is checked by its own host).
    pub fn tls_for(&self) -> Option<(Tls, String)> {
        self.tls.clone().map(|tls| (tls, self.target.tls_host()))
    }

    /// `why` the URL's host could not be used, saying where the URL came from when that was
    /// `$PELICAN_URL` (a setting easily forgotten).
    pub fn host_failed(&self, why: String) -> String {
        match self.url_from_env {
            true => format!("{why} (the host in $PELICAN_URL)"),
            false => why,
        }
    }

    /// A one-shot session's settings for the URL (its node or sentinels, TLS, login,
    /// database), its connections named `name` in `CLIENT LIST`.
    pub fn session(&self, name: &str) -> SessionConfig {
        let mut config = SessionConfig::new(self.endpoint().clone()).db(self.target.db).name(name);
        if let Some(password) = &self.target.password {
            config = config.auth(self.target.user.as_ref(), password);
        }
        if let Some((tls, host)) = self.tls_for() {
            config = config.tls(tls, host);
        }
        config
    }

    /// A one-shot session with the URL's server (see [`Server::session`]), its failure
    /// told in the command line's words.
    pub fn connect(&self, name: &str) -> Result<Session, String> {
        self.session(name).connect().map_err(|e| self.said(e))
    }

    /// A session's failure in the command line's words: the flag or URL part that fixes it
    /// where there is one.
    pub fn said(&self, e: SessionError) -> String {
        match e {
            SessionError::Tls(e) => tls_message(&e),
            SessionError::Login { peer, ref text, .. } => {
                login_refused(&peer.to_string(), text).unwrap_or_else(|| e.to_string())
            }
            SessionError::IsSentinel { node, services } => {
                sentinel_named_as_node(&node.to_string(), self.tls.is_some(), services.as_deref())
            }
            SessionError::Replica { named_by_sentinels, .. } => {
                let fix = match named_by_sentinels {
                    true => "the sentinels name it as the master: a failover under way?",
                    false => "point --url at the master, or name the sentinels with redis+sentinel://…",
                };
                format!("{e}: {fix}")
            }
            SessionError::Sentinels(all) => in_flags(&all),
            SessionError::Resolve { redirect: false, .. } if matches!(self.endpoint(), Endpoint::Node(_)) => {
                self.host_failed(e.to_string())
            }
            SessionError::Redirect(e) => format!("following a cluster redirect: {}", self.said(*e)),
            e => e.to_string(),
        }
    }
}

/// `--url` and the `--tls-*` flags, as given, until [`ServerArgs::to_server`] checks them.
#[derive(clap::Args, Debug)]
pub struct ServerArgs {
    /// redis://[user[:password]@]host[:port][/db], or rediss://… for TLS;
    /// any node's URL for a cluster; `:password@` logs in as the default user;
    /// redis+sentinel://[user[:password]@]host[:port][,host[:port]…]/SERVICE[/db]
    /// for the master Sentinel names (rediss+sentinel:// for TLS; the sentinels'
    /// own login: ?sentinel_username=U&sentinel_password=P);
    /// %XX escapes allowed; default redis://127.0.0.1:6379
    // The value is hidden: it may hold a password.
    #[arg(long, value_name = "URL", env = "PELICAN_URL", hide_env_values = true, default_value = url::DEFAULT, hide_default_value = true, verbatim_doc_comment)]
    url: Option<String>,
    /// rediss://: trust the CA certificates in FILE (PEM) instead of the
    /// system's root certificates
    #[arg(long, value_name = "FILE", verbatim_doc_comment)]
    tls_ca: Option<PathBuf>,
    /// rediss://: present this client certificate (PEM), for servers that
    /// require one (tls-auth-clients); needs --tls-key
    #[arg(long, value_name = "FILE", verbatim_doc_comment)]
    tls_cert: Option<PathBuf>,
    /// the client certificate's private key (PEM); needs --tls-cert
    #[arg(long, value_name = "FILE")]
    tls_key: Option<PathBuf>,
    /// redis+sentinel://: the sentinels' own password (their requirepass),
    /// when the URL's sentinel_password does not give it
    #[arg(
        long,
        value_name = "PASSWORD",
        env = "PELICAN_SENTINEL_PASSWORD",
        hide_env_values = true,
        verbatim_doc_comment
    )]
    sentinel_password: Option<String>,
    /// Whether `--url` came from `$PELICAN_URL` (set by [`crate::args::parse`]), for messages.
    #[arg(skip)]
    pub url_from_env: bool,
}

impl ServerArgs {
    /// Whether a URL was given (`demo` takes neither `$PELICAN_URL` nor a default: without
    /// `--url` it runs on its own simulator).
    pub fn has_url(&self) -> bool {
        self.url.is_some()
    }

    /// The first `--tls-*` flag given, if any.
    pub fn tls_flag(&self) -> Option<&'static str> {
        [(&self.tls_ca, "--tls-ca"), (&self.tls_cert, "--tls-cert"), (&self.tls_key, "--tls-key")]
            .into_iter()
            .find_map(|(value, flag)| value.as_ref().map(|_| flag))
    }

    /// The server: the URL parsed (its hosts not looked up yet), the TLS flags checked
    /// against it, their files read. Misused flags and a bad URL are bad usage (exit 2); a
    /// TLS file that cannot be used fails the command (exit 1).
    pub fn to_server(&self) -> Result<Server, Failure> {
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return Err(Failure::Usage("--tls-cert and --tls-key go together: give both, or neither".into()));
        }
        // An empty $PELICAN_URL is as good as none, as shells have it.
        let url =
            self.url.as_deref().filter(|url| !url.is_empty() || !self.url_from_env).unwrap_or(url::DEFAULT);
        let from = if self.url_from_env { " in $PELICAN_URL" } else { "" };
        let mut target = url::parse(url).map_err(|why| Failure::Bad(format!("bad URL{from}: {why}")))?;
        match (&mut target.endpoint, &self.sentinel_password) {
            (Endpoint::Sentinel(sentinels), Some(password)) if sentinels.auth.is_none() => {
                *sentinels = sentinels.clone().auth(None::<&[u8]>, password);
            }
            (Endpoint::Sentinel(_), _) | (_, None) => {}
            (_, Some(_)) => {
                return Err(Failure::Usage(
                    "--sentinel-password is for redis+sentinel:// URLs (the sentinels' own password)".into(),
                ))
            }
        }
        let tls = if !target.tls {
            if let Some(flag) = self.tls_flag() {
                // The URL is not repeated: it may hold a password.
                return Err(Failure::Usage(format!(
                    "{flag} is for TLS, but the URL is redis:// (plaintext): use rediss://"
                )));
            }
            None
        } else {
            Some(self.tls_config().build().map_err(|e| Failure::Failed(tls_message(&e)))?)
        };
        // A host is not looked up here but at every connect: one that does not resolve is a
        // failed connect, which `consume` retries and the other commands report.
        Ok(Server { target, tls, url_from_env: self.url_from_env })
    }

    /// What the flags ask for: the CA file, else the system roots; the client certificate.
    fn tls_config(&self) -> TlsConfig {
        let mut config = TlsConfig::new();
        if let Some(ca) = &self.tls_ca {
            config = config.ca_file(ca);
        }
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
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

/// A library's text in the command line's words: where the library names its own API as the
/// fix (the sentinels' login), the flag or URL part that does it here.
pub fn in_flags(text: &str) -> String {
    text.replace("Sentinels::auth", "--sentinel-password (or ?sentinel_password= in the URL)").replace(
        "give the node's own address (a node, not Sentinels) to connect to it directly",
        "give that address in a redis:// URL to use the node itself",
    )
}

/// What to say of `addr`, named as a data node, that turned out to be a sentinel watching
/// `services` (if it said which): the `redis+sentinel://` URL that names it as one.
pub fn sentinel_named_as_node(addr: &str, tls: bool, services: Option<&[String]>) -> String {
    let scheme = if tls { "rediss+sentinel" } else { "redis+sentinel" };
    let url = |service: &str| format!("{scheme}://{addr}/{service}");
    let fix = match services {
        Some([one]) => format!("use {}", url(one)),
        Some([]) => format!("it watches no service yet; a sentinel's URL is {}", url("SERVICE")),
        Some(many) => {
            let names: Vec<String> = many.iter().map(|n| format!("{n:?}")).collect();
            format!("use {}, SERVICE one of those it watches: {}", url("SERVICE"), names.join(", "))
        }
        None => format!("use {}, SERVICE the name of the service it watches", url("SERVICE")),
    };
    format!("{addr} is a sentinel, not a data node: {fix}")
}

/// A login that `who` (the server) refused, told with its fix, if the server's error
/// `text` is one: a password wanted (`NOAUTH`), a wrong one (`WRONGPASS`), one given to a
/// server that has none.
pub fn login_refused(who: &str, text: &str) -> Option<String> {
    const FORMS: &str = "redis://:PASSWORD@host:port, or redis://USER:PASSWORD@host:port for an ACL user";
    if text.starts_with("NOAUTH") {
        Some(format!("{who} wants a password ({text}): give it in the URL, {FORMS}"))
    } else if text.starts_with("WRONGPASS") {
        Some(format!("{who} refused the login ({text}): check the user and password in the URL, {FORMS}"))
    } else if text.contains("without any password configured") {
        Some(format!("{who} has no password ({text}): leave it out of the URL"))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Flags {
        #[command(flatten)]
        server: ServerArgs,
    }

    /// Parses `items` as a command's flags, then checks them as [`ServerArgs::to_server`] does.
    fn server(items: &[&str]) -> Result<Server, Failure> {
        let flags =
            <Flags as clap::Parser>::try_parse_from(std::iter::once("pelican").chain(items.iter().copied()));
        flags.unwrap_or_else(|e| panic!("{items:?}: {e}")).server.to_server()
    }

    fn usage(items: &[&str]) -> String {
        match server(items) {
            Err(Failure::Usage(message)) => message,
            other => panic!("{items:?}: {other:?}"),
        }
    }

    #[test]
    fn plaintext_needs_no_tls_flag() {
        let server = server(&["--url", "redis://127.0.0.1:7"]).unwrap();
        assert!(server.tls.is_none() && !server.target.tls);
        assert_eq!(server.endpoint(), &Endpoint::Node(pelican::HostPort::new("127.0.0.1", 7)));
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
            let mut items = vec!["--url", "rediss://127.0.0.1"];
            items.extend_from_slice(flags);
            assert_eq!(usage(&items), "--tls-cert and --tls-key go together: give both, or neither");
        }
    }

    #[test]
    fn unreadable_files_fail_naming_the_file() {
        let failure = server(&["--url", "rediss://127.0.0.1", "--tls-ca", "/no/such/ca.pem"]).unwrap_err();
        match failure {
            Failure::Failed(message) => assert!(message.contains("/no/such/ca.pem"), "{message}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn library_fixes_in_flags() {
        let told = "127.0.0.1:26379: it wants a password (NOAUTH Authentication required.): give the \
                    sentinels' own (their requirepass, not the data nodes') with Sentinels::auth";
        assert!(in_flags(told)
            .ends_with("not the data nodes') with --sentinel-password (or ?sentinel_password= in the URL)"));
        let told = "it is a data node (a master), not a sentinel: name the sentinels' addresses, or give \
                    the node's own address (a node, not Sentinels) to connect to it directly";
        assert!(in_flags(told).ends_with("or give that address in a redis:// URL to use the node itself"));
        assert_eq!(in_flags("anything else"), "anything else");
        let one = ["mymaster".to_string()];
        assert_eq!(
            sentinel_named_as_node("127.0.0.1:26379", false, Some(&one)),
            "127.0.0.1:26379 is a sentinel, not a data node: use redis+sentinel://127.0.0.1:26379/mymaster"
        );
        let two = ["a".to_string(), "b".to_string()];
        assert!(sentinel_named_as_node("h:1", true, Some(&two))
            .ends_with("use rediss+sentinel://h:1/SERVICE, SERVICE one of those it watches: \"a\", \"b\""));
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
