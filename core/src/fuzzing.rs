//! Entry points for the fuzz targets in `fuzz/` and for the corpus tests
//! (`tests/fuzz_corpora.rs`). Each takes arbitrary bytes, must never panic, and asserts
//! invariants of the decoder, the reply parsers or the consumer: an assertion that fires is a
//! bug found. Built only with the `fuzzing` feature; not part of the public API.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use bytes::Bytes;
use redis_protocol::{resp2, resp3};

use crate::config::{Config, GroupGone, Limits, Protocol};
use crate::consumer::{Consumer, Event};
use crate::decode::{Budget, DecodeError, Decoder, Frame, Value};
use crate::entry::Verdict;
use crate::error::Error;
use crate::oracle;
use crate::reply;

/// The tight limits of the third decoder in [`decode`] and of the consumer in [`consumer`].
const SMALL: Limits = Limits { max_frame: 4096, max_depth: 8 };

fn protocol(byte: u8) -> Protocol {
    if byte & 1 == 0 {
        Protocol::Resp2
    } else {
        Protocol::Resp3
    }
}

// ---- decode ---------------------------------------------------------------------------------

type Step = Result<Frame, DecodeError>;

/// Value equality with doubles compared bit for bit (a decoded NaN equals itself), arrays also
/// equal as multisets, and maps by their keys: RESP3 sets and maps come out of
/// `redis-protocol`'s `HashSet`/`HashMap` in an order that changes from one decode to the next,
/// and which value a repeated map key keeps changes too. (Frame boundaries, which are what
/// the scanner decides, are checked exactly all the same.)
fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Double(x), Value::Double(y)) => x.to_bits() == y.to_bits(),
        (Value::Array(xs), Value::Array(ys)) | (Value::Other(xs), Value::Other(ys)) => {
            xs.len() == ys.len()
                && (xs.iter().zip(ys).all(|(x, y)| same_value(x, y)) || same_multiset(xs, ys))
        }
        // Keys only: a map with a repeated key keeps one of its values, not always the same.
        (Value::Map(xs), Value::Map(ys)) => {
            let keys = |m: &[(Value, Value)]| m.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
            xs.len() == ys.len() && same_multiset(&keys(xs), &keys(ys))
        }
        _ => a == b,
    }
}

fn same_multiset(xs: &[Value], ys: &[Value]) -> bool {
    let mut unmatched: Vec<&Value> = ys.iter().collect();
    xs.iter().all(|x| match unmatched.iter().position(|y| same_value(x, y)) {
        Some(i) => {
            unmatched.swap_remove(i);
            true
        }
        None => false,
    })
}

fn same_step(a: &Step, b: &Step) -> bool {
    match (a, b) {
        (Ok(Frame::Reply(x)), Ok(Frame::Reply(y))) => same_value(x, y),
        (Ok(Frame::Push), Ok(Frame::Push)) => true,
        // Only the kind: `redis-protocol`'s text for the same bad frame can differ (a UTF-8
        // error's offset inside a map depends on the order it visits the map in).
        (Err(x), Err(y)) => std::mem::discriminant(x) == std::mem::discriminant(y),
        _ => false,
    }
}

/// Pulls frames until the decoder wants more bytes; false once it has failed.
fn pull(decoder: &mut Decoder, protocol: Protocol, steps: &mut Vec<Step>) -> bool {
    loop {
        match decoder.next(protocol) {
            Ok(None) => return true,
            Ok(Some(frame)) => steps.push(Ok(frame)),
            Err(e) => {
                steps.push(Err(e));
                return false;
            }
        }
    }
}

fn is_limit(e: &DecodeError) -> bool {
    matches!(e, DecodeError::TooLarge | DecodeError::TooDeep)
}

/// `redis-protocol` must take exactly the bytes the scanner delimited as one frame, else the
/// core would silently drop (or misread) part of the input.
fn check_frame_length(frame: &[u8], protocol: Protocol) {
    let bytes = Bytes::copy_from_slice(frame);
    let consumed = match protocol {
        Protocol::Resp2 => resp2::decode::decode_bytes(&bytes).ok().flatten().map(|(_, n)| n),
        Protocol::Resp3 => resp3::decode::complete::decode_bytes(&bytes).ok().flatten().map(|(_, n)| n),
    };
    // The scanner handed out a frame, so the parser accepted it: it must have used all of it.
    assert_eq!(consumed, Some(frame.len()), "scanner and parser disagree on a frame's end: {frame:?}");
}

