//! Many entries in hand (`Config::concurrency`), settled by id in any order; order by key;
//! fair first reads. Driven through the public API with replies captured from real servers.

mod support;

use std::time::Duration;

use bytes::Bytes;
use pelican::{Config, Event, OnRetry, Protocol, Verdict};
use support::*;

const BEAT: Duration = Duration::from_secs(2);
const MIN_IDLE: Duration = Duration::from_secs(3);
const LEASE: Duration = Duration::from_millis(1500);

fn config(protocol: Protocol, concurrency: u32) -> Config {
    Config::new("s", "g", "A")
        .count(10)
        .start_count(10)
        .concurrency(concurrency)
        .beat(BEAT)
        .min_idle(MIN_IDLE)
        .protocol(protocol)
        .no_client_name()
}

fn park(count: u32, block_ms: u64) -> Vec<String> {
    cmd(&format!("XREADGROUP GROUP g A COUNT {count} BLOCK {block_ms} STREAMS s >"))
}

/// Connected, drained, reclaimed, parked; then `read_new` (1-0, 2-0, 3-0) arrives.
fn with_batch(config: Config, flavor: &'static str) -> Rig {
    let count = config.start_count_in_force();
    let mut rig = Rig::new(config, flavor);
    rig.start();
    rig.drain_reply("read_pending_empty").unwrap();
    rig.sent();
    rig.reply("autoclaim_done").unwrap();
    assert_eq!(rig.sent(), [park(count, 2000)]);
    rig.reply("read_new").unwrap();
    rig
}

fn held(rig: &Rig) -> Vec<String> {
    rig.consumer.in_hand().map(|id| String::from_utf8_lossy(id).into_owned()).collect()
}

#[test]
fn up_to_concurrency_entries_are_in_hand_and_settle_in_any_order() {
    each(|flavor, protocol| {
        // A retry that stays pending: one that waits parks its entry first (delayed_retries.rs).
        let mut rig = with_batch(config(protocol, 2).on_retry(OnRetry::StayPending), flavor);
        let (first, second) = (rig.entry(), rig.entry());
        assert_eq!(ids(&[first.clone(), second.clone()]), ["1-0", "2-0"]);
        assert_eq!(rig.consumer.poll_event(), None, "a third while two are in hand");
        assert_eq!(rig.consumer.buffered(), 1);
        // The second settles first: the third is handed out in its slot.
        rig.advance(Duration::from_millis(1));
        rig.settle_id(second.id(), Verdict::Ack);
        assert_eq!(ids(&[rig.entry()]), ["3-0"]);
        assert_eq!(held(&rig), ["1-0", "3-0"]);
        assert!(!rig.consumer.settle(second.id(), Verdict::Ack, rig.now), "settled twice");
        rig.settle_id(b"3-0", Verdict::Retry);
        // A slot free and nothing buffered: the earned ack goes out with the next read, which
        // blocks briefly (1-0 is in hand).
        let sent = rig.sent();
        assert_eq!(sent[0], cmd("XACK s g 2-0"), "{flavor} {protocol:?}");
        assert_eq!(sent[1][..6], park(10, 0)[..6]);
        assert_ne!(sent[1][7], "2000");
        rig.settle_id(first.id(), Verdict::Ack);
        assert_eq!(rig.consumer.in_hand().len(), 0);
        assert_eq!(rig.consumer.stats().retried, 1);
        // Its ack waits for the parked read; then goes out before the next park (a beat now).
        rig.reply("xack_1").unwrap();
        assert_eq!(rig.sent(), Vec::<Vec<String>>::new());
        rig.reply("read_new_nil").unwrap();
        assert_eq!(rig.sent(), [cmd("XACK s g 1-0"), park(10, 2000)]);
    });
}

#[test]
fn with_entries_in_hand_a_parked_read_blocks_only_until_the_next_settle_is_expected() {
    each(|flavor, protocol| {
        let mut rig = with_batch(config(protocol, 4), flavor);
        let entries = [rig.entry(), rig.entry(), rig.entry()];
        assert_eq!(rig.consumer.poll_event(), None);
        // Slots free and nothing buffered: read on, but not for a beat with entries in hand.
        let sent = rig.sent();
        assert_eq!(sent.len(), 1, "{sent:?}");
        assert_eq!(sent[0][6], "BLOCK");
        let block: u64 = sent[0][7].parse().unwrap();
        assert!(block < 2000, "blocked {block} ms with entries in hand");
        // An ack earned meanwhile waits for the parked read, and its deadline is not armed.
        rig.advance(Duration::from_millis(100));
        rig.settle_id(entries[0].id(), Verdict::Ack);
        assert_eq!(rig.sent(), Vec::<Vec<String>>::new(), "nothing goes behind a parked read");
        let deadline = rig.consumer.poll_timeout().unwrap();
        assert!(deadline >= rig.now + Duration::from_secs(1), "only the read's own deadline");
        // The read answers (nothing new): the ack goes out, and the next park is as short as
        // the handlers' pace (100 ms each) says.
        rig.reply("read_new_nil").unwrap();
        let sent = rig.sent();
        assert_eq!(sent[0], cmd("XACK s g 1-0"));
        let block: u64 = sent[1][7].parse().unwrap();
        assert!((5..=100).contains(&block), "blocked {block} ms");
    });
}

