//! Whole stories driven through the public API with replies captured from the real servers.

mod support;

use std::time::Duration;

use pelican::{Command, Config, Error, Event, GroupGone, Notice, OnRetry, Protocol, Source, Verdict};
use support::*;

const BEAT: Duration = Duration::from_secs(2);

fn config(consumer: &str, protocol: Protocol) -> Config {
    // Leaving the group at a stop has its own stories (leave.rs); a `Retry` that stays
    // pending (the classic one) is asked for where a story retries, one that waits has its
    // own (delayed_retries.rs).
    Config::new("s", "g", consumer)
        .count(10)
        .start_count(10)
        .beat(BEAT)
        .protocol(protocol)
        .no_client_name()
        .leave_on_stop(false)
}

/// A drain page: the read and, pipelined behind it, the `XPENDING` for its delivery counts.
fn drain_from(consumer: &str, after: &str) -> Vec<Vec<String>> {
    let start = if after == "0" { "-".to_string() } else { format!("({after}") };
    vec![
        cmd(&format!("XREADGROUP GROUP g {consumer} COUNT 10 STREAMS s {after}")),
        cmd(&format!("XPENDING s g {start} + 10 {consumer}")),
    ]
}

/// `XCLAIM s g <consumer> 0 <ids> JUSTID RETRYCOUNT <count> IDLE <idle_ms>`: delivery counts
/// given back for entries read but dropped unhandled (owner-checked with 0 within the lease),
/// and idle `min_idle` (30 s) at least, so that a peer's next reclaim takes them.
fn give_back(consumer: &str, ids: &[&str], count: u64, idle_ms: u64) -> Vec<String> {
    let idle_ms = idle_ms.max(30_000);
    cmd(&format!("XCLAIM s g {consumer} 0 {} JUSTID RETRYCOUNT {count} IDLE {idle_ms}", ids.join(" ")))
}

/// `first` commands, then `then`.
fn then(first: &[Vec<String>], then: &[Vec<String>]) -> Vec<Vec<String>> {
    [first, then].concat()
}
fn claim(consumer: &str, cursor: &str) -> Vec<String> {
    cmd(&format!("XAUTOCLAIM s g {consumer} 30000 {cursor} COUNT 10"))
}
fn park(consumer: &str) -> Vec<String> {
    cmd(&format!("XREADGROUP GROUP g {consumer} COUNT 10 BLOCK 2000 STREAMS s >"))
}

/// Connected, drained (empty), reclaimed (nothing), parked.
fn parked(flavor: &'static str, protocol: Protocol) -> Rig {
    let mut rig = Rig::new(config("A", protocol), flavor);
    assert_eq!(rig.start(), drain_from("A", "0"));
    rig.drain_reply("read_pending_empty").unwrap();
    assert_eq!(rig.sent(), [claim("A", "0-0")]);
    assert!(!rig.consumer.is_parked());
    rig.reply("autoclaim_done").unwrap();
    assert_eq!(rig.sent(), [park("A")]);
    assert!(rig.consumer.is_parked());
    rig
}

#[test]
fn cold_start_handshake_door_drain_claim_park_settle() {
    each(|flavor, protocol| {
        let cfg = config("A", protocol).create_group("$").client_name("w1").db(2);
        let mut rig = Rig::new(cfg, flavor);
        rig.connect();
        // The handshake goes out in one write; nothing else before the node's role is known.
        // RESP2 asks the server's version and role with a bare `HELLO` (RESP3's `HELLO 3`
        // tells them).
        let handshake = match protocol {
            Protocol::Resp2 => cmds(&["CLIENT SETNAME w1", "SELECT 2", "HELLO"]),
            _ => cmds(&["HELLO 3 SETNAME w1", "SELECT 2"]),
        };
        assert_eq!(rig.sent(), handshake, "{flavor} {protocol:?}");
        if protocol == Protocol::Resp3 {
            rig.reply("hello").unwrap();
        } else {
            rig.reply("setname").unwrap();
        }
        rig.reply("select").unwrap();
        if protocol == Protocol::Resp2 {
            rig.reply("hello_info").unwrap();
        }
        // A master: a named consumer looks for a twin under its name before it reads anything.
        let want = cmds(&["CLIENT ID", "CLIENT LIST TYPE normal", "XGROUP CREATE s g $ MKSTREAM"]);
        assert_eq!(rig.sent(), want, "{flavor} {protocol:?}");
        rig.reply("client_id").unwrap();
        rig.reply("client_list").unwrap();
        rig.reply("busygroup").unwrap(); // an existing group is success
        assert_eq!(rig.sent(), drain_from("A", "0"));
        rig.drain_reply("read_pending_empty").unwrap();
        assert_eq!(rig.sent(), [claim("A", "0-0")]);
        rig.reply("autoclaim_done").unwrap();
        assert_eq!(rig.sent(), [park("A")]);
        rig.reply("read_new").unwrap();
        assert!(!rig.consumer.is_parked(), "entries to hand out");
        let seen = rig.handle_all(Verdict::Ack);
        assert_eq!(ids(&seen), ["1-0", "2-0", "3-0"]);
        assert!(!rig.consumer.is_parked(), "acks in flight ahead of the read");
        assert!(seen.iter().all(|e| e.source == Source::New && e.deliveries == 1));
        assert_eq!(seen[0].field(b"f"), Some(&b"v1"[..]));
        // Acks are batched and written before the next read, in the same write.
        assert_eq!(rig.sent(), [cmd("XACK s g 1-0 2-0 3-0"), park("A")]);
        rig.raw(b":3\r\n").unwrap();
        let stats = rig.consumer.stats();
        assert_eq!((stats.new, stats.acked, stats.lost_to_peer), (3, 3, 0));
        // The beat passes with nothing new: reclaim is due again.
        rig.advance(BEAT);
        rig.reply("read_new_nil").unwrap();
        assert_eq!(rig.sent(), [claim("A", "0-0")]);
    });
}

#[test]
fn nothing_new_before_the_beat_parks_again_without_reclaiming() {
    each(|flavor, protocol| {
        let mut rig = parked(flavor, protocol);
        rig.advance(BEAT / 2);
        rig.reply("read_new_nil").unwrap();
        assert_eq!(rig.sent(), [park("A")]);
    });
}

