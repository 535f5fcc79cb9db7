//! A verdict that writes: the handler's output and the entry's ack in one fenced step.
//!
//! [`Verdict::Commit`](crate::Verdict::Commit) carries [`Writes`]. The consumer settles it
//! with one script that runs on the server as a unit: only if the entry is still pending to
//! this consumer **with the delivery count it was handed out with** does it make every write
//! and the `XACK`; otherwise it writes nothing. The delivery count is the fencing token: a
//! peer that reclaimed the entry meanwhile (from a consumer paused past `min_idle`) raised
//! it, so the paused one's late commit is refused even if the entry came back to it since.
//!
//! Why a script and not `MULTI`: a transaction cannot check the owner, and does not roll
//! back — a write that fails inside it (`WRONGTYPE`) would still let the ack run. Nor does a
//! script roll back, so it first checks that every write will succeed (each key's type, an
//! `INCRBY`'s or `HINCRBY`'s integer and its overflow, and on 7.0+ the user's permissions)
//! and only then writes: an entry's writes are made whole or not at all.
//!
//! Why `SCRIPT LOAD` + `EVALSHA` and not a function library (7.0+): scripts work on every
//! server pelican supports (6.2 has no functions), need no `FUNCTION LOAD` (an admin's
//! step, node by node in a cluster), and are loaded by the consumer itself once per
//! connection; a `NOSCRIPT` (a flushed cache, a failover) loads it again.
//!
//! **The guarantee.** Every write made through a commit is applied once per entry, in the
//! history that survives: a commit is one step, replicated as one; a commit not yet
//! replicated when its master fails is lost whole, and its entry is delivered again. A commit
//! whose answer was lost (a cut connection) is sent again and finds its entry settled: it
//! writes nothing twice. Effects outside Redis (an HTTP call) stay at least once.

use bytes::{Bytes, BytesMut};

use crate::config::Config;
use crate::decimal::Decimal;
use crate::decode::Value;
use crate::encode::{bulk, header};
use crate::reply::ShapeError;

// The writes are the handler's vocabulary (an entry's verdict names them), so they live
// below; this module's public path names them too.
pub use crate::writes::{Trim, Write, Writes, MAX_FIELDS_PER_WRITE};

/// The commit script (`EVALSHA` after `SCRIPT LOAD`). `KEYS` = the consumed stream, then
/// every key written; `ARGV` = group, consumer, the lowest and highest id of the entries,
/// how many entries, then for each entry: id, delivery count, number of writes, and each
/// write as `op, key index, n, n arguments` — `a` (`XADD`: trim kind or empty, trim value,
/// field/value pairs), `h` (`HSET`: pairs), `i` (`INCRBY`: by), `k` (`HINCRBY`: field, by),
/// `s` (`SET`: value, `PX` milliseconds or empty), `d` (`DEL`). Answers, for each entry: 1 (committed), 0 (no
/// longer pending: settled already), `[owner, deliveries]` (pending to another consumer, or
/// delivered again since), or an error text (a write would fail: nothing written).
/// Published so that simulators can recognise it.
///
/// Lean on purpose (it runs for every entry of a fast stage): one `XPENDING` for the whole
/// batch's range of this consumer's entries (an entry it misses is asked after alone), one
/// `TYPE` per key per batch, one `XACK` for all, and an undo list rather than a table per
/// entry for what the checks follow (hash fields are followed only through an entry with an
/// `HINCRBY`, each asked with `HGET` once).
pub const COMMIT_SCRIPT: &str = "\
local stream, group, me = KEYS[1], ARGV[1], ARGV[2]
local acl = redis.acl_check_cmd
-- Each write's command, as redis.acl_check_cmd wants it: with arguments of the right number.
local probes = {a = {'XADD', '*', 'f', 'v'}, h = {'HSET', 'f', 'v'}, i = {'INCRBY', '1'}, k = {'HINCRBY', 'f', '1'},
                s = {'SET', 'v'}, d = {'DEL'}}
local allowed = {a = {}, h = {}, i = {}, k = {}, s = {}, d = {}}
local function integer(s)
  if s and #s <= 20 and (s == '0' or string.match(s, '^%-?[1-9]%d*$')) then return tonumber(s) end
  return false
end
-- What the writes so far left each key: its type (asked of the server once) and, for
-- INCRBY, its integer (nil: not known yet; false: not an integer). An entry's changes are
-- undone if one of its writes would fail.
local kinds, ints = {}, {}
local undo_key, undo_kind, undo_int, undos = {}, {}, {}, 0
local function change(key, kind, int)
  undos = undos + 1
  undo_key[undos], undo_kind[undos], undo_int[undos] = key, kinds[key], ints[key]
  kinds[key], ints[key] = kind, int
