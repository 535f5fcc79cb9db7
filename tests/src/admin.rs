//! A small blocking RESP2 client for setting up and inspecting server state in tests.
//!
//! [`Admin`] is deliberately simple: one `std::net::TcpStream`, commands written as arrays of
//! bulk strings, replies decoded with `redis_protocol::resp2::decode::decode` into the
//! crate's own [`Reply`]. It is a test tool, not a client library: I/O failures, timeouts
//! (10 s) and undecodable bytes panic with a message naming the server and the command.
//! Error *replies* from the server are not failures: [`Admin::cmd`] returns them as
//! [`Reply::Error`]; [`Admin::call`] and the typed helpers panic on them instead.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use redis_protocol::resp2::decode::decode;
use redis_protocol::resp2::types::OwnedFrame;

/// How long [`Admin`] waits for a reply (or for a write to go through) before panicking.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// How many commands [`Admin::xadd_n`] and [`Admin::pipeline`] write at once.
pub const PIPELINE_CHUNK: usize = 1000;

/// Size of one socket read.
const READ_CHUNK: usize = 64 * 1024;

/// One pending entry as reported by the extended form of `XPENDING`:
/// `(id, owner, idle_ms, deliveries)`.
pub type PendingEntry = (String, String, i64, i64);

/// A stream entry: its id and its field/value pairs (names as text).
pub type StreamEntry = (String, Vec<(String, Vec<u8>)>);

/// A decoded RESP2 reply.
#[derive(Clone, PartialEq, Eq)]
pub enum Reply {
    /// A nil bulk string (`$-1`) or nil array (`*-1`).
    Nil,
    /// An integer (`:`).
    Int(i64),
    /// A bulk string (`$`).
    Bulk(Vec<u8>),
    /// A simple string (`+`), e.g. `OK` or `PONG`.
    Simple(String),
    /// An error reply (`-`), e.g. `NOGROUP No such key …`.
    Error(String),
    /// An array (`*`).
    Array(Vec<Reply>),
}

impl Reply {
    /// Whether this is an error reply.
    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// Whether this is an error reply whose text starts with `prefix` (e.g. `"NOGROUP"`).
    pub fn is_error_with(&self, prefix: &str) -> bool {
        matches!(self, Reply::Error(e) if e.starts_with(prefix))
    }

    /// The text of a simple string, bulk string (lossy UTF-8) or error; `None` otherwise.
    pub fn as_text(&self) -> Option<String> {
        match self {
            Reply::Simple(s) | Reply::Error(s) => Some(s.clone()),
            Reply::Bulk(b) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        }
    }

    /// The bytes of a bulk string; `None` otherwise.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Reply::Bulk(b) => Some(b),
            _ => None,
        }
    }

    /// The value of an integer reply; `None` otherwise.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Reply::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The elements of an array reply; `None` otherwise.
    pub fn as_array(&self) -> Option<&[Reply]> {
        match self {
            Reply::Array(items) => Some(items),
            _ => None,
        }
    }

    /// Consumes an array reply into its elements; `None` otherwise.
    pub fn into_array(self) -> Option<Vec<Reply>> {
        match self {
            Reply::Array(items) => Some(items),
            _ => None,
        }
    }

    /// Whether this is the simple string `OK`.
    pub fn is_ok(&self) -> bool {
        matches!(self, Reply::Simple(s) if s == "OK")
    }

    fn from_frame(frame: OwnedFrame) -> Reply {
        match frame {
            OwnedFrame::SimpleString(s) => Reply::Simple(String::from_utf8_lossy(&s).into_owned()),
            OwnedFrame::Error(e) => Reply::Error(e),
            OwnedFrame::Integer(i) => Reply::Int(i),
            OwnedFrame::BulkString(b) => Reply::Bulk(b),
            OwnedFrame::Array(items) => Reply::Array(items.into_iter().map(Reply::from_frame).collect()),
            OwnedFrame::Null => Reply::Nil,
        }
    }
}

/// Bulk strings print as (escaped) text, so replies read well in assertion messages.
impl fmt::Debug for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Nil => f.write_str("Nil"),
            Reply::Int(i) => write!(f, "Int({i})"),
            Reply::Bulk(b) => write!(f, "Bulk({:?})", String::from_utf8_lossy(b)),
            Reply::Simple(s) => write!(f, "Simple({s:?})"),
            Reply::Error(e) => write!(f, "Error({e:?})"),
            Reply::Array(items) => f.debug_list().entries(items).finish(),
        }
    }
}

