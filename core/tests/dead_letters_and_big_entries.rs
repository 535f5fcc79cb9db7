//! Delivery counts and the poison cap (dead letters), and reads of big entries: driven
//! through the public API with replies captured from the real servers.

mod support;

use std::time::Duration;

use pelican::{
    Command, Config, DeadLetterReason, Error, Event, Limits, Notice, Protocol, ShrinkCause, Verdict,
};
use support::*;

fn config(protocol: Protocol) -> Config {
    Config::new("s", "g", "A")
        .count(10)
        .start_count(10)
        .beat(Duration::from_secs(2))
        .protocol(protocol)
        .no_client_name()
        // Leaving the group at a stop has its own stories (leave.rs).
        .leave_on_stop(false)
}

/// The `EVAL` that moves `id` to `dl`, as the consumer sends it (the script elided).
fn dead_letter(id: &str, deliveries: u64, reason: &str) -> Vec<String> {
    let mut c = cmd("EVAL <script> 2 s dl g A");
    c.push(id.into());
    c.extend(
        format!(
            "pelican-stream s pelican-group g pelican-consumer A pelican-id {id} pelican-deliveries {deliveries} pelican-reason {reason}"
        )
        .split(' ')
        .map(str::to_string),
    );
    c
}

/// The commands written, with the dead-letter script's text elided.
fn sent(rig: &mut Rig) -> Vec<Vec<String>> {
    let mut all = rig.sent();
    for c in &mut all {
        if c[0] == "EVAL" {
            assert_eq!(c[1], pelican::DEAD_LETTER_SCRIPT);
            c[1] = "<script>".into();
        }
    }
    all
}

/// Connects; with a dead-letter stream, the check that dead letters can be moved goes first
/// and nothing is read before its answer. Returns the drain, written after it.
fn start(rig: &mut Rig) -> Vec<Vec<String>> {
    let opening = rig.start();
    if rig.consumer.config().dead_letter.is_none() {
        return opening;
    }
    assert_eq!(opening.len(), 1, "only the check before its answer: {opening:?}");
    assert_eq!(opening[0][1], pelican::DEAD_LETTER_CHECK_SCRIPT);
    assert_eq!(opening[0][2..], ["2", "s", "dl", "g", "A"]);
    rig.reply("dead_letter_check").unwrap();
    rig.sent()
}

#[test]
fn a_dead_letter_stream_the_user_may_not_write_is_refused_at_the_start() {
    each(|flavor, protocol| {
        // A least-privilege stream worker (+@stream +@connection) has no EVAL: fatal at once,
        // before anything is read, not at the first dead letter.
        let mut rig = Rig::new(config(protocol).dead_letter_after(2, "dl"), flavor);
        rig.start();
        let err = rig.reply("dead_letter_check_noperm").unwrap_err();
        assert!(err.is_fatal(), "{err:?}");
        assert!(matches!(err, Error::Server { command: Command::DeadLetterCheck, .. }), "{err:?}");
        assert!(err.to_string().contains("NOPERM"), "{err}");
        assert_eq!(rig.consumer.poll_transmit(), None, "nothing read");
        // A user that may run scripts but not XADD: 7.0+ tell (6.2 cannot, and answers 1).
        let mut rig = Rig::new(config(protocol).dead_letter_after(2, "dl"), flavor);
        rig.start();
        let outcome = rig.reply("dead_letter_check_noxadd");
        if flavor == "redis-6.2" {
            assert_eq!(outcome, Ok(()));
        } else {
            let err = outcome.unwrap_err();
            assert!(err.to_string().contains("may not run XADD on dl5"), "{err}");
        }
    });
}

#[test]
fn a_dead_letter_stream_in_another_cluster_slot_is_refused_at_the_start() {
    each(|flavor, protocol| {
        let mut rig = Rig::new(config(protocol).dead_letter_after(2, "dl"), flavor);
        rig.start();
        let err = rig.reply("crossslot").unwrap_err();
        assert!(matches!(err, Error::CrossSlot { command: Command::DeadLetterCheck, .. }), "{err:?}");
        assert!(err.to_string().contains("common hash tag"), "{err}");
        assert_eq!(rig.consumer.poll_transmit(), None, "nothing read");
    });
}

#[test]
fn an_entry_past_the_cap_is_moved_not_handed_out() {
    each(|flavor, protocol| {
        let mut rig = Rig::new(config(protocol).dead_letter_after(2, "dl"), flavor);
        start(&mut rig);
        // 1-0 was delivered 3 times, 3-0 twice (2-0 is deleted).
        rig.drain_reply("read_pending_deleted").unwrap();
        assert_eq!(sent(&mut rig), [dead_letter("1-0", 3, "max-deliveries")], "{flavor} {protocol:?}");
        let seen = rig.handle_all(Verdict::Ack);
        assert_eq!(ids(&seen), ["3-0"]);
        assert_eq!(seen[0].deliveries, 2);
        rig.sent();
        rig.reply("dead_letter_moved").unwrap();
        let moved =
            Notice::DeadLettered { id: "1-0".into(), deliveries: 3, reason: DeadLetterReason::MaxDeliveries };
        assert_eq!(rig.consumer.poll_event(), Some(Event::Notice(moved)));
        assert_eq!(rig.consumer.stats().dead_lettered, 1);
    });
}