end
local function refuse(why)
  for j = undos, 1, -1 do
    local key = undo_key[j]
    kinds[key], ints[key] = undo_kind[j], undo_int[j]
  end
  undos = 0
  return why
end
-- For an entry with an HINCRBY (only: following every HSET costs): what its writes so far
-- left each hash's fields (a string as HSET set it, a number after an HINCRBY), and the
-- hashes they made or emptied (no other field). Per entry: the server has the rest.
local hv, fresh = {}, {}
local function fields_of(key)
  local fields = hv[key]
  if not fields then fields = {}; hv[key] = fields end
  return fields
end
-- The entry's writes as check read them (op, key, first and last argument), for apply.
local w_op, w_key, w_first, w_last = {}, {}, {}, {}
local function check(at, n, follow)
  undos = 0
  if follow then hv, fresh = {}, {} end
  for w = 1, n do
    local op, key, argc = ARGV[at], KEYS[tonumber(ARGV[at + 1])], tonumber(ARGV[at + 2])
    w_op[w], w_key[w], w_first[w], w_last[w] = op, key, at + 3, at + 2 + argc
    if acl then
      local probe, ok = probes[op], allowed[op][key]
      if ok == nil then
        ok = acl(probe[1], key, unpack(probe, 2))
        allowed[op][key] = ok
      end
      if not ok then return refuse('NOPERM this user may not run ' .. probe[1] .. ' on ' .. key) end
    end
    local kind = kinds[key]
    if kind == nil then
      kind = redis.call('TYPE', key)['ok']
      kinds[key] = kind
    end
    if op == 'a' or op == 'h' then
      local want = op == 'a' and 'stream' or 'hash'
      if kind ~= want then
        if kind ~= 'none' then return refuse('WRONGTYPE ' .. key .. ' holds a ' .. kind .. ', not a ' .. want) end
        change(key, want, ints[key])
        if follow then hv[key], fresh[key] = {}, true end
      end
      if follow and op == 'h' then
        local fields = fields_of(key)
        for f = at + 3, at + 2 + argc, 2 do fields[ARGV[f]] = ARGV[f + 1] end
      end
    elseif op == 'k' then
      if kind ~= 'hash' and kind ~= 'none' then
        return refuse('WRONGTYPE ' .. key .. ' holds a ' .. kind .. ', not a hash')
      end
      local field, fields = ARGV[at + 3], fields_of(key)
      local value = fields[field]
      if value == nil then
        if kind == 'none' or fresh[key] then value = 0 else value = redis.call('HGET', key, field) or '0' end
      end
      if type(value) == 'string' then value = integer(value) end
      if value == false then return refuse('ERR ' .. key .. ' field ' .. field .. ' does not hold an integer') end
      local sum = value + tonumber(ARGV[at + 4])
      if sum >= 9.2e18 or sum <= -9.2e18 then
        return refuse('ERR HINCRBY ' .. key .. ' ' .. field .. ' would overflow')
      end
      if kind == 'none' then
        change(key, 'hash', ints[key])
        fresh[key] = true
      end
      fields[field] = sum
    elseif op == 'i' then
      if kind ~= 'string' and kind ~= 'none' then
        return refuse('WRONGTYPE ' .. key .. ' holds a ' .. kind .. ', not an integer')
      end
      local value = ints[key]
      if value == nil then
        if kind == 'none' then value = 0 else value = integer(redis.call('GET', key)) end
      end
      if value == false then return refuse('ERR ' .. key .. ' does not hold an integer') end
      local sum = value + tonumber(ARGV[at + 3])
      if sum >= 9.2e18 or sum <= -9.2e18 then return refuse('ERR INCRBY ' .. key .. ' would overflow') end
      change(key, 'string', sum)
    elseif op == 's' then
      change(key, 'string', integer(ARGV[at + 3]))
    else
      change(key, 'none', 0)
      if follow then hv[key], fresh[key] = {}, true end
    end
    at = at + 3 + argc
  end
  return nil
end
local function apply(n)
  for w = 1, n do
    local op, key, first, last = w_op[w], w_key[w], w_first[w], w_last[w]
    if op == 'a' then
      if ARGV[first] == '' then
        redis.call('XADD', key, '*', unpack(ARGV, first + 2, last))
      else
        redis.call('XADD', key, ARGV[first], '~', ARGV[first + 1], '*', unpack(ARGV, first + 2, last))
      end
    elseif op == 'h' then
      redis.call('HSET', key, unpack(ARGV, first, last))
    elseif op == 'i' then
      redis.call('INCRBY', key, ARGV[first])
    elseif op == 'k' then
      redis.call('HINCRBY', key, ARGV[first], ARGV[first + 1])
    elseif op == 's' then
      if ARGV[first + 1] == '' then
        redis.call('SET', key, ARGV[first])
      else
        redis.call('SET', key, ARGV[first], 'PX', ARGV[first + 1])
      end
    else
      redis.call('DEL', key)
    end
  end
