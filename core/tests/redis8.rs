//! The Redis 8 dialect: what the consumer sends once `HELLO` names Redis 8.10, driven through
//! the public API with replies captured from Redis 8.10.2 (and 7.0 for what it must refuse).

mod support;

use std::time::Duration;

use pelican::{Config, DeleteAcked, Dialect, Error, Event, Notice, OnRetry, Protocol, Source, Verdict};
use support::*;

const MIN_IDLE: Duration = Duration::from_secs(3);
const PROTOCOLS: [Protocol; 2] = [Protocol::Resp2, Protocol::Resp3];

fn config(protocol: Protocol) -> Config {
    Config::new("s", "g", "A")
        .count(10)
        .start_count(10)
        .beat(Duration::from_secs(2))
        .min_idle(MIN_IDLE)
        .protocol(protocol)
        .no_client_name()
        // Leaving the group at a stop has its own stories (leave.rs).
        .leave_on_stop(false)
}

/// Half of the default 16 MiB `read_bytes`: the `MAXSIZE` of reads of more than one entry.
const CAP: &str = "8388608";

fn park() -> Vec<String> {
    cmd(&format!("XREADGROUP GROUP g A COUNT 10 MAXSIZE {CAP} BLOCK 2000 CLAIM 3000 STREAMS s >"))
}

/// Connected to Redis 8.10 (the `Connected` notice checked), drained, parked.
fn parked(config: Config) -> Rig {
    let mut rig = Rig::new(config, "redis-8.10");
    rig.connect();
    let hello = rig.sent().remove(0);
    match rig.protocol {
        Protocol::Resp2 => {
            assert_eq!(hello, ["HELLO"]);
            rig.consumer.handle_input(&rig.fixture("hello_info"), rig.now).unwrap();
        }
        _ => {
            assert_eq!(hello, ["HELLO", "3"]);
            rig.consumer.handle_input(&rig.fixture("hello"), rig.now).unwrap();
        }
    }
    rig.fresh = false;
    let Some(Event::Notice(Notice::Connected { reconnect: false, dialect })) = rig.consumer.poll_event()
    else {
        panic!("not connected")
    };
    assert_eq!(dialect, Dialect::of(b"redis", b"8.10.2"));
    assert!(dialect.claim_in_read && dialect.release && dialect.ack_delete && dialect.read_size_cap);
    assert_eq!(rig.consumer.dialect(), dialect);
    // Nothing went out before the answer: the opening drain speaks Redis 8.
    let drain = format!("XREADGROUP GROUP g A COUNT 10 MAXSIZE {CAP} STREAMS s 0");
    let opening = rig.sent();
    if opening[0][0] == "EVAL" {
        // The check that dead letters can be moved holds the drain back.
        rig.reply("dead_letter_check").unwrap();
        assert_eq!(rig.sent(), cmds(&[&drain, "XPENDING s g - + 10 A"]));
    } else {
        assert_eq!(opening, cmds(&[&drain, "XPENDING s g - + 10 A"]));
    }
    rig.drain_reply("read_pending_empty").unwrap();
    // No XAUTOCLAIM: the parked read claims.
    assert_eq!(rig.sent(), [park()]);
    rig
}

#[test]
fn reads_claim_idle_entries_with_their_delivery_counts() {
    for protocol in PROTOCOLS {
        let mut rig = parked(config(protocol));
        rig.reply("read_claim").unwrap();
        assert_eq!(rig.notice(), Notice::Reclaimed { count: 2, released: 0 });
        let seen = rig.handle_all(Verdict::Ack);
        let got: Vec<_> = seen.iter().map(|e| (e.id().to_vec(), e.source, e.deliveries)).collect();
        assert_eq!(
            got,
            [
                (b"1-0".to_vec(), Source::Claimed, 2),
                (b"2-0".to_vec(), Source::Claimed, 2),
                (b"3-0".to_vec(), Source::New, 1)
            ],
            "{protocol:?}"
        );
        assert_eq!((rig.consumer.stats().claimed, rig.consumer.stats().new), (2, 1));
        // No XPENDING for their counts: the acks, then the next read.
        assert_eq!(rig.sent(), [cmd("XACK s g 1-0 2-0 3-0"), park()]);
    }
}

