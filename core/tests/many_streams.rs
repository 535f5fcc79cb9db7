//! One consumer, many streams, one connection: drains stream by stream, one parked read over
//! all of them, entries routed to their streams and settled there, a group lost on one stream
//! while the others go on, streams added and removed while running.

mod support;

use std::time::Duration;

use pelican::{Config, Event, GroupGone, Notice, Protocol, Verdict};
use support::*;

const BEAT: Duration = Duration::from_secs(2);

fn config(protocol: Protocol) -> Config {
    Config::new("a", "g", "A")
        .count(10)
        .start_count(10)
        .beat(BEAT)
        .protocol(protocol)
        .no_client_name()
        .leave_on_stop(false)
}

fn drain(key: &str) -> Vec<Vec<String>> {
    cmds(&[&format!("XREADGROUP GROUP g A COUNT 10 STREAMS {key} 0"), &format!("XPENDING {key} g - + 10 A")])
}

/// A read reply over several streams: each key with its entries (id, one field `f` = value).
fn read_reply(protocol: Protocol, streams: &[(&str, &[(&str, &str)])]) -> Vec<u8> {
    let bulk = |s: &str| format!("${}\r\n{s}\r\n", s.len());
    let mut out = match protocol {
        Protocol::Resp2 => format!("*{}\r\n", streams.len()),
        _ => format!("%{}\r\n", streams.len()),
    };
    for (key, entries) in streams {
        if protocol == Protocol::Resp2 {
            out.push_str("*2\r\n");
        }
        out.push_str(&bulk(key));
        out.push_str(&format!("*{}\r\n", entries.len()));
        for (id, value) in *entries {
            out.push_str(&format!("*2\r\n{}*2\r\n{}{}", bulk(id), bulk("f"), bulk(value)));
        }
    }
    out.into_bytes()
}

/// What the consumer sends until it parks with nothing owed, each command answered as
/// the server would with nothing new: an ack counts its ids, a read is nil, a give-back
/// names no id (a parked read with entries in hand blocks only briefly).
fn until_parked(rig: &mut Rig) -> Vec<Vec<String>> {
    let mut all = Vec::new();
    for _ in 0..10 {
        let sent = rig.sent();
        if sent.is_empty() {
            break;
        }
        let mut replies = Vec::new();
        for c in &sent {
            match &c[0][..] {
                "XACK" => replies.extend(format!(":{}\r\n", c.len() - 3).into_bytes()),
                "XREADGROUP" if rig.protocol == Protocol::Resp3 => replies.extend(b"_\r\n"),
                "XREADGROUP" => replies.extend(b"*-1\r\n"),
                _ => replies.extend(b"*0\r\n"),
            }
        }
        all.extend(sent);
        rig.advance(Duration::from_millis(50));
        rig.raw(&replies).unwrap();
        if rig.consumer.is_parked() {
            all.extend(rig.sent());
            break;
        }
    }
    all
}

/// Started on stream `a`, with `b` and `c` added: each drained (empty) in turn, then one
/// parked read over the three.
fn parked(protocol: Protocol) -> Rig {
    let mut rig = Rig::new(config(protocol).streams(["a", "b"]), "redis-7.0");
    assert!(rig.consumer.add_stream("c"));
    assert!(!rig.consumer.add_stream("b"), "read already");
    assert_eq!(rig.start(), drain("a"));
    for next in ["b", "c"] {
        rig.drain_reply("read_pending_empty").unwrap();
        assert_eq!(rig.sent(), drain(next), "each stream's own pending entries, in turn");
    }
    rig.drain_reply("read_pending_empty").unwrap();
    // Sweeps with many streams wait their turn (each about once per `min_idle`): the
    // first read parks on all three at once, a third of the read's count each.
    assert_eq!(rig.sent(), [cmd("XREADGROUP GROUP g A COUNT 3 BLOCK 2000 STREAMS a b c > > >")]);
    assert!(rig.consumer.is_parked());
    rig
}

