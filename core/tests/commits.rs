//! Commits ([`Verdict::Commit`]): the script loaded once per connection before the commits
//! that need it (and before any read, which would deliver their entries again), batches of
//! commits riding with the acks, each outcome told, `NOSCRIPT` and a lost connection sending
//! them again, and the delivery count a drain raises kept as the fencing token. Driven
//! through the public API with replies captured from the real servers; the commit's own
//! answers are the script's (checked on the real servers by the conformance suite).

mod support;

use std::time::Duration;

use bytes::Bytes;
use pelican::{Config, Event, Notice, Protocol, Verdict, Writes};
use support::*;

const SHA: &str = "01873d8fd4116e73500483008d88ed75fd213637";

fn config(protocol: Protocol) -> Config {
    Config::new("s", "g", "A")
        .count(10)
        .start_count(10)
        .beat(Duration::from_secs(2))
        .min_idle(Duration::from_secs(3))
        .protocol(protocol)
        .no_client_name()
        .leave_on_stop(false)
}

fn park() -> Vec<String> {
    cmd("XREADGROUP GROUP g A COUNT 10 BLOCK 2000 STREAMS s >")
}

/// One output entry naming the input.
fn output(id: &[u8]) -> Verdict {
    Verdict::Commit(Writes::new().add("o", [(&b"input"[..], id)]))
}

/// The commands written, the script's text elided.
fn sent(rig: &mut Rig) -> Vec<Vec<String>> {
    let mut all = rig.sent();
    for c in &mut all {
        if c[..2] == ["SCRIPT", "LOAD"] {
            assert_eq!(c[2], pelican::COMMIT_SCRIPT);
            c[2] = "<script>".into();
        }
    }
    all
}

/// The `EVALSHA` committing `entries` (id, deliveries), each writing `o`.
fn evalsha(entries: &[(&str, u64)]) -> Vec<String> {
    let (low, high) = (entries[0].0, entries[entries.len() - 1].0);
    let mut c = cmd(&format!("EVALSHA {SHA} 2 s o g A {low} {high} {}", entries.len()));
    for (id, deliveries) in entries {
        c.extend([id.to_string(), deliveries.to_string(), "1".into()]);
        c.extend(["a", "2", "4", "", "", "input", id].map(String::from));
    }
    c
}

fn bulk(s: &str) -> Vec<u8> {
    format!("${}\r\n{s}\r\n", s.len()).into_bytes()
}

/// Connected, drained, reclaimed, parked; then `read_new` (1-0, 2-0, 3-0) arrives.
fn with_batch(flavor: &'static str, protocol: Protocol) -> Rig {
    let mut rig = Rig::new(config(protocol), flavor);
    rig.start();
    rig.drain_reply("read_pending_empty").unwrap();
    rig.sent();
    rig.reply("autoclaim_done").unwrap();
    assert_eq!(rig.sent(), [park()]);
    rig.reply("read_new").unwrap();
    rig
}

/// Commits every entry handed out.
fn commit_all(rig: &mut Rig) {
    while let Some(event) = rig.consumer.poll_event() {
        let Event::Entry(e) = event else { panic!("unexpected {event:?}") };
        assert!(rig.consumer.settle(e.id(), output(e.id()), rig.now));
    }
}

#[test]
fn a_batch_of_commits_loads_the_script_first_and_goes_before_the_next_read() {
    each(|flavor, protocol| {
        let mut rig = with_batch(flavor, protocol);
        commit_all(&mut rig);
        // The script is not known on this connection: loaded, and nothing read meanwhile
        // (the commits go first).
        assert_eq!(sent(&mut rig), [cmd("SCRIPT LOAD <script>")], "{flavor} {protocol:?}");
        rig.raw(&bulk(SHA)).unwrap();
        assert_eq!(sent(&mut rig), [evalsha(&[("1-0", 1), ("2-0", 1), ("3-0", 1)]), park()]);
        rig.raw(b"*3\r\n:1\r\n:1\r\n:1\r\n").unwrap();
        let stats = rig.consumer.stats();
        assert_eq!((stats.committed, stats.acked, stats.commits_fenced), (3, 3, 0));
        assert_eq!(rig.consumer.poll_event(), None, "nothing to tell");
        // The next commit on this connection needs no load.
        let more = b"*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n4-0\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n";
        rig.raw(more).unwrap();
        commit_all(&mut rig);
        assert_eq!(sent(&mut rig), [evalsha(&[("4-0", 1)]), park()]);
    });
}

