//! What the server speaks beyond the classic stream commands (Redis 6.2's), learned at each
//! connect from `HELLO`'s server map (`server`, `version`), and chosen verb by verb.

use std::fmt;

/// The stream verbs a server speaks, as [`Notice::Connected`](crate::Notice::Connected)
/// tells them. Redis 8 moved parts of the recovery loop into the protocol; the consumer uses
/// each verb where the server has it and keeps the classic loop everywhere else:
///
/// | verb | since | what the consumer does with it |
/// |---|---|---|
/// | `XREADGROUP … CLAIM` | Redis 8.4 | reads bring dead peers' idle entries with their delivery counts; `XAUTOCLAIM` only sweeps, every `min_idle` |
/// | `XNACK` | Redis 8.8 | a `Retry` releases its entry at once ([`Config::on_retry`](crate::Config::on_retry)); entries dropped unhandled are released |
/// | `XACKDEL` | Redis 8.2 | acks delete their entries, with [`Config::delete_acked`](crate::Config::delete_acked) |
/// | `MAXSIZE` | Redis 8.10 | reads are capped in bytes by the server |
///
/// Valkey (through 8.1) and Redis before 8.2 speak none of them. A server that does not
/// answer `HELLO` is taken for a classic one. [`Config::classic_verbs`](crate::Config::classic_verbs)
/// keeps the classic loop whatever the server speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Dialect {
    /// `XREADGROUP … CLAIM <min-idle>`.
    pub claim_in_read: bool,
    /// `XNACK`.
    pub release: bool,
    /// `XACKDEL`.
    pub ack_delete: bool,
    /// `XREADGROUP … MAXSIZE`.
    pub read_size_cap: bool,
}

impl Dialect {
    /// The classic verbs only: what Redis 6.2 speaks.
    pub const CLASSIC: Dialect =
        Dialect { claim_in_read: false, release: false, ack_delete: false, read_size_cap: false };

    /// What a server speaks, from `HELLO`'s `server` and `version` (`redis`, `8.10.2`).
    pub fn of(server: &[u8], version: &[u8]) -> Dialect {
        if !server.eq_ignore_ascii_case(b"redis") {
            return Dialect::CLASSIC;
        }
        let mut parts = version
            .split(|b| *b == b'.')
            .map(|p| std::str::from_utf8(p).ok().and_then(|p| p.parse::<u32>().ok()).unwrap_or(0));
        let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        let since = |m: u32, n: u32| (major, minor) >= (m, n);
        Dialect {
            claim_in_read: since(8, 4),
            release: since(8, 8),
            ack_delete: since(8, 2),
            read_size_cap: since(8, 10),
        }
    }

    /// True if it speaks none of the newer verbs.
    pub fn is_classic(&self) -> bool {
        *self == Dialect::CLASSIC
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_classic() {
            return f.write_str("classic verbs");
        }
        let verbs = [
            (self.claim_in_read, "XREADGROUP CLAIM"),
            (self.release, "XNACK"),
            (self.ack_delete, "XACKDEL"),
            (self.read_size_cap, "MAXSIZE"),
        ];
        let mut first = true;
        for (_, verb) in verbs.iter().filter(|(has, _)| *has) {
            f.write_str(if first { "" } else { ", " })?;
            f.write_str(verb)?;
            first = false;
        }
        Ok(())
    }
}

/// Whether a server has `WAITAOF` (Redis 7.2+; Valkey, which forked from 7.2).
pub(crate) fn waits_aof(server: &[u8], version: &[u8]) -> bool {
    let mut parts = version
        .split(|b| *b == b'.')
        .map(|p| std::str::from_utf8(p).ok().and_then(|p| p.parse::<u32>().ok()).unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    server.eq_ignore_ascii_case(b"valkey")
        || (server.eq_ignore_ascii_case(b"redis") && (major, minor) >= (7, 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_by_server_and_version() {
        assert!(Dialect::of(b"redis", b"6.2.14").is_classic());
        assert!(Dialect::of(b"redis", b"7.0.15").is_classic());
        assert!(Dialect::of(b"valkey", b"8.1.8").is_classic());
        assert!(Dialect::of(b"valkey", b"9.9.0").is_classic(), "Valkey speaks none of them yet");
        assert!(Dialect::of(b"redis", b"junk").is_classic());
        let d = Dialect::of(b"redis", b"8.2.0");
        assert!(d.ack_delete && !d.claim_in_read && !d.release && !d.read_size_cap);
        let d = Dialect::of(b"redis", b"8.4.1");
        assert!(d.ack_delete && d.claim_in_read && !d.release);
        let d = Dialect::of(b"redis", b"8.10.2");
        assert!(d.ack_delete && d.claim_in_read && d.release && d.read_size_cap);
        assert!(Dialect::of(b"redis", b"9.0.0").read_size_cap);
        assert_eq!(d.to_string(), "XREADGROUP CLAIM, XNACK, XACKDEL, MAXSIZE");
        assert_eq!(Dialect::CLASSIC.to_string(), "classic verbs");
    }
}