/// A blocking RESP2 connection for test setup and inspection.
#[derive(Debug)]
pub struct Admin {
    addr: SocketAddr,
    stream: TcpStream,
    /// Bytes read but not yet decoded start at `buf[pos]`.
    buf: Vec<u8>,
    pos: usize,
    out: Vec<u8>,
}

impl Admin {
    /// Connects to `addr` (unauthenticated). Panics if the connection fails.
    pub fn connect(addr: SocketAddr) -> Admin {
        Admin::try_connect(addr, TIMEOUT)
            .unwrap_or_else(|e| panic!("pelican-tests admin: cannot connect to {addr}: {e}"))
    }

    /// Connects to `addr` and sends `AUTH user pass`. `Err` carries the server's error text
    /// (e.g. `WRONGPASS …`) when authentication is refused; I/O failures panic.
    ///
    /// A server started with only `requirepass` accepts the user `default`.
    pub fn connect_auth(addr: SocketAddr, user: &str, pass: &str) -> Result<Admin, String> {
        let mut admin = Admin::connect(addr);
        match admin.cmd(&["AUTH", user, pass]) {
            Reply::Error(e) => Err(e),
            r if r.is_ok() => Ok(admin),
            other => panic!("pelican-tests admin {addr}: AUTH answered {other:?}"),
        }
    }

    /// Connects with a connect timeout and read/write timeouts of `timeout`, returning I/O
    /// errors instead of panicking (used by the server readiness probe).
    pub fn try_connect(addr: SocketAddr, timeout: Duration) -> io::Result<Admin> {
        let stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        stream.set_nodelay(true)?;
        Ok(Admin { addr, stream, buf: Vec::with_capacity(READ_CHUNK), pos: 0, out: Vec::new() })
    }

    /// The address this client is connected to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sends one command and returns its reply; error replies come back as
    /// [`Reply::Error`]. Panics on I/O errors and timeouts.
    ///
    /// ```no_run
    /// # fn f(admin: &mut pelican_tests::admin::Admin) {
    /// admin.cmd(&["XADD", "s", "*", "f", "v"]);
    /// # }
    /// ```
    pub fn cmd<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Reply {
        self.try_cmd(args).unwrap_or_else(|e| panic!("{}", self.io_panic(&describe(args), &e)))
    }

    /// Like [`cmd`](Admin::cmd), but panics if the server answers with an error.
    pub fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Reply {
        match self.cmd(args) {
            Reply::Error(e) => panic!("pelican-tests admin {}: `{}` failed: {e}", self.addr, describe(args)),
            reply => reply,
        }
    }

    /// Sends one command and returns its reply, or the I/O error (a closed connection, a
    /// timeout) instead of panicking. Useful to observe a connection that a test killed.
    pub fn try_cmd<A: AsRef<[u8]>>(&mut self, args: &[A]) -> io::Result<Reply> {
        self.out.clear();
        encode(&mut self.out, args);
        self.stream.write_all(&self.out)?;
        self.read_reply()
    }

    /// Writes all `commands` (in chunks of [`PIPELINE_CHUNK`]) and returns their replies in
    /// order. Error replies are returned, not raised.
    pub fn pipeline<A: AsRef<[u8]>>(&mut self, commands: &[Vec<A>]) -> Vec<Reply> {
        let mut replies = Vec::with_capacity(commands.len());
        for chunk in commands.chunks(PIPELINE_CHUNK) {
            self.out.clear();
            for command in chunk {
                encode(&mut self.out, command);
            }
            self.flush_out(&format!("pipeline of {} commands", chunk.len()));
            for _ in chunk {
                replies.push(self.read_or_panic("pipeline"));
            }
        }
        replies
    }

    /// `XADD key * field value …`; returns the new entry's id. Panics on an error reply.
    pub fn xadd<K: AsRef<[u8]>, V: AsRef<[u8]>>(&mut self, key: &str, fields: &[(K, V)]) -> String {
        let mut args: Vec<&[u8]> = vec![b"XADD", key.as_bytes(), b"*"];
        for (k, v) in fields {
            args.push(k.as_ref());
            args.push(v.as_ref());
        }
        let reply = self.call(&args);
        reply.as_text().unwrap_or_else(|| panic!("pelican-tests admin: XADD answered {reply:?}"))
    }

