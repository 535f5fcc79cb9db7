//! `redis://[user[:password]@]host[:port][/db]`, and `rediss://…` (the same over TLS).

use std::net::{SocketAddr, ToSocketAddrs};

use pelican::Config;

/// The server used when neither `--url` nor `PELICAN_URL` says otherwise.
pub const DEFAULT: &str = "redis://127.0.0.1:6379";

const FORM: &str = "expected redis://[user[:password]@]host[:port][/db], or rediss:// for TLS";

/// A parsed server URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// A host name or an IP address (an IPv6 one without its brackets).
    pub host: String,
    /// 6379 unless the URL says otherwise (for `rediss://` too, as `redis-cli` has it).
    pub port: u16,
    /// `rediss://`: TLS, the server's certificate checked against `host`.
    pub tls: bool,
    /// ACL user; `None` is the `default` user.
    pub user: Option<Vec<u8>>,
    /// The password, of `user` or of the default user.
    pub password: Option<Vec<u8>>,
    /// The database to `SELECT` (0: none sent).
    pub db: u32,
}

/// Parses a URL. User and password may hold `%XX` escapes (and raw `@`, `:` or `/` in the
/// password); `:password@` logs in as the default user; `user@` without a password is refused.
/// The message says what is wrong, never repeating the URL, which may hold a password.
pub fn parse(url: &str) -> Result<Target, String> {
    let bad = |why: &str| format!("{why} ({FORM})");
    let (tls, rest) = match url.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("redis") => (false, rest),
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("rediss") => (true, rest),
        _ => return Err(bad("it must start with redis:// or rediss://")),
    };
    let (userinfo, rest) = match rest.rsplit_once('@') {
        Some((info, rest)) => (Some(info), rest),
        None => (None, rest),
    };
    let (authority, path) = match rest.split_once('/') {
        Some((authority, path)) => (authority, path),
        None => (rest, ""),
    };
    if path.contains(['?', '#']) || authority.contains(['?', '#']) {
        return Err(bad("query strings and fragments are not supported"));
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or_else(|| bad("unclosed [ in the host"))?;
        match after {
            "" => (host, None),
            _ => (host, Some(after.strip_prefix(':').ok_or_else(|| bad("junk after ]"))?)),
        }
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err(bad("the host is missing"));
    }
    let port = match port {
        None => 6379,
        Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| bad("the port is not 1-65535"))?,
    };
    let db = match path {
        "" => 0,
        db => db.parse::<u32>().map_err(|_| bad("the database must be a number"))?,
    };
    let (user, password) = match userinfo {
        None => (None, None),
        Some(info) => {
            let (user, password) = info.split_once(':').ok_or_else(|| {
                bad("a user needs a password: user:password@, or :password@ for the default user")
            })?;
            let user = Some(percent_decode(user).ok_or_else(|| bad("bad %-escape in the user"))?)
                .filter(|u| !u.is_empty());
            (user, Some(percent_decode(password).ok_or_else(|| bad("bad %-escape in the password"))?))
        }
    };
    Ok(Target { host: host.to_string(), port, tls, user, password, db })
}

fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len());
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        if b == b'%' {
            let hex = [bytes.next()?, bytes.next()?];
            out.push(u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?);
        } else {
            out.push(b);
        }
    }
    Some(out)
}

impl Target {
    /// The host's addresses (std's resolver).
    pub fn resolve(&self) -> Result<Vec<SocketAddr>, String> {
        let addrs: Vec<SocketAddr> = (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve {}: {e}", self.host))?
            .collect();
        if addrs.is_empty() {
            return Err(format!("{} resolves to no address", self.host));
        }
        Ok(addrs)
    }

    /// `config` with this URL's credentials and database.
    pub fn apply(&self, mut config: Config) -> Config {
        if let Some(password) = &self.password {
            config = config.auth(self.user.as_ref(), password);
        }
        config.db(self.db)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(host: &str, port: u16, user: Option<&str>, password: Option<&str>, db: u32) -> Target {
        Target {
            host: host.into(),
            port,
            tls: false,
            user: user.map(|u| u.as_bytes().to_vec()),
            password: password.map(|p| p.as_bytes().to_vec()),
            db,
        }
    }

    #[test]
    fn good_urls() {
        assert_eq!(parse("redis://127.0.0.1:6379"), Ok(target("127.0.0.1", 6379, None, None, 0)));
        assert_eq!(parse("redis://localhost"), Ok(target("localhost", 6379, None, None, 0)));
        assert_eq!(parse("REDIS://h:1/"), Ok(target("h", 1, None, None, 0)));
        assert_eq!(parse("redis://h/3"), Ok(target("h", 6379, None, None, 3)));
        assert_eq!(parse("redis://:pw@h"), Ok(target("h", 6379, None, Some("pw"), 0)));
        assert_eq!(
            parse("redis://al:p%40s:s@w/rd@h:7/2"),
            Ok(target("h", 7, Some("al"), Some("p@s:s@w/rd"), 2))
        );
        assert_eq!(parse("redis://[::1]:7000"), Ok(target("::1", 7000, None, None, 0)));
        assert_eq!(parse("redis://[::1]"), Ok(target("::1", 6379, None, None, 0)));
    }

    #[test]
    fn tls_urls() {
        let tls = |t: Target| Target { tls: true, ..t };
        assert_eq!(parse("rediss://localhost"), Ok(tls(target("localhost", 6379, None, None, 0))));
        assert_eq!(parse("REDISS://h:6380/2"), Ok(tls(target("h", 6380, None, None, 2))));
        assert_eq!(
            parse("rediss://al:pw@[::1]:7000/1"),
            Ok(tls(target("::1", 7000, Some("al"), Some("pw"), 1)))
        );
        assert_eq!(parse("redis://h").map(|t| t.tls), Ok(false));
    }

    #[test]
    fn bad_urls() {
        for (url, why) in [
            ("http://h", "must start with redis:// or rediss://"),
            ("127.0.0.1:6379", "must start with redis://"),
            ("redisss://h", "must start with redis://"),
            ("rediss://", "host is missing"),
            ("rediss://h:0", "port"),
            ("redis://", "host is missing"),
            ("redis://h:0", "port"),
            ("redis://h:99999", "port"),
            ("redis://h:x", "port"),
            ("redis://h/x", "database"),
            ("redis://user@h", "needs a password"),
            ("redis://:p%zz@h", "%-escape"),
            ("redis://h?db=1", "query"),
            ("redis://[::1", "unclosed"),
        ] {
            let err = parse(url).unwrap_err();
            assert!(err.contains(why) && err.contains(FORM), "{url}: {err}");
        }
        assert!(!parse("redis://u@secret@h:x").unwrap_err().contains("secret"));
    }
}
