//! The writes a handler's answer carries — `--pipe`'s `"emit"` and `"writes"`, the lines an
//! `--exec` command prints with `--emit-to` — made into a commit (`Verdict::Commit`: the
//! writes and the ack in one fenced step). Read whole and checked before anything is sent:
//! a bad one fails its entry with nothing written, never half of it.

use pelican::{Trim, Write, Writes};
use serde_json::{Map, Value};

/// The writes of a `--pipe` answer: `emit` (entries for streams) then `writes` (other keys).
///
/// ```text
/// "emit":   [{"stream": "out", "fields": {"k": "v"}, "maxlen": 1000}]      ("minid": "…" too)
/// "writes": [{"hset": "h", "fields": {"f": "v"}}, {"incrby": "n", "by": 3},
///            {"hincrby": "h", "field": "f", "by": 1},
///            {"set": "k", "value": "v", "ttl_ms": 60000}, {"del": "k"}]
/// ```
pub fn from_answer(emit: Option<&Value>, writes: Option<&Value>) -> Result<Writes, String> {
    let mut out = Writes::new();
    for (i, item) in list(emit, "emit")?.iter().enumerate() {
        let what = format!("emit[{i}]");
        let item = object(item, &what)?;
        known(item, &["stream", "fields", "maxlen", "minid"], &what)?;
        let stream = string(item.get("stream"), &format!("{what}.stream"))?;
        let fields = fields(item.get("fields"), &what)?;
        let trim = match (item.get("maxlen"), item.get("minid")) {
            (None, None) => None,
            (Some(n), None) => {
                Some(Trim::MaxLen(n.as_u64().ok_or_else(|| format!("{what}.maxlen is not a whole number"))?))
            }
            (None, Some(id)) => Some(Trim::MinId(string(Some(id), &format!("{what}.minid"))?.into())),
            (Some(_), Some(_)) => return Err(format!("{what} has both maxlen and minid")),
        };
        out.push(Write::Add { key: stream.into(), fields, trim });
    }
    for (i, item) in list(writes, "writes")?.iter().enumerate() {
        let what = format!("writes[{i}]");
        let item = object(item, &what)?;
        let write = if let Some(key) = item.get("hset") {
            known(item, &["hset", "fields"], &what)?;
            Write::HashSet {
                key: string(Some(key), &format!("{what}.hset"))?.into(),
                fields: fields(item.get("fields"), &what)?,
            }
        } else if let Some(key) = item.get("incrby") {
            known(item, &["incrby", "by"], &what)?;
            let by = item
                .get("by")
                .and_then(Value::as_i64)
                .ok_or_else(|| format!("{what}.by is not a whole number"))?;
            Write::IncrBy { key: string(Some(key), &format!("{what}.incrby"))?.into(), by }
        } else if let Some(key) = item.get("hincrby") {
            known(item, &["hincrby", "field", "by"], &what)?;
            let by = item
                .get("by")
                .and_then(Value::as_i64)
                .ok_or_else(|| format!("{what}.by is not a whole number"))?;
            Write::HashIncrBy {
                key: string(Some(key), &format!("{what}.hincrby"))?.into(),
                field: field_name(item.get("field"), &format!("{what}.field"))?.into(),
                by,
            }
        } else if let Some(key) = item.get("set") {
            known(item, &["set", "value", "ttl_ms"], &what)?;
            let value = string(item.get("value"), &format!("{what}.value"))?;
            let ttl = match item.get("ttl_ms") {
                None => None,
                Some(ms) => Some(std::time::Duration::from_millis(
                    ms.as_u64()
                        .filter(|ms| *ms > 0)
                        .ok_or_else(|| format!("{what}.ttl_ms is not a whole number of ms"))?,
                )),
            };
            Write::Set { key: string(Some(key), &format!("{what}.set"))?.into(), value: value.into(), ttl }
        } else if let Some(key) = item.get("del") {
            known(item, &["del"], &what)?;
            Write::Delete { key: string(Some(key), &format!("{what}.del"))?.into() }
        } else {
            return Err(format!("{what} is none of hset, incrby, hincrby, set, del"));
        };
        out.push(write);
    }
    out.check(None)?;
    Ok(out)
}

/// The entries an `--exec` command printed for `--emit-to stream`: each line a JSON object
/// of string members (its fields); blank lines are skipped, anything else is an error.
pub fn from_lines(stream: &[u8], printed: &[u8]) -> Result<Writes, String> {
    let text = std::str::from_utf8(printed).map_err(|_| "its output is not UTF-8".to_string())?;
    let mut out = Writes::new();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let what = format!("line {}", n + 1);
        let value: Value = serde_json::from_str(line).map_err(|e| format!("{what} is not JSON ({e})"))?;
        let fields = fields(Some(&value), &what)?;
        out.push(Write::Add { key: bytes::Bytes::copy_from_slice(stream), fields, trim: None });
    }
    out.check(None)?;
    Ok(out)
}

fn list<'a>(value: Option<&'a Value>, what: &str) -> Result<&'a [Value], String> {
    match value {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(_) => Err(format!("\"{what}\" is not an array")),
    }
}

