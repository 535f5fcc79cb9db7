//! Key to hash slot: CRC16/XMODEM of the key (or of its hash tag) mod 16384, as the cluster
//! specification defines it.

/// How many hash slots a Redis/Valkey Cluster has.
pub(crate) const SLOTS: u16 = 16384;

/// The hash slot that owns `key`: CRC16/XMODEM of the key, or of its hash tag, mod 16384
/// (`redis-protocol`'s implementation).
///
/// The hash tag is what lies between the first `{` and the first `}` after it, when that is
/// not empty; it lets related keys (`{user1000}.following`, `{user1000}.followers`) share a
/// slot so that one node can serve them together.
pub fn key_slot(key: &[u8]) -> u16 {
    redis_protocol::redis_keyslot(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn well_known_slots() {
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"{user1000}.followers"));
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
    }

    /// Every pair below was checked against Redis 7.0.15's `CLUSTER KEYSLOT` on a throwaway
    /// cluster-enabled node (the binary keys sent as raw RESP bulk strings).
    #[test]
    fn slots_checked_against_redis_7_0() {
        let vectors: &[(&[u8], u16)] = &[
            (b"123456789", 12739),
            (b"foo", 12182),
            (b"bar", 5061),
            (b"{user1000}.following", 3443),
            (b"{user1000}.followers", 3443),
            (b"foo{}{bar}", 8363),
            (b"foo{{bar}}zap", 4015),
            (b"foo{bar}{zap}", 5061),
            (b"", 0),
            (b"{}", 15257),
            (b"{", 4092),
            (b"}", 12090),
            (b"{{}}", 4092),
            (b"a{b", 13340),
            (b"{a}", 15495),
            (b"}{a}", 15495),
            (b"a}b{c}", 7365),
            (b"orders", 105),
            (b"{orders}:dead", 105),
            (b"pelican:stream", 9179),
            (b"user:{42}:profile", 8000),
            (b"somekey", 11058),
            (b"hello world", 15332),
            (b"\xff\x00\x01", 8002),
            (b"{\xff}", 7920),
            (b"\x00", 0),
            (b"{\x00}abc", 0),
        ];
        for &(key, slot) in vectors {
            assert_eq!(key_slot(key), slot, "{:?}", String::from_utf8_lossy(key));
        }
        assert_eq!(key_slot(&[b'x'; 100]), 2134);
    }
}