#[test]
fn restart_with_backlog_drains_first_without_idle_wait() {
    each(|flavor, protocol| {
        let mut rig = Rig::new(config("A", protocol), flavor);
        assert_eq!(rig.start(), drain_from("A", "0"));
        rig.drain_reply("read_pending_page").unwrap();
        let seen = rig.handle_all(Verdict::Ack);
        assert_eq!(ids(&seen), ["1-0", "2-0"]);
        assert!(seen.iter().all(|e| e.source == Source::Pending));
        // Delivery counts from the XPENDING behind the read: the re-read raised them to 2.
        assert!(seen.iter().all(|e| e.deliveries == 2), "{flavor} {seen:?}");
        // Pages forward by the last id, acks first.
        assert_eq!(rig.sent(), then(&[cmd("XACK s g 1-0 2-0")], &drain_from("A", "2-0")));
        rig.raw(b":2\r\n").unwrap();
        rig.drain_reply("read_pending_empty").unwrap();
        assert_eq!(rig.sent(), [claim("A", "0-0")]);
        assert_eq!(rig.consumer.stats().drained, 2);
    });
}

#[test]
fn a_failing_handler_does_not_spin_the_drain() {
    each(|flavor, protocol| {
        let mut rig = Rig::new(config("A", protocol).on_retry(OnRetry::StayPending), flavor);
        rig.start();
        rig.drain_reply("read_pending_page").unwrap();
        assert_eq!(rig.handle_all(Verdict::Retry).len(), 2);
        // No XACK, and the drain moves past the failed entries.
        assert_eq!(rig.sent(), drain_from("A", "2-0"));
        rig.drain_reply("read_pending_empty").unwrap();
        assert_eq!(rig.sent(), [claim("A", "0-0")]);
        assert_eq!(rig.consumer.stats().retried, 2);
    });
}

#[test]
fn reclaim_carries_the_cursor_across_beats() {
    each(|flavor, protocol| {
        let mut rig = Rig::new(config("B", protocol), flavor);
        rig.start();
        rig.drain_reply("read_pending_empty").unwrap();
        assert_eq!(rig.sent(), [claim("B", "0-0")]);
        // Scanned COUNT×10 entries, none idle enough: empty, cursor 11-0. Park until the beat.
        rig.reply("autoclaim_scan_cursor").unwrap();
        assert_eq!(rig.sent(), [park("B")]);
        rig.advance(BEAT);
        rig.reply("read_new_nil").unwrap();
        assert_eq!(rig.sent(), [claim("B", "11-0")], "{flavor}");
        rig.reply("autoclaim_done").unwrap();
        assert_eq!(rig.sent(), [park("B")]);
        rig.advance(BEAT);
        rig.reply("read_new_nil").unwrap();
        assert_eq!(rig.sent(), [claim("B", "0-0")], "a finished sweep starts over");
    });
}

#[test]
fn deleted_entries_are_acked_away_never_handed_out() {
    each(|flavor, protocol| {
        let mut rig = Rig::new(config("A", protocol).on_retry(OnRetry::StayPending), flavor);
        rig.start();
        rig.drain_reply("read_pending_deleted").unwrap();
        let seen = rig.handle_all(Verdict::Retry);
        assert_eq!(ids(&seen), ["1-0", "3-0"]);
        assert_eq!(seen.iter().map(|e| e.deliveries).collect::<Vec<_>>(), [3, 2], "{flavor}");
        // 2-0 is acked although no verdict was given for it: it cannot be processed.
        assert_eq!(rig.sent(), then(&[cmd("XACK s g 2-0")], &drain_from("A", "3-0")));
        assert_eq!(rig.consumer.stats().deleted_seen, 1);
    });
}

#[test]
fn claimed_deleted_entries_per_server_shape() {
    each(|flavor, protocol| {
        let mut rig = Rig::new(config("B", protocol).on_retry(OnRetry::StayPending), flavor);
        rig.start();
        rig.drain_reply("read_pending_empty").unwrap();
        rig.sent();
        rig.reply("autoclaim").unwrap();
        // The claimed entries' delivery counts are asked for before they are handed out.
        assert_eq!(rig.sent(), [cmd("XPENDING s g 1-0 3-0 2 B")]);
        assert_eq!(rig.notice(), Notice::Reclaimed { count: 2, released: 0 }, "deleted ones not counted");
        assert_eq!(rig.consumer.poll_event(), None);
        rig.reply("pending_counts_claimed").unwrap();
        if flavor == "redis-6.2" {
            // The dead 2-0 (moved to B) fills the page: the next page brings 3-0's count.
            assert_eq!(rig.sent(), [cmd("XPENDING s g (2-0 3-0 1 B")]);
            rig.reply("pending_counts_claimed_next").unwrap();
        }
        let seen = rig.handle_all(Verdict::Retry);
        assert_eq!(ids(&seen), ["1-0", "3-0"]);
        assert!(seen.iter().all(|e| e.source == Source::Claimed));
        assert_eq!(seen.iter().map(|e| e.deliveries).collect::<Vec<_>>(), [4, 3], "{flavor}");
        if flavor == "redis-6.2" {
            // A bare nil: the dead id moved into B's list unnamed. Drain it to learn the id.
            assert_eq!(rig.sent(), drain_from("B", "0"));
            rig.drain_reply("read_pending_after_claim").unwrap();
            let again = rig.handle_all(Verdict::Ack);
            assert_eq!(ids(&again), ["1-0", "3-0"]);
            assert_eq!(rig.sent(), then(&[cmd("XACK s g 2-0 1-0 3-0")], &drain_from("B", "3-0")));
        } else {
            // 7+/Valkey dropped it from the list and named it: count it, nothing to ack.
            assert_eq!(rig.sent(), [park("B")], "{flavor}");
        }
        assert_eq!(rig.consumer.stats().deleted_seen, 1, "{flavor}");
    });
}