#[test]
fn each_outcome_is_counted_and_told() {
    let mut rig = with_batch("redis-7.0", Protocol::Resp3);
    commit_all(&mut rig);
    rig.sent();
    rig.raw(&bulk(SHA)).unwrap();
    rig.sent();
    let refusal = "WRONGTYPE o holds a hash, not a stream";
    let answer =
        format!("*3\r\n:0\r\n*2\r\n$4\r\npeer\r\n:2\r\n{}", String::from_utf8(bulk(refusal)).unwrap());
    // Without a dead-letter stream to set it aside, a refusal stops the consumer: it would
    // be refused at every delivery.
    let stopped = rig.raw(answer.as_bytes()).unwrap_err();
    assert_eq!(stopped, pelican::Error::CommitRefused { id: "3-0".into(), reason: refusal.into() });
    assert!(stopped.is_fatal());
    let settled = Notice::CommitFenced { id: "1-0".into(), deliveries: 1, holder: None };
    let taken = Notice::CommitFenced {
        id: "2-0".into(),
        deliveries: 1,
        holder: Some((Bytes::from_static(b"peer"), 2)),
    };
    let refused = Notice::CommitRefused { id: "3-0".into(), reason: refusal.into() };
    assert_eq!(rig.notice(), settled);
    assert_eq!(rig.notice(), taken);
    assert_eq!(rig.notice(), refused);
    assert!(taken.to_string().contains("it is now peer's, delivery 2; nothing written"), "{taken}");
    assert!(refused.is_trouble());
    let stats = rig.consumer.stats();
    assert_eq!((stats.committed, stats.commits_fenced, stats.commits_refused, stats.acked), (0, 2, 1, 0));
}

#[test]
fn a_forgotten_script_is_loaded_again_and_the_commits_sent_again() {
    let mut rig = with_batch("valkey-8.1", Protocol::Resp2);
    commit_all(&mut rig);
    rig.sent();
    rig.raw(&bulk(SHA)).unwrap();
    rig.sent();
    // `SCRIPT FLUSH` meanwhile. The load goes behind the parked read (rare enough not to
    // drop a connection for), and nothing is read after it until it is answered.
    rig.raw(b"-NOSCRIPT No matching script. Please use EVAL.\r\n").unwrap();
    assert_eq!(sent(&mut rig), [cmd("SCRIPT LOAD <script>")]);
    rig.reply("read_new_nil").unwrap();
    assert_eq!(sent(&mut rig), Vec::<Vec<String>>::new());
    rig.raw(&bulk(SHA)).unwrap();
    assert_eq!(sent(&mut rig), [evalsha(&[("1-0", 1), ("2-0", 1), ("3-0", 1)]), park()]);
    rig.raw(b"*3\r\n:1\r\n:1\r\n:1\r\n").unwrap();
    assert_eq!(rig.consumer.stats().committed, 3);
}

#[test]
fn commits_owed_across_a_lost_connection_go_before_the_drain() {
    let mut rig = with_batch("redis-7.0", Protocol::Resp2);
    commit_all(&mut rig);
    rig.sent();
    rig.raw(&bulk(SHA)).unwrap();
    assert_eq!(sent(&mut rig)[0], evalsha(&[("1-0", 1), ("2-0", 1), ("3-0", 1)]));
    // Lost before the answer: ran or not, the consumer cannot tell. Sent again, after the
    // script is loaded on the new connection and before the drain reads their entries (a
    // read would count a delivery and fence them off).
    rig.consumer.on_disconnected(rig.now);
    rig.advance(Duration::from_secs(1));
    let opening = rig.start();
    let opening: Vec<Vec<String>> = opening.into_iter().filter(|c| c[0] != "SCRIPT").collect();
    assert!(opening.iter().all(|c| c[0] != "XREADGROUP"), "nothing read before the load: {opening:?}");
    rig.raw(&bulk(SHA)).unwrap();
    let next = sent(&mut rig);
    assert_eq!(next[0], evalsha(&[("1-0", 1), ("2-0", 1), ("3-0", 1)]));
    assert_eq!(next[1][..2], ["XREADGROUP", "GROUP"], "then the drain: {next:?}");
    // It had run: the entries are settled, nothing written again.
    rig.raw(b"*3\r\n:0\r\n:0\r\n:0\r\n").unwrap();
    assert_eq!(rig.consumer.stats().commits_fenced, 3);
}

