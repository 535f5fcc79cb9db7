//! Retiring consumers that are gone for good, without orphaning a pending entry and without
//! removing one that is still connected.
//!
//! `XGROUP DELCONSUMER` drops the consumer's pending entries with it: no `XAUTOCLAIM` can
//! reach them afterwards. So a consumer is removed only if it has been idle longer than a
//! bound **and** holds nothing **and** no live connection carries its default name
//! (`pelican:<stream>:<group>:<consumer>`, see [`Config::client_name`]), and all three are checked
//! in the same server-side script as the removal: a consumer handed entries between a check
//! and a removal sent separately would lose them.
//!
//! The idle time alone cannot tell a live consumer: on Redis 7.0 `XINFO CONSUMERS` `idle`
//! does not move while a consumer is parked on reads that find nothing (7.2 split it into
//! `idle` and `inactive`), so a consumer parked for a quiet hour looks idle an hour. Its
//! connection is the sign of life; a script cannot run `CLIENT LIST`, so the retirement asks
//! it first, on the same connection (the node serving the stream, in a cluster), and gives
//! the script the names of the connections it found.
//!
//! Sans-IO like the consumer, in two exchanges:
//!
//! 1. write [`Retirement::request`] on a fresh connection: the handshake of the [`Config`]
//!    (credentials, database, protocol; the connection is named `pelican:retire`, never a
//!    consumer's name), then `CLIENT LIST TYPE normal`;
//! 2. feed what comes back to [`Retirement::read`]: once the list has come it answers
//!    [`Step::Send`], the script's command, to write; then, once the script has answered,
//!    [`Step::Done`] with every consumer of the group and what was decided for it.
//!
//! ```
//! # use std::time::Duration;
//! # use pelican::retire::{Retirement, Step};
//! # fn exchange(write: &mut dyn FnMut(&[u8]), read: &mut dyn FnMut() -> Vec<u8>) -> Result<(), pelican::Error> {
//! let config = pelican::Config::new("orders", "billing", "unused");
//! let mut retirement = Retirement::new(&config, Duration::from_secs(86_400), false);
//! write(retirement.request());
//! loop {
//!     match retirement.read(&read())? {
//!         None => {}                                  // more bytes to come
//!         Some(Step::Send(script)) => write(&script), // the connections are known
//!         Some(Step::Done(consumers)) => {
//!             for c in consumers {
//!                 println!("{}: {:?}", String::from_utf8_lossy(&c.name), c.decision);
//!             }
//!             return Ok(());
//!         }
//!     }
//! }
//! # }
//! ```
//!
//! A client that logs in and follows cluster redirects itself uses [`Retirement::script`]
//! and sends [`Retirement::args`] as commands of its own, each reply as RESP2 bytes to
//! [`Retirement::read`]: the list and the script must go to the same node, the one serving
//! the stream. While the stream's slot migrates (`ASK`), both nodes' lists go to
//! [`Retirement::read_lists`] (`pelican_mio::Session::retire` does all of it).

use std::collections::VecDeque;
use std::time::Duration;

use bytes::{Bytes, BytesMut};

use crate::commands;
use crate::config::{default_client_name, Config, Limits, Protocol};
use crate::decimal::Decimal;
use crate::decode::{Decoder, Frame, Value};
use crate::encode::command;
use crate::error::{is_group_gone, Command, Error};
use crate::reply;