/// A Redis 6.2 reclaim that filled its count (a deleted entry moved in unnamed among them)
/// is followed by a drain from the top: not read ahead while the batch is handed out, as it
/// would bring back the entries buffered and in hand.
#[test]
fn a_drain_from_the_top_waits_for_the_batch_to_be_handed_out() {
    for protocol in PROTOCOLS {
        let mut rig = Rig::new(config("B", protocol).count(3), "redis-6.2");
        rig.start();
        rig.drain_reply("read_pending_empty").unwrap();
        rig.sent();
        rig.reply("autoclaim").unwrap();
        assert_eq!(rig.sent(), [cmd("XPENDING s g 1-0 3-0 2 B")]);
        assert_eq!(rig.notice(), Notice::Reclaimed { count: 2, released: 0 });
        rig.reply("pending_counts_claimed").unwrap();
        assert_eq!(rig.sent(), [cmd("XPENDING s g (2-0 3-0 1 B")]);
        rig.reply("pending_counts_claimed_next").unwrap();
        assert_eq!(ids(&[rig.entry()]), ["1-0"]);
        assert_eq!(rig.sent(), Vec::<Vec<String>>::new(), "{protocol:?}: nothing read ahead");
        rig.settle(Verdict::Ack);
        assert_eq!(ids(&[rig.entry()]), ["3-0"]);
        rig.settle(Verdict::Ack);
        assert_eq!(
            rig.sent(),
            cmds(&["XACK s g 1-0 3-0", "XREADGROUP GROUP g B COUNT 3 STREAMS s 0", "XPENDING s g - + 3 B"])
        );
    }
}

#[test]
fn group_gone_while_parked_reopens_the_door_and_drains() {
    each(|flavor, protocol| {
        for fixture in ["key_deleted_while_parked", "group_destroyed_while_parked"] {
            let cfg = config("A", protocol).create_group("0").on_group_gone(GroupGone::Recreate);
            let mut rig = Rig::new(cfg, flavor);
            assert_eq!(rig.start(), then(&[cmd("XGROUP CREATE s g 0 MKSTREAM")], &drain_from("A", "0")));
            rig.reply("group_create").unwrap();
            rig.drain_reply("read_pending_empty").unwrap();
            rig.sent();
            rig.reply("autoclaim_done").unwrap();
            assert_eq!(rig.sent(), [park("A")]);
            rig.advance(BEAT);
            if (flavor, fixture) == ("redis-7.0", "key_deleted_while_parked") {
                // `UNBLOCKED … no longer exists`, which a cluster slot migration also says:
                // no proof the group is gone. Reconnected, the drain finds out.
                // Here the door (create_group) reopens it on the reconnect.
                let err = rig.reply(fixture).unwrap_err();
                assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
                rig.advance(Duration::from_secs(10));
                assert_eq!(rig.start(), then(&[cmd("XGROUP CREATE s g 0 MKSTREAM")], &drain_from("A", "0")));
                rig.reply("group_create").unwrap();
                assert_eq!(rig.consumer.stats().group_recreated, 1, "created, not found: recreated");
                rig.drain_reply("read_pending_empty").unwrap();
                assert_eq!(rig.sent(), [claim("A", "0-0")]);
                continue;
            } else {
                rig.reply(fixture).unwrap();
            }
            let mut sent = rig.sent();
            if sent == [claim("A", "0-0")] {
                // Redis 6.2 stays blocked when the key is deleted and times out with nil;
                // the next command finds the group gone.
                assert_eq!((flavor, fixture), ("redis-6.2", "key_deleted_while_parked"));
                rig.reply("nogroup_autoclaim").unwrap();
                sent = rig.sent();
            }
            assert_eq!(sent, then(&[cmd("XGROUP CREATE s g 0 MKSTREAM")], &drain_from("A", "0")));
            rig.reply("group_create").unwrap();
            assert_eq!(rig.consumer.stats().group_recreated, 1, "{flavor} {fixture}");
            let told = std::iter::from_fn(|| rig.consumer.poll_event()).any(|e| {
                matches!(e, Event::Notice(Notice::GroupRecreated { start, last_read: None }) if start == "0")
            });
            assert!(told, "{flavor} {fixture}: the re-creation told");
            rig.drain_reply("read_pending_empty").unwrap();
            assert_eq!(rig.sent(), [claim("A", "0-0")]);
        }
    });
}

#[test]
fn group_gone_is_fatal_and_sticky_when_configured_to_fail() {
    each(|flavor, protocol| {
        let mut rig = parked(flavor, protocol);
        let err = rig.reply("group_destroyed_while_parked").unwrap_err();
        assert!(matches!(err, Error::GroupGone { command: Command::ReadNew, .. }), "{err:?}");
        assert!(err.is_fatal());
        assert_eq!(rig.reply("read_new_nil"), Err(err.clone()), "sticky");
        assert_eq!(rig.consumer.error(), Some(&err));
        assert!(!rig.consumer.wants_connection());
        assert_eq!(rig.consumer.poll_timeout(), None);
        assert_eq!(rig.consumer.poll_event(), None);
    });
}

#[test]
fn stop_mid_batch_finishes_the_entry_and_confirms_acks() {
    each(|flavor, protocol| {
        let mut rig = parked(flavor, protocol);
        rig.reply("read_new").unwrap();
        let first = rig.entry();
        rig.consumer.stop();
        assert_eq!(rig.consumer.poll_event(), None, "the entry in hand is not cut short");
        rig.settle(Verdict::Ack);
        // Only the earned ack goes out, and no further read: 2-0 and 3-0 stay pending, their
        // delivery counts given back (read, never handed out), their idle times kept.
        assert_eq!(
            rig.sent(),
            [
                give_back("A", &["2-0", "3-0"], 0, 0),
                cmd(&format!("XACK s g {}", String::from_utf8_lossy(first.id())))
            ]
        );
        assert_eq!(rig.consumer.poll_event(), None, "not stopped before the ack is confirmed");
        rig.reply("lease_all").unwrap();
        assert_eq!(rig.consumer.poll_event(), None, "not stopped before the ack is confirmed");
        rig.reply("xack_1").unwrap();
        assert_eq!(rig.consumer.poll_event(), Some(Event::Stopped));
        assert_eq!(rig.consumer.poll_event(), None);
        assert_eq!(rig.consumer.stats().acked, 1);
        assert_eq!(rig.consumer.stats().new, 1);
        assert!(!rig.consumer.wants_connection());
    });
}

