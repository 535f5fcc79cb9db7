//! The baseline: a minimal hand-pipelined client. Each write carries the previous batch's
//! `XACK` and the next `XREADGROUP … COUNT B STREAMS key >`, so one round trip per batch; the
//! reply is walked once for its ids. No reconnects, no recovery: the floor to beat.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::ops::Range;

/// Consumes `total` new entries of `stream` as `consumer` of `group`, `batch` per read, acking
/// each batch with the next read. Returns how many entries it read.
pub fn consume(
    addr: SocketAddr,
    stream: &str,
    group: &str,
    consumer: &str,
    batch: usize,
    total: usize,
) -> io::Result<usize> {
    let sock = TcpStream::connect(addr)?;
    sock.set_nodelay(true)?;
    let count = batch.to_string();
    let read = command(&["XREADGROUP", "GROUP", group, consumer, "COUNT", &count, "STREAMS", stream, ">"]);
    let mut conn = Conn { sock, buf: Vec::with_capacity(1 << 20), start: 0 };
    let (mut out, mut ids, mut consumed) = (Vec::new(), Vec::<u8>::new(), 0usize);
    let mut acking = 0usize;
    loop {
        out.clear();
        if acking > 0 {
            out.extend_from_slice(format!("*{}\r\n$4\r\nXACK\r\n", acking + 3).as_bytes());
            for part in [stream, group] {
                bulk(&mut out, part.as_bytes());
            }
            out.extend_from_slice(&ids);
        }
        if consumed < total {
            out.extend_from_slice(&read);
        }
        conn.sock.write_all(&out)?;
        if acking > 0 {
            let reply = conn.frame()?;
            if conn.buf[reply.start] != b':' {
                return Err(io::Error::other("XACK did not answer an integer"));
            }
        }
        if consumed >= total {
            return Ok(consumed);
        }
        let reply = conn.frame()?;
        ids.clear();
        acking = entry_ids(&conn.buf[reply], &mut ids)?;
        consumed += acking;
        if acking == 0 {
            return Err(io::Error::other("the stream ran out before the total"));
        }
    }
}

/// Follows `stream` as `consumer` of `group` until `total` entries: parked on `XREADGROUP …
/// COUNT 100 BLOCK 1000 … >`, each batch acked with the next read (as [`consume`] does),
/// `stamp` called with each entry's `t` field as soon as its reply is read.
pub fn follow(
    addr: SocketAddr,
    stream: &str,
    group: &str,
    consumer: &str,
    total: usize,
    mut stamp: impl FnMut(&[u8]),
) -> io::Result<()> {
    let sock = TcpStream::connect(addr)?;
    sock.set_nodelay(true)?;
    let read = command(&[
        "XREADGROUP",
        "GROUP",
        group,
        consumer,
        "COUNT",
        "100",
        "BLOCK",
        "1000",
        "STREAMS",
        stream,
        ">",
    ]);
    let mut conn = Conn { sock, buf: Vec::with_capacity(1 << 20), start: 0 };
    let (mut out, mut ids, mut seen, mut acking) = (Vec::new(), Vec::<u8>::new(), 0usize, 0usize);
    loop {
        out.clear();
        if acking > 0 {
            out.extend_from_slice(format!("*{}\r\n$4\r\nXACK\r\n", acking + 3).as_bytes());
            for part in [stream, group] {
                bulk(&mut out, part.as_bytes());
            }
            out.extend_from_slice(&ids);
        }
        if seen < total {
            out.extend_from_slice(&read);
        }
        conn.sock.write_all(&out)?;
        if acking > 0 {
            conn.frame()?;
        }
        if seen >= total {
            return Ok(());
        }
        let reply = conn.frame()?;
        ids.clear();
        acking = entries(&conn.buf[reply], &mut ids, &mut stamp)?;
        seen += acking;
    }
}

/// [`entry_ids`], also passing each entry's `t` field to `stamp`.
fn entries(reply: &[u8], ids: &mut Vec<u8>, stamp: &mut impl FnMut(&[u8])) -> io::Result<usize> {
    let bad = || io::Error::other("unexpected reply shape");
    let (kind, n, mut at) = header(reply, 0).ok_or_else(bad)?;
    if kind != b'*' || n < 1 {
        return Ok(0);
    }
    let (_, _, next) = header(reply, at).ok_or_else(bad)?;
    at = frame_end(reply, next).ok_or_else(bad)?;
    let (_, count, mut at) = header(reply, at).ok_or_else(bad)?;
    for _ in 0..count.max(0) {
        let (_, _, id_at) = header(reply, at).ok_or_else(bad)?;
        let (_, len, id_start) = header(reply, id_at).ok_or_else(bad)?;
        bulk(ids, &reply[id_start..id_start + len as usize]);
        let (_, pairs, mut field) = header(reply, id_start + len as usize + 2).ok_or_else(bad)?;
        for _ in 0..pairs.max(0) / 2 {
            let (_, name_len, name_at) = header(reply, field).ok_or_else(bad)?;
            let (_, value_len, value_at) = header(reply, name_at + name_len as usize + 2).ok_or_else(bad)?;
            if &reply[name_at..name_at + name_len as usize] == b"t" {
                stamp(&reply[value_at..value_at + value_len as usize]);
            }
            field = value_at + value_len as usize + 2;
        }
        at = field;
    }
    Ok(count.max(0) as usize)
}

