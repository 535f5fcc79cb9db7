//! Moving an entry to the dead-letter stream, in one server-side step.
//!
//! A script rather than `MULTI`/`XADD`/`XACK`/`EXEC`: a transaction does not roll back, so
//! an `XADD` that fails inside it (a dead-letter key of another type: `WRONGTYPE`) would
//! still let the `XACK` run and the entry would be lost; nor can a transaction check that
//! the entry is still this consumer's. The script checks ownership, copies the entry's
//! fields on the server (they never travel back), adds the origin, and acks only once the
//! `XADD` succeeded. Like a transaction it runs whole or not at all, so a crash or a lost
//! connection around it neither loses the entry nor dead-letters it twice.

use bytes::{Bytes, BytesMut};

use crate::config::Config;
use crate::decimal::Decimal;
use crate::encode::command;
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