#[test]
fn a_long_handler_not_yet_timed_is_not_polled_every_few_ms() {
    each(|flavor, protocol| {
        let mut rig = with_batch(config(protocol, 4), flavor);
        let _in_hand = [rig.entry(), rig.entry(), rig.entry()];
        let mut blocks = Vec::new();
        for _ in 0..12 {
            let sent = rig.sent();
            let park = sent.iter().find(|c| c[0] == "XREADGROUP").expect("a parked read");
            let block: u64 = park[7].parse().unwrap();
            blocks.push(block);
            rig.advance(Duration::from_millis(block));
            rig.reply("read_new_nil").unwrap();
        }
        // Half the time the handlers have run so far, from ack_delay up to 50 ms.
        assert_eq!(blocks[0], 5, "{blocks:?}");
        assert!(blocks.windows(2).all(|w| w[1] >= w[0]), "{blocks:?}");
        assert_eq!(*blocks.last().unwrap(), 50, "{blocks:?}");
    });
}

#[test]
fn entries_in_hand_are_renewed_between_parked_reads_while_the_stream_is_idle() {
    each(|flavor, protocol| {
        let mut rig = with_batch(config(protocol, 4), flavor);
        let _in_hand = [rig.entry(), rig.entry(), rig.entry()];
        let mut renewed = false;
        let mut waited = Duration::ZERO;
        // Parked reads come and go every 50 ms at most; the lease (1.5 s) runs out meanwhile.
        while waited < LEASE + Duration::from_millis(200) {
            let sent = rig.sent();
            if let Some(renewal) = sent.iter().find(|c| c[0] == "XCLAIM") {
                assert_eq!(renewal[5..8], ["1-0", "2-0", "3-0"], "{sent:?}");
                assert!(waited >= LEASE - Duration::from_millis(50), "renewed early: {waited:?}");
                renewed = true;
                break;
            }
            let park = sent.iter().find(|c| c[0] == "XREADGROUP").expect("a parked read");
            let block = Duration::from_millis(park[7].parse().unwrap());
            rig.advance(block);
            waited += block;
            rig.reply("read_new_nil").unwrap();
        }
        assert!(renewed, "no renewal within the lease and a parked read: {waited:?}");
    });
}

#[test]
fn entries_in_hand_keep_their_leases() {
    each(|flavor, protocol| {
        let mut rig = with_batch(config(protocol, 3), flavor);
        let _all = [rig.entry(), rig.entry(), rig.entry()];
        assert_eq!(rig.sent(), Vec::<Vec<String>>::new(), "no slot free: no read");
        // Past the lease, with no read parked: one owner-checked renewal of all three.
        rig.advance(LEASE);
        rig.consumer.handle_timeout(rig.now).unwrap();
        let sent = rig.sent();
        let renewal = sent.iter().find(|c| c[0] == "XCLAIM").expect("a renewal");
        assert_eq!(renewal[5..8], ["1-0", "2-0", "3-0"], "{sent:?}");
        assert_eq!(renewal[8], "JUSTID");
    });
}

#[test]
fn a_stop_waits_for_every_entry_in_hand_and_their_acks() {
    each(|flavor, protocol| {
        let mut rig = with_batch(config(protocol, 3), flavor);
        let (a, b) = (rig.entry(), rig.entry());
        rig.consumer.stop();
        assert_eq!(rig.consumer.poll_event(), None, "nothing handed out after a stop");
        rig.settle_id(b.id(), Verdict::Ack);
        assert!(!rig.consumer.is_stopped(), "stopped with an entry in hand");
        rig.settle_id(a.id(), Verdict::Ack);
        let sent = rig.sent();
        // The acks (each at its settle: a stop waits on them), and the third entry's delivery
        // count given back (read, never handed out).
        assert!(sent.contains(&cmd("XACK s g 2-0")) && sent.contains(&cmd("XACK s g 1-0")), "{sent:?}");
        assert!(sent.iter().any(|c| c[0] == "XCLAIM" && c.contains(&"3-0".to_string())), "{sent:?}");
        for c in &sent {
            assert_ne!(c[0], "XREADGROUP", "a read after the stop");
        }
        assert!(!rig.consumer.is_stopped(), "stopped before the acks were confirmed");
    });
}

