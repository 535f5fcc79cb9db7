//! Retiring consumers that are gone for good, without orphaning a pending entry.
//!
//! `XGROUP DELCONSUMER` drops the consumer's pending entries with it: no `XAUTOCLAIM` can
//! reach them afterwards. So a consumer is removed only if it has been idle longer than a
//! bound **and** holds nothing, and both are checked in the same server-side script as the
//! removal: a consumer handed entries between a check and a removal sent separately would
//! lose them.
//!
//! Sans-IO like the consumer: [`Retirement::request`] is the bytes to write on a fresh
//! connection (the handshake of the [`Config`] — credentials, database, client name — then
//! the script), [`Retirement::read`] parses what came back.

use std::time::Duration;

use bytes::{Bytes, BytesMut};

use crate::commands;
use crate::config::{Config, Limits, Protocol};
use crate::decode::{Decoder, Frame, Value};
use crate::encode::{command, Decimal};
use crate::error::{Command, Error};

/// The script (`EVAL`): `KEYS` = stream; `ARGV` = group, minimum idle in milliseconds, and
/// `dry-run` or `retire`. For each consumer of the group (as `XINFO CONSUMERS` lists them):
/// `[name, pending, idle_ms, retired]`, `retired` 1 if it had no pending entry and was idle
/// at least that long (then removed, unless a dry run), else 0. Scripts see replies in
/// RESP2, so each consumer is a flat `[field, value, …]` list on every server.
pub const RETIRE_SCRIPT: &str = "\
local rows = {}
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local f = {}
  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end
  local retired = 0
  if f['pending'] == 0 and f['idle'] >= tonumber(ARGV[2]) then
    retired = 1
    if ARGV[3] ~= 'dry-run' then
      redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], f['name'])
    end
  end
  rows[#rows + 1] = {f['name'], f['pending'], f['idle'], retired}
end
return rows
";

/// One consumer of the group, as the retirement found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerState {
    /// Its name.
    pub name: Bytes,
    /// Entries it held (its pending list).
    pub pending: u64,
    /// How long since it last read, claimed or acked (the server's `idle`).
    pub idle: Duration,
    /// Removed (or, in a dry run, would be): idle long enough with nothing pending.
    pub retired: bool,
}

/// A retirement of a group's idle, empty consumers on one stream: the request to send and
/// the reader of its reply.
#[derive(Debug)]
pub struct Retirement {
    /// The script's `EVAL` and its arguments.
    args: Vec<Bytes>,
    request: Bytes,
    /// Replies before the script's: the handshake's.
    skip: usize,
    decoder: Decoder,
    protocol: Protocol,
    limits: Limits,
}

impl Retirement {
    /// Retire the consumers of `config`'s group on its stream idle at least `min_idle` with
    /// nothing pending; with `dry_run`, only report which would go. Uses the config's
    /// stream, group, credentials, database, protocol and client name (the consumer name is
    /// not used).
    pub fn new(config: &Config, min_idle: Duration, dry_run: bool) -> Retirement {
        let mut out = BytesMut::new();
        let skip = commands::handshake(&mut out, config).len();
        let ms = Decimal::new(min_idle.as_millis().min(u64::MAX as u128) as u64);
        let mode: &[u8] = if dry_run { b"dry-run" } else { b"retire" };
        let args: Vec<Bytes> =
            [b"EVAL", RETIRE_SCRIPT.as_bytes(), b"1", &config.stream, &config.group, ms.as_bytes(), mode]
                .iter()
                .map(|a| Bytes::copy_from_slice(a))
                .collect();
        command(&mut out, &args.iter().map(|a| &a[..]).collect::<Vec<_>>());
        Retirement {
            args,
            request: out.freeze(),
            skip,
            decoder: Decoder::new(config.limits),
            protocol: config.protocol,
            limits: config.limits,
        }
    }

    /// Only the script, for a client that logs in and follows cluster redirects itself:
    /// send [`args`](Self::args) as one command and give its reply, as RESP2 bytes, to
    /// [`read`](Self::read).
    pub fn script(stream: &[u8], group: &[u8], min_idle: Duration, dry_run: bool) -> Retirement {
        Retirement::new(&Config::new(stream, group, "retire").no_client_name(), min_idle, dry_run)
    }

