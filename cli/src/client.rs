//! A tiny blocking client for `pending` and `produce`: commands go out as RESP arrays of bulk
//! strings over a `std::net::TcpStream`, replies come back through `redis-protocol`'s RESP2
//! decoder. Logs in and selects the database as the URL says. Every wait is bounded.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use redis_protocol::resp2::decode::decode;
pub use redis_protocol::resp2::types::OwnedFrame as Reply;

use crate::url::Target;

/// How long a connect, a write or a reply may take.
const TIMEOUT: Duration = Duration::from_secs(10);

pub struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
    pos: usize,
}

impl Client {
    /// Connects to the first address of `target` that answers, then `AUTH` and `SELECT`.
    pub fn connect(target: &Target) -> Result<Client, String> {
        let mut last = String::new();
        for addr in target.resolve()? {
            match TcpStream::connect_timeout(&addr, TIMEOUT) {
                Ok(stream) => {
                    let _ = stream.set_nodelay(true);
                    stream.set_read_timeout(Some(TIMEOUT)).map_err(|e| e.to_string())?;
                    stream.set_write_timeout(Some(TIMEOUT)).map_err(|e| e.to_string())?;
                    let mut client = Client { stream, buf: Vec::new(), pos: 0 };
                    client.login(target)?;
                    return Ok(client);
                }
                Err(e) => last = format!("cannot connect to {addr}: {e}"),
            }
        }
        Err(last)
    }

    fn login(&mut self, target: &Target) -> Result<(), String> {
        if let Some(password) = &target.password {
            let mut auth: Vec<&[u8]> = vec![b"AUTH"];
            auth.extend(target.user.as_deref());
            auth.push(password);
            self.call(&auth).map_err(|e| format!("AUTH: {e}"))?;
        }
        if target.db != 0 {
            self.call(&[b"SELECT", target.db.to_string().as_bytes()]).map_err(|e| format!("SELECT: {e}"))?;
        }
        Ok(())
    }

    /// One command; an error reply is an `Err` with the server's text.
    pub fn call(&mut self, args: &[&[u8]]) -> Result<Reply, String> {
        let mut out = Vec::new();
        encode(&mut out, args);
        self.write(&out)?;
        match self.read()? {
            Reply::Error(e) => Err(e),
            reply => Ok(reply),
        }
    }

    /// Writes pipelined commands (already encoded).
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.stream.write_all(bytes).map_err(|e| format!("write failed: {e}"))
    }

    /// The next reply (error replies included).
    pub fn read(&mut self) -> Result<Reply, String> {
        loop {
            if self.pos < self.buf.len() {
                match decode(&self.buf[self.pos..]) {
                    Ok(Some((frame, used))) => {
                        self.pos += used;
                        return Ok(frame);
                    }
                    Ok(None) => {}
                    Err(e) => return Err(format!("undecodable reply: {e:?}")),
                }
            }
            self.buf.drain(..self.pos);
            self.pos = 0;
            let len = self.buf.len();
            self.buf.resize(len + (64 << 10).max(len), 0);
            let n = self.stream.read(&mut self.buf[len..]);
            self.buf.truncate(len + *n.as_ref().unwrap_or(&0));
            match n {
                Ok(0) => return Err("the server closed the connection".into()),
                Ok(_) => {}
                Err(e) => return Err(format!("read failed: {e}")),
            }
        }
    }
}

/// Appends `args` as a RESP array of bulk strings.
pub fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

/// A bulk or simple string's bytes.
pub fn bytes(reply: &Reply) -> Option<&[u8]> {
    match reply {
        Reply::BulkString(b) | Reply::SimpleString(b) => Some(b),
        _ => None,
    }
}

/// An integer, or a bulk string holding one (`XPENDING` counts consumers' entries that way).
pub fn int(reply: &Reply) -> Option<i64> {
    match reply {
        Reply::Integer(i) => Some(*i),
        other => std::str::from_utf8(bytes(other)?).ok()?.parse().ok(),
    }
}

/// The elements of an array.
pub fn array(reply: &Reply) -> Option<&[Reply]> {
    match reply {
        Reply::Array(items) => Some(items),
        _ => None,
    }
}

/// The value under `key` in a flat `[key, value, …]` array (`XINFO` replies).
pub fn field<'a>(items: &'a [Reply], key: &str) -> Option<&'a Reply> {
    items.chunks(2).find(|kv| kv.len() == 2 && bytes(&kv[0]) == Some(key.as_bytes())).map(|kv| &kv[1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_arrays_of_bulk_strings() {
        let mut out = Vec::new();
        encode(&mut out, &[b"AUTH", b"a b", b""]);
        assert_eq!(out, b"*3\r\n$4\r\nAUTH\r\n$3\r\na b\r\n$0\r\n\r\n");
    }

    #[test]
    fn reads_fields() {
        let items = vec![
            Reply::BulkString(b"name".to_vec()),
            Reply::BulkString(b"g".to_vec()),
            Reply::BulkString(b"lag".to_vec()),
            Reply::Integer(3),
        ];
        assert_eq!(field(&items, "lag").and_then(int), Some(3));
        assert_eq!(field(&items, "name").and_then(bytes), Some(&b"g"[..]));
        assert_eq!(field(&items, "missing"), None);
        assert_eq!(int(&Reply::BulkString(b"12".to_vec())), Some(12));
    }
}