#[test]
fn one_parked_read_serves_every_stream_and_each_entry_is_acked_on_its_own() {
    for protocol in PROTOCOLS {
        let mut rig = parked(protocol);
        // The same id in two streams (ids made in the same millisecond): two entries.
        let reply = read_reply(protocol, &[("a", &[("1-0", "a1")]), ("c", &[("1-0", "c1"), ("2-0", "c2")])]);
        rig.raw(&reply).unwrap();
        let mut seen = Vec::new();
        while let Some(Event::Entry(e)) = rig.consumer.poll_event() {
            seen.push((
                String::from_utf8_lossy(e.stream()).into_owned(),
                String::from_utf8_lossy(e.id()).into_owned(),
            ));
            assert!(rig.consumer.settle_entry(&e, Verdict::Ack, rig.now));
            assert!(!rig.consumer.settle_entry(&e, Verdict::Ack, rig.now), "settled once");
        }
        let want = [("a", "1-0"), ("c", "1-0"), ("c", "2-0")].map(|(s, i)| (s.to_string(), i.to_string()));
        assert_eq!(seen, want, "{protocol:?}");
        assert_eq!(rig.consumer.stats().new, 3);
        // Each stream's acks on their own key; the reads turn the streams' order.
        let sent = until_parked(&mut rig);
        let acked = |key: &str| -> Vec<String> {
            sent.iter().filter(|c| c[0] == "XACK" && c[1] == key).flat_map(|c| c[3..].to_vec()).collect()
        };
        assert_eq!(
            (acked("a"), acked("b"), acked("c")),
            (vec!["1-0".into()], vec![], vec!["1-0".into(), "2-0".into()])
        );
        // Each stream's part of the counts.
        let part = |key: &[u8]| rig.consumer.stream_stats(key).map(|s| (s.new, s.acked));
        assert_eq!(
            (part(b"a"), part(b"b"), part(b"c"), part(b"z")),
            (Some((1, 1)), Some((0, 0)), Some((2, 2)), None)
        );
        assert_eq!(rig.consumer.stats().acked, 3);
        // Every stream gets its COUNT: the order does not matter, and stays.
        let read = sent.iter().find(|c| c[0] == "XREADGROUP").expect("a read");
        assert_eq!(read[read.len() - 6..read.len() - 3], ["a", "b", "c"], "{protocol:?}");
    }
}

/// A stream added while running has its group made from its first entry (`0`), whatever the
/// start of the streams the consumer began with: the entries written before it was added (or
/// found by a pattern) are not skipped. `create_added_group` names another start.
#[test]
fn a_stream_added_later_has_its_group_made_from_its_first_entry() {
    let mut rig = Rig::new(config(Protocol::Resp2).create_group("$"), "redis-7.0");
    rig.consumer.add_stream("b");
    let opening = rig.start();
    assert_eq!(opening[..2], cmds(&["XGROUP CREATE a g $ MKSTREAM", "XGROUP CREATE b g 0 MKSTREAM"]));

    let mut rig = Rig::new(config(Protocol::Resp2).create_group("$").create_added_group("$"), "redis-7.0");
    rig.consumer.add_stream("b");
    let opening = rig.start();
    assert_eq!(opening[..2], cmds(&["XGROUP CREATE a g $ MKSTREAM", "XGROUP CREATE b g $ MKSTREAM"]));
}

