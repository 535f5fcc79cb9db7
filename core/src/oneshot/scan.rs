//! A whole `SCAN … MATCH … TYPE stream`, cursor by cursor.

use bytes::Bytes;

use super::reply::{Reply, ReplyError};
use super::Request;
use crate::decimal::Decimal;
use crate::decode::Value;

/// The stream keys of one node matching a glob: `SCAN <cursor> MATCH <pattern> COUNT <n>
/// TYPE stream` from cursor `0` until the server gives `0` back. A key may come twice (the
/// keyspace grew meanwhile) and a key created meanwhile may be missed: scan again later for
/// those. In a cluster each master holds its own keys: scan each.
///
/// ```
/// use pelican::oneshot::{Replies, StreamScan};
///
/// let mut scan = StreamScan::new(b"orders:*");
/// let mut keys = Vec::new();
/// while let Some(request) = scan.request() {
///     // Written to the node; this is what it answered.
///     # let _ = request;
///     let mut replies = Replies::new();
///     replies.extend(b"*2\r\n$1\r\n0\r\n*1\r\n$8\r\norders:1\r\n");
///     keys.extend(scan.read(&replies.next_reply()?.expect("whole"))?);
/// }
/// assert_eq!(keys, ["orders:1"]);
/// # Ok::<(), pelican::oneshot::ReplyError>(())
/// ```
#[derive(Clone, Debug)]
pub struct StreamScan {
    pattern: Bytes,
    count: u64,
    /// `None` once the server gave cursor `0` back.
    cursor: Option<Bytes>,
}

impl StreamScan {
    /// A scan for stream keys matching `pattern` (a glob: `*`, `?`, `[…]`), a thousand keys
    /// looked at per call.
    pub fn new(pattern: &[u8]) -> StreamScan {
        StreamScan {
            pattern: Bytes::copy_from_slice(pattern),
            count: 1000,
            cursor: Some(Bytes::from_static(b"0")),
        }
    }

    /// Keys the server looks at per call (`COUNT`, a hint: it may answer with more or fewer).
    #[must_use]
    pub fn count(mut self, count: u64) -> StreamScan {
        self.count = count;
        self
    }

    /// The next call to send; `None` once the scan is done.
    pub fn request(&self) -> Option<Request> {
        let cursor = self.cursor.as_ref()?;
        let count = Decimal::new(self.count);
        Some(Request::new(&[
            b"SCAN",
            cursor,
            b"MATCH",
            &self.pattern,
            b"COUNT",
            count.as_bytes(),
            b"TYPE",
            b"stream",
        ]))
    }

    /// Reads the answer to [`request`](Self::request): the keys it found (maybe none), and
    /// where the next call starts.
    pub fn read(&mut self, reply: &Reply) -> Result<Vec<Bytes>, ReplyError> {
        let shape = |detail| ReplyError::Shape { command: "SCAN", detail };
        let Value::Array(items) = reply.value()? else { return Err(shape("not an array")) };
        let [Value::Str(cursor) | Value::Text(cursor), Value::Array(keys)] = &items[..] else {
            return Err(shape("not [cursor, keys]"));
        };
        let keys = keys
            .iter()
            .map(|key| match key {
                Value::Str(key) | Value::Text(key) => Ok(key.clone()),
                _ => Err(shape("a key is not a string")),
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.cursor = (&cursor[..] != b"0").then(|| cursor.clone());
        Ok(keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oneshot::Replies;

    fn reply(bytes: &[u8]) -> Reply {
        let mut replies = Replies::new();
        replies.extend(bytes);
        replies.next_reply().unwrap().unwrap()
    }

    #[test]
    fn cursor_by_cursor_until_zero() {
        let mut scan = StreamScan::new(b"o*").count(2);
        assert_eq!(
            scan.request().unwrap().as_bytes(),
            Request::new(&[b"SCAN", b"0", b"MATCH", b"o*", b"COUNT", b"2", b"TYPE", b"stream"]).as_bytes()
        );
        assert_eq!(scan.read(&reply(b"*2\r\n$2\r\n17\r\n*1\r\n$2\r\no1\r\n")).unwrap(), ["o1"]);
        let next = scan.request().unwrap();
        assert!(next.as_bytes().starts_with(b"*8\r\n$4\r\nSCAN\r\n$2\r\n17\r\n"));
        assert!(scan.read(&reply(b"*2\r\n$1\r\n0\r\n*0\r\n")).unwrap().is_empty());
        assert!(scan.request().is_none());
        let mut scan = StreamScan::new(b"o*");
        assert!(matches!(scan.read(&reply(b":1\r\n")), Err(ReplyError::Shape { command: "SCAN", .. })));
        assert!(matches!(scan.read(&reply(b"-ERR syntax error\r\n")), Err(ReplyError::Server(_))));
    }
}
