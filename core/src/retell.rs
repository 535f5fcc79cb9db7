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

#[cfg(test)]
mod tests {
    use super::*;

    /// Some `Instant` to start from: only offsets matter.
    #[allow(clippy::disallowed_methods)]
    fn origin() -> Instant {
        Instant::now()
    }

    #[test]
    fn a_reason_is_told_once_then_every_30_s_or_when_it_changes() {
        let failed =
            |reason: &str| Notice::ConnectFailed { reason: reason.into(), retry_in: Duration::from_secs(5) };
        let mut told = Retell::new();
        let start = origin();
        assert_eq!(
            told.line(&failed("refused"), start).unwrap(),
            "cannot connect: refused; retrying in 5.0 s"
        );
        for s in 1..30 {
            assert_eq!(told.line(&failed("refused"), start + Duration::from_secs(s)), None);
        }
        assert_eq!(
            told.line(&failed("refused"), start + RETELL).unwrap(),
            "cannot connect: refused; retrying in 5.0 s (30 attempts failed since the last line)"
        );
        let later = start + RETELL + Duration::from_secs(1);
        assert!(told.line(&failed("timed out"), later).is_some(), "a new reason");
        let connected = Notice::Connected { reconnect: true, dialect: crate::Dialect::CLASSIC };
        assert_eq!(told.line(&connected, later).unwrap(), "reconnected");
        assert!(told.line(&failed("timed out"), later).is_some(), "news after a connection");
    }
}