    /// Appends `n` entries to `key`, pipelined [`PIPELINE_CHUNK`] at a time, and returns
    /// their ids in order. Entry `i` (0-based) has one field `f` whose value is `i` in
    /// decimal, zero-padded to `field_len` bytes (longer if `i` needs more digits).
    /// Panics on any error reply.
    pub fn xadd_n(&mut self, key: &str, n: usize, field_len: usize) -> Vec<String> {
        let mut ids = Vec::with_capacity(n);
        let mut value = String::new();
        let mut start = 0;
        while start < n {
            let end = n.min(start + PIPELINE_CHUNK);
            self.out.clear();
            for i in start..end {
                value.clear();
                use std::fmt::Write as _;
                let _ = write!(value, "{i:0field_len$}");
                encode(&mut self.out, &[b"XADD".as_slice(), key.as_bytes(), b"*", b"f", value.as_bytes()]);
            }
            self.flush_out("XADD pipeline");
            for _ in start..end {
                match self.read_or_panic("XADD pipeline") {
                    Reply::Bulk(id) => ids.push(String::from_utf8_lossy(&id).into_owned()),
                    other => {
                        panic!("pelican-tests admin {}: pipelined XADD {key} answered {other:?}", self.addr)
                    }
                }
            }
            start = end;
        }
        ids
    }

    /// Every entry of `key` in order (`XRANGE key - +`): its id and its field/value pairs
    /// (names as text). Empty for a missing key.
    pub fn xrange(&mut self, key: &str) -> Vec<StreamEntry> {
        let reply = self.call(&["XRANGE", key, "-", "+"]);
        let parse = |entry: &Reply| -> Option<StreamEntry> {
            let [id, fields] = entry.as_array()? else { return None };
            let fields = fields.as_array()?;
            let pairs = fields.chunks(2).map(|p| Some((p[0].as_text()?, p.get(1)?.as_bytes()?.to_vec())));
            Some((id.as_text()?, pairs.collect::<Option<_>>()?))
        };
        let entries = reply.as_array().unwrap_or_default();
        entries
            .iter()
            .map(|e| parse(e).unwrap_or_else(|| panic!("pelican-tests admin: XRANGE {key} answered {e:?}")))
            .collect()
    }

    /// How many entries of stream `key` carry each value of field `field` (entries without
    /// it are not counted): e.g. how often each input appears among a stage's outputs.
    pub fn count_by_field(&mut self, key: &str, field: &str) -> std::collections::BTreeMap<String, usize> {
        let mut counts = std::collections::BTreeMap::new();
        for (_, fields) in self.xrange(key) {
            if let Some((_, value)) = fields.iter().find(|(f, _)| f == field) {
                *counts.entry(String::from_utf8_lossy(value).into_owned()).or_insert(0) += 1;
            }
        }
        counts
    }

    /// `XLEN key`.
    pub fn xlen(&mut self, key: &str) -> i64 {
        let reply = self.call(&["XLEN", key]);
        reply.as_int().unwrap_or_else(|| panic!("pelican-tests admin: XLEN answered {reply:?}"))
    }

    /// The number of pending entries of `group` (the summary form of `XPENDING`); 0 when
    /// nothing is pending. Panics on an error reply such as `NOGROUP`.
    pub fn xpending_count(&mut self, key: &str, group: &str) -> i64 {
        let reply = self.call(&["XPENDING", key, group]);
        match reply.as_array().and_then(|items| items.first()) {
            Some(Reply::Int(n)) => *n,
            _ => panic!("pelican-tests admin: XPENDING {key} {group} answered {reply:?}"),
        }
    }

    /// The pending entries owned by `consumer`, via
    /// `XPENDING key group - + 1000000 consumer`.
    pub fn xpending_consumer(&mut self, key: &str, group: &str, consumer: &str) -> Vec<PendingEntry> {
        let reply = self.call(&["XPENDING", key, group, "-", "+", "1000000", consumer]);
        parse_pending(reply)
    }