/// Decoder target. `data[0]` picks the protocol (bit 0) and a chunk size (the rest); the other
/// bytes are server input. Asserts: decoding them whole and in chunks gives the same frames
/// and first error; a decoder with tight limits fed byte by byte gives a prefix of the same
/// sequence (ending early only on a limit error), never holds more than `max_frame` bytes
/// while waiting, and delimits frames exactly as `redis-protocol` parses them.
pub fn decode(data: &[u8]) {
    let Some((&head, input)) = data.split_first() else { return };
    let protocol = protocol(head);
    let chunk = usize::from(head >> 1) % 64 + 1;

    let mut whole = Vec::new();
    let mut d = Decoder::new(Limits::default());
    d.extend(input);
    pull(&mut d, protocol, &mut whole);

    let mut split = Vec::new();
    let mut d = Decoder::new(Limits::default());
    for part in input.chunks(chunk) {
        d.extend(part);
        if !pull(&mut d, protocol, &mut split) {
            break;
        }
    }
    assert_eq!(whole.len(), split.len(), "whole: {whole:?}\nsplit: {split:?}");
    for (w, s) in whole.iter().zip(&split) {
        assert!(same_step(w, s), "whole: {w:?}\nsplit by {chunk}: {s:?}");
    }
    for step in &whole {
        if protocol == Protocol::Resp2 {
            assert!(!matches!(step, Ok(Frame::Push)), "a push in RESP2");
        }
    }

    // Byte by byte, a frame comes out exactly when its last byte arrives: that gives its bounds.
    let mut small = Vec::new();
    let mut d = Decoder::new(SMALL);
    let mut frame_start = 0;
    'bytes: for (i, b) in input.iter().enumerate() {
        d.extend(std::slice::from_ref(b));
        loop {
            match d.next(protocol) {
                Ok(None) => {
                    let held = i + 1 - frame_start;
                    assert!(held <= SMALL.max_frame, "{held} bytes buffered past max_frame without an error");
                    break;
                }
                Ok(Some(frame)) => {
                    check_frame_length(&input[frame_start..=i], protocol);
                    frame_start = i + 1;
                    small.push(Ok(frame));
                }
                Err(e) => {
                    small.push(Err(e));
                    break 'bytes;
                }
            }
        }
    }
    let ended_on_limit = matches!(small.last(), Some(Err(e)) if is_limit(e));
    for (i, s) in small.iter().enumerate() {
        if ended_on_limit && i == small.len() - 1 {
            break;
        }
        let w = whole.get(i).unwrap_or_else(|| panic!("tight limits gave more: {s:?}"));
        assert!(same_step(w, s), "default limits: {w:?}\ntight limits: {s:?}");
    }
    if !ended_on_limit {
        assert_eq!(small.len(), whole.len(), "tight limits stopped early without a limit error");
    }
    check_skipping(input, protocol, chunk, usize::from(head >> 7));
}

/// Bytes past which [`check_skipping`] skips a frame.
const SKIP_PAST: usize = 256;

/// A budget that skips frames past [`SKIP_PAST`] bytes (watching the aggregate at `depth`),
/// fed in `chunk`s: up to the first error, frames that fit come out as decoded whole, with the
/// same lengths; one that does not comes out `Skipped` with its length, and is never held
/// (the decoder keeps at most the budget and a chunk).
fn check_skipping(input: &[u8], protocol: Protocol, chunk: usize, depth: usize) {
    let mut whole = Vec::new();
    let mut d = Decoder::new(Limits::default());
    d.extend(input);
    let unlimited = Budget { bytes: usize::MAX, skip: None, raw: false };
    while let Ok(Some(step)) = d.next_within(protocol, unlimited) {
        whole.push(step);
    }
    let budget = Budget { bytes: SKIP_PAST, skip: Some(depth), raw: false };
    let mut d = Decoder::new(Limits::default());
    let mut skipped = Vec::new();
    'feed: for part in input.chunks(chunk) {
        d.extend(part);
        loop {
            match d.next_within(protocol, budget) {
                Ok(Some(step)) => skipped.push(step),
                Ok(None) => break,
                Err(_) => break 'feed,
            }
        }
        assert!(d.buffered() <= SKIP_PAST + chunk + 64 || d.skipping().is_none(), "held while skipping");
    }
    for ((w, w_len), (s, s_len)) in whole.iter().zip(&skipped) {
        assert_eq!(w_len, s_len, "frame lengths: {w:?} / {s:?}");
        if *w_len > SKIP_PAST {
            assert!(matches!(s, Frame::Skipped { .. }), "{w:?} not skipped");
        } else {
            let same = match (w, s) {
                (Frame::Reply(x), Frame::Reply(y)) => same_value(x, y),
                (x, y) => x == y,
            };
            assert!(same, "within the budget: {w:?} / {s:?}");
        }
    }
}

