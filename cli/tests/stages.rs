//! Exactly-once stages from the command line, against real servers: a `--pipe` handler whose
//! answers carry their output (`"emit"`, `"writes"`), killed mid-run, every input written
//! once; counts per key in a hash (`"hincrby"`), a field holding a word or about to
//! overflow refusing its entry's whole commit; a malformed answer failing its entry with
//! nothing written; `--exec … --emit-to`
//! committing what the command prints, a key of another type refused per entry, output that
//! is not JSON failing the entry.

mod support;

use std::process::Command;

use pelican_tests::admin::Admin;
use pelican_tests::server::{Flavor, Server};
use support::{wait_until, Json, Pelican, Scratch};

fn handler() -> String {
    let ran = Command::new("python3").arg("--version").output();
    assert!(ran.is_ok_and(|o| o.status.success()), "these tests need `python3` on PATH for examples/pipe/");
    format!("python3 {}/../examples/pipe/handler.py", env!("CARGO_MANIFEST_DIR"))
}

fn spawn(url: &str, transport: &str, extra: &[&str], env: &[(&str, &str)]) -> Pelican {
    Pelican::spawn_env(&support::consume(url, transport, extra), env)
}

fn all_acked(admin: &mut Admin, last: &str) -> bool {
    let info = format!("{:?}", admin.call(&["XINFO", "GROUPS", "s"]));
    info.contains(last) && admin.xpending_count("s", "g") == 0
}

/// 600 entries through the example handler emitting each one's output, the handler killed
/// once mid-run (its outstanding entries go to the next one): each input in `out` once, the
/// counter at 600, every entry committed.
#[test]
fn a_pipe_stage_writes_each_output_once() {
    for (flavor, transport) in
        [(Flavor::Redis70, "mio"), (Flavor::Valkey81, "smol"), (Flavor::Redis62, "mio")]
    {
        let server = Server::start(flavor);
        let mut admin = server.admin();
        let ids = admin.xadd_n("s", 600, 8);
        let dir = Scratch::new("stage");
        let (pid_file, stats) = (dir.file("pid"), dir.file("stats.json"));
        let url = format!("redis://{}", server.addr());
        let extra = ["--pipe", &handler(), "--concurrency", "8", "--stats-json", &stats];
        let env =
            [("HANDLER_EMIT", "out"), ("HANDLER_SLOW_MS", "5"), ("HANDLER_PID_FILE", pid_file.as_str())];
        let mut p = spawn(&url, transport, &extra, &env);
        wait_until("some outputs", || admin.xlen("out") >= 100);
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        assert!(Command::new("kill").args(["-KILL", &pid]).status().unwrap().success());
        wait_until("all acked", || all_acked(&mut admin, ids.last().unwrap()));
        p.stop();
        let got = admin.count_by_field("out", "input");
        assert_eq!(got.len(), 600, "{flavor} {transport}: every input");
        assert!(got.values().all(|n| *n == 1), "{flavor} {transport}: written twice: {got:?}");
        assert_eq!(admin.call(&["GET", "out:count"]).as_text().as_deref(), Some("600"));
        let s = Json::parse(&std::fs::read_to_string(&stats).unwrap());
        assert_eq!(s.get("committed").num(), 600.0, "{flavor} {transport}: {}", p.stderr());
        assert_eq!(s.get("commits_fenced").num(), 0.0);
    }
}

/// Each answer counts its entry's customer in a hash (`"hincrby"`) with its output and the
/// total: 40 entries over three customers, each counted once; two customers' fields hold
/// what cannot be added to (a word, a number 1 short of the limit): their entries' commits
/// are refused whole — no output, no total, no count — and set aside in the dead-letter
/// stream with the refusal's text.
#[test]
fn a_pipe_stage_counts_per_key_in_a_hash() {
    for (flavor, transport) in [(Flavor::Redis62, "mio"), (Flavor::Redis810, "smol")] {
        let server = Server::start(flavor);
        let mut admin = server.admin();
        admin.call(&["HSET", "out:by-customer", "word", "seven", "full", "9223372036854775807"]);
        let customers = ["c1", "c2", "c3", "c1", "word", "c2", "c1", "full"];
        let mut good = 0;
        for i in 0..40 {
            let customer = customers[i % customers.len()];
            let n = i.to_string();
            admin.xadd("s", &[("customer", customer), ("n", n.as_str())]);
            good += usize::from(customer.starts_with('c'));
        }
        let url = format!("redis://{}", server.addr());
        let extra = ["--pipe", &handler(), "--concurrency", "4", "--dead-letter", "dead"];
        let env = [("HANDLER_EMIT", "out"), ("HANDLER_COUNT_BY", "customer")];
        let mut p = spawn(&url, transport, &extra, &env);
        wait_until("every entry settled", || admin.xlen("out") == good as i64 && admin.xlen("dead") == 10);
        wait_until("nothing pending", || admin.xpending_count("s", "g") == 0);
        p.stop();
        let mut count = |field: &str| admin.call(&["HGET", "out:by-customer", field]).as_text();
        assert_eq!(
            [count("c1"), count("c2"), count("c3")],
            [Some("15".into()), Some("10".into()), Some("5".into())],
            "{flavor} {transport}: {}",
            p.stderr()
        );
        assert_eq!(count("word").as_deref(), Some("seven"), "refused whole");
        assert_eq!(count("full").as_deref(), Some("9223372036854775807"), "refused whole");
        assert_eq!(admin.call(&["GET", "out:count"]).as_text(), Some(good.to_string()), "no total for them");
        let dead = admin.xrange("dead");
        let field = |e: &pelican_tests::admin::StreamEntry, name: &str| {
            let value = e.1.iter().find(|(f, _)| f == name).map(|(_, v)| v.clone()).unwrap_or_default();
            String::from_utf8_lossy(&value).into_owned()
        };
        for entry in &dead {
            assert_eq!(field(entry, "pelican-reason"), "commit-refused");
            let why = field(entry, "pelican-error");
            match field(entry, "customer").as_str() {
                "word" => assert!(why.contains("field word does not hold an integer"), "{why}"),
                "full" => assert!(why.contains("HINCRBY out:by-customer full would overflow"), "{why}"),
                other => panic!("{other} set aside: {why}"),
            }
        }
    }
}