    /// All pending entries of `group`, via `XPENDING key group - + 1000000`.
    pub fn xpending_all(&mut self, key: &str, group: &str) -> Vec<PendingEntry> {
        let reply = self.call(&["XPENDING", key, group, "-", "+", "1000000"]);
        parse_pending(reply)
    }

    /// Whether `group` exists on the stream `key` (`XINFO GROUPS`); `false` when the key is
    /// missing. Panics if `key` holds something other than a stream.
    pub fn group_exists(&mut self, key: &str, group: &str) -> bool {
        let reply = self.cmd(&["XINFO", "GROUPS", key]);
        if let Reply::Error(e) = &reply {
            if e.to_ascii_lowercase().contains("no such key") {
                return false;
            }
            panic!("pelican-tests admin: XINFO GROUPS {key} failed: {e}");
        }
        let groups = reply
            .into_array()
            .unwrap_or_else(|| panic!("pelican-tests admin: XINFO GROUPS {key}: not an array"));
        groups.iter().any(|g| {
            let fields = g.as_array().unwrap_or_default();
            fields.chunks(2).any(|kv| {
                kv.len() == 2
                    && kv[0].as_text().as_deref() == Some("name")
                    && kv[1].as_text().as_deref() == Some(group)
            })
        })
    }

    /// The names of `group`'s consumers (`XINFO CONSUMERS key group`); none when the key or
    /// the group is missing.
    pub fn consumer_names(&mut self, key: &str, group: &str) -> Vec<String> {
        let reply = self.cmd(&["XINFO", "CONSUMERS", key, group]);
        let rows = reply.as_array().map(<[_]>::to_vec).unwrap_or_default();
        rows.iter()
            .filter_map(|c| {
                let fields = c.as_array()?;
                let name = fields.chunks(2).find(|kv| kv[0].as_text().as_deref() == Some("name"))?;
                name[1].as_text()
            })
            .collect()
    }

    /// `CLIENT SETNAME name` for this connection.
    pub fn client_setname(&mut self, name: &str) {
        self.call(&["CLIENT", "SETNAME", name]);
    }

    /// The ids of all connections named `name` (parsed from `CLIENT LIST`).
    pub fn client_ids_by_name(&mut self, name: &str) -> Vec<i64> {
        let reply = self.call(&["CLIENT", "LIST"]);
        let text =
            reply.as_text().unwrap_or_else(|| panic!("pelican-tests admin: CLIENT LIST answered {reply:?}"));
        text.lines()
            .filter_map(|line| {
                let mut id = None;
                let mut named = false;
                for field in line.split(' ') {
                    if let Some(v) = field.strip_prefix("id=") {
                        id = v.parse::<i64>().ok();
                    } else if let Some(v) = field.strip_prefix("name=") {
                        named = v == name;
                    }
                }
                id.filter(|_| named)
            })
            .collect()
    }

    /// The id of a connection named `name`, if there is one.
    pub fn client_id_by_name(&mut self, name: &str) -> Option<i64> {
        self.client_ids_by_name(name).first().copied()
    }

    /// Kills every connection named `name` (`CLIENT KILL ID …`); returns how many were killed.
    pub fn client_kill_by_name(&mut self, name: &str) -> i64 {
        let mut killed = 0;
        for id in self.client_ids_by_name(name) {
            let reply = self.call(&["CLIENT", "KILL", "ID", &id.to_string()]);
            killed += reply
                .as_int()
                .unwrap_or_else(|| panic!("pelican-tests admin: CLIENT KILL ID {id} answered {reply:?}"));
        }
        killed
    }

    /// The text of `INFO section`.
    pub fn info(&mut self, section: &str) -> String {
        let reply = self.call(&["INFO", section]);
        reply.as_text().unwrap_or_else(|| panic!("pelican-tests admin: INFO answered {reply:?}"))
    }

    /// One `field:value` line of `INFO section`, e.g. `info_field("server", "process_id")`.
    pub fn info_field(&mut self, section: &str, field: &str) -> Option<String> {
        info_value(&self.info(section), field)
    }

    fn flush_out(&mut self, what: &str) {
        if let Err(e) = self.stream.write_all(&self.out) {
            panic!("{}", self.io_panic(what, &e));
        }
    }