    /// The bytes to write, on a fresh connection.
    pub fn request(&self) -> &[u8] {
        &self.request
    }

    /// The script's command: `EVAL <script> 1 <stream> <group> <min idle ms> <mode>`.
    pub fn args(&self) -> impl Iterator<Item = &[u8]> {
        self.args.iter().map(|a| &a[..])
    }

    /// Feeds bytes read from the connection: `Ok(None)` until the reply is whole, then each
    /// consumer of the group. Errors: the server refused (credentials, no such group or key:
    /// [`Error::Server`] / [`Error::GroupGone`]), or the reply is not RESP or not the
    /// script's shape.
    pub fn read(&mut self, bytes: &[u8]) -> Result<Option<Vec<ConsumerState>>, Error> {
        self.decoder.extend(bytes);
        loop {
            let frame = self.decoder.next(self.protocol).map_err(|e| e.into_error(self.limits))?;
            let value = match frame {
                None => return Ok(None),
                Some(Frame::Push) => continue,
                Some(Frame::Reply(value)) => value,
                Some(_) => {
                    return Err(Error::Shape {
                        command: Command::Retire,
                        detail: "a reply skipped as too large",
                    });
                }
            };
            if let Value::Error(message) = &value {
                let text = String::from_utf8_lossy(message).into_owned();
                let command = if self.skip > 0 { Command::Hello } else { Command::Retire };
                // 6.2 wraps a script's error: `ERR Error running script … NOGROUP …`.
                return Err(if message.windows(7).any(|w| w == b"NOGROUP") {
                    Error::GroupGone { command, message: text }
                } else {
                    Error::Server { command, message: text }
                });
            }
            if self.skip > 0 {
                self.skip -= 1;
                continue;
            }
            return rows(value).map(Some).map_err(|detail| Error::Shape { command: Command::Retire, detail });
        }
    }
}

