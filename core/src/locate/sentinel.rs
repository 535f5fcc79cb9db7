//! One conversation with one sentinel, sans-IO: where is the service's master, and then
//! (subscribed to `+switch-master`) where it moves when a failover ends.
//!
//! Always RESP2, which every sentinel speaks: `[AUTH …]`, `ROLE`, `SENTINEL
//! get-master-addr-by-name <service>` (`[host, port]`, or nil for a service it does not
//! watch), `CLIENT SETNAME pelican:sentinel:<service>` (so that the sentinel's `CLIENT LIST`
//! names the watching connection; a refusal is ignored: the name is a courtesy),
//! `SUBSCRIBE +switch-master`, pipelined in one write. The subscription is registered
//! right after the answer, so a failover that ends after the answer is heard as a message:
//! `["message", "+switch-master", "<service> <old host> <old port> <new host> <new port>"]`.
//!
//! `ROLE` is asked only to name what went wrong: a sentinel answers `[sentinel, [<names>]]`,
//! the services it watches (told when the one asked for is not among them); a data node
//! answers `[master, …]` or `[slave, host, port, …]`, and it is told as a data node rather
//! than as a server that does not know `SENTINEL`. Refused (`NOAUTH`, `NOPERM`), it names
//! nothing. A refused login is told once the question's reply is in too, so that a data node
//! given a sentinel's password is still told as a data node.

use std::collections::VecDeque;
use std::fmt;

use bytes::{Bytes, BytesMut};

use crate::config::{Limits, Protocol};
use crate::decode::{Decoder, Frame, Value};
use crate::encode::command;
use crate::endpoint::{HostPort, Sentinels};

/// What a sentinel said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SentinelAnswer {
    /// The service's master is there (the answer to the question).
    Master(HostPort),
    /// The sentinel watches no service of that name (the answer to the question).
    Unknown {
        /// The services it does watch, as its `ROLE` named them (`None`: it did not say).
        watched: Option<Vec<String>>,
    },
    /// A failover of the service ended: its master is now there (heard later, on the
    /// subscription).
    Switched(HostPort),
}

/// Why a conversation with a sentinel ended.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SentinelError {
    /// The sentinel refused a command (a login: `WRONGPASS`, `NOAUTH`…; an unknown command:
    /// not a sentinel): its text.
    Refused {
        /// What was asked: `AUTH`, `SENTINEL get-master-addr-by-name`, `SUBSCRIBE`.
        command: &'static str,
        /// The sentinel's error text.
        message: String,
    },
    /// Its bytes are not RESP, or not the shape a sentinel answers with.
    Protocol(String),
    /// It wants a login and was given none (`NOAUTH`, `given` false), or refused the one
    /// given (`WRONGPASS`, or none is configured: `given` true). Its fix is
    /// [`Sentinels::auth`]: the sentinels' own credentials, not the data nodes'.
    Login {
        /// The sentinel's error text.
        message: String,
        /// Whether a login was given.
        given: bool,
    },
    /// It is no sentinel: it does not know `SENTINEL`. `role`: what its `ROLE` said it is
    /// (`a master`, `a replica of 10.0.0.1:6379 (link connected)`), if it said.
    NotSentinel {
        /// What it is, if it said.
        role: Option<String>,
        /// Its error text.
        message: String,
    },
}

impl fmt::Display for SentinelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SentinelError::Refused { command, message } => write!(f, "it refused {command}: {message}"),
            SentinelError::Protocol(detail) => write!(f, "{detail}"),
            SentinelError::Login { message, given: false } => write!(
                f,
                "it wants a password ({message}): give the sentinels' own (their requirepass, not \
                 the data nodes') with Sentinels::auth"
            ),
            SentinelError::Login { message, given: true } if message.contains("without any password") => {
                write!(f, "it has no password ({message}): leave Sentinels::auth out")
            }
            SentinelError::Login { message, given: true } => write!(
                f,
                "it refused the login ({message}): check the sentinels' own password (their \
                 requirepass, not the data nodes'), and user if any, given with Sentinels::auth"
            ),
            SentinelError::NotSentinel { role: Some(role), .. } => write!(
                f,
                "it is a data node ({role}), not a sentinel: name the sentinels' addresses, or \
                 give the node's own address (a node, not Sentinels) to connect to it directly"
            ),
            SentinelError::NotSentinel { role: None, message } => {
                write!(f, "it is not a sentinel (it does not know SENTINEL: {message})")
            }
        }
    }
}

