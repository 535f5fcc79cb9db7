//! Dead letters: moving an entry to the dead-letter stream, and back, each in one
//! server-side step.
//!
//! An operator's side ([`DeadLetter`], [`replay_command`], [`Replayed`]): read the
//! dead-letter stream (`XRANGE`), see each entry's own fields and origin with
//! [`DeadLetter::parse`], and replay one with [`REPLAY_SCRIPT`] — added back to its origin
//! stream as a new entry and deleted from the dead-letter stream in the same script, so a
//! crash or a lost connection never duplicates nor loses it, and sending the same replay
//! again does nothing. Sans-IO: the functions build the command and read its reply; any
//! client sends it (`pelican dead-letters replay` is one).
//!
//! On a cluster a script may only touch keys of one slot. The move to the dead-letter
//! stream already requires the stream and its dead-letter stream to share one (a hash tag:
//! `{orders}` and `{orders}:dead`), so every dead letter pelican moved can be replayed
//! atomically. A dead letter whose origin is in another slot (copied there by other tools,
//! or keys renamed since) is refused by the server (`CROSSSLOT`) and stays where it is:
//! pelican never falls back to a copy and a delete sent apart.
//!
//! # Moving
//!
//! A script rather than `MULTI`/`XADD`/`XACK`/`EXEC`: a transaction does not roll back, so
//! an `XADD` that fails inside it (a dead-letter key of another type: `WRONGTYPE`) would
//! still let the `XACK` run and the entry would be lost; nor can a transaction check that
//! the entry is still this consumer's. The script checks ownership, copies the entry's
//! fields on the server (they never travel back), adds the origin, and acks only once the
//! `XADD` succeeded. Like a transaction it runs whole or not at all, so a crash or a lost
//! connection around it neither loses the entry nor dead-letters it twice.

use std::time::Duration;

use bytes::{Bytes, BytesMut};

use crate::config::{Config, Limits, Protocol};
use crate::decimal::Decimal;
use crate::decode::{Decoder, Frame, Value};
use crate::encode::command;
use crate::error::{Command, Error};
use crate::notice::DeadLetterReason;

/// The script (`EVAL`): `KEYS` = stream, dead-letter stream; `ARGV` = group, consumer, id,
/// then field/value pairs to append. Answers 1 (moved), 0 (no longer this consumer's: not
/// moved) or -1 (deleted from the stream meanwhile: acked away, nothing to move). Published
/// so that simulators can recognise it.
pub const DEAD_LETTER_SCRIPT: &str = "\
local mine = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1, ARGV[2])
if #mine == 0 then return 0 end
local found = redis.call('XRANGE', KEYS[1], ARGV[3], ARGV[3])
if #found == 0 then
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
  return -1
end
local fields = found[1][2]
for i = 4, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('XADD', KEYS[2], '*', unpack(fields))
return redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
";

/// The check at each connect that dead letters can be moved (`EVAL`): `KEYS` = stream,
/// dead-letter stream; `ARGV` = group, consumer. It touches nothing and answers 1. Declaring
/// both keys makes a cluster refuse (`CROSSSLOT`) a dead-letter stream in another slot, and
/// an ACL refuse keys or scripting the user lacks, at the start rather than at the first
/// dead letter, maybe days later; where the server can tell (7.0+: `redis.acl_check_cmd`),
/// the commands the move runs are checked too. Published so that simulators can recognise
/// it.
pub const DEAD_LETTER_CHECK_SCRIPT: &str = "\
if redis.acl_check_cmd then
  local needs = {
    {'XPENDING', KEYS[1], ARGV[1], '-', '+', '1', ARGV[2]},
    {'XRANGE', KEYS[1], '-', '+'},
    {'XACK', KEYS[1], ARGV[1], '0-1'},
    {'XADD', KEYS[2], '*', 'f', 'v'},
  }
  for _, c in ipairs(needs) do
    if not redis.acl_check_cmd(unpack(c)) then
      return redis.error_reply('NOPERM this user may not run ' .. c[1] .. ' on ' .. c[2] ..
        ', which moving entries to the dead-letter stream needs')
    end
  end
end
return 1
";

/// Appends the `EVAL` of [`DEAD_LETTER_CHECK_SCRIPT`].
pub(crate) fn encode_check(out: &mut BytesMut, config: &Config, key: &[u8], dead_letter: &[u8]) {
    let c = config;
    command(
        out,
        &[b"EVAL", DEAD_LETTER_CHECK_SCRIPT.as_bytes(), b"2", key, dead_letter, &c.group, &c.consumer],
    );
}