#[test]
fn claimed_entries_past_the_cap_are_dead_lettered_not_handed_out() {
    for protocol in PROTOCOLS {
        let mut rig = parked(config(protocol).dead_letter_after(1, "dl"));
        rig.reply("read_claim").unwrap();
        assert_eq!(rig.notice(), Notice::Reclaimed { count: 2, released: 0 });
        let seen = rig.handle_all(Verdict::Ack);
        assert_eq!(ids(&seen), ["3-0"], "{protocol:?}");
        let sent = rig.sent();
        let moved: Vec<&str> = sent.iter().filter(|c| c[0] == "EVAL").map(|c| c[7].as_str()).collect();
        assert_eq!(moved, ["1-0", "2-0"], "{sent:?}");
    }
}

#[test]
fn a_retry_releases_its_entry_at_once() {
    for protocol in PROTOCOLS {
        let mut rig = parked(config(protocol).on_retry(OnRetry::Release));
        rig.reply("read_new").unwrap();
        rig.entry();
        rig.settle(Verdict::Retry);
        let sent = rig.sent();
        assert_eq!(sent[0], cmd("XNACK s g FAIL IDS 1 1-0"), "{protocol:?}");
        rig.reply("xnack_fail").unwrap();
        assert_eq!(rig.consumer.stats().released, 1);
        assert_eq!(rig.consumer.stats().retried, 1);
    }
}

#[test]
fn a_retry_can_stay_pending_or_wait_before_its_release() {
    let mut rig = parked(config(Protocol::Resp2).on_retry(OnRetry::StayPending));
    rig.reply("read_new").unwrap();
    rig.entry();
    rig.settle(Verdict::Retry);
    assert!(!rig.sent().iter().any(|c| c[0] == "XNACK"), "stays pending");

    let delay = Duration::from_millis(200);
    let mut rig = parked(config(Protocol::Resp2).on_retry(OnRetry::ReleaseAfter(delay)));
    rig.reply("read_new").unwrap();
    rig.entry();
    let settled_at = rig.now;
    rig.settle(Verdict::Retry);
    assert!(!rig.sent().iter().any(|c| c[0] == "XNACK"), "not yet");
    assert_eq!(rig.consumer.poll_timeout(), Some(settled_at + delay));
    rig.advance(delay);
    rig.consumer.handle_timeout(rig.now).unwrap();
    assert_eq!(rig.sent()[0], cmd("XNACK s g FAIL IDS 1 1-0"));

    let too_long = config(Protocol::Resp2).on_retry(OnRetry::ReleaseAfter(MIN_IDLE));
    assert!(pelican::Consumer::new(too_long).is_err(), "past the lease it may not be ours");
}

/// An entry given back (a stop past its deadline) is released at once with its delivery
/// counted (`FAIL`), even where retries stay pending: it is no failure of the entry's.
#[test]
fn an_entry_given_back_is_released_at_once_its_delivery_counted() {
    for protocol in PROTOCOLS {
        let mut rig = parked(config(protocol).on_retry(OnRetry::StayPending));
        rig.reply("read_new").unwrap();
        rig.entry();
        rig.settle(Verdict::GiveBack);
        let sent = rig.sent();
        assert_eq!(sent[0], cmd("XNACK s g FAIL IDS 1 1-0"), "{protocol:?}");
        rig.reply("xnack_fail").unwrap();
        assert_eq!((rig.consumer.stats().released, rig.consumer.stats().retried), (1, 0));
    }
}