impl std::error::Error for SentinelError {}

/// A reply still to come, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Awaiting {
    Auth,
    Role,
    Master,
    Name,
    Subscribed,
}

impl Awaiting {
    fn command(self) -> &'static str {
        match self {
            Awaiting::Auth => "AUTH",
            Awaiting::Role => "ROLE",
            Awaiting::Master => "SENTINEL get-master-addr-by-name",
            Awaiting::Name => "CLIENT SETNAME",
            Awaiting::Subscribed => "SUBSCRIBE +switch-master",
        }
    }
}

/// What `ROLE` said the server is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seen {
    /// A sentinel watching these services.
    Sentinel(Vec<String>),
    /// A data node: `a master`, `a replica of …`.
    Node(String),
}

/// What a session's connection is named, before the service's name (`CLIENT SETNAME`).
const SENTINEL_CLIENT_NAME_PREFIX: &str = "pelican:sentinel:";

/// The channel a sentinel announces ended failovers on.
const SWITCH_MASTER: &[u8] = b"+switch-master";

/// A conversation with one sentinel over a fresh connection (see the [module](super) docs):
/// write [`poll_transmit`](Self::poll_transmit), feed what comes back to
/// [`handle_input`](Self::handle_input), take [`poll_answer`](Self::poll_answer)s. An `Err`
/// means the connection is done: close it.
#[derive(Debug)]
pub struct SentinelSession {
    service: Bytes,
    out: BytesMut,
    decoder: Decoder,
    awaiting: VecDeque<Awaiting>,
    answers: VecDeque<SentinelAnswer>,
    failed: Option<SentinelError>,
    /// The question's answer came (a master, or none of that name).
    answered: bool,
    /// The login's refusal, told with the question's reply.
    login_refused: Option<String>,
    /// What `ROLE` said, if it did.
    seen: Option<Seen>,
}

impl SentinelSession {
    /// A session asking `sentinels`' service's master, then watching for its switches;
    /// its commands are ready to write.
    pub fn new(sentinels: &Sentinels) -> SentinelSession {
        let mut out = BytesMut::with_capacity(128);
        let mut awaiting = VecDeque::with_capacity(4);
        if let Some(auth) = &sentinels.auth {
            match &auth.user {
                Some(user) => command(&mut out, &[b"AUTH", user, &auth.password]),
                None => command(&mut out, &[b"AUTH", &auth.password]),
            }
            awaiting.push_back(Awaiting::Auth);
        }
        let service = Bytes::copy_from_slice(sentinels.service.as_bytes());
        command(&mut out, &[b"ROLE"]);
        command(&mut out, &[b"SENTINEL", b"get-master-addr-by-name", &service]);
        // After the question, so that its answer comes as soon as it can.
        let name = [SENTINEL_CLIENT_NAME_PREFIX.as_bytes(), &service].concat();
        command(&mut out, &[b"CLIENT", b"SETNAME", &name]);
        command(&mut out, &[b"SUBSCRIBE", SWITCH_MASTER]);
        awaiting.extend([Awaiting::Role, Awaiting::Master, Awaiting::Name, Awaiting::Subscribed]);
        SentinelSession {
            service,
            out,
            decoder: Decoder::new(Limits::default()),
            awaiting,
            answers: VecDeque::new(),
            failed: None,
            answered: false,
            login_refused: None,
            seen: None,
        }
    }

    /// Bytes to write, if any.
    #[must_use]
    pub fn poll_transmit(&self) -> Option<&[u8]> {
        (!self.out.is_empty()).then_some(&self.out[..])
    }