#[test]
fn the_dead_letter_verdict_moves_the_entry_in_hand() {
    each(|flavor, protocol| {
        let mut rig = Rig::new(config(protocol).dead_letter("dl"), flavor);
        start(&mut rig);
        rig.drain_reply("read_pending_page").unwrap();
        rig.entry();
        rig.settle(Verdict::DeadLetter);
        assert_eq!(sent(&mut rig), [dead_letter("1-0", 2, "verdict")]);
        // The move goes out at once; the next entry does not wait for its answer.
        assert_eq!(rig.entry().id(), b"2-0");
        rig.reply("dead_letter_moved").unwrap();
        let moved =
            Notice::DeadLettered { id: "1-0".into(), deliveries: 2, reason: DeadLetterReason::Verdict };
        assert_eq!(rig.consumer.poll_event(), Some(Event::Notice(moved)));
    });
}

#[test]
fn a_move_that_finds_the_entry_gone_or_taken_is_counted_not_fatal() {
    let mut rig = Rig::new(config(Protocol::Resp2).dead_letter("dl"), "redis-7.0");
    start(&mut rig);
    rig.drain_reply("read_pending_page").unwrap();
    rig.entry();
    rig.settle(Verdict::DeadLetter);
    rig.sent();
    rig.reply("dead_letter_not_ours").unwrap();
    let lost = Notice::LeaseLost { id: "1-0".into(), in_hand: false };
    assert_eq!(rig.consumer.poll_event(), Some(Event::Notice(lost)));
    rig.entry();
    rig.settle(Verdict::DeadLetter);
    rig.sent();
    rig.reply("dead_letter_deleted").unwrap();
    assert_eq!(rig.consumer.poll_event(), None);
    let stats = rig.consumer.stats();
    assert_eq!((stats.dead_lettered, stats.leases_lost, stats.deleted_seen), (0, 1, 1));
}

#[test]
fn a_dead_letter_key_of_another_type_is_fatal_and_acks_nothing() {
    each(|flavor, protocol| {
        let mut rig = Rig::new(config(protocol).dead_letter("dl"), flavor);
        start(&mut rig);
        rig.drain_reply("read_pending_page").unwrap();
        rig.entry();
        rig.settle(Verdict::DeadLetter);
        rig.sent();
        let err = rig.reply("dead_letter_wrongtype").unwrap_err();
        assert!(
            matches!(&err, Error::Server { command: Command::DeadLetter, message } if message.contains("WRONGTYPE"))
        );
        assert!(err.is_fatal(), "{flavor}");
    });
}

#[test]
fn the_dead_letter_verdict_without_a_dead_letter_stream_is_fatal_once_earned_acks_are_confirmed() {
    let mut rig = Rig::new(config(Protocol::Resp2), "valkey-8.1");
    start(&mut rig);
    rig.drain_reply("read_pending_page").unwrap();
    rig.entry();
    rig.settle(Verdict::Ack);
    rig.entry();
    rig.settle(Verdict::DeadLetter);
    assert_eq!(rig.consumer.error(), None, "not before the earned ack is confirmed");
    assert_eq!(rig.sent(), [cmd("XACK s g 1-0")], "the ack, nothing moved, nothing more read");
    let err = rig.reply("xack_1").unwrap_err();
    assert_eq!(err, Error::NoDeadLetter { id: "2-0".into() });
    assert!(err.is_fatal());
    assert_eq!(rig.consumer.error(), Some(&err));
    assert_eq!(rig.consumer.poll_event(), None);
    assert_eq!((rig.consumer.stats().acked, rig.consumer.stats().errors), (1, 1));
    assert_eq!(rig.consumer.handle_timeout(rig.now), Err(err));
}

#[test]
fn an_owed_move_is_sent_again_after_a_reconnect_and_before_a_stop_ends() {
    let mut rig = Rig::new(config(Protocol::Resp3).dead_letter("dl"), "valkey-8.1");
    start(&mut rig);
    rig.drain_reply("read_pending_page").unwrap();
    rig.entry();
    rig.settle(Verdict::DeadLetter);
    assert_eq!(sent(&mut rig), [dead_letter("1-0", 2, "verdict")]);
    rig.consumer.on_disconnected(rig.now);
    rig.consumer.stop();
    let lost = rig.consumer.poll_event();
    assert!(matches!(lost, Some(Event::Notice(Notice::ConnectionLost { .. }))), "{lost:?}");
    assert_eq!(rig.consumer.poll_event(), None, "the move is owed");
    rig.advance(Duration::from_secs(1));
    rig.connect();
    assert_eq!(sent(&mut rig), [cmd("HELLO 3")], "nothing before the node is known to be a master");
    rig.reply("hello").unwrap();
    assert_eq!(sent(&mut rig), [dead_letter("1-0", 2, "verdict")], "only the owed move, before anything");
    rig.reply("dead_letter_moved").unwrap();
    assert!(matches!(rig.consumer.poll_event(), Some(Event::Notice(Notice::DeadLettered { .. }))));
    assert_eq!(rig.consumer.poll_event(), Some(Event::Stopped));
}