// ---- replies --------------------------------------------------------------------------------

/// The reply values in `data[1..]`, decoded with the protocol `data[0]` picks (up to the first
/// decoding error).
fn values(data: &[u8]) -> Vec<Value> {
    let Some((&head, input)) = data.split_first() else { return Vec::new() };
    let mut d = Decoder::new(Limits::default());
    d.extend(input);
    let mut out = Vec::new();
    while let Ok(Some(frame)) = d.next(protocol(head)) {
        if let Frame::Reply(v) = frame {
            out.push(v);
        }
    }
    out
}

/// The entry list `reply::read` must have parsed, if it succeeded on `value`.
fn read_entries(value: &Value) -> &[Value] {
    let entries = match value {
        Value::Array(streams) => match streams.first() {
            Some(Value::Array(pair)) => match pair.get(1) {
                Some(entries) => entries,
                None => return &[],
            },
            _ => return &[],
        },
        Value::Map(streams) => match streams.first() {
            Some((_, entries)) => entries,
            None => return &[],
        },
        _ => return &[],
    };
    match entries {
        Value::Array(items) => items,
        _ => &[],
    }
}

/// A parsed entry must be exactly its raw `[id, fields]` (or `CLAIM`'s `[id, fields, idle,
/// count]`).
fn check_entry(raw: &Value, parsed: &oracle::RawEntry) {
    let Value::Array(pair) = raw else { panic!("parsed an entry from {raw:?}") };
    match (&pair[..], parsed.claim) {
        ([_, _], None) => {}
        ([_, _, Value::Int(idle), Value::Int(before)], Some(claim)) => {
            assert_eq!((*idle as u64, *before as u64), claim, "a CLAIM read's numbers");
        }
        _ => panic!("parsed an entry {parsed:?} from {raw:?}"),
    }
    assert_eq!(pair[0], Value::Str(parsed.id.clone()), "entry id");
    match (&pair[1], &parsed.fields) {
        (Value::Nil, None) => {}
        (Value::Array(flat), Some(fields)) => {
            assert_eq!(flat.len(), fields.len() * 2, "field count");
            for (i, (f, v)) in fields.iter().enumerate() {
                assert_eq!(flat[2 * i], Value::Str(f.clone()));
                assert_eq!(flat[2 * i + 1], Value::Str(v.clone()));
            }
        }
        (raw, parsed) => panic!("fields {raw:?} parsed as {parsed:?}"),
    }
}

/// `XREADGROUP` reply target: `data[0]` picks the protocol; every decoded reply goes through
/// `reply::read` (and `count`/`ok`/`int`, `pending_counts` and `ids`). Asserts that what
/// parses is exactly the raw entries (same count, ids, fields, `nil` fields as `None`), that
/// `XPENDING` rows and `XCLAIM` ids are exactly the raw ones, and that error replies never
/// parse.
pub fn read_reply(data: &[u8]) {
    for value in values(data) {
        let is_error = matches!(value, Value::Error(_));
        if let Ok(n) = reply::int(value.clone()) {
            assert_eq!(value, Value::Int(n));
        }
        if let Ok(rows) = reply::pending_counts(value.clone()) {
            let Value::Array(raw) = &value else { panic!("XPENDING rows from {value:?}") };
            assert_eq!(raw.len(), rows.len());
            for (r, (id, n)) in raw.iter().zip(&rows) {
                let Value::Array(f) = r else { panic!("row {r:?}") };
                assert_eq!((f.len(), &f[0], &f[3]), (4, &Value::Str(id.clone()), &Value::Int(*n as i64)));
            }
        }
        if let Ok(ids) = reply::ids(value.clone()) {
            let want: Vec<Value> = ids.into_iter().map(Value::Str).collect();
            assert_eq!(value, Value::Array(want), "XCLAIM ids");
        }
        match reply::count(value.clone()) {
            Ok(n) => assert_eq!(value, Value::Int(n as i64)),
            Err(_) => assert!(!matches!(value, Value::Int(n) if n >= 0)),
        }
        if reply::ok(value.clone()).is_ok() {
            assert!(matches!(value, Value::Str(_) | Value::Text(_) | Value::Map(_) | Value::Array(_)));
        }
        let parsed = oracle::read(value.clone());
        if is_error {
            assert!(parsed.is_err(), "an error reply parsed as entries");
        }
        if let Ok(entries) = parsed {
            let raw = read_entries(&value);
            assert_eq!(raw.len(), entries.len(), "entry count of {value:?}");
            for (r, e) in raw.iter().zip(&entries) {
                check_entry(r, e);
            }
        }
    }
}

