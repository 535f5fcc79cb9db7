//! Scripts: `SCRIPT LOAD|EXISTS|FLUSH`, `EVALSHA`, and pelican's commit script
//! ([`pelican::COMMIT_SCRIPT`]) run natively, call for call as the Lua runs, with its check
//! at connect ([`pelican::COMMIT_CHECK_SCRIPT`]).
//!
//! The script cache is a node's (see [`Sim`](crate::Sim)): it survives connections, a
//! restart empties it, and a promoted replica has what was loaded on it, not what was loaded
//! on its master (Redis 7.0+ no longer propagate `SCRIPT LOAD`).

use std::collections::{BTreeMap, BTreeSet};

use crate::command::{eq, execute, lossy, reply, CmdResult, Ctx, Outcome, NOT_INT};
use crate::id::{parse_i64, EntryId};
use crate::model::Commit;
use crate::replication::READONLY;
use crate::reply::Reply;

/// A node's script cache: sha (lowercase hex) → script text.
pub(crate) type Scripts = BTreeMap<String, Vec<u8>>;

/// What `EVALSHA` of a script not in the cache answers (Valkey: without the advice).
pub(crate) const NOSCRIPT: &str = "NOSCRIPT No matching script. Please use EVAL.";
const NOSCRIPT_VALKEY: &str = "NOSCRIPT No matching script.";

/// The SHA-1 of a script's text in lowercase hex, as the servers name scripts.
pub(crate) fn sha1_hex(text: &[u8]) -> String {
    sha1_smol::Sha1::from(text).digest().to_string()
}

/// `SCRIPT LOAD script`, `SCRIPT EXISTS sha …`, `SCRIPT FLUSH [ASYNC|SYNC]`. Any text loads
/// (the servers compile it first; the simulator runs only pelican's scripts).
pub(crate) fn script(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> CmdResult {
    let sub = &args[1];
    if eq(sub, "LOAD") && args.len() == 3 {
        let sha = sha1_hex(&args[2]);
        ctx.scripts.insert(sha.clone(), args[2].clone());
        reply(Reply::Bulk(sha.into_bytes()))
    } else if eq(sub, "EXISTS") && args.len() >= 3 {
        let known = |sha: &Vec<u8>| ctx.scripts.contains_key(&lossy(sha).to_ascii_lowercase());
        reply(Reply::Array(args[2..].iter().map(|sha| Reply::Int(i64::from(known(sha)))).collect()))
    } else if eq(sub, "FLUSH")
        && (args.len() == 2 || (args.len() == 3 && (eq(&args[2], "ASYNC") || eq(&args[2], "SYNC"))))
    {
        ctx.scripts.clear();
        reply(Reply::ok())
    } else {
        Err(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try SCRIPT HELP.",
            lossy(sub)
        ))
    }
}

/// The number of keys of an `EVAL`/`EVALSHA`, checked as the servers check it.
pub(crate) fn numkeys(args: &[Vec<u8>]) -> Result<usize, String> {
    let n = parse_i64(&args[2]).ok_or(NOT_INT)?;
    if n > args.len() as i64 - 3 {
        Err("ERR Number of keys can't be greater than number of args".into())
    } else if n < 0 {
        Err("ERR Number of keys can't be negative".into())
    } else {
        Ok(n as usize)
    }
}

