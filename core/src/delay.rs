//! Retries that wait ([`Verdict::RetryAfter`](crate::Verdict::RetryAfter), and `Retry` under
//! [`OnRetry::Backoff`](crate::OnRetry::Backoff)): the server keeps the wait, not this
//! process.
//!
//! An entry to wait `d` is *parked*: claimed to the group's [`PARKING_CONSUMER`] with its idle
//! time set to `min_idle − d` (`XCLAIM key group pelican:delayed <owned> id JUSTID RETRYCOUNT n
//! IDLE ms`), owner-checked as a lease renewal is (`PROTOCOL.md` 8b). It leaves this
//! consumer's pending list — a drain after a restart does not find it — and any consumer's
//! reclaim (`XAUTOCLAIM`, or a read with `CLAIM` on Redis 8.4+) takes it once it has been idle
//! `min_idle`: `d` after the park, and never before (the server sets idle times from its own
//! clock at the park, which comes after the verdict). `JUSTID` keeps the delivery count and
//! `RETRYCOUNT` sets it to the handed-out one (a drain that read the entry again before the
//! park went out raised it).
//!
//! The server cannot date a delivery in the future (`IDLE` is counted back from now, and a
//! negative one is taken as 0, `PROTOCOL.md` 44): a wait longer than `min_idle` is parked idle
//! 0 and parked again every lease while this consumer runs, until what is left fits in one
//! park. Such an entry is watched in memory; if the process ends meanwhile it comes back
//! `min_idle` after its last park.
//!
//! On servers whose reads do not claim (before Redis 8.4, Valkey) the consumer that parked an
//! entry also sweeps for it when it is due (an `XAUTOCLAIM` from its id), rather than at its
//! next beat; peers find it at their beats. Here: what is owed, what is watched, and the
//! command. The consumer sends them (`consumer/owed.rs`).

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use crate::config::{Config, MAX_DURATION};
use crate::decimal::Decimal;
use crate::encode::command;
use crate::lease;

/// The group's consumer that holds entries waiting for a retry (see [`Verdict::RetryAfter`](crate::Verdict::RetryAfter)):
/// `XPENDING` and `XINFO CONSUMERS` show them under it until a reclaim takes them, due.
/// No process reads under this name; `pelican retire` removes it when it holds nothing.
pub const PARKING_CONSUMER: &str = "pelican:delayed";

/// A park owed to the server (or sent and unanswered).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Park {
    pub id: Bytes,
    /// When it may be handed out again.
    pub due: Instant,
    /// When it was last delivered, renewed or parked (by a reply): the owner check counts
    /// from it.
    pub since: Instant,
    /// The delivery count to set, on the first park (from this consumer's pending list).
    pub deliveries: Option<u64>,
    /// Sent with what was left of its wait (set as it is encoded).
    pub last: bool,
}

/// An entry parked by this consumer and watched: to park again (`last` false), or, where
/// reads do not claim, to sweep for when due.
#[derive(Debug)]
struct Parked {
    id: Bytes,
    due: Instant,
    /// The reply that parked it.
    parked_at: Instant,
    /// Parked with what was left of its wait: nothing more to do but take it back when due.
    last: bool,
}

/// One stream's waiting retries.
#[derive(Debug, Default)]
pub(crate) struct Delays {
    owed: Vec<Park>,
    parked: Vec<Parked>,
}

impl Delays {
    /// An entry in hand given a retry after `delay` at `now`: its id, the deliveries it was
    /// handed out with, and when it was last read or renewed (`None`: a peer took it — not
    /// ours to park).
    pub(crate) fn retry(
        &mut self,
        id: Bytes,
        deliveries: u64,
        since: Option<Instant>,
        delay: Duration,
        now: Instant,
    ) {
        let Some(since) = since else { return };
        let due = now + delay.min(MAX_DURATION);
        self.owed.retain(|p| p.id != id);
        self.owed.push(Park { id, due, since, deliveries: Some(deliveries), last: false });
    }

    /// Parks to send.
    pub(crate) fn owes(&self) -> bool {
        !self.owed.is_empty()
    }

    /// Nothing owed, nothing watched.
    pub(crate) fn is_empty(&self) -> bool {
        self.owed.is_empty() && self.parked.is_empty()
    }

    /// The parks owed, to send now.
    pub(crate) fn take_owed(&mut self) -> Vec<Park> {
        std::mem::take(&mut self.owed)
    }

    /// A park sent and not answered (a lost connection): owed again.
    pub(crate) fn keep(&mut self, park: Park) {
        if !self.owed.iter().any(|p| p.id == park.id) {
            self.owed.push(park);
        }
    }