end
-- This consumer's deliveries in the batch's range, in one call; an entry it misses (another
-- owner's, or past the count) is asked for alone.
local mine = {}
local range = redis.call('XPENDING', stream, group, ARGV[3], ARGV[4], tonumber(ARGV[5]) * 2 + 64, me)
for _, p in ipairs(range) do mine[p[1]] = p[4] end
local results, acked, i, argc, acks = {}, {}, 6, #ARGV, 0
while i <= argc do
  local id, deliveries, n = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local first, follow = i + 3, false
  i = first
  for _ = 1, n do
    if ARGV[i] == 'k' then follow = true end
    i = i + 3 + tonumber(ARGV[i + 2])
  end
  -- An entry committed earlier in this batch is settled (its ack goes at the end).
  local count, owner = mine[id], me
  if count == false then count = nil elseif count == nil then
    local held = redis.call('XPENDING', stream, group, id, id, 1)
    if #held > 0 then owner, count = held[1][2], held[1][4] end
  end
  local result
  if count == nil then
    result = 0
  elseif owner ~= me or count ~= deliveries then
    result = {owner, count}
  else
    result = check(first, n, follow)
    if result == nil then
      apply(n)
      acks = acks + 1
      acked[acks] = id
      mine[id] = false
      result = 1
    end
  end
  results[#results + 1] = result
end
if acks > 0 then redis.call('XACK', stream, group, unpack(acked)) end
return results
";

/// The check at each connect that commits can be made (`EVAL`), where
/// [`Config::commit_to`] names the keys: `KEYS` = stream, then those keys; `ARGV` = group,
/// consumer. It touches nothing and answers 1. Declaring the keys makes a cluster refuse
/// (`CROSSSLOT`) one in another slot, and an ACL refuse scripting or keys the user lacks, at
/// the start; on 7.0+ the commands a commit runs are checked too. Published so that
/// simulators can recognise it.
pub const COMMIT_CHECK_SCRIPT: &str = "\
if redis.acl_check_cmd then
  local needs = {{'XPENDING', KEYS[1], ARGV[1], '-', '+', '1'}, {'XACK', KEYS[1], ARGV[1], '0-1'}}
  for k = 2, #KEYS do
    local key = KEYS[k]
    for _, c in ipairs({{'XADD', key, '*', 'f', 'v'}, {'HSET', key, 'f', 'v'}, {'INCRBY', key, '1'},
                        {'HINCRBY', key, 'f', '1'}, {'SET', key, 'v'}, {'DEL', key}}) do
      needs[#needs + 1] = c
    end
  end
  for _, c in ipairs(needs) do
    if not redis.acl_check_cmd(unpack(c)) then
      return redis.error_reply('NOPERM this user may not run ' .. c[1] .. ' on ' .. c[2] ..
        ', which committing writes with acks needs')
    end
  end
end
return 1
";

/// Appends the `EVAL` of [`COMMIT_CHECK_SCRIPT`] for the keys [`Config::commit_to`] names.
pub(crate) fn encode_check(out: &mut BytesMut, config: &Config, stream: &[u8], keys: &[Bytes]) {
    let n = Decimal::new(1 + keys.len() as u64);
    header(out, b'*', 6 + keys.len());
    for arg in [&b"EVAL"[..], COMMIT_CHECK_SCRIPT.as_bytes(), n.as_bytes(), stream] {
        bulk(out, arg);
    }
    for key in keys {
        bulk(out, key);
    }
    bulk(out, &config.group);
    bulk(out, &config.consumer);
}

/// Appends `SCRIPT LOAD` of [`COMMIT_SCRIPT`].
pub(crate) fn encode_load(out: &mut BytesMut) {
    crate::encode::command(out, &[b"SCRIPT", b"LOAD", COMMIT_SCRIPT.as_bytes()]);
}

/// A commit owed to the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Job {
    pub id: Bytes,
    /// The delivery count it was handed out with: the fencing token.
    pub deliveries: u64,
    pub writes: Writes,
}

/// The most entries one `EVALSHA` commits: a bigger batch holds the server longer.
pub(crate) const BATCH: usize = 256;

/// Appends one `EVALSHA` committing `jobs` (the keys each written once in `KEYS`).
pub(crate) fn encode(out: &mut BytesMut, config: &Config, stream: &[u8], sha: &[u8], jobs: &[Job]) {
    let mut keys: Vec<&[u8]> = vec![stream];
    fn index<'k>(keys: &mut Vec<&'k [u8]>, key: &'k [u8]) -> usize {
        match keys.iter().position(|k| *k == key) {
            Some(i) => i + 1,
            None => {
                keys.push(key);
                keys.len()
            }
        }
    }
    // ARGV first, into its own buffer: KEYS are known once it is done.
    let mut argv = BytesMut::new();
    let mut argc = 5;
    let mut arg = |argv: &mut BytesMut, a: &[u8]| {
        bulk(argv, a);
        argc += 1;
    };
    for job in jobs {
        arg(&mut argv, &job.id);
        arg(&mut argv, Decimal::new(job.deliveries).as_bytes());
        arg(&mut argv, Decimal::new(job.writes.len() as u64).as_bytes());
        for write in &job.writes {
            let i = Decimal::new(index(&mut keys, write.key()) as u64);
            let (op, n): (&[u8], usize) = match write {
                Write::Add { fields, .. } => (b"a", 2 + 2 * fields.len()),
                Write::HashSet { fields, .. } => (b"h", 2 * fields.len()),
                Write::IncrBy { .. } => (b"i", 1),
                Write::HashIncrBy { .. } => (b"k", 2),
                Write::Set { .. } => (b"s", 2),
                Write::Delete { .. } => (b"d", 0),
            };
            arg(&mut argv, op);
            arg(&mut argv, i.as_bytes());
            arg(&mut argv, Decimal::new(n as u64).as_bytes());
            match write {
                Write::Add { fields, trim, .. } => {
                    match trim {
                        None => {
                            arg(&mut argv, b"");
                            arg(&mut argv, b"");
                        }
                        Some(Trim::MaxLen(len)) => {
                            arg(&mut argv, b"MAXLEN");
                            arg(&mut argv, Decimal::new(*len).as_bytes());
                        }
                        Some(Trim::MinId(id)) => {
                            arg(&mut argv, b"MINID");
                            arg(&mut argv, id);
                        }
                    }
                    for (f, v) in fields {
                        arg(&mut argv, f);
                        arg(&mut argv, v);
                    }
                }
                Write::HashSet { fields, .. } => {
                    for (f, v) in fields {
                        arg(&mut argv, f);
                        arg(&mut argv, v);
                    }
                }
                Write::IncrBy { by, .. } => arg(&mut argv, by.to_string().as_bytes()),
                Write::HashIncrBy { field, by, .. } => {
                    arg(&mut argv, field);
                    arg(&mut argv, by.to_string().as_bytes());
                }
                Write::Set { value, ttl, .. } => {
                    arg(&mut argv, value);
                    match ttl {
                        Some(ttl) => {
                            let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
                            arg(&mut argv, Decimal::new(ms).as_bytes())
                        }
                        None => arg(&mut argv, b""),
                    }
                }
                Write::Delete { .. } => {}
            }
        }
    }
    let numkeys = Decimal::new(keys.len() as u64);
    out.reserve(64 + sha.len() + keys.iter().map(|k| k.len() + 16).sum::<usize>() + argv.len());
    header(out, b'*', 3 + keys.len() + argc);
    bulk(out, b"EVALSHA");
    bulk(out, sha);
    bulk(out, numkeys.as_bytes());
    for key in &keys {
        bulk(out, key);
    }
    bulk(out, &config.group);
    bulk(out, &config.consumer);
    let by_order = |job: &&Job| id_order(&job.id);
    let (low, high) = (jobs.iter().min_by_key(by_order), jobs.iter().max_by_key(by_order));
    bulk(out, low.map_or(&b"0"[..], |j| &j.id));
    bulk(out, high.map_or(&b"0"[..], |j| &j.id));
    bulk(out, Decimal::new(jobs.len() as u64).as_bytes());
    out.extend_from_slice(&argv);
}

/// A stream id's place in order (`ms-seq`; `ms` alone as `ms-0`; anything else first).
fn id_order(id: &[u8]) -> (u64, u64) {
    let number = |s: &[u8]| std::str::from_utf8(s).ok().and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    match id.iter().position(|b| *b == b'-') {
        Some(dash) => (number(&id[..dash]), number(&id[dash + 1..])),
        None => (number(id), 0),
    }
}

/// What the script answered for one entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Written and acked.
    Committed,
    /// No longer pending: settled already (by this commit sent before, its answer lost, or
    /// by a peer).
    Settled,
    /// Pending to `owner` with `deliveries`: taken by a peer, or delivered again since.
    Held { owner: Bytes, deliveries: u64 },
    /// A write would have failed (why): nothing written, the entry left pending.
    Refused(String),
}

