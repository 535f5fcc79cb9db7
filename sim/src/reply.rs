//! Replies and their RESP2/RESP3 encoding.

use crate::id::EntryId;

/// The wire protocol a connection speaks (`HELLO 3` switches to RESP3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// RESP2, the default.
    Resp2,
    /// RESP3, after `HELLO 3`.
    Resp3,
}

/// One reply, before encoding. The two nil kinds matter in RESP2 (`$-1` versus `*-1`); both
/// are `_` in RESP3.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    /// `+text`.
    Simple(&'static str),
    /// `-text` (the text includes the error code, e.g. `ERR …`).
    Error(String),
    /// `:n`.
    Int(i64),
    /// `$len bytes`.
    Bulk(Vec<u8>),
    /// `$-1` (RESP3 `_`).
    NilBulk,
    /// `*-1` (RESP3 `_`).
    NilArray,
    /// `*n …`.
    Array(Vec<Reply>),
    /// `%n …` in RESP3; a flat array of keys and values in RESP2.
    Map(Vec<(Reply, Reply)>),
    /// The `XREAD`-family reply: `%n key value …` in RESP3; in RESP2 an array of
    /// two-element `[key, value]` arrays.
    Streams(Vec<(Reply, Reply)>),
}

impl Reply {
    /// `+OK`.
    pub(crate) fn ok() -> Reply {
        Reply::Simple("OK")
    }

    /// An error reply with the given full text (`"ERR …"`, `"NOGROUP …"`).
    pub(crate) fn err(text: impl Into<String>) -> Reply {
        Reply::Error(text.into())
    }

    /// A bulk string from text.
    pub(crate) fn text(text: &str) -> Reply {
        Reply::Bulk(text.as_bytes().to_vec())
    }

    /// A bulk string holding an entry id.
    pub(crate) fn id(id: EntryId) -> Reply {
        Reply::Bulk(id.to_bytes())
    }

    /// Appends the encoding of this reply in `proto` to `out`.
    pub(crate) fn encode(&self, proto: Protocol, out: &mut Vec<u8>) {
        match self {
            Reply::Simple(s) => line(out, b'+', s.as_bytes()),
            Reply::Error(e) => {
                // An error line must not contain CR or LF.
                let clean: Vec<u8> =
                    e.bytes().map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }).collect();
                line(out, b'-', &clean)
            }
            Reply::Int(n) => line(out, b':', n.to_string().as_bytes()),
            Reply::Bulk(b) => {
                line(out, b'$', b.len().to_string().as_bytes());
                out.extend_from_slice(b);
                out.extend_from_slice(b"\r\n");
            }
            Reply::NilBulk => match proto {
                Protocol::Resp2 => out.extend_from_slice(b"$-1\r\n"),
                Protocol::Resp3 => out.extend_from_slice(b"_\r\n"),
            },
            Reply::NilArray => match proto {
                Protocol::Resp2 => out.extend_from_slice(b"*-1\r\n"),
                Protocol::Resp3 => out.extend_from_slice(b"_\r\n"),
            },
            Reply::Array(items) => {
                line(out, b'*', items.len().to_string().as_bytes());
                for item in items {
                    item.encode(proto, out);
                }
            }
            Reply::Map(pairs) => {
                match proto {
                    Protocol::Resp2 => line(out, b'*', (pairs.len() * 2).to_string().as_bytes()),
                    Protocol::Resp3 => line(out, b'%', pairs.len().to_string().as_bytes()),
                }
                for (k, v) in pairs {
                    k.encode(proto, out);
                    v.encode(proto, out);
                }
            }
            Reply::Streams(pairs) => {
                match proto {
                    Protocol::Resp2 => line(out, b'*', pairs.len().to_string().as_bytes()),
                    Protocol::Resp3 => line(out, b'%', pairs.len().to_string().as_bytes()),
                }
                for (k, v) in pairs {
                    if proto == Protocol::Resp2 {
                        out.extend_from_slice(b"*2\r\n");
                    }
                    k.encode(proto, out);
                    v.encode(proto, out);
                }
            }
        }
    }
}

fn line(out: &mut Vec<u8>, kind: u8, body: &[u8]) {
    out.push(kind);
    out.extend_from_slice(body);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(r: &Reply, p: Protocol) -> Vec<u8> {
        let mut out = Vec::new();
        r.encode(p, &mut out);
        out
    }

    #[test]
    fn nils_and_maps() {
        assert_eq!(enc(&Reply::NilBulk, Protocol::Resp2), b"$-1\r\n");
        assert_eq!(enc(&Reply::NilArray, Protocol::Resp2), b"*-1\r\n");
        assert_eq!(enc(&Reply::NilArray, Protocol::Resp3), b"_\r\n");
        let map = Reply::Map(vec![(Reply::text("a"), Reply::Int(1))]);
        assert_eq!(enc(&map, Protocol::Resp2), b"*2\r\n$1\r\na\r\n:1\r\n");
        assert_eq!(enc(&map, Protocol::Resp3), b"%1\r\n$1\r\na\r\n:1\r\n");
        assert_eq!(enc(&Reply::err("ERR a\r\nb"), Protocol::Resp2), b"-ERR a  b\r\n");
    }
}
