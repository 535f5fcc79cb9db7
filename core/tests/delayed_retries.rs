//! Retries that wait (`Verdict::RetryAfter`, and `Retry` under the default
//! `OnRetry::Backoff`): the park that hands the wait to the server, the sweep when it is due,
//! a wait longer than `min_idle` parked again, a park lost with the connection; driven through
//! the public API with replies captured from the real servers. A park is an `XCLAIM … JUSTID`,
//! answered as `lease_all` is (the ids moved); the answers naming the one id parked here are
//! written out in that shape.

mod support;

use std::time::Duration;

use pelican::{Config, Dialect, Event, Notice, OnRetry, Protocol, RetryBackoff, Verdict};
use support::*;

const BEAT: Duration = Duration::from_secs(2);
const MIN_IDLE: Duration = Duration::from_secs(3);

/// The answer of a park that moved 1-0 (RESP2 and RESP3 alike), and of one that moved
/// nothing (a peer had taken the entry).
const PARKED: &[u8] = b"*1\r\n$3\r\n1-0\r\n";
const NOT_PARKED: &[u8] = b"*0\r\n";

fn config(protocol: Protocol) -> Config {
    Config::new("s", "g", "A")
        .count(10)
        .start_count(10)
        .beat(BEAT)
        .min_idle(MIN_IDLE)
        .protocol(protocol)
        .no_client_name()
        .leave_on_stop(false)
}

fn park_read(block_ms: u128) -> Vec<String> {
    cmd(&format!("XREADGROUP GROUP g A COUNT 10 BLOCK {block_ms} STREAMS s >"))
}

fn park(owned: u64, count: Option<u64>, idle: u64) -> Vec<String> {
    let count = count.map(|n| format!(" RETRYCOUNT {n}")).unwrap_or_default();
    cmd(&format!("XCLAIM s g pelican:delayed {owned} 1-0 JUSTID{count} IDLE {idle}"))
}

/// Connected (a classic server), drained, swept, parked; then `read_new` (1-0, 2-0, 3-0).
fn with_new(config: Config, flavor: &'static str) -> Rig {
    let mut rig = Rig::new(config, flavor);
    rig.start();
    rig.drain_reply("read_pending_empty").unwrap();
    rig.sent();
    rig.reply("autoclaim_done").unwrap();
    assert_eq!(rig.sent(), [park_read(2000)]);
    rig.reply("read_new").unwrap();
    rig
}

#[test]
fn a_retry_after_parks_its_entry_with_the_idle_time_that_makes_it_due_and_sweeps_then() {
    each(|flavor, protocol| {
        let mut rig = with_new(config(protocol), flavor);
        assert_eq!(rig.entry().id(), b"1-0");
        rig.settle(Verdict::RetryAfter(Duration::from_millis(1200)));
        // Claimable once idle 3 s: set to 1.8 s, it is 1.2 s from now. Its count kept.
        assert_eq!(rig.sent(), [park(0, Some(1), 1800)], "{flavor} {protocol:?}");
        assert_eq!(rig.consumer.poll_event(), None, "nothing handed out before the park is answered");
        rig.raw(PARKED).unwrap();
        let stats = rig.consumer.stats();
        assert_eq!((stats.retried, stats.retries_delayed), (1, 1));
        assert_eq!(ids(&rig.handle_all(Verdict::Ack)), ["2-0", "3-0"]);
        // The parked read blocks only until 1-0 is due, then the sweep goes out, not a beat later.
        let sent = rig.sent();
        assert_eq!(sent, [cmd("XACK s g 2-0 3-0"), park_read(1200)], "{flavor} {protocol:?}");
        rig.raw(b":2\r\n").unwrap();
        rig.advance(Duration::from_millis(1200));
        rig.reply("read_new_nil").unwrap();
        assert_eq!(rig.sent(), [cmd("XAUTOCLAIM s g A 3000 0-0 COUNT 10")], "{flavor} {protocol:?}");
    });
}