/// `EVALSHA sha numkeys key… arg…`: the cached script runs as its `EVAL` would; `NOSCRIPT`
/// if this node has no script of that sha. On a replica a known script is refused as a write
/// (`READONLY`), an unknown one is `NOSCRIPT` still.
pub(crate) fn evalsha(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> CmdResult {
    numkeys(args)?;
    let sha = lossy(&args[1]).to_ascii_lowercase();
    let Some(text) = ctx.scripts.get(&sha).cloned() else {
        let valkey = ctx.options.server_name == "valkey";
        return Err(if valkey { NOSCRIPT_VALKEY } else { NOSCRIPT }.into());
    };
    if ctx.node.on_replica {
        return Err(READONLY.into());
    }
    let mut args = args.to_vec();
    args[1] = text;
    crate::command::eval(ctx, &args)
}

/// `EVAL` of [`pelican::COMMIT_CHECK_SCRIPT`]: 1 (the simulator has no ACL and no slots).
pub(crate) fn commit_check(args: &[Vec<u8>]) -> CmdResult {
    match numkeys(args)? {
        n if n >= 1 && args.len() == 3 + n + 2 => reply(Reply::Int(1)),
        _ => Err("ERR wrong number of arguments for the commit check".into()),
    }
}

/// A redis.call from the script: the command runs as a client's would; its error ends the
/// script (what it wrote stays written: scripts do not roll back).
fn call(ctx: &mut Ctx<'_>, args: Vec<Vec<u8>>) -> Result<Reply, String> {
    match execute(ctx, &args) {
        Outcome::Reply(Reply::Error(e)) => Err(format!("ERR Error running script: {e}")),
        Outcome::Reply(r) => Ok(r),
        _ => Err("ERR Error running script: this command is not allowed from scripts".into()),
    }
}

/// An argument Lua's `tonumber` reads (decimal, with a fraction or an exponent, or hex).
fn lua_number(arg: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(arg).ok()?.trim();
    if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        return u64::from_str_radix(hex, 16).ok().map(|n| n as f64);
    }
    if text.is_empty() || text.bytes().any(|b| b.is_ascii_alphabetic() && b != b'e' && b != b'E') {
        return None; // not `inf` or `nan`, which Rust would read
    }
    text.parse().ok()
}

/// The script's `integer(s)`: a number for a strict integer of at most 20 characters (as
/// Lua reads it: a double), `None` (Lua's false) for anything else.
fn integer(s: &[u8]) -> Option<f64> {
    let digits = s.strip_prefix(b"-").unwrap_or(s);
    let strict = !digits.is_empty() && digits[0] != b'0' && digits.iter().all(u8::is_ascii_digit);
    (s.len() <= 20 && (s == b"0" || strict)).then(|| lua_number(s)).flatten()
}

/// What the writes so far left a key's integer (the script's `ints[key]`).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Int {
    /// `nil`: not known yet.
    Unknown,
    /// `false`: not an integer.
    Not,
    /// A number (a double, as in Lua).
    Is(f64),
}

/// What an entry's writes so far left a hash field (the script's `hv[key][field]`).
#[derive(Clone, Debug, PartialEq)]
enum Field {
    /// A string, as `HSET` set it (read with `integer` when an `HINCRBY` needs it).
    Text(Vec<u8>),
    /// A number, after an `HINCRBY`.
    Number(f64),
}

/// The script's `kinds`/`ints` tables and the undo list of the entry being checked; for an
/// entry with an `HINCRBY`, its `hv` (each hash's fields its writes set) and `fresh` (the
/// hashes they made or emptied) tables.
#[derive(Default)]
struct Tracked {
    kinds: BTreeMap<Vec<u8>, &'static str>,
    ints: BTreeMap<Vec<u8>, Int>,
    undo: Vec<(Vec<u8>, Option<&'static str>, Int)>,
    hv: BTreeMap<Vec<u8>, BTreeMap<Vec<u8>, Field>>,
    fresh: BTreeSet<Vec<u8>>,
}

impl Tracked {
    fn int(&self, key: &[u8]) -> Int {
        self.ints.get(key).copied().unwrap_or(Int::Unknown)
    }

    fn change(&mut self, key: &[u8], kind: &'static str, int: Int) {
        self.undo.push((key.to_vec(), self.kinds.get(key).copied(), self.int(key)));
        self.kinds.insert(key.to_vec(), kind);
        self.ints.insert(key.to_vec(), int);
    }

    fn refuse(&mut self, why: String) -> Option<String> {
        while let Some((key, kind, int)) = self.undo.pop() {
            match kind {
                Some(kind) => self.kinds.insert(key.clone(), kind),
                None => self.kinds.remove(&key),
            };
            self.ints.insert(key, int);
        }
        Some(why)
    }
}

/// The hash at `key` is made or emptied by the entry's writes: no field but those they set.
fn made_fresh(t: &mut Tracked, key: &[u8]) {
    t.hv.insert(key.to_vec(), BTreeMap::new());
    t.fresh.insert(key.to_vec());
}

/// One write of an entry as the check reads it: op, key, its arguments.
struct Write<'a> {
    op: &'a [u8],
    key: &'a [u8],
    args: &'a [Vec<u8>],
}

