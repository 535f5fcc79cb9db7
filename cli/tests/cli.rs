//! The `pelican` binary against real servers, as a user runs it: spawned, signalled, its
//! output read, and the server's own view checked (`XPENDING`).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use pelican_tests::admin::Admin;
use pelican_tests::certs::ServerCert;
use pelican_tests::cluster::Cluster;
use pelican_tests::server::{self, Flavor, Options, Server};
use support::{lines_of, run, run_env, wait_until, Json, Pelican, Scratch};

fn url(server: &Server) -> String {
    format!("redis://{}", server.addr())
}

/// `consume` arguments for stream `s`, group `g`, consumer `c`, creating the group at 0.
fn consume<'a>(url: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "consume",
        "--url",
        url,
        "--stream",
        "s",
        "--group",
        "g",
        "--consumer",
        "c",
        "--create-group",
        "0",
    ];
    args.extend_from_slice(extra);
    args
}

#[test]
fn exec_success_acks_every_entry() {
    let server = Server::start(Flavor::Valkey81);
    let mut admin = server.admin();
    let ids = admin.xadd_n("s", 5, 4);
    let dir = Scratch::new("ack");
    let (input, env, stats) = (dir.file("input"), dir.file("env"), dir.file("stats.json"));
    let command = format!(
        "cat >> {input}; echo \"$PELICAN_ID $PELICAN_SOURCE $PELICAN_STREAM $PELICAN_GROUP \
         $PELICAN_CONSUMER ${{PELICAN_DELIVERIES-unset}}\" >> {env}"
    );
    let url = url(&server);
    let mut p = Pelican::spawn(&consume(&url, &["--exec", &command, "--stats-json", &stats]));
    wait_until("5 commands run", || lines_of(&env).len() == 5);
    wait_until("XPENDING 0", || admin.xpending_count("s", "g") == 0);
    p.stop();

    let want: Vec<String> = (0..5).map(|i| format!("{{\"f\":\"{i:04}\"}}")).collect();
    assert_eq!(lines_of(&input), want, "each command got the entry's fields as JSON on stdin");
    let want: Vec<String> = ids.iter().map(|id| format!("{id} new s g c 1")).collect();
    assert_eq!(lines_of(&env), want, "environment per entry");
    let stats = Json::parse(&std::fs::read_to_string(&stats).expect("stats file"));
    assert_eq!(stats.get("acked").num(), 5.0);
    assert_eq!(stats.get("new").num(), 5.0);
    assert_eq!(stats.get("handled").num(), 5.0);
    assert_eq!(stats.get("retried").num(), 0.0);
    for field in [
        "drained",
        "claimed",
        "deleted_seen",
        "lost_to_peer",
        "acks_unmatched",
        "reconnects",
        "errors",
        "group_recreated",
        "abandoned_acks",
        "leases_renewed",
        "leases_lost",
        "dead_lettered",
    ] {
        assert_eq!(stats.get(field).num(), 0.0, "{field}");
    }
    // `reads_shrunk` follows the machine: a command slower than 10 ms (a loaded machine) makes
    // reads bring one entry, and that is told.
}

#[test]
fn exec_failure_leaves_entries_pending() {
    let server = Server::start(Flavor::Valkey81);
    let mut admin = server.admin();
    let ids = admin.xadd_n("s", 5, 4);
    let dir = Scratch::new("fail");
    let (ran, stats) = (dir.file("ran"), dir.file("stats.json"));
    let command = format!("cat >/dev/null; echo \"$PELICAN_ID\" >> {ran}; exit 3");
    let url = url(&server);
    // `keep`: pending with this consumer, as before the backoff became the default.
    let extra = ["--exec", &command, "--stats-json", &stats, "--on-retry", "keep"];
    let mut p = Pelican::spawn(&consume(&url, &extra));
    wait_until("5 commands run", || lines_of(&ran).len() == 5);
    p.stop();

    let pending: Vec<String> = admin.xpending_consumer("s", "g", "c").into_iter().map(|e| e.0).collect();
    assert_eq!(pending, ids, "every failed entry stays pending");
    let stats = Json::parse(&std::fs::read_to_string(&stats).expect("stats file"));
    assert_eq!((stats.get("acked").num(), stats.get("retried").num()), (0.0, 5.0));
    assert_eq!(stats.get("failed").num(), 5.0);
}

#[test]
fn sigterm_mid_batch_finishes_the_entry_in_hand() {
    let server = Server::start(Flavor::Valkey81);
    let mut admin = server.admin();
    let ids = admin.xadd_n("s", 10, 4);
    let dir = Scratch::new("midbatch");
    let (started, finished) = (dir.file("started"), dir.file("finished"));
    let command = format!(
        "echo \"$PELICAN_ID\" >> {started}; sleep 0.3; cat >/dev/null; echo \"$PELICAN_ID\" >> {finished}"
    );
    let url = url(&server);
    let mut p = Pelican::spawn(&consume(&url, &["--exec", &command]));
    wait_until("the 2nd entry's command to start", || lines_of(&started).len() == 2);
    p.term();
    let status = p.wait();
    assert_eq!(status.code(), Some(0), "stderr:\n{}", p.stderr());

    assert_eq!(lines_of(&started), ids[..2], "nothing started after the stop");
    assert_eq!(lines_of(&finished), ids[..2], "the entry in hand finished");
    // The acks were confirmed before exit: the server's view, read after the exit, is exact.
    // What was read and not handled stays pending (reads follow the handler's pace: a few
    // entries ahead, not the whole stream); the rest was never delivered.
    let pending: Vec<String> = admin.xpending_consumer("s", "g", "c").into_iter().map(|e| e.0).collect();
    assert!(ids[2..].starts_with(&pending), "only entries not handled stay pending: {pending:?}");
}

#[test]
fn kill9_then_restart_loses_nothing() {
    let server = Server::start(Flavor::Redis70);
    let mut admin = server.admin();
    let ids = admin.xadd_n("s", 20, 4);
    let dir = Scratch::new("kill9");
    let (first, second) = (dir.file("first"), dir.file("second"));
    let url = url(&server);
    let run_with = |file: &str| {
        let command = format!("echo \"$PELICAN_ID $PELICAN_SOURCE\" >> {file}; sleep 0.05");
        Pelican::spawn(&consume(&url, &["--exec", &command]))
    };
    let mut p = run_with(&first);
    wait_until("5 entries handled", || lines_of(&first).len() >= 5);
    p.kill9();
    assert!(admin.xpending_count("s", "g") > 0, "the killed run left entries pending");

    let mut p = run_with(&second);
    wait_until("every entry handled and acked", || {
        let seen: BTreeSet<String> = lines_of(&first)
            .iter()
            .chain(&lines_of(&second))
            .filter_map(|l| l.split(' ').next().map(String::from))
            .collect();
        seen.len() == ids.len() && admin.xpending_count("s", "g") == 0
    });
    p.stop();
    let second = lines_of(&second);
    assert!(second[0].ends_with(" pending"), "the restart drains its own backlog first: {second:?}");
    assert_eq!(admin.xpending_count("s", "g"), 0);
}