#[test]
fn a_peer_that_took_the_entry_first_keeps_it_and_nothing_is_swept_early() {
    let mut rig = with_new(config(Protocol::Resp2), "redis-7.0");
    rig.entry();
    rig.settle(Verdict::RetryAfter(Duration::from_millis(500)));
    assert_eq!(rig.sent(), [park(0, Some(1), 2500)]);
    rig.raw(NOT_PARKED).unwrap();
    assert_eq!(ids(&rig.handle_all(Verdict::Ack)), ["2-0", "3-0"]);
    assert_eq!(rig.sent(), [cmd("XACK s g 2-0 3-0"), park_read(2000)], "a beat: nothing watched");
}

#[test]
fn a_wait_longer_than_min_idle_is_parked_again_each_lease_until_what_is_left_fits() {
    let mut rig = with_new(config(Protocol::Resp2), "valkey-8.1");
    rig.entry();
    rig.settle(Verdict::RetryAfter(Duration::from_secs(5)));
    // 5 s cannot be set at once: idle 0 now (claimable 3 s from now at the earliest).
    assert_eq!(rig.sent(), [park(0, Some(1), 0)]);
    rig.raw(PARKED).unwrap();
    assert_eq!(ids(&rig.handle_all(Verdict::Ack)), ["2-0", "3-0"]);
    // Parked again a lease (1.5 s) after that park: the parked read blocks until then.
    assert_eq!(rig.sent(), [cmd("XACK s g 2-0 3-0"), park_read(1500)]);
    rig.raw(b":2\r\n").unwrap();
    rig.advance(Duration::from_millis(1500));
    rig.reply("read_new_nil").unwrap();
    // 3.5 s left: still too long. Owner-checked as a renewal (it has been idle 1.5 s).
    assert_eq!(rig.sent(), [park(1450, None, 0)]);
    rig.raw(PARKED).unwrap();
    assert_eq!(rig.sent(), [park_read(1500)]);
    rig.advance(Duration::from_millis(1500));
    rig.reply("read_new_nil").unwrap();
    // 2 s left: fits. Idle 1 s, claimable when due.
    assert_eq!(rig.sent(), [park(1450, None, 1000)]);
    rig.raw(PARKED).unwrap();
    // The beat's own sweep (due since 2 s), then a parked read until 1-0 is due.
    assert_eq!(rig.sent(), [cmd("XAUTOCLAIM s g A 3000 0-0 COUNT 10")]);
    rig.reply("autoclaim_done").unwrap();
    assert_eq!(rig.sent(), [park_read(2000)]);
    rig.advance(Duration::from_millis(2000));
    rig.reply("read_new_nil").unwrap();
    assert_eq!(rig.sent(), [cmd("XAUTOCLAIM s g A 3000 0-0 COUNT 10")]);
}

#[test]
fn a_park_lost_with_the_connection_goes_again_before_the_drain() {
    let mut rig = with_new(config(Protocol::Resp2), "redis-6.2");
    rig.entry();
    rig.settle(Verdict::RetryAfter(Duration::from_secs(1)));
    assert_eq!(rig.sent(), [park(0, Some(1), 2000)]);
    rig.advance(Duration::from_millis(100));
    rig.consumer.on_disconnected(rig.now);
    rig.advance(Duration::from_secs(1));
    let sent = rig.start();
    // The read-ahead 2-0 and 3-0 given back; the park (what is left of the wait: 0 s; the
    // count as handed out, whatever a drain's re-read raised it to); the drain only once it
    // is answered.
    let give_back = cmd("XCLAIM s g A 0 2-0 3-0 JUSTID RETRYCOUNT 0 IDLE 3000");
    assert_eq!(sent, [give_back, park(0, Some(1), 3000)]);
    rig.reply("lease_all").unwrap();
    assert_eq!(rig.sent(), Vec::<Vec<String>>::new());
    rig.raw(PARKED).unwrap();
    assert_eq!(rig.sent()[0], cmd("XREADGROUP GROUP g A COUNT 10 STREAMS s 0"));
}