#[test]
fn a_group_gone_on_one_stream_is_made_again_there_while_the_others_go_on() {
    for protocol in PROTOCOLS {
        let mut rig =
            Rig::new(config(protocol).create_group("0").on_group_gone(GroupGone::Recreate), "redis-7.0");
        rig.consumer.add_stream("b");
        let opening = rig.start();
        assert_eq!(opening[..2], cmds(&["XGROUP CREATE a g 0 MKSTREAM", "XGROUP CREATE b g 0 MKSTREAM"]));
        rig.raw(b"+OK\r\n+OK\r\n").unwrap();
        rig.drain_reply("read_pending_empty").unwrap();
        assert_eq!(rig.sent(), drain("b"));
        rig.drain_reply("read_pending_empty").unwrap();
        assert_eq!(rig.sent(), [cmd("XREADGROUP GROUP g A COUNT 5 BLOCK 2000 STREAMS a b > >")]);
        let gone = b"-NOGROUP No such key 'b' or consumer group 'g' in XREADGROUP with GROUP option\r\n";
        rig.raw(gone).unwrap();
        // Only b's group is made again, and only b drained again before the next read.
        assert_eq!(rig.sent()[0], cmd("XGROUP CREATE b g 0 MKSTREAM"), "{protocol:?}");
        rig.raw(b"+OK\r\n").unwrap();
        assert_eq!(rig.notice(), Notice::GroupRecreated { start: "0".into(), last_read: None });
        assert_eq!(rig.consumer.stats().group_recreated, 1);
        assert!(rig.consumer.is_connected());
    }
}

#[test]
fn a_removed_stream_is_read_no_more_and_its_buffered_entries_are_given_back() {
    for protocol in PROTOCOLS {
        let mut rig = parked(protocol);
        let reply = read_reply(protocol, &[("a", &[("1-0", "a1")]), ("b", &[("5-0", "b5"), ("6-0", "b6")])]);
        rig.raw(&reply).unwrap();
        let first = rig.entry();
        assert_eq!(first.stream(), b"a");
        assert!(rig.consumer.remove_stream(b"b"));
        assert!(!rig.consumer.remove_stream(b"b"), "removed already");
        assert_eq!(
            rig.consumer.streams().map(|k| k.to_vec()).collect::<Vec<_>>(),
            [b"a".to_vec(), b"c".to_vec()]
        );
        rig.settle(Verdict::Ack);
        assert_eq!(rig.consumer.poll_event(), None, "b's entries are not handed out");
        let sent = until_parked(&mut rig);
        // b's two entries given back (their delivery counts), a's acked, then a read of a and c.
        assert!(sent.contains(&cmd("XCLAIM b g A 0 5-0 6-0 JUSTID RETRYCOUNT 0 IDLE 30000")), "{sent:?}");
        assert!(sent.contains(&cmd("XACK a g 1-0")), "{sent:?}");
        let read = sent.iter().find(|c| c[0] == "XREADGROUP").expect("a read");
        let mut keys = read[read.len() - 4..read.len() - 2].to_vec();
        keys.sort();
        assert_eq!((&read[read.len() - 5][..], keys), ("STREAMS", vec!["a".to_string(), "c".to_string()]));
    }
}

#[test]
fn each_stream_is_swept_about_once_per_min_idle_not_every_beat() {
    let mut rig = parked(Protocol::Resp2);
    let mut sweeps = Vec::new();
    // Idle for two `min_idle`s (30 s): every parked read runs out empty.
    for _ in 0..30 {
        rig.advance(BEAT);
        rig.raw(b"*-1\r\n").unwrap();
        for c in rig.sent() {
            if c[0] == "XAUTOCLAIM" {
                sweeps.push(c[1].clone());
                rig.raw(b"*3\r\n$3\r\n0-0\r\n*0\r\n*0\r\n").unwrap();
            }
        }
        let _ = rig.sent();
    }
    sweeps.sort();
    // 60 s: each stream twice, not 30 times.
    assert_eq!(sweeps, ["a", "a", "b", "b", "c", "c"]);
}

#[test]
fn on_redis_8_10_every_stream_may_bring_the_whole_count_and_the_reply_is_capped() {
    let mut rig = Rig::new(config(Protocol::Resp3), "redis-8.10");
    rig.consumer.add_stream("b");
    let _ = rig.start();
    let mut read = Vec::new();
    for _ in 0..2 {
        rig.drain_reply("read_pending_empty").unwrap();
        read = rig.sent();
    }
    let read = read.last().cloned().unwrap_or_default();
    let text = read.join(" ");
    assert!(text.starts_with("XREADGROUP GROUP g A COUNT 10 MAXCOUNT 10 MAXSIZE"), "{text}");
    assert!(text.ends_with("STREAMS a b > >"), "{text}");
    // A capped reply leaves out the last streams: the next read starts with another.
    rig.raw(b"_\r\n").unwrap();
    let next = rig.sent().last().cloned().unwrap_or_default().join(" ");
    assert!(next.ends_with("STREAMS b a > >"), "{next}");
}

