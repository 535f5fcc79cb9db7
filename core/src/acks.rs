//! Acks owed, kept as the arguments of the `XACK` they become. The id of the entry in hand
//! waits at their end, provisionally: an `Ack` keeps it there, any other verdict drops it.
//! Settling an entry copies its id once, with no per-entry allocation or reference count.

use bytes::{BufMut, BytesMut};

use crate::encode::{bulk, header};

/// Ids to acknowledge, as `XACK` arguments (bulk strings), in order; then, while an entry is
/// in hand, its id.
#[derive(Debug, Default)]
pub(crate) struct Acks {
    args: BytesMut,
    count: usize,
    /// The entry in hand: where its bulk string starts in `args` (it runs to the end), and
    /// where its id starts.
    held: Option<(usize, usize)>,
}

impl Acks {
    /// An id.
    pub(crate) fn push(&mut self, id: &[u8]) {
        self.before_held(|args| bulk(args, id));
        self.count += 1;
    }

    /// Holds the id of the entry handed out, from the entry's bytes (which start with the
    /// id's bulk string, `$<n>\r\n<id>\r\n`) and the id's place in them.
    pub(crate) fn hold(&mut self, raw: &[u8], id: std::ops::Range<usize>) {
        self.drop_held();
        let start = self.args.len();
        match raw.get(..id.end + 2) {
            // A length with leading zeros (`$03`) is RESP a server never sends, and one it
            // would refuse in a command: written out anew.
            Some(bulk_string) if bulk_string[1] != b'0' || id.start == 4 => {
                self.args.put_slice(bulk_string);
                self.held = Some((start, start + id.start));
            }
            _ => {
                let id = raw.get(id).unwrap_or_default();
                bulk(&mut self.args, id);
                self.held = Some((start, self.args.len() - 2 - id.len()));
            }
        }
    }

    /// The id of the entry in hand.
    pub(crate) fn held(&self) -> Option<&[u8]> {
        let (_, id) = self.held?;
        self.args.get(id..self.args.len() - 2)
    }

    /// The entry in hand was acked: its id joins the acks.
    pub(crate) fn keep_held(&mut self) {
        if self.held.take().is_some() {
            self.count += 1;
        }
    }

    /// The entry in hand was not acked (or is forgotten).
    pub(crate) fn drop_held(&mut self) {
        if let Some((start, _)) = self.held.take() {
            self.args.truncate(start);
        }
    }