/// A stop that can wait no longer for its handler (a deadline passed, the handler ended):
/// the entry in hand, given `GiveBack`, is given back idle `min_idle` for a peer's next
/// reclaim, with its delivery kept (the handler had it), nothing acked; then the stop ends.
/// Meanwhile it is the oldest in hand, its age counted from its hand-out.
#[test]
fn an_entry_given_back_keeps_its_delivery_and_is_free_for_a_peer() {
    each(|flavor, protocol| {
        let mut rig = parked(flavor, protocol);
        assert_eq!(rig.consumer.oldest_in_hand(), None);
        rig.reply("read_new").unwrap();
        let handed = rig.now;
        let first = rig.entry();
        let oldest = rig.consumer.oldest_in_hand().expect("one in hand");
        assert_eq!((&oldest.stream[..], &oldest.id[..], oldest.since), (&b"s"[..], first.id(), handed));
        rig.advance(Duration::from_secs(5));
        assert_eq!(oldest.age(rig.now), Duration::from_secs(5));
        assert_eq!(rig.consumer.snapshot().oldest_in_hand.as_ref(), Some(&oldest));
        rig.consumer.stop();
        assert_eq!(rig.sent(), [give_back("A", &["2-0", "3-0"], 0, 0)]);
        rig.settle(Verdict::GiveBack);
        assert_eq!(rig.consumer.oldest_in_hand(), None);
        assert_eq!(rig.sent(), [give_back("A", &["1-0"], 1, 0)], "{flavor} {protocol:?}");
        assert_eq!(rig.consumer.poll_event(), None, "not stopped before the give-backs are answered");
        rig.reply("lease_all").unwrap();
        rig.reply("lease_all").unwrap();
        assert_eq!(rig.consumer.poll_event(), Some(Event::Stopped));
        let stats = rig.consumer.stats();
        assert_eq!((stats.acked, stats.retried, stats.new), (0, 0, 1));
    });
}

#[test]
fn stop_between_entries_of_a_batch_sends_the_acks_settled_so_far() {
    each(|flavor, protocol| {
        let mut rig = parked(flavor, protocol);
        rig.reply("read_new").unwrap();
        let first = rig.entry();
        rig.settle(Verdict::Ack);
        assert_eq!(rig.sent(), Vec::<Vec<String>>::new(), "acks wait for the batch's end");
        rig.consumer.stop();
        assert_eq!(
            rig.sent(),
            [
                give_back("A", &["2-0", "3-0"], 0, 0),
                cmd(&format!("XACK s g {}", String::from_utf8_lossy(first.id())))
            ]
        );
        rig.reply("lease_all").unwrap();
        rig.reply("xack_1").unwrap();
        assert_eq!(rig.consumer.poll_event(), Some(Event::Stopped));
    });
}

#[test]
fn a_second_disconnect_report_does_not_push_the_reconnect_back() {
    let mut rig = parked("valkey-8.1", Protocol::Resp2);
    let err = rig.raw(b"?\r\n").unwrap_err();
    assert!(!err.is_fatal());
    let retry_at = rig.consumer.poll_timeout().unwrap();
    rig.consumer.on_disconnected(rig.now);
    assert_eq!(rig.consumer.poll_timeout(), Some(retry_at));
    // A failed connect attempt after the scheduled time backs off further.
    rig.now = retry_at;
    rig.consumer.on_disconnected(rig.now);
    assert!(rig.consumer.poll_timeout().unwrap() > retry_at);
}

#[test]
fn stop_while_disconnected_with_nothing_owed_stops_at_once() {
    let mut rig = parked("redis-7.0", Protocol::Resp2);
    rig.consumer.on_disconnected_because(rig.now, "reset by peer");
    assert!(matches!(rig.notice(), Notice::ConnectionLost { reason, .. } if reason == "reset by peer"));
    rig.consumer.stop();
    assert_eq!(rig.consumer.poll_event(), Some(Event::Stopped));
    assert!(!rig.consumer.wants_connection());
}

#[test]
fn stop_then_retry_while_disconnected_stops_without_reconnecting() {
    let mut rig = parked("redis-7.0", Protocol::Resp2);
    rig.reply("read_new").unwrap();
    rig.entry();
    rig.consumer.on_disconnected_because(rig.now, "reset by peer");
    assert!(matches!(rig.notice(), Notice::ConnectionLost { reason, .. } if reason == "reset by peer"));
    rig.consumer.stop();
    assert_eq!(rig.consumer.poll_event(), None, "the entry in hand finishes first");
    rig.settle(Verdict::Retry);
    assert_eq!(rig.consumer.poll_event(), Some(Event::Stopped));
    assert!(!rig.consumer.wants_connection());
}

#[test]
fn stop_while_disconnected_with_acks_owed_reconnects_to_confirm_them() {
    let mut rig = parked("redis-7.0", Protocol::Resp2);
    rig.reply("read_new").unwrap();
    rig.entry();
    rig.settle(Verdict::Ack);
    rig.consumer.on_disconnected_because(rig.now, "reset by peer");
    assert!(matches!(rig.notice(), Notice::ConnectionLost { reason, .. } if reason == "reset by peer"));
    rig.consumer.stop();
    assert_eq!(rig.consumer.poll_event(), None);
    assert!(rig.consumer.wants_connection());
    rig.advance(Duration::from_secs(1));
    assert_eq!(rig.start(), [cmd("XACK s g 1-0")], "only the owed ack, no drain");
    rig.reply("xack_1").unwrap();
    assert_eq!(rig.consumer.poll_event(), Some(Event::Stopped));
}

/// Stopped while parked: the read is cut short (its connection dropped, not waited out),
/// and a new connection asks what this consumer holds, to give back what the cut read may
/// have brought (leave.rs has the give-back), then the stop ends.
fn stop_parked(rig: &mut Rig) {
    rig.consumer.stop();
    assert_eq!(rig.consumer.poll_event(), None);
    assert!(rig.consumer.connect_due(rig.now), "the parked connection is dropped");
    let parting = rig.start();
    rig.fresh = false; // no `Connected` for this connection: it is the stop's
    assert_eq!(parting.last(), Some(&cmd("XPENDING s g - + 1000 A")), "{parting:?}");
    rig.reply("pending_counts_empty").unwrap();
    assert_eq!(rig.consumer.poll_event(), Some(Event::Stopped));
}

