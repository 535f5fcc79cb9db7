//! `pelican consume --exec CMD --concurrency N [--order-by FIELD]` against real servers: at
//! most N commands at once per stream, and some at once; one key's entries one at a time, in
//! stream order; a stop lets every running command finish and confirms its ack. The commands
//! log their own start and end (`>>` appends whole short lines), and the logs are checked for
//! what ran at once: nothing here times anything.
//!
//! Each scenario runs on both transports. The smol ones need `pelican_smol::Runner::run` to
//! poll several handler futures at once (branch wave-smol).

mod support;

use std::collections::BTreeMap;

use pelican_tests::server::{Flavor, Server};
use support::{consume, lines_of, run, wait_until, Json, Pelican, Scratch};

fn url(server: &Server) -> String {
    format!("redis://{}", server.addr())
}

/// A command that logs `start <id>` to `log`, runs `middle`, then logs `end <id>`.
fn logging(log: &str, middle: &str) -> String {
    format!(
        "echo \"start $PELICAN_ID\" >> {log}; {middle}; cat >/dev/null; echo \"end $PELICAN_ID\" >> {log}"
    )
}

/// Waits, inside a command, until the file `gate` exists (20 s at most, so that a failed
/// test leaves no command behind for long).
fn wait_for(gate: &str) -> String {
    format!("i=0; while [ ! -e {gate} ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done")
}

/// The events of a command log: (`true` for a start, the entry id).
fn events(log: &str) -> Vec<(bool, String)> {
    lines_of(log)
        .into_iter()
        .map(|line| match line.split_once(' ') {
            Some(("start", id)) => (true, id.to_string()),
            Some(("end", id)) => (false, id.to_string()),
            _ => panic!("not a log line: {line:?}"),
        })
        .collect()
}

/// Checks that each of `ids` started once and ended once, after its start, and nothing else
/// ran; returns the most commands running at once.
fn most_at_once(events: &[(bool, String)], ids: &[String]) -> usize {
    let mut state: BTreeMap<&str, (usize, usize)> = ids.iter().map(|id| (id.as_str(), (0, 0))).collect();
    let (mut running, mut most) = (0usize, 0usize);
    for (start, id) in events {
        let (starts, ends) =
            state.get_mut(id.as_str()).unwrap_or_else(|| panic!("{id} is no entry: {events:?}"));
        if *start {
            *starts += 1;
            running += 1;
        } else {
            assert_eq!(*starts, *ends + 1, "{id} ended without a start: {events:?}");
            *ends += 1;
            running -= 1;
        }
        most = most.max(running);
    }
    for (id, counts) in state {
        assert_eq!(counts, (1, 1), "{id} started and ended once: {events:?}");
    }
    most
}

/// 12 entries, `--concurrency 4`, commands of 0.3 s: never more than 4 run at once, some
/// run at once; every entry is acknowledged. The summary and `--stats-json` tell the most
/// entries in hand at once.
fn up_to_n_commands_run_at_once(transport: &str) {
    let server = Server::start(Flavor::Redis70);
    let mut admin = server.admin();
    let ids = admin.xadd_n("s", 12, 4);
    let dir = Scratch::new("at-once");
    let (log, stats) = (dir.file("log"), dir.file("stats.json"));
    let command = logging(&log, "sleep 0.3");
    let url = url(&server);
    let extra = ["--concurrency", "4", "--exec", &command, "--progress", "--stats-json", &stats];
    let mut p = Pelican::spawn(&consume(&url, transport, &extra));
    wait_until("12 commands to end", || events(&log).iter().filter(|(start, _)| !start).count() == 12);
    wait_until("XPENDING 0", || admin.xpending_count("s", "g") == 0);
    p.stop();

    let most = most_at_once(&events(&log), &ids);
    assert!((2..=4).contains(&most), "{transport}: {most} commands at once; log: {:?}", events(&log));
    let stats = Json::parse(&std::fs::read_to_string(&stats).expect("stats file"));
    assert_eq!((stats.get("handled").num(), stats.get("acked").num()), (12.0, 12.0), "{transport}");
    let in_hand_max = stats.get("in_hand_max").num() as usize;
    assert!((most..=4).contains(&in_hand_max), "{transport}: in_hand_max {in_hand_max}, {most} at once");
    let per_stream = stats.get("streams").get("s").get("in_hand_max").num() as usize;
    assert_eq!(per_stream, in_hand_max, "{transport}: one stream");
    let summary = p.stderr().lines().last().unwrap_or_default().to_string();
    assert!(summary.ends_with(&format!(", at most {in_hand_max} in hand at once")), "{transport}: {summary}");
}

#[test]
fn up_to_n_commands_run_at_once_on_mio() {
    up_to_n_commands_run_at_once("mio");
}

/// Passes once wave-smol's `Runner::run` polls several futures at once.
#[test]
fn up_to_n_commands_run_at_once_on_smol() {
    up_to_n_commands_run_at_once("smol");
}

