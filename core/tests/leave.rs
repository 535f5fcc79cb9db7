//! Leaving the group at a clean stop ([`Config::leave_on_stop`], on by default): after the
//! last ack is confirmed, one `EVAL` of [`LEAVE_SCRIPT`] deletes the consumer if it holds
//! nothing; a stop that finds the consumer parked leaves on a new connection rather than
//! waiting out the blocked read. Never on an abandon, a stop without a connection, or with
//! twins allowed.

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
        rig.consumer.stop();
        assert_eq!(rig.consumer.poll_event(), None);
        assert!(rig.consumer.wants_connection(), "the parked connection is dropped");
        assert!(rig.consumer.connect_due(rig.now), "at once");
        let handshake = rig.start();
        rig.fresh = false; // no `Connected` for this connection: it is the stop's
        assert!(!handshake.iter().any(|c| c[0] == "XREADGROUP" || c[0] == "XAUTOCLAIM"), "{handshake:?}");
        assert_eq!(handshake.last(), Some(&leave()), "{handshake:?}");
        rig.raw(b":0\r\n").unwrap();
        assert_eq!(rig.consumer.poll_event(), Some(Event::Notice(Notice::Left { holding: 0 })));
        assert_eq!(rig.consumer.poll_event(), Some(Event::Stopped));
        assert_eq!(rig.consumer.stats().acked, 0);
    });
}

#[test]
fn a_refused_leave_is_told_and_the_stop_ends() {
    let mut rig = parked(config(Protocol::Resp2), "redis-7.0");
    rig.consumer.stop();
    rig.start();
    rig.fresh = false;
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
    rig.consumer.stop();
    rig.start();
    rig.consumer.on_disconnected(rig.now);
    assert_eq!(rig.consumer.poll_event(), Some(Event::Stopped));
    assert!(!rig.consumer.wants_connection());
}

#[test]
fn no_leave_when_it_is_not_asked_for() {
    let stops_at_once = |config: Config| {
        let mut rig = parked(config, "redis-6.2");
        rig.consumer.stop();
        assert_eq!(rig.consumer.poll_event(), Some(Event::Stopped));
        assert_eq!(rig.sent(), Vec::<Vec<String>>::new());
    };
    stops_at_once(config(Protocol::Resp2).leave_on_stop(false));
    // A twin may still be at work under the name.
    stops_at_once(config(Protocol::Resp2).allow_twins());
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