/// `XAUTOCLAIM` reply target: `data[0]` picks the protocol; every decoded reply goes through
/// `reply::autoclaim`. Asserts that what parses has the raw reply's cursor, one claimed entry
/// or bare nil per element, and its deleted ids (none for the 2-element shape).
pub fn autoclaim_reply(data: &[u8]) {
    for value in values(data) {
        let Ok(claim) = oracle::autoclaim(value.clone()) else { continue };
        let Value::Array(parts) = &value else { panic!("parsed a claim from {value:?}") };
        assert!(parts.len() == 2 || parts.len() == 3, "{value:?}");
        assert_eq!(parts[0], Value::Str(claim.cursor.clone()), "cursor");
        let Value::Array(items) = &parts[1] else { panic!("claimed list of {value:?}") };
        let nils = items.iter().filter(|v| **v == Value::Nil).count();
        assert_eq!(nils as u64, claim.bare_nils);
        let raw: Vec<&Value> = items.iter().filter(|v| **v != Value::Nil).collect();
        assert_eq!(raw.len(), claim.claimed.len(), "claimed count");
        for (r, e) in raw.into_iter().zip(&claim.claimed) {
            check_entry(r, e);
        }
        match parts.get(2) {
            None => assert!(claim.deleted.is_empty()),
            Some(Value::Array(ids)) => {
                let want: Vec<Value> = claim.deleted.iter().cloned().map(Value::Str).collect();
                assert_eq!(ids, &want, "deleted ids");
            }
            Some(other) => panic!("deleted ids parsed from {other:?}"),
        }
    }
}

/// One-pass parser target: `data[0]` picks the protocol (bit 0) and a chunk size (bits 1-6)
/// and whether replies are read as claims (bit 7); the rest is server input. Fed in chunks to
/// one decoder that hands read replies over raw (to the one-pass parser of
/// `stream_reply`) and to one that decodes them with `redis-protocol` (for the tree parsers
/// of `oracle`): reply for reply, both parsers give the same entries (ids, fields, deleted
/// ones, a claim's cursor, bare nils and deleted ids) or both fail.
pub fn stream_reply(data: &[u8]) {
    let Some((&head, input)) = data.split_first() else { return };
    oracle::agree(input, protocol(head), usize::from(head >> 1 & 63) + 1, head & 128 != 0);
}

// ---- consumer -------------------------------------------------------------------------------

/// Reads script bytes; past the end every byte is 0.
struct Script<'a>(&'a [u8]);

