//! The cluster's error replies: `MOVED` / `ASK` redirects, and the errors that say to wait
//! (`CLUSTERDOWN`, `TRYAGAIN`) or that no retry will fix (`CROSSSLOT`).

use super::slot::SLOTS;

/// Which redirect the server sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RedirectKind {
    /// `MOVED`: the slot now lives on that node for good; update the slot map.
    Moved,
    /// `ASK`: the slot is migrating; send this one command there, preceded by `ASKING`, and
    /// keep the slot map as it is.
    Ask,
}

/// A parsed `MOVED <slot> <host>:<port>` or `ASK <slot> <host>:<port>` error.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Redirect {
    /// `MOVED` or `ASK`.
    pub kind: RedirectKind,
    /// The key's hash slot.
    pub slot: u16,
    /// The endpoint as the server wrote it. Empty (`MOVED 1 :7000`, a cluster with
    /// `cluster-preferred-endpoint-type unknown-endpoint`) means the host the command was sent
    /// to; `?` means the server knows no endpoint of the preferred type.
    pub host: String,
    /// The port to connect to (the TLS port when the cluster redirects TLS clients there).
    pub port: u16,
}

/// Parses an error reply's text, with or without its leading `-` (and trailing CRLF);
/// `None` if it is not a well-formed `MOVED` or `ASK`.
pub fn parse_redirect(error_text: &[u8]) -> Option<Redirect> {
    let text = trim(error_text);
    let mut words = text.split(|&b| b == b' ');
    let kind = match words.next()? {
        b"MOVED" => RedirectKind::Moved,
        b"ASK" => RedirectKind::Ask,
        _ => return None,
    };
    let slot = number(words.next()?).filter(|&s| s < u32::from(SLOTS))? as u16;
    let endpoint = words.next()?;
    if words.next().is_some() {
        return None;
    }
    // The port follows the last colon, so an IPv6 host (`::1:7000`) keeps its colons.
    let colon = endpoint.iter().rposition(|&b| b == b':')?;
    let port = u16::try_from(number(&endpoint[colon + 1..])?).ok()?;
    let host = &endpoint[..colon];
    // Servers write IPv6 hosts bare; take a bracketed one all the same.
    let host = match host {
        [b'[', inner @ .., b']'] => inner,
        _ => host,
    };
    let host = std::str::from_utf8(host).ok()?.to_owned();
    Some(Redirect { kind, slot, host, port })
}

/// A cluster error reply, classified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ClusterError {
    /// `MOVED` or `ASK`: send the command to another node.
    Redirect(Redirect),
    /// `CLUSTERDOWN …` (e.g. `Hash slot not served`, `The cluster is down`): retry after a
    /// backoff; the cluster may heal or finish a failover.
    Down,
    /// `TRYAGAIN …` (a multi-key command while its slot migrates): retry after a backoff.
    TryAgain,
    /// `CROSSSLOT …`: the command's keys hash to different slots. A configuration error
    /// (the stream and dead-letter keys need a common hash tag); retrying cannot help.
    CrossSlot,
}

/// Classifies an error reply's text (with or without its leading `-`); `None` if it is not
/// a cluster error. A `MOVED` or `ASK` too malformed to follow is `None` as well: the caller
/// treats it like any other unknown error.
pub(crate) fn classify(error_text: &[u8]) -> Option<ClusterError> {
    let text = trim(error_text);
    match text.split(|&b| b == b' ').next()? {
        b"MOVED" | b"ASK" => parse_redirect(text).map(ClusterError::Redirect),
        b"CLUSTERDOWN" => Some(ClusterError::Down),
        b"TRYAGAIN" => Some(ClusterError::TryAgain),
        b"CROSSSLOT" => Some(ClusterError::CrossSlot),
        _ => None,
    }
}

/// The text without a leading `-` (as on the wire) or trailing CR/LF.
fn trim(text: &[u8]) -> &[u8] {
    let text = text.strip_prefix(b"-").unwrap_or(text);
    let end = text.iter().rposition(|&b| b != b'\r' && b != b'\n').map_or(0, |i| i + 1);
    &text[..end]
}

