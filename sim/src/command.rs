//! Argument parsing and dispatch: one function per command, each answering a [`Reply`] (or
//! asking to park, for `XREADGROUP … BLOCK`) with the real servers' shapes and error texts.

use bytes::Bytes;

use crate::conn::{Blocked, Conn, ConnId};
use crate::id::{parse_i64, EntryId};
use crate::model::{
    ClaimOptions as Options, Claimed, Db, Fields, Group, NewId, Refs, Stream, Trim, MAX_COUNT,
};
use crate::options::{ClaimShape, SimOptions};
use crate::replication::{is_write, wait_answer, Replica, Waiting, READONLY};
use crate::reply::{Protocol, Reply};

/// What executing a command produced.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Answer now.
    Reply(Reply),
    /// Park the connection (`XREADGROUP … BLOCK … >` with nothing new).
    Block(Blocked),
    /// Park the connection until the replica has its writes (`WAIT`, `WAITAOF`).
    Wait(Waiting),
    /// Answer, then close the connection (`QUIT`).
    Close(Reply),
}

/// A change that parked readers of a key must look at.
#[derive(Clone, Debug)]
pub(crate) enum Signal {
    /// Entries were added to the key.
    Added(Vec<u8>),
    /// Pending entries of the key were released (`XNACK`): parked `CLAIM` reads look again.
    Released(Vec<u8>),
    /// The key was deleted.
    Deleted(Vec<u8>),
    /// The group was destroyed: (key, group).
    GroupDestroyed(Vec<u8>, Vec<u8>),
}

/// Everything a command may look at or change.
pub(crate) struct Ctx<'a> {
    pub(crate) db: &'a mut Db,
    /// The script cache of the node it runs on.
    pub(crate) scripts: &'a mut crate::script::Scripts,
    pub(crate) options: &'a SimOptions,
    pub(crate) now: u64,
    pub(crate) conn: &'a mut Conn,
    pub(crate) conn_id: ConnId,
    pub(crate) signals: &'a mut Vec<Signal>,
    /// Every connection (id, name, idle ms), for `CLIENT LIST`: gathered only for it.
    pub(crate) clients: Vec<(u64, Option<Vec<u8>>, u64)>,
    /// The replica, if the server has one and the command runs on the master.
    pub(crate) replica: Option<&'a mut Replica>,
    /// Where the command runs, as replication sees it.
    pub(crate) node: NodeView,
}

/// What a command knows of replication where it runs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NodeView {
    /// It runs on the replica, on its copy of the data.
    pub(crate) on_replica: bool,
    /// The replication offset: the master's on the master, the replica's on the replica.
    pub(crate) offset: u64,
    /// The other node's address: the replica's on the master, the master's on the replica.
    pub(crate) peer: (&'static str, u16),
    /// Whether the replica's link to the master is up.
    pub(crate) link_up: bool,
}

pub(crate) const SYNTAX: &str = "ERR syntax error";
pub(crate) const NOT_INT: &str = "ERR value is not an integer or out of range";
const BAD_ID: &str = "ERR Invalid stream ID specified as stream command argument";

pub(crate) type CmdResult = Result<Outcome, String>;

pub(crate) fn reply(r: Reply) -> CmdResult {
    Ok(Outcome::Reply(r))
}

fn int(n: usize) -> CmdResult {
    reply(Reply::Int(n as i64))
}

pub(crate) fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub(crate) fn eq(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

fn strict_id(arg: &[u8]) -> Result<EntryId, String> {
    EntryId::parse_strict(arg, 0).ok_or_else(|| BAD_ID.to_string())
}

fn int_arg(arg: &[u8]) -> Result<i64, String> {
    parse_i64(arg).ok_or_else(|| NOT_INT.to_string())
}

/// `-NOGROUP …` as `XREADGROUP` words it.
pub(crate) fn nogroup_read(key: &[u8], group: &[u8]) -> String {
    format!(
        "NOGROUP No such key '{}' or consumer group '{}' in XREADGROUP with GROUP option",
        lossy(key),
        lossy(group)
    )
}

/// The arity of a known command (counting its name): positive is exact, negative a minimum.
fn arity(name: &str) -> Option<i64> {
    Some(match name {
        "ping" | "hello" | "flushall" | "flushdb" | "quit" => -1,
        "auth" | "client" | "del" | "xgroup" | "xinfo" => -2,
        "select" | "xlen" => 2,
        "xadd" => -5,
        "xreadgroup" => -7,
        "xautoclaim" => -6,
        "xclaim" => -6,
        "xrange" => -4,
        "eval" => -3,
        "xack" => -4,
        "xpending" | "xdel" => -3,
        "xtrim" => -4,
        "xnack" => -7,
        "xackdel" => -6,
        "xcfgset" => -2,
        "wait" => 3,
        "waitaof" => 4,
        "role" => 1,
        "set" => -3,
        "get" | "hgetall" | "type" => 2,
        "incrby" => 3,
        "hset" => -4,
        "hincrby" => 4,
        "hget" => 3,
        "exists" | "script" => -2,
        "evalsha" => -3,
        _ => return None,
    })
}

/// The stream key a stream command names, if it names one: the command answers
/// `WRONGTYPE` when the key holds a string or a hash (checked before its other arguments).
fn stream_key<'a>(name: &str, args: &'a [Vec<u8>]) -> Option<&'a [u8]> {
    let at = match name {
        "xadd" | "xlen" | "xrange" | "xack" | "xpending" | "xdel" | "xtrim" | "xautoclaim" | "xclaim"
        | "xnack" | "xackdel" | "xcfgset" => 1,
        "xgroup" | "xinfo" => 2,
        "xreadgroup" => 1 + args.iter().position(|a| eq(a, "STREAMS"))?,
        _ => return None,
    };
    args.get(at).map(Vec::as_slice)
}