#[test]
fn bad_urls_and_flags_exit_2_with_a_clear_message() {
    let base = ["consume", "--stream", "s", "--group", "g", "--consumer", "c"];
    let with = |extra: &[&str]| -> Vec<String> { base.iter().chain(extra).map(|s| s.to_string()).collect() };
    let cases: Vec<(Vec<String>, &str)> = vec![
        (with(&["--url", "http://127.0.0.1"]), "bad URL: it must start with redis://"),
        (with(&["--url", "redis://127.0.0.1:99999"]), "bad URL: the port is not 1-65535"),
        (with(&["--url", "redis://user@127.0.0.1"]), "a user needs a password"),
        (with(&["--url", "redis://127.0.0.1/x"]), "the database must be a number"),
        (with(&["--count", "abc"]), "invalid value 'abc' for '--count <N>'"),
        (with(&["--count", "0"]), "invalid value '0' for '--count <N>': must be at least 1"),
        (with(&["--beat-ms"]), "a value is required for '--beat-ms <MS>'"),
        (with(&["--bogus"]), "unexpected argument '--bogus' found"),
        (with(&["--transport", "tokio"]), "invalid value 'tokio' for '--transport <T>'"),
        (with(&["--recreate-group"]), "--recreate-group needs --create-group"),
        (with(&["--max-deliveries", "3"]), "--max-deliveries needs --dead-letter"),
        (
            with(&["--max-deliveries", "0", "--dead-letter", "dl"]),
            "invalid value '0' for '--max-deliveries <N>'",
        ),
        (vec!["consume".into(), "--stream".into(), "s".into()], "the following required arguments"),
        (vec!["frobnicate".into()], "unrecognized subcommand 'frobnicate'"),
        (vec![], "'pelican' requires a subcommand"),
        (
            vec![
                "pending".into(),
                "--stream".into(),
                "s".into(),
                "--group".into(),
                "g".into(),
                "--url".into(),
                "x".into(),
            ],
            "bad URL",
        ),
        (vec!["produce".into(), "--stream".into(), "s".into()], "--count <N>"),
        (vec!["demo".into(), "--bogus".into()], "--bogus"),
        (vec!["demo".into(), "--url".into(), "http://x".into()], "bad URL"),
    ];
    for (args, want) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (status, stdout, stderr) = run(&args);
        assert_eq!(status.code(), Some(2), "{args:?}: stderr:\n{stderr}");
        assert!(stderr.contains(&format!("pelican: {want}")) || stderr.contains(want), "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: nothing on stdout: {stdout}");
        if !want.contains("URL") && !want.contains("password") && !want.contains("database") {
            // clap leaves the usage out after a bad value, and points to --help.
            let usage = stderr.contains("Usage:") || stderr.contains("try '--help'");
            assert!(usage, "{args:?}: usage follows the message: {stderr}");
        }
    }
    for (args, want) in [
        (&["--help"][..], "pelican consume --stream KEY"),
        (&["consume", "--help"][..], "PELICAN_DELIVERIES how many times"),
        (&["pending", "-h"][..], "Usage: pelican pending"),
        (&["produce", "--help"][..], "Usage: pelican produce"),
        (&["demo", "--help"][..], "Usage: pelican demo"),
    ] {
        let (status, stdout, _) = run(args);
        assert_eq!(status.code(), Some(0), "{args:?}");
        assert!(stdout.contains(want), "{args:?}: {stdout}");
    }
}

#[test]
fn pending_reports_the_pel_as_json() {
    for (flavor, lag) in [(Flavor::Valkey81, Json::Num(1.0)), (Flavor::Redis62, Json::Null)] {
        let server = Server::start(flavor);
        let mut admin = server.admin();
        let ids = admin.xadd_n("s", 5, 4);
        admin.call(&["XGROUP", "CREATE", "s", "g", "0"]);
        admin.call(&["XREADGROUP", "GROUP", "g", "alice", "COUNT", "3", "STREAMS", "s", ">"]);
        admin.call(&["XREADGROUP", "GROUP", "g", "bob", "COUNT", "1", "STREAMS", "s", ">"]);
        admin.call(&["XREADGROUP", "GROUP", "g", "bob", "STREAMS", "s", "0"]); // a 2nd delivery
        admin.call(&["XREADGROUP", "GROUP", "g", "carol", "COUNT", "1", "STREAMS", "s", "0"]); // none

        let url = url(&server);
        let (status, stdout, stderr) =
            run(&["pending", "--url", &url, "--stream", "s", "--group", "g", "--json"]);
        assert_eq!(status.code(), Some(0), "{flavor}: {stderr}");
        let report = Json::parse(&stdout);
        assert_eq!(report.get("stream").str(), "s");
        assert_eq!(report.get("group").str(), "g");
        assert_eq!(report.get("pending").num(), 4.0, "{flavor}");
        assert_eq!(report.get("min_id").str(), ids[0]);
        assert_eq!(report.get("max_id").str(), ids[3]);
        assert_eq!(report.get("lag"), &lag, "{flavor}: lag where the server has it");
        let consumers = report.get("consumers").arr();
        let summary: Vec<(&str, f64, &Json)> = consumers
            .iter()
            .map(|c| (c.get("name").str(), c.get("pending").num(), c.get("oldest_id")))
            .collect();
        assert_eq!(
            summary,
            vec![
                ("alice", 3.0, &Json::Str(ids[0].clone())),
                ("bob", 1.0, &Json::Str(ids[3].clone())),
                ("carol", 0.0, &Json::Null)
            ],
            "{flavor}"
        );
        for c in consumers {
            assert!(c.get("seen_ms").num() >= 0.0);
        }
        let oldest: Vec<(&str, &str, f64)> = report
            .get("oldest")
            .arr()
            .iter()
            .map(|e| (e.get("id").str(), e.get("consumer").str(), e.get("deliveries").num()))
            .collect();
        assert_eq!(
            oldest,
            vec![
                (ids[0].as_str(), "alice", 1.0),
                (ids[1].as_str(), "alice", 1.0),
                (ids[2].as_str(), "alice", 1.0),
                (ids[3].as_str(), "bob", 2.0)
            ],
            "{flavor}"
        );

        let (status, text, _) = run(&["pending", "--url", &url, "--stream", "s", "--group", "g"]);
        assert_eq!(status.code(), Some(0));
        assert!(text.starts_with("stream s, group g: 4 pending"), "{text}");
        // A missing group gets consume's hint, not the server's words alone.
        let (status, _, stderr) = run(&["pending", "--url", &url, "--stream", "s", "--group", "nope"]);
        assert_eq!(status.code(), Some(1));
        assert!(stderr.starts_with("pelican: stream s: there is no group nope (NOGROUP "), "{stderr}");
        assert!(
            stderr.trim_end().ends_with(
                "; pelican consume --create-group creates it (and the stream if missing): \
                 --create-group for new entries only, --create-group 0 for all"
            ),
            "{stderr}"
        );
    }
}

