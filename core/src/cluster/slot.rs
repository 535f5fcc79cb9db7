//! Key to hash slot: CRC16/XMODEM of the key (or of its hash tag) mod 16384, as the cluster
//! specification defines it.

/// How many hash slots a Redis/Valkey Cluster has.
pub(crate) const SLOTS: u16 = 16384;

/// The hash slot that owns `key`: CRC16/XMODEM of the key, or of its hash tag, mod 16384.
///
/// The hash tag is what lies between the first `{` and the first `}` after it, when that is
/// not empty; it lets related keys (`{user1000}.following`, `{user1000}.followers`) share a
/// slot so that one node can serve them together.
pub fn key_slot(key: &[u8]) -> u16 {
    // 16384 is a power of two: the modulo keeps the low 14 bits.
    crc16(hash_tag(key)) & (SLOTS - 1)
}

/// The part of `key` that is hashed: its hash tag if it has a non-empty one, else all of it.
fn hash_tag(key: &[u8]) -> &[u8] {
    let Some(open) = key.iter().position(|&b| b == b'{') else { return key };
    let rest = &key[open + 1..];
    match rest.iter().position(|&b| b == b'}') {
        // `{}`: an empty tag does not count, and no later pair is looked for.
        Some(close) if close > 0 => &rest[..close],
        _ => key,
    }
}

/// CRC16/XMODEM: polynomial 0x1021, initial value 0, no reflection, no final XOR.
pub(crate) fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0, |crc, &b| (crc << 8) ^ TABLE[usize::from((crc >> 8) as u8 ^ b)])
}

/// The CRC of each byte value shifted through the top of the register, built at compile time
/// (one table lookup per key byte instead of eight shifts).
const TABLE: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::*;

    /// The bit-at-a-time definition, to check the table against.
    fn crc16_bitwise(bytes: &[u8]) -> u16 {
        let mut crc = 0u16;
        for &b in bytes {
            crc ^= u16::from(b) << 8;
            for _ in 0..8 {
                crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
            }
        }
        crc
    }

    #[test]
    fn crc16_check_value() {
        // The catalogued check value of CRC-16/XMODEM, also the one in the cluster spec.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(crc16(b""), 0);
    }

    #[test]
    fn table_matches_bitwise() {
        let all: Vec<u8> = (0..=255).collect();
        for len in 0..all.len() {
            assert_eq!(crc16(&all[..len]), crc16_bitwise(&all[..len]), "{len}");
        }
        assert_eq!(crc16(b"hello world"), crc16_bitwise(b"hello world"));
    }

    #[test]
    fn hash_tags() {
        assert_eq!(hash_tag(b"{user1000}.following"), b"user1000");
        assert_eq!(hash_tag(b"foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hash_tag(b"foo{bar}{zap}"), b"bar");
        assert_eq!(hash_tag(b"a{b"), b"a{b");
        assert_eq!(hash_tag(b"}{a}"), b"a");
        assert_eq!(hash_tag(b""), b"");
    }

    #[test]
    fn well_known_slots() {
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"{user1000}.followers"));
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % 16384);
        assert_eq!(key_slot(b"foo{{bar}}zap"), crc16(b"{bar") % 16384);
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
