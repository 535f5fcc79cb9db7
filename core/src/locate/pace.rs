//! The ceiling on dials: however a client is misconfigured, and whatever path of a transport
//! asks to connect, one address is dialled [`DIAL_BURST`] times at once at most, then once every
//! [`DIAL_SPACING`] — a handful a second. The backoffs (the consumer's, the watch's) keep well
//! under it; this is the floor that holds when one of them is bypassed or set to nothing.
//!
//! Each address keeps the instant its next dial would be on time at the steady rate (the
//! generic cell rate algorithm): a dial may go as long as that instant is less than a burst
//! ahead of now.

use std::time::{Duration, Instant};

use super::HostPort;

/// Dials to one address allowed at once.
pub const DIAL_BURST: u32 = 4;

/// The steady spacing of dials to one address past the burst: 4 a second.
pub const DIAL_SPACING: Duration = Duration::from_millis(250);

/// Addresses remembered at most; past that, those longest at rest are forgotten first (an
/// address at rest has its whole burst back anyway).
const KEPT: usize = 64;

/// When each address dialled lately may be dialled next.
#[derive(Debug, Default)]
pub(crate) struct Pace {
    /// Each address and the instant its next dial is due at the steady rate.
    due: Vec<(HostPort, Instant)>,
}

impl Pace {
    /// Counts a dial to `to` at `now`, or says when it may go (`Err`): the dial must wait.
    pub(crate) fn admit(&mut self, to: &HostPort, now: Instant) -> Result<(), Instant> {
        if let Some(at) = self.not_before(to, now) {
            return Err(at);
        }
        let tolerance = DIAL_SPACING * (DIAL_BURST - 1);
        match self.due.iter_mut().find(|(addr, _)| addr == to) {
            Some((_, due)) => *due = (*due).max(now) + DIAL_SPACING,
            None => {
                // Forget those back at rest first, then the longest at rest.
                self.due.retain(|(_, due)| *due + tolerance > now);
                if self.due.len() >= KEPT {
                    if let Some(oldest) = self.due.iter().enumerate().min_by_key(|(_, (_, due))| *due) {
                        let i = oldest.0;
                        self.due.swap_remove(i);
                    }
                }
                self.due.push((to.clone(), now + DIAL_SPACING));
            }
        }
        Ok(())
    }

    /// When a dial to `to` may go, if not now.
    pub(crate) fn not_before(&self, to: &HostPort, now: Instant) -> Option<Instant> {
        self.earliest(to).filter(|at| *at > now)
    }

    /// The earliest a dial to `to` may go (`None`: any time; an instant past: now).
    pub(crate) fn earliest(&self, to: &HostPort) -> Option<Instant> {
        let (_, due) = self.due.iter().find(|(addr, _)| addr == to)?;
        due.checked_sub(DIAL_SPACING * (DIAL_BURST - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Some `Instant` to start from: only offsets matter.
    #[allow(clippy::disallowed_methods)]
    fn origin() -> Instant {
        Instant::now()
    }

    #[test]
    fn a_burst_then_a_steady_rate_per_address() {
        let (a, b) = (HostPort::new("a", 1), HostPort::new("b", 1));
        let mut pace = Pace::default();
        let start = origin();
        for _ in 0..DIAL_BURST {
            assert_eq!(pace.admit(&a, start), Ok(()));
        }
        let next = pace.admit(&a, start).unwrap_err();
        assert_eq!(next, start + DIAL_SPACING);
        assert_eq!(pace.admit(&b, start), Ok(()), "another address has its own");
        assert_eq!(pace.admit(&a, next), Ok(()));
        assert_eq!(pace.admit(&a, next), Err(next + DIAL_SPACING));
        // However often asked, over ten seconds: the burst, then one per spacing.
        let mut admitted = 0;
        let mut now = next;
        while now < start + Duration::from_secs(10) {
            if pace.admit(&a, now).is_ok() {
                admitted += 1;
            }
            now += Duration::from_millis(1);
        }
        // Two were admitted at `next` already; 9.75 s at 4 a second is 39 more at most.
        assert!((37..=39).contains(&admitted), "{admitted} in 10 s");
        // At rest long enough, the whole burst is back.
        let later = now + DIAL_SPACING * DIAL_BURST;
        for _ in 0..DIAL_BURST {
            assert_eq!(pace.admit(&a, later), Ok(()));
        }
        assert!(pace.admit(&a, later).is_err());
    }

    #[test]
    fn remembers_a_bounded_number_of_addresses() {
        let mut pace = Pace::default();
        let now = origin();
        for port in 1..=1000 {
            assert_eq!(pace.admit(&HostPort::new("h", port), now), Ok(()));
        }
        assert!(pace.due.len() <= KEPT);
    }
}