    fn read_or_panic(&mut self, what: &str) -> Reply {
        self.read_reply().unwrap_or_else(|e| panic!("{}", self.io_panic(what, &e)))
    }

    fn io_panic(&self, what: &str, e: &io::Error) -> String {
        let hint = match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => " (no reply within timeout)",
            _ => "",
        };
        format!("pelican-tests admin {}: `{what}`: {e}{hint}", self.addr)
    }

    /// Reads until one whole reply is buffered and returns it.
    fn read_reply(&mut self) -> io::Result<Reply> {
        loop {
            if self.pos < self.buf.len() {
                match decode(&self.buf[self.pos..]) {
                    Ok(Some((frame, used))) => {
                        self.pos += used;
                        if self.pos == self.buf.len() {
                            self.buf.clear();
                            self.pos = 0;
                        }
                        return Ok(Reply::from_frame(frame));
                    }
                    Ok(None) => {}
                    Err(e) => {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("undecodable reply: {e:?}"),
                        ))
                    }
                }
            }
            if self.pos > 0 {
                self.buf.drain(..self.pos);
                self.pos = 0;
            }
            // The decoder re-parses a partial frame from its start on every attempt, so read
            // in chunks that grow with the partial frame: a large reply takes few attempts.
            let want = READ_CHUNK.max(self.buf.len());
            let len = self.buf.len();
            self.buf.resize(len + want, 0);
            let n = match self.stream.read(&mut self.buf[len..]) {
                Ok(n) => n,
                Err(e) => {
                    self.buf.truncate(len);
                    return Err(e);
                }
            };
            self.buf.truncate(len + n);
            if n == 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed by the server"));
            }
        }
    }
}

/// Appends `args` as a RESP array of bulk strings.
fn encode<A: AsRef<[u8]>>(out: &mut Vec<u8>, args: &[A]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        let arg = arg.as_ref();
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

/// A command for messages: its arguments, lossy UTF-8, space-separated, truncated.
fn describe<A: AsRef<[u8]>>(args: &[A]) -> String {
    let mut s =
        args.iter().map(|a| String::from_utf8_lossy(a.as_ref()).into_owned()).collect::<Vec<_>>().join(" ");
    if s.len() > 200 {
        let mut cut = 200;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
}

/// The value of `field:value` in an `INFO` text.
pub(crate) fn info_value(info: &str, field: &str) -> Option<String> {
    info.lines().find_map(|line| {
        line.strip_prefix(field).and_then(|rest| rest.strip_prefix(':')).map(|v| v.trim().to_string())
    })
}

fn parse_pending(reply: Reply) -> Vec<PendingEntry> {
    let bad = |r: &Reply| -> ! { panic!("pelican-tests admin: unexpected XPENDING row {r:?}") };
    let rows = match reply {
        Reply::Array(rows) => rows,
        other => bad(&other),
    };
    rows.into_iter()
        .map(|row| match row.as_array() {
            Some([id, owner, Reply::Int(idle), Reply::Int(count)]) => match (id.as_text(), owner.as_text()) {
                (Some(id), Some(owner)) => (id, owner, *idle, *count),
                _ => bad(&row),
            },
            _ => bad(&row),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_arrays_of_bulk_strings() {
        let mut out = Vec::new();
        encode(&mut out, &["AUTH", "a b", ""]);
        assert_eq!(out, b"*3\r\n$4\r\nAUTH\r\n$3\r\na b\r\n$0\r\n\r\n");
    }

    #[test]
    fn info_value_finds_exact_fields() {
        let info = "# Server\r\nprocess_id_x:1\r\nprocess_id:42\r\n";
        assert_eq!(info_value(info, "process_id").as_deref(), Some("42"));
        assert_eq!(info_value(info, "missing"), None);
    }

    #[test]
    fn parses_pending_rows() {
        let reply = Reply::Array(vec![Reply::Array(vec![
            Reply::Bulk(b"1-0".to_vec()),
            Reply::Bulk(b"c".to_vec()),
            Reply::Int(5),
            Reply::Int(2),
        ])]);
        assert_eq!(parse_pending(reply), vec![("1-0".into(), "c".into(), 5, 2)]);
        assert_eq!(parse_pending(Reply::Array(vec![])), vec![]);
    }
}