    /// Whether a first park of `id` is owed (the entry still in this consumer's pending
    /// list, not to be handed out by a drain).
    pub(crate) fn owes_park(&self, id: &[u8]) -> bool {
        self.owed.iter().any(|p| p.id == id && p.deliveries.is_some())
    }

    /// A drain read `id` again before its park went out: the server reset its idle time.
    pub(crate) fn reread(&mut self, id: &[u8], now: Instant) {
        if let Some(p) = self.owed.iter_mut().find(|p| p.id == id) {
            p.since = now;
        }
    }

    /// A park answered at `now`: `parked` if the server moved the entry (else a peer took
    /// it, or it was acked or deleted: nothing more to do). `watch_last`: a park with what
    /// was left of the wait is watched, to sweep for the entry when due (servers whose reads
    /// do not claim).
    pub(crate) fn on_parked(&mut self, park: Park, parked: bool, watch_last: bool, now: Instant) {
        if !parked || (park.last && !watch_last) {
            return;
        }
        let Park { id, due, last, .. } = park;
        self.parked.retain(|p| p.id != id);
        self.parked.push(Parked { id, due, parked_at: now, last });
    }

    /// The next time something is to be done: a park again (a lease after the last), or a
    /// sweep for an entry due.
    pub(crate) fn next_due(&self, config: &Config) -> Option<Instant> {
        let lease = config.lease_threshold();
        self.parked.iter().map(|p| if p.last { p.due } else { p.parked_at + lease }).min()
    }

    /// What has come due by `now`: entries to park again become owed; of the entries due to
    /// come back, the smallest id is returned (sweep from it) and they are forgotten.
    pub(crate) fn come_due(&mut self, config: &Config, now: Instant) -> Option<Bytes> {
        let lease = config.lease_threshold();
        let mut sweep_from: Option<Bytes> = None;
        let mut i = 0;
        while i < self.parked.len() {
            let p = &self.parked[i];
            let due = if p.last { p.due } else { p.parked_at + lease };
            if now < due {
                i += 1;
                continue;
            }
            let p = self.parked.swap_remove(i);
            if p.last {
                if sweep_from.as_ref().map_or(true, |from| id_before(&p.id, from)) {
                    sweep_from = Some(p.id);
                }
            } else {
                self.owed.push(Park {
                    id: p.id,
                    due: p.due,
                    since: p.parked_at,
                    deliveries: None,
                    last: false,
                });
            }
        }
        sweep_from
    }

    /// Forgets everything (an abandon: what was parked stays parked, due where it is).
    pub(crate) fn clear(&mut self) {
        self.owed.clear();
        self.parked.clear();
    }
}

/// `XCLAIM key group pelican:delayed <owned> id JUSTID [RETRYCOUNT n] IDLE <ms>` for `park`,
/// sent at `now`: idle `min_idle` less what is left of its wait (0 if more is left: then it
/// is not the `last`).
pub(crate) fn encode(out: &mut BytesMut, config: &Config, key: &[u8], park: &mut Park, now: Instant) {
    let left = park.due.saturating_duration_since(now);
    park.last = left <= config.min_idle;
    let idle = config.min_idle.saturating_sub(left);
    let owned = lease::owned_since(
        now.saturating_duration_since(park.since),
        config.lease_threshold(),
        config.min_idle,
    );
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let (owned, idle) = (Decimal::new(owned), Decimal::new(ms(idle)));
    let deliveries = park.deliveries.map(Decimal::new);
    let mut args: Vec<&[u8]> = vec![
        b"XCLAIM",
        key,
        &config.group,
        PARKING_CONSUMER.as_bytes(),
        owned.as_bytes(),
        &park.id,
        b"JUSTID",
    ];
    if let Some(n) = &deliveries {
        args.extend([&b"RETRYCOUNT"[..], n.as_bytes()]);
    }
    args.extend([&b"IDLE"[..], idle.as_bytes()]);
    command(out, &args);
}

/// Whether stream id `a` comes before `b` (`ms-seq`, compared as numbers; an id that does
/// not parse comes last).
pub(crate) fn id_before(a: &[u8], b: &[u8]) -> bool {
    match (parse_id(a), parse_id(b)) {
        (Some(a), Some(b)) => a < b,
        (Some(_), None) => true,
        _ => false,
    }
}