impl Script<'_> {
    fn byte(&mut self) -> u8 {
        let Some((&b, rest)) = self.0.split_first() else { return 0 };
        self.0 = rest;
        b
    }
    fn take(&mut self, n: usize) -> &[u8] {
        let (a, b) = self.0.split_at(n.min(self.0.len()));
        self.0 = b;
        a
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

/// One complete command at the start of `bytes` (an array of bulk strings) and its length;
/// `None` if `bytes` is a strict prefix of one. Panics if the bytes are not such a command.
fn parse_command(bytes: &[u8]) -> Option<(Vec<&[u8]>, usize)> {
    fn line(bytes: &[u8], at: usize, kind: u8) -> Option<(usize, usize)> {
        let rest = bytes.get(at..)?;
        let &first = rest.first()?;
        assert_eq!(first, kind, "expected {:?} in {bytes:?}", kind as char);
        let end = rest.windows(2).position(|w| w == b"\r\n");
        let Some(end) = end else {
            let head = rest[1..].strip_suffix(b"\r").unwrap_or(&rest[1..]);
            assert!(head.iter().all(u8::is_ascii_digit), "bad header in {bytes:?}");
            return None;
        };
        let digits = &rest[1..end];
        assert!(!digits.is_empty() && digits.len() < 20, "bad length in {bytes:?}");
        assert!(digits.iter().all(u8::is_ascii_digit), "bad length in {bytes:?}");
        let n = digits.iter().fold(0usize, |n, d| n * 10 + usize::from(d - b'0'));
        Some((n, at + end + 2))
    }
    let (n, mut at) = line(bytes, 0, b'*')?;
    assert!(n > 0, "an empty command");
    let mut args = Vec::with_capacity(n);
    for _ in 0..n {
        let (len, from) = line(bytes, at, b'$')?;
        let end = from + len;
        if bytes.len() < end + 2 {
            let tail = &bytes[end.min(bytes.len())..];
            assert!(b"\r\n".starts_with(tail), "bulk string not ended by CRLF in {bytes:?}");
            return None;
        }
        assert_eq!(&bytes[end..end + 2], b"\r\n", "bulk string not ended by CRLF in {bytes:?}");
        args.push(&bytes[from..end]);
        at = end + 2;
    }
    Some((args, at))
}

struct Harness {
    c: Consumer,
    now: Instant,
    /// Every byte fed as server input.
    input: Vec<u8>,
    /// Bytes written on the current connection and not yet parsed into whole commands.
    wire: Vec<u8>,
    /// Offset of `wire[0]` in the current connection's output.
    wire_at: usize,
    /// Output offset on this connection from which no read may be written (the stop point).
    stop_mark: Option<usize>,
    /// Entries in hand, oldest first.
    in_hand: Vec<crate::Entry>,
    concurrency: usize,
    acked: HashSet<Bytes>,
    stop_asked: bool,
    stopped_seen: bool,
    fatal: Option<Error>,
    /// The streams read.
    keys: &'static [&'static [u8]],
}

impl Harness {
    fn new_connection(&mut self) {
        self.wire.clear();
        self.wire_at = 0;
        self.stop_mark = self.stop_asked.then_some(0);
    }

    fn check_result(&mut self, result: Result<(), Error>) {
        if let Some(fatal) = &self.fatal {
            assert_eq!(result.as_ref(), Err(fatal), "a fatal error is not sticky");
        }
        if let Err(e) = result {
            assert!(!self.c.is_connected(), "still connected after {e:?}");
            if e.is_fatal() {
                assert_eq!(self.c.error(), Some(&e));
                self.fatal = Some(e);
            } else {
                assert_eq!(self.c.error(), None, "a non-fatal {e:?} recorded as fatal");
                assert!(self.c.wants_connection() || self.c.is_stopped(), "no reconnect after {e:?}");
            }
        }
    }

    fn check_state(&mut self) {
        let mut held: Vec<&[u8]> = self.c.in_hand().collect();
        let mut known: Vec<&[u8]> = self.in_hand.iter().map(|e| e.id()).collect();
        held.sort_unstable();
        known.sort_unstable();
        assert_eq!(held, known, "in hand");
        if !self.c.is_connected() {
            assert!(self.c.poll_transmit().is_none(), "bytes to write without a connection");
            // Whatever part of a command was written went down with the connection.
            self.new_connection();
        }
        if self.c.is_stopped() {
            assert!(self.stop_asked, "stopped without being asked");
            assert!(!self.c.wants_connection());
            assert!(self.c.poll_transmit().is_none(), "bytes to write after Stopped");
        }
        if let Some(fatal) = &self.fatal {
            assert_eq!(self.c.error(), Some(fatal));
            assert!(!self.c.wants_connection() && !self.c.is_connected());
            assert_eq!(self.c.poll_timeout(), None);
        }
    }

    fn transmit(&mut self, limit: usize) {
        let Some(bytes) = self.c.poll_transmit() else { return };
        let n = bytes.len().min(limit);
        self.wire.extend_from_slice(&bytes[..n]);
        self.c.advance_transmit(n);
        while let Some((args, len)) = parse_command(&self.wire) {
            self.check_command(&args);
            self.wire.drain(..len);
            self.wire_at += len;
        }
    }

