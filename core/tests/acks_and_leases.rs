//! Timely acks, leases on entries read but not yet settled, and read sizes that follow the
//! handlers: driven through the public API with replies captured from the real servers.

mod support;

use std::time::Duration;

use pelican::{Config, Event, Notice, Protocol, ShrinkCause, Verdict};
use support::*;

const BEAT: Duration = Duration::from_secs(2);
const MIN_IDLE: Duration = Duration::from_secs(3);
const LEASE: Duration = Duration::from_millis(1500);

fn config(protocol: Protocol) -> Config {
    Config::new("s", "g", "A")
        .count(10)
        .start_count(10)
        .beat(BEAT)
        .min_idle(MIN_IDLE)
        .protocol(protocol)
        .no_client_name()
        // Leaving the group at a stop has its own stories (leave.rs).
        .leave_on_stop(false)
}

fn park() -> Vec<String> {
    cmd("XREADGROUP GROUP g A COUNT 10 BLOCK 2000 STREAMS s >")
}

/// Connected, drained, reclaimed, parked; then `read_new` (1-0, 2-0, 3-0) arrives.
fn with_batch(config: Config, flavor: &'static str) -> Rig {
    let mut rig = Rig::new(config, flavor);
    rig.start();
    rig.drain_reply("read_pending_empty").unwrap();
    rig.sent();
    rig.reply("autoclaim_done").unwrap();
    assert_eq!(rig.sent(), [park()]);
    rig.reply("read_new").unwrap();
    rig
}

#[test]
fn fast_handlers_share_one_xack_per_batch() {
    each(|flavor, protocol| {
        let mut rig = with_batch(config(protocol), flavor);
        for _ in 0..3 {
            rig.entry();
            rig.advance(Duration::from_micros(100));
            rig.settle(Verdict::Ack);
        }
        assert_eq!(rig.sent(), [cmd("XACK s g 1-0 2-0 3-0"), park()]);
    });
}

#[test]
fn an_ack_waits_at_most_ack_delay_while_the_driver_keeps_driving() {
    each(|flavor, protocol| {
        let mut rig = with_batch(config(protocol), flavor);
        rig.entry();
        rig.settle(Verdict::Ack);
        let second = rig.entry();
        assert_eq!(rig.sent(), Vec::<Vec<String>>::new(), "held for company");
        // The next deadline is the ack's, 5 ms after it was earned.
        assert_eq!(rig.consumer.poll_timeout(), Some(rig.now + Duration::from_millis(5)));
        rig.advance(Duration::from_millis(5));
        rig.consumer.handle_timeout(rig.now).unwrap();
        assert_eq!(rig.sent(), [cmd("XACK s g 1-0")], "{flavor} {protocol:?}");
        rig.reply("xack_1").unwrap();
        assert!(rig.consumer.in_hand().eq([second.id()]));
    });
}

#[test]
fn a_slow_handler_s_ack_goes_out_at_its_settle() {
    each(|flavor, protocol| {
        let mut rig = with_batch(config(protocol), flavor);
        rig.entry();
        rig.advance(Duration::from_millis(300));
        rig.settle(Verdict::Ack);
        // Written before the next entry is handed out (a blocking driver would otherwise
        // hold it through the next handler).
        assert_eq!(rig.sent(), [cmd("XACK s g 1-0")]);
        rig.entry();
    });
}

#[test]
fn a_zero_ack_delay_sends_every_ack_at_its_settle() {
    let mut rig = with_batch(config(Protocol::Resp2).ack_delay(Duration::ZERO), "redis-7.0");
    rig.entry();
    rig.settle(Verdict::Ack);
    assert_eq!(rig.sent(), [cmd("XACK s g 1-0")]);
}

#[test]
fn buffered_entries_are_renewed_before_they_are_handed_out() {
    each(|flavor, protocol| {
        let mut rig = with_batch(config(protocol), flavor);
        rig.entry();
        // The first handler outlasts the lease: the rest of the batch is renewed before the
        // next hand-out (the slow handler's ack goes out with the renewal).
        rig.advance(Duration::from_millis(1600));
        rig.settle(Verdict::Ack);
        assert_eq!(rig.sent(), [cmd("XACK s g 1-0"), cmd("XCLAIM s g A 1550 2-0 3-0 JUSTID")]);
        assert_eq!(rig.consumer.poll_event(), None, "not before the renewal is answered");
        rig.reply("xack_1").unwrap();
        rig.reply("lease_all").unwrap();
        let next = rig.entry();
        assert_eq!(next.id(), b"2-0");
        assert_eq!(rig.consumer.stats().leases_renewed, 2);
        // Renewed now: the next renewal is a lease from here.
        assert_eq!(rig.consumer.poll_timeout().map(|t| t - rig.now), Some(LEASE), "{flavor}");
    });
}