/// The script's answer, one outcome per entry sent.
pub(crate) fn outcomes(value: Value, sent: usize) -> Result<Vec<Outcome>, ShapeError> {
    let Value::Array(items) = value else { return Err(ShapeError("a commit answered with no array")) };
    if items.len() != sent {
        return Err(ShapeError("a commit answered for another number of entries"));
    }
    items
        .into_iter()
        .map(|item| match item {
            Value::Int(1) => Ok(Outcome::Committed),
            Value::Int(0) => Ok(Outcome::Settled),
            Value::Str(why) | Value::Text(why) | Value::Error(why) => {
                Ok(Outcome::Refused(String::from_utf8_lossy(&why).into_owned()))
            }
            Value::Array(held) => match <[Value; 2]>::try_from(held) {
                Ok([Value::Str(owner) | Value::Text(owner), Value::Int(n)]) => {
                    Ok(Outcome::Held { owner, deliveries: u64::try_from(n).unwrap_or(0) })
                }
                _ => Err(ShapeError("a commit's owner answer is not [owner, deliveries]")),
            },
            _ => Err(ShapeError("a commit answered with an unknown outcome")),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_batch_names_each_key_once() {
        let config = Config::new("s", "g", "c");
        let w = Writes::new().add("o", [("k", "v")]).set_expiring("t", "1", Duration::from_secs(2));
        let jobs = [
            Job { id: Bytes::from_static(b"1-0"), deliveries: 1, writes: w.clone() },
            Job { id: Bytes::from_static(b"2-0"), deliveries: 3, writes: Writes::new().incr_by("o2", 5) },
            Job {
                id: Bytes::from_static(b"3-0"),
                deliveries: 1,
                writes: Writes::new().hincr_by("o", "f", -7),
            },
        ];
        let mut out = BytesMut::new();
        encode(&mut out, &config, &config.stream, b"sha", &jobs);
        let args = args(&out);
        let expected = [
            "EVALSHA", "sha", "4", "s", "o", "t", "o2", "g", "c", "1-0", "3-0", "3", //
            "1-0", "1", "2", "a", "2", "4", "", "", "k", "v", "s", "3", "2", "1", "2000", //
            "2-0", "3", "1", "i", "4", "1", "5", //
            "3-0", "1", "1", "k", "2", "2", "f", "-7",
        ];
        assert_eq!(args, expected);
    }

    /// The arguments of the one command in `out`: `*n` then `$len` / bytes lines.
    fn args(out: &BytesMut) -> Vec<String> {
        let text = String::from_utf8(out.to_vec()).unwrap();
        let lines: Vec<&str> = text.split("\r\n").collect();
        let n: usize = lines[0][1..].parse().unwrap();
        assert_eq!(lines.len(), 2 + 2 * n, "exactly {n} arguments: {text:?}");
        (0..n).map(|i| lines[2 + 2 * i].to_string()).collect()
    }

    #[test]
    fn the_check_declares_every_key() {
        let mut out = BytesMut::new();
        encode_check(
            &mut out,
            &Config::new("s", "g", "c"),
            b"s",
            &[Bytes::from_static(b"o"), Bytes::from_static(b"n")],
        );
        let args = args(&out);
        assert_eq!(args[0], "EVAL");
        assert_eq!(args[2..], ["3", "s", "o", "n", "g", "c"]);
    }

    #[test]
    fn answers_are_read_per_entry() {
        let value = Value::Array(vec![
            Value::Int(1),
            Value::Int(0),
            Value::Array(vec![Value::Str(Bytes::from_static(b"peer")), Value::Int(2)]),
            Value::Str(Bytes::from_static(b"WRONGTYPE o holds a hash, not a stream")),
        ]);
        let got = outcomes(value, 4).unwrap();
        assert_eq!(got[0], Outcome::Committed);
        assert_eq!(got[1], Outcome::Settled);
        assert_eq!(got[2], Outcome::Held { owner: Bytes::from_static(b"peer"), deliveries: 2 });
        assert!(matches!(&got[3], Outcome::Refused(why) if why.starts_with("WRONGTYPE")));
        assert!(outcomes(Value::Array(vec![Value::Int(1)]), 2).is_err());
        assert!(outcomes(Value::Int(1), 1).is_err());
        assert!(outcomes(Value::Array(vec![Value::Int(7)]), 1).is_err());
    }
}
