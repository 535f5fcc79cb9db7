//! Failed connects told sparingly (`pelican::retell`): a reason once, then every 30 s or when
//! it changes.

mod support;

use std::time::Duration;

use pelican::retell::{Retell, RETELL};
use pelican::Notice;
use support::origin;

#[test]
fn a_reason_is_told_once_then_every_30_s_or_when_it_changes() {
    let failed =
        |reason: &str| Notice::ConnectFailed { reason: reason.into(), retry_in: Duration::from_secs(5) };
    let mut told = Retell::new();
    let start = origin();
    assert_eq!(told.line(&failed("refused"), start).unwrap(), "cannot connect: refused; retrying in 5.0 s");
    for s in 1..30 {
        assert_eq!(told.line(&failed("refused"), start + Duration::from_secs(s)), None);
    }
    assert_eq!(
        told.line(&failed("refused"), start + RETELL).unwrap(),
        "cannot connect: refused; retrying in 5.0 s (30 attempts failed since the last line)"
    );
    let later = start + RETELL + Duration::from_secs(1);
    assert!(told.line(&failed("timed out"), later).is_some(), "a new reason");
    let connected = Notice::Connected { reconnect: true, dialect: pelican::Dialect::CLASSIC };
    assert_eq!(told.line(&connected, later).unwrap(), "reconnected");
    assert!(told.line(&failed("timed out"), later).is_some(), "news after a connection");
}