#[test]
fn a_read_past_read_bytes_is_skipped_and_asked_again_smaller() {
    each(|flavor, protocol| {
        // Entries of 2,000 bytes: a 3,000-byte budget holds one whole entry.
        let mut rig = Rig::new(config(protocol).read_bytes(3000), flavor);
        start(&mut rig);
        rig.drain_reply("read_pending_empty").unwrap();
        rig.sent();
        rig.reply("autoclaim_done").unwrap();
        rig.sent();
        let big = rig.fixture("read_new_big");
        // Fed in pieces: the first half already tells the read is too big.
        rig.raw(&big[..big.len() / 2]).unwrap();
        rig.raw(&big[big.len() / 2..]).unwrap();
        let shrunk = Notice::ReadShrunk { count: 1, cause: ShrinkCause::BigEntries, handler: Duration::ZERO };
        assert_eq!(rig.consumer.poll_event(), Some(Event::Notice(shrunk)), "{flavor} {protocol:?}");
        assert_eq!(rig.consumer.poll_event(), None, "nothing of the skipped reply is handed out");
        // They were delivered to us all the same: the drain gets them, one per read.
        assert_eq!(
            rig.sent(),
            [cmd("XREADGROUP GROUP g A COUNT 1 STREAMS s 0"), cmd("XPENDING s g - + 1 A")]
        );
        let mut page = rig.fixture("read_pending_big_one");
        page.extend(rig.fixture("pending_counts_big_one"));
        rig.raw(&page).unwrap();
        let entry = rig.entry();
        assert_eq!(
            (entry.id(), entry.field(b"f").map_or(0, <[u8]>::len), entry.deliveries),
            (&b"1-0"[..], 2000, 2)
        );
        assert_eq!(rig.consumer.stats().reads_shrunk, 1);
    });
}

#[test]
fn a_single_entry_past_the_frame_limit_is_named_in_the_error() {
    each(|flavor, protocol| {
        let limits = Limits::default().max_frame(1500);
        let mut rig = Rig::new(config(protocol).count(1).limits(limits).read_bytes(1024), flavor);
        start(&mut rig);
        let page = rig.fixture("read_pending_big_one");
        rig.raw(&page).unwrap();
        // The counts behind the skipped read are dropped; the entry's id is asked for.
        rig.reply("pending_counts_big_one").unwrap();
        assert_eq!(rig.sent(), [cmd("XPENDING s g - + 1 A")]);
        let err = rig.reply("pending_counts_big_one").unwrap_err();
        assert_eq!(err, Error::EntryTooLarge { id: "1-0".into(), limit: 1500 }, "{flavor}");
        assert!(err.is_fatal());
        assert!(err.to_string().contains("raise Limits::max_frame"));
    });
}

#[test]
fn health_counts_the_dead_letter_stream_and_goes_on_without_it_if_refused() {
    each(|flavor, protocol| {
        let every = Duration::from_secs(3);
        let mut rig = Rig::new(config(protocol).dead_letter_after(2, "dl").health_every(every), flavor);
        start(&mut rig);
        rig.drain_reply("read_pending_empty").unwrap();
        // XLEN of the dead-letter stream rides with the health, before TIME ends the round.
        let asked = rig.sent();
        let health: Vec<&Vec<String>> = asked.iter().take(4).collect();
        assert_eq!(health[2], &cmd("XLEN dl"), "{asked:?}");
        assert_eq!(health[3], &cmd("TIME"), "{asked:?}");
        rig.reply("xinfo_groups").unwrap();
        rig.reply("xpending_extended").unwrap();
        rig.raw(b":4\r\n").unwrap();
        rig.reply("time").unwrap();
        let Notice::Health(h) = rig.notice() else { panic!("not health") };
        assert_eq!(h.dead_letters, Some(4));
        rig.reply("autoclaim_done").unwrap();
        rig.sent();
        // An ACL that lets the user add to the dead-letter stream but not read it: the round
        // goes on without the count, and XLEN is not asked again.
        rig.advance(every);
        rig.reply("read_new_nil").unwrap();
        assert!(rig.sent().contains(&cmd("XLEN dl")));
        rig.reply("xinfo_groups").unwrap();
        rig.reply("xpending_extended").unwrap();
        rig.raw(b"-NOPERM this user has no permissions to run the 'xlen' command\r\n").unwrap();
        rig.reply("time").unwrap();
        let Notice::Health(h) = rig.notice() else { panic!("health goes on") };
        assert_eq!(h.dead_letters, None);
        assert!(rig.consumer.is_connected());
        rig.reply("autoclaim_done").unwrap();
        rig.sent();
        rig.advance(every);
        rig.reply("read_new_nil").unwrap();
        let asked = rig.sent();
        assert!(asked.contains(&cmd("TIME")) && !asked.contains(&cmd("XLEN dl")), "{asked:?}");
    });
}
