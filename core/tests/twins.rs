//! Twins: another live connection under this consumer's name. Refused at the start, told
//! later; driven with `CLIENT ID` / `CLIENT LIST` replies captured from real servers (the
//! captured list holds this connection and a twin, both named `pelican:g:A`).

mod support;

use std::time::Duration;

use pelican::{Command, Config, Error, Notice, Protocol};
use support::*;

fn config(protocol: Protocol) -> Config {
    // The name the captured lists carry (the default would be `pelican:s:g:A`).
    Config::new("s", "g", "A").count(10).start_count(10).protocol(protocol).client_name("pelican:g:A")
}

const LOOK: [&str; 2] = ["CLIENT ID", "CLIENT LIST TYPE normal"];

/// Connected and named; the look for twins sent, nothing read yet.
fn named(config: Config, flavor: &'static str) -> Rig {
    let mut rig = Rig::new(config, flavor);
    let opening = rig.start();
    // RESP2 names the connection with a command of its own.
    let skip = usize::from(rig.protocol == Protocol::Resp2);
    assert_eq!(opening[skip..], cmds(&LOOK), "nothing is read before the look");
    rig
}

#[test]
fn a_twin_at_the_start_is_looked_for_again_then_refused() {
    each(|flavor, protocol| {
        let mut rig = named(config(protocol), flavor);
        rig.reply("client_id").unwrap();
        rig.reply("client_list_twin").unwrap();
        // A predecessor whose connection just closed can still be listed: look once more, a
        // little later, reading nothing meanwhile.
        assert_eq!(rig.sent(), Vec::<Vec<String>>::new(), "{flavor} {protocol:?}");
        let again = rig.consumer.poll_timeout().unwrap();
        assert_eq!(again, rig.now + std::time::Duration::from_millis(250));
        rig.now = again;
        rig.consumer.handle_timeout(rig.now).unwrap();
        assert_eq!(rig.sent(), cmds(&LOOK), "{flavor} {protocol:?}");
        rig.reply("client_id").unwrap();
        let err = rig.reply("client_list_twin").unwrap_err();
        let Error::Twin { name, addr, .. } = &err else { panic!("{err:?}") };
        assert_eq!(name, "pelican:g:A");
        assert!(addr.starts_with("127.0.0.1:"), "{addr}");
        assert!(err.is_fatal());
        assert!(err.to_string().contains("already consumes as pelican:g:A"), "{err}");
        assert_eq!(rig.consumer.poll_transmit(), None, "nothing read");
    });
}

#[test]
fn a_twin_gone_by_the_second_look_lets_the_consumer_start() {
    each(|flavor, protocol| {
        let mut rig = named(config(protocol), flavor);
        rig.reply("client_id").unwrap();
        rig.reply("client_list_twin").unwrap();
        rig.now = rig.consumer.poll_timeout().unwrap();
        rig.consumer.handle_timeout(rig.now).unwrap();
        assert_eq!(rig.sent(), cmds(&LOOK));
        rig.reply("client_id").unwrap();
        rig.reply("client_list").unwrap();
        let sent = rig.sent();
        assert_eq!(sent[0][0], "XREADGROUP", "the drain, once vetted: {sent:?}");
    });
}

#[test]
fn allowed_twins_are_not_looked_for() {
    let mut rig = Rig::new(config(Protocol::Resp2).allow_twins(), "redis-7.0");
    let opening = rig.start();
    assert_eq!((&opening[0][1][..], &opening[1][0][..]), ("SETNAME", "XREADGROUP"), "{opening:?}");
    assert!(!opening.iter().any(|c| c[0] == "CLIENT" && c[1] == "LIST"));
}

#[test]
fn a_twin_appearing_later_is_told_once() {
    each(|flavor, protocol| {
        let mut rig = named(config(protocol), flavor);
        rig.reply("client_id").unwrap();
        rig.reply("client_list").unwrap();
        rig.drain_reply("read_pending_empty").unwrap();
        rig.reply("autoclaim_done").unwrap();
        rig.sent();
        // Every min_idle the look is asked again, between reads (never behind a parked one).
        rig.advance(Duration::from_secs(31));
        rig.reply("read_new_nil").unwrap();
        let sent = rig.sent();
        assert_eq!(sent[..2], cmds(&LOOK), "{sent:?}");
        rig.reply("client_id").unwrap();
        rig.reply("client_list_twin").unwrap();
        let Notice::Twin { addr, .. } = rig.notice() else { panic!("no twin told") };
        assert!(addr.starts_with("127.0.0.1:"));
        assert!(Notice::Twin { addr, idle: Duration::ZERO }.is_trouble());
        assert!(rig.consumer.is_connected(), "a twin seen later costs nothing but the notice");
        // The same twin again: not told twice.
        rig.reply("autoclaim_done").unwrap();
        rig.sent();
        rig.advance(Duration::from_secs(31));
        rig.reply("read_new_nil").unwrap();
        rig.sent();
        rig.reply("client_id").unwrap();
        rig.reply("client_list_twin").unwrap();
        assert_eq!(rig.consumer.poll_event(), None);
    });
}

/// A stop that cuts a parked read short first ends that read on the server, by the cut
/// connection's id (the look's `CLIENT ID`), before it asks what the read brought: until the
/// server noticed the socket gone, it could still deliver an entry there.
#[test]
fn a_stop_ends_the_cut_read_on_the_server_before_it_looks_for_what_it_brought() {
    each(|flavor, protocol| {
        let mut rig = named(config(protocol), flavor);
        rig.reply("client_id").unwrap();
        rig.reply("client_list").unwrap();
        assert_eq!(rig.sent()[0][0], "XREADGROUP", "the drain");
        rig.drain_reply("read_pending_empty").unwrap();
        rig.sent();
        rig.reply("autoclaim_done").unwrap();
        assert_eq!(rig.sent()[0][0], "XREADGROUP", "parked");
        assert!(rig.consumer.is_parked());
        rig.consumer.stop();
        assert!(rig.consumer.wants_connection(), "the parked connection is dropped");
        let handshake = rig.start();
        let unblock = handshake.iter().position(|c| c[..2] == ["CLIENT", "UNBLOCK"]);
        let held = handshake.iter().position(|c| c[0] == "XPENDING");
        assert!(unblock.is_some() && unblock < held, "{flavor} {protocol:?}: {handshake:?}");
        // `:4` in RESP2, `:4` in RESP3: the id the look's `CLIENT ID` answered.
        let reply = String::from_utf8(rig.fixture("client_id")).unwrap();
        let id = reply.trim_start_matches(':').trim_end();
        assert_eq!(handshake[unblock.unwrap()][2], id, "{flavor} {protocol:?}: the cut connection's id");
        // A server that never answers it: the timeout names the unblock, the oldest unanswered.
        let deadline = rig.consumer.poll_timeout().unwrap();
        rig.now = deadline;
        let err = rig.consumer.handle_timeout(rig.now).unwrap_err();
        assert_eq!(err, Error::Timeout { command: Command::Unblock }, "{flavor} {protocol:?}");
    });
}
