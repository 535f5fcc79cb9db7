//! Acks owed, kept as the arguments of the `XACK` they become: settling an entry copies its
//! id once, with no per-entry allocation.

use bytes::{BufMut, BytesMut};

use crate::encode::{bulk, header};

/// Ids to acknowledge, as `XACK` arguments (bulk strings), in order.
#[derive(Debug, Default)]
pub(crate) struct Acks {
    args: BytesMut,
    count: usize,
    /// How many of them a peer could have taken meanwhile (see [`Acks::push_exposed`]).
    exposed: usize,
}

impl Acks {
    /// An id.
    pub(crate) fn push(&mut self, id: &[u8]) {
        bulk(&mut self.args, id);
        self.count += 1;
    }

    /// An id already as its bulk string (as an entry in hand's is kept). `exposed`: a
    /// peer could have taken it before this ack, so one the server does not count is put
    /// down to that peer.
    pub(crate) fn push_bulk(&mut self, bulk: &[u8], exposed: bool) {
        self.args.put_slice(bulk);
        self.count += 1;
        self.exposed += usize::from(exposed);
    }

    /// How many acks a peer could have made moot.
    pub(crate) fn exposed(&self) -> usize {
        self.exposed
    }

    /// Acks earned.
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Moves `other`'s acks after these (acks in flight when a connection was lost).
    pub(crate) fn append(&mut self, other: &mut Acks) {
        self.args.put_slice(&other.args);
        self.count += other.count;
        self.exposed += other.exposed;
        other.clear();
    }

    /// The acks earned, leaving `empty` (a cleared `Acks`, for reuse) in their place.
    pub(crate) fn take(&mut self, empty: Acks) -> Acks {
        std::mem::replace(self, empty)
    }

    /// Whether `id` is among the acks.
    pub(crate) fn contains(&self, id: &[u8]) -> bool {
        // Each is a bulk string: `$<len>\r\n<id>\r\n`.
        let mut rest = &self.args[..];
        while let Some(eol) = rest.iter().position(|b| *b == b'\n') {
            let digits = rest.get(1..eol.saturating_sub(1)).unwrap_or_default();
            let Some(len) = std::str::from_utf8(digits).ok().and_then(|n| n.parse::<usize>().ok()) else {
                return false;
            };
            let Some(arg) = rest.get(eol + 1..eol + 1 + len) else { return false };
            if arg == id {
                return true;
            }
            rest = rest.get(eol + 3 + len..).unwrap_or_default();
        }
        false
    }

    /// Forgets the acks.
    pub(crate) fn clear(&mut self) {
        self.args.clear();
        self.count = 0;
        self.exposed = 0;
    }

    /// Appends `<head…> IDS <n> <ids>` to `out`: the form of `XNACK` and `XACKDEL`.
    pub(crate) fn encode_ids(&self, out: &mut BytesMut, head: &[&[u8]]) {
        out.reserve(64 + head.iter().map(|a| a.len() + 8).sum::<usize>() + self.args.len());
        header(out, b'*', head.len() + 2 + self.count);
        for arg in head {
            bulk(out, arg);
        }
        bulk(out, b"IDS");
        bulk(out, crate::decimal::Decimal::new(self.count as u64).as_bytes());
        out.put_slice(&self.args);
    }

    /// Appends `XACK key group <ids>` to `out`.
    pub(crate) fn encode(&self, out: &mut BytesMut, key: &[u8], group: &[u8]) {
        out.reserve(32 + key.len() + group.len() + self.args.len());
        header(out, b'*', 3 + self.count);
        for arg in [&b"XACK"[..], key, group] {
            bulk(out, arg);
        }
        out.put_slice(&self.args);
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
        acks.push(b"1-0");
        acks.push(b"22-1");
        let mut more = Acks::default();
        more.push(b"3-0");
        acks.append(&mut more);
        assert!(more.is_empty());
        assert_eq!(acks.len(), 3);
        assert_eq!(
            xack(&acks),
            b"*6\r\n$4\r\nXACK\r\n$1\r\ns\r\n$1\r\ng\r\n$3\r\n1-0\r\n$4\r\n22-1\r\n$3\r\n3-0\r\n"
        );
        assert!(acks.contains(b"1-0") && acks.contains(b"22-1") && acks.contains(b"3-0"));
        assert!(!acks.contains(b"2-1") && !acks.contains(b"22") && !acks.contains(b""));
        let mut xnack = BytesMut::new();
        acks.encode_ids(&mut xnack, &[b"XNACK", b"s", b"g", b"FAIL"]);
        assert_eq!(
            &xnack[..],
            &b"*9\r\n$5\r\nXNACK\r\n$1\r\ns\r\n$1\r\ng\r\n$4\r\nFAIL\r\n$3\r\nIDS\r\n$1\r\n3\r\n\
               $3\r\n1-0\r\n$4\r\n22-1\r\n$3\r\n3-0\r\n"[..]
        );
        let sent = acks.take(Acks::default());
        assert_eq!((sent.len(), acks.len()), (3, 0));
        assert!(!acks.contains(b"1-0"));
    }
}