    fn check_command(&self, args: &[&[u8]]) {
        let name = args[0];
        let known: [&[u8]; 17] = [
            b"EVALSHA",
            b"SCRIPT",
            b"HELLO",
            b"ROLE",
            b"WAIT",
            b"WAITAOF",
            b"AUTH",
            b"CLIENT",
            b"SELECT",
            b"XGROUP",
            b"XACK",
            b"XREADGROUP",
            b"XAUTOCLAIM",
            b"XPENDING",
            b"XCLAIM",
            b"EVAL",
            b"ASKING",
        ];
        assert!(known.contains(&name), "unknown command {args:?}");
        if name == b"XREADGROUP" || name == b"XAUTOCLAIM" {
            let after_stop = self.stop_mark.is_some_and(|mark| self.wire_at >= mark);
            assert!(!after_stop, "a read written after stop(): {args:?}");
        }
        if name == b"XCLAIM" {
            // A lease renewal (`… JUSTID`, never a zero idle time: that would take a peer's
            // entry) or a give-back (`… JUSTID RETRYCOUNT n IDLE ms`).
            let justid = args.iter().position(|a| *a == b"JUSTID").expect("JUSTID");
            let tail = &args[justid + 1..];
            assert!(
                tail.is_empty() || (tail.len() == 4 && tail[0] == b"RETRYCOUNT" && tail[2] == b"IDLE"),
                "{args:?}"
            );
            assert!(justid >= 6 && (args[4] != b"0" || !tail.is_empty()), "{args:?}");
            for id in &args[5..justid] {
                assert!(contains(&self.input, id), "XCLAIM of {id:?}, never received");
            }
        }
        if name == b"EVAL" && args[1] == crate::LEAVE_SCRIPT.as_bytes() {
            // Leaving the group: only at a clean stop, and only this consumer.
            assert!(args.len() == 6 && args[2] == b"1" && self.keys.contains(&args[3]), "{args:?}");
            assert!(args[4..] == [&b"g"[..], b"c"], "{args:?}");
            assert!(self.stop_asked, "left the group before stop(): {args:?}");
        } else if name == b"EVAL" && args[1] == crate::DEAD_LETTER_CHECK_SCRIPT.as_bytes() {
            assert!(args.len() == 7 && args[3] == b"s" && args[4] == b"dl", "{args:?}");
        } else if name == b"EVAL" {
            assert!(args.len() > 7 && self.keys.contains(&args[3]) && args[4] == b"dl", "{args:?}");
            assert!(contains(&self.input, args[7]), "dead-lettered {:?}, never received", args[7]);
        }
        if name == b"SCRIPT" {
            assert!(args.len() == 3 && args[1] == b"LOAD" && args[2] == crate::COMMIT_SCRIPT.as_bytes());
        }
        if name == b"EVALSHA" {
            // `EVALSHA sha 2 s o g c low high n` then, per entry, `id deliveries 1` and one
            // `XADD o` write.
            assert!(args.len() > 10 && self.keys.contains(&args[3]), "{args:?}");
            assert!(args[4..7] == [&b"o"[..], b"g", b"c"], "{args:?}");
            let mut at = 10;
            while at < args.len() {
                assert!(contains(&self.input, args[at]), "committed {:?}, never received", args[at]);
                assert_eq!(args[at + 2], b"1", "{args:?}");
                at += 3 + 3 + 4 + 2;
            }
            assert_eq!(at, args.len(), "{args:?}");
        }
        if name == b"XACK" {
            assert!(args.len() >= 4 && self.keys.contains(&args[1]) && args[2] == b"g", "{args:?}");
            for id in &args[3..] {
                assert!(
                    self.acked.contains(*id) || contains(&self.input, id),
                    "XACK of {id:?}, neither acked nor ever received"
                );
            }
        }
    }