/// `--order-by k --concurrency 4` over 8 entries of two keys, interleaved: one key's
/// commands never overlap and run in stream order; the two keys' do overlap.
fn one_key_at_a_time_in_order(transport: &str) {
    let server = Server::start(Flavor::Valkey81);
    let mut admin = server.admin();
    let keyed: Vec<(String, &str)> = (0..8)
        .map(|i| {
            let key = ["a", "b"][i % 2];
            (admin.xadd("s", &[("k", key), ("n", &i.to_string())]), key)
        })
        .collect();
    let ids: Vec<String> = keyed.iter().map(|(id, _)| id.clone()).collect();
    let dir = Scratch::new("order-by");
    let log = dir.file("log");
    let command = logging(&log, "sleep 0.2");
    let url = url(&server);
    let extra = ["--concurrency", "4", "--order-by", "k", "--exec", &command];
    let mut p = Pelican::spawn(&consume(&url, transport, &extra));
    wait_until("8 commands to end", || events(&log).iter().filter(|(start, _)| !start).count() == 8);
    wait_until("XPENDING 0", || admin.xpending_count("s", "g") == 0);
    p.stop();

    let events = events(&log);
    let most = most_at_once(&events, &ids);
    assert_eq!(most, 2, "{transport}: the two keys ran at once, never more: {events:?}");
    for key in ["a", "b"] {
        let of_key: Vec<&String> = keyed.iter().filter(|(_, k)| *k == key).map(|(id, _)| id).collect();
        let seen: Vec<(bool, &String)> =
            events.iter().filter(|(_, id)| of_key.contains(&id)).map(|(start, id)| (*start, id)).collect();
        let want: Vec<(bool, &String)> = of_key.iter().flat_map(|id| [(true, *id), (false, *id)]).collect();
        assert_eq!(seen, want, "{transport}: key {key}, one at a time, in stream order");
    }
}

#[test]
fn order_by_runs_one_key_at_a_time_in_order_on_mio() {
    one_key_at_a_time_in_order("mio");
}

/// Passes once wave-smol's `Runner::run` polls several futures at once.
#[test]
fn order_by_runs_one_key_at_a_time_in_order_on_smol() {
    one_key_at_a_time_in_order("smol");
}

/// SIGTERM while 4 commands run (held at a gate): none is killed, each finishes, its ack is
/// confirmed, pelican exits 0 and nothing stays pending. Meanwhile the progress line showed
/// the 4 entries in hand.
fn a_stop_lets_every_running_command_finish(transport: &str) {
    let server = Server::start(Flavor::Redis70);
    let mut admin = server.admin();
    let ids = admin.xadd_n("s", 4, 4);
    let dir = Scratch::new("stop-4");
    let (log, gate) = (dir.file("log"), dir.file("gate"));
    let command = logging(&log, &wait_for(&gate));
    let url = url(&server);
    let extra = ["--concurrency", "4", "--exec", &command, "--progress"];
    let mut p = Pelican::spawn(&consume(&url, transport, &extra));
    wait_until("4 commands to start", || events(&log).len() == 4);
    wait_until("the progress line to show them", || p.stderr().contains(", 4 in hand"));
    p.term();
    wait_until("the stop to be seen", || {
        p.stderr().contains("pelican: stopping after the 4 entries in hand")
    });
    std::fs::write(&gate, "").expect("open the gate");
    let status = p.wait();
    assert_eq!(status.code(), Some(0), "{transport}: {}", p.stderr());

    assert_eq!(most_at_once(&events(&log), &ids), 4, "{transport}: {:?}", events(&log));
    // The acks were confirmed before the exit: the server's view, read after it, is exact.
    assert_eq!(admin.xpending_count("s", "g"), 0, "{transport}: {}", p.stderr());
}

#[test]
fn a_stop_lets_every_running_command_finish_on_mio() {
    a_stop_lets_every_running_command_finish("mio");
}

/// Passes once wave-smol's `Runner::run` polls several futures at once.
#[test]
fn a_stop_lets_every_running_command_finish_on_smol() {
    a_stop_lets_every_running_command_finish("smol");
}

/// `--concurrency` out of 1..=4096, or not a number, and an empty `--order-by` are bad usage
/// (exit 2), told before connecting.
#[test]
fn concurrency_and_order_by_are_checked() {
    let base =
        ["consume", "--url", "redis://127.0.0.1:1", "--stream", "s", "--group", "g", "--consumer", "c"];
    for (extra, want) in [
        (["--concurrency", "0"], "invalid value '0' for '--concurrency <N>': must be at least 1"),
        (["--concurrency", "-5"], "invalid value '-5' for '--concurrency <N>': must be at least 1"),
        (["--concurrency", "4097"], "invalid value '4097' for '--concurrency <N>': must be at most 4096"),
        (["--concurrency", "many"], "invalid value 'many' for '--concurrency <N>'"),
        (["--order-by", ""], "invalid value '' for '--order-by <FIELD>': the field name is empty"),
    ] {
        let args: Vec<&str> = base.iter().chain(&extra).copied().collect();
        let (status, stdout, stderr) = run(&args);
        assert_eq!(status.code(), Some(2), "{extra:?}: {stderr}");
        assert!(stderr.starts_with(&format!("pelican: {want}")), "{extra:?}: {stderr}");
        assert!(stdout.is_empty(), "{extra:?}: {stdout}");
    }
}
