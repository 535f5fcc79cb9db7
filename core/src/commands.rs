//! The commands the consumer sends, built from its configuration into its output buffer.

use bytes::{Bytes, BytesMut};

use crate::config::{Auth, Config, Protocol};
use crate::decimal::Decimal;
use crate::encode::{bulk, command, header};
use crate::error::Command;

/// The handshake: `HELLO 3 [AUTH …] [SETNAME …]` or `AUTH`/`CLIENT SETNAME`, then `SELECT`.
/// Returns the commands written, in order.
pub(crate) fn handshake(out: &mut BytesMut, c: &Config) -> Vec<Command> {
    let mut sent = Vec::with_capacity(3);
    let user = |a: &Auth| a.user.clone().unwrap_or_else(|| Bytes::from_static(b"default"));
    match c.protocol {
        Protocol::Resp3 => {
            let mut args: Vec<Bytes> = vec![Bytes::from_static(b"HELLO"), Bytes::from_static(b"3")];
            if let Some(auth) = &c.auth {
                args.extend([Bytes::from_static(b"AUTH"), user(auth), auth.password.clone()]);
            }
            if let Some(name) = &c.client_name {
                args.extend([Bytes::from_static(b"SETNAME"), name.clone()]);
            }
            let refs: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
            command(out, &refs);
            sent.push(Command::Hello);
        }
        Protocol::Resp2 => {
            if let Some(auth) = &c.auth {
                match &auth.user {
                    Some(u) => command(out, &[b"AUTH", u, &auth.password]),
                    None => command(out, &[b"AUTH", &auth.password]),
                }
                sent.push(Command::Auth);
            }
            if let Some(name) = &c.client_name {
                command(out, &[b"CLIENT", b"SETNAME", name]);
                sent.push(Command::SetName);
            }
        }
    }
    if c.db != 0 {
        command(out, &[b"SELECT", Decimal::new(c.db.into()).as_bytes()]);
        sent.push(Command::Select);
    }
    sent
}

/// `XGROUP CREATE key group <start> MKSTREAM`: `start` is [`Config::create_group`]'s, or
/// [`Config::create_added_group`]'s for a stream `added` while running.
pub(crate) fn create_group(out: &mut BytesMut, c: &Config, key: &[u8], added: bool) {
    let start = match added {
        true => c.create_added_group.as_deref().unwrap_or(b"0"),
        false => c.create_group.as_deref().unwrap_or(b"$"),
    };
    command(out, &[b"XGROUP", b"CREATE", key, &c.group, start, b"MKSTREAM"]);
}

/// `XREADGROUP GROUP g c COUNT n [MAXSIZE bytes] STREAMS key <after>`: a page of the own
/// pending list.
pub(crate) fn read_pending(
    out: &mut BytesMut,
    c: &Config,
    key: &[u8],
    count: u32,
    after: &[u8],
    cap: Option<usize>,
) {
    let count = Decimal::new(count.into());
    let cap = cap.map(|bytes| Decimal::new(bytes as u64));
    let mut args: Vec<&[u8]> =
        vec![b"XREADGROUP", b"GROUP", &c.group, &c.consumer, b"COUNT", count.as_bytes()];
    if let Some(cap) = &cap {
        args.extend([&b"MAXSIZE"[..], cap.as_bytes()]);
    }
    args.extend([&b"STREAMS"[..], key, after]);
    command(out, &args);
}

/// How a read of new entries is shaped besides its streams.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReadNew {
    /// Entries per stream (`COUNT`).
    pub count: u32,
    /// Entries in the whole reply (`MAXCOUNT`, Redis 8.10+), at least `count`.
    pub most: Option<u32>,
    /// Parked for this long (`BLOCK`), or a read that answers at once.
    pub block: Option<std::time::Duration>,
    /// Idle entries claimed inside the read (`CLAIM`, Redis 8.4+).
    pub claim: Option<std::time::Duration>,
    /// The reply's size cap (`MAXSIZE`, Redis 8.10+).
    pub cap: Option<usize>,
}

/// `XREADGROUP GROUP g c COUNT n [MAXCOUNT m] [MAXSIZE bytes] [BLOCK beat] [CLAIM min_idle]
/// STREAMS key… >…`: parked for new entries of `n` streams, whose keys are given encoded as
/// bulk strings (in one or two runs), or (without `BLOCK`)
/// a read ahead that answers at once; with `CLAIM` (Redis 8.4+) it brings idle pending
/// entries first; `MAXCOUNT` and `MAXSIZE` (Redis 8.10+) cap the whole reply.
pub(crate) fn read_new(out: &mut BytesMut, c: &Config, read: ReadNew, n: usize, keys: [&[u8]; 2]) {
    let count = Decimal::new(read.count.into());
    let most = read.most.map(|m| Decimal::new(m.into()));
    let beat = read.block.map(|b| Decimal::new(b.as_millis() as u64));
    let idle = read.claim.map(|d| Decimal::new(d.as_millis() as u64));
    let cap = read.cap.map(|bytes| Decimal::new(bytes as u64));
    let head: [&[u8]; 6] = [b"XREADGROUP", b"GROUP", &c.group, &c.consumer, b"COUNT", count.as_bytes()];
    let options = [(&b"MAXCOUNT"[..], &most), (b"MAXSIZE", &cap), (b"BLOCK", &beat), (b"CLAIM", &idle)];
    let options: Vec<[&[u8]; 2]> =
        options.into_iter().filter_map(|(token, value)| Some([token, value.as_ref()?.as_bytes()])).collect();
    header(out, b'*', head.len() + 2 * options.len() + 1 + 2 * n);
    head.iter().chain(options.iter().flatten()).for_each(|arg| bulk(out, arg));
    bulk(out, b"STREAMS");
    // The keys come encoded already: this goes out for every read, with every stream's key.
    keys.iter().for_each(|k| out.extend_from_slice(k));
    (0..n).for_each(|_| out.extend_from_slice(b"$1\r\n>\r\n"));
}

