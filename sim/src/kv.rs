//! Strings and hashes, what pelican's commits write: `SET [PX ms|EX s]`, `GET`, `INCRBY`,
//! `HSET`, `HINCRBY`, `HGET`, `HGETALL`, and `TYPE`, `EXISTS`, with the servers' replies and
//! `WRONGTYPE`.

use crate::command::{eq, reply, CmdResult, Ctx, Signal, NOT_INT, SYNTAX};
use crate::model::Value;
use crate::reply::Reply;

/// What a command on a key of another type answers.
pub(crate) const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// A 64-bit integer as the servers read one (`string2ll`): decimal digits, an optional `-`,
/// no leading zero, no `-0`, no sign alone, within range.
pub(crate) fn strict_i64(text: &[u8]) -> Option<i64> {
    if text == b"0" {
        return Some(0);
    }
    let digits = text.strip_prefix(b"-").unwrap_or(text);
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) || digits[0] == b'0' {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// `SET key value [PX ms | EX s]`: replaces whatever the key held (a stream too).
pub(crate) fn set(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> CmdResult {
    let mut expires_at = None;
    match &args[3..] {
        [] => {}
        [word, n] if eq(word, "PX") || eq(word, "EX") => {
            let n = strict_i64(n).ok_or(NOT_INT)?;
            let ms = if eq(word, "EX") { n.checked_mul(1000) } else { Some(n) };
            match ms {
                Some(ms) if ms > 0 => expires_at = Some(ctx.now.saturating_add(ms as u64)),
                _ => return Err("ERR invalid expire time in 'set' command".into()),
            }
        }
        _ => return Err(SYNTAX.into()),
    }
    let key = &args[1];
    if ctx.db.streams.remove(key).is_some() {
        ctx.signals.push(Signal::Deleted(key.clone()));
    }
    ctx.db.values.insert(key.clone(), Value::Str { data: args[2].clone(), expires_at });
    reply(Reply::ok())
}

/// `GET key`.
pub(crate) fn get(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> CmdResult {
    let key = &args[1];
    match ctx.db.value(key, ctx.now) {
        _ if ctx.db.streams.contains_key(key) => Err(WRONGTYPE.into()),
        Some(Value::Hash(_)) => Err(WRONGTYPE.into()),
        Some(Value::Str { data, .. }) => reply(Reply::Bulk(data.clone())),
        None => reply(Reply::NilBulk),
    }
}

/// `INCRBY key by`: the key holds an integer (or nothing: 0), its expiry kept.
pub(crate) fn incrby(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> CmdResult {
    let by = strict_i64(&args[2]).ok_or(NOT_INT)?;
    let key = &args[1];
    ctx.db.expire(key, ctx.now);
    if ctx.db.streams.contains_key(key) {
        return Err(WRONGTYPE.into());
    }
    let (now, expires_at) = match ctx.db.values.get(key) {
        None => (0, None),
        Some(Value::Hash(_)) => return Err(WRONGTYPE.into()),
        Some(Value::Str { data, expires_at }) => (strict_i64(data).ok_or(NOT_INT)?, *expires_at),
    };
    let sum = now.checked_add(by).ok_or("ERR increment or decrement would overflow")?;
    ctx.db.values.insert(key.clone(), Value::Str { data: sum.to_string().into_bytes(), expires_at });
    reply(Reply::Int(sum))
}

/// `HSET key field value [field value …]`: how many fields are new. A field set again keeps
/// its place.
pub(crate) fn hset(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> CmdResult {
    if args.len() % 2 == 1 {
        return Err("ERR wrong number of arguments for 'hset' command".into());
    }
    let key = &args[1];
    ctx.db.expire(key, ctx.now);
    if ctx.db.streams.contains_key(key) {
        return Err(WRONGTYPE.into());
    }
    let fields = match ctx.db.values.entry(key.clone()).or_insert_with(|| Value::Hash(Vec::new())) {
        Value::Hash(fields) => fields,
        Value::Str { .. } => return Err(WRONGTYPE.into()),
    };
    let mut added = 0;
    for pair in args[2..].chunks(2) {
        match fields.iter_mut().find(|(f, _)| *f == pair[0]) {
            Some((_, v)) => *v = pair[1].clone(),
            None => {
                fields.push((pair[0].clone(), pair[1].clone()));
                added += 1;
            }
        }
    }
    reply(Reply::Int(added))
}

/// `HINCRBY key field by`: the field holds an integer (or nothing: 0), a new field goes
/// last. The increment is read first (`NOT_INT` before `WRONGTYPE`), as the servers do.
pub(crate) fn hincrby(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> CmdResult {
    let by = strict_i64(&args[3]).ok_or(NOT_INT)?;
    let key = &args[1];
    ctx.db.expire(key, ctx.now);
    if ctx.db.streams.contains_key(key) {
        return Err(WRONGTYPE.into());
    }
    let fields = match ctx.db.values.get_mut(key) {
        None => return hincrby_new(ctx, key, &args[2], by),
        Some(Value::Str { .. }) => return Err(WRONGTYPE.into()),
        Some(Value::Hash(fields)) => fields,
    };
    let (now, at) = match fields.iter().position(|(f, _)| *f == args[2]) {
        Some(at) => (strict_i64(&fields[at].1).ok_or("ERR hash value is not an integer")?, Some(at)),
        None => (0, None),
    };
    let sum = now.checked_add(by).ok_or("ERR increment or decrement would overflow")?;
    let text = sum.to_string().into_bytes();
    match at {
        Some(at) => fields[at].1 = text,
        None => fields.push((args[2].clone(), text)),
    }
    reply(Reply::Int(sum))
}

/// `HINCRBY` of a key that holds nothing: a hash of one field.
fn hincrby_new(ctx: &mut Ctx<'_>, key: &[u8], field: &[u8], by: i64) -> CmdResult {
    let fields = vec![(field.to_vec(), by.to_string().into_bytes())];
    ctx.db.values.insert(key.to_vec(), Value::Hash(fields));
    reply(Reply::Int(by))
}

/// `HGET key field`: the field's value, or nil.
pub(crate) fn hget(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> CmdResult {
    let key = &args[1];
    match ctx.db.value(key, ctx.now) {
        _ if ctx.db.streams.contains_key(key) => Err(WRONGTYPE.into()),
        Some(Value::Str { .. }) => Err(WRONGTYPE.into()),
        Some(Value::Hash(fields)) => match fields.iter().find(|(f, _)| *f == args[2]) {
            Some((_, v)) => reply(Reply::Bulk(v.clone())),
            None => reply(Reply::NilBulk),
        },
        None => reply(Reply::NilBulk),
    }
}

/// `HGETALL key`: a map (RESP3) or a flat array of fields and values, in the order set.
pub(crate) fn hgetall(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> CmdResult {
    let key = &args[1];
    match ctx.db.value(key, ctx.now) {
        _ if ctx.db.streams.contains_key(key) => Err(WRONGTYPE.into()),
        Some(Value::Str { .. }) => Err(WRONGTYPE.into()),
        Some(Value::Hash(fields)) => reply(Reply::Map(
            fields.iter().map(|(f, v)| (Reply::Bulk(f.clone()), Reply::Bulk(v.clone()))).collect(),
        )),
        None => reply(Reply::Map(Vec::new())),
    }
}

/// `TYPE key`.
pub(crate) fn kind(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> CmdResult {
    reply(Reply::Simple(ctx.db.kind(&args[1], ctx.now)))
}

/// `EXISTS key …`: how many of the keys exist (a key named twice counts twice).
pub(crate) fn exists(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> CmdResult {
    let n = args[1..].iter().filter(|k| ctx.db.kind(k, ctx.now) != "none").count();
    reply(Reply::Int(n as i64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_read_as_the_servers_read_them() {
        assert_eq!(strict_i64(b"0"), Some(0));
        assert_eq!(strict_i64(b"-12"), Some(-12));
        assert_eq!(strict_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(strict_i64(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [&b"-0"[..], b"007", b"", b"-", b"1.0", b" 1", b"9223372036854775808"] {
            assert_eq!(strict_i64(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
