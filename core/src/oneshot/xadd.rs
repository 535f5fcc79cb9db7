//! A producer's appends: `XADD stream [IDMP producer n] [MAXLEN [~] len] * field value …`.

use bytes::Bytes;

use super::reply::{Reply, ReplyError};
use super::Request;
use crate::decimal::Decimal;
use crate::decode::Value;
use crate::encode::bulk_vec;

/// The appends to one stream, each entry's command encoded by the core: `XADD stream`, then
/// `IDMP <producer> <n>` with [`idempotent`](Self::idempotent), `MAXLEN [~] <len>` with
/// [`maxlen`](Self::maxlen), then `*` (the server makes the id) and the fields.
///
/// ```
/// use pelican::oneshot::Xadd;
///
/// let xadd = Xadd::new(b"orders").idempotent(b"producer-1");
/// let mut out = Vec::new();
/// xadd.encode(&mut out, 7, &[(&b"amount"[..], &b"12.5"[..])]);
/// assert_eq!(
///     out,
///     b"*8\r\n$4\r\nXADD\r\n$6\r\norders\r\n$4\r\nIDMP\r\n$10\r\nproducer-1\r\n$1\r\n7\r\n\
///       $1\r\n*\r\n$6\r\namount\r\n$4\r\n12.5\r\n"
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Xadd {
    stream: Bytes,
    producer: Option<Bytes>,
    maxlen: Option<(u64, bool)>,
    /// `XADD stream [IDMP producer]`, encoded once (each entry's `n` follows).
    head: Vec<u8>,
    /// `[MAXLEN [~] len] *`, encoded once.
    middle: Vec<u8>,
    /// The arguments of `head` and `middle`, for the array's length.
    args: usize,
}

impl Xadd {
    /// Appends to `stream`, each entry with the id the server makes (`*`).
    pub fn new(stream: &[u8]) -> Xadd {
        Xadd {
            stream: Bytes::copy_from_slice(stream),
            producer: None,
            maxlen: None,
            head: Vec::new(),
            middle: Vec::new(),
            args: 0,
        }
        .encoded()
    }

    /// Each entry once (Redis 8.6+, `PROTOCOL.md` 42): `IDMP <producer> <n>`, `n` the
    /// number given with the entry. The server answers a repeat of `(producer, n)` within the
    /// stream's window ([`StreamInfo::idmp`](super::StreamInfo::idmp)) with the first
    /// append's id, and adds nothing; a server without `IDMP` refuses the command
    /// ([`Hello::has_idmp`](super::Hello::has_idmp) tells which do).
    #[must_use]
    pub fn idempotent(mut self, producer: &[u8]) -> Xadd {
        self.producer = Some(Bytes::copy_from_slice(producer));
        self.encoded()
    }

    /// Trims the stream to about (`approximate`: `~`, whole nodes only) or exactly `len`
    /// entries with each append: `MAXLEN [~] len`.
    #[must_use]
    pub fn maxlen(mut self, len: u64, approximate: bool) -> Xadd {
        self.maxlen = Some((len, approximate));
        self.encoded()
    }

    /// The stream appended to.
    pub fn stream(&self) -> &[u8] {
        &self.stream
    }

    /// Whether each entry carries `IDMP`.
    pub fn is_idempotent(&self) -> bool {
        self.producer.is_some()
    }

    fn encoded(mut self) -> Xadd {
        let (mut head, mut middle) = (Vec::new(), Vec::new());
        let mut args = 2;
        bulk_vec(&mut head, b"XADD");
        bulk_vec(&mut head, &self.stream);
        if let Some(producer) = &self.producer {
            bulk_vec(&mut head, b"IDMP");
            bulk_vec(&mut head, producer);
            args += 3;
        }
        if let Some((len, approximate)) = self.maxlen {
            bulk_vec(&mut middle, b"MAXLEN");
            if approximate {
                bulk_vec(&mut middle, b"~");
                args += 1;
            }
            bulk_vec(&mut middle, Decimal::new(len).as_bytes());
            args += 2;
        }
        bulk_vec(&mut middle, b"*");
        args += 1;
        (self.head, self.middle, self.args) = (head, middle, args);
        self
    }

