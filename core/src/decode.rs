//! Incoming bytes to reply values.
//!
//! `redis-protocol` re-parses a partial frame from its first byte on every attempt (quadratic
//! when a large reply arrives in small reads), waits forever on a declared length such as
//! `$999999999`, and recurses once per nesting level. So a small resumable scanner walks the
//! bytes first: it remembers how far it got, skips bulk payloads by their declared length,
//! and enforces the frame-size and depth caps. Only a complete frame is handed to
//! `redis-protocol`, which turns it into zero-copy `Bytes` slices of the read buffer.

use bytes::{Bytes, BytesMut};
use redis_protocol::{resp2, resp3};

use crate::config::{Limits, Protocol};

/// A reply, with RESP2 and RESP3 differences folded away (RESP3 maps stay maps).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Value {
    Nil,
    Int(i64),
    /// Simple, bulk, verbatim strings and big numbers.
    Str(Bytes),
    /// An error reply's text, e.g. `NOGROUP No such key …`.
    Error(Bytes),
    Bool(bool),
    Double(f64),
    /// Arrays, sets.
    Array(Vec<Value>),
    Map(Vec<(Value, Value)>),
}

/// Why incoming bytes could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum DecodeError {
    /// Not RESP (or not the RESP the connection speaks).
    Invalid(String),
    /// A frame declared or reached more bytes than [`Limits::max_frame`].
    TooLarge,
    /// Aggregates nested deeper than [`Limits::max_depth`].
    TooDeep,
}

/// A decoded top-level frame.
#[derive(Debug, PartialEq)]
pub(crate) enum Frame {
    /// A reply to the oldest command in flight.
    Reply(Value),
    /// A RESP3 push (out of band: it answers no command).
    Push,
    /// A reply that outgrew its [`Budget`] and was discarded as it arrived: `completed`
    /// elements of the aggregate at the budget's watched depth had arrived whole before.
    Skipped { completed: u64 },
}

/// How large the next frame may grow, and what happens past that.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Budget {
    /// Bytes the frame may take (at most [`Limits::max_frame`]).
    pub bytes: usize,
    /// `None`: a larger frame is [`DecodeError::TooLarge`]. `Some(depth)`: it is skipped,
    /// and [`Frame::Skipped`] reports how many elements of the aggregate open at `depth`
    /// (0 is the frame itself) were complete when it passed the budget.
    pub skip: Option<usize>,
}

/// A frame being discarded.
#[derive(Debug)]
struct Skip {
    completed: u64,
    /// Bytes of a bulk payload (and its CRLF) still to discard before scanning resumes.
    payload: usize,
    /// The frame's last value has been scanned: it ends once `payload` is discarded.
    done: bool,
}

/// The longest header line accepted while skipping (a length, at most 20 digits and a type).
const MAX_SKIP_LINE: usize = 64;

/// Resumable splitter of the input into frames, then frames into [`Value`]s.
#[derive(Debug)]
pub(crate) struct Decoder {
    buf: BytesMut,
    limits: Limits,
    /// Bytes of the current frame already scanned and known to be whole values or headers.
    pos: usize,
    /// Where to resume looking for the CRLF that ends the header at `pos`.
    line_from: usize,
    /// Elements still owed by each open aggregate, innermost last.
    open: Vec<u64>,
    /// Elements declared by the aggregate open at the budget's watched depth.
    watched: u64,
    /// Set while the current frame is being discarded.
    skip: Option<Skip>,
    /// Bytes of the current frame discarded so far while skipping.
    skipped: usize,
}

impl Decoder {
    pub(crate) fn new(limits: Limits) -> Decoder {
        Decoder {
            buf: BytesMut::with_capacity(64 << 10),
            limits,
            pos: 0,
            line_from: 0,
            open: Vec::new(),
            watched: 0,
            skip: None,
            skipped: 0,
        }
    }

    /// Forgets everything buffered (a new connection starts clean).
    pub(crate) fn reset(&mut self) {
        self.buf.clear();
        self.restart();
    }

