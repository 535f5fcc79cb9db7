//! Whole replies out of incoming bytes, and what is wrong with one.

use std::borrow::Cow;
use std::fmt;

use bytes::{Bytes, BytesMut};

use crate::cluster::{parse_redirect, Redirect};
use crate::config::{Limits, Protocol};
use crate::decode::{Budget, DecodeError, Decoder, Frame, Value};

/// Why a reply cannot be read as what was asked.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReplyError {
    /// The server refused the command: its error reply's text (`NOGROUP No such key …`).
    Server(String),
    /// The reply is not of the shape the command's answer has.
    Shape {
        /// The command answered.
        command: &'static str,
        /// What is wrong with it.
        detail: &'static str,
    },
    /// The first bytes are not RESP at all: not a Redis server. `said` is the start of what
    /// it sent, its first line (an HTTP server's `HTTP/1.1 400 Bad Request`).
    NotRedis {
        /// The first line received, up to 60 characters.
        said: String,
    },
    /// Bytes that are not RESP after replies that were, or a reply past the limits.
    Invalid(String),
}

impl fmt::Display for ReplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplyError::Server(text) => f.write_str(text),
            ReplyError::Shape { command, detail } => write!(f, "unexpected reply to {command}: {detail}"),
            ReplyError::NotRedis { said } => write!(f, "did not answer as a Redis server (it said {said:?})"),
            ReplyError::Invalid(detail) => write!(f, "sent a reply that is not RESP: {detail}"),
        }
    }
}

impl std::error::Error for ReplyError {}

/// One whole reply, as it came (error replies included), for the typed readers.
#[derive(Clone, PartialEq, Eq)]
pub struct Reply {
    bytes: Bytes,
    protocol: Protocol,
}

impl Reply {
    /// The reply's bytes, as received: what the core's readers of raw replies take
    /// ([`read_node_role`](crate::locate::read_node_role),
    /// [`read_slot_map`](crate::cluster::read_slot_map),
    /// [`Retirement::read`](crate::retire::Retirement::read) in RESP2).
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The error reply's text, if it is one.
    pub fn error(&self) -> Option<Cow<'_, str>> {
        self.error_bytes().map(String::from_utf8_lossy)
    }

    /// The error reply's text, as bytes.
    fn error_bytes(&self) -> Option<&[u8]> {
        // Every error reply is kept as a simple one (`Replies::next`), RESP3's blob errors too.
        let text = self.bytes.strip_prefix(b"-")?;
        Some(text.strip_suffix(b"\r\n").unwrap_or(text))
    }

    /// The cluster redirect (`MOVED`, `ASK`) this error reply is, if it is one.
    pub fn redirect(&self) -> Option<Redirect> {
        parse_redirect(self.error_bytes()?)
    }

    /// True for `-NOAUTH …`: the server wants a login before anything else.
    pub fn wants_login(&self) -> bool {
        self.error_bytes().is_some_and(|text| text.starts_with(b"NOAUTH"))
    }

    /// The reply itself, or its error as [`ReplyError::Server`].
    pub fn refused(self) -> Result<Reply, ReplyError> {
        match self.error() {
            Some(text) => Err(ReplyError::Server(text.into_owned())),
            None => Ok(self),
        }
    }

    /// The value, for the typed readers; an error reply is [`ReplyError::Server`].
    pub(crate) fn value(&self) -> Result<Value, ReplyError> {
        let mut decoder = Decoder::new(Limits::default());
        decoder.extend(&self.bytes);
        match decoder.next(self.protocol) {
            Ok(Some(Frame::Reply(Value::Error(text)))) => {
                Err(ReplyError::Server(String::from_utf8_lossy(&text).into_owned()))
            }
            Ok(Some(Frame::Reply(value))) => Ok(value),
            Ok(_) => Err(ReplyError::Invalid("not a whole reply".into())),
            Err(e) => Err(ReplyError::Invalid(describe(e))),
        }
    }
}

impl fmt::Debug for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Reply({:?})", String::from_utf8_lossy(&self.bytes))
    }
}

/// Incoming bytes, split into whole [`Reply`]s as they come: feed what is read with
/// [`extend`](Self::extend), take each reply with [`next_reply`](Self::next_reply). A reply may arrive
/// in any number of reads; several may arrive in one.
#[derive(Debug)]
pub struct Replies {
    decoder: Decoder,
    protocol: Protocol,
    limits: Limits,
    /// Whether a whole reply came yet: bytes that are not RESP before one are no Redis
    /// server's, after one a broken reply.
    replied: bool,
    /// The first bytes received, until the first reply: what a server that is not one said.
    first: Vec<u8>,
}

impl Default for Replies {
    fn default() -> Replies {
        Replies::new()
    }
}

/// How many of the first bytes are kept to name a server that is not one.
const FIRST_KEPT: usize = 256;

impl Replies {
    /// Replies in RESP2 (what a connection speaks until `HELLO 3`), frames up to the
    /// default [`Limits`].
    pub fn new() -> Replies {
        Replies::with(Protocol::Resp2, Limits::default())
    }

    /// Replies in `protocol`, held to `limits`.
    pub fn with(protocol: Protocol, limits: Limits) -> Replies {
        Replies { decoder: Decoder::new(limits), protocol, limits, replied: false, first: Vec::new() }
    }

