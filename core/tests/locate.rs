//! The locator's timing: a lost sentinel watch is opened again after a backoff.

mod support;

use std::time::Duration;

use pelican::locate::{Dial, Found, HostPort, Locator, SentinelAnswer, Sentinels};
use support::origin;

#[test]
fn a_lost_watch_is_opened_again_after_a_backoff() {
    let hp = |text: &str| HostPort::parse(text).unwrap();
    let mut locator = Locator::new(Sentinels::new("mymaster", [hp("s1:26379"), hp("s2:26379")]).into());
    let now = origin();
    assert_eq!(locator.on_answer(SentinelAnswer::Master(hp("10.0.0.1:6379"))), Found::Master);
    assert_eq!(locator.rewatch_at(), None);
    locator.on_watch_lost(now);
    let first = locator.rewatch_at().unwrap() - now;
    assert!(first >= Duration::from_millis(250) && first <= Duration::from_millis(500), "{first:?}");
    locator.on_rewatch();
    assert_eq!(locator.rewatch_at(), None);
    locator.on_watch_lost(now);
    assert!(locator.rewatch_at().unwrap() - now >= Duration::from_millis(500), "it backs off");
    assert_eq!(locator.dial().unwrap(), Dial::Node(&hp("10.0.0.1:6379")), "the master stays known");
    // An answer (the watch open again) starts the backoff over.
    assert_eq!(locator.on_answer(SentinelAnswer::Master(hp("10.0.0.1:6379"))), Found::Same);
    locator.on_watch_lost(now);
    assert!(locator.rewatch_at().unwrap() - now <= Duration::from_millis(500));
}
