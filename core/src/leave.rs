//! Leaving the group at a clean stop: a consumer that holds nothing deletes itself, so that
//! consumers named after short-lived processes (a Kubernetes pod's name) do not pile up.
//!
//! `XGROUP DELCONSUMER` drops the consumer's pending entries with it, so the check that it
//! holds none and the removal run in one script: an entry handed to it between a check and
//! a removal sent apart would be lost.

use bytes::BytesMut;

use crate::config::Config;
use crate::encode::command;

/// The script (`EVAL`): `KEYS` = stream; `ARGV` = group, consumer. Answers how many
/// entries the consumer holds: 0 and it was deleted (or never was there), more and it was
/// kept. Scripts see replies in RESP2: `XPENDING`'s summary lists `[name, count]` per
/// consumer holding entries, `false` when none does.
pub const LEAVE_SCRIPT: &str = "\
local holders = redis.call('XPENDING', KEYS[1], ARGV[1])[4]
if holders then
  for _, h in ipairs(holders) do
    if h[1] == ARGV[2] then return tonumber(h[2]) end
  end
end
redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
return 0
";

/// Appends the `EVAL` of [`LEAVE_SCRIPT`] for this consumer.
pub(crate) fn encode(out: &mut BytesMut, c: &Config, key: &[u8]) {
    command(out, &[b"EVAL", LEAVE_SCRIPT.as_bytes(), b"1", key, &c.group, &c.consumer]);
}