    /// Bytes read from the connection.
    pub fn extend(&mut self, bytes: &[u8]) {
        if !self.replied && self.first.len() < FIRST_KEPT {
            let room = FIRST_KEPT - self.first.len();
            self.first.extend_from_slice(&bytes[..bytes.len().min(room)]);
        }
        self.decoder.extend(bytes);
    }

    /// The next whole reply, or `None` until more bytes come. Bytes that are not RESP are
    /// [`ReplyError::NotRedis`] before any reply, [`ReplyError::Invalid`] after one: the
    /// connection is then of no further use.
    pub fn next_reply(&mut self) -> Result<Option<Reply>, ReplyError> {
        let budget = Budget { bytes: self.limits.max_frame, skip: None, raw: true };
        loop {
            let frame = match self.decoder.next_within(self.protocol, budget) {
                Ok(None) => return Ok(None),
                Ok(Some((frame, _))) => frame,
                Err(e) if !self.replied && matches!(e, DecodeError::Invalid(_)) => {
                    // Its first line tells what it is (`HTTP/1.1 400 Bad Request`).
                    let line = self.first.split(|b| b"\r\n".contains(b)).next().unwrap_or_default();
                    let said = String::from_utf8_lossy(line).chars().take(60).collect();
                    return Err(ReplyError::NotRedis { said });
                }
                Err(e) => return Err(ReplyError::Invalid(describe(e))),
            };
            let bytes = match frame {
                Frame::Raw { bytes, spans } => {
                    self.decoder.reuse(spans);
                    bytes
                }
                Frame::Reply(Value::Error(text)) => {
                    let mut out = BytesMut::with_capacity(text.len() + 3);
                    out.extend_from_slice(b"-");
                    out.extend_from_slice(&text);
                    out.extend_from_slice(b"\r\n");
                    out.freeze()
                }
                // Out of band (RESP3): it answers no command.
                Frame::Push => continue,
                Frame::Reply(_) | Frame::Skipped { .. } => {
                    return Err(ReplyError::Invalid("a reply the decoder did not leave whole".into()))
                }
            };
            if !self.replied {
                self.replied = true;
                self.first = Vec::new();
            }
            return Ok(Some(Reply { bytes, protocol: self.protocol }));
        }
    }
}

fn describe(e: DecodeError) -> String {
    match e {
        DecodeError::Invalid(detail) => detail,
        DecodeError::TooLarge => "a reply larger than the limit".into(),
        DecodeError::TooDeep => "a reply nested deeper than the limit".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(bytes: &[u8]) -> Vec<Reply> {
        let mut replies = Replies::new();
        replies.extend(bytes);
        std::iter::from_fn(|| replies.next_reply().unwrap()).collect()
    }

    #[test]
    fn replies_whole_in_any_split() {
        let input: &[u8] = b"+OK\r\n-MOVED 3999 127.0.0.1:6381\r\n*2\r\n$3\r\n1-0\r\n:5\r\n-NOAUTH Authentication required.\r\n";
        let whole = all(input);
        assert_eq!(whole.len(), 4);
        for cut in 0..input.len() {
            let mut replies = Replies::new();
            let mut got = Vec::new();
            for part in [&input[..cut], &input[cut..]] {
                replies.extend(part);
                while let Some(reply) = replies.next_reply().unwrap() {
                    got.push(reply);
                }
            }
            assert_eq!(got, whole, "cut at {cut}");
        }
        assert_eq!(whole[0].as_bytes(), b"+OK\r\n");
        assert_eq!(whole[0].error(), None);
        let moved = whole[1].redirect().unwrap();
        assert_eq!((moved.host.as_str(), moved.port), ("127.0.0.1", 6381));
        assert_eq!(whole[1].error().as_deref(), Some("MOVED 3999 127.0.0.1:6381"));
        assert_eq!(whole[2].as_bytes(), b"*2\r\n$3\r\n1-0\r\n:5\r\n");
        assert!(whole[3].wants_login() && !whole[1].wants_login());
        assert_eq!(
            whole[3].clone().refused(),
            Err(ReplyError::Server("NOAUTH Authentication required.".into()))
        );
    }

    #[test]
    fn a_server_that_is_none_is_named_by_what_it_said() {
        let mut replies = Replies::new();
        replies.extend(b"HTTP/1.1 400 Bad Request\r\n\r\n");
        let e = replies.next_reply().unwrap_err();
        assert_eq!(e, ReplyError::NotRedis { said: "HTTP/1.1 400 Bad Request".into() });
        assert_eq!(e.to_string(), "did not answer as a Redis server (it said \"HTTP/1.1 400 Bad Request\")");
        // After a reply, junk is a broken reply.
        let mut replies = Replies::new();
        replies.extend(b"+OK\r\n?junk\r\n");
        assert!(replies.next_reply().unwrap().is_some());
        assert!(matches!(replies.next_reply(), Err(ReplyError::Invalid(_))));
    }

    #[test]
    fn resp3_errors_and_pushes() {
        let mut replies = Replies::with(Protocol::Resp3, Limits::default());
        replies.extend(b">2\r\n+a\r\n+b\r\n!10\r\nERR nope x\r\n_\r\n");
        let error = replies.next_reply().unwrap().unwrap();
        assert_eq!(error.error().as_deref(), Some("ERR nope x"));
        assert_eq!(replies.next_reply().unwrap().unwrap().as_bytes(), b"_\r\n");
    }
}
