//! Renewing ownership of entries read but not yet settled.
//!
//! An entry this consumer has read stays idle on the server until it is acked, and a peer's
//! `XAUTOCLAIM` takes it once idle past `min_idle`. So before that can happen, the consumer
//! renews it: `XCLAIM key group self <ms> id… JUSTID`, where `<ms>` is a little less than the
//! time since the reply that delivered (or last renewed) it. The server's idle time for an
//! entry still ours is at least that long, so it is claimed (idle reset, delivery count
//! unchanged); an entry a peer took had its idle time reset by the peer's claim at least
//! `min_idle` later than our read, so it is skipped and stays the peer's (the repository's
//! `PROTOCOL.md`, item 8b).

use std::time::Duration;

use bytes::Bytes;

/// Subtracted from the measured time: the server counts idle time in whole milliseconds.
const MAX_MARGIN: Duration = Duration::from_millis(50);

/// One renewal command: the minimum idle time to ask for and the ids it covers.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Renewal {
    pub min_idle_ms: u64,
    pub ids: Vec<Bytes>,
}

/// Renewals for the entries in `due`: each entry's id and the time since the reply that
/// delivered or last renewed it. Normally one command covers them all; entries read far
/// apart (over `min_idle / 2`) are split so that no entry's idle time is judged by a much
/// younger one's.
pub(crate) fn renewals(mut due: Vec<(Duration, Bytes)>, min_idle: Duration) -> Vec<Renewal> {
    let margin = MAX_MARGIN.min(min_idle / 10);
    // Youngest first: each group is judged by its youngest member.
    due.sort_by_key(|(elapsed, _)| *elapsed);
    let mut out: Vec<Renewal> = Vec::new();
    let mut youngest = None;
    for (elapsed, id) in due {
        match youngest {
            Some(young) if elapsed - young < min_idle / 2 => {
                if let Some(group) = out.last_mut() {
                    group.ids.push(id);
                }
            }
            _ => {
                youngest = Some(elapsed);
                let ms = elapsed.saturating_sub(margin).as_millis();
                let min_idle_ms = u64::try_from(ms).unwrap_or(u64::MAX).max(1);
                out.push(Renewal { min_idle_ms, ids: vec![id] });
            }
        }
    }
    out
}

/// The `XCLAIM` min-idle-time that claims an entry still this consumer's, read (or renewed)
/// `elapsed` ago, and skips it if a peer took it. Within the lease no peer can have (it
/// would need `min_idle`), so 0 claims it whatever its idle time; past it, as a renewal.
pub(crate) fn owned_since(elapsed: Duration, lease: Duration, min_idle: Duration) -> u64 {
    if elapsed < lease {
        return 0;
    }
    let ms = elapsed.saturating_sub(MAX_MARGIN.min(min_idle / 10)).as_millis();
    u64::try_from(ms).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &'static str) -> Bytes {
        Bytes::from_static(s.as_bytes())
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn one_command_for_entries_read_together() {
        let due = vec![(ms(1600), id("1-0")), (ms(1600), id("2-0")), (ms(1500), id("3-0"))];
        let plan = renewals(due, Duration::from_secs(3));
        assert_eq!(plan, [Renewal { min_idle_ms: 1450, ids: vec![id("3-0"), id("1-0"), id("2-0")] }]);
    }

    #[test]
    fn entries_read_far_apart_are_judged_apart() {
        let due = vec![(ms(10_000), id("1-0")), (ms(2000), id("2-0"))];
        let plan = renewals(due, Duration::from_secs(3));
        assert_eq!(
            plan,
            [
                Renewal { min_idle_ms: 1950, ids: vec![id("2-0")] },
                Renewal { min_idle_ms: 9950, ids: vec![id("1-0")] }
            ]
        );
    }

    #[test]
    fn ownership_within_the_lease_needs_no_idle_check() {
        assert_eq!(owned_since(ms(10), ms(500), ms(1000)), 0);
        assert_eq!(owned_since(ms(600), ms(500), ms(1000)), 550);
    }

    #[test]
    fn the_margin_is_small_for_small_min_idle() {
        assert_eq!(renewals(vec![(ms(60), id("1-0"))], ms(100))[0].min_idle_ms, 50);
        let plan = renewals(vec![(ms(0), id("1-0"))], ms(100));
        assert_eq!(plan[0].min_idle_ms, 1, "never 0, which would take a peer's entry");
    }
}