#[test]
fn stop_while_parked_stops_at_once() {
    each(|flavor, protocol| {
        let mut rig = parked(flavor, protocol);
        stop_parked(&mut rig);
        assert_eq!(rig.consumer.poll_transmit(), None);
        assert_eq!(rig.consumer.poll_timeout(), None);
        // A late reply is ignored.
        rig.reply("read_new").unwrap();
        assert_eq!(rig.consumer.poll_event(), None);
    });
}

#[test]
fn stop_waits_for_acks_in_flight() {
    each(|flavor, protocol| {
        let mut rig = parked(flavor, protocol);
        rig.reply("read_new").unwrap();
        rig.handle_all(Verdict::Ack);
        assert_eq!(rig.sent(), [cmd("XACK s g 1-0 2-0 3-0"), park("A")]);
        rig.consumer.stop();
        assert_eq!(rig.consumer.poll_event(), None);
        rig.raw(b":3\r\n").unwrap();
        assert_eq!(rig.consumer.poll_event(), Some(Event::Stopped));
    });
}

#[test]
fn abandon_while_disconnected_gives_up_owed_acks_at_once() {
    let mut rig = parked("redis-7.0", Protocol::Resp2);
    rig.reply("read_new").unwrap();
    rig.handle_all(Verdict::Ack);
    assert_eq!(rig.sent(), [cmd("XACK s g 1-0 2-0 3-0"), park("A")]);
    rig.consumer.on_disconnected_because(rig.now, "reset by peer");
    assert!(matches!(rig.notice(), Notice::ConnectionLost { reason, .. } if reason == "reset by peer"));
    rig.consumer.stop();
    assert_eq!(rig.consumer.poll_event(), None, "a stop waits to confirm the acks");
    rig.consumer.abandon();
    assert_eq!(rig.consumer.poll_event(), Some(Event::Stopped));
    assert!(!rig.consumer.wants_connection());
    assert_eq!(rig.consumer.poll_timeout(), None);
    let stats = rig.consumer.stats();
    assert_eq!((stats.acked, stats.abandoned_acks), (0, 3));
}

#[test]
fn abandon_leaves_the_entry_in_hand_and_acks_in_flight_unconfirmed() {
    each(|flavor, protocol| {
        let mut rig = parked(flavor, protocol);
        rig.reply("read_new").unwrap();
        rig.entry();
        rig.settle(Verdict::Ack);
        rig.entry();
        rig.consumer.abandon();
        assert_eq!(rig.consumer.poll_event(), Some(Event::Stopped));
        assert_eq!(rig.consumer.in_hand().len(), 0);
        // Not the earned ack, not the verdict of the entry in hand: only the parting write,
        // which gives back the entry read ahead (released where the server can).
        rig.settle(Verdict::Ack);
        let parting = if flavor == "redis-8.10" {
            cmd("XNACK s g SILENT IDS 1 3-0")
        } else {
            give_back("A", &["3-0"], 0, 0)
        };
        assert_eq!(rig.sent(), [parting]);
        assert_eq!(rig.consumer.poll_event(), None, "Stopped comes once; the third entry is not handed out");
        // A late reply is ignored.
        rig.raw(b":1\r\n").unwrap();
        let stats = rig.consumer.stats();
        assert_eq!((stats.new, stats.acked, stats.abandoned_acks), (2, 0, 1));
    });
}

#[test]
fn abandon_finishes_a_half_written_command_before_its_parting_write() {
    let mut rig = parked("redis-7.0", Protocol::Resp2);
    rig.reply("read_new").unwrap();
    rig.entry();
    rig.advance(Duration::from_secs(1)); // a slow handler: its ack goes out at once
    rig.settle(Verdict::Ack);
    let ack = cmd("XACK s g 1-0");
    rig.entry(); // in hand; its handler is at work when the abandon comes
    let out = rig.consumer.poll_transmit().expect("the slow handler's ack").to_vec();
    assert_eq!(parse_commands(&out), std::slice::from_ref(&ack));
    rig.consumer.advance_transmit(5); // the socket took 5 bytes of it
    rig.consumer.abandon();
    let rest = rig.consumer.poll_transmit().expect("the rest, then the parting write").to_vec();
    let whole = [&out[..5], &rest[..]].concat();
    assert_eq!(parse_commands(&whole), [ack, give_back("A", &["3-0"], 0, 1000)], "2-0 is in hand");
    assert_eq!(rig.consumer.poll_event(), Some(Event::Stopped));
}

#[test]
fn abandon_after_stopped_changes_nothing() {
    let mut rig = parked("valkey-8.1", Protocol::Resp3);
    stop_parked(&mut rig);
    rig.consumer.abandon();
    assert_eq!(rig.consumer.poll_event(), None);
    assert_eq!(rig.consumer.stats().abandoned_acks, 0);
}

#[test]
fn disconnect_mid_batch_keeps_the_entry_in_hand_and_resends_its_ack() {
    each(|flavor, protocol| {
        let mut rig = parked(flavor, protocol);
        rig.reply("read_new").unwrap();
        let first = rig.entry();
        rig.consumer.on_disconnected(rig.now);
        let retry_at = rig.consumer.poll_timeout().expect("a reconnect is scheduled");
        let delay = retry_at - rig.now;
        assert!(delay >= Duration::from_millis(50) && delay <= Duration::from_millis(100), "{delay:?}");
        assert!(rig.consumer.wants_connection());
        assert!(!rig.consumer.connect_due(retry_at - Duration::from_millis(1)));
        assert!(rig.consumer.connect_due(retry_at));
        rig.settle(Verdict::Ack);
        assert_eq!(rig.sent(), Vec::<Vec<String>>::new(), "nothing is written while down");
        rig.advance(delay);
        // The ack is owed and goes out before the drain; the rest of the batch was dropped
        // and comes back through the drain, its delivery counts given back first (the drain
        // counts them again).
        let ms = delay.as_millis() as u64;
        let ack = cmd(&format!("XACK s g {}", String::from_utf8_lossy(first.id())));
        assert_eq!(rig.start(), then(&[give_back("A", &["2-0", "3-0"], 0, ms), ack], &drain_from("A", "0")));
        assert_eq!(rig.consumer.poll_event(), None);
        assert_eq!(rig.consumer.stats().reconnects, 1);
    });
}

