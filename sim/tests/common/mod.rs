//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use pelican_sim::{ConnId, Sim, SimOptions};
use pelican_tests::server::{Flavor, Server};

/// Encodes a command as a RESP array of bulk strings.
pub fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Splits a space-separated command line into arguments.
pub fn words(line: &str) -> Vec<&[u8]> {
    line.split_whitespace().map(str::as_bytes).collect()
}

/// Sends one command (space-separated words) and returns everything it produced.
pub fn cmd(sim: &mut Sim, c: ConnId, line: &str) -> Vec<u8> {
    sim.input(c, &encode(&words(line)));
    sim.output(c)
}

/// `cmd`, as text (lossy), for readable assertions.
pub fn cmd_s(sim: &mut Sim, c: ConnId, line: &str) -> String {
    String::from_utf8_lossy(&cmd(sim, c, line)).into_owned()
}

/// The byte length of the first complete RESP2/RESP3 frame in `buf`, or `None` if it is
/// incomplete. Panics on a type byte it does not know.
pub fn frame_len(buf: &[u8]) -> Option<usize> {
    fn line_end(buf: &[u8], from: usize) -> Option<usize> {
        buf.get(from..)?.windows(2).position(|w| w == b"\r\n").map(|p| p + from)
    }
    fn go(buf: &[u8], pos: usize, depth: usize) -> Option<usize> {
        assert!(depth < 64, "frame nested too deep");
        let kind = *buf.get(pos)?;
        let end = line_end(buf, pos)?;
        let head = std::str::from_utf8(&buf[pos + 1..end]).expect("ascii header");
        let mut next = end + 2;
        match kind {
            b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => Some(next),
            b'$' | b'=' | b'!' => {
                let n: i64 = head.parse().expect("bulk length");
                if n < 0 {
                    return Some(next);
                }
                let total = next + n as usize + 2;
                (buf.len() >= total).then_some(total)
            }
            b'*' | b'~' | b'>' | b'%' | b'|' => {
                let n: i64 = head.parse().expect("aggregate length");
                let items = if kind == b'%' || kind == b'|' { n * 2 } else { n };
                for _ in 0..items.max(0) {
                    next = go(buf, next, depth + 1)?;
                }
                Some(next)
            }
            other => {
                panic!("unknown RESP type byte {:?} in {:?}", other as char, String::from_utf8_lossy(buf))
            }
        }
    }
    go(buf, 0, 0)
}

/// Splits a buffer of complete frames into frames.
pub fn frames(mut buf: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        let n = frame_len(buf).expect("complete frame");
        out.push(buf[..n].to_vec());
        buf = &buf[n..];
    }
    out
}

/// Replaces the idle field of extended `XPENDING` rows (`*4 $id $owner :idle :count`) by
/// `:0`. `reply` must be one complete extended-XPENDING reply.
pub fn zero_pending_idle(reply: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(reply).into_owned();
    let mut parts: Vec<String> = text.split("\r\n").map(str::to_string).collect();
    // Rows are: *4, $len, id, $len, owner, :idle, :count.
    let mut i = 0;
    while i + 6 < parts.len() {
        if parts[i] == "*4" && parts[i + 1].starts_with('$') && parts[i + 5].starts_with(':') {
            // -1 (an entry released by XNACK, Redis 8) is no time: kept.
            if parts[i + 5] != ":-1" {
                parts[i + 5] = ":0".into();
            }
            i += 7;
        } else {
            i += 1;
        }
    }
    parts.join("\r\n").into_bytes()
}

/// One write of a commit, as the commit script takes it: op (`a` XADD, `h` HSET, `i`
/// INCRBY, `k` HINCRBY, `s` SET, `d` DEL), key, arguments (`a`: trim kind or "", trim value
/// or "", field/value pairs; `h`: pairs; `i`: by; `k`: field, by; `s`: value, PX ms or "";
/// `d`: none).
pub struct W<'a>(pub &'a str, pub &'a str, pub Vec<&'a str>);

/// The arguments of pelican's commit (`EVALSHA sha` or `EVAL script`, `how`) of `entries`
/// (id, delivery count, writes) taken from `stream` in `group` by `consumer`, as the core
/// encodes them: `KEYS` the stream then each key written once, `ARGV` group, consumer, the
/// lowest and highest id, how many entries, then each entry.
pub fn commit_args(
    how: [&str; 2],
    stream: &str,
    group: &str,
    consumer: &str,
    entries: &[(&str, u64, Vec<W<'_>>)],
) -> Vec<String> {
    let mut keys = vec![stream.to_string()];
    let mut argv = Vec::new();
    for (id, deliveries, writes) in entries {
        argv.extend([id.to_string(), deliveries.to_string(), writes.len().to_string()]);
        for W(op, key, args) in writes {
            let index = match keys.iter().position(|k| k == key) {
                Some(i) => i + 1,
                None => {
                    keys.push(key.to_string());
                    keys.len()
                }
            };
            argv.extend([op.to_string(), index.to_string(), args.len().to_string()]);
            argv.extend(args.iter().map(|a| a.to_string()));
        }
    }
    let order = |id: &str| {
        let (ms, seq) = id.split_once('-').unwrap_or((id, "0"));
        (ms.parse::<u64>().unwrap_or(0), seq.parse::<u64>().unwrap_or(0))
    };
    let low = entries.iter().map(|e| e.0).min_by_key(|id| order(id)).unwrap_or("0");
    let high = entries.iter().map(|e| e.0).max_by_key(|id| order(id)).unwrap_or("0");
    let mut out = vec![how[0].to_string(), how[1].to_string(), keys.len().to_string()];
    out.extend(keys);
    out.extend([group, consumer, low, high].map(str::to_string));
    out.push(entries.len().to_string());
    out.extend(argv);
    out
}

/// Sends one command given as arguments and returns what it produced, as text.
pub fn call_s(sim: &mut Sim, c: ConnId, args: &[String]) -> String {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    sim.input(c, &encode(&args));
    String::from_utf8_lossy(&sim.output(c)).into_owned()
}

/// A plain connection to a real server, one command and its whole reply at a time.
pub struct Remote {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Remote {
    pub fn connect(server: &Server) -> Remote {
        let stream = TcpStream::connect(server.addr()).expect("connect to the server");
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        stream.set_nodelay(true).unwrap();
        Remote { stream, buf: Vec::new() }
    }

    /// Writes `bytes` (one command) and returns its reply, whole.
    pub fn call(&mut self, bytes: &[u8]) -> Vec<u8> {
        self.stream.write_all(bytes).expect("write to the server");
        let mut chunk = [0u8; 16 * 1024];
        loop {
            if let Some(n) = frame_len(&self.buf) {
                return self.buf.drain(..n).collect();
            }
            let n = self.stream.read(&mut chunk).expect("read from the server");
            assert!(n > 0, "the server closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// The simulator's options for the server `flavor`.
pub fn sim_options(flavor: Flavor) -> SimOptions {
    match flavor {
        Flavor::Redis62 => SimOptions::redis62(),
        Flavor::Redis70 => SimOptions::redis70(),
        Flavor::Valkey81 => SimOptions::valkey81(),
        Flavor::Redis810 => SimOptions::redis810(),
    }
}