    fn poll_event(&mut self) -> bool {
        let Some(event) = self.c.poll_event() else { return false };
        assert!(!self.stopped_seen, "an event after Stopped: {event:?}");
        // Notices of what happened before a fatal error are still told.
        let notice = matches!(event, Event::Notice(_));
        assert!(self.fatal.is_none() || notice, "an event after a fatal error: {event:?}");
        match event {
            Event::Entry(entry) => {
                assert!(!self.stop_asked, "an entry handed out after stop()");
                assert!(self.keys.contains(&entry.stream()), "an entry of no stream read: {entry:?}");
                let of_stream = self.in_hand.iter().filter(|e| e.stream() == entry.stream()).count();
                assert!(of_stream < self.concurrency, "more entries of a stream in hand than allowed");
                assert!(
                    !self.in_hand.iter().any(|e| e.stream() == entry.stream() && e.id() == entry.id()),
                    "an entry in hand handed out again"
                );
                assert!(contains(&self.input, entry.id()), "an entry id never received");
                if self.in_hand.len() + 1 == self.concurrency && self.keys.len() == 1 {
                    assert_eq!(self.c.poll_event(), None, "an event right after the last free slot");
                }
                self.in_hand.push(entry);
            }
            Event::Notice(_) => {}
            Event::Stopped => {
                assert!(self.stop_asked, "Stopped without stop()");
                assert!(self.in_hand.is_empty(), "Stopped with an entry in hand");
                assert!(self.c.is_stopped());
                self.stopped_seen = true;
            }
        }
        true
    }

    /// Settles the oldest entry in hand (`newest`: the newest, out of order), if any.
    fn settle(&mut self, verdict: Verdict, newest: bool) {
        if self.in_hand.is_empty() {
            assert!(!self.c.settle(b"0-1", verdict, self.now), "settled an entry not in hand");
            return;
        }
        let entry = if newest { self.in_hand.pop() } else { Some(self.in_hand.remove(0)) };
        let Some(entry) = entry else { return };
        if verdict == Verdict::Ack {
            self.acked.insert(entry.id_bytes());
        }
        assert!(
            self.c.settle_entry(&entry, verdict, self.now) || self.fatal.is_some(),
            "an entry in hand not settled"
        );
        let same = self.in_hand.iter().filter(|e| e.id() == entry.id()).count();
        assert_eq!(
            self.c.in_hand().filter(|held| *held == entry.id()).count(),
            same,
            "still in hand after settle"
        );
    }

    /// What a well-behaved driver does after each call: write everything, handle every event.
    fn drive(&mut self, verdict: Verdict) {
        for _ in 0..64 {
            self.transmit(usize::MAX);
            if !self.poll_event() {
                break;
            }
            self.settle(verdict.clone(), false);
        }
        self.transmit(usize::MAX);
    }
}

/// Consumer target: `data` is a script. `data[0]` sets up the config (bit 0 protocol, bits 1-2
/// count, bit 3 `create_group`, bit 4 recreate on group gone, bit 5 auth, bit 6 client name,
/// bit 7 db); the consumer connects, then each op byte (low 4 bits) does one thing: feed the
/// next N bytes (N from the next byte), settle the oldest in hand Ack/Retry/DeadLetter or
/// the newest Ack, commit the oldest (one `XADD`), stop, disconnect,
/// connect, advance the clock and handle the timeout, write all or part of the output, poll
/// one event, drive like a well-behaved driver, or abandon. Entries past 3 deliveries go to
/// the dead-letter stream `dl`; reads are held to 2 KiB. Asserts: at most `concurrency` entries in hand
/// (1, 2, 1 or 3 by bits 1-2; ordered by field `k` when bits 1, 2 and 6 are set), none twice; nothing after
/// Stopped, no entry and no read written after `stop()`; nothing to write while disconnected
/// or stopped; fatal errors are sticky; every command written is an array of bulk strings
/// naming a known command; every `XACK`ed id was acked by the application or at least
/// received; lease renewals and dead-letter moves name only ids received.
///
/// `origin` is where the script's virtual clock starts; any instant will do (the core never
/// reads the clock, so the caller brings one).
pub fn consumer(data: &[u8], origin: Instant) {
    run_consumer(data, origin, &[b"s"]);
}

/// Many-streams target: as [`consumer`], the consumer reading the streams `s`, `t` and `u` on
/// its one connection (the input's read replies may name any of them, or others). Asserts
/// the same, each command naming only those streams.
pub fn many_streams(data: &[u8], origin: Instant) {
    run_consumer(data, origin, &[b"s", b"t", b"u"]);
}