#[test]
fn disconnect_mid_ack_sends_the_acks_again() {
    each(|flavor, protocol| {
        let mut rig = parked(flavor, protocol);
        rig.reply("read_new").unwrap();
        rig.handle_all(Verdict::Ack);
        assert_eq!(rig.sent(), [cmd("XACK s g 1-0 2-0 3-0"), park("A")]);
        rig.consumer.on_disconnected(rig.now);
        rig.advance(Duration::from_secs(1));
        assert_eq!(rig.start(), then(&[cmd("XACK s g 1-0 2-0 3-0")], &drain_from("A", "0")));
        // Two were no longer pending, and no peer could have taken them (leased, settled
        // well within min_idle): the server forgot them. Counted as that, not as a peer's.
        rig.reply("xack_1").unwrap();
        let stats = rig.consumer.stats();
        assert_eq!((stats.acked, stats.lost_to_peer, stats.acks_unmatched), (1, 0, 2));
    });
}

#[test]
fn an_ack_a_peer_could_have_made_moot_is_put_down_to_the_peer() {
    each(|flavor, protocol| {
        let mut rig = parked(flavor, protocol);
        rig.reply("read_new").unwrap();
        // The first handler holds its entry past min_idle (30 s) without the driver renewing
        // it: a peer's reclaim could take it. The others are quick.
        rig.entry();
        rig.advance(Duration::from_secs(31));
        rig.settle(Verdict::Ack);
        let sent = rig.sent();
        assert!(sent.contains(&cmd("XACK s g 1-0")), "{sent:?}");
        rig.reply("xack_0").unwrap();
        let stats = rig.consumer.stats();
        assert_eq!((stats.acked, stats.lost_to_peer, stats.acks_unmatched), (0, 1, 0));
    });
}

#[test]
fn a_late_parked_read_times_out_and_reconnects() {
    each(|flavor, protocol| {
        let mut rig = parked(flavor, protocol);
        let deadline = rig.consumer.poll_timeout().unwrap();
        assert_eq!(deadline - rig.now, BEAT + Duration::from_secs(2), "beat + read grace");
        rig.now = deadline - Duration::from_millis(1);
        assert_eq!(rig.consumer.handle_timeout(rig.now), Ok(()));
        rig.now = deadline;
        let err = rig.consumer.handle_timeout(rig.now).unwrap_err();
        assert_eq!(err, Error::Timeout { command: Command::ReadNew });
        assert!(!err.is_fatal());
        assert!(rig.consumer.wants_connection());
        assert!(rig.consumer.poll_timeout().unwrap() > rig.now);
        assert_eq!(rig.consumer.stats().errors, 1);
    });
}

#[test]
fn wrong_password_is_fatal() {
    each(|flavor, protocol| {
        let mut rig = Rig::new(config("A", protocol).auth(Some("nobody"), "wrong pass"), flavor);
        rig.connect();
        let first = rig.sent().remove(0);
        match protocol {
            Protocol::Resp2 => assert_eq!(first, ["AUTH", "nobody", "wrong pass"]),
            _ => assert_eq!(first, ["HELLO", "3", "AUTH", "nobody", "wrong pass"]),
        }
        let err = rig.reply("wrongpass").unwrap_err();
        assert!(matches!(&err, Error::Server { message, .. } if message.starts_with("WRONGPASS")), "{err:?}");
        assert!(err.is_fatal());
    });
}

#[test]
fn loading_is_transient() {
    let mut rig = Rig::new(config("A", Protocol::Resp2), "redis-6.2");
    rig.start();
    let err = rig.raw(b"-LOADING Redis is loading the dataset in memory\r\n").unwrap_err();
    assert!(matches!(err, Error::Unavailable { command: Command::ReadPending, .. }), "{err:?}");
    assert!(!err.is_fatal());
    assert!(rig.consumer.wants_connection());
}