#[test]
fn an_entry_a_peer_took_is_dropped_from_the_buffer_and_reported() {
    each(|flavor, protocol| {
        let mut rig = with_batch(config(protocol), flavor);
        // A driver that kept driving renews the batch when its lease comes due.
        assert_eq!(rig.consumer.poll_timeout(), Some(rig.now + LEASE));
        rig.advance(LEASE);
        rig.consumer.handle_timeout(rig.now).unwrap();
        assert_eq!(rig.sent(), [cmd("XCLAIM s g A 1450 1-0 2-0 3-0 JUSTID")]);
        // A peer's XAUTOCLAIM took 1-0 meanwhile: the renewal skipped it.
        rig.reply("lease_partial").unwrap();
        let lost = Notice::LeaseLost { id: "1-0".into(), in_hand: false };
        assert_eq!(rig.consumer.poll_event(), Some(Event::Notice(lost)));
        let seen = rig.handle_all(Verdict::Ack);
        assert_eq!(ids(&seen), ["2-0", "3-0"], "{flavor} {protocol:?}");
        assert_eq!(rig.sent(), [cmd("XACK s g 2-0 3-0"), park()]);
        let stats = rig.consumer.stats();
        assert_eq!((stats.leases_lost, stats.leases_renewed, stats.new), (1, 2, 2));
    });
}

#[test]
fn the_entry_in_hand_keeps_its_lease_while_its_handler_runs() {
    each(|flavor, protocol| {
        let mut rig = with_batch(config(protocol), flavor);
        let first = rig.entry();
        rig.advance(LEASE);
        rig.consumer.handle_timeout(rig.now).unwrap();
        assert_eq!(rig.sent(), [cmd("XCLAIM s g A 1450 2-0 3-0 1-0 JUSTID")]);
        // This capture answers [2-0, 3-0]: here that says 1-0, in hand, went to a peer.
        rig.reply("lease_partial").unwrap();
        let lost = Notice::LeaseLost { id: first.id_bytes(), in_hand: true };
        assert_eq!(rig.consumer.poll_event(), Some(Event::Notice(lost)));
        assert_eq!(rig.consumer.poll_event(), None, "still in hand");
        // Its handler finishes all the same: the ack is sent (a peer's copy may count it).
        rig.advance(Duration::from_millis(10));
        rig.settle(Verdict::Ack);
        assert_eq!(rig.sent(), [cmd("XACK s g 1-0")]);
        rig.reply("xack_0").unwrap();
        assert_eq!(rig.consumer.stats().lost_to_peer, 1);
        assert_eq!(rig.entry().id(), b"2-0");
    });
}

#[test]
fn a_stale_front_entry_is_not_handed_out_unrenewed() {
    let mut rig = with_batch(config(Protocol::Resp2), "valkey-8.1");
    rig.advance(LEASE + Duration::from_millis(1));
    rig.consumer.handle_input(b"", rig.now).unwrap();
    assert_eq!(rig.consumer.poll_event(), None);
    assert_eq!(rig.sent(), [cmd("XCLAIM s g A 1451 1-0 2-0 3-0 JUSTID")]);
}

/// Answers what the consumer wrote with captured replies (every read of new entries gets
/// `read_new`: three entries); returns the `COUNT`s of the reads it answered.
fn serve(rig: &mut Rig) -> Vec<String> {
    let mut counts = Vec::new();
    for cmd in rig.sent() {
        match cmd[0].as_str() {
            "XACK" => rig.raw(format!(":{}\r\n", cmd.len() - 3).as_bytes()).unwrap(),
            "XAUTOCLAIM" => rig.reply("autoclaim_done").unwrap(),
            "XREADGROUP" => {
                counts.push(cmd[5].clone());
                rig.reply("read_new").unwrap();
            }
            other => panic!("unexpected {other}"),
        }
    }
    counts
}