/// The script's rows.
fn rows(value: Value) -> Result<Vec<ConsumerState>, &'static str> {
    let Value::Array(rows) = value else { return Err("not an array") };
    rows.into_iter()
        .map(|row| {
            let Value::Array(fields) = row else { return Err("a row is not an array") };
            let mut it = fields.into_iter();
            match (it.next(), it.next(), it.next(), it.next(), it.next()) {
                (
                    Some(Value::Str(name)),
                    Some(Value::Int(p)),
                    Some(Value::Int(idle)),
                    Some(Value::Int(r)),
                    None,
                ) if p >= 0 && idle >= 0 => {
                    let idle = Duration::from_millis(idle as u64);
                    Ok(ConsumerState { name, pending: p as u64, idle, retired: r == 1 })
                }
                _ => Err("a row is not [name, pending, idle, retired]"),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reply to `config`'s retirement fed in every split: each gives the same answer.
    fn reply(config: &Config, bytes: &[u8]) -> Result<Option<Vec<ConsumerState>>, Error> {
        let whole = Retirement::new(config, Duration::ZERO, false).read(bytes);
        for cut in 0..bytes.len() {
            let mut r = Retirement::new(config, Duration::ZERO, false);
            assert_eq!(r.read(&bytes[..cut]), Ok(None), "cut at {cut}");
            assert_eq!(r.read(&bytes[cut..]), whole, "cut at {cut}");
        }
        whole
    }

    #[test]
    fn request_is_the_handshake_then_the_script() {
        let config = Config::new("s", "g", "c").auth(None::<&str>, "pw").client_name("pelican:g:c");
        let r = Retirement::new(&config, Duration::from_secs(60), false);
        let text = String::from_utf8_lossy(r.request());
        assert!(
            text.starts_with("*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n*3\r\n$6\r\nCLIENT\r\n$7\r\nSETNAME\r\n"),
            "{text}"
        );
        assert!(text.ends_with("$1\r\n1\r\n$1\r\ns\r\n$1\r\ng\r\n$5\r\n60000\r\n$6\r\nretire\r\n"), "{text}");
        assert_eq!(r.skip, 2);
        let dry =
            Retirement::new(&Config::new("s", "g", "c").protocol(Protocol::Resp3), Duration::ZERO, true);
        assert!(String::from_utf8_lossy(dry.request()).ends_with("$7\r\ndry-run\r\n"));
        assert_eq!(dry.skip, 1, "HELLO 3");
        let bare = Retirement::script(b"s", b"g", Duration::from_millis(5), true);
        let args: Vec<&[u8]> = bare.args().collect();
        assert_eq!(args[0], b"EVAL");
        assert_eq!(&args[2..], [&b"1"[..], b"s", b"g", b"5", b"dry-run"]);
        assert_eq!(bare.skip, 0);
        assert!(bare.request().starts_with(b"*7\r\n$4\r\nEVAL\r\n"));
    }

    #[test]
    fn replies_in_any_split() {
        let config = Config::new("s", "g", "c").auth(None::<&str>, "pw").no_client_name();
        let rows = reply(
            &config,
            b"+OK\r\n*2\r\n*4\r\n$1\r\nA\r\n:0\r\n:61000\r\n:1\r\n*4\r\n$1\r\nB\r\n:3\r\n:5\r\n:0\r\n",
        );
        let rows = rows.unwrap().unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(
            rows[0],
            ConsumerState { name: "A".into(), pending: 0, idle: Duration::from_secs(61), retired: true }
        );
        assert!(!rows[1].retired && rows[1].pending == 3);
    }

    #[test]
    fn refusals_are_typed() {
        let config = Config::new("s", "g", "c").auth(None::<&str>, "pw");
        let mut r = Retirement::new(&config, Duration::ZERO, false);
        let e = r.read(b"-WRONGPASS invalid username-password pair\r\n").unwrap_err();
        assert!(matches!(e, Error::Server { command: Command::Hello, .. }), "{e:?}");
        let bare = Config::new("s", "g", "c").no_client_name();
        let mut r = Retirement::new(&bare, Duration::ZERO, false);
        let e = r.read(b"-NOGROUP No such key 's' or consumer group 'g'\r\n").unwrap_err();
        assert!(matches!(e, Error::GroupGone { command: Command::Retire, .. }), "{e:?}");
        let mut r = Retirement::new(&bare, Duration::ZERO, false);
        assert!(matches!(r.read(b":1\r\n"), Err(Error::Shape { .. })));
        let mut r = Retirement::new(&bare, Duration::ZERO, false);
        assert!(r.read(b"*1\r\n*3\r\n$1\r\nA\r\n:0\r\n:1\r\n").is_err());
        let mut r = Retirement::new(&bare, Duration::ZERO, false);
        assert!(r.read(b"not resp\r\n").is_err());
    }

    /// The replies captured from every server (`scripts/capture-fixtures`): A holds an
    /// entry and stays, B holds none and goes; a missing group is `GroupGone`.
    #[test]
    fn captured_replies() {
        for flavor in ["redis-6.2", "redis-7.0", "valkey-8.1"] {
            for dir in ["resp2", "resp3"] {
                let load = |name: &str| {
                    let path =
                        format!("{}/tests/fixtures/{flavor}/{dir}/{name}.resp", env!("CARGO_MANIFEST_DIR"));
                    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
                };
                // No handshake to skip: RESP2 without credentials or name sends none.
                let config = Config::new("s7", "g7", "x").no_client_name();
                for name in ["retire_dry_run", "retire"] {
                    let rows = Retirement::new(&config, Duration::ZERO, name == "retire_dry_run")
                        .read(&load(name))
                        .unwrap_or_else(|e| panic!("{flavor} {dir} {name}: {e}"))
                        .unwrap();
                    let summary: Vec<_> = rows.iter().map(|r| (&r.name[..], r.pending, r.retired)).collect();
                    assert_eq!(
                        summary,
                        [(&b"A"[..], 1, false), (&b"B"[..], 0, true)],
                        "{flavor} {dir} {name}"
                    );
                }
                let e = Retirement::new(&config, Duration::ZERO, false)
                    .read(&load("retire_nogroup"))
                    .unwrap_err();
                assert!(
                    matches!(e, Error::GroupGone { command: Command::Retire, .. }),
                    "{flavor} {dir}: {e:?}"
                );
            }
        }
    }
}
