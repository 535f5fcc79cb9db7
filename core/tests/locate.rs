//! The locator's timing: a lost sentinel watch is opened again after a backoff; no address is
//! dialled more than a handful of times a second, however often asked.

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

#[test]
fn no_address_is_dialled_past_the_ceiling() {
    use pelican::locate::{DIAL_BURST, DIAL_SPACING};
    let hp = |text: &str| HostPort::parse(text).unwrap();
    let mut locator = Locator::new(Sentinels::new("mymaster", [hp("s1:26379")]).into());
    let now = origin();
    // Asked a thousand times a second for ten seconds: the burst, then four a second.
    let mut admitted = 0;
    for ms in 0..10_000 {
        if locator.admit(&hp("s1:26379"), now + Duration::from_millis(ms)).is_ok() {
            admitted += 1;
        }
    }
    let most = DIAL_BURST as u128 + 10_000 / DIAL_SPACING.as_millis();
    assert!(admitted <= most && admitted >= most - 2, "{admitted} dials in 10 s");
    // A refusal says when; the other addresses are not held up.
    let later = now + Duration::from_secs(10);
    let at = (0..=DIAL_BURST)
        .find_map(|_| locator.admit(&hp("s1:26379"), later).err())
        .expect("refused within a burst");
    assert!(at > later && at <= later + DIAL_SPACING, "{at:?}");
    assert_eq!(locator.admit(&hp("10.0.0.1:6379"), later), Ok(()));
    // A lost watch waits for its sentinel's turn too.
    assert_eq!(locator.on_answer(SentinelAnswer::Master(hp("10.0.0.1:6379"))), Found::Master);
    locator.on_watch_lost(later - Duration::from_secs(1));
    assert_eq!(locator.rewatch_at(), Some(at), "the ceiling, later than the watch's backoff");
}
