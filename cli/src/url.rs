//! `redis://[user[:password]@]host[:port][/db]`, `rediss://…` (the same over TLS), and
//! `redis+sentinel://[user[:password]@]host[:port][,host[:port]…]/service[/db]` (the master
//! of `service`, found and followed through Sentinel; `rediss+sentinel://` for TLS to the
//! sentinels and the nodes). The user and password are the data nodes'; the sentinels' own
//! are the query parameters `sentinel_username` and `sentinel_password`.

use std::fmt;

use pelican::{Config, Endpoint, HostPort, Sentinels};

/// The server used when neither `--url` nor `PELICAN_URL` says otherwise.
pub const DEFAULT: &str = "redis://127.0.0.1:6379";

/// A sentinel's port when the URL gives none.
pub const SENTINEL_PORT: u16 = 26379;

const FORM: &str = "expected redis://[user[:password]@]host[:port][/db], rediss:// for TLS, or \
                    redis+sentinel://[user[:password]@]host[:port][,host[:port]…]/service[/db]";

/// A parsed server URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Where: a node (looked up at every connect), or the sentinels and the service (their
    /// own credentials within).
    pub endpoint: Endpoint,
    /// `rediss://`: TLS, the server's certificate checked against its host.
    pub tls: bool,
    /// ACL user of the data nodes; `None` is the `default` user.
    pub user: Option<Vec<u8>>,
    /// The data nodes' password, of `user` or of the default user.
    pub password: Option<Vec<u8>>,
    /// The database to `SELECT` (0: none sent).
    pub db: u32,
}

/// Parses a URL. User and password may hold `%XX` escapes (and raw `@`, `:` or `/` in the
/// password); `:password@` logs in as the default user; `user@` without a password is refused.
/// The message says what is wrong, never repeating the URL, which may hold a password.
pub fn parse(url: &str) -> Result<Target, String> {
    let bad = |why: &str| format!("{why} ({FORM})");
    let (scheme, rest) =
        url.split_once("://").ok_or_else(|| bad("it must start with redis:// or rediss://"))?;
    let (tls, sentinel) = match scheme.to_ascii_lowercase().as_str() {
        "redis" => (false, false),
        "rediss" => (true, false),
        "redis+sentinel" => (false, true),
        "rediss+sentinel" => (true, true),
        _ => {
            return Err(bad(
                "it must start with redis://, rediss://, redis+sentinel:// or rediss+sentinel://",
            ))
        }
    };
    let (rest, query) = match rest.split_once('?') {
        Some((rest, query)) => (rest, Some(query)),
        None => (rest, None),
    };
    if rest.contains('#') || query.is_some_and(|q| q.contains('#')) {
        return Err(bad("fragments are not supported"));
    }
    let (userinfo, rest) = match rest.rsplit_once('@') {
        Some((info, rest)) => (Some(info), rest),
        None => (None, rest),
    };
    let (authority, path) = match rest.split_once('/') {
        Some((authority, path)) => (authority, path),
        None => (rest, ""),
    };
    let (user, password) = match userinfo {
        None => (None, None),
        Some(info) => credentials(info).map_err(&bad)?,
    };
    if !sentinel {
        if query.is_some() {
            return Err(bad("query strings are only for redis+sentinel:// (the sentinels' credentials)"));
        }
        let (host, port) = host_port(authority, 6379).map_err(&bad)?;
        let db = match path {
            "" => 0,
            db => db.parse::<u32>().map_err(|_| bad("the database must be a number"))?,
        };
        return Ok(Target { endpoint: Endpoint::Node(HostPort::new(host, port)), tls, user, password, db });
    }
    let nodes = authority
        .split(',')
        .map(|node| host_port(node, SENTINEL_PORT).map(|(host, port)| HostPort::new(host, port)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(&bad)?;
    let (service, db) = match path.split_once('/') {
        Some((service, db)) => (service, db),
        None => (path, ""),
    };
    if service.is_empty() {
        return Err(bad("the service name is missing (the sentinels' `sentinel monitor <name>`)"));
    }
    let service =
        String::from_utf8(percent_decode(service).ok_or_else(|| bad("bad %-escape in the service"))?)
            .map_err(|_| bad("the service name is not UTF-8"))?;
    let db = match db {
        "" => 0,
        db => db.parse::<u32>().map_err(|_| bad("the database must be a number"))?,
    };
    let mut sentinels = Sentinels::new(service, nodes);
    let (mut s_user, mut s_password) = (None, None);
    for pair in query.unwrap_or_default().split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_decode(value).ok_or_else(|| bad("bad %-escape in a query parameter"))?;
        match key {
            "sentinel_username" => s_user = Some(value).filter(|v| !v.is_empty()),
            "sentinel_password" => s_password = Some(value),
            other => {
                let shown: String = other.chars().take(30).collect();
                return Err(bad(&format!(
                    "unknown query parameter {shown:?}: only sentinel_username and sentinel_password are known"
                )));
            }
        }
    }
    match (s_user, s_password) {
        (Some(_), None) => return Err(bad("sentinel_username needs sentinel_password")),
        (user, Some(password)) => sentinels = sentinels.auth(user, password),
        (None, None) => {}
    }
    Ok(Target { endpoint: Endpoint::Sentinel(sentinels), tls, user, password, db })
}

/// A login: the user (`None`: the default user) and the password.
type Login = (Option<Vec<u8>>, Option<Vec<u8>>);

/// `user:password` or `:password` (the default user).
fn credentials(info: &str) -> Result<Login, &'static str> {
    let (user, password) = info
        .split_once(':')
        .ok_or("a user needs a password: user:password@, or :password@ for the default user")?;
    let user = Some(percent_decode(user).ok_or("bad %-escape in the user")?).filter(|u| !u.is_empty());
    Ok((user, Some(percent_decode(password).ok_or("bad %-escape in the password")?)))
}