fn object<'a>(value: &'a Value, what: &str) -> Result<&'a Map<String, Value>, String> {
    value.as_object().ok_or_else(|| format!("{what} is not an object"))
}

fn known(item: &Map<String, Value>, names: &[&str], what: &str) -> Result<(), String> {
    match item.keys().find(|k| !names.contains(&k.as_str())) {
        Some(k) => Err(format!("{what} has an unknown member \"{k}\"")),
        None => Ok(()),
    }
}

/// A hash field's name: a string, which may be empty (as the servers allow).
fn field_name(value: Option<&Value>, what: &str) -> Result<String, String> {
    match value {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(format!("{what} is not a string")),
        None => Err(format!("{what} is missing")),
    }
}

fn string(value: Option<&Value>, what: &str) -> Result<String, String> {
    match value {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        Some(Value::String(_)) => Err(format!("{what} is empty")),
        Some(_) => Err(format!("{what} is not a string")),
        None => Err(format!("{what} is missing")),
    }
}

/// `fields`: an object whose members are all strings, at least one.
fn fields(value: Option<&Value>, what: &str) -> Result<Vec<(bytes::Bytes, bytes::Bytes)>, String> {
    let object = match value {
        Some(Value::Object(o)) => o,
        Some(_) => return Err(format!("{what}: fields is not an object")),
        None => return Err(format!("{what}: fields is missing")),
    };
    if object.is_empty() {
        return Err(format!("{what}: no fields"));
    }
    object
        .iter()
        .map(|(name, value)| match value {
            Value::String(v) => Ok((name.clone().into(), v.clone().into())),
            _ => Err(format!("{what}: field \"{name}\" is not a string")),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn answers_become_writes() {
        let emit = json!([{"stream": "out", "fields": {"k": "v"}, "maxlen": 10}]);
        let writes = json!([{"hset": "h", "fields": {"f": "v"}}, {"incrby": "n", "by": -2},
                            {"hincrby": "per", "field": "c1", "by": 3},
                            {"set": "k", "value": "v", "ttl_ms": 5}, {"del": "x"}]);
        let got = from_answer(Some(&emit), Some(&writes)).unwrap();
        let commands: Vec<&str> = got.iter().map(Write::command).collect();
        assert_eq!(commands, ["XADD", "HSET", "INCRBY", "HINCRBY", "SET", "DEL"]);
        let per = got.iter().find(|w| w.command() == "HINCRBY").unwrap();
        assert_eq!(
            per,
            &Write::HashIncrBy { key: "per".into(), field: "c1".into(), by: 3 },
            "the hash, its field, the increment"
        );
        assert_eq!(from_answer(None, None).unwrap().len(), 0);
    }

    #[test]
    fn bad_answers_are_refused_whole() {
        let bad = |emit: Value, writes: Value| from_answer(Some(&emit), Some(&writes)).unwrap_err();
        assert!(
            bad(json!([{"stream": "o", "fields": {"k": 1}}]), json!([])).contains("\"k\" is not a string")
        );
        assert!(bad(json!([{"stream": 3, "fields": {"k": "v"}}]), json!([]))
            .contains("emit[0].stream is not a string"));
        assert!(bad(json!([{"stream": "o", "fields": {}}]), json!([])).contains("no fields"));
        assert!(bad(json!([]), json!([{"lpush": "l"}])).contains("none of hset"));
        assert!(bad(json!([]), json!([{"incrby": "n", "by": "3"}])).contains("by is not a whole number"));
        assert!(bad(json!([]), json!([{"hincrby": "h", "by": 1}])).contains("writes[0].field is missing"));
        assert!(
            bad(json!([]), json!([{"hincrby": "h", "field": 7, "by": 1}])).contains("field is not a string")
        );
        assert!(bad(json!([]), json!([{"hincrby": "h", "field": "f", "by": 1.5}]))
            .contains("by is not a whole number"));
        assert!(bad(json!([]), json!([{"hincrby": "h", "field": "f"}])).contains("by is not a whole number"));
        assert!(bad(json!([]), json!([{"del": "x", "extra": 1}])).contains("unknown member \"extra\""));
        assert!(bad(json!({"stream": "o"}), json!([])).contains("\"emit\" is not an array"));
        assert!(bad(json!([{"stream": "o", "fields": {"k": "v"}, "minid": "x"}]), json!([]))
            .contains("not a stream id"));
    }

    #[test]
    fn printed_lines_become_entries() {
        let got = from_lines(b"out", b"{\"a\":\"1\"}\n\n{\"b\":\"2\",\"c\":\"3\"}\n").unwrap();
        assert_eq!(got.len(), 2);
        assert!(from_lines(b"out", b"{\"a\":1}\n")
            .unwrap_err()
            .contains("line 1: field \"a\" is not a string"));
        assert!(from_lines(b"out", b"done\n").unwrap_err().contains("line 1 is not JSON"));
        assert_eq!(from_lines(b"out", b"").unwrap().len(), 0);
    }
}