#[test]
fn garbage_from_a_server_never_heard_is_not_redis() {
    let mut rig = Rig::new(config("A", Protocol::Resp2), "redis-7.0");
    rig.connect();
    rig.sent();
    let err = rig.raw(b"HTTP/1.1 400 Bad Request\r\n\r\n").unwrap_err();
    assert_eq!(err, Error::NotRedis { said: "HTTP/1.1 400 Bad Request".into() });
    assert!(err.is_fatal());
    assert_eq!(err.to_string(), r#"did not answer as a Redis server (it said "HTTP/1.1 400 Bad Request")"#);
    assert!(!rig.consumer.wants_connection());
}

#[test]
fn garbage_and_unasked_replies_cost_the_connection_only() {
    let mut rig = Rig::new(config("A", Protocol::Resp2), "redis-7.0");
    rig.start();
    rig.drain_reply("read_pending_empty").unwrap();
    rig.sent();
    // A server spoke RESP before: garbage on a new connection (a proxy's hiccup) costs it.
    rig.consumer.on_disconnected(rig.now);
    rig.skip_link_notices();
    rig.advance(Duration::from_secs(1));
    rig.connect();
    rig.sent();
    let err = rig.raw(b"?what\r\n").unwrap_err();
    assert!(matches!(err, Error::Protocol { .. }) && !err.is_fatal());
    // Not answered in RESP: not called connected, and the words it sent are shown.
    let Notice::ConnectFailed { reason, .. } = rig.notice() else { panic!("not ConnectFailed") };
    assert_eq!(reason, r#"protocol error: not a Redis server? it answered "?what""#);
    rig.advance(Duration::from_secs(1));
    rig.start();
    rig.drain_reply("read_pending_empty").unwrap();
    rig.sent();
    rig.reply("autoclaim_done").unwrap();
    rig.sent();
    // Entries are being handed out: no command is in flight, so any reply is unasked for.
    rig.reply("read_new").unwrap();
    let err = rig.reply("read_new_nil").unwrap_err();
    assert!(matches!(err, Error::Protocol { .. }), "a reply to no command: {err:?}");
}

#[test]
fn an_unknown_reply_shape_is_fatal() {
    let mut rig = Rig::new(config("A", Protocol::Resp2), "redis-7.0");
    rig.start();
    let err = rig.raw(b":1\r\n").unwrap_err();
    assert!(matches!(err, Error::Shape { command: Command::ReadPending, .. }), "{err:?}");
    assert!(err.is_fatal());
}

#[test]
fn connections_are_named_by_default() {
    for protocol in PROTOCOLS {
        let config = Config::new("s", "g", "A").count(10).start_count(10).protocol(protocol);
        let mut rig = Rig::new(config, "redis-7.0");
        rig.connect();
        let opening = rig.sent();
        match protocol {
            Protocol::Resp2 => assert_eq!(opening[0], cmd("CLIENT SETNAME pelican:s:g:A")),
            _ => assert_eq!(opening[0], cmd("HELLO 3 SETNAME pelican:s:g:A")),
        }
        let answer = if protocol == Protocol::Resp3 { "hello" } else { "setname" };
        rig.reply(answer).unwrap();
        if protocol == Protocol::Resp2 {
            assert_eq!(&opening[1..], [cmd("HELLO")]);
            rig.reply("hello_info").unwrap();
        }
        assert_eq!(rig.sent(), cmds(&["CLIENT ID", "CLIENT LIST TYPE normal"]));
        rig.reply("client_id").unwrap();
        rig.reply("client_list").unwrap();
        assert_eq!(rig.sent(), drain_from("A", "0"));
    }
}

/// The three health commands, in order.
fn health() -> Vec<Vec<String>> {
    cmds(&["XINFO GROUPS s", "XPENDING s g - + 1", "TIME"])
}

#[test]
fn group_health_is_asked_every_interval_and_never_behind_a_parked_read() {
    each(|flavor, protocol| {
        let every = Duration::from_secs(3); // within the parked read's beat + grace
        let mut rig = Rig::new(config("A", protocol).health_every(every), flavor);
        assert_eq!(rig.start(), drain_from("A", "0"));
        rig.drain_reply("read_pending_empty").unwrap();
        // Asked once a read is answered: the server has made the consumer by then.
        assert_eq!(rig.sent(), then(&health(), &[claim("A", "0-0")]));
        rig.reply("xinfo_groups").unwrap();
        rig.reply("xpending_extended").unwrap();
        assert_eq!(rig.consumer.poll_event(), None, "told once all three are in");
        rig.reply("time").unwrap();
        let Notice::Health(h) = rig.notice() else { panic!("not health") };
        assert_eq!(h.consumers, 2);
        if flavor == "redis-6.2" {
            // No lag before 7.0; the oldest pending entry (2-0) is dated by its id.
            assert_eq!((h.pending, h.lag), (1, None));
            let oldest = h.oldest.expect("2-0 pending");
            assert_eq!(
                (&oldest.id[..], oldest.owner.as_deref().unwrap_or_default(), oldest.deliveries),
                (&b"2-0"[..], &b"B"[..], 3)
            );
            assert!(oldest.age > Duration::from_secs(50 * 365 * 24 * 3600), "id 2-0 is from 1970");
        } else {
            assert_eq!((h.pending, h.lag, h.oldest), (0, Some(0), None));
        }
        rig.reply("autoclaim_done").unwrap();
        assert_eq!(rig.sent(), [park("A")]);
        // Due while parked: held until the park answers, then sent before the next read.
        rig.advance(every);
        rig.consumer.handle_timeout(rig.now).unwrap();
        assert_eq!(rig.sent(), Vec::<Vec<String>>::new(), "nothing behind a parked read");
        rig.reply("read_new_nil").unwrap();
        assert_eq!(rig.sent(), then(&health(), &[claim("A", "0-0")]));
        // A refusal (no such key yet) drops this round only; the connection stays.
        rig.raw(b"-ERR no such key\r\n").unwrap();
        rig.reply("xpending_extended").unwrap();
        rig.reply("time").unwrap();
        assert_eq!(rig.consumer.poll_event(), None);
        assert!(rig.consumer.is_connected());
    });
}

#[test]
fn health_the_user_may_not_ask_for_is_told_once_and_not_asked_again() {
    each(|flavor, protocol| {
        let every = Duration::from_secs(3);
        let mut rig = Rig::new(config("A", protocol).health_every(every), flavor);
        assert_eq!(rig.start(), drain_from("A", "0"));
        rig.drain_reply("read_pending_empty").unwrap();
        rig.reply("xinfo_groups").unwrap();
        rig.reply("xpending_extended").unwrap();
        // A stream worker's ACL (+@stream +@connection) has no TIME.
        rig.reply("time_noperm").unwrap();
        let Notice::Refused { feature, reason } = rig.notice() else { panic!("not told") };
        assert_eq!(feature, Notice::HEALTH);
        assert!(reason.starts_with("NOPERM"), "{reason}");
        assert!(rig.consumer.is_connected(), "consuming goes on");
        rig.reply("autoclaim_done").unwrap();
        rig.sent();
        rig.advance(every);
        rig.reply("read_new_nil").unwrap();
        assert_eq!(rig.sent(), [claim("A", "0-0")], "health is not asked again");
        assert_eq!(rig.consumer.poll_event(), None);
    });
}

#[test]
fn a_stop_while_a_silent_server_holds_the_handshake_ends_at_its_timeout() {
    // Twins allowed: the drain goes out with the handshake (see `twins.rs` for the look).
    let config = Config::new("s", "g", "A").count(10).start_count(10).allow_twins();
    let mut rig = Rig::new(config, "redis-7.0");
    rig.connect();
    rig.sent();
    let grace = Duration::from_secs(2);
    rig.advance(grace + Duration::from_millis(1));
    assert!(matches!(rig.consumer.handle_timeout(rig.now), Err(Error::Timeout { .. })));
    rig.advance(Duration::from_secs(1));
    rig.connect();
    rig.sent();
    rig.consumer.stop();
    assert_eq!(rig.consumer.poll_event(), None, "the drain in flight is waited for");
    rig.advance(grace + Duration::from_millis(1));
    let _ = rig.consumer.handle_timeout(rig.now);
    let mut events = Vec::new();
    while let Some(e) = rig.consumer.poll_event() {
        events.push(e);
    }
    assert!(events.contains(&Event::Stopped), "{events:?}");
}

/// This consumer's own `Retry` entries, reclaimed again for another try, are not told as
/// entries taken from their owners: a failing entry would tell it at every beat.
#[test]
fn own_retries_coming_back_are_not_told_as_reclaimed() {
    for protocol in PROTOCOLS {
        let mut rig = Rig::new(config("B", protocol).on_retry(OnRetry::StayPending), "redis-7.0");
        rig.start();
        rig.drain_reply("read_pending_empty").unwrap();
        rig.sent();
        rig.reply("autoclaim").unwrap();
        assert_eq!(rig.notice(), Notice::Reclaimed { count: 2, released: 0 });
        rig.reply("pending_counts_claimed").unwrap();
        assert_eq!(ids(&rig.handle_all(Verdict::Retry)), ["1-0", "3-0"]);
        assert_eq!(rig.sent()[1][0], "XREADGROUP", "parked");
        // The block runs out; the next beat's sweep finds the same two again.
        rig.advance(Duration::from_secs(2));
        rig.reply("read_new_nil").unwrap();
        assert_eq!(rig.sent()[0][0], "XAUTOCLAIM", "{protocol:?}");
        rig.reply("autoclaim").unwrap();
        rig.reply("pending_counts_claimed").unwrap();
        let again = rig.consumer.poll_event();
        assert!(matches!(&again, Some(Event::Entry(e)) if e.id() == b"1-0"), "{protocol:?}: {again:?}");
    }
}

/// A lag above zero is checked before it is told: with nothing past the group's
/// last-delivered id the server's count is wrong (Redis 7.0 after a failover keeps the
/// group's read count behind for good; captured here as `XGROUP SETID … ENTRIESREAD` leaves
/// it), and the lag is told unknown rather than wrong.
#[test]
fn a_lag_the_server_counts_wrong_is_told_unknown() {
    for protocol in PROTOCOLS {
        let every = Duration::from_secs(3);
        let mut rig = Rig::new(config("A", protocol).health_every(every), "redis-7.0");
        rig.start();
        rig.drain_reply("read_pending_empty").unwrap();
        assert_eq!(rig.sent(), then(&health(), &[claim("A", "0-0")]));
        // `lag 3`, last-delivered-id 5-0.
        rig.reply("xinfo_groups_lag_wrong").unwrap();
        assert_eq!(rig.sent(), [cmd("XRANGE s (5-0 + COUNT 1")], "is anything left to deliver?");
        rig.reply("xpending_extended").unwrap();
        rig.reply("time").unwrap();
        assert_eq!(rig.consumer.poll_event(), None, "told once the check answers");
        rig.reply("autoclaim_done").unwrap(); // written before the check
        rig.reply("xrange_nothing_beyond").unwrap();
        let Notice::Health(h) = rig.notice() else { panic!("not health") };
        assert_eq!((h.pending, h.lag), (0, None), "{protocol:?}: nothing to deliver, so not 3");
        assert_eq!(rig.consumer.snapshot().health.and_then(|h| h.lag), None);
    }
}

/// Caught up is more than parked: drained, swept, and the last read of new entries short. A
/// full read (a backlog) parks between batches without being caught up; the read that comes
/// back short is.
#[test]
fn caught_up_is_parked_with_nothing_left_to_read() {
    each(|flavor, protocol| {
        let mut rig = Rig::new(config("A", protocol).count(3), flavor);
        rig.start();
        assert!(!rig.consumer.is_caught_up(), "draining");
        rig.drain_reply("read_pending_empty").unwrap();
        assert!(!rig.consumer.is_caught_up(), "sweeping");
        rig.sent();
        rig.reply("autoclaim_done").unwrap();
        rig.sent();
        assert!(rig.consumer.is_parked() && rig.consumer.is_caught_up(), "{flavor} {protocol:?}");
        // Three entries for three asked: more may wait on the server.
        rig.reply("read_new").unwrap();
        assert!(!rig.consumer.is_caught_up(), "a full read: a backlog");
        rig.handle_all(Verdict::Ack);
        // Answered as they come: the reads ahead find nothing, the acks are confirmed.
        for _ in 0..4 {
            for command in rig.sent() {
                match (command[0].as_str(), command.len()) {
                    ("XACK", n) => rig.raw(format!(":{}\r\n", n - 3).as_bytes()).unwrap(),
                    ("XREADGROUP", _) if command.contains(&"BLOCK".to_string()) => {}
                    _ => rig.reply("read_new_nil").unwrap(),
                }
            }
        }
        assert!(rig.consumer.is_parked(), "{flavor} {protocol:?}");
        assert!(rig.consumer.is_caught_up(), "{flavor} {protocol:?}: the next came back short");
        // As a snapshot tells it to another thread, and a refresh brings it.
        assert!(rig.consumer.snapshot().caught_up);
        let mut last = pelican::Snapshot::default();
        assert!(rig.consumer.refresh_snapshot(&mut last) && last.caught_up);
    });
}

/// The wait a blocking driver sets from `poll_timeout`: never zero, even for a deadline past.
#[test]
fn the_wait_from_now_is_at_least_a_millisecond() {
    let mut rig = Rig::new(config("A", Protocol::Resp2), "redis-7.0");
    rig.start();
    let due = rig.consumer.poll_timeout().expect("the drain's deadline");
    assert_eq!(rig.consumer.timeout_from(due - Duration::from_millis(5)), Some(Duration::from_millis(5)));
    assert_eq!(rig.consumer.timeout_from(due + Duration::from_secs(1)), Some(Duration::from_millis(1)));
}

/// The driver's seed spreads reconnects (processes restarted together do not retry in step);
/// `Config::seed` pins them whatever the driver says.
#[test]
fn reconnect_jitter_follows_the_drivers_seed_unless_the_config_names_one() {
    let delays = |config: Config, seed: u64| {
        let mut consumer = pelican::Consumer::new(config).unwrap();
        consumer.reseed(seed);
        let mut now = origin();
        (0..4)
            .map(|_| {
                consumer.on_connected(now);
                consumer.on_disconnected(now);
                let at = consumer.poll_timeout().unwrap();
                let delay = at - now;
                now = at;
                delay
            })
            .collect::<Vec<_>>()
    };
    let plain = || Config::new("s", "g", "A").no_client_name();
    assert_ne!(delays(plain(), 1), delays(plain(), 2), "each driver's seed its own delays");
    assert_eq!(delays(plain(), 1), delays(plain(), 1));
    assert_eq!(delays(plain().seed(7), 1), delays(plain().seed(7), 2), "the config's seed wins");
}
