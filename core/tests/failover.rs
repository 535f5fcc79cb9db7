//! Failovers, driven with replies captured from a real master, its replica and a sentinel of
//! each server (`scripts/capture-fixtures`): a replica is never read from and is told once,
//! `READONLY` after a role swap keeps the acks owed, acks wait for the replicas where asked
//! (and stop stalling once they are behind), and the sentinel's real answers read right.

mod support;

use std::time::Duration;

use pelican::locate::{HostPort, Locator, SentinelAnswer, SentinelSession};
use pelican::{AckWait, Config, Error, Event, Notice, Protocol, Sentinels, Verdict};
use support::*;

/// Every server the fixtures were captured from.
const ALL: [&str; 4] = ["redis-6.2", "redis-7.0", "valkey-8.1", "redis-8.10"];

fn each(mut story: impl FnMut(&'static str, Protocol)) {
    for flavor in ALL {
        for protocol in PROTOCOLS {
            story(flavor, protocol);
        }
    }
}

fn config(protocol: Protocol) -> Config {
    Config::new("s", "g", "A")
        .count(10)
        .start_count(10)
        .beat(Duration::from_secs(2))
        .protocol(protocol)
        .no_client_name()
        .classic_verbs()
}

/// Connects and answers the handshake's `HELLO` with `hello` (a fixture).
fn connect_to(rig: &mut Rig, hello: &str) -> Result<(), Error> {
    rig.connect();
    let opening = rig.sent();
    let first = if rig.protocol == Protocol::Resp3 { cmd("HELLO 3") } else { cmd("HELLO") };
    assert_eq!(opening, [first], "nothing but the handshake before the role is known");
    rig.reply(hello)
}

#[test]
fn a_replica_is_never_read_from_and_told_once() {
    each(|flavor, protocol| {
        let mut rig = Rig::new(config(protocol), flavor);
        let hello = if protocol == Protocol::Resp3 { "hello" } else { "hello_info" };
        for attempt in 0..3 {
            connect_to(&mut rig, "hello_replica").unwrap();
            assert_eq!(rig.sent(), [cmd("ROLE")], "{flavor} {protocol:?}: its master named, nothing read");
            let err = rig.reply("role_replica").unwrap_err();
            let Error::NotMaster { role } = &err else { panic!("{err:?}") };
            assert!(
                role.starts_with("a replica of 127.0.0.1:") && role.ends_with("(link connected)"),
                "{role}"
            );
            assert!(!err.is_fatal());
            assert!(!rig.consumer.snapshot().connected);
            match rig.consumer.poll_event() {
                Some(Event::Notice(Notice::NotMaster { role: told, .. })) if attempt == 0 => {
                    assert_eq!(&told, role);
                    let line =
                        Notice::NotMaster { role: told, retry_in: Duration::from_millis(100) }.to_string();
                    assert!(line.starts_with("connected to a replica of 127.0.0.1:"), "{line}");
                }
                None if attempt > 0 => {}
                other => panic!("{flavor} {protocol:?} attempt {attempt}: {other:?}"),
            }
            assert_eq!(rig.consumer.poll_transmit(), None);
            rig.advance(Duration::from_secs(10));
        }
        // The roles swapped: a master now, told as connected (the rig checks it is the first
        // event), and the drain goes out.
        connect_to(&mut rig, hello).unwrap();
        assert!(!rig.fresh, "told as connected");
        assert_eq!(rig.sent()[0][0], "XREADGROUP");
        assert!(rig.consumer.snapshot().connected);
        // A replica again, after a connection that worked: told again.
        rig.consumer.on_disconnected(rig.now);
        rig.skip_link_notices();
        rig.advance(Duration::from_secs(10));
        connect_to(&mut rig, "hello_replica").unwrap();
        rig.sent();
        rig.reply("role_replica").unwrap_err();
        assert!(matches!(rig.consumer.poll_event(), Some(Event::Notice(Notice::NotMaster { .. }))));
    });
}

#[test]
fn a_sentinel_is_refused_at_once() {
    each(|flavor, protocol| {
        let mut rig = Rig::new(config(protocol), flavor);
        let err = connect_to(&mut rig, "sentinel_hello").unwrap_err();
        assert_eq!(err, Error::IsSentinel, "{flavor} {protocol:?}");
        assert!(err.is_fatal());
        assert!(err.to_string().starts_with("the server is a sentinel, not a data node"), "{err}");
        assert_eq!(rig.consumer.poll_transmit(), None, "{flavor} {protocol:?}: nothing sent to it");
        assert!(!rig.consumer.snapshot().connected);
        let told: Vec<Event> = std::iter::from_fn(|| rig.consumer.poll_event()).collect();
        assert!(!told.iter().any(|e| matches!(e, Event::Notice(Notice::Connected { .. }))), "{told:?}");
    });
}

#[test]
fn a_replica_that_will_not_say_its_master_is_refused_all_the_same() {
    each(|flavor, protocol| {
        let mut rig = Rig::new(config(protocol), flavor);
        connect_to(&mut rig, "hello_replica").unwrap();
        rig.sent();
        // `ROLE` needs `@admin`: a least-privilege user's refusal (captured for `TIME`).
        let err = rig.reply("time_noperm").unwrap_err();
        assert_eq!(err, Error::NotMaster { role: "a replica".into() });
    });
}

#[test]
fn readonly_after_a_role_swap_keeps_the_acks_owed() {
    each(|flavor, protocol| {
        let mut rig = Rig::new(config(protocol), flavor);
        rig.start();
        rig.drain_reply("read_pending_page").unwrap();
        let handled = rig.handle_all(Verdict::Ack);
        assert_eq!(handled.len(), 2);
        let xack = rig.sent();
        assert_eq!(xack[0][0], "XACK", "{xack:?}");
        // The node was demoted meanwhile: its writes are refused.
        let err = rig.reply("readonly").unwrap_err();
        assert!(
            matches!(&err, Error::Unavailable { message, .. } if message.starts_with("READONLY")),
            "{err:?}"
        );
        assert!(!err.is_fatal());
        rig.skip_link_notices();
        rig.advance(Duration::from_secs(10));
        // On the new master the acks go first, before the drain that would hand them out again.
        let opening = rig.start();
        assert_eq!(opening[0], xack[0], "{flavor} {protocol:?}: {opening:?}");
        assert_eq!(opening[1][0], "XREADGROUP");
    });
}

/// Connected to a master, a page of two entries handled: the `XACK` and what follows it.
/// The master's replicas were counted first (`WAIT 0 0`, or `WAITAOF 0 0 0`): one.
fn acked(config: Config, flavor: &'static str) -> (Rig, Vec<Vec<String>>) {
    let mut rig = Rig::new(config, flavor);
    let opening = rig.start();
    match opening.iter().find(|c| c[0].starts_with("WAIT")) {
        Some(c) if c[0] == "WAIT" => {
            assert_eq!(c, &cmd("WAIT 0 0"));
            rig.raw(&fixture(flavor, Protocol::Resp2, "wait_1")).unwrap();
        }
        Some(c) => {
            assert_eq!(c, &cmd("WAITAOF 0 0 0"));
            rig.raw(b"*2\r\n:0\r\n:1\r\n").unwrap();
        }
        None => {}
    }
    rig.drain_reply("read_pending_page").unwrap();
    rig.handle_all(Verdict::Ack);
    let sent = rig.sent();
    (rig, sent)
}

#[test]
fn acks_wait_for_the_replicas_and_stop_stalling_once_they_are_behind() {
    each(|flavor, protocol| {
        let config = config(protocol).ack_replicas(1, Duration::from_millis(1000));
        let (mut rig, sent) = acked(config.clone(), flavor);
        assert_eq!(sent[0][0], "XACK");
        assert_eq!(sent[1], cmd("WAIT 1 1000"), "{flavor} {protocol:?}: right behind the acks: {sent:?}");
        // With a replica connected the wait answers 1 (the fixture is RESP2's integer, the
        // same in RESP3).
        let mut replies = rig.fixture("xack_many");
        replies.extend(fixture(flavor, Protocol::Resp2, "wait_1"));
        rig.raw(&replies).unwrap();
        assert_eq!(rig.consumer.stats().acks_unreplicated, 0);
        assert!(rig.consumer.poll_event().is_none());

        // Without one: 0 after the timeout, told once, counted.
        let (mut rig, _) = acked(config.clone(), flavor);
        let mut replies = rig.fixture("xack_many");
        replies.extend(rig.fixture("wait_0"));
        rig.raw(&replies).unwrap();
        let Some(Event::Notice(notice @ Notice::AcksUnreplicated { replicas: 0, wanted: 1, .. })) =
            rig.consumer.poll_event()
        else {
            panic!("{flavor} {protocol:?}: not told")
        };
        assert!(notice.is_trouble());
        let first = rig.consumer.stats().acks_unreplicated;
        assert!(first >= 1);
        // The next batch waits only a moment, and is not told again.
        rig.consumer.on_disconnected(rig.now);
        rig.skip_link_notices();
        rig.advance(Duration::from_secs(10));
        rig.start();
        rig.raw(&fixture(flavor, Protocol::Resp2, "wait_1")).unwrap(); // the replicas counted
        rig.drain_reply("read_pending_page").unwrap();
        rig.handle_all(Verdict::Ack);
        let sent = rig.sent();
        assert_eq!(sent[1], cmd("WAIT 1 1"), "{flavor} {protocol:?}: {sent:?}");
        let mut replies = rig.fixture("xack_many");
        replies.extend(rig.fixture("wait_0"));
        rig.raw(&replies).unwrap();
        assert!(rig.consumer.poll_event().is_none(), "told once");
        assert!(rig.consumer.stats().acks_unreplicated > first);
    });
}

#[test]
fn waitaof_needs_a_server_that_has_it() {
    let aof = AckWait::Aof { local: true, replicas: 1, timeout: Duration::from_secs(1) };
    for flavor in ["redis-6.2", "redis-7.0"] {
        let mut rig = Rig::new(config(Protocol::Resp2).ack_wait(aof), flavor);
        rig.connect();
        rig.sent();
        let err = rig.reply("hello_info").unwrap_err();
        let Error::Unsupported { needs, .. } = &err else { panic!("{err:?}") };
        assert!(needs.contains("WAITAOF") && err.is_fatal(), "{err}");
    }
    for flavor in ["valkey-8.1", "redis-8.10"] {
        let (mut rig, sent) = acked(config(Protocol::Resp2).ack_wait(aof), flavor);
        assert_eq!(sent[1], cmd("WAITAOF 1 1 1000"));
        // `[0, 0]`: neither the local file (appendonly no) nor a replica has them.
        let mut replies = rig.fixture("xack_many");
        replies.extend(rig.fixture("waitaof"));
        rig.raw(&replies).unwrap();
        assert!(matches!(rig.consumer.poll_event(), Some(Event::Notice(Notice::AcksUnreplicated { .. }))));
    }
}

#[test]
fn the_sentinels_answers_as_captured() {
    for flavor in ALL {
        let sentinels = Sentinels::new("mymaster", [HostPort::new("127.0.0.1", 26379)]);
        let raw = |name: &str| fixture(flavor, Protocol::Resp2, name);
        let mut session = SentinelSession::new(&sentinels);
        let mut bytes = raw("sentinel_role");
        bytes.extend(raw("sentinel_master_addr"));
        bytes.extend(raw("sentinel_setname"));
        bytes.extend(raw("sentinel_subscribe"));
        session.handle_input(&bytes).unwrap();
        let Some(SentinelAnswer::Master(master)) = session.poll_answer() else {
            panic!("{flavor}: no master")
        };
        assert_eq!(master.host, "127.0.0.1");
        assert!(session.answered());
        session.handle_input(&raw("sentinel_switch_master")).unwrap();
        let Some(SentinelAnswer::Switched(to)) = session.poll_answer() else { panic!("{flavor}: no switch") };
        assert_ne!(to, master, "{flavor}: the failover moved the master");
        // A locator follows: the master named, then the switch moves the consumer.
        let mut locator = Locator::new(sentinels.clone().into());
        assert_eq!(locator.on_answer(SentinelAnswer::Master(master.clone())), pelican::locate::Found::Master);
        assert_eq!(
            locator.on_answer(SentinelAnswer::Switched(to)),
            pelican::locate::Found::Moved { from: master }
        );

        let mut session = SentinelSession::new(&Sentinels::new("nosuch", sentinels.nodes.clone()));
        let mut bytes = raw("sentinel_role");
        bytes.extend(raw("sentinel_master_addr_unknown"));
        bytes.extend(raw("sentinel_setname"));
        bytes.extend(raw("sentinel_subscribe"));
        session.handle_input(&bytes).unwrap();
        let watched = Some(vec!["mymaster".to_string()]);
        assert_eq!(session.poll_answer(), Some(SentinelAnswer::Unknown { watched }), "{flavor}");
    }
}

#[test]
fn no_sentinel_to_ask_is_nowhere_to_dial() {
    let mut locator = Locator::new(Sentinels::new("mymaster", []).into());
    assert_eq!(locator.dial(), None);
    let why = locator.on_sentinel_failed("no sentinel to ask").expect("a round of none is over at once");
    assert!(why.contains("no sentinel named the master"), "{why}");
}

/// `ack_replicas(2)` on a master with fewer replicas: told at connect with the count and
/// what it costs (no batch can reach them), and batches wait a moment only, from the first.
#[test]
fn asking_for_more_replicas_than_the_master_has_is_told_at_connect() {
    each(|flavor, protocol| {
        let mut rig = Rig::new(config(protocol).ack_replicas(2, Duration::from_millis(1000)), flavor);
        let opening = rig.start();
        assert_eq!(opening.last(), Some(&cmd("XPENDING s g - + 10 A")), "{opening:?}");
        assert_eq!(opening[opening.len() - 3], cmd("WAIT 0 0"), "counted before the drain: {opening:?}");
        rig.raw(&fixture(flavor, Protocol::Resp2, "wait_1")).unwrap();
        let notice = rig.notice();
        assert_eq!(notice, Notice::Replicas { have: 1, wanted: 2, timeout: Duration::from_millis(1000) });
        assert!(notice.is_trouble());
        assert!(notice.to_string().contains("has 1 replica in sync, fewer than the 2"), "{notice}");
        rig.drain_reply("read_pending_page").unwrap();
        rig.handle_all(Verdict::Ack);
        assert_eq!(rig.sent()[1], cmd("WAIT 2 1"), "the first batch waits a moment, not the timeout");
        // Counted again at the next connect: the same count is not told twice.
        rig.consumer.on_disconnected(rig.now);
        rig.skip_link_notices();
        rig.advance(Duration::from_secs(10));
        rig.start();
        rig.raw(&fixture(flavor, Protocol::Resp2, "wait_1")).unwrap();
        assert_eq!(rig.consumer.poll_event(), None);
    });
}

/// A process that stands still after the server answered a batch's `WAIT` and the read
/// behind it reads both replies at once, long after: the read ran when the `WAIT` returned,
/// which was within its timeout, not when the late bytes were read. Its entries are renewed
/// before they are handed out, so that a peer that reclaimed them meanwhile is seen.
#[test]
fn a_read_answered_behind_a_wait_while_the_process_stood_still_is_renewed() {
    each(|flavor, protocol| {
        let config = config(protocol).ack_replicas(1, Duration::from_millis(1000));
        let (mut rig, sent) = acked(config, flavor);
        let read = sent.iter().position(|c| c[0] == "XREADGROUP");
        assert!(
            sent[1][0] == "WAIT" && read > Some(1),
            "{flavor} {protocol:?}: a read behind the WAIT: {sent:?}"
        );
        // All answered at once by the server; read 40 s later (min_idle is 30 s).
        rig.advance(Duration::from_secs(40));
        let mut late = rig.fixture("xack_many");
        late.extend(fixture(flavor, Protocol::Resp2, "wait_1"));
        late.extend(rig.fixture("read_pending_page"));
        late.extend(rig.fixture("pending_counts_page"));
        rig.raw(&late).unwrap();
        let sent = rig.sent();
        assert_eq!(sent.first().map(|c| c[0].as_str()), Some("XCLAIM"), "{flavor} {protocol:?}: {sent:?}");
        assert_eq!(
            rig.consumer.poll_event(),
            None,
            "{flavor} {protocol:?}: not before the renewal is answered"
        );
    });
}
