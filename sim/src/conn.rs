//! Per-connection state: protocol, authentication, buffered input and output, the parked
//! read or `WAIT`, the node it is connected to; and the request parser (RESP arrays of bulk strings, or inline commands).

use crate::id::parse_i64;
use crate::replication::Waiting;
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
#[cfg(test)]
pub(crate) type Parsed = Result<Option<(Vec<Vec<u8>>, usize)>, String>;

/// An `XREADGROUP … >` read: what it asks for, and while parked (`BLOCK`), until when.
#[derive(Clone, Debug)]
pub(crate) struct Blocked {
    pub(crate) key: Vec<u8>,
    pub(crate) group: Vec<u8>,
    pub(crate) consumer: Vec<u8>,
    pub(crate) count: usize,
    pub(crate) noack: bool,
    /// `CLAIM <min-idle-ms>` (Redis 8): idle pending entries are taken first.
    pub(crate) claim: Option<u64>,
    /// `MAXSIZE <bytes>` (Redis 8.10): the reply stops once it is this big.
    pub(crate) maxsize: Option<u64>,
    /// With `claim`: when to look again for entries become idle enough (the servers track
    /// it at parking and re-run the read then).
    pub(crate) claim_wake: Option<u64>,
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
    /// How far the request at the front of `input` has been parsed, so that a request that
    /// arrives in pieces is scanned once in all, not from its start at every piece.
    scan: Scan,
    pub(crate) output: Vec<u8>,
    pub(crate) blocked: Option<Blocked>,
    /// A parked `WAIT`/`WAITAOF`.
    pub(crate) waiting: Option<Waiting>,
    /// Which node it is connected to (0 or 1; see [`NODES`](crate::replication::NODES)): the
    /// master, or with a replica, either.
    pub(crate) node: u8,
    /// The master's replication offset after this connection's last write (0 without a
    /// replica): what `WAIT` waits for.
    pub(crate) last_write: u64,
    /// Set after a protocol error: the reply is flushed, then the connection is dead.
    pub(crate) closed: bool,
    /// When it last sent a command (virtual ms): `CLIENT LIST`'s `idle`.
    pub(crate) last_active: u64,
}

impl Conn {
    pub(crate) fn new(authed: bool, node: u8) -> Conn {
        Conn {
            proto: Protocol::Resp2,
            authed,
            name: None,
            input: Vec::new(),
            scan: Scan::default(),
            output: Vec::new(),
            blocked: None,
            waiting: None,
            node,
            last_write: 0,
            closed: false,
            last_active: 0,
        }
    }

    /// Appends received bytes (dropped once the connection is closed).
    pub(crate) fn push_input(&mut self, bytes: &[u8]) {
        if !self.closed {
            // Consumed requests are cut off only once they make up half of the buffer, so
            // that moving what is left costs no more than the bytes already parsed.
            if self.scan.start > 0 && self.scan.start >= self.input.len() / 2 {
                let cut = self.scan.start;
                self.input.drain(..cut);
                self.scan.shift(cut);
            }
            self.input.extend_from_slice(bytes);
        }
    }

    /// Whether it is parked (on a read or a `WAIT`): the commands behind wait.
    pub(crate) fn parked(&self) -> bool {
        self.blocked.is_some() || self.waiting.is_some()
    }

    /// Encodes a reply into the output.
    pub(crate) fn reply(&mut self, reply: &Reply) {
        reply.encode(self.proto, &mut self.output);
    }

    /// The next complete command, if any. A protocol error writes its reply and closes the
    /// connection. Empty requests are skipped.
    pub(crate) fn next_command(&mut self) -> Option<Vec<Vec<u8>>> {
        loop {
            if self.closed || self.scan.start >= self.input.len() {
                return None;
            }
            match self.scan.step(&self.input) {
                Ok(Some(args)) => {
                    if !args.is_empty() {
                        return Some(args);
                    }
                }
                Ok(None) => return None,
                Err(text) => {
                    self.reply(&Reply::err(format!("ERR Protocol error: {text}")));
                    self.closed = true;
                    self.input.clear();
                    self.scan = Scan::default();
                    return None;
                }
            }
        }
    }
}