/// `XAUTOCLAIM key group consumer <min_idle> <cursor> COUNT n`.
pub(crate) fn claim(out: &mut BytesMut, c: &Config, key: &[u8], count: u32, cursor: &[u8]) {
    let count = Decimal::new(count.into());
    let idle = Decimal::new(c.min_idle.as_millis() as u64);
    command(
        out,
        &[b"XAUTOCLAIM", key, &c.group, &c.consumer, idle.as_bytes(), cursor, b"COUNT", count.as_bytes()],
    );
}

/// `XPENDING key group <start> <end> <count> <consumer>`: this consumer's pending entries in
/// a range, with delivery counts. `start` and `end` are ids, `-`/`+`, or `(id` (exclusive).
pub(crate) fn counts(out: &mut BytesMut, c: &Config, key: &[u8], start: &[u8], end: &[u8], count: u32) {
    let count = Decimal::new(count.into());
    command(out, &[b"XPENDING", key, &c.group, start, end, count.as_bytes(), &c.consumer]);
}

/// `XCLAIM key group consumer <min_idle_ms> id… JUSTID`: the owner-checked lease renewal.
pub(crate) fn lease(out: &mut BytesMut, c: &Config, key: &[u8], min_idle_ms: u64, ids: &[Bytes]) {
    let idle = Decimal::new(min_idle_ms);
    let mut args: Vec<&[u8]> = Vec::with_capacity(6 + ids.len());
    args.extend([&b"XCLAIM"[..], key, &c.group, &c.consumer, idle.as_bytes()]);
    args.extend(ids.iter().map(|id| &id[..]));
    args.push(b"JUSTID");
    command(out, &args);
}

/// `XCLAIM key group consumer <min_idle_ms> id… JUSTID RETRYCOUNT <count> IDLE <idle_ms>`:
/// sets the delivery count and idle time of entries still this consumer's.
pub(crate) fn give_back(
    out: &mut BytesMut,
    c: &Config,
    key: &[u8],
    min_idle_ms: u64,
    ids: &[Bytes],
    count: u64,
    idle_ms: u64,
) {
    let (min_idle, count, idle) = (Decimal::new(min_idle_ms), Decimal::new(count), Decimal::new(idle_ms));
    let mut args: Vec<&[u8]> = Vec::with_capacity(10 + ids.len());
    args.extend([&b"XCLAIM"[..], key, &c.group, &c.consumer, min_idle.as_bytes()]);
    args.extend(ids.iter().map(|id| &id[..]));
    args.extend([&b"JUSTID"[..], b"RETRYCOUNT", count.as_bytes(), b"IDLE", idle.as_bytes()]);
    command(out, &args);
}

/// `(id`: the exclusive form of a range bound (Redis 6.2+).
pub(crate) fn after(id: &[u8]) -> Vec<u8> {
    let mut bound = Vec::with_capacity(id.len() + 1);
    bound.push(b'(');
    bound.extend_from_slice(id);
    bound
}

/// `CLIENT UNBLOCK id`: the read this consumer left parked on a connection it dropped ends
/// now, answered with nothing, rather than when the server notices the socket gone — until
/// then an entry added would still be delivered there. (Not `CLIENT KILL`: should the id be
/// another client's — a new server behind the same address — it only ends that client's
/// wait early, as a timeout would.)
pub(crate) fn unblock_client(out: &mut BytesMut, id: u64) {
    command(out, &[b"CLIENT", b"UNBLOCK", Decimal::new(id).as_bytes()]);
}

/// `CLIENT ID`, then `CLIENT LIST TYPE normal`: this connection's id and every client's.
pub(crate) fn twins(out: &mut BytesMut) {
    command(out, &[b"CLIENT", b"ID"]);
    command(out, &[b"CLIENT", b"LIST", b"TYPE", b"normal"]);
}

/// The three commands that ask after the group's health, pipelined in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HealthPart {
    /// `XINFO GROUPS key`.
    Groups,
    /// `XPENDING key group - + 1`.
    Oldest,
    /// `XLEN <dead-letter stream>`, with a dead-letter stream (before `TIME`, which ends the
    /// round).
    DeadLetters,
    /// `TIME`.
    Time,
    /// `XRANGE key (<last-delivered-id> + COUNT 1`, asked after `XINFO GROUPS` said the lag is
    /// above zero: whether anything is left to deliver at all.
    Beyond,
}

/// The group's health: `XINFO GROUPS key`, `XPENDING key group - + 1` (the oldest pending
/// entry), `TIME` (to date it).
pub(crate) fn health(out: &mut BytesMut, c: &Config, key: &[u8], part: HealthPart) {
    match part {
        HealthPart::Groups => command(out, &[b"XINFO", b"GROUPS", key]),
        HealthPart::Oldest => command(out, &[b"XPENDING", key, &c.group, b"-", b"+", b"1"]),
        HealthPart::DeadLetters => {
            if let Some(template) = &c.dead_letter {
                command(out, &[b"XLEN", &crate::config::key_for(template, key)]);
            }
        }
        HealthPart::Time => command(out, &[b"TIME"]),
        // Encoded by `beyond`, with the id it needs.
        HealthPart::Beyond => {}
    }
}

/// `XRANGE key (<id> + COUNT 1`: the first entry after `id`, if any (the group's health: is
/// anything left to deliver past its last-delivered id).
pub(crate) fn beyond(out: &mut BytesMut, key: &[u8], id: &[u8]) {
    command(out, &[b"XRANGE", key, &after(id), b"+", b"COUNT", b"1"]);
}