/// The script (`EVAL`): `KEYS` = stream; `ARGV` = group, minimum idle in milliseconds,
/// `dry-run` or `retire`, then the names of the live connections. For each consumer of the
/// group (as `XINFO CONSUMERS` lists them): `[name, pending, idle_ms, retired, connected]`;
/// `connected` 1 if its default connection name (`pelican:<stream>:<group>:<consumer>`, each byte
/// outside `!`..`~` as `?`, as [`Config::client_name`] has it) is among the names given;
/// `retired` 1 if it had no pending entry, was idle at least that long and is not connected
/// (then removed, unless a dry run), else 0. Scripts see replies in RESP2, so each consumer
/// is a flat `[field, value, …]` list on every server.
pub const RETIRE_SCRIPT: &str = "\
local live = {}
for i = 4, #ARGV do live[ARGV[i]] = true end
local rows = {}
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local f = {}
  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end
  local named = string.gsub('pelican:' .. KEYS[1] .. ':' .. ARGV[1] .. ':' .. f['name'], '[^!-~]', '?')
  local connected = 0
  if live[named] then connected = 1 end
  local retired = 0
  if f['pending'] == 0 and f['idle'] >= tonumber(ARGV[2]) and connected == 0 then
    retired = 1
    if ARGV[3] ~= 'dry-run' then
      redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], f['name'])
    end
  end
  rows[#rows + 1] = {f['name'], f['pending'], f['idle'], retired, connected}
end
return rows
";

/// The name of a retirement's own connection: no consumer's default name (those have three
/// colons), so it never keeps a consumer as connected nor looks like a consumer's twin.
pub const CLIENT_NAME: &str = "pelican:retire";

/// What was decided for a consumer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decision {
    /// Removed (in a dry run: would be): idle long enough, nothing pending, not connected.
    Retired,
    /// Kept: it holds pending entries ([`ConsumerState::pending`]), which a removal would
    /// drop.
    Pending,
    /// Kept: a live connection carries its default name ([`ConsumerState::connected`]).
    Connected,
    /// Kept: idle less than the bound ([`ConsumerState::idle`]).
    Recent,
}

/// One consumer of the group, as the retirement found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerState {
    /// Its name.
    pub name: Bytes,
    /// Entries it held (its pending list).
    pub pending: u64,
    /// How long since it last read, claimed or acked (the server's `idle`; on Redis 7.0 a
    /// read that found nothing does not count).
    pub idle: Duration,
    /// Whether a live connection carried its default name `pelican:<stream>:<group>:<consumer>`
    /// (a consumer running under another [`Config::client_name`], or none, is not seen).
    pub connected: bool,
    /// What was decided, and why it was kept: the first that holds of
    /// [`Pending`](Decision::Pending), [`Connected`](Decision::Connected),
    /// [`Recent`](Decision::Recent).
    pub decision: Decision,
}

impl ConsumerState {
    /// Removed (or, in a dry run, would be).
    pub fn retired(&self) -> bool {
        self.decision == Decision::Retired
    }
}

/// What to do after a [`Retirement::read`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Write these bytes: the script's command ([`Retirement::args`] encoded), sent once the
    /// live connections are known. Then go on reading.
    Send(Bytes),
    /// Every consumer of the group, with what was decided for it.
    Done(Vec<ConsumerState>),
}

/// A retirement of a group's idle, empty, unconnected consumers on one stream: the requests
/// to send and the reader of their replies.
#[derive(Debug)]
pub struct Retirement {
    group: Bytes,
    /// The script's arguments but the live names: `EVAL`, the script, `1`, stream, group,
    /// min idle, mode.
    script: Vec<Bytes>,
    /// The command to send now, as arguments (the list's, then the script's).
    args: Vec<Bytes>,
    request: Bytes,
    /// The replies still to come, in order.
    expect: VecDeque<Command>,
    decoder: Decoder,
    protocol: Protocol,
    limits: Limits,
}

/// `CLIENT LIST TYPE normal`: the connections of clients (not replicas nor pub/sub ones).
const LIST: [&[u8]; 4] = [b"CLIENT", b"LIST", b"TYPE", b"normal"];

impl Retirement {
    /// Retire the consumers of `config`'s group on its stream idle at least `min_idle` with
    /// nothing pending and no live connection under their default names; with `dry_run`,
    /// only report which would go. Uses the config's stream, group, credentials, database
    /// and protocol; the connection is named [`CLIENT_NAME`] (none if the config has
    /// [`no_client_name`](Config::no_client_name)). The consumer name is not used.
    pub fn new(config: &Config, min_idle: Duration, dry_run: bool) -> Retirement {
        let mut handshake = config.clone();
        if handshake.client_name.is_some() {
            handshake.client_name = Some(Bytes::from_static(CLIENT_NAME.as_bytes()));
        }
        let mut out = BytesMut::new();
        let mut expect: VecDeque<Command> = commands::handshake(&mut out, &handshake).into();
        command(&mut out, &LIST);
        expect.push_back(Command::Connections);
        let ms = Decimal::new(min_idle.as_millis().min(u64::MAX as u128) as u64);
        let mode: &[u8] = if dry_run { b"dry-run" } else { b"retire" };
        let script =
            [b"EVAL", RETIRE_SCRIPT.as_bytes(), b"1", &config.stream, &config.group, ms.as_bytes(), mode]
                .iter()
                .map(|a| Bytes::copy_from_slice(a))
                .collect();
        Retirement {
            group: config.group.clone(),
            script,
            args: LIST.iter().map(|a| Bytes::from_static(a)).collect(),
            request: out.freeze(),
            expect,
            decoder: Decoder::new(config.limits),
            protocol: config.protocol,
            limits: config.limits,
        }
    }