/// Runs one command.
pub(crate) fn execute(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Outcome {
    let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
    // The Redis 8 verbs are unknown commands to the servers that do not speak them.
    let spoken = match name.as_str() {
        "xnack" => ctx.options.redis8.nack,
        "xackdel" => ctx.options.redis8.ackdel,
        "xcfgset" => ctx.options.redis8.idmp,
        "waitaof" => ctx.options.waits_aof(),
        _ => true,
    };
    let Some(arity) = arity(&name).filter(|_| spoken) else {
        // Redis 6.2 quotes with backticks and separates with commas; later servers do not.
        let old = ctx.options.server_version.starts_with("6.");
        let (q, sep) = if old { ('`', ",") } else { ('\'', "") };
        let mut text = format!("ERR unknown command {q}{}{q}, with args beginning with: ", lossy(&args[0]));
        for a in args.iter().skip(1).take(16) {
            text.push_str(&format!("{q}{}{q}{sep} ", lossy(a)));
        }
        return Outcome::Reply(Reply::err(text));
    };
    let argc = args.len() as i64;
    if (arity > 0 && argc != arity) || (arity < 0 && argc < -arity) {
        return Outcome::Reply(Reply::err(format!("ERR wrong number of arguments for '{name}' command")));
    }
    if !ctx.conn.authed && !matches!(name.as_str(), "auth" | "hello" | "quit") {
        return Outcome::Reply(Reply::err("NOAUTH Authentication required."));
    }
    // A replica looks an `EVALSHA`'s script up first (an unknown one is `NOSCRIPT`).
    if ctx.node.on_replica && is_write(&name) && name != "evalsha" {
        return Outcome::Reply(Reply::err(READONLY));
    }
    if let Some(key) = stream_key(&name, args) {
        ctx.db.expire(key, ctx.now);
        if ctx.db.holds_other(key, ctx.now) {
            return Outcome::Reply(Reply::err(crate::kv::WRONGTYPE));
        }
    }
    let result = match name.as_str() {
        "ping" => ping(args),
        "quit" => Ok(Outcome::Close(Reply::ok())),
        "hello" => hello(ctx, args),
        "auth" => auth(ctx, args),
        "client" => client(ctx, args),
        "select" => match parse_i64(&args[1]) {
            Some(0) => reply(Reply::ok()),
            Some(_) => Err("ERR DB index is out of range".into()),
            None => Err(NOT_INT.into()),
        },
        "flushall" | "flushdb" => {
            let keys: Vec<Vec<u8>> = ctx.db.streams.keys().cloned().collect();
            ctx.db.streams.clear();
            ctx.db.values.clear();
            ctx.signals.extend(keys.into_iter().map(Signal::Deleted));
            reply(Reply::ok())
        }
        "del" => {
            let mut n = 0;
            for key in &args[1..] {
                if ctx.db.streams.remove(key).is_some() {
                    ctx.signals.push(Signal::Deleted(key.clone()));
                    n += 1;
                } else if ctx.db.value(key, ctx.now).is_some() {
                    ctx.db.values.remove(key);
                    n += 1;
                } else {
                    ctx.db.values.remove(key); // expired: gone already
                }
            }
            int(n)
        }
        "xlen" => int(ctx.db.streams.get(&args[1]).map_or(0, |s| s.entries.len())),
        "xadd" => xadd(ctx, args),
        "xgroup" => xgroup(ctx, args),
        "xreadgroup" => xreadgroup(ctx, args),
        "xautoclaim" => xautoclaim(ctx, args),
        "xclaim" => xclaim(ctx, args),
        "xrange" => xrange(ctx, args),
        "eval" => eval(ctx, args),
        "xack" => xack(ctx, args),
        "xpending" => xpending(ctx, args),
        "xdel" => xdel(ctx, args),
        "xtrim" => xtrim(ctx, args),
        "xinfo" => xinfo(ctx, args),
        "xnack" => xnack(ctx, args),
        "xackdel" => xackdel(ctx, args),
        "xcfgset" => xcfgset(ctx, args),
        "wait" | "waitaof" => wait(ctx, args),
        "role" => reply(role(ctx)),
        "set" => crate::kv::set(ctx, args),
        "get" => crate::kv::get(ctx, args),
        "incrby" => crate::kv::incrby(ctx, args),
        "hset" => crate::kv::hset(ctx, args),
        "hincrby" => crate::kv::hincrby(ctx, args),
        "hget" => crate::kv::hget(ctx, args),
        "hgetall" => crate::kv::hgetall(ctx, args),
        "type" => crate::kv::kind(ctx, args),
        "exists" => crate::kv::exists(ctx, args),
        "script" => crate::script::script(ctx, args),
        "evalsha" => crate::script::evalsha(ctx, args),
        _ => Err(format!("ERR unknown command '{name}'")),
    };
    result.unwrap_or_else(|e| Outcome::Reply(Reply::err(e)))
}

/// `WAIT numreplicas timeout` and `WAITAOF numlocal numreplicas timeout`: counts the
/// replicas that have every write of this connection so far. A replica whose link is up has
/// them at once (it catches up: a healthy replica acknowledges within a round trip, taken as
/// no time); one cut off does not, and the command parks until the link is back or the
/// timeout (0: for ever), as the servers wait. Without a replica: 0, after the timeout when
/// one was asked for. The local append-only file counts as written: the model's restarts are
/// those of `appendfsync always`. A replica refuses both, with the servers' words.
fn wait(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> CmdResult {
    let aof = args.len() == 4;
    if ctx.node.on_replica {
        return Err(match (aof, ctx.options.server_name == "valkey") {
            (true, _) => {
                "ERR WAITAOF cannot be used with replica instances. Please also note that writes to \
                          replicas are just local and are not propagated."
                    .into()
            }
            (false, valkey) => format!(
                "ERR WAIT cannot be used with replica instances. Please also note that {}if a replica is \
                 configured to be writable (which is not the default) writes to replicas are just local \
                 and are not propagated.",
                if valkey { "" } else { "since Redis 4.0 " }
            ),
        });
    }
    let numbers: Option<Vec<i64>> = args[1..].iter().map(|a| parse_i64(a)).collect();
    let numbers = numbers.ok_or(NOT_INT)?;
    let timeout = numbers[numbers.len() - 1];
    if timeout < 0 {
        return Err("ERR timeout is negative".into());
    }
    let replicas = numbers[numbers.len() - 2].max(0) as u64;
    let local = aof.then(|| numbers[0].max(0) as u64);
    let wrote = ctx.conn.last_write;
    let have = match ctx.replica.as_deref_mut() {
        Some(replica) => {
            if replica.link_up && replica.offset < ctx.node.offset {
                replica.copy(ctx.db, ctx.node.offset, ctx.now);
            }
            u64::from(replica.offset >= wrote)
        }
        None => 0,
    };
    if have >= replicas && local.map_or(true, |l| l <= 1) {
        return reply(wait_answer(aof, have));
    }
    let deadline = (timeout > 0).then(|| ctx.now.saturating_add(timeout as u64));
    Ok(Outcome::Wait(Waiting { replicas, local, deadline, order: 0 }))
}

/// `ROLE`: on the master `[master, offset, [[host, port, offset]]]` (the replica's, if it
/// has one; strings inside), on the replica `[slave, host, port, state, offset]`.
fn role(ctx: &Ctx<'_>) -> Reply {
    let (host, port) = ctx.node.peer;
    if ctx.node.on_replica {
        let state = if ctx.node.link_up { "connected" } else { "connect" };
        return Reply::Array(vec![
            Reply::text("slave"),
            Reply::text(host),
            Reply::Int(i64::from(port)),
            Reply::text(state),
            Reply::Int(ctx.node.offset as i64),
        ]);
    }
    let replicas = match &ctx.replica {
        Some(r) => vec![Reply::Array(vec![
            Reply::text(host),
            Reply::text(&port.to_string()),
            Reply::text(&r.offset.to_string()),
        ])],
        None => Vec::new(),
    };
    Reply::Array(vec![Reply::text("master"), Reply::Int(ctx.node.offset as i64), Reply::Array(replicas)])
}

fn ping(args: &[Vec<u8>]) -> CmdResult {
    match args.len() {
        1 => reply(Reply::Simple("PONG")),
        2 => reply(Reply::Bulk(args[1].clone())),
        _ => Err("ERR wrong number of arguments for 'ping' command".into()),
    }
}

/// Checks `user`/`pass` against the `default` user.
fn check_auth(options: &SimOptions, user: &[u8], pass: &[u8]) -> Result<(), String> {
    let ok = user == b"default" && options.requirepass.as_ref().map_or(true, |p| p.as_bytes() == pass);
    if ok {
        Ok(())
    } else {
        Err("WRONGPASS invalid username-password pair or user is disabled.".into())
    }
}

fn auth(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> CmdResult {
    match args.len() {
        2 => {
            if ctx.options.requirepass.is_none() {
                return Err("ERR AUTH <password> called without any password configured for the default \
                            user. Are you sure your configuration is correct?"
                    .into());
            }
            check_auth(ctx.options, b"default", &args[1])?;
        }
        3 => check_auth(ctx.options, &args[1], &args[2])?,
        _ => return Err(SYNTAX.into()),
    }
    ctx.conn.authed = true;
    reply(Reply::ok())
}

fn valid_name(name: &[u8]) -> bool {
    name.iter().all(|&b| (b'!'..=b'~').contains(&b))
}

fn hello(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> CmdResult {
    let mut proto = None;
    let mut i = 1;
    if args.len() >= 2 {
        match parse_i64(&args[1]) {
            Some(2) => proto = Some(Protocol::Resp2),
            Some(3) => proto = Some(Protocol::Resp3),
            Some(_) => return Err("NOPROTO unsupported protocol version".into()),
            None => return Err("ERR Protocol version is not an integer or out of range".into()),
        }
        i = 2;
    }
    let mut creds = None;
    let mut name = None;
    while i < args.len() {
        let more = args.len() - 1 - i;
        if eq(&args[i], "AUTH") && more >= 2 {
            creds = Some((&args[i + 1], &args[i + 2]));
            i += 3;
        } else if eq(&args[i], "SETNAME") && more >= 1 {
            name = Some(&args[i + 1]);
            i += 2;
        } else {
            return Err(format!("ERR Syntax error in HELLO option '{}'", lossy(&args[i])));
        }
    }
    if let Some((user, pass)) = creds {
        check_auth(ctx.options, user, pass)?;
        ctx.conn.authed = true;
    }
    if !ctx.conn.authed {
        return Err("NOAUTH HELLO must be called with the client already authenticated, otherwise the \
                    HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and \
                    select the RESP protocol version at the same time"
            .into());
    }
    if let Some(name) = name {
        if !valid_name(name) {
            return Err("ERR Client names cannot contain spaces, newlines or special characters.".into());
        }
        ctx.conn.name = Some(name.clone()).filter(|n| !n.is_empty());
    }
    if let Some(p) = proto {
        ctx.conn.proto = p;
    }
    let proto_num = if ctx.conn.proto == Protocol::Resp3 { 3 } else { 2 };
    reply(Reply::Map(vec![
        (Reply::text("server"), Reply::text(&ctx.options.server_name)),
        (Reply::text("version"), Reply::text(&ctx.options.server_version)),
        (Reply::text("proto"), Reply::Int(proto_num)),
        (Reply::text("id"), Reply::Int(ctx.conn_id.client_id() as i64)),
        (Reply::text("mode"), Reply::text("standalone")),
        (Reply::text("role"), Reply::text(if ctx.node.on_replica { "replica" } else { "master" })),
        (Reply::text("modules"), Reply::Array(Vec::new())),
    ]))
}

fn client(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> CmdResult {
    let sub = &args[1];
    if eq(sub, "ID") && args.len() == 2 {
        reply(Reply::Int(ctx.conn_id.client_id() as i64))
    } else if eq(sub, "SETNAME") && args.len() == 3 {
        if !valid_name(&args[2]) {
            return Err("ERR Client names cannot contain spaces, newlines or special characters.".into());
        }
        ctx.conn.name = Some(args[2].clone()).filter(|n| !n.is_empty());
        reply(Reply::ok())
    } else if eq(sub, "GETNAME") && args.len() == 2 {
        reply(ctx.conn.name.clone().map_or(Reply::NilBulk, Reply::Bulk))
    } else if eq(sub, "LIST") && (args.len() == 2 || (args.len() == 4 && eq(&args[2], "TYPE"))) {
        // One line per client, the fields pelican reads (real servers list more).
        let mut text = Vec::new();
        for (id, name, idle_ms) in &ctx.clients {
            let name = name.as_deref().unwrap_or_default();
            text.extend(format!("id={id} addr=sim:{id} laddr=sim:0 fd={id} name=").into_bytes());
            text.extend_from_slice(name);
            text.extend(format!(" age=0 idle={} flags=N db=0\n", idle_ms / 1000).into_bytes());
        }
        reply(Reply::Bulk(text))
    } else {
        Err(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try CLIENT HELP.",
            lossy(sub)
        ))
    }
}

/// The options of `XADD`/`XTRIM` before the id.
struct AddOptions {
    trim: Option<Trim>,
    nomkstream: bool,
    /// `KEEPREF|DELREF|ACKED` (Redis 8); `KEEPREF` when not given.
    refs: Refs,
    /// `IDMP pid iid` (`Some(iid)`) or `IDMPAUTO pid` (`None`) (Redis 8.6).
    idmp: Option<(Vec<u8>, Option<Vec<u8>>)>,
    /// `~`: whole nodes only, removing at most `limit` entries (0: no limit).
    approx: bool,
    limit: u64,
    /// The index of the first argument after them (`XADD`'s id).
    next: usize,
}

/// Parses the options of `XADD`/`XTRIM` from `args[i]` on, in the servers' order.
fn trim_options(
    args: &[Vec<u8>],
    mut i: usize,
    xadd: bool,
    options: &SimOptions,
) -> Result<AddOptions, String> {
    let verbs = options.redis8;
    let mut trim = None;
    let mut nomkstream = false;
    let mut approx = false;
    let mut limit = None;
    let mut refs = None;
    let mut idmp: Option<(Vec<u8>, Option<Vec<u8>>)> = None;
    while i < args.len() {
        let more = args.len() - 1 - i;
        let opt = &args[i];
        let refs_word = ["KEEPREF", "DELREF", "ACKED"].into_iter().find(|w| eq(opt, w));
        if xadd && opt.as_slice() == b"*" {
            break;
        } else if (eq(opt, "MAXLEN") || eq(opt, "MINID")) && more > 0 {
            if trim.is_some() {
                return Err(
                    "ERR syntax error, MAXLEN and MINID options at the same time are not compatible".into()
                );
            }
            approx = false;
            if more >= 2 && (args[i + 1] == b"~" || args[i + 1] == b"=") {
                approx = args[i + 1] == b"~";
                i += 1;
            }
            let value = &args[i + 1];
            trim = Some(if eq(opt, "MAXLEN") {
                let n = int_arg(value)?;
                if n < 0 {
                    return Err("ERR The MAXLEN argument must be >= 0.".into());
                }
                Trim::MaxLen(n as u64)
            } else {
                Trim::MinId(strict_id(value)?)
            });
            i += 2;
        } else if eq(opt, "LIMIT") && more > 0 {
            let n = int_arg(&args[i + 1])?;
            if n < 0 {
                return Err("ERR The LIMIT argument must be >= 0.".into());
            }
            limit = Some(n as u64);
            i += 2;
        } else if verbs.ackdel && refs.is_none() && refs_word.is_some() {
            refs = Some(match refs_word {
                Some("DELREF") => Refs::Delete,
                Some("ACKED") => Refs::Acked,
                _ => Refs::Keep,
            });
            i += 1;
        } else if xadd && eq(opt, "NOMKSTREAM") {
            nomkstream = true;
            i += 1;
        } else if xadd && verbs.idmp && (eq(opt, "IDMPAUTO") && more > 0 || eq(opt, "IDMP") && more >= 2) {
            let auto = eq(opt, "IDMPAUTO");
            let word = if auto { "IDMPAUTO" } else { "IDMP" };
            if idmp.is_some() {
                return Err("ERR syntax error, IDMP/IDMPAUTO specified multiple times".into());
            }
            if args[i + 1].is_empty() {
                return Err(format!("ERR syntax error, {word} requires a non-empty producer ID"));
            }
            if !auto && args[i + 2].is_empty() {
                return Err("ERR syntax error, IDMP requires a non-empty idempotent ID".into());
            }
            idmp = Some((args[i + 1].clone(), (!auto).then(|| args[i + 2].clone())));
            i += if auto { 2 } else { 3 };
        } else if xadd {
            break;
        } else {
            return Err(SYNTAX.into());
        }
    }
    if limit.is_some() && trim.is_none() {
        return Err("ERR syntax error, LIMIT cannot be used without specifying a trimming strategy".into());
    }
    if !xadd && trim.is_none() {
        return Err("ERR syntax error, XTRIM must be called with a trimming strategy".into());
    }
    if limit.is_some() && !approx {
        return Err("ERR syntax error, LIMIT cannot be used without the special ~ option".into());
    }
    // `~` without LIMIT removes at most 100 nodes' worth.
    let limit = limit.unwrap_or(100 * crate::model::NODE_ENTRIES);
    Ok(AddOptions { trim, nomkstream, refs: refs.unwrap_or(Refs::Keep), idmp, approx, limit, next: i })
}

/// The idempotent id `IDMPAUTO` derives from the fields: the servers hash the field/value
/// pairs in an order-blind way, so the sorted pairs stand in for the hash.
fn auto_iid(fields: &Fields) -> Vec<u8> {
    let mut pairs: Vec<&(Bytes, Bytes)> = fields.iter().collect();
    pairs.sort();
    let mut iid = Vec::new();
    for (f, v) in pairs {
        for part in [f, v] {
            iid.extend_from_slice(&(part.len() as u64).to_be_bytes());
            iid.extend_from_slice(part);
        }
    }
    iid
}

fn xadd(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> CmdResult {
    let opts = trim_options(args, 2, true, ctx.options)?;
    let pos = opts.next;
    let id = match args.get(pos).map(Vec::as_slice) {
        None => return Err("ERR wrong number of arguments for 'xadd' command".into()),
        Some(b"*") => NewId::Auto,
        Some(text) => match text.strip_suffix(b"-*") {
            Some(ms) => NewId::AutoSeq(crate::id::parse_u64(ms).ok_or(BAD_ID)?),
            None => NewId::Exact(strict_id(text)?),
        },
    };
    if opts.idmp.is_some() && !matches!(id, NewId::Auto) {
        return Err("ERR syntax error, IDMP/IDMPAUTO can be used only with auto-generated IDs".into());
    }
    let rest = &args[pos + 1..];
    if rest.is_empty() || rest.len() % 2 == 1 {
        return Err("ERR wrong number of arguments for 'xadd' command".into());
    }
    if let NewId::Exact(EntryId::MIN) = id {
        return Err("ERR The ID specified in XADD must be greater than 0-0".into());
    }
    let key = &args[1];
    if opts.nomkstream && !ctx.db.streams.contains_key(key) {
        return reply(Reply::NilBulk);
    }
    let fields: Fields =
        rest.chunks(2).map(|p| (Bytes::copy_from_slice(&p[0]), Bytes::copy_from_slice(&p[1]))).collect();
    let created = !ctx.db.streams.contains_key(key);
    let stream = ctx.db.streams.entry(key.clone()).or_default();
    let idmp = opts.idmp.map(|(pid, iid)| (pid, iid.unwrap_or_else(|| auto_iid(&fields))));
    if let Some((pid, iid)) = &idmp {
        // A repeated (pid, iid) answers the first append's id and appends nothing.
        if let Some(first) = stream.idmp_lookup(pid, iid, ctx.now) {
            return reply(Reply::id(first));
        }
    }
    let id = match stream.add(id, fields, ctx.now) {
        Ok(id) => id,
        Err(_) => {
            if created {
                ctx.db.streams.remove(key);
            }
            return Err(
                "ERR The ID specified in XADD is equal or smaller than the target stream top item".into()
            );
        }
    };
    if let Some((pid, iid)) = idmp {
        stream.idmp_insert(pid, iid, id);
    }
    match opts.trim {
        Some(trim) if opts.approx => {
            stream.trim_approx(trim, opts.refs, opts.limit);
        }
        Some(trim) => {
            stream.trim(trim, opts.refs);
        }
        None => {}
    }
    ctx.signals.push(Signal::Added(key.clone()));
    reply(Reply::id(id))
}

fn xtrim(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> CmdResult {
    let opts = trim_options(args, 2, false, ctx.options)?;
    let (Some(trim), Some(stream)) = (opts.trim, ctx.db.streams.get_mut(&args[1])) else { return int(0) };
    match opts.approx {
        true => int(stream.trim_approx(trim, opts.refs, opts.limit) as usize),
        false => int(stream.trim(trim, opts.refs) as usize),
    }
}

/// `XCFGSET key [IDMP-DURATION s] [IDMP-MAXSIZE n]` (Redis 8.6): a changed setting forgets
/// the stream's idempotent ids.
fn xcfgset(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> CmdResult {
    let Some(stream) = ctx.db.streams.get_mut(&args[1]) else { return Err("ERR no such key".into()) };
    let mut duration = None;
    let mut maxsize = None;
    let mut i = 2;
    while i < args.len() {
        let more = args.len() - 1 - i;
        let (slot, word, max, unit) = if eq(&args[i], "IDMP-DURATION") && more > 0 {
            (&mut duration, "IDMP-DURATION", 86400, "seconds")
        } else if eq(&args[i], "IDMP-MAXSIZE") && more > 0 {
            (&mut maxsize, "IDMP-MAXSIZE", 10000, "entries")
        } else {
            return Err(SYNTAX.into());
        };
        if slot.is_some() {
            return Err(format!("ERR {word} specified multiple times"));
        }
        let n = int_arg(&args[i + 1])?;
        if !(1..=max).contains(&n) {
            return Err(format!("ERR {word} must be between 1 and {max} {unit}"));
        }
        *slot = Some(n as u64);
        i += 2;
    }
    if duration.is_none() && maxsize.is_none() {
        return Err("ERR At least one parameter must be specified".into());
    }
    stream.idmp_configure(duration, maxsize);
    reply(Reply::ok())
}

/// `XNACK key group SILENT|FAIL|FATAL IDS n id… [RETRYCOUNT c] [FORCE]` (Redis 8):
/// releases pending entries to the group; answers how many.
fn xnack(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> CmdResult {
    let (key, group) = (&args[1], &args[2]);
    let Some(stream) = ctx.db.streams.get_mut(key).filter(|s| s.groups.contains_key(group)) else {
        return Err(format!("NOGROUP No such key '{}' or consumer group '{}'", lossy(key), lossy(group)));
    };
    let mode = &args[3];
    let (silent, fatal) = if eq(mode, "SILENT") {
        (true, false)
    } else if eq(mode, "FAIL") {
        (false, false)
    } else if eq(mode, "FATAL") {
        (false, true)
    } else {
        return Err("ERR mode must be SILENT, FAIL, or FATAL".into());
    };
    let mut ids_at = None;
    let mut force = false;
    let mut retry = None;
    let mut i = 4;
    while i < args.len() {
        let more = args.len() - 1 - i;
        let opt = &args[i];
        if eq(opt, "IDS") && more > 0 {
            let n = match parse_i64(&args[i + 1]) {
                Some(n) if (1..=i64::from(i32::MAX)).contains(&n) => n as usize,
                _ => return Err("ERR numids must be a positive integer".into()),
            };
            if n > args.len() - (i + 2) {
                return Err("ERR number of IDs doesn't match numids".into());
            }
            ids_at = Some((i + 2, n));
            i += 2 + n;
        } else if eq(opt, "FORCE") {
            force = true;
            i += 1;
        } else if eq(opt, "RETRYCOUNT") && more > 0 {
            let n = int_arg(&args[i + 1])?;
            if n < 0 {
                return Err("ERR Invalid RETRYCOUNT value, must be >= 0".into());
            }
            retry = Some(n as u64);
            i += 2;
        } else {
            return Err(format!("ERR Unrecognized XNACK option '{}'", lossy(opt)));
        }
    }
    let Some((at, n)) = ids_at else { return Err("ERR syntax error, expected IDS keyword".into()) };
    let ids = args[at..at + n].iter().map(|a| strict_id(a)).collect::<Result<Vec<_>, _>>()?;
    let count = |c: u64| match retry {
        Some(n) => n,
        None if fatal => MAX_COUNT,
        None if silent => c.saturating_sub(1),
        None => c,
    };
    let mut released = 0;
    for id in ids {
        let exists = stream.entries.contains_key(&id);
        let Some(g) = stream.groups.get_mut(group) else { break };
        if g.release(id, count, force, exists, ctx.now) {
            released += 1;
        }
    }
    if released > 0 {
        ctx.signals.push(Signal::Released(key.clone()));
    }
    int(released)
}

/// `XACKDEL key group [KEEPREF|DELREF|ACKED] IDS n id…` (Redis 8.2): acks and deletes;
/// per id 1 (deleted, or already gone), 2 (acked, kept for another group: `ACKED`) or -1
/// (not pending in the group).
fn xackdel(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> CmdResult {
    let mut refs = None;
    let mut ids_at = None;
    let mut i = 3;
    while i < args.len() {
        let opt = &args[i];
        let word = ["KEEPREF", "DELREF", "ACKED"].into_iter().find(|w| eq(opt, w));
        if let (Some(word), None) = (word, refs) {
            refs = Some(match word {
                "DELREF" => Refs::Delete,
                "ACKED" => Refs::Acked,
                _ => Refs::Keep,
            });
            i += 1;
        } else if eq(opt, "IDS") && i + 1 < args.len() {
            let n = match parse_i64(&args[i + 1]) {
                Some(n) if n >= 1 => n as usize,
                _ => return Err("ERR Number of IDs must be a positive integer".into()),
            };
            if n > args.len() - i - 2 {
                return Err("ERR The `numids` parameter must match the number of arguments".into());
            }
            ids_at = Some((i + 2, n));
            i += 2 + n;
        } else {
            return Err(SYNTAX.into());
        }
    }
    let Some((at, n)) = ids_at else { return Err("ERR IDS option is required".into()) };
    let refs = refs.unwrap_or(Refs::Keep);
    let Some(stream) = ctx.db.streams.get_mut(&args[1]).filter(|s| s.groups.contains_key(&args[2])) else {
        return reply(Reply::Array(vec![Reply::Int(-1); n]));
    };
    let ids = args[at..at + n].iter().map(|a| strict_id(a)).collect::<Result<Vec<_>, _>>()?;
    let mut out = Vec::with_capacity(n);
    for id in ids {
        let acked = stream.groups.get_mut(&args[2]).is_some_and(|g| g.ack(id));
        if !acked {
            out.push(Reply::Int(-1));
            continue;
        }
        let delete = match refs {
            Refs::Acked => !stream.referenced(id),
            Refs::Delete => {
                stream.drop_refs(id);
                true
            }
            Refs::Keep => true,
        };
        if delete {
            stream.delete(id);
        }
        out.push(Reply::Int(if delete { 1 } else { 2 }));
    }
    reply(Reply::Array(out))
}

fn xdel(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> CmdResult {
    let Some(stream) = ctx.db.streams.get_mut(&args[1]) else { return int(0) };
    let ids = args[2..].iter().map(|a| strict_id(a)).collect::<Result<Vec<_>, _>>()?;
    int(ids.into_iter().filter(|&id| stream.delete(id)).count())
}

fn xgroup(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> CmdResult {
    let sub = &args[1];
    let argc = args.len();
    let wrong = || {
        Err(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try XGROUP HELP.",
            lossy(sub)
        ))
    };
    let known = (eq(sub, "CREATE") && argc >= 5)
        || (eq(sub, "DESTROY") && argc == 4)
        || (eq(sub, "DELCONSUMER") && argc == 5)
        || (eq(sub, "CREATECONSUMER") && argc == 5);
    if !known {
        return wrong();
    }
    let key = &args[2];
    let group = &args[3];
    let mut mkstream = false;
    let mut entries_read = None;
    if eq(sub, "CREATE") {
        let mut i = 5;
        while i < argc {
            if eq(&args[i], "MKSTREAM") {
                mkstream = true;
                i += 1;
            } else if eq(&args[i], "ENTRIESREAD") && i + 1 < argc {
                let n = int_arg(&args[i + 1])?;
                if n < 0 && n != -1 {
                    return Err("ERR value for ENTRIESREAD must be positive or -1".into());
                }
                entries_read = u64::try_from(n).ok();
                i += 2;
            } else {
                return Err(format!(
                    "ERR unknown subcommand or wrong number of arguments for '{}'. Try XGROUP HELP.",
                    lossy(sub)
                ));
            }
        }
    }
    if !mkstream {
        let Some(stream) = ctx.db.streams.get(key) else {
            return Err("ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may \
                        want to use the MKSTREAM option to create an empty stream automatically."
                .into());
        };
        if !stream.groups.contains_key(group) && (eq(sub, "DELCONSUMER") || eq(sub, "CREATECONSUMER")) {
            return Err(format!(
                "NOGROUP No such consumer group '{}' for key name '{}'",
                lossy(group),
                lossy(key)
            ));
        }
    }
    if eq(sub, "CREATE") {
        let id = if args[4] == b"$" {
            ctx.db.streams.get(key).map_or(EntryId::MIN, |s| s.last_id)
        } else {
            strict_id(&args[4])?
        };
        let stream = ctx.db.streams.entry(key.clone()).or_default();
        if stream.groups.contains_key(group) {
            return Err("BUSYGROUP Consumer Group name already exists".into());
        }
        stream.groups.insert(group.clone(), Group::new(id, entries_read));
        reply(Reply::ok())
    } else if eq(sub, "DESTROY") {
        let Some(stream) = ctx.db.streams.get_mut(key) else { return int(0) };
        if stream.groups.remove(group).is_some() {
            ctx.signals.push(Signal::GroupDestroyed(key.clone(), group.clone()));
            int(1)
        } else {
            int(0)
        }
    } else {
        let Some(g) = ctx.db.streams.get_mut(key).and_then(|s| s.groups.get_mut(group)) else {
            return int(0);
        };
        if eq(sub, "CREATECONSUMER") {
            let created = !g.consumers.contains_key(&args[4]);
            g.consumer(&args[4]);
            return int(created as usize);
        }
        int(g.remove_consumer(&args[4]).unwrap_or(0))
    }
}

/// Builds one entry of a read or claim reply.
fn entry_reply(id: EntryId, fields: Option<&Fields>) -> Reply {
    let body = match fields {
        Some(f) => Reply::Array(
            f.iter().flat_map(|(k, v)| [Reply::Bulk(k.to_vec()), Reply::Bulk(v.to_vec())]).collect(),
        ),
        None => Reply::NilArray,
    };
    Reply::Array(vec![Reply::id(id), body])
}

/// An entry of a read reply: `[id, fields]`, or with `CLAIM` `[id, fields, idle, count]`.
fn read_item(id: EntryId, fields: Option<&Fields>, claim: Option<(u64, u64)>) -> Reply {
    let mut item = entry_reply(id, fields);
    if let (Some((idle, count)), Reply::Array(parts)) = (claim, &mut item) {
        parts.push(Reply::Int(idle.min(i64::MAX as u64) as i64));
        parts.push(Reply::Int(count.min(i64::MAX as u64) as i64));
    }
    item
}

/// The `MAXSIZE` budget of a read: the servers count the reply bytes written so far (the
/// stream's name and each entry; array lengths written afterwards do not count) and stop
/// before the next entry once the count reaches the limit, after at least one entry.
struct Budget {
    limit: Option<u64>,
    used: u64,
    taken: usize,
    proto: Protocol,
}

impl Budget {
    fn new(limit: Option<u64>, proto: Protocol, key: &[u8]) -> Budget {
        // RESP2 writes the `*2` of the [key, entries] pair at once; RESP3's map length is
        // written afterwards.
        let pair = if proto == Protocol::Resp2 { 4 } else { 0 };
        let key = 1 + key.len().to_string().len() + 2 + key.len() + 2;
        Budget { limit, used: (pair + key) as u64, taken: 0, proto }
    }

    /// Whether the next entry may go out (recording its size if so).
    fn take(&mut self, item: impl FnOnce() -> Reply) -> bool {
        let Some(limit) = self.limit else { return true };
        if self.taken > 0 && self.used >= limit {
            return false;
        }
        let mut bytes = Vec::new();
        item().encode(self.proto, &mut bytes);
        self.used += bytes.len() as u64;
        self.taken += 1;
        true
    }
}

/// Serves an `XREADGROUP … >` read (at once or parked), as the servers decide: with
/// `CLAIM`, when the oldest pending delivery still in the stream is idle enough, idle
/// entries first (then new ones if any); otherwise new entries when there are some.
/// `None` when there is nothing to serve (the read answers nil or stays parked).
pub(crate) fn serve_read(stream: &mut Stream, b: &Blocked, proto: Protocol, now: u64) -> Option<Reply> {
    let last = stream.groups.get(&b.group)?.last_id;
    let fresh = stream.has_after(last);
    let claimable = b.claim.is_some_and(|min| stream.claimable(&b.group, min, now));
    if !fresh && !claimable {
        return None;
    }
    let mut budget = Budget::new(b.maxsize, proto, &b.key);
    let mut items = Vec::new();
    if let Some(min) = b.claim {
        let mut take =
            |id, f: Option<&Fields>, idle, count| budget.take(|| read_item(id, f, Some((idle, count))));
        let claimed = stream.claim_idle(&b.group, &b.consumer, min, b.count, now, &mut take);
        items.extend(
            claimed.iter().map(|(id, f, idle, count)| read_item(*id, Some(f), Some((*idle, *count)))),
        );
    }
    let full = b.count != 0 && items.len() >= b.count;
    if fresh && !full {
        let extra = b.claim.map(|_| (0, 0));
        let left = if b.count == 0 { 0 } else { b.count - items.len() };
        let mut take = |id, f: Option<&Fields>, _, _| budget.take(|| read_item(id, f, extra));
        let entries = stream.read_new(&b.group, &b.consumer, left, b.noack, now, &mut take);
        items.extend(entries.iter().map(|(id, f)| read_item(*id, Some(f), extra)));
    }
    Some(Reply::Streams(vec![(Reply::Bulk(b.key.clone()), Reply::Array(items))]))
}

/// `XREADGROUP GROUP g c [COUNT n] [BLOCK ms] [NOACK] [CLAIM min-idle] [MAXCOUNT n]
/// [MAXSIZE bytes] STREAMS key id` (one stream; the Redis 8 options when spoken).
fn xreadgroup(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> CmdResult {
    let verbs = ctx.options.redis8;
    let mut count = 0usize;
    let mut block = None;
    let mut noack = false;
    let mut claim = None;
    let mut maxcount = None;
    let mut maxsize = None;
    let mut names = None;
    let mut streams_at = None;
    let mut i = 1;
    while i < args.len() {
        let more = args.len() - 1 - i;
        let opt = &args[i];
        if verbs.claim && eq(opt, "CLAIM") && more > 0 {
            let ms = parse_i64(&args[i + 1]).ok_or("ERR min-idle-time is not an integer or out of range")?;
            if ms < 0 {
                return Err("ERR min-idle-time must be a positive integer".into());
            }
            claim = Some(ms as u64);
            i += 2;
        } else if eq(opt, "BLOCK") && more > 0 {
            let ms = parse_i64(&args[i + 1]).ok_or("ERR timeout is not an integer or out of range")?;
            if ms < 0 {
                return Err("ERR timeout is negative".into());
            }
            block = Some(ms as u64);
            i += 2;
        } else if eq(opt, "COUNT") && more > 0 {
            count = int_arg(&args[i + 1])?.max(0) as usize;
            i += 2;
        } else if verbs.read_limits && (eq(opt, "MAXCOUNT") || eq(opt, "MAXSIZE")) && more > 0 {
            let n = int_arg(&args[i + 1])?;
            let word = if eq(opt, "MAXCOUNT") { "MAXCOUNT" } else { "MAXSIZE" };
            if n <= 0 {
                return Err(format!("ERR {word} must be a positive integer"));
            }
            if word == "MAXCOUNT" {
                maxcount = Some(n as u64);
            } else {
                maxsize = Some(n as u64);
            }
            i += 2;
        } else if eq(opt, "STREAMS") && more > 0 {
            if (args.len() - i - 1) % 2 != 0 {
                return Err("ERR Unbalanced 'xreadgroup' list of streams: for each stream key an ID or '$' \
                            must be specified."
                    .into());
            }
            streams_at = Some(i + 1);
            break;
        } else if eq(opt, "GROUP") && more >= 2 {
            names = Some((&args[i + 1], &args[i + 2]));
            i += 3;
        } else if eq(opt, "NOACK") {
            noack = true;
            i += 1;
        } else {
            return Err(SYNTAX.into());
        }
    }
    let Some(at) = streams_at else { return Err(SYNTAX.into()) };
    let Some((group, consumer)) = names else { return Err("ERR Missing GROUP option for XREADGROUP".into()) };
    if let Some(max) = maxcount {
        if count != 0 && (max as usize) < count {
            return Err("ERR MAXCOUNT must be greater than or equal to COUNT".into());
        }
        // MAXCOUNT caps the whole reply; with one stream it is a COUNT.
        count = if count == 0 { max.min(usize::MAX as u64) as usize } else { count };
    }
    if args.len() - at != 2 {
        return Err("ERR the simulator supports XREADGROUP on one stream only".into());
    }
    let (key, id_arg) = (&args[at], &args[at + 1]);
    let Some(stream) = ctx.db.streams.get_mut(key.as_slice()) else {
        return Err(nogroup_read(key, group));
    };
    if !stream.groups.contains_key(group.as_slice()) {
        return Err(nogroup_read(key, group));
    }
    let after = match id_arg.as_slice() {
        b"$" => {
            return Err("ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the \
                        history of this consumer by specifying a proper ID, or use the > ID to get new \
                        messages. The $ ID would just return an empty result set."
                .into())
        }
        b">" => None,
        other => Some(strict_id(other)?),
    };
    let g = stream.groups.get_mut(group.as_slice()).ok_or("ERR internal")?;
    if after.is_some() || ctx.options.eager_consumer_creation {
        g.consumer(consumer);
    }
    let proto = ctx.conn.proto;
    match after {
        Some(after) => {
            // CLAIM is ignored when reading the consumer's own history.
            let mut budget = Budget::new(maxsize, proto, key);
            let mut take = |id, f: Option<&Fields>, _, _| budget.take(|| entry_reply(id, f));
            let items = stream.read_pending(group, consumer, after, count, ctx.now, &mut take);
            let items = items.iter().map(|(id, f)| entry_reply(*id, f.as_ref())).collect();
            reply(Reply::Streams(vec![(Reply::Bulk(key.clone()), Reply::Array(items))]))
        }
        None => {
            let mut read = Blocked {
                key: key.clone(),
                group: group.clone(),
                consumer: consumer.clone(),
                count,
                noack,
                claim,
                maxsize,
                claim_wake: None,
                deadline: None,
                order: 0,
            };
            if let Some(answer) = serve_read(stream, &read, proto, ctx.now) {
                return reply(answer);
            }
            match block {
                None => reply(Reply::NilArray),
                Some(ms) => {
                    read.deadline = (ms > 0).then(|| ctx.now.saturating_add(ms));
                    read.claim_wake =
                        claim.map(|min| stream.claim_wake(group, min, ctx.now)).filter(|&w| w > ctx.now);
                    Ok(Outcome::Block(read))
                }
            }
        }
    }
}

fn xautoclaim(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> CmdResult {
    let min_idle =
        parse_i64(&args[4]).ok_or("ERR Invalid min-idle-time argument for XAUTOCLAIM")?.max(0) as u64;
    let (mut start, exclusive) = EntryId::parse_bound(&args[5], 0).ok_or(BAD_ID)?;
    if exclusive {
        start = start.next().ok_or("ERR invalid start ID for the interval")?;
    }
    let mut count = 100usize;
    let mut justid = false;
    let mut i = 6;
    while i < args.len() {
        let more = args.len() - 1 - i;
        if eq(&args[i], "COUNT") && more > 0 {
            count = match parse_i64(&args[i + 1]) {
                Some(n) if (1..=i64::MAX / 16).contains(&n) => n as usize,
                _ => return Err("ERR COUNT must be > 0".into()),
            };
            i += 2;
        } else if eq(&args[i], "JUSTID") {
            justid = true;
            i += 1;
        } else {
            return Err(SYNTAX.into());
        }
    }
    let (key, group) = (&args[1], &args[2]);
    let Some(stream) = ctx.db.streams.get_mut(key).filter(|s| s.groups.contains_key(group)) else {
        return Err(format!("NOGROUP No such key '{}' or consumer group '{}'", lossy(key), lossy(group)));
    };
    let shape = ctx.options.claim_shape;
    if ctx.options.eager_consumer_creation {
        if let Some(g) = stream.groups.get_mut(group) {
            g.consumer(&args[3]);
        }
    }
    let counted = ctx.options.autoclaim_deleted_use_count;
    let result = stream.autoclaim(group, &args[3], min_idle, start, count, justid, shape, counted, ctx.now);
    let claimed = result
        .claimed
        .into_iter()
        .map(|c| match c {
            Claimed::Entry(id, f) => entry_reply(id, Some(&f)),
            Claimed::Id(id) => Reply::id(id),
            Claimed::Gone => Reply::NilBulk,
        })
        .collect();
    let mut parts = vec![Reply::id(result.cursor), Reply::Array(claimed)];
    if shape == ClaimShape::Redis7 {
        parts.push(Reply::Array(result.deleted.into_iter().map(Reply::id).collect()));
    }
    reply(Reply::Array(parts))
}

/// `XCLAIM key group consumer min-idle id… [IDLE ms] [RETRYCOUNT n] [JUSTID]` (`TIME`,
/// `FORCE` and `LASTID` are not modelled).
fn xclaim(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> CmdResult {
    let min_idle = parse_i64(&args[4]).ok_or("ERR Invalid min-idle-time argument for XCLAIM")?.max(0) as u64;
    let mut ids = Vec::new();
    let mut options = Options { justid: false, retry: None, idle: None };
    let mut i = 5;
    while i < args.len() {
        let arg = &args[i];
        let value = || args.get(i + 1).and_then(|v| parse_i64(v)).ok_or_else(|| NOT_INT.to_string());
        match EntryId::parse_strict(arg, 0) {
            Some(id) if !options.justid && options.retry.is_none() && options.idle.is_none() => ids.push(id),
            _ if eq(arg, "JUSTID") => options.justid = true,
            _ if eq(arg, "RETRYCOUNT") => {
                options.retry = Some(value()?.max(0) as u64);
                i += 1;
            }
            _ if eq(arg, "IDLE") => {
                options.idle = Some(value()?.max(0) as u64);
                i += 1;
            }
            _ => return Err(format!("ERR Unrecognized XCLAIM option '{}'", lossy(arg))),
        }
        i += 1;
    }
    let (key, group) = (&args[1], &args[2]);
    let Some(stream) = ctx.db.streams.get_mut(key).filter(|s| s.groups.contains_key(group)) else {
        return Err(format!("NOGROUP No such key '{}' or consumer group '{}'", lossy(key), lossy(group)));
    };
    let shape = ctx.options.claim_shape;
    if ctx.options.eager_consumer_creation {
        if let Some(g) = stream.groups.get_mut(group) {
            g.consumer(&args[3]);
        }
    }
    let claimed = stream.claim(group, &args[3], min_idle, &ids, options, shape, ctx.now);
    let replies = claimed
        .into_iter()
        .map(|c| match c {
            Claimed::Entry(id, f) => entry_reply(id, Some(&f)),
            Claimed::Id(id) => Reply::id(id),
            Claimed::Gone => Reply::NilBulk,
        })
        .collect();
    reply(Reply::Array(replies))
}

/// `XRANGE key start end [COUNT n]`.
fn xrange(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> CmdResult {
    let (mut start, start_ex) = EntryId::parse_bound(&args[2], 0).ok_or(BAD_ID)?;
    if start_ex {
        start = start.next().ok_or("ERR invalid start ID for the interval")?;
    }
    let (mut end, end_ex) = EntryId::parse_bound(&args[3], u64::MAX).ok_or(BAD_ID)?;
    if end_ex {
        end = end.prev().ok_or("ERR invalid end ID for the interval")?;
    }
    let count = match &args[4..] {
        [] => usize::MAX,
        [word, n] if eq(word, "COUNT") => int_arg(n)?.max(0) as usize,
        _ => return Err(SYNTAX.into()),
    };
    let Some(stream) = ctx.db.streams.get(&args[1]) else { return reply(Reply::Array(Vec::new())) };
    if count == 0 {
        return reply(Reply::NilArray); // the servers' answer to COUNT 0 (or less) on a stream
    }
    if start > end {
        return reply(Reply::Array(Vec::new()));
    }
    let items =
        stream.entries.range(start..=end).take(count).map(|(id, f)| entry_reply(*id, Some(f))).collect();
    reply(Reply::Array(items))
}

/// `EVAL`: only pelican's dead-letter script ([`pelican::DEAD_LETTER_SCRIPT`]), run natively
/// with the same outcome: 1 moved, 0 not the consumer's, -1 deleted (acked away) (its replay,
/// leave and commit scripts: see theirs); and its
/// check at the start ([`pelican::DEAD_LETTER_CHECK_SCRIPT`]), which answers 1 (the
/// simulator has no ACL and no slots).
pub(crate) fn eval(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> CmdResult {
    // The servers keep every script they run in their cache (`EVALSHA` finds it after).
    let sha = crate::script::sha1_hex(&args[1]);
    ctx.scripts.entry(sha).or_insert_with(|| args[1].clone());
    if args[1] == pelican::COMMIT_SCRIPT.as_bytes() {
        return crate::script::commit(ctx, args);
    }
    if args[1] == pelican::COMMIT_CHECK_SCRIPT.as_bytes() {
        return crate::script::commit_check(args);
    }
    if args[1] == pelican::DEAD_LETTER_CHECK_SCRIPT.as_bytes() {
        return match args.get(2).map(|n| &n[..]) {
            Some(b"2") if args.len() == 7 => reply(Reply::Int(1)),
            _ => Err("ERR wrong number of arguments for the dead-letter check".into()),
        };
    }
    if args[1] == pelican::LEAVE_SCRIPT.as_bytes() {
        return leave(ctx, args);
    }
    if args[1] == pelican::dead_letter::REPLAY_SCRIPT.as_bytes() {
        return replay(ctx, args);
    }
    if args[1] != pelican::DEAD_LETTER_SCRIPT.as_bytes() {
        return Err(
            "ERR the simulator runs no script but pelican's dead-letter, replay, leave and commit scripts"
                .into(),
        );
    }
    let [_, _, numkeys, key, dead, group, consumer, id, extra @ ..] = args else {
        return Err("ERR wrong number of arguments for the dead-letter script".into());
    };
    if &numkeys[..] != b"2" || extra.len() % 2 == 1 {
        return Err("ERR wrong number of arguments for the dead-letter script".into());
    }
    let id = strict_id(id)?;
    let Some(stream) = ctx.db.streams.get_mut(key).filter(|s| s.groups.contains_key(group)) else {
        return Err(format!("NOGROUP No such key '{}' or consumer group '{}'", lossy(key), lossy(group)));
    };
    if !stream.owns(group, consumer, id) {
        return reply(Reply::Int(0));
    }
    let Some(fields) = stream.fields(id).cloned() else {
        stream.groups.get_mut(group).map(|g| g.ack(id));
        return reply(Reply::Int(-1));
    };
    let mut fields = fields;
    fields.extend(extra.chunks(2).map(|p| (Bytes::copy_from_slice(&p[0]), Bytes::copy_from_slice(&p[1]))));
    if ctx.db.holds_other(dead, ctx.now) {
        return Err(format!("ERR Error running script: {}", crate::kv::WRONGTYPE));
    }
    let target = ctx.db.streams.entry(dead.clone()).or_default();
    target
        .add(NewId::Auto, fields, ctx.now)
        .map_err(|_| "ERR the dead-letter stream's top id is ahead of the clock")?;
    ctx.signals.push(Signal::Added(dead.clone()));
    let acked = ctx.db.streams.get_mut(key).and_then(|s| s.groups.get_mut(group)).is_some_and(|g| g.ack(id));
    reply(Reply::Int(i64::from(acked)))
}

/// `EVAL` of pelican's replay script ([`pelican::dead_letter::REPLAY_SCRIPT`]), run natively
/// with the same outcome: the new id in the origin stream, 0 gone, -1 another reason, -2 not
/// a dead letter of that origin. Split as the script splits (the core's `DeadLetter::parse`).
fn replay(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> CmdResult {
    let [_, _, numkeys, dead, origin, id, reason] = args else {
        return Err("ERR wrong number of arguments for the replay script".into());
    };
    if &numkeys[..] != b"2" {
        return Err("ERR wrong number of arguments for the replay script".into());
    }
    let id = strict_id(id)?;
    if ctx.db.holds_other(dead, ctx.now) {
        return Err(format!("ERR Error running script: {}", crate::kv::WRONGTYPE));
    }
    let Some(fields) = ctx.db.streams.get(dead).and_then(|s| s.fields(id)).cloned() else {
        return reply(Reply::Int(0));
    };
    let letter = pelican::dead_letter::DeadLetter::parse(id.to_bytes(), fields);
    if letter.stream.as_deref() != Some(&origin[..]) {
        return reply(Reply::Int(-2));
    }
    if !reason.is_empty() && letter.reason.as_deref() != Some(&reason[..]) {
        return reply(Reply::Int(-1));
    }
    let field = pelican::dead_letter::REPLAY_OF_FIELD.as_bytes();
    let mut out: Fields = letter.fields.into_iter().filter(|(n, _)| &n[..] != field).collect();
    out.push((Bytes::from_static(field), letter.origin_id.unwrap_or_else(|| Bytes::from(id.to_bytes()))));
    if ctx.db.holds_other(origin, ctx.now) {
        return Err(format!("ERR Error running script: {}", crate::kv::WRONGTYPE));
    }
    let new = ctx
        .db
        .streams
        .entry(origin.clone())
        .or_default()
        .add(NewId::Auto, out, ctx.now)
        .map_err(|_| "ERR the origin stream's top id is ahead of the clock")?;
    ctx.signals.push(Signal::Added(origin.clone()));
    if let Some(stream) = ctx.db.streams.get_mut(dead) {
        stream.delete(id);
    }
    reply(Reply::id(new))
}

/// `EVAL` of pelican's leave script ([`pelican::LEAVE_SCRIPT`]), run natively: the entries
/// the consumer holds, and it is deleted if none; the group gone is the script's error.
fn leave(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> CmdResult {
    let [_, _, numkeys, key, group, consumer] = args else {
        return Err("ERR wrong number of arguments for the leave script".into());
    };
    if &numkeys[..] != b"1" {
        return Err("ERR wrong number of arguments for the leave script".into());
    }
    let Some(g) = ctx.db.streams.get_mut(key).and_then(|s| s.groups.get_mut(group)) else {
        return Err(format!(
            "ERR Error running script: NOGROUP No such key '{}' or consumer group '{}'",
            lossy(key),
            lossy(group)
        ));
    };
    let holding = g.consumers.get(consumer).map_or(0, |c| c.pel.len());
    if holding == 0 {
        g.remove_consumer(consumer);
    }
    int(holding)
}

fn xack(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> CmdResult {
    let Some(g) = ctx.db.streams.get_mut(&args[1]).and_then(|s| s.groups.get_mut(&args[2])) else {
        return int(0);
    };
    let ids = args[3..].iter().map(|a| strict_id(a)).collect::<Result<Vec<_>, _>>()?;
    int(ids.into_iter().filter(|&id| g.ack(id)).count())
}

fn xpending(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> CmdResult {
    let argc = args.len();
    if argc != 3 && !(6..=9).contains(&argc) {
        return Err(SYNTAX.into());
    }
    let mut range = None;
    if argc >= 6 {
        let mut at = 3;
        let mut min_idle = 0i64;
        if eq(&args[3], "IDLE") {
            min_idle = int_arg(&args[4])?;
            if argc < 8 {
                return Err(SYNTAX.into());
            }
            at = 5;
        }
        let count = int_arg(&args[at + 2])?.max(0) as usize;
        let (mut start, start_ex) = EntryId::parse_bound(&args[at], 0).ok_or(BAD_ID)?;
        if start_ex {
            start = start.next().ok_or("ERR invalid start ID for the interval")?;
        }
        let (mut end, end_ex) = EntryId::parse_bound(&args[at + 1], u64::MAX).ok_or(BAD_ID)?;
        if end_ex {
            end = end.prev().ok_or("ERR invalid end ID for the interval")?;
        }
        if at + 4 < argc {
            return Err(SYNTAX.into());
        }
        range = Some((min_idle, start, end, count, args.get(at + 3)));
    }
    let (key, group) = (&args[1], &args[2]);
    let Some(g) = ctx.db.streams.get(key).and_then(|s| s.groups.get(group)) else {
        return Err(format!("NOGROUP No such key '{}' or consumer group '{}'", lossy(key), lossy(group)));
    };
    let Some((min_idle, start, end, count, consumer)) = range else {
        if g.pel.is_empty() {
            return reply(Reply::Array(vec![Reply::Int(0), Reply::NilBulk, Reply::NilBulk, Reply::NilArray]));
        }
        let first = g.pel.keys().next().copied().unwrap_or_default();
        let last = g.pel.keys().next_back().copied().unwrap_or_default();
        let per = g
            .consumers
            .iter()
            .filter(|(_, c)| !c.pel.is_empty())
            .map(|(name, c)| {
                Reply::Array(vec![Reply::Bulk(name.clone()), Reply::text(&c.pel.len().to_string())])
            })
            .collect();
        return reply(Reply::Array(vec![
            Reply::Int(g.pel.len() as i64),
            Reply::id(first),
            Reply::id(last),
            Reply::Array(per),
        ]));
    };
    if start > end {
        return reply(Reply::Array(Vec::new()));
    }
    let ids: Vec<EntryId> = match consumer {
        Some(name) => match g.consumers.get(name) {
            Some(c) => c.pel.range(start..=end).copied().collect(),
            None => Vec::new(),
        },
        None => g.pel.range(start..=end).map(|(&id, _)| id).collect(),
    };
    let mut out = Vec::new();
    for id in ids {
        if out.len() >= count {
            break;
        }
        let Some(nack) = g.pel.get(&id) else { continue };
        let idle = crate::model::idle(ctx.now, nack.delivered_at);
        // A released entry (XNACK) passes any IDLE filter and shows idle -1.
        if !nack.released && min_idle > 0 && (idle as i64) < min_idle {
            continue;
        }
        out.push(Reply::Array(vec![
            Reply::id(id),
            Reply::Bulk(nack.owner.clone()),
            Reply::Int(if nack.released { -1 } else { idle as i64 }),
            Reply::Int(nack.count as i64),
        ]));
    }
    reply(Reply::Array(out))
}

fn xinfo(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> CmdResult {
    if !eq(&args[1], "GROUPS") || args.len() != 3 {
        return Err(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try XINFO HELP.",
            lossy(&args[1])
        ));
    }
    let Some(stream) = ctx.db.streams.get(&args[2]) else { return Err("ERR no such key".into()) };
    let lag = ctx.options.xinfo_lag;
    let groups = stream
        .group_infos()
        .into_iter()
        .map(|g| {
            let mut fields = vec![
                (Reply::text("name"), Reply::Bulk(g.name)),
                (Reply::text("consumers"), Reply::Int(g.consumers as i64)),
                (Reply::text("pending"), Reply::Int(g.pending as i64)),
                (Reply::text("last-delivered-id"), Reply::id(g.last_id)),
            ];
            if lag {
                let opt = |v: Option<u64>| v.map_or(Reply::NilBulk, |n| Reply::Int(n as i64));
                fields.push((Reply::text("entries-read"), opt(g.entries_read)));
                fields.push((Reply::text("lag"), opt(g.lag)));
            }
            Reply::Map(fields)
        })
        .collect();
    reply(Reply::Array(groups))
}