#[test]
fn entries_of_one_key_are_handed_out_one_after_another_in_order() {
    each(|flavor, protocol| {
        // Every entry has the same key: one at a time, in id order, whatever the slots.
        let one_key = config(protocol, 3).order_by_key(|_| Some(Bytes::from_static(b"k")));
        let mut rig = with_batch(one_key, flavor);
        for want in ["1-0", "2-0", "3-0"] {
            let e = rig.entry();
            assert_eq!(e.id(), want.as_bytes());
            assert_eq!(rig.consumer.poll_event(), None, "two of one key in hand");
            rig.advance(Duration::from_millis(1));
            rig.settle_id(want.as_bytes(), Verdict::Ack);
        }
        // Different keys (the field `f` differs) run side by side.
        let by_field = config(protocol, 3).order_by("f");
        let mut rig = with_batch(by_field, flavor);
        assert_eq!(ids(&[rig.entry(), rig.entry(), rig.entry()]), ["1-0", "2-0", "3-0"]);
    });
}

#[test]
fn a_blocked_key_does_not_hold_back_other_keys() {
    each(|flavor, protocol| {
        // 1-0 and 3-0 share a key; 2-0 has its own: 3-0 waits for 1-0, 2-0 does not.
        let odd_even = config(protocol, 3).order_by_key(|e| match e.id() {
            b"2-0" => Some(Bytes::from_static(b"even")),
            _ => Some(Bytes::from_static(b"odd")),
        });
        let mut rig = with_batch(odd_even, flavor);
        assert_eq!(ids(&[rig.entry(), rig.entry()]), ["1-0", "2-0"]);
        assert_eq!(rig.consumer.poll_event(), None, "3-0 while 1-0 is in hand");
        rig.settle_id(b"2-0", Verdict::Ack);
        assert_eq!(rig.consumer.poll_event(), None, "3-0 while 1-0 is in hand");
        rig.settle_id(b"1-0", Verdict::Retry);
        assert_eq!(ids(&[rig.entry()]), ["3-0"]);
    });
}

#[test]
fn first_reads_ask_for_what_the_handlers_can_take_until_one_is_timed() {
    each(|flavor, protocol| {
        // No start count given: reads ask for `concurrency` entries until a handler is timed.
        let fair = Config::new("s", "g", "A").count(10).concurrency(2).protocol(protocol).no_client_name();
        let mut rig = Rig::new(fair, flavor);
        let sent = rig.start();
        assert_eq!(sent[0], cmd("XREADGROUP GROUP g A COUNT 2 STREAMS s 0"), "{sent:?}");
        rig.drain_reply("read_pending_empty").unwrap();
        assert_eq!(rig.sent(), [cmd("XAUTOCLAIM s g A 30000 0-0 COUNT 2")]);
        rig.reply("autoclaim_done").unwrap();
        assert_eq!(rig.sent(), [park(2, 2000)]);
        rig.reply("read_new").unwrap();
        let (a, b) = (rig.entry(), rig.entry());
        // Handlers timed (1 ms each, well within the lease): the next read asks the count.
        rig.advance(Duration::from_millis(1));
        rig.settle_id(a.id(), Verdict::Ack);
        rig.settle_id(b.id(), Verdict::Ack);
        assert_eq!(ids(&[rig.entry()]), ["3-0"]);
        rig.settle_id(b"3-0", Verdict::Ack);
        let sent = rig.sent();
        assert_eq!(sent.last().unwrap()[4..6], ["COUNT", "10"], "{sent:?}");
    });
}

#[test]
fn an_abandon_forgets_the_entries_in_hand() {
    each(|flavor, protocol| {
        let mut rig = with_batch(config(protocol, 3), flavor);
        let (a, _b) = (rig.entry(), rig.entry());
        rig.settle_id(a.id(), Verdict::Ack);
        rig.consumer.abandon();
        assert_eq!(rig.consumer.in_hand().len(), 0);
        assert_eq!(rig.consumer.poll_event(), Some(Event::Stopped));
        assert_eq!(rig.consumer.stats().abandoned_acks, 1);
        assert!(!rig.consumer.settle(b"2-0", Verdict::Ack, rig.now));
    });
}