/// Parses one request from the start of `buf`: `Ok(None)` when incomplete, else the
/// arguments and how many bytes they took.
#[cfg(test)]
pub(crate) fn parse_request(buf: &[u8]) -> Parsed {
    let mut scan = Scan::default();
    Ok(scan.step(buf)?.map(|args| (args, scan.start)))
}

/// The parser's place in the input: the request at `start` is parsed up to `pos`, its
/// complete arguments kept in `args`. Positions are offsets into the connection's input.
#[derive(Debug, Default)]
struct Scan {
    /// Where the request being parsed starts (everything before it is consumed).
    start: usize,
    /// Where parsing resumes: the start of the line or bulk string not yet complete.
    pos: usize,
    /// Where the search for the end of the line at `pos` resumes (nothing before it ends it).
    seek: usize,
    /// Arguments still to come, once a multibulk count is read.
    left: Option<usize>,
    /// The length of the bulk string at `pos`, once its header is read (`pos` is then its
    /// data).
    bulk: Option<usize>,
    args: Vec<Vec<u8>>,
    /// Bytes searched for line ends, for the test that parsing is linear.
    #[cfg(test)]
    searched: usize,
}

impl Scan {
    /// Forgets the first `cut` bytes of the input, which were consumed.
    fn shift(&mut self, cut: usize) {
        self.start -= cut;
        self.pos -= cut;
        self.seek -= cut;
    }

    /// Parses on from where the last call stopped: `Ok(None)` when the request is still
    /// incomplete, else its arguments (and the next request starts after it).
    fn step(&mut self, buf: &[u8]) -> Result<Option<Vec<Vec<u8>>>, String> {
        if self.pos == self.start && self.left.is_none() && buf.get(self.start) != Some(&b'*') {
            return self.inline(buf);
        }
        if self.left.is_none() {
            let Some(end) = self.line_end(buf) else {
                return if buf.len() - self.pos > INLINE_MAX {
                    Err("too big mbulk count string".into())
                } else {
                    Ok(None)
                };
            };
            let n = match parse_i64(&buf[self.pos + 1..end]) {
                Some(n) if n <= MULTIBULK_MAX => n,
                _ => return Err("invalid multibulk length".into()),
            };
            self.left = Some(n.max(0) as usize);
            self.advance(end + 2);
        }
        while let Some(left) = self.left.filter(|&n| n > 0) {
            let len = match self.bulk {
                Some(len) => len,
                None => {
                    let Some(&kind) = buf.get(self.pos) else { return Ok(None) };
                    if kind != b'$' {
                        return Err(format!("expected '$', got '{}'", kind as char));
                    }
                    let Some(end) = self.line_end(buf) else {
                        return if buf.len() - self.pos > INLINE_MAX {
                            Err("too big bulk count string".into())
                        } else {
                            Ok(None)
                        };
                    };
                    let len = match parse_i64(&buf[self.pos + 1..end]) {
                        Some(len) if (0..=BULK_MAX).contains(&len) => len as usize,
                        _ => return Err("invalid bulk length".into()),
                    };
                    self.advance(end + 2);
                    self.bulk = Some(len);
                    len
                }
            };
            if buf.len() < self.pos + len + 2 {
                return Ok(None);
            }
            self.args.push(buf[self.pos..self.pos + len].to_vec());
            self.advance(self.pos + len + 2);
            self.bulk = None;
            self.left = Some(left - 1);
        }
        Ok(Some(self.finish()))
    }

    /// An inline request: one line of words.
    fn inline(&mut self, buf: &[u8]) -> Result<Option<Vec<Vec<u8>>>, String> {
        let from = self.seek.max(self.pos);
        let found = buf[from..].iter().position(|&b| b == b'\n');
        #[cfg(test)]
        {
            self.searched += found.map_or(buf.len() - from, |i| i + 1);
        }
        let Some(nl) = found.map(|i| i + from) else {
            self.seek = buf.len();
            return if buf.len() - self.pos > INLINE_MAX {
                Err("too big inline request".into())
            } else {
                Ok(None)
            };
        };
        let line = &buf[self.pos..nl];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        self.args = split_args(line).ok_or_else(|| "unbalanced quotes in request".to_string())?;
        self.advance(nl + 1);
        Ok(Some(self.finish()))
    }

