//! Per-connection state: protocol, authentication, buffered input and output, the parked
//! read; and the request parser (RESP arrays of bulk strings, or inline commands).

use crate::id::parse_i64;
use crate::reply::{Protocol, Reply};

/// Longest inline request, or multibulk count line, before the server gives up.
const INLINE_MAX: usize = 64 * 1024;
/// Most arguments a multibulk request may declare.
const MULTIBULK_MAX: i64 = 1024 * 1024;
/// Longest bulk argument.
const BULK_MAX: i64 = 512 * 1024 * 1024;

/// A client connection of the simulator. Returned by [`Sim::connect`](crate::Sim::connect).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(pub(crate) u64);

impl ConnId {
    /// The id the connection reports for `CLIENT ID` and in the `HELLO` reply.
    pub fn client_id(self) -> u64 {
        self.0
    }
}

/// A parsed request (its arguments and how many bytes it took), `None` when incomplete, or
/// the text of a protocol error.
pub(crate) type Parsed = Result<Option<(Vec<Vec<u8>>, usize)>, String>;

/// A parked `XREADGROUP … BLOCK … >`.
#[derive(Clone, Debug)]
pub(crate) struct Blocked {
    pub(crate) key: Vec<u8>,
    pub(crate) group: Vec<u8>,
    pub(crate) consumer: Vec<u8>,
    pub(crate) count: usize,
    pub(crate) noack: bool,
    /// Virtual ms at which it times out; `None` for `BLOCK 0`.
    pub(crate) deadline: Option<u64>,
    /// Global order of parking (first parked, first served).
    pub(crate) order: u64,
}

/// State of one connection.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) proto: Protocol,
    pub(crate) authed: bool,
    pub(crate) name: Option<Vec<u8>>,
    input: Vec<u8>,
    pub(crate) output: Vec<u8>,
    pub(crate) blocked: Option<Blocked>,
    /// Set after a protocol error: the reply is flushed, then the connection is dead.
    pub(crate) closed: bool,
}

impl Conn {
    pub(crate) fn new(authed: bool) -> Conn {
        Conn {
            proto: Protocol::Resp2,
            authed,
            name: None,
            input: Vec::new(),
            output: Vec::new(),
            blocked: None,
            closed: false,
        }
    }

    /// Appends received bytes (dropped once the connection is closed).
    pub(crate) fn push_input(&mut self, bytes: &[u8]) {
        if !self.closed {
            self.input.extend_from_slice(bytes);
        }
    }

    /// Encodes a reply into the output.
    pub(crate) fn reply(&mut self, reply: &Reply) {
        reply.encode(self.proto, &mut self.output);
    }

    /// The next complete command, if any. A protocol error writes its reply and closes the
    /// connection. Empty requests are skipped.
    pub(crate) fn next_command(&mut self) -> Option<Vec<Vec<u8>>> {
        loop {
            if self.closed || self.input.is_empty() {
                return None;
            }
            match parse_request(&self.input) {
                Ok(Some((args, used))) => {
                    self.input.drain(..used);
                    if !args.is_empty() {
                        return Some(args);
                    }
                }
                Ok(None) => return None,
                Err(text) => {
                    self.reply(&Reply::err(format!("ERR Protocol error: {text}")));
                    self.closed = true;
                    self.input.clear();
                    return None;
                }
            }
        }
    }
}

/// Parses one request from the start of `buf`: `Ok(None)` when incomplete, else the
/// arguments and how many bytes they took.
pub(crate) fn parse_request(buf: &[u8]) -> Parsed {
    if buf.first() == Some(&b'*') {
        parse_multibulk(buf)
    } else {
        parse_inline(buf)
    }
}

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?.windows(2).position(|w| w == b"\r\n").map(|p| p + from)
}

fn parse_multibulk(buf: &[u8]) -> Parsed {
    let Some(end) = find_crlf(buf, 0) else {
        return if buf.len() > INLINE_MAX { Err("too big mbulk count string".into()) } else { Ok(None) };
    };
    let n = match parse_i64(&buf[1..end]) {
        Some(n) if n <= MULTIBULK_MAX => n,
        _ => return Err("invalid multibulk length".into()),
    };
    let mut pos = end + 2;
    let mut args = Vec::new();
    for _ in 0..n.max(0) {
        let Some(&kind) = buf.get(pos) else { return Ok(None) };
        if kind != b'$' {
            return Err(format!("expected '$', got '{}'", kind as char));
        }
        let Some(end) = find_crlf(buf, pos) else {
            return if buf.len() - pos > INLINE_MAX {
                Err("too big bulk count string".into())
            } else {
                Ok(None)
            };
        };
        let len = match parse_i64(&buf[pos + 1..end]) {
            Some(len) if (0..=BULK_MAX).contains(&len) => len as usize,
            _ => return Err("invalid bulk length".into()),
        };
        let start = end + 2;
        if buf.len() < start + len + 2 {
            return Ok(None);
        }
        args.push(buf[start..start + len].to_vec());
        pos = start + len + 2;
    }
    Ok(Some((args, pos)))
}

fn parse_inline(buf: &[u8]) -> Parsed {
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        return if buf.len() > INLINE_MAX { Err("too big inline request".into()) } else { Ok(None) };
    };
    let line = buf[..nl].strip_suffix(b"\r").unwrap_or(&buf[..nl]);
    let args = split_args(line).ok_or_else(|| "unbalanced quotes in request".to_string())?;
    Ok(Some((args, nl + 1)))
}

/// Splits an inline request like `sdssplitargs`: whitespace-separated words, `"…"` with
/// backslash escapes, `'…'` literal.
fn split_args(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut args = Vec::new();
    let mut i = 0;
    loop {
        while i < line.len() && line[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= line.len() {
            return Some(args);
        }
        let mut cur = Vec::new();
        match line[i] {
            q @ (b'"' | b'\'') => {
                i += 1;
                loop {
                    let &b = line.get(i)?;
                    i += 1;
                    if b == q {
                        if line.get(i).is_some_and(|c| !c.is_ascii_whitespace()) {
                            return None;
                        }
                        break;
                    }
                    if b == b'\\' && q == b'"' {
                        let &e = line.get(i)?;
                        i += 1;
                        cur.push(match e {
                            b'n' => b'\n',
                            b'r' => b'\r',
                            b't' => b'\t',
                            other => other,
                        });
                    } else {
                        cur.push(b);
                    }
                }
            }
            _ => {
                while i < line.len() && !line[i].is_ascii_whitespace() {
                    cur.push(line[i]);
                    i += 1;
                }
            }
        }
        args.push(cur);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_multibulk_and_inline() {
        let (args, used) = parse_request(b"*2\r\n$4\r\nPING\r\n$1\r\nx\r\nrest").unwrap().unwrap();
        assert_eq!(args, vec![b"PING".to_vec(), b"x".to_vec()]);
        assert_eq!(used, 21);
        assert_eq!(parse_request(b"*2\r\n$4\r\nPING\r\n$1\r\n").unwrap(), None);
        let (args, _) = parse_request(b"XADD s  1-0 \"a b\" 'c'\r\n").unwrap().unwrap();
        assert_eq!(
            args,
            vec![b"XADD".to_vec(), b"s".to_vec(), b"1-0".to_vec(), b"a b".to_vec(), b"c".to_vec()]
        );
        assert!(parse_request(b"*1\r\n+x\r\n").is_err());
        assert!(parse_request(b"*x\r\n").is_err());
        assert!(parse_request(b"\"unbalanced\n").is_err());
    }
}