    /// `written` bytes of [`poll_transmit`](Self::poll_transmit) reached the socket.
    pub fn advance_transmit(&mut self, written: usize) {
        let _ = self.out.split_to(written.min(self.out.len()));
    }

    /// True once the question is answered (the session now only watches). A refusal is no
    /// answer: a session that failed before its answer was asking, not watching.
    pub fn answered(&self) -> bool {
        self.answered
    }

    /// Bytes read from the sentinel. An `Err` (sticky) means the connection is done.
    pub fn handle_input(&mut self, bytes: &[u8]) -> Result<(), SentinelError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        self.decoder.extend(bytes);
        loop {
            let frame = match self.decoder.next(Protocol::Resp2) {
                Ok(Some(frame)) => frame,
                Ok(None) => return Ok(()),
                Err(e) => {
                    let detail = match e {
                        crate::decode::DecodeError::Invalid(detail) => {
                            format!("it answered as no sentinel does: {detail}")
                        }
                        _ => "it answered with a reply too large or too deep for a sentinel's".to_string(),
                    };
                    return Err(self.fail(SentinelError::Protocol(detail)));
                }
            };
            let Frame::Reply(value) = frame else { continue };
            if let Err(e) = self.on_reply(value) {
                return Err(self.fail(e));
            }
        }
    }

    /// The next answer heard.
    pub fn poll_answer(&mut self) -> Option<SentinelAnswer> {
        self.answers.pop_front()
    }

    fn fail(&mut self, error: SentinelError) -> SentinelError {
        self.failed = Some(error.clone());
        error
    }

    fn on_reply(&mut self, value: Value) -> Result<(), SentinelError> {
        let shape = |what: &str| SentinelError::Protocol(format!("it answered {what} as no sentinel does"));
        let Some(awaiting) = self.awaiting.pop_front() else {
            // Subscribed: a message (or a reply nobody asked for).
            let Some(switched) = switch_message(&value, &self.service).map_err(|()| shape("a message"))?
            else {
                return Ok(());
            };
            self.answers.push_back(SentinelAnswer::Switched(switched));
            return Ok(());
        };
        if let Value::Error(text) = &value {
            let message = String::from_utf8_lossy(text).into_owned();
            return match awaiting {
                // Told with the question's reply (see the module docs).
                Awaiting::Auth => {
                    self.login_refused = Some(message);
                    Ok(())
                }
                // It names nothing, then; a name refused (a sentinel's ACL, a service name with
                // a space) leaves the connection unnamed.
                Awaiting::Role | Awaiting::Name => Ok(()),
                Awaiting::Master => Err(self.refused(message)),
                Awaiting::Subscribed => Err(SentinelError::Refused { command: awaiting.command(), message }),
            };
        }
        if awaiting == Awaiting::Master {
            if let Some(message) = self.login_refused.take() {
                // A server that wants no login took the question anyway: the login is still
                // wrong.
                return Err(SentinelError::Login { message, given: true });
            }
        }
        match awaiting {
            Awaiting::Auth | Awaiting::Name => {}
            Awaiting::Role => self.seen = seen(value),
            Awaiting::Master => {
                self.answers.push_back(match value {
                    Value::Nil => {
                        let watched = match self.seen.take() {
                            Some(Seen::Sentinel(names)) => Some(names),
                            _ => None,
                        };
                        SentinelAnswer::Unknown { watched }
                    }
                    Value::Array(items) => match &items[..] {
                        [Value::Str(host), Value::Str(port)] => {
                            SentinelAnswer::Master(host_port(host, port).ok_or_else(|| shape("the master"))?)
                        }
                        _ => return Err(shape("the master")),
                    },
                    _ => return Err(shape("the master")),
                });
                self.answered = true;
            }
            Awaiting::Subscribed => match value {
                Value::Array(items) if matches!(items.first(), Some(Value::Str(kind)) if &kind[..] == b"subscribe") =>
                    {}
                _ => return Err(shape("SUBSCRIBE")),
            },
        }
        Ok(())
    }
}

