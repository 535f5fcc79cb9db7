//! What `produce` sends for each entry: `XADD stream [IDMP producer n] * fields…`, the
//! fields made from the flags (`--field` pairs, a `key` spread over `--keys N` values, then
//! `p` of `--size` bytes) or read from `--from` (a JSON object per line).

use std::io::BufRead;

use pelican::oneshot::{self, Request};
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};

/// An entry's field/value pairs.
pub type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// Where the entries' fields come from.
pub enum Shape {
    /// From the flags: `fields` (each value's `{n}` replaced by the entry's number), then
    /// `key` = `k<i>` round-robin over `keys` values, then `p` of `size` bytes of `x`.
    Made { fields: Pairs, keys: Option<u64>, size: usize },
    /// `--from`: one entry per JSON line, its fields in the line's order.
    Lines(Vec<Pairs>),
}

/// One XADD per entry, numbered from 1 in the run, encoded by the core.
pub struct Xadd {
    add: oneshot::Xadd,
    shape: Shape,
    /// `p`'s value (`Made`): written after each entry's start without a copy.
    value: Vec<u8>,
}

impl Xadd {
    pub fn new(stream: &[u8], producer: Option<&[u8]>, shape: Shape) -> Xadd {
        let value = match &shape {
            Shape::Made { size, .. } => vec![b'x'; *size],
            Shape::Lines(_) => Vec::new(),
        };
        let mut add = oneshot::Xadd::new(stream);
        if let Some(producer) = producer {
            add = add.idempotent(producer);
        }
        Xadd { add, shape, value }
    }

    pub fn stream(&self) -> &[u8] {
        self.add.stream()
    }

    pub fn idempotent(&self) -> bool {
        self.add.is_idempotent()
    }

    /// How many entries `--from` holds; `None` when made from the flags.
    pub fn lines(&self) -> Option<u64> {
        match &self.shape {
            Shape::Lines(lines) => Some(lines.len() as u64),
            Shape::Made { .. } => None,
        }
    }

    /// `p`'s value, to follow each [`start`](Self::start) with a CRLF; `None` if the start
    /// is the whole command (`--from`).
    pub fn value(&self) -> Option<&[u8]> {
        matches!(self.shape, Shape::Made { .. }).then_some(&self.value[..])
    }

    /// Entry `n`'s command, `p`'s value included, for [`pelican_mio::Session::call`].
    pub fn request(&self, n: u64) -> Request {
        let mut fields = self.pairs(n);
        if let Some(value) = self.value() {
            fields.push((b"p".to_vec(), value.to_vec()));
        }
        self.add.request(n, &fields)
    }

    /// Entry `n`'s command in RESP up to `p`'s value (its length header included), or whole
    /// with `--from`.
    pub fn start(&self, n: u64) -> Vec<u8> {
        let pairs = self.pairs(n);
        let mut out = Vec::with_capacity(64);
        match self.value() {
            Some(value) => self.add.encode_until_value(&mut out, n, &pairs, b"p", value.len()),
            None => self.add.encode(&mut out, n, &pairs),
        }
        out
    }

    /// The bytes of one entry's command, about (the first one's), for sizing pipelines.
    pub fn len(&self) -> usize {
        self.start(1).len() + self.value().map_or(0, |v| v.len() + 2)
    }

    /// Entry `n`'s fields but `p`.
    fn pairs(&self, n: u64) -> Pairs {
        match &self.shape {
            Shape::Lines(lines) => lines.get((n - 1) as usize).cloned().unwrap_or_default(),
            Shape::Made { fields, keys: None, .. } if fields.is_empty() => Vec::new(),
            Shape::Made { fields, keys, .. } => {
                let number = n.to_string();
                let mut pairs: Pairs =
                    fields.iter().map(|(f, v)| (f.clone(), numbered(v, &number))).collect();
                if let Some(keys) = keys {
                    pairs.push((b"key".to_vec(), format!("k{}", (n - 1) % keys).into_bytes()));
                }
                pairs
            }
        }
    }
}

/// `value` with each `{n}` replaced by `number`.
fn numbered(value: &[u8], number: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.windows(3).position(|w| w == b"{n}") {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(number.as_bytes());
        rest = &rest[at + 3..];
    }
    out.extend_from_slice(rest);
    out
}

/// `--field NAME=VALUE`, for clap.
pub fn field(text: &str) -> Result<(Vec<u8>, Vec<u8>), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.as_bytes().to_vec(), value.as_bytes().to_vec())),
        _ => Err("give it as NAME=VALUE (a value may hold {n}, the entry's number)".into()),
    }
}