    /// Acks earned, not counting the entry in hand.
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Moves `other`'s acks (none held) before the entry in hand's id, if any (acks in flight
    /// when a connection was lost).
    pub(crate) fn append(&mut self, other: &mut Acks) {
        self.before_held(|args| args.put_slice(&other.args));
        self.count += other.count;
        other.clear();
    }

    /// The acks earned, leaving `empty` (a cleared `Acks`, for reuse) in their place with the
    /// entry in hand's id, if any.
    pub(crate) fn take(&mut self, mut empty: Acks) -> Acks {
        if let Some((start, id)) = self.held.take() {
            empty.args.put_slice(&self.args[start..]);
            empty.held = Some((0, id - start));
            self.args.truncate(start);
        }
        std::mem::replace(self, empty)
    }

    /// Forgets the acks and the id in hand.
    pub(crate) fn clear(&mut self) {
        self.args.clear();
        self.count = 0;
        self.held = None;
    }

    /// Appends `XACK key group <ids>` to `out` (the ids earned, not the one in hand).
    pub(crate) fn encode(&self, out: &mut BytesMut, key: &[u8], group: &[u8]) {
        let earned = &self.args[..self.held.map_or(self.args.len(), |(start, _)| start)];
        out.reserve(32 + key.len() + group.len() + earned.len());
        header(out, b'*', 3 + self.count);
        for arg in [&b"XACK"[..], key, group] {
            bulk(out, arg);
        }
        out.put_slice(earned);
    }

    /// Writes with `write`, keeping the id in hand last.
    fn before_held(&mut self, write: impl FnOnce(&mut BytesMut)) {
        match self.held {
            None => write(&mut self.args),
            Some((start, id)) => {
                let held = self.args.split_off(start);
                write(&mut self.args);
                let moved = self.args.len() - start;
                self.args.unsplit(held);
                self.held = Some((start + moved, id + moved));
            }
        }
    }

    /// The ids earned, decoded (for tests).
    #[cfg(test)]
    pub(crate) fn ids(&self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut rest = &self.args[..self.held.map_or(self.args.len(), |(start, _)| start)];
        while let Some(crlf) = rest.windows(2).position(|w| w == b"\r\n") {
            let n: usize = std::str::from_utf8(&rest[1..crlf]).unwrap().parse().unwrap();
            out.push(rest[crlf + 2..crlf + 2 + n].to_vec());
            rest = &rest[crlf + 4 + n..];
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xack(acks: &Acks) -> Vec<u8> {
        let mut out = BytesMut::new();
        acks.encode(&mut out, b"s", b"g");
        out.to_vec()
    }

    #[test]
    fn acks_encode_as_one_xack() {
        let mut acks = Acks::default();
        acks.hold(b"$3\r\n1-0\r\n*2\r\n", 4..7);
        acks.keep_held();
        acks.push(b"22-1");
        let mut more = Acks::default();
        more.push(b"3-0");
        acks.append(&mut more);
        assert!(more.is_empty());
        assert_eq!(acks.len(), 3);
        assert_eq!(acks.ids(), [b"1-0".to_vec(), b"22-1".to_vec(), b"3-0".to_vec()]);
        assert_eq!(
            xack(&acks),
            b"*6\r\n$4\r\nXACK\r\n$1\r\ns\r\n$1\r\ng\r\n$3\r\n1-0\r\n$4\r\n22-1\r\n$3\r\n3-0\r\n"
        );
    }

    #[test]
    fn the_id_in_hand_waits_at_the_end_until_its_verdict() {
        let mut acks = Acks::default();
        acks.push(b"1-0");
        acks.hold(b"$3\r\n2-0\r\n", 4..7);
        assert_eq!((acks.held(), acks.len()), (Some(&b"2-0"[..]), 1));
        // Acks written and in-flight acks coming back meanwhile leave it held, last.
        let mut more = Acks::default();
        more.push(b"0-1");
        acks.append(&mut more);
        assert_eq!((acks.held(), acks.ids()), (Some(&b"2-0"[..]), vec![b"1-0".to_vec(), b"0-1".to_vec()]));
        let sent = acks.take(Acks::default());
        assert_eq!(xack(&sent), b"*5\r\n$4\r\nXACK\r\n$1\r\ns\r\n$1\r\ng\r\n$3\r\n1-0\r\n$3\r\n0-1\r\n");
        assert_eq!((sent.held(), acks.held(), acks.len()), (None, Some(&b"2-0"[..]), 0));
        acks.keep_held();
        assert_eq!((acks.held(), acks.ids()), (None, vec![b"2-0".to_vec()]));
        // Not acked: dropped.
        acks.hold(b"$3\r\n3-0\r\n", 4..7);
        acks.drop_held();
        assert_eq!(acks.ids(), [b"2-0".to_vec()]);
    }

    #[test]
    fn an_id_with_leading_zeros_in_its_length_is_written_out_plainly() {
        let mut acks = Acks::default();
        acks.hold(b"$003\r\n1-0\r\n", 6..9);
        assert_eq!(acks.held(), Some(&b"1-0"[..]));
        acks.keep_held();
        assert_eq!(xack(&acks), b"*4\r\n$4\r\nXACK\r\n$1\r\ns\r\n$1\r\ng\r\n$3\r\n1-0\r\n");
        let long_id = vec![b'7'; 60];
        let mut bulk = b"$60\r\n".to_vec();
        bulk.extend(&long_id);
        bulk.extend(b"\r\n");
        acks.hold(&bulk, 5..65);
        assert_eq!(acks.held(), Some(&long_id[..]));
    }
}