#[test]
fn a_retry_held_past_the_lease_is_not_released() {
    // Held long without a driver renewing it: a peer may own it now, and XNACK checks no owner.
    let mut rig = parked(config(Protocol::Resp2));
    rig.reply("read_new").unwrap();
    rig.entry();
    rig.advance(MIN_IDLE);
    rig.settle(Verdict::Retry);
    assert!(!rig.sent().iter().any(|c| c[0] == "XNACK"));
}

#[test]
fn a_stop_releases_what_was_read_and_not_handed_out() {
    for protocol in PROTOCOLS {
        let mut rig = parked(config(protocol));
        rig.reply("read_new").unwrap();
        let first = rig.entry();
        rig.consumer.stop();
        rig.consumer.settle(first.id(), Verdict::Ack, rig.now);
        let sent = rig.sent();
        assert!(sent.contains(&cmd("XNACK s g SILENT IDS 2 2-0 3-0")), "{sent:?}");
        assert!(sent.contains(&cmd("XACK s g 1-0")), "{sent:?}");
        assert!(!sent.iter().any(|c| c[0] == "XCLAIM"), "no give-back: {sent:?}");
        // Stopped once both are answered.
        let (ack, nack) = (rig.fixture("xack_1"), rig.fixture("xnack_silent"));
        let mut replies = Vec::new();
        for c in &sent {
            replies.extend(if c[0] == "XACK" { &ack } else { &nack });
        }
        rig.consumer.handle_input(&replies, rig.now).unwrap();
        assert_eq!(rig.consumer.poll_event(), Some(Event::Stopped), "{protocol:?}");
    }
}

#[test]
fn acks_delete_their_entries_where_asked() {
    for protocol in PROTOCOLS {
        let mut rig = parked(config(protocol).delete_acked(DeleteAcked::KeepRef));
        rig.reply("read_new").unwrap();
        rig.handle_all(Verdict::Ack);
        let sent = rig.sent();
        assert_eq!(sent[0], cmd("XACKDEL s g KEEPREF IDS 3 1-0 2-0 3-0"), "{protocol:?}");
        // 1 for 1-0, -1 for the other: one acked.
        rig.reply("xackdel").unwrap();
        assert_eq!(rig.consumer.stats().acked, 1);
    }
}

#[test]
fn deleting_acked_entries_on_an_older_server_is_refused_at_connect() {
    for protocol in PROTOCOLS {
        let mut rig = Rig::new(config(protocol).delete_acked(DeleteAcked::Acked), "redis-7.0");
        rig.connect();
        rig.sent();
        let hello = if protocol == Protocol::Resp3 { "hello" } else { "hello_info" };
        let err = rig.consumer.handle_input(&rig.fixture(hello), rig.now).unwrap_err();
        let Error::Unsupported { server, .. } = &err else { panic!("{err:?}") };
        assert_eq!(server, "redis 7.0.15");
        assert!(err.is_fatal());
        assert!(err.to_string().contains("XACKDEL (Redis 8.2 or later)"), "{err}");
    }
}

#[test]
fn classic_verbs_keep_the_classic_loop_on_redis_8() {
    let mut rig = Rig::new(config(Protocol::Resp2).classic_verbs(), "redis-8.10");
    // `HELLO` asks the node's role all the same.
    assert_eq!(rig.start(), cmds(&["XREADGROUP GROUP g A COUNT 10 STREAMS s 0", "XPENDING s g - + 10 A"]));
    rig.drain_reply("read_pending_empty").unwrap();
    assert_eq!(rig.sent()[0][0], "XAUTOCLAIM");
}

#[test]
fn the_sweep_for_deleted_entries_comes_every_min_idle() {
    let mut rig = parked(config(Protocol::Resp2));
    rig.reply("read_new_nil").unwrap();
    assert_eq!(rig.sent(), [park()], "no XAUTOCLAIM a beat later");
    rig.advance(MIN_IDLE);
    rig.reply("read_new_nil").unwrap();
    assert_eq!(rig.sent()[0][0], "XAUTOCLAIM");
}