/// Reads `--from`'s JSON lines: each non-empty line one object, its values strings (as
/// they are), numbers or booleans (as written), or arrays and objects (as JSON text).
/// `what` names the input in errors.
pub fn read_lines(input: impl BufRead, what: &str) -> Result<Vec<Pairs>, String> {
    let mut entries = Vec::new();
    for (i, line) in input.lines().enumerate() {
        let line = line.map_err(|e| format!("{what}: {e}"))?;
        if line.trim().is_empty() {
            continue;
        }
        let at = format!("{what}, line {}", i + 1);
        let Ordered(fields) = serde_json::from_str(&line).map_err(|e| {
            // serde's own "at line 1 column N" would contradict the file's line.
            let text = e.to_string();
            let what = text.rsplit_once(" at line ").map_or(&text[..], |(what, _)| what);
            match e.column() {
                0 => format!("{at}: {what}"),
                column => format!("{at}, column {column}: {what}"),
            }
        })?;
        if fields.is_empty() {
            return Err(format!("{at}: an entry needs at least one field"));
        }
        let mut pairs = Vec::with_capacity(fields.len());
        for (name, value) in fields {
            let value = match value {
                serde_json::Value::String(s) => s,
                serde_json::Value::Null => return Err(format!("{at}: \"{name}\" is null: give it a value")),
                other => other.to_string(),
            };
            pairs.push((name.into_bytes(), value.into_bytes()));
        }
        entries.push(pairs);
    }
    if entries.is_empty() {
        return Err(format!("{what} holds no entry (one JSON object per line)"));
    }
    Ok(entries)
}

/// A JSON object's members in the order written (serde_json's map sorts them).
struct Ordered(Vec<(String, serde_json::Value)>);

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Ordered, D::Error> {
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = Ordered;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object: {\"field\": \"value\", …}")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Ordered, M::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry()? {
                    members.push(member);
                }
                Ok(Ordered(members))
            }
        }
        deserializer.deserialize_map(Members)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(args: &[&[u8]]) -> Vec<u8> {
        Request::new(args).as_bytes().to_vec()
    }

    /// A whole XADD as sent: its start, then `p`'s value and a CRLF.
    fn whole(xadd: &Xadd, n: u64) -> Vec<u8> {
        let mut out = xadd.start(n);
        if let Some(value) = xadd.value() {
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
        out
    }

    #[test]
    fn encodes_xadds_with_and_without_idmp() {
        let plain = Xadd::new(b"s", None, Shape::Made { fields: vec![], keys: None, size: 2 });
        assert_eq!(whole(&plain, 7), encoded(&[b"XADD", b"s", b"*", b"p", b"xx"]));
        let xadd = Xadd::new(b"s", Some(b"pid"), Shape::Made { fields: vec![], keys: None, size: 0 });
        assert_eq!(whole(&xadd, 12), encoded(&[b"XADD", b"s", b"IDMP", b"pid", b"12", b"*", b"p", b""]));
        assert_eq!(xadd.request(12).as_bytes(), whole(&xadd, 12));
    }

    #[test]
    fn fields_keys_and_numbers() {
        let fields = vec![field("type=order").unwrap(), field("id=o-{n}-{n}").unwrap()];
        let xadd = Xadd::new(b"s", None, Shape::Made { fields, keys: Some(3), size: 1 });
        let want = |n: &[u8], key: &[u8]| {
            let id = [b"o-", n, b"-", n].concat();
            encoded(&[b"XADD", b"s", b"*", b"type", b"order", b"id", &id, b"key", key, b"p", b"x"])
        };
        assert_eq!(whole(&xadd, 1), want(b"1", b"k0"));
        assert_eq!(whole(&xadd, 4), want(b"4", b"k0"));
        assert_eq!(whole(&xadd, 5), want(b"5", b"k1"));
        assert!(field("=v").is_err() && field("novalue").is_err());
        assert_eq!(field("a=b=c").unwrap(), (b"a".to_vec(), b"b=c".to_vec()));
    }

    #[test]
    fn json_lines_keep_their_order_and_types() {
        let text = "{\"z\": \"last?\", \"a\": 1.5, \"ok\": true, \"tags\": [1, \"x\"]}\n\n{\"n\": \"2\"}\n";
        let lines = read_lines(text.as_bytes(), "in").unwrap();
        let xadd = Xadd::new(b"s", None, Shape::Lines(lines));
        assert_eq!(xadd.lines(), Some(2));
        assert_eq!(
            whole(&xadd, 1),
            encoded(&[
                b"XADD",
                b"s",
                b"*",
                b"z",
                b"last?",
                b"a",
                b"1.5",
                b"ok",
                b"true",
                b"tags",
                b"[1,\"x\"]"
            ])
        );
        assert_eq!(whole(&xadd, 2), encoded(&[b"XADD", b"s", b"*", b"n", b"2"]));
        let err = |text: &str| read_lines(text.as_bytes(), "in").unwrap_err();
        assert_eq!(
            err("[1]\n"),
            "in, line 1: invalid type: sequence, expected a JSON object: {\"field\": \"value\", …}"
        );
        assert_eq!(err("{\"a\": \"b\"}\n{}\n"), "in, line 2: an entry needs at least one field");
        assert_eq!(err("{\"a\": null}"), "in, line 1: \"a\" is null: give it a value");
        assert_eq!(err("\n{\"a\": \n"), "in, line 2, column 6: EOF while parsing a value");
        assert_eq!(err("\n\n"), "in holds no entry (one JSON object per line)");
    }
}
