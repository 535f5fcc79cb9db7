//! The time at the start of every line pelican writes on stderr (`--log-time`): what an
//! operator reads an outage by. RFC 3339 in UTC, to the millisecond
//! (`2026-12-06T13:47:42.123Z pelican: connected …`), unless `--log-time none` (or
//! `$PELICAN_LOG_TIME=none`) leaves it to what keeps the log: journald stamps each line
//! itself.
//!
//! On by default: a line kept without its time (redirected to a file, collected by a shipper
//! that was not told when it came) cannot get it back later, while a time told twice costs a
//! few characters. The progress line rewritten in place on a terminal is not stamped; the
//! commands `--exec` and `--pipe` run write on pelican's stderr as they please.

use std::ffi::OsString;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::SystemTime;

use clap::ValueEnum;

/// Whether lines are stamped: on until told otherwise.
static ON: AtomicBool = AtomicBool::new(true);

/// `--log-time`'s values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogTime {
    /// RFC 3339 in UTC, to the millisecond.
    Utc,
    /// No time: the log adds its own (journald).
    None,
}

/// Stamps lines, or not, from now on.
pub fn set(when: LogTime) {
    ON.store(when == LogTime::Utc, Relaxed);
}

/// Before the command line is parsed (for clap's own errors): `none` if the arguments or
/// `$PELICAN_LOG_TIME` say so.
pub fn preset(args: impl IntoIterator<Item = OsString>, env: Option<OsString>) {
    let mut args = args.into_iter().skip(1);
    let mut none = env.is_some_and(|v| v == "none");
    while let Some(arg) = args.next() {
        if arg == "--log-time=none" || (arg == "--log-time" && args.next().is_some_and(|v| v == "none")) {
            none = true;
        }
    }
    if none {
        set(LogTime::None);
    }
}

/// What starts a line now: the time and a space, or nothing.
pub fn now() -> String {
    match ON.load(Relaxed) {
        true => format!("{} ", humantime::format_rfc3339_millis(SystemTime::now())),
        false => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test, as the setting is the process's.
    #[test]
    fn stamps_are_rfc_3339_in_utc_and_none_is_found_before_parsing() {
        let stamp = format!("{} ", humantime::format_rfc3339_millis(SystemTime::UNIX_EPOCH));
        assert_eq!(stamp, "1970-01-01T00:00:00.000Z ");
        let now = now();
        assert_eq!((now.len(), &now[10..11], &now[23..]), (25, "T", "Z "), "{now:?}");

        let words = |line: &str| line.split(' ').map(OsString::from).collect::<Vec<_>>();
        preset(words("pelican consume --log-time utc"), Some("utc".into()));
        assert!(ON.load(Relaxed));
        for (line, env) in [
            ("pelican consume --log-time none --bogus", None),
            ("pelican consume --log-time=none", None),
            ("pelican --grup g", Some("none".into())),
        ] {
            set(LogTime::Utc);
            preset(words(line), env);
            assert_eq!(super::now(), "", "{line}");
        }
        set(LogTime::Utc);
    }
}
