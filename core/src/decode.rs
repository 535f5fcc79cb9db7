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
use crate::error::Error;
use crate::span::{plain_span, Span};

/// A reply, with RESP2 and RESP3 differences folded away (RESP3 maps stay maps).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Value {
    Nil,
    Int(i64),
    /// Bulk (blob) strings: what servers send for ids, fields, keys and cursors.
    Str(Bytes),
    /// Simple and verbatim strings, big numbers.
    Text(Bytes),
    /// An error reply's text, e.g. `NOGROUP No such key …`.
    Error(Bytes),
    Bool(bool),
    Double(f64),
    Array(Vec<Value>),
    Map(Vec<(Value, Value)>),
    /// RESP3 sets and pushes nested in a reply: no stream reply has them.
    Other(Vec<Value>),
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

impl DecodeError {
    /// The connection's error for bytes a decoder with `limits` refused.
    pub(crate) fn into_error(self, limits: Limits) -> Error {
        match self {
            DecodeError::Invalid(detail) => Error::Protocol { detail },
            DecodeError::TooLarge => Error::FrameTooLarge { limit: limits.max_frame },
            DecodeError::TooDeep => Error::TooDeep { limit: limits.max_depth },
        }
    }
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
    /// A reply left as its bytes, for a parser of its own ([`Budget::raw`]), with the plain
    /// entries found at the budget's watched depth (give the `Vec` back with
    /// [`Decoder::reuse`]); error replies come as [`Frame::Reply`] all the same.
    Raw { bytes: Bytes, spans: Vec<Span> },
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
    /// Hand a reply that is not an error over as [`Frame::Raw`] bytes.
    pub raw: bool,
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
    /// The plain entries of the current frame's watched aggregate, stepped over whole.
    spans: Vec<Span>,
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
            spans: Vec::new(),
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
        self.spans.clear();
    }

    /// Takes back the spans of a [`Frame::Raw`] once read, to reuse their allocation.
    pub(crate) fn reuse(&mut self, mut spans: Vec<Span>) {
        if spans.capacity() > self.spans.capacity() {
            spans.clear();
            self.spans = spans;
        }
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
    pub(crate) fn next(&mut self, protocol: Protocol) -> Result<Option<Frame>, DecodeError> {
        let budget = Budget { bytes: self.limits.max_frame, skip: None, raw: false };
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
        let spans = std::mem::take(&mut self.spans);
        self.restart();
        if budget.raw && !matches!(bytes.first(), Some(b'-' | b'!' | b'>')) {
            return Ok(Some((Frame::Raw { bytes, spans }, len)));
        }
        self.reuse(spans);
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
            let Some(&first) = self.buf.get(self.pos) else { return Ok(None) };
            let mut kind = first;
            // The common case, bulk strings and arrays with a plain length, in a tight loop;
            // then whatever stopped it, on the general path.
            if self.skip.is_none() && matches!(kind, b'$' | b'*') {
                match self.scan_plain(budget)? {
                    Plain::Frame(len) => return Ok(Some(len)),
                    Plain::More => return Ok(None),
                    Plain::Other => {}
                }
                kind = match self.buf.get(self.pos) {
                    Some(&k) => k,
                    None => return Ok(None),
                };
            }
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
                b'|' => {
                    // No server sends them unasked; stream replies have none. Refused here, at
                    // any depth, rather than after parsing: a map with a repeated key keeps
                    // one of its values, not always the annotated one.
                    return Err(DecodeError::Invalid("RESP3 attributes are not supported".into()));
                }
                b'*' | b'~' | b'>' | b'%' => {
                    if kind == b'*' && line == b"-1" {
                        0
                    } else {
                        let n = parse_len(line)? as u64;
                        // Maps owe a key and a value per entry.
                        let n = if kind == b'%' { n.saturating_mul(2) } else { n };
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

    /// Scans plain headers (`$<n>` bulk strings, `*<n>` arrays, `n` > 0) while there are, and
    /// in a raw reply's watched aggregate, whole plain entries at a time (noting their spans);
    /// the general path does the rest (and the limits, and waiting for a partial payload).
    fn scan_plain(&mut self, budget: Budget) -> Result<Plain, DecodeError> {
        let Decoder { buf, pos, line_from, open, limits, watched, spans, .. } = self;
        let buf: &[u8] = buf;
        // Where an entry list's elements are: one level inside the watched aggregate, when
        // an entry's two levels also fit within the depth limit (as stepping in would check).
        let entries_at = match budget.skip {
            Some(depth) if budget.raw && depth + 3 <= limits.max_depth => depth + 1,
            _ => usize::MAX,
        };
        let mut at = *pos;
        let outcome = loop {
            let Some(&kind) = buf.get(at) else { break Plain::More };
            if kind == b'*' && open.len() == entries_at {
                if let Some(span) = plain_span(buf, at).filter(|s| s.end <= budget.bytes) {
                    spans.push(span);
                    at = span.end;
                    if close_one(open) {
                        *pos = at;
                        *line_from = at;
                        return Ok(Plain::Frame(at));
                    }
                    continue;
                }
            }
            let Some((n, end)) = digits_line(buf, at + 1) else { break Plain::Other };
            match kind {
                b'$' => {
                    let total = end + n + 2;
                    if total > budget.bytes || total > buf.len() {
                        break Plain::Other;
                    }
                    if buf[total - 2..total] != *b"\r\n" {
                        return Err(DecodeError::Invalid("bulk string not followed by CRLF".into()));
                    }
                    at = total;
                    if close_one(open) {
                        *pos = at;
                        *line_from = at;
                        return Ok(Plain::Frame(at));
                    }
                }
                b'*' if n > 0 && end.saturating_add(n.saturating_mul(3)) <= budget.bytes => {
                    if open.len() >= limits.max_depth {
                        return Err(DecodeError::TooDeep);
                    }
                    if budget.skip == Some(open.len()) {
                        *watched = n as u64;
                    }
                    open.push(n as u64);
                    at = end;
                }
                _ => break Plain::Other,
            }
        };
        *pos = at;
        *line_from = at;
        Ok(outcome)
    }

    /// A whole value ended: it completes one element of each aggregate it closes. True if
    /// that completes the frame.
    fn complete_one(&mut self) -> bool {
        close_one(&mut self.open)
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

/// What [`Decoder::scan_plain`] stopped on.
enum Plain {
    /// The frame is complete: its length.
    Frame(usize),
    /// The input ends: wait for more.
    More,
    /// Something the general path must look at.
    Other,
}

/// A whole value ended within `open`: it completes one element of each aggregate it closes.
/// True if that completes the frame.
fn close_one(open: &mut Vec<u64>) -> bool {
    loop {
        match open.last_mut() {
            None => return true,
            Some(owed) => {
                *owed -= 1;
                if *owed > 0 {
                    return false;
                }
                open.pop();
            }
        }
    }
}

/// A header line that is only a decimal number (at most 18 digits) and its CRLF, starting at
/// `at`: the number and where the next header starts. `None` for anything else, or if the
/// line is not all there yet (the general path then decides).
fn digits_line(buf: &[u8], at: usize) -> Option<(usize, usize)> {
    let mut n = 0usize;
    let mut i = at;
    while let Some(&d) = buf.get(i) {
        if !d.is_ascii_digit() {
            break;
        }
        n = n * 10 + usize::from(d - b'0');
        i += 1;
        if i - at > 18 {
            return None;
        }
    }
    (i > at && buf.get(i..i + 2) == Some(b"\r\n")).then_some((n, i + 2))
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
        F::BulkString(s) => Value::Str(s),
        F::SimpleString(s) => Value::Text(s),
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
        F::BlobString { data, .. } => Value::Str(data),
        F::SimpleString { data, .. } | F::BigNumber { data, .. } | F::VerbatimString { data, .. } => {
            Value::Text(data)
        }
        F::BlobError { data, .. } => Value::Error(data),
        F::SimpleError { data, .. } => Value::Error(data.into_inner()),
        F::Boolean { data, .. } => Value::Bool(data),
        F::Null => Value::Nil,
        F::Number { data, .. } => Value::Int(data),
        F::Double { data, .. } => Value::Double(data),
        F::Array { data, .. } => Value::Array(all(data)?),
        F::Push { data, .. } => Value::Other(all(data)?),
        F::Set { data, .. } => Value::Other(all(data.into_iter().collect())?),
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
                Frame::Reply(Value::Text(Bytes::from_static(b"OK"))),
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
        assert_eq!(frames[5], Frame::Reply(Value::Text(Bytes::from_static(b"abc"))));
    }

    #[test]
    fn raw_frames_stay_bytes_but_errors_and_pushes() {
        let mut d = decoder();
        let budget = Budget { bytes: 1 << 20, skip: None, raw: true };
        d.extend(b"*1\r\n:1\r\n-ERR x\r\n>1\r\n+p\r\n");
        let (frame, _) = d.next_within(Protocol::Resp3, budget).unwrap().unwrap();
        assert_eq!(frame, Frame::Raw { bytes: Bytes::from_static(b"*1\r\n:1\r\n"), spans: vec![] });
        let (frame, _) = d.next_within(Protocol::Resp3, budget).unwrap().unwrap();
        assert_eq!(frame, Frame::Reply(Value::Error(Bytes::from_static(b"ERR x"))));
        assert_eq!(d.next_within(Protocol::Resp3, budget).unwrap().unwrap().0, Frame::Push);
    }

    /// In a raw read reply, the plain entries of the watched list are stepped over whole and
    /// noted, whatever the split; others (a deleted entry's `[id, nil]`, one that arrives in
    /// pieces) are scanned as any value.
    #[test]
    fn plain_entries_of_a_raw_read_are_noted() {
        let reply = b"*1\r\n*2\r\n$1\r\ns\r\n*3\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nf\r\n$2\r\nv1\r\n\
                      *2\r\n$3\r\n2-0\r\n*-1\r\n*2\r\n$3\r\n3-0\r\n*0\r\n";
        let first = Span {
            start: 19,
            id_at: 27,
            id_len: 3,
            fields_at: 36,
            pairs: 1,
            fields_end: 51,
            end: 51,
            claim: None,
        };
        let third = Span {
            start: 69,
            id_at: 77,
            id_len: 3,
            fields_at: 86,
            pairs: 0,
            fields_end: 86,
            end: 86,
            claim: None,
        };
        for chunk in [reply.len(), 30, 1] {
            let mut d = decoder();
            let budget = Budget { bytes: 1 << 20, skip: Some(2), raw: true };
            let mut got = None;
            for part in reply.chunks(chunk) {
                d.extend(part);
                if let Some((frame, _)) = d.next_within(Protocol::Resp2, budget).unwrap() {
                    got = Some(frame);
                }
            }
            let Some(Frame::Raw { bytes, spans }) = got else { panic!("{got:?}") };
            assert_eq!(&bytes[..], &reply[..]);
            match chunk {
                1 => assert_eq!(spans, []),
                // The first entry is cut by the split; the third arrives whole.
                30 => assert_eq!(spans, [third]),
                _ => assert_eq!(spans, [first, third]),
            }
        }
    }

    #[test]
    fn attributes_are_refused() {
        assert!(matches!(all(b"|1\r\n+a\r\n+b\r\n:1\r\n", Protocol::Resp3), Err(DecodeError::Invalid(_))));
        // Also inside a map value that a repeated key may drop (found by the decode target).
        let nested = b"%2\r\n+k\r\n*1\r\n|1\r\n+a\r\n+b\r\n:1\r\n+k\r\n:2\r\n";
        for _ in 0..20 {
            assert!(matches!(all(nested, Protocol::Resp3), Err(DecodeError::Invalid(_))));
        }
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
        let budget = Budget { bytes: 2500, skip: Some(2), raw: false };
        let want = vec![
            (Frame::Skipped { completed: 2 }, big.len()),
            (Frame::Reply(Value::Text(Bytes::from_static(b"OK"))), 5),
        ];
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
        let budget = Budget { bytes: 2500, skip: Some(2), raw: false };
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
            d.next_within(Protocol::Resp2, Budget { bytes: 2500, skip: None, raw: false }),
            Err(DecodeError::TooLarge)
        );
    }

    #[test]
    fn a_single_huge_value_is_skipped_without_being_held() {
        let mut d = decoder();
        let budget = Budget { bytes: 1024, skip: Some(0), raw: false };
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