#[test]
fn prints_entries_as_json_lines_non_utf8_as_base64() {
    let server = Server::start(Flavor::Valkey81);
    let mut admin = server.admin();
    let mut xadd = |fields: &[&[u8]]| -> String {
        let mut args: Vec<&[u8]> = vec![b"XADD", b"s", b"*"];
        args.extend_from_slice(fields);
        admin.call(&args).as_text().expect("an id")
    };
    let plain = xadd(&[b"name", b"alice", b"note", b"say \"hi\"\n"]);
    let binary = xadd(&[b"k", b"\xff\xfe\x00a"]);
    let repeated = xadd(&[b"a", b"1", b"a", b"2"]);
    let binary_name = xadd(&[b"\xc3\x28", b"v", b"ok", b"\x80"]);

    let url = url(&server);
    let mut p = Pelican::spawn(&consume(&url, &[]));
    let lines: Vec<String> = (0..4).map(|_| p.line()).collect();
    wait_until("XPENDING 0", || admin.xpending_count("s", "g") == 0);
    p.stop();
    assert_eq!(
        lines,
        vec![
            format!(r#"{{"stream":"s","id":"{plain}","fields":{{"name":"alice","note":"say \"hi\"\n"}}}}"#),
            format!(r#"{{"stream":"s","id":"{binary}","fields":{{"k":{{"base64":"//4AYQ=="}}}}}}"#),
            format!(r#"{{"stream":"s","id":"{repeated}","fields":{{"a":"1","a":"2"}}}}"#),
            format!(
                r#"{{"stream":"s","id":"{binary_name}","fields":[[{{"base64":"wyg="}},"v"],["ok",{{"base64":"gA=="}}]]}}"#
            ),
        ]
    );
    // And they are JSON: repeated names kept in order.
    let repeated = Json::parse(&lines[2]);
    assert_eq!(
        repeated.get("fields"),
        &Json::Obj(vec![("a".into(), Json::Str("1".into())), ("a".into(), Json::Str("2".into()))])
    );
    assert_eq!(Json::parse(&lines[0]).get("fields").get("note").str(), "say \"hi\"\n");
}

#[test]
fn produce_then_consume_over_smol_and_resp3() {
    let server = Server::start(Flavor::Valkey81);
    let mut admin = server.admin();
    let url = url(&server);
    let (status, stdout, stderr) =
        run(&["produce", "--url", &url, "--stream", "s", "--count", "2500", "--size", "32"]);
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(stdout.starts_with("produced 2500 entries to s (32-byte values) in "), "{stdout}");
    assert!(stdout.contains("entries/s"), "{stdout}");
    assert_eq!(admin.xlen("s"), 2500);

    let mut p = Pelican::spawn(&consume(&url, &["--transport", "smol", "--resp3", "--count", "300"]));
    let mut ids = BTreeSet::new();
    for _ in 0..2500 {
        let line = Json::parse(&p.line());
        assert_eq!(line.get("fields").get("p").str(), "x".repeat(32));
        ids.insert(line.get("id").str().to_string());
    }
    assert_eq!(ids.len(), 2500, "each entry once");
    wait_until("XPENDING 0", || admin.xpending_count("s", "g") == 0);
    p.stop();
}

#[test]
fn a_second_signal_exits_at_once_without_acking() {
    let server = Server::start(Flavor::Valkey81);
    let mut admin = server.admin();
    let ids = admin.xadd_n("s", 3, 4);
    let dir = Scratch::new("second");
    let log = dir.file("log");
    // The command leaves happily (exit 0) when signalled: its entry must still not be acked.
    let command =
        format!("echo started >> {log}; trap 'echo terminated >> {log}; exit 0' TERM; sleep 10 & wait");
    let url = url(&server);
    let mut p = Pelican::spawn(&consume(&url, &["--exec", &command]));
    wait_until("the first command to start", || lines_of(&log).len() == 1);
    p.term();
    wait_until("the first signal to be seen", || p.stderr().contains("stopping after the entry in hand"));
    p.term();
    let status = p.wait();
    assert_eq!(status.code(), Some(130), "stderr:\n{}", p.stderr());
    wait_until("the command to get SIGTERM", || lines_of(&log).len() == 2);
    assert_eq!(lines_of(&log), ["started", "terminated"]);
    let pending: Vec<String> = admin.xpending_consumer("s", "g", "c").into_iter().map(|e| e.0).collect();
    assert_eq!(pending, ids, "nothing acked, the entry in hand included");
}

#[test]
fn demo_on_the_embedded_simulator_loses_nothing() {
    let (status, stdout, stderr) = run(&["demo"]);
    assert!(status.success(), "{status:?}\n{stdout}\n{stderr}");
    for step in
        ["cold start", "crashes mid-batch", "no idle wait", "reclaims bob's", "XDEL", "stops while parked"]
    {
        assert!(stdout.contains(step), "missing {step:?} in\n{stdout}");
    }
    assert!(stdout.contains("nothing lost"), "{stdout}");
    demo_numbers_add_up(&stdout);
}

/// The number in `text` right after `prefix` (the line must have it).
fn number_after(text: &str, prefix: &str) -> usize {
    let at = text.find(prefix).unwrap_or_else(|| panic!("no {prefix:?} in {text:?}")) + prefix.len();
    let digits: String = text[at..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or_else(|_| panic!("no number after {prefix:?} in {text:?}"))
}

/// The tour's numbers, as printed, agree with one another (issue 22: the simulator said 5
/// entries stay pending, a real server 9, and neither said the batch size). Each step's
/// entries are accounted for: delivered = acked + pending, what comes back is what was
/// pending, handlings = entries handled + repeats, added = handled + deleted.
fn demo_numbers_add_up(out: &str) {
    let line = |what: &str| -> &str {
        out.lines().find(|l| l.contains(what)).unwrap_or_else(|| panic!("no line with {what:?} in\n{out}"))
    };
    let maybe = |what: &str| out.lines().find(|l| l.contains(what));
    let batch = number_after(line("workers read batches of up to "), "workers read batches of up to ");
    assert!(line("workers read").contains(&format!("(COUNT {batch})")), "{out}");

    let first = line("new entries → alice handled");
    let added_first = number_after(first, "s  ");
    assert_eq!(number_after(first, "alice handled "), added_first, "{out}");

    let crash = line("alice handles");
    let added_crash = number_after(crash, "s  ");
    let handled = number_after(crash, "alice handles ");
    let delivered = number_after(crash, "delivered her ");
    let acked = number_after(crash, "and counted ");
    let held = number_after(crash, ", so ");
    let lost = number_after(crash, "stay pending on alice (");
    assert_eq!(delivered, acked + held, "delivered = acked + pending: {crash}");
    assert_eq!(handled, acked + lost, "handled = acked + acks lost: {crash}");
    assert!(delivered > handled && delivered <= added_crash, "the one in hand was delivered too: {crash}");
    assert!(delivered <= batch * 5, "at most four reads ahead of the one handled: {crash}");
    assert_eq!(number_after(line("alice restarts"), "name: its "), held, "the pending come back: {out}");
    let caught_up = line("alice catches up");
    let fresh = maybe("alice catches up with the").map_or(0, |l| number_after(l, "catches up with the "));
    assert_eq!(fresh, added_crash - delivered, "the rest come new: {caught_up}");
    assert_eq!(number_after(caught_up, ": all "), added_crash, "{caught_up}");
    assert_eq!(number_after(caught_up, "handled, "), lost, "the repeats are the acks lost: {caught_up}");

    let bob = line("bob reads");
    let added_bob = number_after(bob, "s  ");
    let read_by_bob = number_after(bob, "bob reads ");
    assert!(read_by_bob >= 1 && read_by_bob <= added_bob.min(batch * 5), "{bob}");
    assert_eq!(number_after(line("carol reclaims"), "bob's "), read_by_bob, "{out}");
    let carol_new = maybe("carol then reads").map_or(0, |l| number_after(l, "carol then reads the "));
    assert_eq!(carol_new, added_bob - read_by_bob, "{out}");

    let dave = line("dave reads");
    let added_dave = number_after(dave, "s  ");
    let read_by_dave = number_after(dave, "dave reads ");
    let back = number_after(line("dave restarts"), "dave restarts: ");
    assert_eq!(back + 1, read_by_dave, "all but the deleted come back: {out}");
    let dave_new = maybe("dave then reads").map_or(0, |l| number_after(l, "dave then reads the "));
    assert_eq!(dave_new, added_dave - read_by_dave, "{out}");
    let stop = line("dave stops");
    let (dave_acked, dave_handled) = (number_after(stop, "confirmed ("), number_after(stop, "acked: "));
    assert_eq!(dave_handled, back + dave_new, "{stop}");
    assert_eq!(dave_acked, dave_handled + number_after(stop, "handled, "), "{stop}");

    let end = line("nothing lost");
    let added = number_after(end, "nothing lost: ");
    assert_eq!(added, added_first + added_crash + added_bob + added_dave, "{out}");
    let (handled_all, deleted) = (number_after(end, "= "), number_after(end, "acked + "));
    assert_eq!((added, deleted), (handled_all + deleted, 1), "{end}");
    let (handlings, repeats) = (number_after(end, "pending; "), number_after(end, "handlings, "));
    assert_eq!(handlings, handled_all + repeats, "{end}");
    assert_eq!(repeats, lost, "bob and dave crash on their first entry: only alice repeats: {end}");
    assert!(end.ends_with("; 0 pending"), "{end}");
}

#[test]
fn demo_against_each_real_server_loses_nothing_and_cleans_up() {
    for flavor in Flavor::ALL {
        let server = Server::start(flavor);
        let (status, stdout, stderr) = run(&["demo", "--url", &url(&server)]);
        assert!(status.success(), "{flavor}: {status:?}\n{stdout}\n{stderr}");
        assert!(stdout.contains("nothing lost"), "{flavor}: {stdout}");
        demo_numbers_add_up(&stdout);
        let keys = server.admin().call(&["DBSIZE"]);
        assert_eq!(keys.as_int(), Some(0), "{flavor}: the demo deletes its keys");
    }
}

/// The issue's story: two consumers, a handler slow enough that the backlog outlasts
/// min_idle (6 × 0.5 s against 1.5 s): every entry is handled exactly once, by one consumer
/// or the other, and no lease is lost. (Reads start at `--concurrency` entries, 1 here, so
/// the first consumer no longer takes the whole backlog in its first read: the second one,
/// started later, gets its share.)
#[test]
fn slow_exec_with_two_consumers_handles_each_entry_once() {
    let server = Server::start(Flavor::Redis70);
    let mut admin = server.admin();
    let ids = admin.xadd_n("s", 6, 4);
    let dir = Scratch::new("slow");
    let log = dir.file("log");
    let command = format!("echo \"$PELICAN_CONSUMER $PELICAN_ID\" >> {log}; sleep 0.5");
    let url = url(&server);
    let args = |name: &'static str| -> Vec<String> {
        let mut a: Vec<String> =
            consume(&url, &["--exec", &command, "--beat-ms", "200", "--min-idle-ms", "1500"])
                .into_iter()
                .map(String::from)
                .collect();
        a[8] = name.into();
        a
    };
    let spawn = |name| {
        let a = args(name);
        Pelican::spawn(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let mut c1 = spawn("c1");
    wait_until("c1 to start", || !lines_of(&log).is_empty());
    let mut c2 = spawn("c2");
    wait_until("every entry handled and acked", || {
        lines_of(&log).len() >= ids.len() && admin.xpending_count("s", "g") == 0
    });
    std::thread::sleep(std::time::Duration::from_millis(500)); // a few of c2's beats
    c1.stop();
    c2.stop();
    let mut handled: Vec<String> =
        lines_of(&log).iter().map(|l| l.split(' ').nth(1).unwrap().to_string()).collect();
    handled.sort();
    assert_eq!(handled, ids, "each once: {:?}", lines_of(&log));
    for c in [&c1, &c2] {
        assert!(!c.stderr().contains("lease lost"), "{}", c.stderr());
    }
}

/// A command that always fails on one entry: it is handed out --max-deliveries times, then
/// moved to the dead-letter stream, with a line on stderr; the rest is handled.
#[test]
fn a_poison_entry_goes_to_the_dead_letter_stream() {
    let server = Server::start(Flavor::Redis62);
    let mut admin = server.admin();
    let ids = admin.xadd_n("s", 4, 4);
    let dir = Scratch::new("poison");
    let log = dir.file("log");
    let command =
        format!("echo \"$PELICAN_ID $PELICAN_DELIVERIES\" >> {log}; [ \"$PELICAN_ID\" != {} ]", ids[1]);
    let url = url(&server);
    let extra = ["--exec", &command, "--beat-ms", "100", "--min-idle-ms", "300", "--max-deliveries", "2"];
    let mut args = consume(&url, &extra);
    args.extend(["--dead-letter", "dead"]);
    let mut p = Pelican::spawn(&args);
    wait_until("the poison entry moved", || admin.xlen("dead") == 1 && admin.xpending_count("s", "g") == 0);
    p.stop();
    let tries: Vec<String> = lines_of(&log).into_iter().filter(|l| l.starts_with(&ids[1])).collect();
    assert_eq!(tries, [format!("{} 1", ids[1]), format!("{} 2", ids[1])], "PELICAN_DELIVERIES counts");
    let line = format!("pelican: dead-lettered {} after 3 deliveries, past the delivery cap", ids[1]);
    assert!(p.stderr().contains(&line), "{}", p.stderr());
    let moved = admin.xrange("dead");
    let fields: Vec<&str> = moved[0].1.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        fields,
        [
            "f",
            "pelican-stream",
            "pelican-group",
            "pelican-consumer",
            "pelican-id",
            "pelican-deliveries",
            "pelican-reason"
        ]
    );
}

/// Exit status 65 moves the entry to the dead-letter stream at once (without --dead-letter
/// it is an ordinary failure).
#[test]
fn exit_65_dead_letters_the_entry() {
    let server = Server::start(Flavor::Valkey81);
    let mut admin = server.admin();
    let ids = admin.xadd_n("s", 2, 4);
    let url = url(&server);
    let command = format!("[ \"$PELICAN_ID\" != {} ] || exit 65", ids[0]);
    let mut args = consume(&url, &["--exec", &command]);
    args.extend(["--dead-letter", "dead"]);
    let mut p = Pelican::spawn(&args);
    wait_until("moved and acked", || admin.xlen("dead") == 1 && admin.xpending_count("s", "g") == 0);
    // One delivery, in the singular.
    let told = format!("pelican: dead-lettered {} after 1 delivery, by the handler's verdict", ids[0]);
    wait_until("the move told", || p.stderr().contains(&told));
    p.stop();
    let moved = admin.xrange("dead");
    let reason = moved[0].1.iter().find(|(n, _)| n == "pelican-reason").map(|(_, v)| v.clone());
    assert_eq!(reason.as_deref(), Some(&b"verdict"[..]));
}

/// A command killed by a signal is told on stderr (with --quiet too), naming the entry and
/// the signal; the entry stays pending, the others are acked.
#[test]
fn a_command_killed_by_a_signal_is_told() {
    let server = Server::start(Flavor::Valkey81);
    let mut admin = server.admin();
    let ids = admin.xadd_n("s", 3, 4);
    let url = url(&server);
    let command = format!("cat >/dev/null; [ \"$PELICAN_ID\" != {} ] || kill -9 $$", ids[1]);
    // `keep`: it stays with this consumer (the default backoff would bring it back in a second).
    let mut p = Pelican::spawn(&consume(&url, &["--exec", &command, "--quiet", "--on-retry", "keep"]));
    let told = format!(
        "pelican: the command for {} was killed by signal 9 (SIGKILL); the entry stays pending\n",
        ids[1]
    );
    wait_until("the kill told", || p.stderr().contains(&told));
    wait_until("the others acked", || admin.xpending_count("s", "g") == 1);
    p.stop();
    let pending: Vec<String> = admin.xpending_consumer("s", "g", "c").into_iter().map(|e| e.0).collect();
    assert_eq!(pending, ids[1..2], "only the killed command's entry stays pending");
    assert_eq!(p.stderr().matches("killed by signal").count(), 1, "{}", p.stderr());
}

/// A second process under the same stream, group and consumer names is refused with exit 1,
/// naming the first and the flag that allows it; with `--allow-twins` it runs beside it.
#[test]
fn a_twin_is_refused_unless_allowed() {
    let server = Server::start(Flavor::Redis70);
    let url = url(&server);
    let mut first = Pelican::spawn(&consume(&url, &["--quiet"]));
    wait_until("the first connected", || {
        server
            .admin()
            .call(&["CLIENT", "LIST"])
            .as_text()
            .unwrap_or_default()
            .contains(" name=pelican:s:g:c ")
    });
    let (status, _, stderr) = run(&consume(&url, &[]));
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("already consumes as pelican:s:g:c") && stderr.contains("(--allow-twins)"),
        "{stderr}"
    );
    let mut twin = Pelican::spawn(&consume(&url, &["--quiet", "--allow-twins"]));
    wait_until("both connected", || {
        let list = server.admin().call(&["CLIENT", "LIST"]).as_text().unwrap_or_default();
        list.matches(" name=pelican:s:g:c ").count() == 2
    });
    twin.stop();
    first.stop();
    assert_eq!((first.wait().code(), twin.wait().code()), (Some(0), Some(0)));
}

/// A command that cannot run (127: not found, 126: not executable) fails at the start, before
/// anything is read, with exit 1 and a message naming it; one whose name the shell computes
/// is found out at its first entry instead: it stops the consumer with exit 1 and the entry
/// stays pending (a typo does not dead-letter or fail the whole stream).
#[test]
fn a_command_that_cannot_run_stops_the_consumer() {
    let server = Server::start(Flavor::Redis70);
    let mut admin = server.admin();
    let ids = admin.xadd_n("s", 3, 4);
    let dir = Scratch::new("unrunnable");
    let script = dir.file("handler.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap(); // not executable
    let url = url(&server);
    for (command, why) in [("/no/such/handler.sh", "not found"), (script.as_str(), "not executable")] {
        let (status, _, stderr) = run(&consume(&url, &["--exec", command]));
        assert_eq!(status.code(), Some(1), "{stderr}");
        let want = format!("the --exec command `{command}` cannot be run: `{command}` is {why}");
        assert!(stderr.contains(&want), "{stderr}");
        assert!(!admin.group_exists("s", "g"), "nothing read, not even connected: {stderr}");
    }
    for (path, code, why) in
        [("/no/such/handler.sh", 127, "not found"), (script.as_str(), 126, "not executable")]
    {
        // Two runs each deliver the first entry once (the rest, read but not handed out, get
        // their counts back): a cap of 2 is not passed.
        let mut args = consume(&url, &["--exec", "\"$HANDLER\"", "--max-deliveries", "2"]);
        args.extend(["--dead-letter", "dead"]);
        let (status, _, stderr) = run_env(&args, &[("HANDLER", path)]);
        assert_eq!(status.code(), Some(1), "{stderr}");
        let want = format!(
            "the --exec command `\"$HANDLER\"` cannot be run (exit {code}: {why}); the entry stays pending"
        );
        assert!(stderr.contains(&want), "{stderr}");
    }
    assert_eq!(admin.xlen("dead"), 0, "nothing dead-lettered");
    let pending: Vec<String> = admin.xpending_all("s", "g").into_iter().map(|p| p.0).collect();
    assert_eq!(pending, ids, "nothing acked");
}

/// Redis 7.0 serving TLS too (its plain port stays open for the admin connection).
fn tls_server(client_auth: bool, cert: ServerCert) -> Server {
    Server::start_with(Flavor::Redis70, Options::default().with_tls(server::Tls { client_auth, cert }))
}

/// `rediss://HOST:<tls port>`: `host` is `127.0.0.1` or `localhost` (the certificate names both).
fn tls_url(server: &Server, host: &str) -> String {
    format!("rediss://{host}:{}", server.tls_port().expect("a TLS server"))
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// `produce` 300 entries, then `consume` them over TLS on both transports (a group each),
/// by IP address and by name: each entry once, nothing left pending, exit 0 on SIGTERM.
#[test]
fn tls_produce_then_consume_on_both_transports() {
    let server = tls_server(false, ServerCert::Good);
    let ca = path(&server.pki().unwrap().ca());
    let mut admin = server.admin();
    let url = tls_url(&server, "localhost");
    let (status, stdout, stderr) =
        run(&["produce", "--url", &url, "--tls-ca", &ca, "--stream", "s", "--count", "300"]);
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(stdout.starts_with("produced 300 entries to s"), "{stdout}");
    assert_eq!(admin.xlen("s"), 300);

    for (transport, group, host) in [("mio", "g", "127.0.0.1"), ("smol", "g2", "localhost")] {
        let url = tls_url(&server, host);
        let mut args = consume(&url, &["--tls-ca", &ca, "--transport", transport, "--count", "64"]);
        args[6] = group;
        let mut p = Pelican::spawn(&args);
        let ids: BTreeSet<String> =
            (0..300).map(|_| Json::parse(&p.line()).get("id").str().to_string()).collect();
        assert_eq!(ids.len(), 300, "{transport}: each entry once");
        wait_until("XPENDING 0", || admin.xpending_count("s", group) == 0);
        p.stop();
    }
}

/// `pending` over TLS, its URL from `$PELICAN_URL`.
#[test]
fn tls_pending_from_pelican_url() {
    let server = tls_server(false, ServerCert::Good);
    let mut admin = server.admin();
    admin.xadd_n("s", 3, 4);
    admin.call(&["XGROUP", "CREATE", "s", "g", "0"]);
    admin.call(&["XREADGROUP", "GROUP", "g", "alice", "COUNT", "2", "STREAMS", "s", ">"]);
    let ca = path(&server.pki().unwrap().ca());
    let url = tls_url(&server, "127.0.0.1");
    let args = ["pending", "--tls-ca", &ca, "--stream", "s", "--group", "g", "--json"];
    let (status, stdout, stderr) = support::run_env(&args, &[("PELICAN_URL", &url)]);
    assert_eq!(status.code(), Some(0), "{stderr}");
    let report = Json::parse(&stdout);
    assert_eq!(report.get("pending").num(), 2.0);
    assert_eq!(report.get("consumers").arr()[0].get("name").str(), "alice");
}

/// A server that requires a client certificate (`tls-auth-clients yes`): `--tls-cert` and
/// `--tls-key` get every command in.
#[test]
fn mutual_tls_with_a_client_certificate() {
    let server = tls_server(true, ServerCert::Good);
    let pki = server.pki().unwrap();
    let (ca, cert, key) = (path(&pki.ca()), path(&pki.client_cert()), path(&pki.client_key()));
    let mut admin = server.admin();
    let url = tls_url(&server, "localhost");
    let tls = ["--tls-ca", &ca, "--tls-cert", &cert, "--tls-key", &key];
    let mut args = vec!["produce", "--url", &url, "--stream", "s", "--count", "20"];
    args.extend(tls);
    let (status, _, stderr) = run(&args);
    assert_eq!(status.code(), Some(0), "{stderr}");

    for transport in ["mio", "smol"] {
        admin.call(&["XGROUP", "DESTROY", "s", "g"]);
        let mut extra = vec!["--transport", transport];
        extra.extend(tls);
        let mut p = Pelican::spawn(&consume(&url, &extra));
        let ids: BTreeSet<String> =
            (0..20).map(|_| Json::parse(&p.line()).get("id").str().to_string()).collect();
        assert_eq!(ids.len(), 20, "{transport}");
        wait_until("XPENDING 0", || admin.xpending_count("s", "g") == 0);
        p.stop();
    }
    let mut args = vec!["pending", "--url", &url, "--stream", "s", "--group", "g"];
    args.extend(tls);
    let (status, stdout, stderr) = run(&args);
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(stdout.starts_with("stream s, group g: 0 pending"), "{stdout}");
}

/// `demo --url rediss://…`: the tour's workers are mio drivers over TLS.
#[test]
fn demo_over_tls_loses_nothing() {
    let server = tls_server(false, ServerCert::Good);
    let ca = path(&server.pki().unwrap().ca());
    let (status, stdout, stderr) = run(&["demo", "--url", &tls_url(&server, "localhost"), "--tls-ca", &ca]);
    assert!(status.success(), "{status:?}\n{stdout}\n{stderr}");
    assert!(stdout.contains("nothing lost"), "{stdout}");
    assert_eq!(server.admin().call(&["DBSIZE"]).as_int(), Some(0), "the demo deletes its keys");
}

/// Every way TLS can fail, on every client (`pending`'s and `produce`'s blocking one, both
/// transports): exit 1, a message naming the cause, in bounded time. All run at once.
#[test]
fn tls_failures_exit_1_naming_the_cause() {
    let good = tls_server(false, ServerCert::Good);
    let mtls = tls_server(true, ServerCert::Good);
    let expired = tls_server(false, ServerCert::Expired);
    let wrong_name = tls_server(false, ServerCert::WrongName);
    let pki = good.pki().unwrap();
    let ca_of = |s: &Server| path(&s.pki().unwrap().ca());
    let plain_port = format!("rediss://127.0.0.1:{}", good.port());
    let plain_url_to_tls = format!("redis://127.0.0.1:{}", good.tls_port().unwrap());
    let cases: Vec<(String, Vec<String>, &str)> = vec![
        (
            tls_url(&good, "127.0.0.1"),
            vec!["--tls-ca".into(), path(&pki.other_ca())],
            "127.0.0.1 is not trusted",
        ),
        (
            tls_url(&expired, "localhost"),
            vec!["--tls-ca".into(), ca_of(&expired)],
            "out of its validity period",
        ),
        (
            tls_url(&wrong_name, "127.0.0.1"),
            vec!["--tls-ca".into(), ca_of(&wrong_name)],
            "does not name 127.0.0.1",
        ),
        (tls_url(&mtls, "localhost"), vec!["--tls-ca".into(), ca_of(&mtls)], "requires a client certificate"),
        (plain_port, vec!["--tls-ca".into(), path(&pki.ca())], "is it a plaintext port? use redis://"),
        (plain_url_to_tls, vec![], "is it a TLS port? use rediss://"),
        (tls_url(&good, "localhost"), vec!["--tls-ca".into(), "/no/such/ca.pem".into()], "/no/such/ca.pem"),
    ];
    let mut runs = Vec::new();
    for (url, tls, want) in &cases {
        for command in ["pending", "produce", "mio", "smol"] {
            let mut args = match command {
                "pending" => vec!["pending", "--url", url, "--stream", "s", "--group", "g"],
                "produce" => vec!["produce", "--url", url, "--stream", "s", "--count", "5"],
                transport => consume(url, &["--transport", transport]),
            };
            args.extend(tls.iter().map(String::as_str));
            let started = Instant::now();
            let p = Pelican::spawn(&args);
            runs.push((command, *want, started, p));
        }
    }
    for (command, want, started, mut p) in runs {
        let status = p.wait();
        let (stderr, took) = (p.stderr(), started.elapsed());
        assert_eq!(status.code(), Some(1), "{command}, want {want:?}: {stderr}");
        assert!(stderr.contains(want), "{command}: want {want:?} in {stderr}");
        // One line for the failure; before it, consume may tell failed attempts.
        let told = ["pelican: cannot connect: ", "pelican: still waiting for a first connection ("];
        let failure: Vec<&str> = stderr.lines().filter(|l| !told.iter().any(|t| l.starts_with(t))).collect();
        assert!(stderr.starts_with("pelican: ") && failure.len() == 1, "{command}: {stderr}");
        // `took` runs until this wait, after the earlier ones: an upper bound. The slowest
        // give up after 3 unanswered handshakes of 5 s each (the transports' default).
        assert!(took < Duration::from_secs(25), "{command}, {want:?}: took {took:?}");
    }
    assert_eq!(good.admin().call(&["DBSIZE"]).as_int(), Some(0), "nothing produced");
}

/// Misused TLS flags are usage errors (exit 2) naming the fix, before any connection.
#[test]
fn tls_flag_misuse_exits_2() {
    let pelican_url = [("PELICAN_URL", "redis://:secret@127.0.0.1:1")];
    for (args, env, want) in [
        (
            &[
                "pending",
                "--stream",
                "s",
                "--group",
                "g",
                "--url",
                "redis://127.0.0.1:1",
                "--tls-ca",
                "ca.pem",
            ][..],
            &[][..],
            "--tls-ca is for TLS, but the URL is redis:// (plaintext): use rediss://",
        ),
        (
            &[
                "consume",
                "--stream",
                "s",
                "--group",
                "g",
                "--consumer",
                "c",
                "--tls-cert",
                "c.pem",
                "--tls-key",
                "k.pem",
            ],
            &pelican_url,
            "--tls-cert is for TLS, but the URL is redis://",
        ),
        (
            &[
                "produce",
                "--stream",
                "s",
                "--count",
                "1",
                "--url",
                "rediss://127.0.0.1:1",
                "--tls-cert",
                "c.pem",
            ],
            &[],
            "--tls-cert and --tls-key go together",
        ),
        (
            &[
                "consume",
                "--stream",
                "s",
                "--group",
                "g",
                "--consumer",
                "c",
                "--url",
                "rediss://127.0.0.1:1",
                "--tls-key",
                "k.pem",
            ],
            &[],
            "--tls-cert and --tls-key go together",
        ),
        (&["demo", "--tls-ca", "ca.pem"], &[], "--tls-ca needs --url rediss://"),
        (&["demo", "--url", "redis://127.0.0.1:1", "--tls-ca", "ca.pem"], &[], "--tls-ca is for TLS"),
    ] {
        let (status, stdout, stderr) = support::run_env(args, env);
        assert_eq!(status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with(&format!("pelican: {want}")), "{args:?}: {stderr}");
        assert!(stderr.contains("Usage:") && !stderr.contains("secret"), "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
    }
}

// ---- several streams, and clusters ----------------------------------------------------------

/// `args` as `&str`s, for [`Pelican::spawn`] and [`run`].
fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// `consume --url URL --stream S…` (each of `streams`), group `group`, consumer `c`, creating
/// the group at 0, then `extra`.
fn consume_streams(url: &str, streams: &[String], group: &str, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = vec!["consume".into(), "--url".into(), url.into()];
    for stream in streams {
        args.extend(["--stream".into(), stream.clone()]);
    }
    args.extend(["--group", group, "--consumer", "c", "--create-group", "0"].map(String::from));
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// Two streams in one process (one consumer, one connection), one of them with a command
/// that takes 2 s: the other's entries are all handled meanwhile (`--concurrency` is each
/// stream's), each command is told its stream, and the summary counts each stream.
#[test]
fn a_slow_stream_holds_up_no_other() {
    let server = Server::start(Flavor::Valkey81);
    let mut admin = server.admin();
    admin.xadd_n("slow", 1, 4);
    let fast = admin.xadd_n("fast", 5, 4);
    let url = url(&server);
    for (transport, group) in [("mio", "g"), ("smol", "g2")] {
        let dir = Scratch::new("lanes");
        let log = dir.file("log");
        let command = format!(
            "echo \"$PELICAN_STREAM $PELICAN_ID\" >> {log}; [ \"$PELICAN_STREAM\" = fast ] || sleep 2"
        );
        let streams = ["slow".to_string(), "fast".to_string()];
        let extra = ["--exec", &command, "--transport", transport, "--progress"];
        let mut p = Pelican::spawn(&strs(&consume_streams(&url, &streams, group, &extra)));
        let started = Instant::now();
        wait_until("the fast stream handled and acked", || {
            lines_of(&log).len() == 6 && admin.xpending_count("fast", group) == 0
        });
        assert!(started.elapsed() < Duration::from_millis(1800), "{transport}: {:?}", started.elapsed());
        let fast_lines: Vec<String> = fast.iter().map(|id| format!("fast {id}")).collect();
        let logged = lines_of(&log);
        assert_eq!(logged.iter().filter(|l| l.starts_with("fast ")).cloned().collect::<Vec<_>>(), fast_lines);
        p.stop();
        assert_eq!(admin.xpending_count("slow", group), 0, "{transport}: the slow entry finished and acked");
        let stderr = p.stderr();
        assert!(stderr.contains("pelican: 6 handled in "), "{transport}: {stderr}");
        // One consumer reads both: what it acked is told for both together.
        assert!(
            stderr.contains("pelican: 6 handled in ") && stderr.contains(", 6 acked,"),
            "{transport}: {stderr}"
        );
        assert!(stderr.contains("pelican:   slow: 1 handled, 0 failed"), "{transport}: {stderr}");
        assert!(stderr.contains("pelican:   fast: 5 handled, 0 failed"), "{transport}: {stderr}");
        assert_eq!(stderr.matches("left the group").count(), 1, "{transport}: one line for both: {stderr}");
    }
}

/// `count` stream names per master of `cluster`: `{c0}`, `{c1}`… (hash-tagged, so that
/// `--dead-letter '%s:dead'` would share each one's slot), with the master serving each.
fn streams_per_master(cluster: &Cluster, count: usize) -> Vec<(String, SocketAddr)> {
    let masters = cluster.masters();
    let ranges = cluster.slot_ranges();
    let mut picked: Vec<(String, SocketAddr)> = Vec::new();
    for i in 0.. {
        let name = format!("{{c{i}}}");
        let slot = cluster.slot_of(&name);
        let owner = ranges.iter().find(|r| r.contains(slot)).expect("every slot is served").master;
        if picked.iter().filter(|(_, o)| *o == owner).count() < count {
            picked.push((name, owner));
        }
        if picked.len() == count * masters.len() {
            return picked;
        }
    }
    unreachable!()
}

/// The story on one flavor: `produce` to six streams (two per master) through a replica's
/// URL, one `consume` with the six `--stream`s and that URL takes each entry once on both
/// transports, nothing left pending, its stats per stream summing to the totals; `pending`
/// through the replica sees a stream's pending entries; and the demo runs through it.
fn many_streams_through_a_replica(flavor: Flavor) {
    let cluster = Cluster::start(flavor);
    let picked = streams_per_master(&cluster, 2);
    let streams: Vec<String> = picked.iter().map(|(name, _)| name.clone()).collect();
    let replica = cluster.replicas()[0];
    let url = format!("redis://{replica}");
    let mut want: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (i, (stream, owner)) in picked.iter().enumerate() {
        let count = (10 + 5 * i).to_string();
        let (status, stdout, stderr) =
            run(&["produce", "--url", &url, "--stream", stream, "--count", &count]);
        assert_eq!(status.code(), Some(0), "{flavor} {stream}: {stderr}");
        assert!(stdout.starts_with(&format!("produced {count} entries to {stream}")), "{stdout}");
        let ids = Admin::connect(*owner).xrange(stream).into_iter().map(|(id, _)| id).collect();
        want.insert(stream.clone(), ids);
    }
    let total: usize = want.values().map(BTreeSet::len).sum();
    assert_eq!(total, 6 * 10 + 5 * 15, "{flavor}: every entry on its master");

    let dir = Scratch::new("cluster");
    for (transport, group) in [("mio", "g"), ("smol", "g2")] {
        let stats = dir.file(&format!("{transport}.json"));
        let extra = ["--transport", transport, "--stats-json", &stats, "--count", "7"];
        let mut p = Pelican::spawn(&strs(&consume_streams(&url, &streams, group, &extra)));
        let mut got: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for _ in 0..total {
            let line = Json::parse(&p.line());
            let fresh =
                got.entry(line.get("stream").str().into()).or_default().insert(line.get("id").str().into());
            assert!(fresh, "{flavor} {transport}: each entry once");
        }
        assert_eq!(got, want, "{flavor} {transport}: every entry of every stream");
        wait_until("nothing pending on the masters", || {
            picked.iter().all(|(stream, owner)| Admin::connect(*owner).xpending_count(stream, group) == 0)
        });
        p.stop();
        let stats = Json::parse(&std::fs::read_to_string(&stats).expect("stats file"));
        assert_eq!(stats.get("handled").num(), total as f64, "{flavor} {transport}");
        assert_eq!(stats.get("acked").num(), total as f64, "{flavor} {transport}");
        let Json::Obj(per_stream) = stats.get("streams") else { panic!("streams: {stats:?}") };
        let names: Vec<&str> = per_stream.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, strs(&streams), "{flavor} {transport}: one member per stream, in order");
        for (name, counts) in per_stream {
            assert_eq!(counts.get("handled").num(), want[name].len() as f64, "{flavor} {transport} {name}");
            assert_eq!(counts.get("acked").num(), want[name].len() as f64, "{flavor} {transport} {name}");
            // A replica serves no slot, but it told where each stream is served (CLUSTER
            // SLOTS): every lane started at its master, no redirect needed.
            assert_eq!(counts.get("moved").num(), 0.0, "{flavor} {transport} {name}: {counts:?}");
        }
        let sum = |field: &str| per_stream.iter().map(|(_, c)| c.get(field).num()).sum::<f64>();
        for field in ["handled", "acked", "new", "moved", "reconnects"] {
            assert_eq!(sum(field), stats.get(field).num(), "{flavor} {transport}: {field} sums");
        }
    }

    // Two entries of the first stream pending on alice; `pending` asks through the replica.
    let (first, owner) = &picked[0];
    let mut admin = Admin::connect(*owner);
    admin.xadd_n(first, 3, 4);
    admin.call(&["XREADGROUP", "GROUP", "g", "alice", "COUNT", "2", "STREAMS", first, ">"]);
    let args =
        ["pending", "--url", &url, "--stream", first, "--stream", &streams[1], "--group", "g", "--json"];
    let (status, stdout, stderr) = run(&args);
    assert_eq!(status.code(), Some(0), "{flavor}: {stderr}");
    let reports: Vec<Json> = stdout.lines().map(Json::parse).collect();
    assert_eq!(reports.len(), 2, "{flavor}: a line per stream: {stdout}");
    assert_eq!(reports[0].get("stream").str(), first);
    assert_eq!(reports[0].get("pending").num(), 2.0, "{flavor}");
    assert_eq!(reports[0].get("consumers").arr()[0].get("name").str(), "alice");
    assert_eq!(reports[1].get("stream").str(), streams[1]);
    assert_eq!(reports[1].get("pending").num(), 0.0, "{flavor}");

    // The demo's tour, its workers and its bookkeeping through the replica too.
    let (status, stdout, stderr) = run(&["demo", "--url", &url]);
    assert!(status.success(), "{flavor}: {status:?}\n{stdout}\n{stderr}");
    assert!(stdout.contains("nothing lost"), "{flavor}: {stdout}");
    demo_numbers_add_up(&stdout);
}

/// [`many_streams_through_a_replica`] on Redis 7.0, Valkey 8.1 and Redis 6.2 at once.
#[test]
fn one_consumer_of_many_streams_through_any_cluster_node() {
    let runs: Vec<_> = [Flavor::Redis70, Flavor::Valkey81, Flavor::Redis62]
        .into_iter()
        .map(|flavor| (flavor, std::thread::spawn(move || many_streams_through_a_replica(flavor))))
        .collect();
    for (flavor, run) in runs {
        if let Err(panic) = run.join() {
            eprintln!("{flavor} failed");
            std::panic::resume_unwind(panic);
        }
    }
}

/// A dead-letter stream in another slot than its streams (`b` for `a` and `{ok}`): refused
/// (CROSSSLOT) at the start, by the check each lane makes before it reads anything, not at
/// the first dead letter (days later, maybe): pelican exits 1 naming both streams with the
/// hash-tag advice, and nothing was read or handled.
#[test]
fn a_dead_letter_stream_in_another_slot_is_refused_at_the_start() {
    let cluster = Cluster::start(Flavor::Redis70);
    assert_ne!(cluster.slot_of("a"), cluster.slot_of("b"));
    let ok = "{ok}";
    cluster.admin_for("a").xadd_n("a", 1, 4);
    let mut ok_admin = cluster.admin_for(ok);
    ok_admin.xadd_n(ok, 20, 4);
    let url = format!("redis://{}", cluster.masters()[0]);
    let streams = ["a".to_string(), ok.to_string()];
    for (transport, group) in [("mio", "g"), ("smol", "g2")] {
        let dir = Scratch::new("crossslot");
        let (started, finished) = (dir.file("started"), dir.file("finished"));
        let command = format!(
            "[ \"$PELICAN_STREAM\" = a ] && exit 1; echo \"$PELICAN_ID\" >> {started}; sleep 0.2; \
             echo \"$PELICAN_ID\" >> {finished}"
        );
        let extra = [
            "--exec",
            &command,
            "--transport",
            transport,
            "--beat-ms",
            "100",
            "--min-idle-ms",
            "300",
            "--max-deliveries",
            "1",
            "--dead-letter",
            "b",
        ];
        let (status, _, stderr) = run(&strs(&consume_streams(&url, &streams, group, &extra)));
        assert_eq!(status.code(), Some(1), "{transport}: {stderr}");
        let line = stderr.lines().find(|l| l.contains("CROSSSLOT")).unwrap_or_else(|| panic!("{stderr}"));
        // Whichever lane's check answers first stops the other (or both are named).
        let named = ["pelican: stream a: ", "pelican: stream {ok}: ", "pelican: streams a, {ok}: "];
        assert!(named.iter().any(|n| line.starts_with(n)), "{transport}: {line}");
        assert!(line.contains("the check that dead letters can be moved"), "{transport}: {line}");
        assert!(line.contains("give them a common hash tag, e.g. {orders} and {orders}:dead"), "{line}");
        assert!(line.contains("--dead-letter '%s:dead'"), "{transport}: {line}");
        assert_eq!(
            (lines_of(&started), lines_of(&finished)),
            (vec![], vec![]),
            "{transport}: nothing handled"
        );
        // The {ok} lane may be stopped before it created its group: nothing read either.
        let read = if ok_admin.group_exists(ok, group) { ok_admin.xpending_all(ok, group).len() } else { 0 };
        assert_eq!(read, 0, "{transport}: nothing read");
        assert_eq!(cluster.admin_for("b").xlen("b"), 0, "{transport}: nothing moved");
    }
}

/// `pending` and `produce` through the node a stream's slot is leaving: while the slot is
/// half-migrated (the source answers ASK for the moved key) and once it has moved (MOVED).
#[test]
fn pending_and_produce_follow_a_slot_migration() {
    let cluster = Cluster::start(Flavor::Redis70);
    let stream = "{m}";
    let source = cluster.owner_of(stream);
    let target = cluster.masters().into_iter().find(|&m| m != source).expect("another master");
    let mut admin = Admin::connect(source);
    admin.xadd_n(stream, 3, 4);
    admin.call(&["XGROUP", "CREATE", stream, "g", "0"]);
    admin.call(&["XREADGROUP", "GROUP", "g", "alice", "COUNT", "2", "STREAMS", stream, ">"]);
    let url = format!("redis://{source}");
    let pending = || {
        let (status, stdout, stderr) =
            run(&["pending", "--url", &url, "--stream", stream, "--group", "g", "--json"]);
        assert_eq!(status.code(), Some(0), "{stderr}");
        Json::parse(&stdout).get("pending").num()
    };
    let produce = |count: &str| {
        let (status, stdout, stderr) = run(&["produce", "--url", &url, "--stream", stream, "--count", count]);
        assert_eq!(status.code(), Some(0), "{stderr}");
        assert!(stdout.starts_with(&format!("produced {count} entries to {stream}")), "{stdout}");
    };
    let mut on_target = Admin::connect(target);

    let migration = cluster.begin_migration(cluster.slot_of(stream), target);
    assert_eq!(migration.keys_moved(), 1);
    assert!(admin.cmd(&["XLEN", stream]).is_error_with("ASK"), "the source sends clients on");
    assert_eq!(pending(), 2.0, "ASK followed");
    produce("1200");
    on_target.call(&["ASKING"]);
    assert_eq!(on_target.xlen(stream), 1203, "every entry on the node importing the slot");

    migration.finish();
    assert!(admin.cmd(&["XLEN", stream]).is_error_with("MOVED"));
    assert_eq!(pending(), 2.0, "MOVED followed");
    produce("1500");
    assert_eq!(on_target.xlen(stream), 2703);
}

/// `produce` writes what a test needs: fields of the user's (`{n}` numbered), a key spread
/// over N values that `consume --order-by key` then keeps in order, or the entries of a
/// JSON lines file (or stdin), poison entries included; a bad line adds nothing.
#[test]
fn produce_makes_fields_keys_and_entries_from_json_lines() {
    let server = Server::start(Flavor::Valkey81);
    let url = format!("redis://{}", server.addr());
    let mut admin = server.admin();
    let (status, stdout, stderr) = run(&[
        "produce",
        "--url",
        &url,
        "--stream",
        "made",
        "--count",
        "6",
        "--size",
        "2",
        "--field",
        "type=order",
        "--field",
        "id=o-{n}",
        "--keys",
        "3",
    ]);
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(
        stdout.starts_with("produced 6 entries to made (2-byte values, with type, id, key (k0…k2)) in "),
        "{stdout}"
    );
    let fields: Vec<Vec<(String, String)>> = admin
        .xrange("made")
        .into_iter()
        .map(|(_, f)| f.into_iter().map(|(k, v)| (k, String::from_utf8(v).unwrap())).collect())
        .collect();
    let pair = |k: &str, v: &str| (k.to_string(), v.to_string());
    assert_eq!(fields[4], [pair("type", "order"), pair("id", "o-5"), pair("key", "k1"), pair("p", "xx")]);
    let keys: Vec<&str> = fields.iter().map(|f| f[2].1.as_str()).collect();
    assert_eq!(keys, ["k0", "k1", "k2", "k0", "k1", "k2"]);

    let scratch = Scratch::new("produce-from");
    let file = scratch.file("in.jsonl");
    let lines = "{\"order\": \"o-1\", \"amount\": 12.5}\n\n{\"order\": \"o-2\", \"amount\": \"not a number\", \"tags\": [\"a\", 1]}\n";
    std::fs::write(&file, lines).unwrap();
    let (status, stdout, stderr) = run(&["produce", "--url", &url, "--stream", "lines", "--from", &file]);
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(stdout.starts_with(&format!("produced 2 entries to lines (from {file}) in ")), "{stdout}");
    let entries = admin.xrange("lines");
    let second: Vec<(String, String)> =
        entries[1].1.iter().map(|(k, v)| (k.clone(), String::from_utf8(v.clone()).unwrap())).collect();
    assert_eq!(second, [pair("order", "o-2"), pair("amount", "not a number"), pair("tags", "[\"a\",1]")]);

    // From stdin.
    let mut child = std::process::Command::new(support::BIN)
        .args(["produce", "--url", &url, "--stream", "piped", "--from", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child.stdin.take().unwrap().write_all(b"{\"a\": \"1\"}\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("produced 1 entry to piped (from stdin)"));
    assert_eq!(admin.xlen("piped"), 1);

    // A bad line: told with its place, exit 2, nothing added.
    std::fs::write(&file, "{\"a\": \"1\"}\n[2]\n").unwrap();
    let (status, _, stderr) = run(&["produce", "--url", &url, "--stream", "bad", "--from", &file]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr,
        format!("pelican: --from {file}, line 2: invalid type: sequence, expected a JSON object: {{\"field\": \"value\", …}}\n")
    );
    assert_eq!(admin.xlen("bad"), 0);
    let (status, _, stderr) =
        run(&["produce", "--url", &url, "--stream", "bad", "--from", &file, "--count", "1"]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("'--from <FILE>' cannot be used with '--count <N>'"), "{stderr}");
}

/// `--stream-pattern`: nothing matches at first (told, looked for again); streams created
/// later join within two rescans, each with its group made, all on one connection; a key that
/// does not match, or is not a stream, is not read.
#[test]
fn a_pattern_finds_streams_made_after_the_start() {
    for flavor in [Flavor::Redis62, Flavor::Valkey81] {
        let server = Server::start(flavor);
        let mut admin = server.admin();
        admin.cmd(&["SET", "tenant:not-a-stream", "x"]);
        admin.xadd_n("other:1", 2, 4);
        let url = url(&server);
        for transport in ["mio", "smol"] {
            let group = format!("g-{transport}");
            let args = [
                "consume",
                "--url",
                &url,
                "--stream-pattern",
                "tenant:*",
                "--rescan-ms",
                "500",
                "--beat-ms",
                "200",
                "--group",
                &group,
                "--consumer",
                "c",
                "--create-group",
                "0",
                "--transport",
                transport,
            ];
            let mut p = Pelican::spawn(&args);
            wait_until("told that nothing matches", || p.stderr().contains("no stream matches tenant:* yet"));
            for (stream, n) in [("tenant:a", 3), ("tenant:b", 2)] {
                let ids = admin.xadd_n(stream, n, 4);
                let added = Instant::now();
                for id in &ids {
                    let line = p.line();
                    assert!(line.contains(&format!("\"stream\":\"{stream}\",\"id\":\"{id}\"")), "{line}");
                }
                // Within two rescans: found at the next, joined once the parked read (a beat at
                // most) returns.
                let took = added.elapsed();
                assert!(
                    took < Duration::from_millis(1000),
                    "{flavor:?} {transport}: {stream} read after {took:?}"
                );
                assert!(admin.group_exists(stream, &group), "its group made");
            }
            assert_eq!(admin.client_ids_by_name(&format!("pelican:tenant:a:{group}:c")).len(), 1);
            p.stop();
            assert_eq!(p.try_line(), None, "nothing else read");
            assert!(!admin.group_exists("other:1", &group));
            for stream in ["tenant:a", "tenant:b"] {
                assert_eq!(admin.xpending_count(stream, &group), 0);
            }
            admin.cmd(&["DEL", "tenant:a", "tenant:b"]);
        }
    }
}

/// `--stream-pattern` past the most streams one connection reads: 4,096 found at the start
/// fill one, every entry read; a stream made later is told, not read (it was dropped without
/// a word), and the others go on.
#[test]
fn a_pattern_past_the_most_streams_says_which_is_not_read() {
    let server = Server::start(Flavor::Redis70);
    let mut admin = server.admin();
    let most = pelican::MAX_STREAMS.to_string();
    let make = "for i = 0, tonumber(ARGV[1]) - 1 do redis.call('XADD', 'm:' .. i, '*', 'a', '1') end";
    admin.cmd(&["EVAL", make, "0", &most]);
    let url = url(&server);
    for transport in ["mio", "smol"] {
        let group = format!("g-{transport}");
        let args = [
            "consume",
            "--url",
            &url,
            "--stream-pattern",
            "m:*",
            "--rescan-ms",
            "200",
            "--group",
            &group,
            "--consumer",
            "c",
            "--create-group",
            "0",
            "--transport",
            transport,
        ];
        let mut p = Pelican::spawn(&args);
        // One entry each, and m:7's added by the run before.
        for _ in 0..pelican::MAX_STREAMS + usize::from(transport == "smol") {
            p.line();
        }
        let over = format!("m:{most}");
        admin.xadd_n(&over, 1, 4);
        let told = format!(
            "stream {over} matches --stream-pattern, but every connection reads {most} streams already, the \
             most one reads; restart pelican to read it"
        );
        wait_until("the stream past the most told", || p.stderr().contains(&told));
        // The others go on.
        let id = admin.xadd_n("m:7", 1, 4).remove(0);
        assert!(p.line().contains(&format!("\"stream\":\"m:7\",\"id\":\"{id}\"")), "{transport}");
        p.stop();
        assert_eq!(p.try_line(), None, "{transport}: the stream past the most not read");
        assert!(!admin.group_exists(&over, &group), "{transport}");
        admin.cmd(&["DEL", &over]);
    }
}

/// `--stream-pattern --create-group` without an ID: a stream found later has its group made
/// from its first entry, so the entries written to it before the rescan found it are read
/// (with `$`, as on a `--stream`, they were skipped without a word); one found at the start
/// is read whole too. An ID given is the start of every group.
#[test]
fn a_pattern_reads_a_stream_found_later_from_its_first_entry() {
    let server = Server::start(Flavor::Redis70);
    let mut admin = server.admin();
    let url = url(&server);
    let mut early = admin.xadd_n("late:a", 2, 4);
    for transport in ["mio", "smol"] {
        let group = format!("g-{transport}");
        let args = [
            "consume",
            "--url",
            &url,
            "--stream-pattern",
            "late:*",
            "--rescan-ms",
            "300",
            "--beat-ms",
            "200",
            "--group",
            &group,
            "--consumer",
            "c",
            "--create-group",
            "--transport",
            transport,
        ];
        let mut p = Pelican::spawn(&args);
        let id_of =
            |line: String| line.split("\"id\":\"").nth(1).and_then(|r| r.split('"').next()).map(String::from);
        let mut read: Vec<String> = (0..early.len()).filter_map(|_| id_of(p.line())).collect();
        read.sort();
        early.sort();
        assert_eq!(read, early, "the streams found at the start, read whole");
        // Written in one go, before the next rescan can find the stream.
        let ids = admin.xadd_n(&format!("late:{transport}"), 4, 4);
        for id in &ids {
            let line = p.line();
            assert!(line.contains(&format!("\"stream\":\"late:{transport}\",\"id\":\"{id}\"")), "{line}");
        }
        p.stop();
        assert_eq!(p.try_line(), None, "nothing else read");
        early.extend(ids);
    }
    // An ID given is every group's start, the later streams' too.
    let args = [
        "consume",
        "--url",
        &url,
        "--stream-pattern",
        "late:*",
        "--rescan-ms",
        "300",
        "--beat-ms",
        "200",
        "--group",
        "g-dollar",
        "--consumer",
        "c",
        "--create-group",
        "$",
    ];
    let mut p = Pelican::spawn(&args);
    wait_until("the group made at $", || admin.group_exists("late:a", "g-dollar"));
    admin.xadd_n("late:z", 3, 4);
    wait_until("late:z found", || admin.group_exists("late:z", "g-dollar"));
    let after = admin.xadd_n("late:z", 1, 4);
    assert!(p.line().contains(&format!("\"id\":\"{}\"", after[0])), "only what came after");
    p.stop();
    assert_eq!(p.try_line(), None, "nothing else read");
}
