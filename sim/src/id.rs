//! Stream entry ids (`<ms>-<seq>`) and the ways commands spell them.

use std::fmt;

/// A stream entry id: milliseconds and a sequence number, ordered like the server orders them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EntryId {
    /// The millisecond part.
    pub ms: u64,
    /// The sequence part.
    pub seq: u64,
}

impl EntryId {
    /// The smallest id, `0-0`.
    pub const MIN: EntryId = EntryId { ms: 0, seq: 0 };
    /// The largest id, `18446744073709551615-18446744073709551615`.
    pub const MAX: EntryId = EntryId { ms: u64::MAX, seq: u64::MAX };

    /// Builds an id from its parts.
    pub const fn new(ms: u64, seq: u64) -> EntryId {
        EntryId { ms, seq }
    }

    /// The next id, or `None` past [`EntryId::MAX`].
    pub fn next(self) -> Option<EntryId> {
        if self.seq < u64::MAX {
            Some(EntryId::new(self.ms, self.seq + 1))
        } else if self.ms < u64::MAX {
            Some(EntryId::new(self.ms + 1, 0))
        } else {
            None
        }
    }

    /// The previous id, or `None` before [`EntryId::MIN`].
    pub fn prev(self) -> Option<EntryId> {
        if self.seq > 0 {
            Some(EntryId::new(self.ms, self.seq - 1))
        } else if self.ms > 0 {
            Some(EntryId::new(self.ms - 1, u64::MAX))
        } else {
            None
        }
    }

    /// Parses `<ms>-<seq>` or `<ms>` (sequence `missing_seq`), as the server's strict parser
    /// does: decimal digits only, no `-`/`+` shorthands.
    pub fn parse_strict(text: &[u8], missing_seq: u64) -> Option<EntryId> {
        if text.len() > 127 {
            return None;
        }
        match text.iter().position(|&b| b == b'-') {
            Some(dash) => Some(EntryId::new(parse_u64(&text[..dash])?, parse_u64(&text[dash + 1..])?)),
            None => Some(EntryId::new(parse_u64(text)?, missing_seq)),
        }
    }

    /// Parses an interval bound: `-`, `+`, `(id` (exclusive) or an id; returns the id and
    /// whether it was exclusive.
    pub(crate) fn parse_bound(text: &[u8], missing_seq: u64) -> Option<(EntryId, bool)> {
        match text {
            b"-" => Some((EntryId::MIN, false)),
            b"+" => Some((EntryId::MAX, false)),
            [b'(', rest @ ..] if rest.len() > 1 || rest.first().is_some_and(u8::is_ascii_digit) => {
                Some((EntryId::parse_strict(rest, missing_seq)?, true))
            }
            _ => Some((EntryId::parse_strict(text, missing_seq)?, false)),
        }
    }

    /// The id as the server writes it, `ms-seq`.
    pub fn to_bytes(self) -> Vec<u8> {
        self.to_string().into_bytes()
    }
}

impl fmt::Display for EntryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

/// Parses a non-empty run of decimal digits into a `u64`.
pub(crate) fn parse_u64(text: &[u8]) -> Option<u64> {
    if text.is_empty() || text.len() > 20 || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// Parses a signed decimal integer the way the server's `string2ll` does (no spaces, no `+`).
pub(crate) fn parse_i64(text: &[u8]) -> Option<i64> {
    let digits = text.strip_prefix(b"-").unwrap_or(text);
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if digits.len() > 1 && digits[0] == b'0' {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_orders() {
        assert_eq!(EntryId::parse_strict(b"1-2", 0), Some(EntryId::new(1, 2)));
        assert_eq!(EntryId::parse_strict(b"7", 9), Some(EntryId::new(7, 9)));
        assert_eq!(EntryId::parse_strict(b"x", 0), None);
        assert_eq!(EntryId::parse_strict(b"1-", 0), None);
        assert_eq!(EntryId::parse_strict(b"-", 0), None);
        assert_eq!(EntryId::parse_bound(b"(1-2", 0), Some((EntryId::new(1, 2), true)));
        assert_eq!(EntryId::parse_bound(b"+", 0), Some((EntryId::MAX, false)));
        assert!(EntryId::new(1, 9) < EntryId::new(2, 0));
        assert_eq!(EntryId::new(1, u64::MAX).next(), Some(EntryId::new(2, 0)));
        assert_eq!(EntryId::MAX.next(), None);
        assert_eq!(EntryId::MIN.prev(), None);
        assert_eq!(parse_i64(b"-12"), Some(-12));
        assert_eq!(parse_i64(b"012"), None);
        assert_eq!(parse_i64(b"0"), Some(0));
    }
}