impl SentinelSession {
    /// Why the question was refused, in the light of the login's reply and `ROLE`'s.
    fn refused(&mut self, message: String) -> SentinelError {
        // A server looks a command up before it asks for a login: not knowing `SENTINEL`
        // comes first, whatever the login did.
        if message.starts_with("ERR unknown command") {
            let role = match self.seen.take() {
                Some(Seen::Node(role)) => Some(role),
                _ => None,
            };
            return SentinelError::NotSentinel { role, message };
        }
        if let Some(login) = self.login_refused.take() {
            return SentinelError::Login { message: login, given: true };
        }
        if message.starts_with("NOAUTH") {
            return SentinelError::Login { message, given: false };
        }
        SentinelError::Refused { command: Awaiting::Master.command(), message }
    }
}

/// What a `ROLE` reply says the server is; `None` for a shape of no known kind.
fn seen(value: Value) -> Option<Seen> {
    if let Some(names) = super::role::sentinel_names(&value) {
        return Some(Seen::Sentinel(names));
    }
    match crate::reply::role(value).ok()? {
        crate::reply::Role::Other(_) => None,
        role => Some(Seen::Node(role.to_string())),
    }
}

/// A `+switch-master` message's new master, if it is about `service`; `Ok(None)` for any
/// other message or service, `Err` for a message of no known shape.
fn switch_message(value: &Value, service: &[u8]) -> Result<Option<HostPort>, ()> {
    let Value::Array(items) = value else { return Err(()) };
    let [Value::Str(kind), Value::Str(channel), Value::Str(text)] = &items[..] else { return Err(()) };
    if &kind[..] != b"message" || &channel[..] != SWITCH_MASTER {
        return Ok(None);
    }
    // `<service> <old host> <old port> <new host> <new port>`; the service's name has no
    // spaces (sentinel refuses those), so the words are split from the end.
    let words: Vec<&[u8]> = text.rsplitn(5, |b| *b == b' ').collect();
    let [new_port, new_host, _old_port, _old_host, name] = words[..] else { return Err(()) };
    if name != service {
        return Ok(None);
    }
    host_port(new_host, new_port).map(Some).ok_or(())
}