#[test]
fn slow_handlers_shrink_the_next_read_and_fast_ones_grow_it_back() {
    each(|flavor, protocol| {
        let mut rig = with_batch(config(protocol), flavor);
        for _ in 0..3 {
            rig.entry();
            rig.advance(Duration::from_millis(20));
            rig.settle(Verdict::Ack);
            rig.sent();
            rig.reply("xack_1").unwrap();
        }
        // A read brings the handler about 10 ms of work: one entry of 20 ms. Shrunk at once,
        // told once eight handlers say so (reads paced to quicker handlers are not told).
        assert_eq!(rig.consumer.poll_event(), None, "{flavor}: three handlers are not yet news");
        // The parked read, sent with the last ack, asked for 1 (its reply is new entries).
        rig.reply("read_new").unwrap();
        let mut told = Vec::new();
        let mut handled = 3;
        while handled < 8 {
            match rig.consumer.poll_event() {
                Some(Event::Entry(e)) => {
                    rig.advance(Duration::from_millis(20));
                    rig.consumer.settle(e.id(), Verdict::Ack, rig.now);
                    handled += 1;
                }
                Some(Event::Notice(n)) => told.push(n),
                _ => {
                    serve(&mut rig);
                }
            }
        }
        // Notices come before entries: what the eighth settle told is next.
        while let Some(Event::Notice(n)) = rig.consumer.poll_event() {
            told.push(n);
        }
        rig.settle(Verdict::Ack); // an entry taken meanwhile, if any: quick from here on
        let shrunk = Notice::ReadShrunk {
            count: 1,
            cause: ShrinkCause::SlowHandler,
            handler: Duration::from_millis(20),
        };
        assert_eq!(told, [shrunk], "{flavor}");
        assert_eq!(rig.consumer.stats().reads_shrunk, 1);
        // Fast handlers from here on: the reads grow back.
        let mut counts = vec!["1".to_string()];
        for _ in 0..60 {
            while let Some(Event::Entry(_)) = rig.consumer.poll_event() {
                rig.settle(Verdict::Ack);
            }
            counts.extend(serve(&mut rig));
            if counts.last().is_some_and(|c| c == "10") {
                break;
            }
        }
        assert_eq!(counts.first().map(String::as_str), Some("1"), "{counts:?}");
        assert_eq!(counts.last().map(String::as_str), Some("10"), "back to the full count: {counts:?}");
        let grew: Vec<u32> = counts.iter().map(|c| c.parse().unwrap()).collect();
        assert!(grew.windows(2).all(|w| w[0] <= w[1]), "grows steadily: {grew:?}");
    });
}

#[test]
fn a_full_read_brings_the_next_one_ahead_and_a_short_one_parks_after_the_batch() {
    each(|flavor, protocol| {
        let mut rig = Rig::new(config(protocol).count(3), flavor);
        rig.start();
        rig.drain_reply("read_pending_empty").unwrap();
        rig.sent();
        rig.reply("autoclaim_done").unwrap();
        assert_eq!(rig.sent(), [cmd("XREADGROUP GROUP g A COUNT 3 BLOCK 2000 STREAMS s >")]);
        // Three entries for three asked: more may be waiting. The next read goes out at once,
        // without BLOCK, while this batch is handed out.
        rig.reply("read_new").unwrap();
        let ahead = cmd("XREADGROUP GROUP g A COUNT 3 STREAMS s >");
        assert_eq!(rig.sent(), std::slice::from_ref(&ahead), "{flavor} {protocol:?}");
        assert!(!rig.consumer.is_parked());
        // Handlers are quick: more reads ahead (with the ack earned), so that the server has
        // the next at hand as it answers one — reads this small, four in flight.
        rig.entry();
        rig.settle(Verdict::Ack);
        let more = [cmd("XACK s g 1-0"), ahead.clone(), ahead.clone(), ahead];
        assert_eq!(rig.sent(), more, "{flavor} {protocol:?}");
        // Nothing more was waiting: the rest of the batch, then the acks and a parked read.
        rig.reply("read_new_nil").unwrap();
        rig.reply("xack_1").unwrap();
        for _ in 0..3 {
            rig.reply("read_new_nil").unwrap();
        }
        rig.entry();
        rig.settle(Verdict::Ack);
        rig.entry();
        rig.settle(Verdict::Ack);
        assert_eq!(rig.sent(), [cmd("XACK s g 2-0 3-0"), park_count(3)]);
        assert!(!rig.consumer.is_parked(), "the XACK is answered first");
        rig.reply("xack_many").unwrap();
        assert!(rig.consumer.is_parked());
    });
}