    /// Where the line at `pos` ends (its CRLF), remembering how far it was searched.
    fn line_end(&mut self, buf: &[u8]) -> Option<usize> {
        // A CR at the end of what was searched may pair with an LF still to come.
        let from = self.seek.saturating_sub(1).max(self.pos);
        let found = buf.get(from..)?.windows(2).position(|w| w == b"\r\n");
        #[cfg(test)]
        {
            self.searched += found.map_or(buf.len() - from, |i| i + 2);
        }
        match found {
            Some(i) => Some(from + i),
            None => {
                self.seek = buf.len();
                None
            }
        }
    }

    fn advance(&mut self, to: usize) {
        self.pos = to;
        self.seek = to;
    }

    /// The request is complete: the next one starts where it ends.
    fn finish(&mut self) -> Vec<Vec<u8>> {
        self.start = self.pos;
        self.left = None;
        self.bulk = None;
        std::mem::take(&mut self.args)
    }
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

    /// Feeds `input` to a connection in pieces of `piece` bytes; returns the commands and the
    /// bytes searched for line ends.
    fn feed(input: &[u8], piece: usize) -> (Vec<Vec<Vec<u8>>>, usize) {
        let mut conn = Conn::new(true, 0);
        let mut commands = Vec::new();
        for part in input.chunks(piece) {
            conn.push_input(part);
            while let Some(args) = conn.next_command() {
                commands.push(args);
            }
        }
        assert!(!conn.closed, "{:?}", String::from_utf8_lossy(&conn.output));
        (commands, conn.scan.searched)
    }

    #[test]
    fn a_request_in_pieces_is_scanned_once() {
        let mut request = b"*5001\r\n$4\r\nXADD\r\n".to_vec();
        for i in 0..5000 {
            let arg = format!("field-{i}");
            request.extend_from_slice(format!("${}\r\n{arg}\r\n", arg.len()).as_bytes());
        }
        // A long inline request: its line end is searched for once, not at every piece.
        let long = "x".repeat(20_000);
        request.extend_from_slice(format!("PING {long}\r\n*1\r\n$4\r\nPING\r\n").as_bytes());
        let (whole, searched_whole) = feed(&request, request.len());
        assert_eq!(whole.len(), 3);
        assert_eq!(whole[0].len(), 5001);
        assert_eq!(whole[0][4999], b"field-4998");
        assert_eq!(whole[1], [b"PING".to_vec(), long.into_bytes()]);
        for piece in [1, 2, 3, 7, 1000] {
            let (commands, searched) = feed(&request, piece);
            assert_eq!(commands, whole, "pieces of {piece}");
            // Each byte is searched at most twice (a CR at the end of a piece, again).
            assert!(searched <= 2 * request.len(), "pieces of {piece}: {searched} bytes searched");
        }
        assert!(searched_whole <= request.len());
    }

    #[test]
    fn errors_and_limits_in_pieces() {
        for piece in [1, 3, 64] {
            let mut conn = Conn::new(true, 0);
            for part in b"*1\r\n$4\r\nPING\r\n*1\r\n+x\r\n*1\r\n$4\r\nPING\r\n".chunks(piece) {
                conn.push_input(part);
                while conn.next_command().is_some() {}
            }
            assert!(conn.closed);
            assert_eq!(conn.output, b"-ERR Protocol error: expected '$', got '+'\r\n");
        }
        let mut conn = Conn::new(true, 0);
        for _ in 0..(INLINE_MAX / 1024 + 1) {
            conn.push_input(&[b'a'; 1024]);
            assert!(conn.next_command().is_none());
        }
        assert!(conn.closed);
        assert_eq!(conn.output, b"-ERR Protocol error: too big inline request\r\n");
    }
}