fn host_port(host: &[u8], port: &[u8]) -> Option<HostPort> {
    let host = std::str::from_utf8(host).ok().filter(|h| !h.is_empty())?;
    let port = std::str::from_utf8(port).ok()?.parse::<u16>().ok().filter(|p| *p != 0)?;
    Some(HostPort::new(host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reply captured from a real server (`core/tests/fixtures`).
    macro_rules! fixture {
        ($flavor:literal, $name:literal) => {
            &include_bytes!(concat!("../../tests/fixtures/", $flavor, "/resp2/", $name, ".resp"))[..]
        };
    }

    const FLAVORS: [&str; 4] = ["redis-6.2", "redis-7.0", "valkey-8.1", "redis-8.10"];

    /// Each server's replies to what a session asks: `ROLE` on a sentinel, on a data node
    /// (a master), `SENTINEL get-master-addr-by-name` known, unknown, on a data node, refused
    /// for want of a login, a wrong login, `SUBSCRIBE`.
    struct Said {
        role: &'static [u8],
        role_master: &'static [u8],
        master: &'static [u8],
        unknown: &'static [u8],
        on_node: &'static [u8],
        noauth: &'static [u8],
        wrongpass: &'static [u8],
        setname: &'static [u8],
        subscribe: &'static [u8],
    }

    fn said() -> [Said; 4] {
        macro_rules! of {
            ($flavor:literal) => {
                Said {
                    role: fixture!($flavor, "sentinel_role"),
                    role_master: fixture!($flavor, "role_master"),
                    master: fixture!($flavor, "sentinel_master_addr"),
                    unknown: fixture!($flavor, "sentinel_master_addr_unknown"),
                    on_node: fixture!($flavor, "sentinel_on_node"),
                    noauth: fixture!($flavor, "sentinel_noauth"),
                    wrongpass: fixture!($flavor, "sentinel_wrongpass"),
                    setname: fixture!($flavor, "sentinel_setname"),
                    subscribe: fixture!($flavor, "sentinel_subscribe"),
                }
            };
        }
        [of!("redis-6.2"), of!("redis-7.0"), of!("valkey-8.1"), of!("redis-8.10")]
    }

    fn session(auth: bool) -> SentinelSession {
        let mut sentinels = Sentinels::new("mymaster", [HostPort::new("127.0.0.1", 26379)]);
        if auth {
            sentinels = sentinels.auth(Some("watcher"), "s3cret");
        }
        SentinelSession::new(&sentinels)
    }

    fn answers(s: &mut SentinelSession) -> Vec<SentinelAnswer> {
        std::iter::from_fn(|| s.poll_answer()).collect()
    }

    fn cat(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    #[test]
    fn asks_then_watches() {
        let mut s = session(false);
        assert_eq!(
            s.poll_transmit().unwrap(),
            &b"*1\r\n$4\r\nROLE\r\n*3\r\n$8\r\nSENTINEL\r\n$23\r\nget-master-addr-by-name\r\n$8\r\nmymaster\r\n\
               *3\r\n$6\r\nCLIENT\r\n$7\r\nSETNAME\r\n$25\r\npelican:sentinel:mymaster\r\n\
               *2\r\n$9\r\nSUBSCRIBE\r\n$14\r\n+switch-master\r\n"[..]
        );
        s.advance_transmit(1000);
        assert_eq!(s.poll_transmit(), None);
        for (flavor, said) in FLAVORS.iter().zip(said()) {
            let reply = cat(&[said.role, said.master, said.setname, said.subscribe]);
            let master = read_master(said.master);
            // Any split of the bytes gives the same answers.
            for cut in 0..reply.len() {
                let mut s = session(false);
                s.handle_input(&reply[..cut]).unwrap();
                assert_eq!(s.answered(), cut >= said.role.len() + said.master.len(), "{flavor} {cut}");
                s.handle_input(&reply[cut..]).unwrap();
                assert_eq!(answers(&mut s), [SentinelAnswer::Master(master.clone())], "{flavor}");
                assert!(s.answered());
            }
        }
        let mut s = session(false);
        let said = &said()[1];
        // The name refused: watched all the same.
        s.handle_input(&cat(&[said.role, said.master, b"-NOPERM no\r\n", said.subscribe])).unwrap();
        let _ = answers(&mut s);
        let message = |text: &str| {
            format!("*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n${}\r\n{text}\r\n", text.len())
                .into_bytes()
        };
        s.handle_input(&message("other 127.0.0.1 1 127.0.0.1 2")).unwrap();
        s.handle_input(&message("mymaster 127.0.0.1 7601 127.0.0.1 7602")).unwrap();
        assert_eq!(answers(&mut s), [SentinelAnswer::Switched(HostPort::new("127.0.0.1", 7602))]);
        assert!(matches!(
            s.handle_input(&message("mymaster 127.0.0.1 7601 127.0.0.1")),
            Err(SentinelError::Protocol(_))
        ));
        assert!(s.handle_input(b"").is_err(), "an error is sticky");
    }

    /// The master a fixture of `SENTINEL get-master-addr-by-name` names.
    fn read_master(bytes: &[u8]) -> HostPort {
        let mut s = session(false);
        s.handle_input(&cat(&[b"*-1\r\n", bytes])).unwrap();
        match answers(&mut s).pop() {
            Some(SentinelAnswer::Master(at)) => at,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_unknown_service_is_told_with_those_watched() {
        for (flavor, said) in FLAVORS.iter().zip(said()) {
            let mut s = session(true);
            assert!(s
                .poll_transmit()
                .unwrap()
                .starts_with(b"*3\r\n$4\r\nAUTH\r\n$7\r\nwatcher\r\n$6\r\ns3cret\r\n*1\r\n$4\r\nROLE\r\n"));
            s.handle_input(&cat(&[b"+OK\r\n", said.role, said.unknown])).unwrap();
            let watched = Some(vec!["mymaster".to_string()]);
            assert_eq!(answers(&mut s), [SentinelAnswer::Unknown { watched }], "{flavor}");
            assert!(s.answered(), "{flavor}: answered, though not as hoped");
            // ROLE refused: it names none.
            let mut s = session(false);
            s.handle_input(&cat(&[b"-NOPERM no\r\n", said.unknown])).unwrap();
            assert_eq!(answers(&mut s), [SentinelAnswer::Unknown { watched: None }], "{flavor}");
        }
    }

    #[test]
    fn a_login_wanted_or_refused_names_its_fix() {
        for (flavor, said) in FLAVORS.iter().zip(said()) {
            // No login given: every command refused.
            let mut s = session(false);
            let err = s.handle_input(&cat(&[said.noauth, said.noauth])).unwrap_err();
            assert!(matches!(&err, SentinelError::Login { given: false, .. }), "{flavor}: {err:?}");
            let text = err.to_string();
            assert!(
                text.starts_with("it wants a password (NOAUTH") && text.contains("Sentinels::auth"),
                "{text}"
            );
            assert!(!s.answered(), "{flavor}: a refusal is no answer");
            // A wrong one: the login's refusal is the cause, told once the question's reply is in.
            let mut s = session(true);
            s.handle_input(&cat(&[said.wrongpass, said.noauth])).unwrap();
            let err = s.handle_input(said.noauth).unwrap_err();
            let text = err.to_string();
            assert!(
                text.starts_with("it refused the login (WRONGPASS") && text.contains("Sentinels::auth"),
                "{text}"
            );
            assert!(!s.answered());
        }
        // One given to a sentinel that wants none, which then answers anyway.
        let mut s = session(true);
        let nopass = b"-ERR AUTH <password> called without any password configured for the default user. \
                       Are you sure your configuration is correct?\r\n";
        let said = &said()[1];
        let err = s.handle_input(&cat(&[nopass, said.role, said.master])).unwrap_err();
        assert!(err.to_string().starts_with("it has no password"), "{err}");
    }

    #[test]
    fn a_data_node_is_told_as_one() {
        for (flavor, said) in FLAVORS.iter().zip(said()) {
            let mut s = session(false);
            let err = s.handle_input(&cat(&[said.role_master, said.on_node])).unwrap_err();
            let text = err.to_string();
            assert!(text.starts_with("it is a data node (a master), not a sentinel"), "{flavor}: {text}");
            // Given a login it has no use for: still a data node first.
            let mut s = session(true);
            let nopass = b"-ERR AUTH <password> called without any password configured\r\n";
            let err = s.handle_input(&cat(&[nopass, said.role_master, said.on_node])).unwrap_err();
            assert!(err.to_string().starts_with("it is a data node (a master)"), "{flavor}: {err}");
            // ROLE refused: not a sentinel, what it is untold.
            let mut s = session(false);
            let err =
                s.handle_input(&cat(&[b"-NOAUTH Authentication required.\r\n", said.on_node])).unwrap_err();
            assert!(err.to_string().starts_with("it is not a sentinel (it does not know SENTINEL"), "{err}");
        }
    }

    #[test]
    fn odd_shapes_are_errors() {
        let role = said()[1].role;
        for reply in [
            &b"+OK\r\n"[..],
            b"*1\r\n$1\r\nh\r\n",
            b"*2\r\n$1\r\nh\r\n$1\r\nx\r\n",
            b"*2\r\n$0\r\n\r\n$1\r\n1\r\n",
            b"HTTP/1.1 400\r\n",
        ] {
            let mut s = session(false);
            assert!(
                matches!(s.handle_input(&cat(&[role, reply])), Err(SentinelError::Protocol(_))),
                "{reply:?}"
            );
        }
        // Bytes that are not RESP at all, from the first.
        let mut s = session(false);
        assert!(matches!(s.handle_input(b"HTTP/1.1 400\r\n"), Err(SentinelError::Protocol(_))));
    }
}