/// `host[:port]` or `[v6][:port]`, with `default` for a missing port.
fn host_port(authority: &str, default: u16) -> Result<(String, u16), &'static str> {
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or("unclosed [ in the host")?;
        match after {
            "" => (host, None),
            _ => (host, Some(after.strip_prefix(':').ok_or("junk after ]")?)),
        }
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err("the host is missing");
    }
    let port = match port {
        None => default,
        Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0).ok_or("the port is not 1-65535")?,
    };
    Ok((host.to_string(), port))
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
    /// The host a node's certificate is checked against: the URL's host; with Sentinel, none
    /// (each node is checked by the host the sentinels name it by, each sentinel by its own).
    pub fn tls_host(&self) -> String {
        match &self.endpoint {
            Endpoint::Node(node) => node.host.clone(),
            _ => String::new(),
        }
    }

    /// `config` with this URL's credentials and database.
    pub fn apply(&self, mut config: Config) -> Config {
        if let Some(password) = &self.password {
            config = config.auth(self.user.as_ref(), password);
        }
        config.db(self.db)
    }
}

/// The URL as given, passwords hidden (`***`): for messages.
impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (scheme, sentinels) = match &self.endpoint {
            Endpoint::Sentinel(sentinels) => ("redis+sentinel", Some(sentinels)),
            _ => ("redis", None),
        };
        let tls = if self.tls { "s" } else { "" };
        write!(f, "redis{tls}{}://", scheme.strip_prefix("redis").unwrap_or_default())?;
        if self.password.is_some() {
            let user = self.user.as_deref().map(String::from_utf8_lossy).unwrap_or_default();
            write!(f, "{user}:***@")?;
        }
        match (&self.endpoint, sentinels) {
            (_, Some(sentinels)) => {
                let nodes: Vec<String> = sentinels.nodes.iter().map(HostPort::to_string).collect();
                write!(f, "{}/{}", nodes.join(","), sentinels.service)?;
            }
            (Endpoint::Node(node), None) => write!(f, "{node}")?,
            (other, None) => write!(f, "{other}")?,
        }
        if self.db != 0 {
            write!(f, "/{}", self.db)?;
        }
        if let Some(auth) = sentinels.and_then(|s| s.auth.as_ref()) {
            f.write_str("?")?;
            if let Some(user) = &auth.user {
                write!(f, "sentinel_username={}&", String::from_utf8_lossy(user))?;
            }
            f.write_str("sentinel_password=***")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(host: &str, port: u16, user: Option<&str>, password: Option<&str>, db: u32) -> Target {
        Target {
            endpoint: Endpoint::Node(HostPort::new(host, port)),
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
    fn sentinel_urls() {
        let t = parse("redis+sentinel://s1:26380,s2,[::1]/mymaster").unwrap();
        let Endpoint::Sentinel(sentinels) = &t.endpoint else { panic!("{t:?}") };
        assert_eq!(
            sentinels.nodes,
            [HostPort::new("s1", 26380), HostPort::new("s2", 26379), HostPort::new("::1", 26379)]
        );
        assert_eq!(
            (sentinels.service.as_str(), t.db, t.tls, sentinels.auth.is_none()),
            ("mymaster", 0, false, true)
        );
        let t = parse(
            "rediss+sentinel://app:pw@s1/my%20master/3?sentinel_username=watch&sentinel_password=s%3Acret",
        )
        .unwrap();
        let Endpoint::Sentinel(sentinels) = &t.endpoint else { panic!("{t:?}") };
        assert_eq!((sentinels.service.as_str(), t.db, t.tls), ("my master", 3, true));
        assert_eq!((t.user.as_deref(), t.password.as_deref()), (Some(&b"app"[..]), Some(&b"pw"[..])));
        let auth = sentinels.auth.as_ref().unwrap();
        assert_eq!((auth.user.as_deref(), &auth.password[..]), (Some(&b"watch"[..]), &b"s:cret"[..]));
        // Printed back with every password hidden.
        assert_eq!(
            t.to_string(),
            "rediss+sentinel://app:***@s1:26379/my master/3?sentinel_username=watch&sentinel_password=***"
        );
        assert_eq!(parse("redis://:pw@h:1/2").unwrap().to_string(), "redis://:***@h:1/2");
        let only_pass = parse("redis+sentinel://s/m?sentinel_password=x").unwrap();
        let Endpoint::Sentinel(sentinels) = &only_pass.endpoint else { panic!() };
        assert!(sentinels.auth.as_ref().is_some_and(|a| a.user.is_none()));
    }

    #[test]
    fn bad_urls() {
        for (url, why) in [
            ("http://h", "must start with redis://"),
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
            ("redis+sentinel://s1", "service name is missing"),
            ("redis+sentinel://s1/", "service name is missing"),
            ("redis+sentinel://s1,/m", "host is missing"),
            ("redis+sentinel://s1:0/m", "port"),
            ("redis+sentinel://s1/m/x", "database"),
            ("redis+sentinel://s1/m?sentinel_pass=x", "unknown query parameter"),
            ("redis+sentinel://s1/m?sentinel_username=u", "needs sentinel_password"),
            ("redis+sentinel://s1/m#frag", "fragments"),
        ] {
            let err = parse(url).unwrap_err();
            assert!(err.contains(why) && err.contains(FORM), "{url}: {err}");
        }
        assert!(!parse("redis://u@secret@h:x").unwrap_err().contains("secret"));
        assert!(!parse("redis+sentinel://s/m?sentinel_password=secret&x=1").unwrap_err().contains("secret"));
    }
}
