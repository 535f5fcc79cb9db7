//! A consumer on a cluster node, driven with replies captured from real 3+3 clusters of each
//! server: `MOVED` redirects the lane and it drains on the new node (acks it still owes
//! first), `ASK` is asked again after the backoff, keys in two slots are a configuration
//! error.

mod support;

use std::time::Duration;

use pelican::{Config, Error, Protocol, Verdict};
use support::*;

fn config(stream: &str, protocol: Protocol) -> Config {
    Config::new(stream, "g", "A")
        .count(10)
        .start_count(10)
        .beat(Duration::from_secs(2))
        .protocol(protocol)
        .no_client_name()
}

fn drain(stream: &str) -> Vec<Vec<String>> {
    cmds(&[
        &format!("XREADGROUP GROUP g A COUNT 10 STREAMS {stream} 0"),
        &format!("XPENDING {stream} g - + 10 A"),
    ])
}

fn then(first: &[Vec<String>], then: &[Vec<String>]) -> Vec<Vec<String>> {
    [first, then].concat()
}

/// Connected, drained (empty), reclaimed (nothing), parked on `s`.
fn parked(flavor: &'static str, protocol: Protocol) -> Rig {
    let mut rig = Rig::new(config("s", protocol), flavor);
    assert_eq!(rig.start(), drain("s"));
    rig.drain_reply("read_pending_empty").unwrap();
    rig.sent();
    rig.reply("autoclaim_done").unwrap();
    assert!(rig.consumer.is_parked());
    rig.sent();
    rig
}

/// The port a captured `MOVED`/`ASK` names.
fn port_in(rig: &Rig, fixture: &str) -> u16 {
    let text = String::from_utf8(rig.fixture(fixture)).unwrap();
    text.trim_end().rsplit(':').next().unwrap().parse().unwrap()
}

#[test]
fn moved_redirects_the_lane_and_it_drains_on_the_new_node() {
    for flavor in FLAVORS {
        for protocol in PROTOCOLS {
            let mut rig = parked(flavor, protocol);
            let port = port_in(&rig, "moved");
            let err = rig.reply("moved").unwrap_err();
            assert!(
                matches!(&err, Error::Moved { host, port: p, .. } if host == "127.0.0.1" && *p == port),
                "{err:?}"
            );
            assert!(!err.is_fatal());
            assert_eq!(rig.consumer.redirect(), Some(("127.0.0.1", port)));
            assert_eq!(rig.consumer.stats().moved, 1);
            rig.advance(Duration::from_secs(1));
            assert_eq!(rig.start(), drain("s"), "{flavor} {protocol:?}: its pending list moved with the key");
            // A connect that fails there forgets the redirect: the configured node leads on.
            rig.consumer.on_disconnected(rig.now);
            assert_eq!(rig.consumer.redirect(), Some(("127.0.0.1", port)), "a lost connection keeps it");
            rig.advance(Duration::from_secs(10));
            assert!(rig.consumer.connect_due(rig.now));
            rig.consumer.on_disconnected(rig.now); // the connect failed
            assert_eq!(rig.consumer.redirect(), None);
        }
    }
}

#[test]
fn acks_a_moved_node_refused_go_first_on_the_new_node() {
    for flavor in FLAVORS {
        for protocol in PROTOCOLS {
            let mut rig = parked(flavor, protocol);
            rig.reply("read_new").unwrap();
            let handled = rig.handle_all(Verdict::Ack);
            let ids: Vec<String> = ids(&handled);
            let sent = rig.sent();
            let xack = cmd(&format!("XACK s g {}", ids.join(" ")));
            assert_eq!(sent.first(), Some(&xack), "{flavor} {protocol:?}: {sent:?}");
            let err = rig.reply("moved").unwrap_err();
            assert!(matches!(err, Error::Moved { .. }), "{err:?}");
            rig.advance(Duration::from_secs(1));
            // Owed still, and sent before the drain (which would hand them out again).
            assert_eq!(rig.start(), then(&[xack], &drain("s")), "{flavor} {protocol:?}");
        }
    }
}

#[test]
fn ask_leads_to_the_target_where_each_command_follows_asking() {
    for flavor in FLAVORS {
        for protocol in PROTOCOLS {
            // `k` is the key the captured `ASK` is about (slot 7629, half-moved).
            let mut rig = Rig::new(config("k", protocol), flavor);
            assert_eq!(rig.start(), drain("k"));
            let port = port_in(&rig, "ask");
            let err = rig.reply("ask").unwrap_err();
            assert!(matches!(err, Error::Unavailable { .. }) && !err.is_fatal(), "{err:?}");
            assert_eq!(rig.consumer.redirect(), Some(("127.0.0.1", port)), "the node the key is on now");
            assert_eq!(rig.consumer.stats().moved, 0);
            rig.advance(Duration::from_secs(1));
            let asking = cmd("ASKING");
            let [read, counts] = <[Vec<String>; 2]>::try_from(drain("k")).unwrap();
            assert_eq!(rig.start(), [asking.clone(), read, asking.clone(), counts], "{flavor} {protocol:?}");
            // Each `+OK` is taken for its `ASKING`; the replies line up.
            let mut bytes = b"+OK\r\n".to_vec();
            bytes.extend(rig.fixture("read_pending_empty"));
            bytes.extend(b"+OK\r\n");
            bytes.extend(rig.fixture("pending_counts_empty"));
            rig.raw(&bytes).unwrap();
            let sent = rig.sent();
            assert_eq!(sent.len(), 2, "{sent:?}");
            assert_eq!(
                (&sent[0], &sent[1][0]),
                (&asking, &"XAUTOCLAIM".to_string()),
                "{flavor} {protocol:?}"
            );
        }
    }
}

#[test]
fn keys_in_two_slots_are_a_configuration_error() {
    for flavor in FLAVORS {
        for protocol in PROTOCOLS {
            let mut rig = Rig::new(config("s", protocol), flavor);
            rig.start();
            let err = rig.reply("crossslot").unwrap_err();
            assert!(matches!(err, Error::CrossSlot { .. }) && err.is_fatal(), "{err:?}");
            assert!(err.to_string().contains("hash tag"), "{err}");
            // A `MOVED` for a slot that is not the stream's: a command touched another key
            // (the dead-letter stream's), which must share the stream's slot.
            let mut rig = Rig::new(config("k", protocol), flavor);
            rig.start();
            let err = rig.reply("moved").unwrap_err();
            assert!(matches!(err, Error::CrossSlot { .. }), "{err:?}");
        }
    }
}
