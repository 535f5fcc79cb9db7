//! Leaving the group at a clean stop ([`Config::leave_on_stop`], on by default): after the
//! last ack is confirmed, one `EVAL` of [`LEAVE_SCRIPT`] deletes the consumer if it holds
//! nothing; a stop that finds the consumer parked cuts the read short (drops its connection)
//! rather than waiting it out, gives back on a new connection what that read may have
//! brought (delivered after it was sent, never handed out), then leaves. Never on an abandon,
//! a stop without a connection, or with twins allowed.

mod support;

use std::time::Duration;

use pelican::{Config, Event, Notice, Protocol, Verdict, LEAVE_SCRIPT};
use support::*;

fn config(protocol: Protocol) -> Config {
    Config::new("s", "g", "A")
        .count(10)
        .start_count(10)
        .beat(Duration::from_secs(2))
        .protocol(protocol)
        .no_client_name()
}

fn leave() -> Vec<String> {
    vec!["EVAL".into(), LEAVE_SCRIPT.into(), "1".into(), "s".into(), "g".into(), "A".into()]
}

fn park() -> Vec<String> {
    cmd("XREADGROUP GROUP g A COUNT 10 BLOCK 2000 STREAMS s >")
}

/// What the consumer holds, asked on the stop's new connection after a parked read was cut.
fn held() -> Vec<String> {
    cmd("XPENDING s g - + 1000 A")
}

/// Stopped while parked: the read is cut, and the stop's new connection asks what is held.
fn cut(rig: &mut Rig) -> Vec<Vec<String>> {
    rig.consumer.stop();
    assert_eq!(rig.consumer.poll_event(), None);
    assert!(rig.consumer.wants_connection(), "the parked connection is dropped");
    assert!(rig.consumer.connect_due(rig.now), "at once");
    let handshake = rig.start();
    rig.fresh = false; // no `Connected` for this connection: it is the stop's
    assert!(!handshake.iter().any(|c| c[0] == "XREADGROUP" || c[0] == "XAUTOCLAIM"), "{handshake:?}");
    assert_eq!(handshake.last(), Some(&held()), "{handshake:?}");
    handshake
}

/// Connected, drained (empty), reclaimed (nothing), parked.
fn parked(config: Config, flavor: &'static str) -> Rig {
    let mut rig = Rig::new(config, flavor);
    rig.start();
    rig.drain_reply("read_pending_empty").unwrap();
    rig.sent();
    rig.reply("autoclaim_done").unwrap();
    assert_eq!(rig.sent(), [park()]);
    assert!(rig.consumer.is_parked());
    rig
}

#[test]
fn a_stop_leaves_once_its_acks_are_confirmed_and_tells_what_it_holds() {
    each(|flavor, protocol| {
        let mut rig = parked(config(protocol), flavor);
        rig.reply("read_new").unwrap();
        rig.entry();
        rig.consumer.stop();
        rig.settle(Verdict::Ack);
        let sent = rig.sent();
        assert_eq!(sent.len(), 2, "the give-back and the ack, no leave yet: {sent:?}");
        rig.reply("lease_all").unwrap();
        assert_eq!(rig.sent(), Vec::<Vec<String>>::new(), "the ack is not confirmed yet");
        rig.reply("xack_1").unwrap();
        assert_eq!(rig.sent(), [leave()]);
        assert_eq!(rig.consumer.poll_event(), None, "the stop waits for the answer");
        // The two given back are still its own (no `XNACK` on these servers).
        rig.raw(b":2\r\n").unwrap();
        assert_eq!(rig.consumer.poll_event(), Some(Event::Notice(Notice::Left { holding: 2 })));
        assert_eq!(rig.consumer.poll_event(), Some(Event::Stopped));
    });
}

#[test]
fn a_stop_found_parked_leaves_on_a_new_connection() {
    each(|flavor, protocol| {
        let mut rig = parked(config(protocol), flavor);
        cut(&mut rig);
        rig.reply("pending_counts_empty").unwrap();
        assert_eq!(rig.sent(), [leave()], "the cut read brought nothing");
        rig.raw(b":0\r\n").unwrap();
        assert_eq!(rig.consumer.poll_event(), Some(Event::Notice(Notice::Left { holding: 0 })));
        assert_eq!(rig.consumer.poll_event(), Some(Event::Stopped));
        assert_eq!(rig.consumer.stats().acked, 0);
    });
}

/// The server answered the parked read just before the stop dropped its connection: the
/// entries it delivered are this consumer's, never handed out. Given back, their counts taken
/// back and their idle time `min_idle`, so that a peer's next reclaim takes them at once —
/// released where the server can (Redis 8.8+).
#[test]
fn a_stop_found_parked_gives_back_what_the_cut_read_brought() {
    each(|flavor, protocol| {
        let mut rig = parked(config(protocol), flavor);
        cut(&mut rig);
        rig.advance(Duration::from_millis(40));
        // `[[1-0, A, 0, 2], [2-0, A, 0, 2]]`: delivered since the read was written.
        rig.reply("pending_counts_page").unwrap();
        let min_idle = rig.consumer.config().min_idle.as_millis().to_string();
        assert_eq!(
            rig.sent(),
            [cmd(&format!("XCLAIM s g A 0 1-0 2-0 JUSTID RETRYCOUNT 1 IDLE {min_idle}"))],
            "given back, and no leave before the answer"
        );
        rig.reply("lease_all").unwrap();
        assert_eq!(rig.sent(), [leave()]);
        rig.raw(b":2\r\n").unwrap();
        assert_eq!(rig.consumer.poll_event(), Some(Event::Notice(Notice::Left { holding: 2 })));
        assert_eq!(rig.consumer.poll_event(), Some(Event::Stopped));
    });
}