/// A move owed to the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Job {
    pub id: Bytes,
    pub deliveries: u64,
    pub reason: DeadLetterReason,
    /// What went wrong, if told: a refused commit's text (`pelican-error`).
    pub error: Option<Bytes>,
}

/// Appends the `EVAL` for `job`. The dead-letter entry gets the original fields, then
/// `pelican-stream`, `pelican-group`, `pelican-consumer`, `pelican-id`, `pelican-deliveries`
/// and `pelican-reason` (and `pelican-error`, if the job says what went wrong).
pub(crate) fn encode(out: &mut BytesMut, config: &Config, key: &[u8], dead_letter: &[u8], job: &Job) {
    let deliveries = Decimal::new(job.deliveries);
    let c = config;
    let mut args: Vec<&[u8]> = vec![
        b"EVAL",
        DEAD_LETTER_SCRIPT.as_bytes(),
        b"2",
        key,
        dead_letter,
        &c.group,
        &c.consumer,
        &job.id,
        b"pelican-stream",
        key,
        b"pelican-group",
        &c.group,
        b"pelican-consumer",
        &c.consumer,
        b"pelican-id",
        &job.id,
        b"pelican-deliveries",
        deliveries.as_bytes(),
        b"pelican-reason",
        job.reason.as_str().as_bytes(),
    ];
    if let Some(error) = &job.error {
        args.extend([&b"pelican-error"[..], error]);
    }
    command(out, &args);
}

/// The field a replayed entry carries, after its own: the id it had in its origin stream
/// when it was moved (`pelican-id`), so a handler can tell a replay (and find its story).
pub const REPLAY_OF_FIELD: &str = "pelican-replay-of";

/// The replay script (`EVAL`): `KEYS` = dead-letter stream, origin stream; `ARGV` = the
/// dead letter's id, the reason it must have (empty: any). Adds the entry's own fields (those
/// before the origin the move appended, less an earlier replay's [`REPLAY_OF_FIELD`]) and
/// [`REPLAY_OF_FIELD`] to the origin stream, then deletes the dead letter; answers the new
/// id. Answers 0 if the dead letter is gone (replayed or dropped already), -1 if its reason
/// is another, -2 if it is no dead letter of this origin stream: nothing done. An `XADD` the
/// server refuses (a key of another type) ends the script before the delete. Published so
/// that simulators can recognise it.
pub const REPLAY_SCRIPT: &str = "\
local found = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
if #found == 0 then return 0 end
local f = found[1][2]
local at = nil
for i = #f - 1, 1, -2 do
  if f[i] == 'pelican-stream' then at = i break end
  if string.sub(f[i], 1, 8) ~= 'pelican-' then break end