#[test]
fn a_server_that_does_not_answer_hello_speaks_the_classic_verbs() {
    let mut rig = Rig::new(config(Protocol::Resp2), "redis-8.10");
    rig.connect();
    assert_eq!(rig.sent()[0], ["HELLO"]);
    rig.consumer.handle_input(b"-ERR unknown command 'HELLO'\r\n", rig.now).unwrap();
    rig.fresh = false;
    let Some(Event::Notice(Notice::Connected { dialect, .. })) = rig.consumer.poll_event() else { panic!() };
    assert!(dialect.is_classic());
}

#[test]
fn an_entry_that_keeps_failing_is_released_after_a_growing_wait() {
    // 1-0 comes claimed at its 2nd delivery: released 10 ms after its Retry, not at once
    // (this consumer's own next read would take it back in a hot loop).
    let mut rig = parked(config(Protocol::Resp2).on_retry(OnRetry::Release));
    rig.reply("read_claim").unwrap();
    assert_eq!(rig.notice(), Notice::Reclaimed { count: 2, released: 0 });
    let first = rig.entry();
    assert_eq!((first.id(), first.deliveries), (&b"1-0"[..], 2));
    let settled_at = rig.now;
    rig.settle(Verdict::Retry);
    assert!(!rig.sent().iter().any(|c| c[0] == "XNACK"), "not at once");
    assert!(rig.consumer.poll_timeout().unwrap() <= settled_at + Duration::from_millis(10));
    rig.advance(Duration::from_millis(10));
    rig.consumer.handle_timeout(rig.now).unwrap();
    assert!(rig.sent().contains(&cmd("XNACK s g FAIL IDS 1 1-0")));
}

#[test]
fn past_the_lease_the_backoff_leaves_the_entry_pending() {
    // Delivered 6 times: 10 ms × 4⁴ = 2.56 s, past the 1.5 s lease: it stays pending.
    let mut rig = parked(config(Protocol::Resp2).on_retry(OnRetry::Release).dead_letter_after(100, "dl"));
    let claimed =
        b"*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*4\r\n$3\r\n9-0\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n:5000\r\n:5\r\n";
    rig.consumer.handle_input(claimed, rig.now).unwrap();
    assert_eq!(rig.notice(), Notice::Reclaimed { count: 1, released: 0 });
    assert_eq!(rig.entry().deliveries, 6);
    rig.settle(Verdict::Retry);
    rig.advance(Duration::from_secs(3));
    rig.consumer.handle_timeout(rig.now).unwrap();
    assert!(!rig.sent().iter().any(|c| c[0] == "XNACK"));
}

#[test]
fn entries_a_peer_released_are_told_as_taken_over_not_as_idle() {
    // XNACK leaves no delivery time: the CLAIM read gives the server's clock as idle.
    let mut rig = parked(config(Protocol::Resp2));
    let released = b"*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*4\r\n$3\r\n7-0\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n:1796332104057\r\n:2\r\n";
    rig.consumer.handle_input(released, rig.now).unwrap();
    let told = rig.notice();
    assert_eq!(told, Notice::Reclaimed { count: 0, released: 1 });
    assert_eq!(told.to_string(), "took over 1 entry their owners released");
}

