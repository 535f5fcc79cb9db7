//! One conversation with one sentinel, sans-IO: where is the service's master, and then
//! (subscribed to `+switch-master`) where it moves when a failover ends.
//!
//! Always RESP2, which every sentinel speaks: `[AUTH …]`, `SENTINEL get-master-addr-by-name
//! <service>` (`[host, port]`, or nil for a service it does not watch), `SUBSCRIBE
//! +switch-master`, pipelined in one write. The subscription is registered right after the
//! answer, so a failover that ends after the answer is heard as a message:
//! `["message", "+switch-master", "<service> <old host> <old port> <new host> <new port>"]`.

use std::collections::VecDeque;
use std::fmt;

use bytes::{Bytes, BytesMut};

use super::{HostPort, Sentinels};
use crate::config::{Limits, Protocol};
use crate::decode::{Decoder, Frame, Value};
use crate::encode::command;

/// What a sentinel said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SentinelAnswer {
    /// The service's master is there (the answer to the question).
    Master(HostPort),
    /// The sentinel watches no service of that name (the answer to the question).
    Unknown,
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
}

impl fmt::Display for SentinelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SentinelError::Refused { command, message } if message.starts_with("ERR unknown command") => {
                write!(f, "it refused {command} ({message}): is it a sentinel?")
            }
            SentinelError::Refused { command, message } => write!(f, "it refused {command}: {message}"),
            SentinelError::Protocol(detail) => write!(f, "{detail}"),
        }
    }
}

impl std::error::Error for SentinelError {}

/// A reply still to come, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Awaiting {
    Auth,
    Master,
    Subscribed,
}

impl Awaiting {
    fn command(self) -> &'static str {
        match self {
            Awaiting::Auth => "AUTH",
            Awaiting::Master => "SENTINEL get-master-addr-by-name",
            Awaiting::Subscribed => "SUBSCRIBE +switch-master",
        }
    }
}

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
}

impl SentinelSession {
    /// A session asking `sentinels`' service's master, then watching for its switches;
    /// its commands are ready to write.
    pub fn new(sentinels: &Sentinels) -> SentinelSession {
        let mut out = BytesMut::with_capacity(128);
        let mut awaiting = VecDeque::with_capacity(3);
        if let Some(auth) = &sentinels.auth {
            match &auth.user {
                Some(user) => command(&mut out, &[b"AUTH", user, &auth.password]),
                None => command(&mut out, &[b"AUTH", &auth.password]),
            }
            awaiting.push_back(Awaiting::Auth);
        }
        let service = Bytes::copy_from_slice(sentinels.service.as_bytes());
        command(&mut out, &[b"SENTINEL", b"get-master-addr-by-name", &service]);
        command(&mut out, &[b"SUBSCRIBE", SWITCH_MASTER]);
        awaiting.extend([Awaiting::Master, Awaiting::Subscribed]);
        SentinelSession {
            service,
            out,
            decoder: Decoder::new(Limits::default()),
            awaiting,
            answers: VecDeque::new(),
            failed: None,
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

    /// True once the question is answered (the session now only watches).
    pub fn answered(&self) -> bool {
        !self.awaiting.contains(&Awaiting::Master)
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
            return Err(SentinelError::Refused { command: awaiting.command(), message });
        }
        match awaiting {
            Awaiting::Auth => {}
            Awaiting::Master => self.answers.push_back(match value {
                Value::Nil => SentinelAnswer::Unknown,
                Value::Array(items) => match &items[..] {
                    [Value::Str(host), Value::Str(port)] => {
                        SentinelAnswer::Master(host_port(host, port).ok_or_else(|| shape("the master"))?)
                    }
                    _ => return Err(shape("the master")),
                },
                _ => return Err(shape("the master")),
            }),
            Awaiting::Subscribed => match value {
                Value::Array(items) if matches!(items.first(), Some(Value::Str(kind)) if &kind[..] == b"subscribe") =>
                    {}
                _ => return Err(shape("SUBSCRIBE")),
            },
        }
        Ok(())
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

    #[test]
    fn asks_then_watches() {
        let mut s = session(false);
        assert_eq!(
            s.poll_transmit().unwrap(),
            &b"*3\r\n$8\r\nSENTINEL\r\n$23\r\nget-master-addr-by-name\r\n$8\r\nmymaster\r\n\
               *2\r\n$9\r\nSUBSCRIBE\r\n$14\r\n+switch-master\r\n"[..]
        );
        s.advance_transmit(1000);
        assert_eq!(s.poll_transmit(), None);
        let reply = b"*2\r\n$9\r\n127.0.0.1\r\n$4\r\n7601\r\n*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n";
        // Any split of the bytes gives the same answers.
        for cut in 0..reply.len() {
            let mut s = session(false);
            s.handle_input(&reply[..cut]).unwrap();
            s.handle_input(&reply[cut..]).unwrap();
            assert_eq!(answers(&mut s), [SentinelAnswer::Master(HostPort::new("127.0.0.1", 7601))]);
            assert!(s.answered());
        }
        s.handle_input(reply).unwrap();
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

    #[test]
    fn logs_in_first_and_tells_an_unknown_service() {
        let mut s = session(true);
        assert!(s
            .poll_transmit()
            .unwrap()
            .starts_with(b"*3\r\n$4\r\nAUTH\r\n$7\r\nwatcher\r\n$6\r\ns3cret\r\n"));
        s.handle_input(b"+OK\r\n*-1\r\n").unwrap();
        assert_eq!(answers(&mut s), [SentinelAnswer::Unknown]);
        let mut s = session(true);
        let refused = s.handle_input(b"-WRONGPASS invalid username-password pair or user is disabled.\r\n");
        assert_eq!(
            refused.unwrap_err().to_string(),
            "it refused AUTH: WRONGPASS invalid username-password pair or user is disabled."
        );
        let mut s = session(false);
        let err =
            s.handle_input(b"-ERR unknown command 'SENTINEL', with args beginning with: \r\n").unwrap_err();
        assert!(err.to_string().ends_with("is it a sentinel?"), "{err}");
    }

    #[test]
    fn odd_shapes_are_errors() {
        for reply in [
            &b"+OK\r\n"[..],
            b"*1\r\n$1\r\nh\r\n",
            b"*2\r\n$1\r\nh\r\n$1\r\nx\r\n",
            b"*2\r\n$0\r\n\r\n$1\r\n1\r\n",
            b"HTTP/1.1 400\r\n",
        ] {
            let mut s = session(false);
            assert!(matches!(s.handle_input(reply), Err(SentinelError::Protocol(_))), "{reply:?}");
        }
    }
}