end
if not at then return -2 end
local origin = {}
for i = at, #f - 1, 2 do origin[f[i]] = f[i + 1] end
if origin['pelican-stream'] ~= KEYS[2] then return -2 end
if ARGV[2] ~= '' and origin['pelican-reason'] ~= ARGV[2] then return -1 end
local fields = {}
for i = 1, at - 1, 2 do
  if f[i] ~= 'pelican-replay-of' then
    fields[#fields + 1] = f[i]
    fields[#fields + 1] = f[i + 1]
  end
end
fields[#fields + 1] = 'pelican-replay-of'
fields[#fields + 1] = origin['pelican-id'] or ARGV[1]
local id = redis.call('XADD', KEYS[2], '*', unpack(fields))
redis.call('XDEL', KEYS[1], ARGV[1])
return id
";

/// An entry of a dead-letter stream, read back: the entry's own fields and where it came
/// from (the fields the move appended; `None` for those a dead letter lacks, e.g. an entry
/// some other tool added).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadLetter {
    /// Its id in the dead-letter stream (the time it was moved, in ms, and a sequence).
    pub id: Bytes,
    /// The entry's own fields, in order.
    pub fields: Vec<(Bytes, Bytes)>,
    /// The stream it was consumed from (`pelican-stream`).
    pub stream: Option<Bytes>,
    /// The group (`pelican-group`).
    pub group: Option<Bytes>,
    /// The consumer that moved it (`pelican-consumer`).
    pub consumer: Option<Bytes>,
    /// Its id in the origin stream (`pelican-id`).
    pub origin_id: Option<Bytes>,
    /// Its delivery count when moved (`pelican-deliveries`).
    pub deliveries: Option<u64>,
    /// Why (`pelican-reason`: `max-deliveries`, `verdict`, `commit-refused`…).
    pub reason: Option<Bytes>,
    /// What went wrong, if the move said (`pelican-error`).
    pub error: Option<Bytes>,
}

impl DeadLetter {
    /// Splits a dead-letter stream entry (its id and fields, as `XRANGE` gives them): the
    /// origin is the `pelican-*` fields from the last `pelican-stream` on, the entry's own
    /// fields all before it — as [`REPLAY_SCRIPT`] splits them. An entry with no such tail
    /// has every field its own and no origin.
    pub fn parse<N, V>(id: impl AsRef<[u8]>, fields: impl IntoIterator<Item = (N, V)>) -> DeadLetter
    where
        N: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        let all: Vec<(Bytes, Bytes)> = fields
            .into_iter()
            .map(|(n, v)| (Bytes::copy_from_slice(n.as_ref()), Bytes::copy_from_slice(v.as_ref())))
            .collect();
        let mut at = None;
        for (i, (name, _)) in all.iter().enumerate().rev() {
            if &name[..] == b"pelican-stream" {
                at = Some(i);
                break;
            }
            if !name.starts_with(b"pelican-") {
                break;
            }
        }
        let mut letter = DeadLetter { id: Bytes::copy_from_slice(id.as_ref()), ..DeadLetter::default() };
        let origin = match at {
            Some(at) => {
                let mut all = all;
                let origin = all.split_off(at);
                letter.fields = all;
                origin
            }
            None => {
                letter.fields = all;
                Vec::new()
            }
        };
        for (name, value) in origin {
            let slot = match &name[..] {
                b"pelican-stream" => &mut letter.stream,
                b"pelican-group" => &mut letter.group,
                b"pelican-consumer" => &mut letter.consumer,
                b"pelican-id" => &mut letter.origin_id,
                b"pelican-reason" => &mut letter.reason,
                b"pelican-error" => &mut letter.error,
                b"pelican-deliveries" => {
                    letter.deliveries = std::str::from_utf8(&value).ok().and_then(|d| d.parse().ok());
                    continue;
                }
                _ => continue,
            };
            *slot = Some(value);
        }
        letter
    }

    /// When it was moved: its id's time, in ms since the Unix epoch (`None` if the id is not
    /// a stream id).
    pub fn moved_at_ms(&self) -> Option<u64> {
        let ms = self.id.split(|b| *b == b'-').next()?;
        std::str::from_utf8(ms).ok()?.parse().ok()
    }

    /// How long ago it was moved, given the time now in ms since the epoch (the server's
    /// `TIME`, best: its clock made the id). Zero if the id is in the future.
    pub fn age(&self, now_ms: u64) -> Option<Duration> {
        Some(Duration::from_millis(now_ms.saturating_sub(self.moved_at_ms()?)))
    }
}

/// The command that replays dead letter `id` of stream `dead_letter` to its origin stream
/// `origin` ([`DeadLetter::stream`]), if its reason is `reason` (`None`: whatever it is):
/// `EVAL <REPLAY_SCRIPT> 2 <dead_letter> <origin> <id> <reason or "">`. Send it as one
/// command (on a cluster, to the node serving both keys' slot; a client that follows
/// redirects just sends it), and read its reply with [`Replayed::from_reply`].
pub fn replay_command<'a>(
    dead_letter: &'a [u8],
    origin: &'a [u8],
    id: &'a [u8],
    reason: Option<&'a [u8]>,
) -> [&'a [u8]; 7] {
    [b"EVAL", REPLAY_SCRIPT.as_bytes(), b"2", dead_letter, origin, id, reason.unwrap_or(b"")]
}

/// Appends [`replay_command`] encoded (a RESP array of bulk strings).
pub fn encode_replay(
    out: &mut BytesMut,
    dead_letter: &[u8],
    origin: &[u8],
    id: &[u8],
    reason: Option<&[u8]>,
) {
    command(out, &replay_command(dead_letter, origin, id, reason));
}

/// What a replay did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Replayed {
    /// Added to its origin stream as a new entry, with this id, and deleted from the
    /// dead-letter stream, in one step.
    Moved(Bytes),
    /// Not in the dead-letter stream (replayed or dropped already, or never there): nothing
    /// done. Sending a replay again after a lost connection ends here.
    Gone,
    /// Its reason is not the one asked: left in place.
    OtherReason,
    /// Not a dead letter of the origin stream given (no origin, or another): left in place.
    OtherOrigin,
}