fn malformed() -> String {
    "ERR Error running script: the commit script's arguments are malformed".into()
}

/// `EVAL` of [`pelican::COMMIT_SCRIPT`] (or its `EVALSHA`), run natively, call for call as
/// the Lua runs: one `XPENDING` of the batch's range for this consumer, each entry it misses
/// asked alone; per entry 0 (not pending), `[owner, deliveries]` (another owner, or another
/// delivery count), a refusal's text (a write would fail: the entry's writes checked in
/// order against each key's type, `TYPE` asked once per key per batch and followed through
/// the writes made, an `INCRBY`'s integer as a double within ±9.2e18, an `HINCRBY`'s field
/// likewise, asked with `HGET` unless the entry's writes set it), or 1 (its writes made);
/// one `XACK` of the committed at the end. The sim has no ACL: every write is allowed.
/// Each committed entry is recorded ([`Sim::commits`](crate::Sim::commits)).
pub(crate) fn commit(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> CmdResult {
    let n = crate::script::numkeys(args)?;
    let keys = &args[3..3 + n];
    let argv = &args[3 + n..];
    let (Some(stream), [group, me, low, high, size, ..]) = (keys.first(), argv) else {
        return Err(malformed());
    };
    let arg = |i: usize| argv.get(i - 1); // ARGV[i], 1-based
    let size = lua_number(size).ok_or_else(malformed)? * 2.0 + 64.0;
    if size.fract() != 0.0 || size < 0.0 {
        return Err(malformed());
    }
    let range = call(
        ctx,
        vec![
            b"XPENDING".to_vec(),
            stream.clone(),
            group.clone(),
            low.clone(),
            high.clone(),
            (size as u64).to_string().into_bytes(),
            me.clone(),
        ],
    )?;
    // `None`: committed earlier in this batch (settled: its ack goes at the end).
    let mut mine: BTreeMap<Vec<u8>, Option<i64>> = BTreeMap::new();
    if let Reply::Array(rows) = range {
        for row in rows {
            if let Reply::Array(p) = row {
                if let [Reply::Bulk(id), _, _, Reply::Int(count)] = &p[..] {
                    mine.insert(id.clone(), Some(*count));
                }
            }
        }
    }
    let mut tracked = Tracked::default();
    let mut results = Vec::new();
    let mut acked: Vec<Vec<u8>> = Vec::new();
    let mut i = 6;
    while i <= argv.len() {
        let (Some(id), Some(deliveries), Some(writes)) = (arg(i), arg(i + 1), arg(i + 2)) else {
            return Err(malformed());
        };
        let deliveries = lua_number(deliveries);
        let writes = lua_number(writes).ok_or_else(malformed)?;
        // The entry's writes, as the script skips over them (noting an HINCRBY).
        let mut entry = Vec::new();
        let mut follow = false;
        i += 3;
        for _ in 0..writes.max(0.0) as u64 {
            let (Some(op), Some(k), Some(argc)) = (arg(i), arg(i + 1), arg(i + 2)) else {
                return Err(malformed());
            };
            let argc =
                lua_number(argc).filter(|c| c.fract() == 0.0 && *c >= 0.0).ok_or_else(malformed)? as usize;
            let key = lua_number(k)
                .filter(|k| k.fract() == 0.0 && *k >= 1.0)
                .and_then(|k| keys.get(k as usize - 1))
                .ok_or_else(malformed)?;
            let write_args = argv.get(i + 2..i + 2 + argc).ok_or_else(malformed)?;
            follow |= op == b"k";
            entry.push(Write { op, key, args: write_args });
            i += 3 + argc;
        }
        let (count, owner) = match mine.get(id) {
            Some(&count) => (count, me.clone()),
            None => {
                let held = call(
                    ctx,
                    vec![
                        b"XPENDING".to_vec(),
                        stream.clone(),
                        group.clone(),
                        id.clone(),
                        id.clone(),
                        b"1".to_vec(),
                    ],
                )?;
                match held {
                    Reply::Array(rows) => match rows.first() {
                        Some(Reply::Array(p)) => match &p[..] {
                            [_, Reply::Bulk(owner), _, Reply::Int(count)] => (Some(*count), owner.clone()),
                            _ => (None, me.clone()),
                        },
                        _ => (None, me.clone()),
                    },
                    _ => (None, me.clone()),
                }
            }
        };
        let result = match count {
            None => Reply::Int(0),
            Some(count) if owner != *me || deliveries != Some(count as f64) => {
                Reply::Array(vec![Reply::Bulk(owner), Reply::Int(count)])
            }
            Some(_) => match check(ctx, &mut tracked, &entry, follow)? {
                Some(why) => Reply::Bulk(why.into_bytes()),
                None => {
                    apply(ctx, &entry)?;
                    acked.push(id.clone());
                    mine.insert(id.clone(), None);
                    Reply::Int(1)
                }
            },
        };
        results.push(result);
    }
    if !acked.is_empty() {
        let mut xack = vec![b"XACK".to_vec(), stream.clone(), group.clone()];
        xack.extend(acked.iter().cloned());
        call(ctx, xack)?;
        for id in &acked {
            let Some(id) = EntryId::parse_strict(id, 0) else { continue };
            let (stream, group, consumer, at) = (stream.clone(), group.clone(), me.clone(), ctx.now);
            ctx.db.commits.push(Commit { stream, group, id, consumer, at });
        }
    }
    reply(Reply::Array(results))
}

/// The script's `check`: whether each write would succeed, followed through the writes
/// before it; `Some(why)` (the entry's changes to what is followed undone) if one would not.
fn check(
    ctx: &mut Ctx<'_>,
    t: &mut Tracked,
    entry: &[Write<'_>],
    follow: bool,
) -> Result<Option<String>, String> {
    t.undo.clear();
    if follow {
        t.hv.clear();
        t.fresh.clear();
    }
    for w in entry {
        let key = w.key;
        let shown = lossy(key);
        let kind = match t.kinds.get(key) {
            Some(&kind) => kind,
            None => {
                let kind = match call(ctx, vec![b"TYPE".to_vec(), key.to_vec()])? {
                    Reply::Simple(kind) => kind,
                    _ => return Err(malformed()),
                };
                t.kinds.insert(key.to_vec(), kind);
                kind
            }
        };
        match w.op {
            b"a" | b"h" => {
                let want = if w.op == b"a" { "stream" } else { "hash" };
                if kind != want {
                    if kind != "none" {
                        return Ok(t.refuse(format!("WRONGTYPE {shown} holds a {kind}, not a {want}")));
                    }
                    let int = t.int(key);
                    t.change(key, want, int);
                    if follow {
                        made_fresh(t, key);
                    }
                }
                if follow && w.op == b"h" {
                    let fields = t.hv.entry(key.to_vec()).or_default();
                    for pair in w.args.chunks(2) {
                        let value = pair.get(1).cloned().unwrap_or_default();
                        fields.insert(pair[0].clone(), Field::Text(value));
                    }
                }
            }
            b"k" => {
                if kind != "hash" && kind != "none" {
                    return Ok(t.refuse(format!("WRONGTYPE {shown} holds a {kind}, not a hash")));
                }
                let [field, by, ..] = w.args else { return Err(malformed()) };
                let known = t.hv.get(key).and_then(|fields| fields.get(field)).cloned();
                let value = match known {
                    Some(value) => value,
                    None if kind == "none" || t.fresh.contains(key) => Field::Number(0.0),
                    None => match call(ctx, vec![b"HGET".to_vec(), key.to_vec(), field.clone()])? {
                        Reply::Bulk(s) => Field::Text(s),
                        _ => Field::Text(b"0".to_vec()),
                    },
                };
                let value = match value {
                    Field::Number(n) => Some(n),
                    Field::Text(s) => integer(&s),
                };
                let Some(value) = value else {
                    let field = lossy(field);
                    return Ok(t.refuse(format!("ERR {shown} field {field} does not hold an integer")));
                };
                let sum = value + lua_number(by).ok_or_else(malformed)?;
                if sum >= 9.2e18 || sum <= -9.2e18 {
                    let field = lossy(field);
                    return Ok(t.refuse(format!("ERR HINCRBY {shown} {field} would overflow")));
                }
                if kind == "none" {
                    let int = t.int(key);
                    t.change(key, "hash", int);
                    t.fresh.insert(key.to_vec());
                }
                t.hv.entry(key.to_vec()).or_default().insert(field.clone(), Field::Number(sum));
            }
            b"i" => {
                if kind != "string" && kind != "none" {
                    return Ok(t.refuse(format!("WRONGTYPE {shown} holds a {kind}, not an integer")));
                }
                let value = match t.int(key) {
                    Int::Unknown if kind == "none" => Int::Is(0.0),
                    Int::Unknown => match call(ctx, vec![b"GET".to_vec(), key.to_vec()])? {
                        Reply::Bulk(s) => integer(&s).map_or(Int::Not, Int::Is),
                        _ => Int::Not,
                    },
                    known => known,
                };
                let Int::Is(value) = value else {
                    return Ok(t.refuse(format!("ERR {shown} does not hold an integer")));
                };
                let by = w.args.first().and_then(|b| lua_number(b)).ok_or_else(malformed)?;
                let sum = value + by;
                if sum >= 9.2e18 || sum <= -9.2e18 {
                    return Ok(t.refuse(format!("ERR INCRBY {shown} would overflow")));
                }
                t.change(key, "string", Int::Is(sum));
            }
            b"s" => {
                let value = w.args.first().and_then(|v| integer(v)).map_or(Int::Not, Int::Is);
                t.change(key, "string", value);
            }
            b"d" => {
                t.change(key, "none", Int::Is(0.0));
                if follow {
                    made_fresh(t, key);
                }
            }
            // 7.0+ fail on an unknown op (its ACL probe), 6.2 would take it for a DEL:
            // pelican sends none.
            _ => return Err(malformed()),
        }
    }
    Ok(None)
}

/// The script's `apply`: the entry's writes, each a command (its error ends the script).
fn apply(ctx: &mut Ctx<'_>, entry: &[Write<'_>]) -> Result<(), String> {
    for w in entry {
        let key = w.key.to_vec();
        let a = w.args;
        let command: Vec<Vec<u8>> = match w.op {
            b"a" => {
                let [kind, value, fields @ ..] = a else { return Err(malformed()) };
                let mut c = vec![b"XADD".to_vec(), key];
                if !kind.is_empty() {
                    c.extend([kind.clone(), b"~".to_vec(), value.clone()]);
                }
                c.push(b"*".to_vec());
                c.extend(fields.iter().cloned());
                c
            }
            b"h" => [vec![b"HSET".to_vec(), key], a.to_vec()].concat(),
            b"i" => vec![b"INCRBY".to_vec(), key, a.first().cloned().ok_or_else(malformed)?],
            b"k" => {
                let [field, by, ..] = a else { return Err(malformed()) };
                vec![b"HINCRBY".to_vec(), key, field.clone(), by.clone()]
            }
            b"s" => {
                let [value, ms, ..] = a else { return Err(malformed()) };
                match ms.is_empty() {
                    true => vec![b"SET".to_vec(), key, value.clone()],
                    false => vec![b"SET".to_vec(), key, value.clone(), b"PX".to_vec(), ms.clone()],
                }
            }
            _ => vec![b"DEL".to_vec(), key],
        };
        call(ctx, command)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_are_named_by_their_sha1() {
        assert_eq!(sha1_hex(b""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        assert_eq!(sha1_hex(b"return 1"), "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
    }

    #[test]
    fn numbers_and_integers_as_the_script_reads_them() {
        assert_eq!(lua_number(b"12"), Some(12.0));
        assert_eq!(lua_number(b" 0x10 "), Some(16.0));
        assert_eq!(lua_number(b"inf"), None);
        assert_eq!(lua_number(b""), None);
        assert_eq!(integer(b"-5"), Some(-5.0));
        assert_eq!(integer(b"0"), Some(0.0));
        assert_eq!(integer(b"-0"), None);
        assert_eq!(integer(b"012"), None);
        assert_eq!(integer(b"99999999999999999999"), Some(1e20)); // 20 characters: read, too big
        assert_eq!(integer(b"999999999999999999999"), None);
    }
}