    fn restart(&mut self) {
        self.pos = 0;
        self.line_from = 0;
        self.open.clear();
        self.watched = 0;
        self.skip = None;
        self.skipped = 0;
    }

    pub(crate) fn extend(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes received but not yet returned as frames.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// While a frame is being skipped: how many elements were complete when it passed its
    /// budget (so a caller can act before the rest of it has arrived).
    pub(crate) fn skipping(&self) -> Option<u64> {
        self.skip.as_ref().map(|s| s.completed)
    }

    /// The next complete frame, or `None` until more bytes arrive. Frames larger than
    /// [`Limits::max_frame`] are errors.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn next(&mut self, protocol: Protocol) -> Result<Option<Frame>, DecodeError> {
        let budget = Budget { bytes: self.limits.max_frame, skip: None };
        Ok(self.next_within(protocol, budget)?.map(|(frame, _)| frame))
    }

    /// The next complete frame and its length in bytes, or `None` until more bytes arrive,
    /// holding the frame to `budget`. The budget must stay the same until the frame is out.
    pub(crate) fn next_within(
        &mut self,
        protocol: Protocol,
        budget: Budget,
    ) -> Result<Option<(Frame, usize)>, DecodeError> {
        let budget = Budget { bytes: budget.bytes.min(self.limits.max_frame), ..budget };
        let Some(len) = self.scan(budget)? else { return Ok(None) };
        if let Some(skip) = self.skip.take() {
            let _ = self.buf.split_to(len);
            let total = self.skipped + len;
            self.restart();
            return Ok(Some((Frame::Skipped { completed: skip.completed }, total)));
        }
        let bytes = self.buf.split_to(len).freeze();
        self.restart();
        to_frame(&bytes, protocol).map(|frame| Some((frame, len)))
    }

    /// Advances the scan; returns the length of the first frame once it is complete.
    fn scan(&mut self, budget: Budget) -> Result<Option<usize>, DecodeError> {
        loop {
            if let Some(skip) = &mut self.skip {
                // Discard what is already scanned (or owed by a payload) so that a skipped
                // frame holds no memory.
                let drop = (self.pos + skip.payload).min(self.buf.len());
                skip.payload -= drop.saturating_sub(self.pos);
                let _ = self.buf.split_to(drop);
                self.skipped += drop;
                self.line_from = self.line_from.saturating_sub(drop).max(1);
                self.pos = 0;
                if skip.payload > 0 {
                    return Ok(None);
                }
                if skip.done {
                    return Ok(Some(0));
                }
            }
            let Some(&kind) = self.buf.get(self.pos) else { return Ok(None) };
            let from = self.line_from.max(self.pos + 1);
            let Some(cr) = find_crlf(&self.buf, from) else {
                // Resume the search where it stopped (less one byte: a CR may be the last byte).
                self.line_from = self.buf.len().saturating_sub(1).max(self.pos + 1);
                if self.skip.is_some() && self.buf.len() - self.pos > MAX_SKIP_LINE {
                    return Err(DecodeError::Invalid("a header line without CRLF".into()));
                }
                return self.check_size(self.buf.len(), budget).map(|()| None);
            };
            let line = &self.buf[self.pos + 1..cr];
            let mut end = cr + 2;
            let children = match kind {
                b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => 0,
                b'$' | b'!' | b'=' => {
                    if kind == b'$' && line == b"-1" {
                        0
                    } else {
                        let len = parse_len(line)?;
                        self.check_size(end.saturating_add(len).saturating_add(2), budget)?;
                        if self.skip.is_some() {
                            // The payload is discarded unread, CRLF included.
                            self.pos = end;
                            self.line_from = end;
                            let done = self.complete_one();
                            if let Some(skip) = &mut self.skip {
                                skip.payload = len + 2;
                                skip.done = done;
                            }
                            continue;
                        }
                        if self.buf.len() < end + len + 2 {
                            return Ok(None);
                        }
                        if &self.buf[end + len..end + len + 2] != b"\r\n" {
                            return Err(DecodeError::Invalid("bulk string not followed by CRLF".into()));
                        }
                        end += len + 2;
                        0
                    }
                }
                b'*' | b'~' | b'>' | b'%' | b'|' => {
                    if kind == b'*' && line == b"-1" {
                        0
                    } else {
                        let n = parse_len(line)? as u64;
                        // Maps owe a key and a value per entry; an attribute also owes the
                        // value it annotates.
                        let n = match kind {
                            b'%' => n.saturating_mul(2),
                            b'|' => n.saturating_mul(2).saturating_add(1),
                            _ => n,
                        };
                        // Every element takes at least 3 bytes: refuse absurd counts early.
                        self.check_size(
                            (end as u64).saturating_add(n.saturating_mul(3)).try_into().unwrap_or(usize::MAX),
                            budget,
                        )?;
                        n
                    }
                }
                other => {
                    return Err(DecodeError::Invalid(format!("unexpected type byte 0x{other:02x}")));
                }
            };
            self.check_size(end, budget)?;
            self.pos = end;
            self.line_from = end;
            if children > 0 {
                if self.open.len() >= self.limits.max_depth {
                    return Err(DecodeError::TooDeep);
                }
                if budget.skip == Some(self.open.len()) {
                    self.watched = children;
                }
                self.open.push(children);
                continue;
            }
            if self.complete_one() {
                return Ok(Some(self.pos));
            }
        }
    }