impl Replayed {
    /// Reads the reply to a [`replay_command`], whole, as RESP2 or RESP3 bytes. Errors: the
    /// server refused ([`Error::Server`], e.g. `CROSSSLOT` on a cluster for keys in two
    /// slots, `WRONGTYPE`, `NOSCRIPT`-less servers without scripting), or the bytes are not
    /// one whole reply of the script's ([`Error::Protocol`], [`Error::Shape`]).
    pub fn from_reply(reply: &[u8]) -> Result<Replayed, Error> {
        let limits = Limits::default();
        let mut decoder = Decoder::new(limits);
        decoder.extend(reply);
        let command = Command::Replay;
        let value = match decoder.next(Protocol::Resp3).map_err(|e| e.into_error(limits))? {
            Some(Frame::Reply(value)) => value,
            None => return Err(Error::Protocol { detail: "the replay's reply is cut short".into() }),
            Some(_) => return Err(Error::Shape { command, detail: "not a reply" }),
        };
        match value {
            Value::Str(id) | Value::Text(id) => Ok(Replayed::Moved(id)),
            Value::Int(0) => Ok(Replayed::Gone),
            Value::Int(-1) => Ok(Replayed::OtherReason),
            Value::Int(-2) => Ok(Replayed::OtherOrigin),
            Value::Error(message) => {
                Err(Error::Server { command, message: String::from_utf8_lossy(&message).into_owned() })
            }
            _ => Err(Error::Shape { command, detail: "not an id, 0, -1 or -2" }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_letter_splits_into_its_own_fields_and_its_origin() {
        let fields = [
            ("pelican-stream", "x"), // the entry's own, before its last origin
            ("f", "v"),
            ("pelican-stream", "{o}"),
            ("pelican-group", "g"),
            ("pelican-consumer", "c"),
            ("pelican-id", "5-0"),
            ("pelican-deliveries", "3"),
            ("pelican-reason", "max-deliveries"),
            ("pelican-error", "boom"),
        ];
        let d = DeadLetter::parse("1700000000000-1", fields);
        assert_eq!(d.fields.len(), 2);
        assert_eq!((&d.fields[1].0[..], &d.fields[1].1[..]), (&b"f"[..], &b"v"[..]));
        assert_eq!(d.stream.as_deref(), Some(&b"{o}"[..]));
        assert_eq!((d.group.as_deref(), d.consumer.as_deref()), (Some(&b"g"[..]), Some(&b"c"[..])));
        assert_eq!((d.origin_id.as_deref(), d.deliveries), (Some(&b"5-0"[..]), Some(3)));
        assert_eq!(
            (d.reason.as_deref(), d.error.as_deref()),
            (Some(&b"max-deliveries"[..]), Some(&b"boom"[..]))
        );
        assert_eq!(d.moved_at_ms(), Some(1_700_000_000_000));
        assert_eq!(d.age(1_700_000_001_500), Some(Duration::from_millis(1500)));
        assert_eq!(d.age(0), Some(Duration::ZERO));
        // Not a dead letter pelican moved: all its own, no origin; a bad id has no age.
        let other = DeadLetter::parse("x", [("a", "1"), ("pelican-id", "2")]);
        assert_eq!((other.fields.len(), other.stream.is_none(), other.age(5)), (2, true, None));
    }

    #[test]
    fn replay_replies_are_read() {
        let command = replay_command(b"dl", b"o", b"1-0", None);
        assert_eq!(
            (command[2], command[3], command[4], command[5], command[6]),
            (&b"2"[..], &b"dl"[..], &b"o"[..], &b"1-0"[..], &b""[..])
        );
        let mut out = BytesMut::new();
        encode_replay(&mut out, b"dl", b"o", b"1-0", Some(b"verdict"));
        assert!(out.ends_with(b"$7\r\nverdict\r\n"));
        assert_eq!(Replayed::from_reply(b"$3\r\n9-0\r\n"), Ok(Replayed::Moved(Bytes::from_static(b"9-0"))));
        assert_eq!(Replayed::from_reply(b":0\r\n"), Ok(Replayed::Gone));
        assert_eq!(Replayed::from_reply(b":-1\r\n"), Ok(Replayed::OtherReason));
        assert_eq!(Replayed::from_reply(b":-2\r\n"), Ok(Replayed::OtherOrigin));
        assert!(matches!(Replayed::from_reply(b"-CROSSSLOT Keys\r\n"), Err(Error::Server { .. })));
        assert!(matches!(Replayed::from_reply(b":7\r\n"), Err(Error::Shape { .. })));
        assert!(matches!(Replayed::from_reply(b"$3\r\n9-"), Err(Error::Protocol { .. })));
        assert!(Replayed::from_reply(b"\x00garbage\r\n").is_err());
    }
}