    /// Without the handshake, for a client that logs in and follows cluster redirects
    /// itself: send [`args`](Self::args) as one command and give its reply, as RESP2 bytes,
    /// to [`read`](Self::read), twice (the list, then the script), on the node serving the
    /// stream.
    pub fn script(stream: &[u8], group: &[u8], min_idle: Duration, dry_run: bool) -> Retirement {
        Retirement::new(&Config::new(stream, group, "retire").no_client_name(), min_idle, dry_run)
    }

    /// The bytes to write first, on a fresh connection: the handshake (none for
    /// [`script`](Self::script)), then `CLIENT LIST TYPE normal`.
    pub fn request(&self) -> &[u8] {
        &self.request
    }

    /// The command to send now: `CLIENT LIST TYPE normal` until its reply is read, then the
    /// script's `EVAL <script> 1 <stream> <group> <min idle ms> <dry-run|retire> <names…>`,
    /// the names those of the live connections that a consumer of the group could carry.
    pub fn args(&self) -> impl Iterator<Item = &[u8]> {
        self.args.iter().map(|a| &a[..])
    }

    /// Feeds bytes read from the connection: `Ok(None)` until a reply is whole, then
    /// [`Step::Send`] after the list of connections, [`Step::Done`] after the script.
    /// Errors: the server refused (credentials, `CLIENT LIST` not allowed, no such group or
    /// key: [`Error::Server`] / [`Error::GroupGone`]), or a reply is not RESP or not of the
    /// expected shape.
    pub fn read(&mut self, bytes: &[u8]) -> Result<Option<Step>, Error> {
        self.decoder.extend(bytes);
        loop {
            let frame = self.decoder.next(self.protocol).map_err(|e| e.into_error(self.limits))?;
            let value = match frame {
                None => return Ok(None),
                Some(Frame::Push) => continue,
                Some(Frame::Reply(value)) => value,
                Some(_) => {
                    let command = self.expect.front().copied().unwrap_or(Command::Retire);
                    return Err(Error::Shape { command, detail: "a reply skipped as too large" });
                }
            };
            let Some(command) = self.expect.pop_front() else {
                return Err(Error::Protocol { detail: "a reply after the retirement's last".into() });
            };
            if let Value::Error(message) = &value {
                let text = String::from_utf8_lossy(message).into_owned();
                // 6.2 wraps a script's error: `ERR Error running script … NOGROUP …`.
                let gone = is_group_gone(message)
                    || (command == Command::Retire && message.windows(7).any(|w| w == b"NOGROUP"));
                return Err(if gone {
                    Error::GroupGone { command, message: text }
                } else {
                    Error::Server { command, message: text }
                });
            }
            match command {
                Command::Connections => {
                    let clients =
                        reply::client_list(value).map_err(|e| Error::Shape { command, detail: e.0 })?;
                    return Ok(Some(Step::Send(self.script_command(clients))));
                }
                Command::Retire => {
                    return rows(value)
                        .map(|rows| Some(Step::Done(rows)))
                        .map_err(|detail| Error::Shape { command, detail });
                }
                // The handshake's replies: anything but an error will do.
                _ => {}
            }
        }
    }

    /// [`read`](Self::read) of `CLIENT LIST` replies from several nodes at once, for a
    /// [`script`](Self::script) whose stream's slot is being migrated (a cluster's `ASK`):
    /// what it asks about may be on either node, so the connections of both count. Each
    /// reply whole, in RESP2. Answers the script's command, to send (after `ASKING`) to the
    /// node the stream is moving to; then [`read`](Self::read) its reply.
    pub fn read_lists(&mut self, lists: &[&[u8]]) -> Result<Step, Error> {
        let command = Command::Connections;
        if self.expect.front() != Some(&command) {
            return Err(Error::Protocol { detail: "a list of connections not asked for".into() });
        }
        let mut clients = Vec::new();
        for list in lists {
            let mut decoder = Decoder::new(self.limits);
            decoder.extend(list);
            let value = match decoder.next(Protocol::Resp2).map_err(|e| e.into_error(self.limits))? {
                Some(Frame::Reply(Value::Error(message))) => {
                    let message = String::from_utf8_lossy(&message).into_owned();
                    return Err(Error::Server { command, message });
                }
                Some(Frame::Reply(value)) => value,
                _ => return Err(Error::Shape { command, detail: "not one whole reply" }),
            };
            clients.extend(reply::client_list(value).map_err(|e| Error::Shape { command, detail: e.0 })?);
        }
        self.expect.pop_front();
        Ok(Step::Send(self.script_command(clients)))
    }

