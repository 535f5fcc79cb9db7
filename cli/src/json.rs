//! JSON output, written by hand: strings, byte strings, stream entries, flat objects.
//!
//! Byte strings (field names and values, stream and group names) are written as a JSON string
//! when they are valid UTF-8, and as `{"base64":"…"}` (standard alphabet, padded) when they
//! are not, so every byte survives. Fields keep stream order and repeated names are all
//! kept, in order. A field name that is not UTF-8 cannot be an object key: such an entry's
//! fields are written as an array of `[name, value]` pairs instead.

use std::fmt::Display;

use pelican::{Entry, Fields};

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 (RFC 4648 §4) with `=` padding.
pub fn base64(input: &[u8]) -> String {
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let byte = |i: usize| u32::from(chunk.get(i).copied().unwrap_or(0));
        let n = byte(0) << 16 | byte(1) << 8 | byte(2);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Appends `s` as a JSON string.
pub fn push_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 || c == '\u{7f}' => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Appends `bytes` as a JSON string if they are UTF-8, else as `{"base64":"…"}`.
pub fn push_bytes(out: &mut String, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(s) => push_str(out, s),
        Err(_) => {
            out.push_str("{\"base64\":\"");
            out.push_str(&base64(bytes));
            out.push_str("\"}");
        }
    }
}

/// Appends an entry's fields: an object in stream order (repeated names kept), or an array
/// of `[name, value]` pairs if some name is not UTF-8.
pub fn push_fields(out: &mut String, fields: Fields<'_>) {
    let as_object = fields.clone().all(|(name, _)| std::str::from_utf8(name).is_ok());
    out.push(if as_object { '{' } else { '[' });
    for (i, (name, value)) in fields.enumerate() {
        if i > 0 {
            out.push(',');
        }
        if as_object {
            push_bytes(out, name);
            out.push(':');
            push_bytes(out, value);
        } else {
            out.push('[');
            push_bytes(out, name);
            out.push(',');
            push_bytes(out, value);
            out.push(']');
        }
    }
    out.push(if as_object { '}' } else { ']' });
}

/// `{"stream":"…","id":"…","fields":{…}}` followed by a newline: the stream says which
/// lane of a several-stream `consume` the entry came from.
pub fn entry_line(stream: &str, entry: &Entry) -> String {
    let fields = entry.fields().map(|(f, v)| f.len() + v.len() + 6).sum::<usize>();
    let mut out = String::with_capacity(48 + stream.len() + fields);
    out.push_str("{\"stream\":");
    push_str(&mut out, stream);
    out.push_str(",\"id\":");
    push_bytes(&mut out, entry.id());
    out.push_str(",\"fields\":");
    push_fields(&mut out, entry.fields());
    out.push_str("}\n");
    out
}

/// A JSON object written field by field.
pub struct Object {
    out: String,
    empty: bool,
}

impl Object {
    /// An empty object, `{`.
    pub fn new() -> Object {
        Object { out: String::from("{"), empty: true }
    }

    fn key(&mut self, key: &str) -> &mut String {
        if !self.empty {
            self.out.push(',');
        }
        self.empty = false;
        push_str(&mut self.out, key);
        self.out.push(':');
        &mut self.out
    }

    /// A number (or anything whose `Display` is valid JSON, like `true`).
    pub fn num(mut self, key: &str, value: impl Display) -> Object {
        let out = self.key(key);
        out.push_str(&value.to_string());
        self
    }

    /// A number, or `null`.
    pub fn opt_num(self, key: &str, value: Option<impl Display>) -> Object {
        match value {
            Some(v) => self.num(key, v),
            None => self.raw(key, "null"),
        }
    }

    /// A byte string (see [`push_bytes`]), or `null`.
    pub fn bytes(mut self, key: &str, value: Option<&[u8]>) -> Object {
        match value {
            Some(v) => push_bytes(self.key(key), v),
            None => self.key(key).push_str("null"),
        }
        self
    }

    /// Already-encoded JSON.
    pub fn raw(mut self, key: &str, json: &str) -> Object {
        self.key(key).push_str(json);
        self
    }

    /// The object, closed.
    pub fn finish(mut self) -> String {
        self.out.push('}');
        self.out
    }
}

/// `[a,b,…]` from already-encoded JSON values.
pub fn array(items: impl IntoIterator<Item = String>) -> String {
    let items: Vec<String> = items.into_iter().collect();
    format!("[{}]", items.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pelican::Source;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (input, want) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), want);
        }
        assert_eq!(base64(&[0xff, 0xfe, 0xfd]), "//79");
        assert_eq!(base64(&[0xfb, 0xff]), "+/8=");
    }

    #[test]
    fn strings_are_escaped() {
        let mut out = String::new();
        push_str(&mut out, "a\"b\\c\nd\u{1}é");
        assert_eq!(out, r#""a\"b\\c\nd\u0001é""#);
    }

    #[test]
    fn bytes_are_text_or_base64() {
        let mut out = String::new();
        push_bytes(&mut out, b"ok");
        out.push(' ');
        push_bytes(&mut out, b"\xff\x00");
        assert_eq!(out, r#""ok" {"base64":"/wA="}"#);
    }

    fn entry(fields: &[(&[u8], &[u8])]) -> Entry {
        Entry::new("1-0", fields.iter().copied(), Source::New)
    }

    #[test]
    fn entries_keep_order_and_repeats() {
        let line = entry_line("s", &entry(&[(b"b", b"1"), (b"a", b"\xc3"), (b"b", b"2")]));
        assert_eq!(
            line,
            "{\"stream\":\"s\",\"id\":\"1-0\",\"fields\":{\"b\":\"1\",\"a\":{\"base64\":\"ww==\"},\"b\":\"2\"}}\n"
        );
    }

    #[test]
    fn non_utf8_names_make_pairs() {
        let line = entry_line("{o}", &entry(&[(b"a", b"1"), (b"\xff", b"2")]));
        assert_eq!(
            line,
            "{\"stream\":\"{o}\",\"id\":\"1-0\",\"fields\":[[\"a\",\"1\"],[{\"base64\":\"/w==\"},\"2\"]]}\n"
        );
    }

    #[test]
    fn objects() {
        let json = Object::new().num("n", 3).opt_num("lag", None::<u64>).bytes("s", Some(b"x")).finish();
        assert_eq!(json, r#"{"n":3,"lag":null,"s":"x"}"#);
        assert_eq!(array(vec!["1".to_string(), "{}".to_string()]), "[1,{}]");
    }
}