#[test]
fn a_drain_that_delivers_an_entry_in_hand_again_raises_its_fencing_token() {
    each(|flavor, protocol| {
        let mut rig = Rig::new(config(protocol).concurrency(3), flavor);
        rig.start();
        rig.drain_reply("read_pending_empty").unwrap();
        rig.sent();
        rig.reply("autoclaim_done").unwrap();
        rig.sent();
        rig.reply("read_new").unwrap();
        let (first, second) = (rig.entry(), rig.entry());
        assert_eq!((first.deliveries, second.deliveries), (1, 1));
        rig.consumer.on_disconnected(rig.now);
        rig.advance(Duration::from_secs(1));
        let opening = rig.start();
        assert_eq!(opening[0][..2], ["XCLAIM", "s"], "the leases of those in hand first: {opening:?}");
        rig.raw(b"*2\r\n$3\r\n1-0\r\n$3\r\n2-0\r\n*1\r\n$3\r\n3-0\r\n").unwrap();
        assert_eq!(rig.sent()[0], cmd("XREADGROUP GROUP g A COUNT 10 STREAMS s 0"));
        // The drain reads 1-0 and 2-0, both in hand, again: each read counts a delivery on
        // the server, so their commits must carry 2.
        rig.drain_reply("read_pending_page").unwrap();
        rig.sent();
        assert!(rig.consumer.settle(b"1-0", output(b"1-0"), rig.now));
        assert!(rig.consumer.settle(b"2-0", output(b"2-0"), rig.now));
        // The drain's next page is on its way: the commits go when they are due.
        rig.advance(Duration::from_millis(5));
        rig.consumer.handle_timeout(rig.now).unwrap();
        let load = sent(&mut rig);
        assert_eq!(load, [cmd("SCRIPT LOAD <script>")]);
        rig.drain_reply("read_pending_empty").unwrap();
        rig.raw(&bulk(SHA)).unwrap();
        assert_eq!(sent(&mut rig)[0], evalsha(&[("1-0", 2), ("2-0", 2)]), "{flavor} {protocol:?}");
    });
}

#[test]
fn a_commit_that_cannot_be_made_is_refused_at_the_verdict() {
    let mut rig = with_batch("redis-7.0", Protocol::Resp3);
    let e = rig.entry();
    let none: [(&str, &str); 0] = [];
    assert!(rig.consumer.settle(e.id(), Verdict::Commit(Writes::new().add("o", none)), rig.now));
    assert_eq!(rig.notice(), Notice::CommitRefused { id: "1-0".into(), reason: "XADD o: no fields".into() });
    assert_eq!(rig.consumer.stats().commits_refused, 1);
    assert!(sent(&mut rig).iter().all(|c| c[0] != "SCRIPT" && c[0] != "EVALSHA"), "nothing sent for it");
}

#[test]
fn a_worker_that_will_commit_is_checked_and_loads_the_script_at_the_start() {
    let mut rig = Rig::new(config(Protocol::Resp3).commit_to(["o", "n"]), "redis-7.0");
    let opening = rig.start();
    assert_eq!(opening[0][0], "EVAL");
    assert_eq!(opening[0][1], pelican::COMMIT_CHECK_SCRIPT);
    assert_eq!(opening[0][2..], ["3", "s", "o", "n", "g", "A"]);
    assert_eq!(opening[1][..2], ["SCRIPT", "LOAD"]);
    assert_eq!(opening.len(), 2, "nothing read before the answers: {opening:?}");
    rig.raw(b":1\r\n").unwrap();
    assert_eq!(rig.sent(), Vec::<Vec<String>>::new(), "nor before the script's");
    rig.raw(&bulk(SHA)).unwrap();
    assert_eq!(rig.sent()[0][..2], ["XREADGROUP", "GROUP"]);
}

/// With a dead-letter stream, a refused commit is a failed delivery: the entry stays pending
/// and comes again, and at its last allowed delivery it is moved to the dead-letter stream,
/// the refusal's text in `pelican-error`.
#[test]
fn a_refused_commit_is_a_failed_delivery_and_dead_lettered_at_the_last() {
    let refusal = "WRONGTYPE o holds a hash, not a stream";
    let refused = format!("*1\r\n{}", String::from_utf8(bulk(refusal)).unwrap());
    for (max, dead_lettered) in [(Some(2), false), (Some(1), true), (None, true)] {
        let config = match max {
            Some(max) => config(Protocol::Resp2).dead_letter_after(max, "dead"),
            None => config(Protocol::Resp2).dead_letter("dead"),
        };
        let mut rig = Rig::new(config, "redis-7.0");
        rig.start();
        rig.reply("dead_letter_check").unwrap();
        rig.drain_reply("read_pending_empty").unwrap();
        rig.sent();
        rig.reply("autoclaim_done").unwrap();
        assert_eq!(rig.sent(), [park()]);
        rig.raw(b"*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n").unwrap();
        commit_all(&mut rig);
        rig.sent();
        rig.raw(&bulk(SHA)).unwrap();
        assert_eq!(sent(&mut rig)[0], evalsha(&[("1-0", 1)]));
        rig.raw(refused.as_bytes()).unwrap();
        assert_eq!(rig.notice(), Notice::CommitRefused { id: "1-0".into(), reason: refusal.into() });
        let moves: Vec<Vec<String>> = rig.sent().into_iter().filter(|c| c[0] == "EVAL").collect();
        match dead_lettered {
            false => assert!(moves.is_empty(), "max {max:?}: left pending, to come again: {moves:?}"),
            true => {
                let [dead] = &moves[..] else { panic!("{moves:?}") };
                let tail: Vec<&str> = dead[dead.len() - 4..].iter().map(String::as_str).collect();
                assert_eq!(tail, ["pelican-reason", "commit-refused", "pelican-error", refusal]);
            }
        }
        assert!(rig.consumer.error().is_none());
    }
}