#[test]
fn where_reads_claim_the_server_wakes_them_when_due_and_nothing_is_watched() {
    for protocol in PROTOCOLS {
        let mut rig = Rig::new(config(protocol), "redis-8.10");
        rig.connect();
        let hello = match protocol {
            Protocol::Resp2 => "hello_info",
            _ => "hello",
        };
        rig.sent();
        rig.consumer.handle_input(&rig.fixture(hello), rig.now).unwrap();
        rig.fresh = false;
        let Some(Event::Notice(Notice::Connected { dialect, .. })) = rig.consumer.poll_event() else {
            panic!("not connected")
        };
        assert_eq!(dialect, Dialect::of(b"redis", b"8.10.2"));
        rig.sent();
        rig.drain_reply("read_pending_empty").unwrap();
        let read = "XREADGROUP GROUP g A COUNT 10 MAXSIZE 8388608 BLOCK 2000 CLAIM 3000 STREAMS s >";
        assert_eq!(rig.sent(), [cmd(read)]);
        rig.reply("read_new").unwrap();
        rig.entry();
        rig.settle(Verdict::RetryAfter(Duration::from_millis(700)));
        assert_eq!(rig.sent(), [park(0, Some(1), 2300)], "parked, not released (XNACK checks no owner)");
        rig.raw(PARKED).unwrap();
        rig.handle_all(Verdict::Ack);
        let sent = rig.sent();
        assert_eq!(sent.last(), Some(&cmd(read)), "{protocol:?}: the read claims it when due: a beat");
    }
}

#[test]
fn a_plain_retry_backs_off_by_its_deliveries_within_min_idle() {
    // Drained entries at their 2nd delivery: between 1 and 2 s (1 s doubling once), parked
    // idle 3 s less that.
    let mut rig = Rig::new(config(Protocol::Resp2), "redis-7.0");
    rig.start();
    rig.drain_reply("read_pending_page").unwrap();
    let e = rig.entry();
    assert_eq!(e.deliveries, 2);
    rig.settle(Verdict::Retry);
    let sent = rig.sent();
    let idle: u64 = sent[0][10].parse().unwrap();
    assert!((1000..=2000).contains(&idle), "{sent:?}");
    assert_eq!(sent[0][..10], park(0, Some(2), 0)[..10]);
    assert_eq!(rig.consumer.stats().retries_delayed, 1);

    // The classic Retry, asked for: no park.
    let mut rig = Rig::new(config(Protocol::Resp2).on_retry(OnRetry::StayPending), "redis-7.0");
    rig.start();
    rig.drain_reply("read_pending_page").unwrap();
    rig.entry();
    rig.settle(Verdict::Retry);
    assert!(!rig.sent().iter().any(|c| c[0] == "XCLAIM"));
    assert_eq!(rig.consumer.stats().retries_delayed, 0);
}

#[test]
fn the_backoff_grows_with_the_deliveries_up_to_its_ceiling_jittered_in_its_upper_half() {
    let b = RetryBackoff::default();
    let ceilings: Vec<u64> =
        (1..=7).map(|n| b.ceiling(n, Duration::from_secs(30)).as_millis() as u64).collect();
    assert_eq!(ceilings, [1000, 2000, 4000, 8000, 16000, 30000, 30000]);
    assert_eq!(b.ceiling(u64::MAX, Duration::from_secs(30)), Duration::from_secs(30));
    let b = RetryBackoff::new(Duration::from_millis(100)).factor(3).max(Duration::from_secs(2));
    assert_eq!(b.ceiling(3, Duration::from_secs(30)), Duration::from_millis(900));
    assert_eq!(b.ceiling(9, Duration::from_secs(30)), Duration::from_secs(2));
    for random in [0, 1, 12345, u64::MAX / 3, u64::MAX] {
        let d = b.delay(3, Duration::from_secs(30), random);
        assert!(d >= Duration::from_millis(450) && d <= Duration::from_millis(900), "{d:?}");
    }
    assert_ne!(b.delay(3, Duration::ZERO, 1), b.delay(3, Duration::ZERO, 2), "jittered");
    assert!(Config::new("s", "g", "c").retry_backoff(b.factor(0)).validate().is_err());
}