    /// The script's command, given the live connections: only the names a consumer of this
    /// group could carry go along, each once.
    fn script_command(&mut self, clients: Vec<reply::Client>) -> Bytes {
        let prefix = default_client_name(&self.script[3], &self.group, b"");
        let mut names: Vec<Bytes> = Vec::new();
        for client in clients {
            if client.name.starts_with(&prefix) && !names.contains(&client.name) {
                names.push(client.name);
            }
        }
        self.args = self.script.iter().cloned().chain(names).collect();
        let mut out = BytesMut::new();
        command(&mut out, &self.args.iter().map(|a| &a[..]).collect::<Vec<_>>());
        self.expect.push_back(Command::Retire);
        out.freeze()
    }
}

/// The script's rows.
fn rows(value: Value) -> Result<Vec<ConsumerState>, &'static str> {
    let Value::Array(rows) = value else { return Err("not an array") };
    rows.into_iter()
        .map(|row| {
            let Value::Array(fields) = row else { return Err("a row is not an array") };
            let mut it = fields.into_iter();
            match (it.next(), it.next(), it.next(), it.next(), it.next(), it.next()) {
                (
                    Some(Value::Str(name)),
                    Some(Value::Int(pending)),
                    Some(Value::Int(idle)),
                    Some(Value::Int(retired @ (0 | 1))),
                    Some(Value::Int(connected @ (0 | 1))),
                    None,
                ) if pending >= 0 && idle >= 0 => {
                    let (pending, connected) = (pending as u64, connected == 1);
                    let decision = if retired == 1 {
                        Decision::Retired
                    } else if pending > 0 {
                        Decision::Pending
                    } else if connected {
                        Decision::Connected
                    } else {
                        Decision::Recent
                    };
                    let idle = Duration::from_millis(idle as u64);
                    Ok(ConsumerState { name, pending, idle, connected, decision })
                }
                _ => Err("a row is not [name, pending, idle, retired, connected]"),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `CLIENT LIST` reply (RESP2) of connections with these names.
    fn listing(names: &[&[u8]]) -> Vec<u8> {
        let mut text = Vec::new();
        for (i, name) in names.iter().enumerate() {
            text.extend_from_slice(
                format!("id={} addr=127.0.0.1:{} laddr=127.0.0.1:6379 fd=8 name=", i + 3, 40000 + i)
                    .as_bytes(),
            );
            text.extend_from_slice(name);
            text.extend_from_slice(b" age=1 idle=0 flags=N db=0 cmd=xreadgroup\n");
        }
        let mut out = format!("${}\r\n", text.len()).into_bytes();
        out.extend_from_slice(&text);
        out.extend_from_slice(b"\r\n");
        out
    }

    /// Feeds `bytes` whole and in every split to retirements brought to the same point by
    /// `prepare`: each gives the same answer.
    fn in_any_split(prepare: &dyn Fn() -> Retirement, bytes: &[u8]) -> Result<Option<Step>, Error> {
        let whole = prepare().read(bytes);
        for cut in 0..bytes.len() {
            let mut r = prepare();
            assert_eq!(r.read(&bytes[..cut]), Ok(None), "cut at {cut}");
            assert_eq!(r.read(&bytes[cut..]), whole, "cut at {cut}");
        }
        whole
    }

    /// The script's command's arguments after the group's name: min idle, mode, names.
    fn script_tail(r: &Retirement) -> Vec<Vec<u8>> {
        r.args().skip(5).map(|a| a.to_vec()).collect()
    }

    #[test]
    fn request_is_the_handshake_then_the_list_of_connections() {
        let config = Config::new("s", "g", "c").auth(None::<&str>, "pw");
        let r = Retirement::new(&config, Duration::from_secs(60), false);
        assert_eq!(
            r.request(),
            b"*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n*3\r\n$6\r\nCLIENT\r\n$7\r\nSETNAME\r\n$14\r\npelican:retire\r\n\
              *4\r\n$6\r\nCLIENT\r\n$4\r\nLIST\r\n$4\r\nTYPE\r\n$6\r\nnormal\r\n"
        );
        assert_eq!(r.expect, [Command::Auth, Command::SetName, Command::Connections]);
        assert_eq!(r.args().collect::<Vec<_>>(), LIST);
        // Never the consumer's own name, nor a custom one: the retirement is no consumer.
        let custom = Config::new("s", "g", "c").client_name("billing-w1").protocol(Protocol::Resp3);
        let text =
            String::from_utf8_lossy(Retirement::new(&custom, Duration::ZERO, true).request()).into_owned();
        assert!(
            text.starts_with("*4\r\n$5\r\nHELLO\r\n$1\r\n3\r\n$7\r\nSETNAME\r\n$14\r\npelican:retire\r\n"),
            "{text}"
        );
        let bare = Retirement::script(b"s", b"g", Duration::from_millis(5), true);
        assert_eq!(bare.request(), b"*4\r\n$6\r\nCLIENT\r\n$4\r\nLIST\r\n$4\r\nTYPE\r\n$6\r\nnormal\r\n");
        assert_eq!(bare.expect, [Command::Connections]);
    }

    #[test]
    fn the_script_gets_the_names_a_consumer_of_the_group_could_carry() {
        let prepare = || {
            Retirement::new(&Config::new("s", "g", "c").no_client_name(), Duration::from_millis(1500), false)
        };
        let list = listing(&[
            b"pelican:s:g:A",
            b"pelican:retire",
            b"",
            b"pelican:other:B",
            b"pelican:s:g",
            b"pelican:s:g:A",
            b"pelican:s:g:B?x",
            b"pelican:s:gg:C",
        ]);
        let Ok(Some(Step::Send(script))) = in_any_split(&prepare, &list) else { panic!() };
        let mut r = prepare();
        assert_eq!(r.read(&list), Ok(Some(Step::Send(script.clone()))));
        let tail = script_tail(&r);
        assert_eq!(tail, [&b"1500"[..], b"retire", b"pelican:s:g:A", b"pelican:s:g:B?x"].map(|a| a.to_vec()));
        let mut encoded = BytesMut::new();
        command(&mut encoded, &r.args().collect::<Vec<_>>());
        assert_eq!(script, encoded, "Send holds the args, encoded");
        assert!(script.starts_with(b"*9\r\n$4\r\nEVAL\r\n"));
        assert_eq!(r.expect, [Command::Retire]);
        // A group name with bytes a connection name cannot hold: matched as `?`.
        let odd = || Retirement::script(b"s", b"g x\xff", Duration::ZERO, true);
        let mut r = odd();
        r.read(&listing(&[b"pelican:s:g?x?:c", b"pelican:s:g x:c"])).unwrap();
        assert_eq!(script_tail(&r), [&b"0"[..], b"dry-run", b"pelican:s:g?x?:c"].map(|a| a.to_vec()));
        // RESP3: the list is a verbatim string.
        let mut r =
            Retirement::new(&Config::new("s", "g", "c").protocol(Protocol::Resp3), Duration::ZERO, false);
        let hello = b"%1\r\n$6\r\nserver\r\n$5\r\nredis\r\n";
        let text = b"txt:id=4 addr=127.0.0.1:5 name=pelican:s:g:c age=0\n";
        let verbatim = [format!("={}\r\n", text.len()).as_bytes(), text, b"\r\n"].concat();
        assert!(matches!(r.read(&[&hello[..], &verbatim].concat()), Ok(Some(Step::Send(_)))));
        assert_eq!(script_tail(&r)[2..], [b"pelican:s:g:c".to_vec()]);
    }

    #[test]
    fn rows_say_what_was_decided_and_why() {
        let prepare = || {
            let mut r = Retirement::script(b"s", b"g", Duration::from_secs(60), false);
            r.read(&listing(&[b"pelican:s:g:C"])).unwrap();
            r
        };
        let row = |name: &str, pending: i64, idle: i64, retired: i64, connected: i64| {
            format!(
                "*5\r\n${}\r\n{name}\r\n:{pending}\r\n:{idle}\r\n:{retired}\r\n:{connected}\r\n",
                name.len()
            )
        };
        let reply = format!(
            "*5\r\n{}{}{}{}{}",
            row("A", 0, 61_000, 1, 0),
            row("B", 3, 90_000, 0, 1),
            row("C", 0, 90_000, 0, 1),
            row("D", 0, 5, 0, 0),
            row("E", 2, 5, 0, 0),
        );
        let Ok(Some(Step::Done(rows))) = in_any_split(&prepare, reply.as_bytes()) else { panic!() };
        let state = |name: &str, pending, idle, connected, decision| ConsumerState {
            name: Bytes::copy_from_slice(name.as_bytes()),
            pending,
            idle: Duration::from_millis(idle),
            connected,
            decision,
        };
        assert_eq!(
            rows,
            [
                state("A", 0, 61_000, false, Decision::Retired),
                state("B", 3, 90_000, true, Decision::Pending),
                state("C", 0, 90_000, true, Decision::Connected),
                state("D", 0, 5, false, Decision::Recent),
                state("E", 2, 5, false, Decision::Pending),
            ]
        );
        assert!(rows[0].retired() && !rows[2].retired());
        // Nothing comes after the script's reply.
        let mut r = prepare();
        r.read(b"*0\r\n").unwrap();
        assert!(matches!(r.read(b"*0\r\n"), Err(Error::Protocol { .. })));
    }

    #[test]
    fn refusals_and_odd_replies_are_typed() {
        let config = Config::new("s", "g", "c").auth(None::<&str>, "pw");
        let mut r = Retirement::new(&config, Duration::ZERO, false);
        let e = r.read(b"-WRONGPASS invalid username-password pair\r\n").unwrap_err();
        assert!(matches!(e, Error::Server { command: Command::Auth, .. }), "{e:?}");
        // An ACL that refuses CLIENT LIST: no retirement without knowing who is connected.
        let mut r = Retirement::new(&config, Duration::ZERO, false);
        let e = r
            .read(b"+OK\r\n+OK\r\n-NOPERM User u has no permissions to run the 'client|list' command\r\n")
            .unwrap_err();
        assert!(matches!(e, Error::Server { command: Command::Connections, .. }), "{e:?}");
        assert!(e.to_string().contains("CLIENT LIST"), "{e}");
        let listed = || {
            let mut r = Retirement::script(b"s", b"g", Duration::ZERO, false);
            r.read(&listing(&[])).unwrap();
            r
        };
        let e = listed().read(b"-NOGROUP No such key 's' or consumer group 'g'\r\n").unwrap_err();
        assert!(matches!(e, Error::GroupGone { command: Command::Retire, .. }), "{e:?}");
        let e = listed()
            .read(b"-ERR Error running script (call to f_1): @user_script:5: NOGROUP No such key\r\n");
        assert!(matches!(e, Err(Error::GroupGone { command: Command::Retire, .. })), "{e:?}");
        for bad in [
            &b":1\r\n"[..],
            b"*1\r\n*4\r\n$1\r\nA\r\n:0\r\n:1\r\n:0\r\n",
            b"*1\r\n*5\r\n$1\r\nA\r\n:0\r\n:1\r\n:2\r\n:0\r\n",
            b"*1\r\n*5\r\n$1\r\nA\r\n:-1\r\n:1\r\n:0\r\n:0\r\n",
            b"*1\r\n*6\r\n$1\r\nA\r\n:0\r\n:1\r\n:0\r\n:0\r\n:0\r\n",
        ] {
            assert!(
                matches!(listed().read(bad), Err(Error::Shape { command: Command::Retire, .. })),
                "{bad:?}"
            );
        }
        let mut r = Retirement::script(b"s", b"g", Duration::ZERO, false);
        assert!(matches!(r.read(b":3\r\n"), Err(Error::Shape { command: Command::Connections, .. })));
        let mut r = Retirement::script(b"s", b"g", Duration::ZERO, false);
        assert!(r.read(b"not resp\r\n").is_err());
    }

    /// A stream whose slot migrates: the lists of both nodes count, the names a consumer of
    /// the group could carry each once, whichever node listed them.
    #[test]
    fn lists_of_two_nodes_make_one_script() {
        let mut r = Retirement::script(b"s", b"g", Duration::ZERO, false);
        let here = listing(&[b"pelican:s:g:A", b"pelican:s:g:B"]);
        let there = listing(&[b"pelican:s:g:B", b"pelican:s:g:C", b"pelican:other:D"]);
        let Ok(Step::Send(script)) = r.read_lists(&[&here, &there]) else { panic!() };
        assert_eq!(
            script_tail(&r)[2..],
            [&b"pelican:s:g:A"[..], b"pelican:s:g:B", b"pelican:s:g:C"].map(|n| n.to_vec())
        );
        assert!(script.starts_with(b"*10\r\n$4\r\nEVAL\r\n"));
        assert!(matches!(r.read(b"*0\r\n"), Ok(Some(Step::Done(rows))) if rows.is_empty()));
        // One list is a plain read; a refusal is the server's; a list not asked for is not taken.
        let mut r = Retirement::script(b"s", b"g", Duration::ZERO, false);
        let e = r.read_lists(&[&here, b"-NOPERM no CLIENT LIST for you\r\n"]).unwrap_err();
        assert!(matches!(e, Error::Server { command: Command::Connections, .. }), "{e:?}");
        let mut r = Retirement::script(b"s", b"g", Duration::ZERO, false);
        r.read_lists(&[&here]).unwrap();
        assert!(matches!(r.read_lists(&[&here]), Err(Error::Protocol { .. })));
    }

    /// The replies captured from every server (`scripts/capture-fixtures`): the capture's
    /// own connection is named `pelican:s7:g7:A` (the retirement's is never a consumer's name,
    /// so this stands for a live consumer A); C and `E\xff x` (connection
    /// `pelican:s7:g7:E??x`, as the script computes it too) have live connections, B none. A
    /// holds an entry and stays, B holds none and goes, C and `E\xff x` are kept as
    /// connected; a missing group is `GroupGone`.
    #[test]
    fn captured_replies() {
        for flavor in ["redis-6.2", "redis-7.0", "valkey-8.1", "redis-8.10"] {
            for (dir, protocol) in [("resp2", Protocol::Resp2), ("resp3", Protocol::Resp3)] {
                let load = |name: &str| {
                    let path =
                        format!("{}/tests/fixtures/{flavor}/{dir}/{name}.resp", env!("CARGO_MANIFEST_DIR"));
                    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
                };
                // No handshake to skip: RESP2 without credentials or name sends none; in
                // RESP3 the capture's HELLO 3 was sent before.
                let config = Config::new("s7", "g7", "x").no_client_name();
                for name in ["retire_dry_run", "retire"] {
                    let mut r = Retirement::new(&config, Duration::ZERO, name == "retire_dry_run");
                    r.protocol = protocol;
                    let step =
                        r.read(&load("retire_client_list")).unwrap_or_else(|e| panic!("{flavor} {dir}: {e}"));
                    assert!(matches!(step, Some(Step::Send(_))), "{flavor} {dir}");
                    // What the capture sent, as the core would.
                    assert_eq!(
                        script_tail(&r)[2..],
                        [&b"pelican:s7:g7:A"[..], b"pelican:s7:g7:C", b"pelican:s7:g7:E??x"]
                            .map(|n| n.to_vec()),
                        "{flavor} {dir}"
                    );
                    let Some(Step::Done(rows)) =
                        r.read(&load(name)).unwrap_or_else(|e| panic!("{flavor} {dir} {name}: {e}"))
                    else {
                        panic!("{flavor} {dir} {name}")
                    };
                    let summary: Vec<_> = rows.iter().map(|r| (&r.name[..], r.pending, r.decision)).collect();
                    assert_eq!(
                        summary,
                        [
                            (&b"A"[..], 1, Decision::Pending),
                            (&b"B"[..], 0, Decision::Retired),
                            (&b"C"[..], 0, Decision::Connected),
                            (&b"E\xff x"[..], 0, Decision::Connected),
                        ],
                        "{flavor} {dir} {name}"
                    );
                    assert_eq!(
                        rows.iter().map(|r| r.connected).collect::<Vec<_>>(),
                        [true, false, true, true]
                    );
                }
                let mut r = Retirement::script(b"s7", b"nosuchgroup", Duration::ZERO, false);
                r.protocol = protocol;
                r.read(&load("retire_client_list")).unwrap();
                let e = r.read(&load("retire_nogroup")).unwrap_err();
                assert!(
                    matches!(e, Error::GroupGone { command: Command::Retire, .. }),
                    "{flavor} {dir}: {e:?}"
                );
            }
        }
    }
}