    /// A whole value ended: it completes one element of each aggregate it closes. True if
    /// that completes the frame.
    fn complete_one(&mut self) -> bool {
        loop {
            match self.open.last_mut() {
                None => return true,
                Some(owed) => {
                    *owed -= 1;
                    if *owed > 0 {
                        return false;
                    }
                    self.open.pop();
                }
            }
        }
    }

    /// Checks that the frame, `len` bytes long so far, fits; past a skipping budget it starts
    /// skipping instead. Frames past `max_frame` are errors unless skipping.
    fn check_size(&mut self, len: usize, budget: Budget) -> Result<(), DecodeError> {
        if self.skip.is_some() || len <= budget.bytes {
            return Ok(());
        }
        match budget.skip {
            Some(depth) => {
                let completed = self.open.get(depth).map_or(0, |owed| self.watched.saturating_sub(*owed));
                self.skip = Some(Skip { completed, payload: 0, done: false });
                Ok(())
            }
            None => Err(DecodeError::TooLarge),
        }
    }
}

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    let tail = buf.get(from..)?;
    let mut at = 0;
    while let Some(i) = tail[at..].iter().position(|&b| b == b'\r') {
        let cr = at + i;
        match tail.get(cr + 1) {
            Some(b'\n') => return Some(from + cr),
            Some(_) => at = cr + 1,
            None => return None,
        }
    }
    None
}

fn parse_len(line: &[u8]) -> Result<usize, DecodeError> {
    if line.is_empty() || line.len() > 19 || !line.iter().all(u8::is_ascii_digit) {
        return Err(DecodeError::Invalid(format!("bad length {:?}", String::from_utf8_lossy(line))));
    }
    Ok(line.iter().fold(0usize, |n, d| n * 10 + usize::from(d - b'0')))
}

fn to_frame(bytes: &Bytes, protocol: Protocol) -> Result<Frame, DecodeError> {
    let invalid = |e: redis_protocol::error::RedisProtocolError| DecodeError::Invalid(e.to_string());
    let incomplete = || DecodeError::Invalid("frame incomplete after scanning".into());
    match protocol {
        Protocol::Resp2 => {
            let (frame, _) = resp2::decode::decode_bytes(bytes).map_err(invalid)?.ok_or_else(incomplete)?;
            Ok(Frame::Reply(from_resp2(frame)))
        }
        Protocol::Resp3 => {
            let (frame, _) =
                resp3::decode::complete::decode_bytes(bytes).map_err(invalid)?.ok_or_else(incomplete)?;
            if matches!(frame, resp3::types::BytesFrame::Push { .. }) {
                return Ok(Frame::Push);
            }
            from_resp3(frame).map(Frame::Reply)
        }
    }
}