    /// Appends to `out` the command adding entry `n` (its `IDMP` number; unused without
    /// [`idempotent`](Self::idempotent)) with `fields`, in order.
    pub fn encode(&self, out: &mut Vec<u8>, n: u64, fields: &[(impl AsRef<[u8]>, impl AsRef<[u8]>)]) {
        self.start(out, n, 2 * fields.len());
        for (field, value) in fields {
            bulk_vec(out, field.as_ref());
            bulk_vec(out, value.as_ref());
        }
    }

    /// [`encode`](Self::encode) with one more field, `last`, whose value of `len` bytes is
    /// left out: the command stops at the value's length header, and the caller writes the
    /// value and `\r\n` after it (a big value goes out from where it is, uncopied).
    pub fn encode_until_value(
        &self,
        out: &mut Vec<u8>,
        n: u64,
        fields: &[(impl AsRef<[u8]>, impl AsRef<[u8]>)],
        last: &[u8],
        len: usize,
    ) {
        self.start(out, n, 2 * fields.len() + 2);
        for (field, value) in fields {
            bulk_vec(out, field.as_ref());
            bulk_vec(out, value.as_ref());
        }
        bulk_vec(out, last);
        out.push(b'$');
        out.extend_from_slice(Decimal::new(len as u64).as_bytes());
        out.extend_from_slice(b"\r\n");
    }

    /// Entry `n`'s command, whole, as a [`Request`].
    pub fn request(&self, n: u64, fields: &[(impl AsRef<[u8]>, impl AsRef<[u8]>)]) -> Request {
        let mut out = Vec::new();
        self.encode(&mut out, n, fields);
        Request::encoded(out, b"XADD", self.args + 2 * fields.len())
    }

    /// The array header and every argument up to the fields.
    fn start(&self, out: &mut Vec<u8>, n: u64, fields: usize) {
        out.push(b'*');
        out.extend_from_slice(Decimal::new((self.args + fields) as u64).as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.head);
        if self.producer.is_some() {
            bulk_vec(out, Decimal::new(n).as_bytes());
        }
        out.extend_from_slice(&self.middle);
    }

    /// The id of the entry added (or, with `IDMP`, of the first append of a repeat); `None`
    /// for nil (`NOMKSTREAM` on a missing key).
    pub fn read_id(reply: &Reply) -> Result<Option<Bytes>, ReplyError> {
        match reply.value()? {
            Value::Str(id) | Value::Text(id) => Ok(Some(id)),
            Value::Nil => Ok(None),
            _ => Err(ReplyError::Shape { command: "XADD", detail: "not an id" }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(args: &[&[u8]]) -> Vec<u8> {
        Request::new(args).as_bytes().to_vec()
    }

    #[test]
    fn every_option_encoded_as_arrays_of_bulk_strings() {
        let none: &[(&[u8], &[u8])] = &[];
        let plain = Xadd::new(b"s");
        let mut out = Vec::new();
        plain.encode(&mut out, 7, &[(b"f", b"v")]);
        assert_eq!(out, encoded(&[b"XADD", b"s", b"*", b"f", b"v"]));
        let both = Xadd::new(b"s").maxlen(1000, true).idempotent(b"pid");
        assert!(both.is_idempotent() && !plain.is_idempotent());
        assert_eq!(
            both.request(12, &[(b"f", b"v")]).as_bytes(),
            encoded(&[b"XADD", b"s", b"IDMP", b"pid", b"12", b"MAXLEN", b"~", b"1000", b"*", b"f", b"v"])
        );
        assert_eq!(
            Xadd::new(b"s").maxlen(5, false).request(1, none).as_bytes(),
            encoded(&[b"XADD", b"s", b"MAXLEN", b"5", b"*"])
        );
        // The value left out: its header ends the command, the caller adds value and CRLF.
        let mut out = Vec::new();
        both.encode_until_value(&mut out, 3, &[(b"type", b"order")], b"p", 2);
        out.extend_from_slice(b"xx\r\n");
        assert_eq!(out, both.request(3, &[(&b"type"[..], &b"order"[..]), (b"p", b"xx")]).as_bytes());
        assert_eq!(format!("{:?}", both.request(3, none)), "Request(\"XADD\", 9 args)");
    }
}