struct Conn {
    sock: TcpStream,
    buf: Vec<u8>,
    /// Where the next frame starts in `buf`.
    start: usize,
}

impl Conn {
    /// The next complete frame (its range in `buf`), reading as needed.
    fn frame(&mut self) -> io::Result<Range<usize>> {
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        loop {
            if let Some(end) = frame_end(&self.buf, self.start) {
                let range = self.start..end;
                self.start = end;
                return Ok(range);
            }
            let len = self.buf.len();
            self.buf.resize(len + (64 << 10), 0);
            let n = self.sock.read(&mut self.buf[len..])?;
            self.buf.truncate(len + n);
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
    }
}

/// The end of the RESP2 value starting at `at`, if it is complete.
pub fn frame_end(buf: &[u8], mut at: usize) -> Option<usize> {
    let mut owed = 1u64;
    while owed > 0 {
        let (kind, n, next) = header(buf, at)?;
        owed -= 1;
        at = next;
        match kind {
            b'$' if n >= 0 => {
                at += n as usize + 2;
                if at > buf.len() {
                    return None;
                }
            }
            b'*' if n > 0 => owed += n as u64,
            _ => {}
        }
    }
    Some(at)
}

/// The type byte, the number after it and the offset after its line.
fn header(buf: &[u8], at: usize) -> Option<(u8, i64, usize)> {
    let kind = *buf.get(at)?;
    let end = at + buf.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
    let line = std::str::from_utf8(&buf[at + 1..end]).ok()?;
    let n = if matches!(kind, b'$' | b'*' | b':') { line.parse().ok()? } else { 0 };
    Some((kind, n, end + 2))
}

/// Appends each entry id of a read reply (`[[key, [[id, fields]…]]]`) as a bulk string to
/// `ids`; returns how many.
fn entry_ids(reply: &[u8], ids: &mut Vec<u8>) -> io::Result<usize> {
    let bad = || io::Error::other("unexpected reply shape");
    let (kind, n, mut at) = header(reply, 0).ok_or_else(bad)?;
    if kind != b'*' || n < 1 {
        return Ok(0); // nil: nothing new
    }
    let (_, _, next) = header(reply, at).ok_or_else(bad)?; // [key, entries]
    at = frame_end(reply, next).ok_or_else(bad)?; // past the key
    let (_, entries, mut at) = header(reply, at).ok_or_else(bad)?;
    for _ in 0..entries.max(0) {
        let (_, _, id_at) = header(reply, at).ok_or_else(bad)?; // [id, fields]
        let (_, len, id_start) = header(reply, id_at).ok_or_else(bad)?;
        let id = &reply[id_start..id_start + len as usize];
        bulk(ids, id);
        at = frame_end(reply, id_start + len as usize + 2).ok_or_else(bad)?; // past the fields
    }
    Ok(entries.max(0) as usize)
}

fn bulk(out: &mut Vec<u8>, part: &[u8]) {
    out.extend_from_slice(format!("${}\r\n", part.len()).as_bytes());
    out.extend_from_slice(part);
    out.extend_from_slice(b"\r\n");
}

fn command(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        bulk(&mut out, a.as_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_of_a_captured_reply() {
        let reply = b"*1\r\n*2\r\n$1\r\ns\r\n*2\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nf\r\n$2\r\nv1\r\n*2\r\n$3\r\n2-0\r\n*2\r\n$1\r\nf\r\n$2\r\nv2\r\n";
        assert_eq!(frame_end(reply, 0), Some(reply.len()));
        assert_eq!(frame_end(&reply[..reply.len() - 1], 0), None);
        let mut ids = Vec::new();
        assert_eq!(entry_ids(reply, &mut ids).unwrap(), 2);
        assert_eq!(ids, b"$3\r\n1-0\r\n$3\r\n2-0\r\n");
        assert_eq!(entry_ids(b"*-1\r\n", &mut ids).unwrap(), 0);
        let (mut again, mut values) = (Vec::new(), Vec::new());
        assert_eq!(entries(reply, &mut again, &mut |v: &[u8]| values.push(v.to_vec())).unwrap(), 2);
        assert_eq!((again, values), (ids, Vec::<Vec<u8>>::new()), "no `t` field in these");
    }
}
