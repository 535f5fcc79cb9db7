//! What the consumer keeps of the entries in hand: their ids, as the bulk strings an
//! `XACK` takes, copied once from the reply (an entry's bytes start with its id's) into one
//! buffer side by side. A settle adds one to the acks as it is: no formatting, allocation or
//! reference count on the path every entry takes. The buffer is emptied whenever nothing is
//! in hand, and compacted now and then when something always is.

use std::collections::hash_map::DefaultHasher;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::ops::Range;

use bytes::{BufMut, Bytes, BytesMut};

use crate::encode::bulk;

/// Past this many bytes the buffer is compacted (when it holds mostly settled ids).
const COMPACT_AT: usize = 64 << 10;

/// The ids of the entries in hand.
#[derive(Debug, Default)]
pub(crate) struct HeldIds {
    bulks: BytesMut,
}

/// Where an id in hand is in [`HeldIds`]: its bulk string `$<n>\r\n<id>\r\n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HeldId {
    at: u32,
    len: u32,
    /// Where the id starts within the bulk string.
    id_at: u8,
}

impl HeldIds {
    /// Keeps the id of an entry from its bytes, which start with the id's bulk string, and
    /// the id's place in them.
    pub(crate) fn hold(&mut self, raw: &[u8], id: Range<usize>) -> HeldId {
        let at = self.bulks.len();
        let id_at = match raw.get(..id.end + 2) {
            // A length with leading zeros (`$03`) is RESP a server never sends, and one it
            // would refuse in a command: written out anew.
            Some(as_sent) if as_sent.len() > 1 && (as_sent[1] != b'0' || id.start == 4) && id.start < 256 => {
                self.bulks.put_slice(as_sent);
                id.start
            }
            _ => {
                let id = raw.get(id).unwrap_or_default();
                bulk(&mut self.bulks, id);
                self.bulks.len() - at - 2 - id.len()
            }
        };
        let len = self.bulks.len() - at;
        HeldId { at: at as u32, len: len as u32, id_at: id_at as u8 }
    }

    /// The bulk string.
    #[inline]
    pub(crate) fn bulk(&self, h: HeldId) -> &[u8] {
        &self.bulks[h.at as usize..(h.at + h.len) as usize]
    }

    /// The id.
    #[inline]
    pub(crate) fn id(&self, h: HeldId) -> &[u8] {
        let bulk = self.bulk(h);
        &bulk[h.id_at as usize..bulk.len() - 2]
    }

    /// The id as its own bytes.
    pub(crate) fn to_bytes(&self, h: HeldId) -> Bytes {
        Bytes::copy_from_slice(self.id(h))
    }

    /// After a settle: empties the buffer if nothing is in hand, or compacts it (rewriting
    /// `live`) once it is large and mostly settled ids.
    pub(crate) fn tidy<'a>(&mut self, live: impl ExactSizeIterator<Item = &'a mut HeldId>) {
        if live.len() == 0 {
            self.bulks.clear();
            return;
        }
        if self.bulks.len() < COMPACT_AT {
            return;
        }
        let live: Vec<&mut HeldId> = live.collect();
        let used: usize = live.iter().map(|h| h.len as usize).sum();
        if used * 4 > self.bulks.len() {
            return;
        }
        let mut bulks = BytesMut::with_capacity(COMPACT_AT);
        for h in live {
            let at = bulks.len();
            bulks.put_slice(self.bulk(*h));
            h.at = at as u32;
        }
        self.bulks = bulks;
    }

    /// Forgets every id.
    pub(crate) fn clear(&mut self) {
        self.bulks.clear();
    }
}

/// Hashes of keys ([`Config::order_by`](crate::Config::order_by)): the same everywhere and
/// every run (no random seed), and two keys that collide are only kept in order as if one.
pub(crate) type KeyHasher = BuildHasherDefault<DefaultHasher>;

/// The hash an entry's key is known by.
pub(crate) fn key_hash(key: &[u8]) -> u64 {
    let mut h = DefaultHasher::default();
    key.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_kept_as_the_bulk_strings_an_xack_takes() {
        let mut held = HeldIds::default();
        let a = held.hold(b"$3\r\n1-0\r\n*2\r\n", 4..7);
        assert_eq!((held.id(a), held.bulk(a)), (&b"1-0"[..], &b"$3\r\n1-0\r\n"[..]));
        // Leading zeros in the length: written out anew.
        let b = held.hold(b"$003\r\n2-0\r\n", 6..9);
        assert_eq!((held.id(b), held.bulk(b)), (&b"2-0"[..], &b"$3\r\n2-0\r\n"[..]));
        // Bytes that are no bulk string at all (a fuzzer's): the id alone, encoded.
        let c = held.hold(b"$", 0..1);
        assert_eq!(held.bulk(c), b"$1\r\n$\r\n");
        assert_eq!(held.id(a), b"1-0", "each keeps its place");
        let mut live = [b];
        held.tidy(live.iter_mut());
        assert_eq!(held.id(live[0]), b"2-0");
        held.tidy([].iter_mut());
        assert!(held.bulks.is_empty(), "emptied when nothing is in hand");
    }

    #[test]
    fn a_large_buffer_of_mostly_settled_ids_is_compacted() {
        let mut held = HeldIds::default();
        let mut live = Vec::new();
        for i in 0..10_000u32 {
            let id = format!("{i}-0");
            let raw = format!("${}\r\n{id}\r\n", id.len());
            let h = held.hold(raw.as_bytes(), 4..4 + id.len());
            if i % 1000 == 0 {
                live.push((h, id));
            }
            let mut ids: Vec<HeldId> = live.iter().map(|(h, _)| *h).collect();
            held.tidy(ids.iter_mut());
            for ((h, _), moved) in live.iter_mut().zip(ids) {
                *h = moved;
            }
        }
        assert!(held.bulks.len() < 2 * COMPACT_AT, "{}", held.bulks.len());
        for (h, id) in &live {
            assert_eq!(held.id(*h), id.as_bytes());
        }
    }

    #[test]
    fn key_hashes_are_stable() {
        assert_eq!(key_hash(b"k"), key_hash(b"k"));
        assert_ne!(key_hash(b"k"), key_hash(b"l"));
    }
}
