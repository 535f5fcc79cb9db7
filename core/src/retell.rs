//! Failed connects told sparingly, sans-IO: a connect failing again for the same reason is
//! told once, then again only when the reason changes or every [`RETELL`], with how many
//! attempts failed meanwhile. An outage is a line every 30 s in a log, not one per retry;
//! the notices themselves still come at every attempt (an observer counts them).

use std::time::{Duration, Instant};

use crate::Notice;

/// How often a connect failing for the same reason is told again.
pub const RETELL: Duration = Duration::from_secs(30);

/// What has been told of failed connects (see the [module](self) docs).
#[derive(Debug, Default)]
pub struct Retell {
    /// The reason last told, when, and the attempts failed for it since.
    last: Option<(String, Instant, u64)>,
}

impl Retell {
    /// Nothing told yet.
    pub fn new() -> Retell {
        Retell::default()
    }

    /// The line to tell for `notice` at `now`, if any: every notice but a failed connect is
    /// told as it is (a connection resets what was told); a failed connect, when its reason
    /// is new or [`RETELL`] has passed since it was last told.
    pub fn line(&mut self, notice: &Notice, now: Instant) -> Option<String> {
        let Notice::ConnectFailed { reason, .. } = notice else {
            if matches!(notice, Notice::Connected { .. }) {
                self.last = None;
            }
            return Some(notice.to_string());
        };
        match &mut self.last {
            Some((last, at, quiet)) if last == reason && now.saturating_duration_since(*at) < RETELL => {
                *quiet += 1;
                None
            }
            Some((last, at, quiet)) if last == reason => {
                let line = format!("{notice} ({} attempts failed since the last line)", *quiet + 1);
                (*at, *quiet) = (now, 0);
                Some(line)
            }
            _ => {
                self.last = Some((reason.clone(), now, 0));
                Some(notice.to_string())
            }
        }
    }
}