/// A decimal of at most 5 digits, no sign: slots and ports, and nothing that could overflow.
fn number(digits: &[u8]) -> Option<u32> {
    if digits.is_empty() || digits.len() > 5 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(digits.iter().fold(0, |n, &d| n * 10 + u32::from(d - b'0')))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redirect(kind: RedirectKind, slot: u16, host: &str, port: u16) -> Redirect {
        Redirect { kind, slot, host: host.to_owned(), port }
    }

    #[test]
    fn moved_and_ask() {
        use RedirectKind::{Ask, Moved};
        // Texts as captured from Redis 7.0.15 (3 masters on loopback).
        assert_eq!(
            parse_redirect(b"MOVED 12182 127.0.0.1:27303"),
            Some(redirect(Moved, 12182, "127.0.0.1", 27303))
        );
        assert_eq!(
            parse_redirect(b"-ASK 5061 127.0.0.1:27302\r\n"),
            Some(redirect(Ask, 5061, "127.0.0.1", 27302))
        );
        assert_eq!(parse_redirect(b"MOVED 0 ::1:7000"), Some(redirect(Moved, 0, "::1", 7000)));
        assert_eq!(parse_redirect(b"ASK 16383 [::1]:7000"), Some(redirect(Ask, 16383, "::1", 7000)));
        assert_eq!(
            parse_redirect(b"MOVED 3999 node2.example:6381"),
            Some(redirect(Moved, 3999, "node2.example", 6381))
        );
        // `cluster-preferred-endpoint-type unknown-endpoint` / `hostname` with none set.
        assert_eq!(parse_redirect(b"MOVED 12182 :27303"), Some(redirect(Moved, 12182, "", 27303)));
        assert_eq!(parse_redirect(b"MOVED 12182 ?:27303"), Some(redirect(Moved, 12182, "?", 27303)));
    }

    #[test]
    fn malformed_redirects() {
        for bad in [
            &b""[..],
            b"MOVED",
            b"MOVED 12182",
            b"MOVED 12182 127.0.0.1",
            b"MOVED 12182 127.0.0.1:",
            b"MOVED 12182 127.0.0.1:65536",
            b"MOVED 12182 127.0.0.1:99999999999999999999",
            b"MOVED 16384 127.0.0.1:7000",
            b"MOVED -1 127.0.0.1:7000",
            b"MOVED +1 127.0.0.1:7000",
            b"MOVED x 127.0.0.1:7000",
            b"MOVED 1 127.0.0.1:7000 extra",
            b"MOVED  1 127.0.0.1:7000",
            b"MOVED 1 \xff:7000",
            b"moved 1 127.0.0.1:7000",
            b"ASKING",
            b"ERR MOVED 1 127.0.0.1:7000",
        ] {
            assert_eq!(parse_redirect(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn classified() {
        assert_eq!(
            classify(b"-MOVED 1 127.0.0.1:7000"),
            Some(ClusterError::Redirect(redirect(RedirectKind::Moved, 1, "127.0.0.1", 7000)))
        );
        // Texts as captured from Redis 6.2.14, 7.0.15 and Valkey 8.1.8.
        assert_eq!(classify(b"CLUSTERDOWN Hash slot not served"), Some(ClusterError::Down));
        assert_eq!(classify(b"CLUSTERDOWN The cluster is down"), Some(ClusterError::Down));
        assert_eq!(
            classify(b"TRYAGAIN Multiple keys request during rehashing of slot"),
            Some(ClusterError::TryAgain)
        );
        assert_eq!(
            classify(b"-CROSSSLOT Keys in request don't hash to the same slot\r\n"),
            Some(ClusterError::CrossSlot)
        );
        for other in
            [&b"NOGROUP No such key"[..], b"ERR unknown command", b"", b"-", b"MOVED garbage", b"CLUSTER"]
        {
            assert_eq!(classify(other), None, "{:?}", String::from_utf8_lossy(other));
        }
    }
}