/// An answer whose output is malformed (a number for a field value) fails its entry: told
/// on stderr, nothing of it written (not its counter either), the entry left pending; the
/// others commit.
#[test]
fn a_malformed_commit_answer_fails_its_entry_and_writes_nothing() {
    let server = Server::start(Flavor::Redis810);
    let mut admin = server.admin();
    admin.xadd_n("s", 5, 8);
    let bad = admin.xadd("s", &[("bad", "1")]);
    let url = format!("redis://{}", server.addr());
    let env = [("HANDLER_EMIT", "out"), ("HANDLER_BAD_EMIT", "bad")];
    let mut p = spawn(&url, "mio", &["--pipe", &handler()], &env);
    wait_until("the good ones", || admin.xlen("out") == 5);
    wait_until("the bad one told", || p.stderr().contains("field \"input\" is not a string"));
    p.stop();
    let err = p.stderr();
    assert!(err.contains(&format!("entry {bad}: emit[0]: field \"input\" is not a string")), "{err}");
    assert!(err.contains("the entry failed, nothing written"), "{err}");
    assert_eq!(admin.call(&["GET", "out:count"]).as_text().as_deref(), Some("5"));
    // Pending still (released for any consumer's next read on 8.10, which has XNACK).
    let pending = admin.xpending_all("s", "g");
    assert_eq!(pending.iter().map(|p| p.0.as_str()).collect::<Vec<_>>(), [bad.as_str()]);
}

/// `--exec` with `--emit-to`: each JSON line the command prints becomes an entry of the
/// output stream, committed with the ack. Onto a key of another type, the commit is refused,
/// nothing written; without a dead-letter stream to set such entries aside pelican stops
/// (exit 1, naming the entry and `--dead-letter`) rather than run the command again at every
/// `--min-idle-ms`; the entries stay pending. Output that is not JSON fails the entry.
#[test]
fn exec_emit_to_commits_what_the_command_prints() {
    for (flavor, transport) in [(Flavor::Redis70, "smol"), (Flavor::Redis810, "mio")] {
        let server = Server::start(flavor);
        let mut admin = server.admin();
        let ids = admin.xadd_n("s", 20, 8);
        let url = format!("redis://{}", server.addr());
        let two_lines = r#"echo "{\"input\":\"$PELICAN_ID\",\"n\":\"1\"}"; echo; echo "{\"input\":\"$PELICAN_ID\",\"n\":\"2\"}""#;
        let mut p =
            spawn(&url, transport, &["--exec", two_lines, "--emit-to", "out", "--concurrency", "4"], &[]);
        wait_until("all acked", || all_acked(&mut admin, ids.last().unwrap()));
        p.stop();
        let got = admin.count_by_field("out", "input");
        assert_eq!(got.len(), 20, "{flavor} {transport}: {}", p.stderr());
        assert!(got.values().all(|n| *n == 2), "two lines each: {got:?}");

        admin.call(&["HSET", "a-hash", "f", "v"]);
        let more = admin.xadd_n("s", 3, 8);
        let mut p = spawn(&url, transport, &["--exec", two_lines, "--emit-to", "a-hash"], &[]);
        assert_eq!(p.wait().code(), Some(1), "{}", p.stderr());
        let err = p.stderr();
        assert!(
            err.contains(&format!("the commit of entry {} was refused, nothing written: WRONGTYPE", more[0])),
            "{err}"
        );
        assert!(err.contains("(--dead-letter KEY sets such entries aside)"), "{err}");
        assert_eq!(admin.xpending_count("s", "g"), 3);
        assert_eq!(admin.call(&["HLEN", "a-hash"]).as_int(), Some(1));

        // Its second life drains the three: what it prints now is not JSON.
        let mut p = spawn(&url, transport, &["--exec", "echo done", "--emit-to", "out"], &[]);
        wait_until("the failure told", || p.stderr().contains("line 1 is not JSON"));
        p.stop();
        assert_eq!(admin.xlen("out"), 40, "nothing more written");
        assert_eq!(admin.xpending_count("s", "g"), more.len() as i64);
    }
}