fn parse_id(id: &[u8]) -> Option<(u64, u64)> {
    let text = std::str::from_utf8(id).ok()?;
    let (ms, seq) = text.split_once('-').unwrap_or((text, "0"));
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_origin::origin;

    fn words(out: &BytesMut) -> Vec<String> {
        // `*n\r\n$len\r\nword\r\n…`: every other line after the header, lengths skipped.
        let text = String::from_utf8_lossy(out);
        text.split("\r\n")
            .skip(1)
            .filter(|l| !l.starts_with('$') && !l.is_empty())
            .map(String::from)
            .collect()
    }

    #[test]
    fn a_park_sets_the_idle_time_that_makes_it_claimable_when_due() {
        let config = Config::new("s", "g", "c").min_idle(Duration::from_secs(30));
        let now = origin();
        let mut park = Park {
            id: Bytes::from("5-0"),
            due: now + Duration::from_secs(2),
            since: now,
            deliveries: Some(3),
            last: false,
        };
        let mut out = BytesMut::new();
        encode(&mut out, &config, b"s", &mut park, now);
        assert!(park.last);
        assert_eq!(
            words(&out),
            ["XCLAIM", "s", "g", "pelican:delayed", "0", "5-0", "JUSTID", "RETRYCOUNT", "3", "IDLE", "28000"]
        );
        // Held past the lease: owner-checked as a renewal; a wait past min_idle: idle 0.
        let later = now + Duration::from_secs(20);
        let mut park = Park { due: now + Duration::from_secs(90), deliveries: None, ..park };
        let mut out = BytesMut::new();
        encode(&mut out, &config, b"s", &mut park, later);
        assert!(!park.last);
        assert_eq!(
            words(&out),
            ["XCLAIM", "s", "g", "pelican:delayed", "19950", "5-0", "JUSTID", "IDLE", "0"]
        );
    }

    #[test]
    fn long_waits_are_parked_again_until_what_is_left_fits() {
        let config = Config::new("s", "g", "c").min_idle(Duration::from_secs(10)); // lease 5 s
        let t0 = origin();
        let s = Duration::from_secs;
        let mut delays = Delays::default();
        delays.retry(Bytes::from("1-0"), 1, Some(t0), s(22), t0);
        let mut park = delays.take_owed().remove(0);
        encode(&mut BytesMut::new(), &config, b"s", &mut park, t0);
        delays.on_parked(park, true, true, t0);
        assert_eq!(delays.next_due(&config), Some(t0 + s(5)));
        let (mut at, mut parks) = (t0, 1);
        while !delays.parked.iter().all(|p| p.last) {
            at = delays.next_due(&config).unwrap();
            assert_eq!(delays.come_due(&config, at), None);
            let mut park = delays.take_owed().pop().unwrap();
            assert_eq!(park.deliveries, None, "the count is set once");
            encode(&mut BytesMut::new(), &config, b"s", &mut park, at);
            parks += 1;
            delays.on_parked(park, true, true, at);
        }
        // Parked at 0, 5 and 10 s (22 s left, 17, 12: too long), then at 15 s with 7 left.
        assert_eq!((parks, at), (4, t0 + s(15)));
        assert_eq!(delays.next_due(&config), Some(t0 + s(22)));
        assert_eq!(delays.come_due(&config, t0 + s(22)).as_deref(), Some(&b"1-0"[..]));
        assert!(delays.is_empty());
    }

    #[test]
    fn where_reads_claim_a_last_park_is_not_watched_and_a_lost_one_is_forgotten() {
        let config = Config::new("s", "g", "c");
        let t0 = origin();
        let mut delays = Delays::default();
        delays.retry(Bytes::from("1-0"), 1, Some(t0), Duration::from_secs(1), t0);
        delays.retry(Bytes::from("2-0"), 1, Some(t0), Duration::from_secs(1), t0);
        delays.retry(Bytes::from("3-0"), 1, None, Duration::from_secs(1), t0);
        assert!(delays.owes_park(b"1-0") && !delays.owes_park(b"3-0"));
        let mut owed = delays.take_owed().into_iter().map(|mut p| {
            encode(&mut BytesMut::new(), &config, b"s", &mut p, t0);
            p
        });
        delays.on_parked(owed.next().unwrap(), true, false, t0);
        delays.on_parked(owed.next().unwrap(), false, true, t0);
        assert!(delays.is_empty());
    }

    #[test]
    fn ids_compare_as_numbers() {
        assert!(id_before(b"9-0", b"10-0"));
        assert!(id_before(b"10-2", b"10-10"));
        assert!(!id_before(b"10-0", b"10-0"));
        assert!(id_before(b"1", b"1-1"));
        assert!(id_before(b"1-0", b"x") && !id_before(b"x", b"1-0"));
    }
}
