//! The ceiling on dials: however a client is misconfigured, and whatever path of a transport
//! asks to connect, one address is dialled [`DIAL_BURST`] times at once at most, then once every
//! [`DIAL_SPACING`] — a handful a second. The backoffs (the consumer's, the watch's) keep well
//! under it; this is the floor that holds when one of them is bypassed or set to nothing.
//!
//! Each address keeps the instant its next dial would be on time at the steady rate (the
//! generic cell rate algorithm): a dial may go as long as that instant is less than a burst
//! ahead of now.

use std::time::{Duration, Instant};

use crate::endpoint::HostPort;

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