/// Entries held from before the read was written (given `Retry`, left pending) are not the
/// cut read's: they stay as they are.
#[test]
fn what_was_held_before_the_cut_read_stays() {
    let mut rig = parked(config(Protocol::Resp2), "redis-7.0");
    rig.advance(Duration::from_millis(500));
    cut(&mut rig);
    rig.raw(b"*1\r\n*4\r\n$3\r\n1-0\r\n$1\r\nA\r\n:900\r\n:1\r\n").unwrap();
    assert_eq!(rig.sent(), [leave()], "idle 900 ms: delivered before the read went out 500 ms ago");
}

#[test]
fn a_refused_leave_is_told_and_the_stop_ends() {
    let mut rig = parked(config(Protocol::Resp2), "redis-7.0");
    cut(&mut rig);
    rig.reply("pending_counts_empty").unwrap();
    rig.raw(b"-NOPERM User app has no permissions to run the 'eval' command\r\n").unwrap();
    match rig.consumer.poll_event() {
        Some(Event::Notice(Notice::Refused { feature, reason })) => {
            assert_eq!(feature, Notice::LEAVE);
            assert!(reason.starts_with("NOPERM"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(rig.consumer.poll_event(), Some(Event::Stopped));
    assert!(rig.consumer.error().is_none());
}

#[test]
fn a_lost_connection_before_the_answer_ends_the_stop_without_a_retry() {
    let mut rig = parked(config(Protocol::Resp3), "valkey-8.1");
    cut(&mut rig);
    rig.consumer.on_disconnected(rig.now);
    assert_eq!(rig.consumer.poll_event(), Some(Event::Stopped));
    assert!(!rig.consumer.wants_connection());
}

#[test]
fn no_leave_when_it_is_not_asked_for() {
    // What the cut read brought is given back all the same.
    let mut rig = parked(config(Protocol::Resp2).leave_on_stop(false), "redis-6.2");
    cut(&mut rig);
    rig.reply("pending_counts_empty").unwrap();
    assert_eq!(rig.sent(), Vec::<Vec<String>>::new());
    assert_eq!(rig.consumer.poll_event(), Some(Event::Stopped));
    // A twin may still be at work under the name: what was delivered lately may be in its
    // hand. The stop ends at once.
    let mut rig = parked(config(Protocol::Resp2).allow_twins(), "redis-6.2");
    rig.consumer.stop();
    assert_eq!(rig.consumer.poll_event(), Some(Event::Stopped));
    assert_eq!(rig.sent(), Vec::<Vec<String>>::new());
}

#[test]
fn no_leave_on_an_abandon_or_a_stop_without_a_connection() {
    let mut rig = parked(config(Protocol::Resp2), "redis-7.0");
    rig.consumer.abandon();
    assert_eq!(rig.consumer.poll_event(), Some(Event::Stopped));
    assert!(!rig.consumer.wants_connection());
    assert_eq!(rig.sent(), Vec::<Vec<String>>::new());

    let mut rig = parked(config(Protocol::Resp2), "redis-7.0");
    rig.consumer.on_disconnected(rig.now);
    rig.consumer.stop();
    assert!(matches!(rig.consumer.poll_event(), Some(Event::Notice(Notice::ConnectionLost { .. }))));
    assert_eq!(rig.consumer.poll_event(), Some(Event::Stopped));
    assert!(!rig.consumer.wants_connection());
}

/// A driver that reads on after the stop dropped its parked connection (it did not look at
/// `wants_connection`) is told by its next call: `Error::Dropped`, not fatal, once; the
/// report of that socket closing changes nothing, and the stop goes on on a new connection.
#[test]
fn a_driver_that_reads_on_after_the_drop_is_told() {
    let mut rig = parked(config(Protocol::Resp2), "redis-7.0");
    rig.consumer.stop();
    assert!(rig.consumer.wants_connection());
    assert_eq!(rig.consumer.poll_timeout(), Some(rig.now), "due at once");
    let err = rig.consumer.handle_timeout(rig.now).unwrap_err();
    assert_eq!(err, pelican::Error::Dropped);
    assert!(!err.is_fatal());
    assert_eq!(rig.consumer.handle_timeout(rig.now), Ok(()), "told once");
    // The parked read's late reply on the old socket, then its close, told by the driver.
    rig.reply("read_new").unwrap();
    rig.consumer.on_disconnected(rig.now);
    assert!(rig.consumer.connect_due(rig.now), "still at once: the stop goes on");
    let handshake = rig.start();
    rig.fresh = false;
    assert_eq!(handshake.last(), Some(&held()));
    rig.reply("pending_counts_empty").unwrap();
    assert_eq!(rig.sent(), [leave()]);
}