fn from_resp2(frame: resp2::types::BytesFrame) -> Value {
    use resp2::types::BytesFrame as F;
    match frame {
        F::SimpleString(s) | F::BulkString(s) => Value::Str(s),
        F::Error(e) => Value::Error(e.into_inner()),
        F::Integer(i) => Value::Int(i),
        F::Array(items) => Value::Array(items.into_iter().map(from_resp2).collect()),
        F::Null => Value::Nil,
    }
}

fn from_resp3(frame: resp3::types::BytesFrame) -> Result<Value, DecodeError> {
    use resp3::types::BytesFrame as F;
    let all = |items: Vec<F>| items.into_iter().map(from_resp3).collect::<Result<Vec<_>, _>>();
    Ok(match frame {
        F::BlobString { data, .. } | F::SimpleString { data, .. } | F::BigNumber { data, .. } => {
            Value::Str(data)
        }
        F::VerbatimString { data, .. } => Value::Str(data),
        F::BlobError { data, .. } => Value::Error(data),
        F::SimpleError { data, .. } => Value::Error(data.into_inner()),
        F::Boolean { data, .. } => Value::Bool(data),
        F::Null => Value::Nil,
        F::Number { data, .. } => Value::Int(data),
        F::Double { data, .. } => Value::Double(data),
        F::Array { data, .. } | F::Push { data, .. } => Value::Array(all(data)?),
        F::Set { data, .. } => Value::Array(all(data.into_iter().collect())?),
        F::Map { data, .. } => Value::Map(
            data.into_iter().map(|(k, v)| Ok((from_resp3(k)?, from_resp3(v)?))).collect::<Result<_, _>>()?,
        ),
        F::Hello { .. } | F::ChunkedString(_) => {
            return Err(DecodeError::Invalid("a client-only or streamed RESP3 frame".into()));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoder() -> Decoder {
        Decoder::new(Limits::default())
    }

    fn all(bytes: &[u8], protocol: Protocol) -> Result<Vec<Frame>, DecodeError> {
        let mut d = decoder();
        d.extend(bytes);
        let mut frames = Vec::new();
        while let Some(f) = d.next(protocol)? {
            frames.push(f);
        }
        assert_eq!(d.buffered(), 0, "left over bytes");
        Ok(frames)
    }

    fn s(x: &str) -> Value {
        Value::Str(Bytes::copy_from_slice(x.as_bytes()))
    }

    #[test]
    fn resp2_values() {
        let frames = all(
            b"+OK\r\n-ERR no\r\n:42\r\n$3\r\nabc\r\n$-1\r\n*-1\r\n*2\r\n$1\r\na\r\n*0\r\n",
            Protocol::Resp2,
        )
        .unwrap();
        assert_eq!(
            frames,
            vec![
                Frame::Reply(s("OK")),
                Frame::Reply(Value::Error(Bytes::from_static(b"ERR no"))),
                Frame::Reply(Value::Int(42)),
                Frame::Reply(s("abc")),
                Frame::Reply(Value::Nil),
                Frame::Reply(Value::Nil),
                Frame::Reply(Value::Array(vec![s("a"), Value::Array(vec![])])),
            ]
        );
    }

    #[test]
    fn resp3_values() {
        let frames = all(
            b"_\r\n%1\r\n$1\r\ns\r\n*0\r\n#t\r\n,1.5\r\n>2\r\n+a\r\n+b\r\n=7\r\ntxt:abc\r\n",
            Protocol::Resp3,
        )
        .unwrap();
        assert_eq!(frames[0], Frame::Reply(Value::Nil));
        assert_eq!(frames[1], Frame::Reply(Value::Map(vec![(s("s"), Value::Array(vec![]))])));
        assert_eq!(frames[2], Frame::Reply(Value::Bool(true)));
        assert_eq!(frames[3], Frame::Reply(Value::Double(1.5)));
        assert_eq!(frames[4], Frame::Push);
        assert_eq!(frames[5], Frame::Reply(s("abc")));
    }

    #[test]
    fn resp2_refuses_resp3_types() {
        assert!(matches!(all(b"_\r\n", Protocol::Resp2), Err(DecodeError::Invalid(_))));
    }

    #[test]
    fn every_split_gives_the_same_frames() {
        let input: &[u8] = b"*2\r\n$6\r\nhel\rlo\r\n*3\r\n:1\r\n$-1\r\n+x\r\n-ERR a\r\n";
        let whole = all(input, Protocol::Resp2).unwrap();
        for cut in 0..=input.len() {
            let mut d = decoder();
            let mut frames = Vec::new();
            for part in [&input[..cut], &input[cut..]] {
                d.extend(part);
                while let Some(f) = d.next(Protocol::Resp2).unwrap() {
                    frames.push(f);
                }
            }
            assert_eq!(frames, whole, "cut at {cut}");
        }
        // One byte at a time.
        let mut d = decoder();
        let mut frames = Vec::new();
        for b in input {
            d.extend(std::slice::from_ref(b));
            while let Some(f) = d.next(Protocol::Resp2).unwrap() {
                frames.push(f);
            }
        }
        assert_eq!(frames, whole);
    }

    #[test]
    fn a_huge_declared_length_fails_at_once() {
        let mut d = Decoder::new(Limits { max_frame: 1 << 20, max_depth: 32 });
        d.extend(b"$999999999\r\n");
        assert_eq!(d.next(Protocol::Resp2), Err(DecodeError::TooLarge));
        let mut d = Decoder::new(Limits { max_frame: 1 << 20, max_depth: 32 });
        d.extend(b"*999999999\r\n");
        assert_eq!(d.next(Protocol::Resp2), Err(DecodeError::TooLarge));
    }

    #[test]
    fn a_long_line_without_crlf_fails() {
        let mut d = Decoder::new(Limits { max_frame: 1024, max_depth: 32 });
        d.extend(&[b'+'; 2000]);
        assert_eq!(d.next(Protocol::Resp2), Err(DecodeError::TooLarge));
    }

    #[test]
    fn deep_nesting_fails_without_recursion() {
        let mut d = decoder();
        d.extend(&b"*1\r\n".repeat(100_000));
        assert_eq!(d.next(Protocol::Resp2), Err(DecodeError::TooDeep));
    }

    #[test]
    fn nesting_up_to_the_cap_is_fine() {
        let mut d = Decoder::new(Limits { max_frame: 1 << 20, max_depth: 8 });
        let mut input = b"*1\r\n".repeat(8);
        input.extend_from_slice(b":1\r\n");
        d.extend(&input);
        assert!(matches!(d.next(Protocol::Resp2), Ok(Some(Frame::Reply(Value::Array(_))))));
    }

    #[test]
    fn junk_is_an_error() {
        for junk in [&b"?\r\n"[..], b"$abc\r\n", b"$-2\r\n", b"$1\r\nab\r\n", b":x\r\n"] {
            let mut d = decoder();
            d.extend(junk);
            assert!(matches!(d.next(Protocol::Resp2), Err(DecodeError::Invalid(_))), "{junk:?}");
        }
    }

    #[test]
    fn partial_bulk_waits_without_rescanning_the_payload() {
        let mut d = decoder();
        d.extend(b"$10\r\n01234");
        assert_eq!(d.next(Protocol::Resp2), Ok(None));
        d.extend(b"56789\r\n");
        assert_eq!(d.next(Protocol::Resp2), Ok(Some(Frame::Reply(s("0123456789")))));
    }

    /// A RESP2 read reply with `n` entries of one field each, the value `size` bytes long.
    fn read_reply(n: usize, size: usize) -> Vec<u8> {
        let mut out = format!("*1\r\n*2\r\n$1\r\ns\r\n*{n}\r\n").into_bytes();
        for i in 0..n {
            let id = format!("{i}-0");
            out.extend(format!("*2\r\n${}\r\n{id}\r\n*2\r\n$1\r\nf\r\n${size}\r\n", id.len()).bytes());
            out.extend(std::iter::repeat(b'x').take(size));
            out.extend(b"\r\n");
        }
        out
    }

    fn pull_within(d: &mut Decoder, budget: Budget, frames: &mut Vec<(Frame, usize)>) {
        while let Some(f) = d.next_within(Protocol::Resp2, budget).unwrap() {
            frames.push(f);
        }
    }

    #[test]
    fn a_reply_past_its_budget_is_skipped_in_any_split() {
        let big = read_reply(5, 1000);
        let mut input = big.clone();
        input.extend_from_slice(b"+OK\r\n");
        // Past 2,500 bytes the third entry is under way: two were complete.
        let budget = Budget { bytes: 2500, skip: Some(2) };
        let want = vec![(Frame::Skipped { completed: 2 }, big.len()), (Frame::Reply(s("OK")), 5)];
        for chunk in [1, 3, 7, 64, 999, 1000, 1001, input.len()] {
            let mut d = decoder();
            let mut frames = Vec::new();
            let mut held = 0;
            for part in input.chunks(chunk) {
                d.extend(part);
                pull_within(&mut d, budget, &mut frames);
                held = held.max(d.buffered());
            }
            assert_eq!(frames, want, "chunks of {chunk}");
            assert_eq!(d.buffered(), 0);
            // Skipping holds at most the budget plus a chunk.
            assert!(held <= 2500 + chunk.max(64) + 64, "held {held} in chunks of {chunk}");
        }
    }

    #[test]
    fn skipping_reports_early_and_within_budget_replies_pass() {
        let mut d = decoder();
        let budget = Budget { bytes: 2500, skip: Some(2) };
        let big = read_reply(5, 1000);
        d.extend(&big[..3000]);
        assert_eq!(d.next_within(Protocol::Resp2, budget), Ok(None));
        assert_eq!(d.skipping(), Some(2));
        d.extend(&big[3000..]);
        assert!(matches!(
            d.next_within(Protocol::Resp2, budget),
            Ok(Some((Frame::Skipped { completed: 2 }, _)))
        ));
        assert_eq!(d.skipping(), None);
        // A reply under the budget decodes as usual, with its length.
        let small = read_reply(2, 10);
        d.extend(&small);
        let (frame, len) = d.next_within(Protocol::Resp2, budget).unwrap().unwrap();
        assert!(matches!(frame, Frame::Reply(Value::Array(_))));
        assert_eq!(len, small.len());
        // Without a skip depth, past the budget is an error.
        d.extend(&big);
        assert_eq!(
            d.next_within(Protocol::Resp2, Budget { bytes: 2500, skip: None }),
            Err(DecodeError::TooLarge)
        );
    }

    #[test]
    fn a_single_huge_value_is_skipped_without_being_held() {
        let mut d = decoder();
        let budget = Budget { bytes: 1024, skip: Some(0) };
        d.extend(b"$1000000\r\n");
        assert_eq!(d.next_within(Protocol::Resp2, budget), Ok(None));
        for _ in 0..1000 {
            d.extend(&[b'y'; 1000]);
            assert_eq!(d.next_within(Protocol::Resp2, budget), Ok(None));
            assert_eq!(d.buffered(), 0);
        }
        d.extend(b"\r\n:7\r\n");
        assert_eq!(
            d.next_within(Protocol::Resp2, budget),
            Ok(Some((Frame::Skipped { completed: 0 }, 1_000_012)))
        );
        assert_eq!(d.next_within(Protocol::Resp2, budget), Ok(Some((Frame::Reply(Value::Int(7)), 4))));
    }
}