#[test]
fn an_entry_buffered_behind_its_key_and_claimed_back_by_a_read_keeps_its_place() {
    // 2-0 and 3-0 wait behind 1-0, their key in hand, until 2-0's lease runs out and the
    // next read's CLAIM delivers it to us again: handed out once, before 3-0.
    let one_key =
        config(Protocol::Resp2).concurrency(2).order_by_key(|_| Some(bytes::Bytes::from_static(b"k")));
    let mut rig = parked(one_key);
    rig.reply("read_new").unwrap();
    assert_eq!(ids(&[rig.entry()]), ["1-0"]);
    assert_eq!(rig.consumer.poll_event(), None, "2-0 while 1-0 is in hand");
    assert!(rig.sent().iter().any(|c| c[0] == "XREADGROUP"));
    let claimed =
        b"*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*4\r\n$3\r\n2-0\r\n*2\r\n$1\r\nf\r\n$2\r\nv2\r\n:3000\r\n:1\r\n";
    rig.consumer.handle_input(claimed, rig.now).unwrap();
    rig.settle_id(b"1-0", Verdict::Ack);
    let seen = rig.handle_all(Verdict::Ack);
    let got: Vec<_> =
        seen.iter().map(|e| (String::from_utf8_lossy(e.id()).into_owned(), e.deliveries)).collect();
    assert_eq!(got, [("2-0".to_string(), 2), ("3-0".to_string(), 1)]);
}

#[test]
fn entries_buffered_behind_a_key_whose_lease_was_lost_are_still_renewed() {
    // 1-0 in hand loses its lease; 2-0 and 3-0 wait behind it. Reads parking back to back
    // hold every lease timeout back: their renewals go out when one answers.
    let one_key =
        config(Protocol::Resp2).concurrency(2).order_by_key(|_| Some(bytes::Bytes::from_static(b"k")));
    let mut rig = parked(one_key);
    rig.reply("read_new").unwrap();
    assert_eq!(ids(&[rig.entry()]), ["1-0"]);
    assert!(rig.sent().iter().any(|c| c[0] == "XREADGROUP"));
    let kept = b"*2\r\n$3\r\n2-0\r\n$3\r\n3-0\r\n";
    rig.advance(Duration::from_millis(1600));
    rig.consumer.handle_input(b"*-1\r\n", rig.now).unwrap();
    assert_eq!(rig.sent(), [cmd("XCLAIM s g A 1550 2-0 3-0 1-0 JUSTID")]);
    rig.consumer.handle_input(kept, rig.now).unwrap();
    assert!(matches!(rig.notice(), Notice::LeaseLost { in_hand: true, .. }));
    assert!(rig.sent().iter().any(|c| c[0] == "XREADGROUP"));
    rig.advance(Duration::from_millis(1600));
    rig.consumer.handle_input(b"*-1\r\n", rig.now).unwrap();
    assert_eq!(rig.sent(), [cmd("XCLAIM s g A 1550 2-0 3-0 JUSTID")]);
    rig.consumer.handle_input(kept, rig.now).unwrap();
    rig.settle_id(b"1-0", Verdict::Ack);
    assert_eq!(ids(&rig.handle_all(Verdict::Ack)), ["2-0", "3-0"]);
}

/// A stop that cuts a parked read short releases what the read may have brought, on the
/// stop's new connection: `XNACK … SILENT`, the read's count taken back (leave.rs has the
/// same story on the servers without `XNACK`).
#[test]
fn a_stop_found_parked_releases_what_the_cut_read_brought() {
    let mut rig = parked(config(Protocol::Resp3));
    rig.consumer.stop();
    assert!(rig.consumer.connect_due(rig.now), "the parked connection is dropped");
    rig.connect();
    assert_eq!(rig.sent(), [cmd("HELLO 3")]);
    rig.consumer.handle_input(&rig.fixture("hello"), rig.now).unwrap();
    rig.fresh = false; // no `Connected` for this connection: it is the stop's
    assert_eq!(rig.sent(), [cmd("XPENDING s g - + 1000 A")]);
    // `[[1-0, A, 0, 2], [2-0, A, 0, 2]]`: delivered since the read was written.
    rig.reply("pending_counts_page").unwrap();
    assert_eq!(rig.sent(), [cmd("XNACK s g SILENT IDS 2 1-0 2-0")], "released, the read's count taken back");
    rig.reply("xnack_silent").unwrap();
    assert_eq!(rig.consumer.poll_event(), Some(Event::Stopped));
    assert_eq!(rig.consumer.stats().released, 1, "as the server counted");
}
