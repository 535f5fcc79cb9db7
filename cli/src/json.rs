//! JSON output, through serde_json: byte strings, stream entries, ordered objects.
//!
//! Byte strings (field names and values, stream and group names) are written as a JSON string
//! when they are valid UTF-8, and as `{"base64":"…"}` (standard alphabet, padded) when they
//! are not, so every byte survives. Fields keep stream order and repeated names are all
//! kept, in order. A field name that is not UTF-8 cannot be an object key: such an entry's
//! fields are written as an array of `[name, value]` pairs instead.

use std::fmt::Display;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use pelican::{Entry, Fields};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::value::RawValue;

/// A byte string: a JSON string when it is UTF-8, else `{"base64":"…"}`.
pub struct Bytes<'a>(pub &'a [u8]);

impl Serialize for Bytes<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(self.0) {
            Ok(text) => s.serialize_str(text),
            Err(_) => {
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry("base64", &STANDARD.encode(self.0))?;
                map.end()
            }
        }
    }
}

/// [`Bytes`], for `#[serde(serialize_with)]`.
pub fn bytes<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
    Bytes(bytes).serialize(s)
}

/// [`Bytes`] or `null`, for `#[serde(serialize_with)]`.
pub fn opt_bytes<S: Serializer>(bytes: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
    bytes.as_deref().map(Bytes).serialize(s)
}

/// An entry's fields: an object in stream order with repeated names kept (serde_json's
/// `Map` would keep one), or `[name, value]` pairs if some name is not UTF-8.
struct FieldsJson<'a>(Fields<'a>);

impl Serialize for FieldsJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let pairs = self.0.clone().map(|(name, value)| (Bytes(name), Bytes(value)));
        if self.0.clone().all(|(name, _)| std::str::from_utf8(name).is_ok()) {
            s.collect_map(pairs)
        } else {
            s.collect_seq(pairs)
        }
    }
}

/// `value` as JSON text.
pub fn to_string(value: &impl Serialize) -> String {
    // Only a map key that is not a string fails, and every key here is one.
    serde_json::to_string(value).expect("JSON object keys are strings")
}

/// Appends an entry's fields: an object in stream order (repeated names kept), or an array
/// of `[name, value]` pairs if some name is not UTF-8.
pub fn push_fields(out: &mut String, fields: Fields<'_>) {
    out.push_str(&to_string(&FieldsJson(fields)));
}

/// `{"stream":…,"id":"…","fields":{…}}` followed by a newline: the stream says which
/// lane of a several-stream `consume` the entry came from.
pub fn entry_line(stream: &[u8], entry: &Entry) -> String {
    #[derive(serde::Serialize)]
    struct Line<'a> {
        stream: Bytes<'a>,
        id: Bytes<'a>,
        fields: FieldsJson<'a>,
    }
    let mut line =
        to_string(&Line { stream: Bytes(stream), id: Bytes(entry.id()), fields: FieldsJson(entry.fields()) });
    line.push('\n');
    line
}

/// Appends an entry as `--pipe` writes it to its handler (without a newline: a line of its
/// own, or one of a batch's): [`entry_line`]'s object with the delivery count and where it
/// came from (`pending`, `claimed` or `new`).
pub fn push_pipe_entry(out: &mut Vec<u8>, stream: &[u8], entry: &Entry, source: &str) {
    #[derive(serde::Serialize)]
    struct Line<'a> {
        stream: Bytes<'a>,
        id: Bytes<'a>,
        fields: FieldsJson<'a>,
        deliveries: u64,
        source: &'a str,
    }
    let line = Line {
        stream: Bytes(stream),
        id: Bytes(entry.id()),
        fields: FieldsJson(entry.fields()),
        deliveries: entry.deliveries,
        source,
    };
    // Only a map key that is not a string fails, and every key here is one; a Vec takes
    // every write.
    serde_json::to_writer(out, &line).expect("JSON object keys are strings");
}

/// A JSON object written member by member, in order.
pub struct Object(Vec<(String, Box<RawValue>)>);

impl Object {
    /// An empty object.
    pub fn new() -> Object {
        Object(Vec::new())
    }

    /// A number (or anything whose `Display` is JSON, like `true`), written as displayed:
    /// `1.500` stays `1.500`.
    pub fn num(self, key: &str, value: impl Display) -> Object {
        self.raw(key, &value.to_string())
    }

    /// Already-encoded JSON (`null` if it is not JSON).
    pub fn raw(mut self, key: &str, json: &str) -> Object {
        let value = RawValue::from_string(json.to_string()).unwrap_or_else(|_| RawValue::NULL.to_owned());
        self.0.push((key.to_string(), value));
        self
    }

    /// The object as JSON text.
    pub fn finish(self) -> String {
        to_string(&self)
    }
}

impl Serialize for Object {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(key, value)| (key, value)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pelican::Source;

    #[test]
    fn bytes_are_text_or_base64() {
        assert_eq!(to_string(&Bytes(b"ok \"q\"\n")), r#""ok \"q\"\n""#);
        assert_eq!(to_string(&Bytes(b"\xff\x00")), r#"{"base64":"/wA="}"#);
        assert_eq!(to_string(&Bytes(b"\xfb\xff")), r#"{"base64":"+/8="}"#);
    }

    fn entry(fields: &[(&[u8], &[u8])]) -> Entry {
        Entry::new("1-0", fields.iter().copied(), Source::New)
    }

    #[test]
    fn entries_keep_order_and_repeats() {
        let line = entry_line(b"s", &entry(&[(b"b", b"1"), (b"a", b"\xc3"), (b"b", b"2")]));
        assert_eq!(
            line,
            "{\"stream\":\"s\",\"id\":\"1-0\",\"fields\":{\"b\":\"1\",\"a\":{\"base64\":\"ww==\"},\"b\":\"2\"}}\n"
        );
    }

    #[test]
    fn non_utf8_names_make_pairs() {
        let line = entry_line(b"{o}", &entry(&[(b"a", b"1"), (b"\xff", b"2")]));
        assert_eq!(
            line,
            "{\"stream\":\"{o}\",\"id\":\"1-0\",\"fields\":[[\"a\",\"1\"],[{\"base64\":\"/w==\"},\"2\"]]}\n"
        );
        let mut input = String::new();
        push_fields(&mut input, entry(&[(b"k", b"v"), (b"k", b"w")]).fields());
        assert_eq!(input, r#"{"k":"v","k":"w"}"#);
    }

    #[test]
    fn objects_keep_members_as_written() {
        let json = Object::new().num("n", 3).num("s", format_args!("{:.3}", 1.5)).raw("o", "{}").finish();
        assert_eq!(json, r#"{"n":3,"s":1.500,"o":{}}"#);
        assert_eq!(Object::new().raw("bad", "{").raw("k\"", "1").finish(), r#"{"bad":null,"k\"":1}"#);
    }
}