fn run_consumer(data: &[u8], origin: Instant, keys: &'static [&'static [u8]]) {
    let mut script = Script(data);
    let head = script.byte();
    let mut config = Config::new("s", "g", "c")
        .protocol(protocol(head))
        .count([1, 2, 3, 100][usize::from(head >> 1 & 3)])
        .concurrency([1, 2, 1, 3][usize::from(head >> 1 & 3)])
        .beat(Duration::from_millis(1000))
        .read_grace(Duration::from_millis(1000))
        .min_idle(Duration::from_millis(5000))
        .dead_letter_after(3, "dl")
        .read_bytes(2048)
        .seed(u64::from(head))
        .limits(SMALL)
        .streams(keys);
    if head & 8 != 0 {
        config = config.create_group("0");
        if head & 16 != 0 {
            config = config.on_group_gone(GroupGone::Recreate);
        }
    }
    if head & 32 != 0 {
        config = config.auth(Some("u"), "p w");
    }
    if head & 64 != 0 {
        config = config.client_name("fuzz");
    }
    if head & 64 != 0 && head & 6 == 6 {
        config = config.order_by("k");
    }
    if head & 128 != 0 {
        config = config.db(1);
    }
    let c = Consumer::new(config).expect("a valid config");
    let mut h = Harness {
        c,
        now: origin,
        input: Vec::new(),
        wire: Vec::new(),
        wire_at: 0,
        stop_mark: None,
        in_hand: Vec::new(),
        concurrency: [1, 2, 1, 3][usize::from(head >> 1 & 3)],
        acked: HashSet::new(),
        stop_asked: false,
        stopped_seen: false,
        fatal: None,
        keys,
    };
    h.c.on_connected(h.now);
    h.new_connection();
    assert!(h.c.is_connected());
    while !script.0.is_empty() {
        match script.byte() & 0x0f {
            1 => h.settle(Verdict::Ack, false),
            2 => h.settle(Verdict::Retry, false),
            3 => {
                h.stop_asked = true;
                h.c.stop();
                if h.stop_mark.is_none() {
                    // What was queued before the stop may still hold a read.
                    let queued = h.c.poll_transmit().map_or(0, <[u8]>::len);
                    h.stop_mark = Some(h.wire_at + h.wire.len() + queued);
                }
            }
            4 => h.c.on_disconnected(h.now),
            5 => {
                if h.c.wants_connection() {
                    h.c.on_connected(h.now);
                    h.new_connection();
                    assert!(h.c.is_connected(), "on_connected while wanting a connection");
                }
            }
            6 => {
                h.now += Duration::from_millis(100) * u32::from(script.byte());
                let result = h.c.handle_timeout(h.now);
                h.check_result(result);
            }
            7 => h.transmit(usize::MAX),
            8 => {
                let n = usize::from(script.byte());
                h.transmit(n);
            }
            9 => {
                h.poll_event();
            }
            10 => h.drive(Verdict::Ack),
            11 => h.drive(Verdict::Retry),
            13 => h.settle(Verdict::DeadLetter, false),
            14 => h.settle(Verdict::Ack, true),
            15 => h.settle(Verdict::Commit(crate::Writes::new().add("o", [("k", "v")])), false),
            12 => {
                h.stop_asked = true;
                h.c.abandon();
                // The entry in hand is dropped unsettled; nothing more is written.
                h.in_hand.clear();
                assert!(h.c.is_stopped() || h.fatal.is_some(), "abandon() did not stop");
                // A parting write may follow: the bytes queued before, then what was read
                // ahead given back (XCLAIM … IDLE, or XNACK): checked as they go out.
                let queued = h.c.poll_transmit().map_or(0, <[u8]>::len);
                h.stop_mark.get_or_insert(h.wire_at + h.wire.len() + queued);
                h.transmit(usize::MAX);
                assert!(h.c.poll_transmit().is_none(), "bytes to write after the parting write");
            }
            _ => {
                let n = usize::from(script.byte());
                let bytes = script.take(n);
                h.input.extend_from_slice(bytes);
                let result = h.c.handle_input(bytes, h.now);
                h.check_result(result);
            }
        }
        h.check_state();
    }
    // End as a well-behaved driver would: write what is owed, handle what is ready.
    h.drive(Verdict::Ack);
    h.check_state();
}