#[test]
fn entries_of_one_id_on_two_streams_are_settled_each_on_its_own() {
    let mut rig = Rig::new(config(Protocol::Resp2).streams(["a", "b"]).concurrency(2), "redis-7.0");
    let _ = rig.start();
    rig.drain_reply("read_pending_empty").unwrap();
    rig.drain_reply("read_pending_empty").unwrap();
    let _ = rig.sent();
    let reply =
        read_reply(Protocol::Resp2, &[("a", &[("1-0", "a1"), ("2-0", "a2")]), ("b", &[("1-0", "b1")])]);
    rig.raw(&reply).unwrap();
    let (a1, a2, b1) = (rig.entry(), rig.entry(), rig.entry());
    assert_eq!([a1.stream(), a2.stream(), b1.stream()], [b"a", b"a", b"b"], "each stream its own two");
    assert_eq!(b1.field(b"f"), Some(&b"b1"[..]));
    // b's 1-0 settled first, by its entry: a's 1-0 stays in hand.
    assert!(rig.consumer.settle_entry(&b1, Verdict::Retry, rig.now));
    assert_eq!(rig.consumer.in_hand().len(), 2);
    assert!(rig.consumer.settle_entry(&a1, Verdict::Ack, rig.now));
    assert!(!rig.consumer.settle_entry(&b1, Verdict::Ack, rig.now), "settled already");
    assert!(rig.consumer.settle_entry(&a2, Verdict::Ack, rig.now));
    assert_eq!((rig.consumer.stats().retried, rig.consumer.in_hand().len()), (1, 0));
}

#[test]
fn each_stream_has_its_concurrency_and_most_in_hand_bounds_them_all() {
    let config = config(Protocol::Resp2).streams(["a", "b", "c"]).concurrency(2).most_in_hand(5);
    let mut rig = Rig::new(config, "redis-7.0");
    let _ = rig.start();
    for _ in 0..3 {
        rig.drain_reply("read_pending_empty").unwrap();
    }
    let _ = rig.sent();
    let three: &[(&str, &str)] = &[("1-0", "x"), ("2-0", "y"), ("3-0", "z")];
    rig.raw(&read_reply(Protocol::Resp2, &[("a", three), ("b", three), ("c", three)])).unwrap();
    let mut handed = Vec::new();
    while let Some(Event::Entry(e)) = rig.consumer.poll_event() {
        handed.push(String::from_utf8_lossy(e.stream()).into_owned());
    }
    // Two of a, two of b, then one of c: five in all.
    assert_eq!(handed, ["a", "a", "b", "b", "c"]);
}

/// Changes asked from elsewhere are answered at once, against what the consumer will read
/// once those asked before are made, and made at `apply`.
#[test]
fn stream_changes_are_answered_as_the_consumer_would() {
    let mut rig = parked(Protocol::Resp2);
    let mut changes = pelican::StreamChanges::new(&rig.consumer);
    assert!(!changes.add("a"), "read already");
    assert!(changes.add("x"));
    assert!(!changes.add("x"), "asked already");
    assert!(!changes.remove("nope"), "not read");
    assert!(changes.remove("x"), "asked: it can be taken back");
    assert!(changes.add("y") && !changes.is_empty());
    changes.apply(&mut rig.consumer);
    assert!(changes.is_empty());
    let read: Vec<_> = rig.consumer.streams().cloned().collect();
    assert!(read.iter().any(|k| &k[..] == b"y") && !read.iter().any(|k| &k[..] == b"x"), "{read:?}");
    rig.consumer.stop();
    assert!(
        !changes.add("e") || {
            changes.apply(&mut rig.consumer);
            !changes.add("f")
        },
        "refused once the consumer refused one: it is stopping"
    );
}