#[test]
fn a_read_ahead_carries_the_acks_earned_so_far_and_is_waited_for_by_a_stop() {
    let mut rig = Rig::new(config(Protocol::Resp2).count(3), "redis-7.0");
    rig.start();
    rig.drain_reply("read_pending_empty").unwrap();
    rig.sent();
    rig.reply("autoclaim_done").unwrap();
    rig.sent();
    rig.reply("read_new").unwrap();
    let ahead = cmd("XREADGROUP GROUP g A COUNT 3 STREAMS s >");
    assert_eq!(rig.sent(), std::slice::from_ref(&ahead));
    // The first handler was quick: more reads ahead (four in flight), with its ack.
    rig.entry();
    rig.settle(Verdict::Ack);
    assert_eq!(rig.sent(), [cmd("XACK s g 1-0"), ahead.clone(), ahead.clone(), ahead.clone()]);
    // The first read ahead brings three more (the capture again: same ids, it does not matter).
    rig.reply("read_new").unwrap();
    rig.reply("xack_1").unwrap();
    assert_eq!(rig.sent(), Vec::<Vec<String>>::new(), "five to hand out: more than a read's worth");
    rig.entry();
    rig.settle(Verdict::Ack);
    assert_eq!(rig.sent(), Vec::<Vec<String>>::new());
    // Down to one read's worth, three reads still ahead: the next, with the acks earned so far.
    rig.entry();
    rig.settle(Verdict::Ack);
    assert_eq!(rig.sent(), [cmd("XACK s g 2-0 3-0"), ahead]);
    // A stop now waits for every read, then gives their entries' counts back with the rest.
    rig.consumer.stop();
    assert_eq!(rig.consumer.poll_event(), None);
    // Answered in the order sent: three reads ahead, the XACK, the last read.
    for _ in 0..3 {
        rig.reply("read_new").unwrap();
    }
    rig.reply("xack_many").unwrap();
    assert_eq!(rig.consumer.poll_event(), None, "a read is still owed");
    rig.reply("read_new").unwrap();
    let sent = rig.sent();
    assert!(sent.iter().all(|c| c[0] == "XCLAIM" && c.contains(&"RETRYCOUNT".to_string())), "{sent:?}");
    for _ in &sent {
        rig.reply("lease_all").unwrap();
    }
    assert_eq!(rig.consumer.poll_event(), Some(Event::Stopped));
}

fn park_count(n: u32) -> Vec<String> {
    cmd(&format!("XREADGROUP GROUP g A COUNT {n} BLOCK 2000 STREAMS s >"))
}

/// A stop asked long after the last call that brought the time (a handler running for
/// seconds): the give-backs it sends get their full wait from the next call, not from that
/// stale time (they were overdue at once, and the connection was dropped for it).
#[test]
fn what_a_stop_sends_is_not_overdue_after_a_long_handler() {
    each(|flavor, protocol| {
        let mut rig = with_batch(config(protocol), flavor);
        let first = rig.entry();
        rig.advance(Duration::from_secs(5)); // the handler runs, the driver waits on it
        rig.consumer.stop();
        let sent = rig.sent();
        assert!(sent.iter().any(|c| c[0] == "XCLAIM"), "the buffered entries given back: {sent:?}");
        assert_eq!(rig.consumer.handle_timeout(rig.now), Ok(()), "{flavor} {protocol:?}");
        rig.consumer.settle(first.id(), Verdict::Ack, rig.now);
        assert_eq!(rig.consumer.handle_timeout(rig.now + Duration::from_millis(1500)), Ok(()));
    });
}

/// A process that stands still after the server answered an ack and the parked read behind
/// it reads both replies at once, long after: the read's entries were delivered no later than
/// its block after the ack's reply was written, not when the late bytes were read. They are
/// renewed before they are handed out, so that a peer that reclaimed them meanwhile is seen.
#[test]
fn a_parked_read_answered_behind_an_ack_while_the_process_stood_still_is_renewed() {
    each(|flavor, protocol| {
        let mut rig = with_batch(config(protocol), flavor);
        for _ in 0..3 {
            rig.entry();
            rig.settle(Verdict::Ack);
        }
        assert_eq!(rig.sent(), [cmd("XACK s g 1-0 2-0 3-0"), park()]);
        // Both answered at once by the server; read 10 s later (min_idle is 3 s).
        rig.advance(Duration::from_secs(10));
        let mut late = rig.fixture("xack_many");
        late.extend(rig.fixture("read_new"));
        rig.raw(&late).unwrap();
        let sent = rig.sent();
        assert_eq!(sent.first().map(|c| &c[..2]), Some(&["XCLAIM".to_string(), "s".into()][..]), "{sent:?}");
        assert_eq!(
            rig.consumer.poll_event(),
            None,
            "{flavor} {protocol:?}: not before the renewal is answered"
        );
    });
}
