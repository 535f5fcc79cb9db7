//! `pelican consume --pipe CMD` against real servers, with the Python example handler
//! (`examples/pipe/handler.py`): every entry acked once through one long-running handler, out
//! of order too, in batches and one line each; the handler killed mid-run and started again,
//! nothing lost; pelican killed mid-run (kill -9) and started again, nothing lost; a handler
//! that never answers timed out, retried, then dead-lettered; bad lines told and ignored; a
//! handler that cannot start; a stop that waits for the outstanding answers; a batch job that
//! ends once drained.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use pelican_tests::admin::Admin;
use pelican_tests::server::{Flavor, Server};
use support::{lines_of, run, wait_until, Json, Pelican, Scratch};

/// The example handler, run by `sh -c`.
fn handler() -> String {
    need("python3");
    format!("python3 {}/../examples/pipe/handler.py", env!("CARGO_MANIFEST_DIR"))
}

/// Fails loudly, naming it, if `program` (an example's interpreter) cannot be run.
fn need(program: &str) {
    let ran = Command::new(program).arg("--version").output();
    assert!(ran.is_ok_and(|o| o.status.success()), "these tests need `{program}` on PATH for examples/pipe/");
}

/// `consume` of stream `s` as consumer `c` of group `g` (created at 0) on `transport`, with
/// `--pipe pipe` and `extra`.
fn consume(url: &str, transport: &str, pipe: &str, extra: &[&str]) -> Vec<String> {
    handled_by(url, transport, "--pipe", pipe, extra)
}

/// [`consume`] with `flag CMD` (`--pipe` or `--exec`).
fn handled_by(url: &str, transport: &str, flag: &str, command: &str, extra: &[&str]) -> Vec<String> {
    let mut args = support::consume(url, transport, &[flag, command]);
    args.extend_from_slice(extra);
    args.into_iter().map(String::from).collect()
}

fn spawn(args: &[String], env: &[(&str, &str)]) -> Pelican {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Pelican::spawn_env(&args, env)
}

/// Every entry up to `last` delivered to the group, and none pending: all acked.
fn all_acked(admin: &mut Admin, last: &str) -> bool {
    all_acked_on(admin, "s", last)
}

/// [`all_acked`] on stream `key`.
fn all_acked_on(admin: &mut Admin, key: &str, last: &str) -> bool {
    let info = format!("{:?}", admin.call(&["XINFO", "GROUPS", key]));
    info.contains(last) && admin.xpending_count(key, "g") == 0
}

/// Thousands of entries through the example, in order and (64 outstanding, answers held and
/// given newest first) out of order, in batches (what pelican offers) and one line each (the
/// offer taken out of its environment): each acked once, the PEL empty, the stats agreeing.
#[test]
fn every_entry_is_acked_once_in_order_or_not() {
    let (batches, lines) = (handler(), format!("env -u PELICAN_PIPE_PROTOCOL {}", handler()));
    for (flavor, transport, pipe, extra, env) in [
        (Flavor::Redis70, "mio", &batches, vec![], vec![]),
        (Flavor::Redis70, "smol", &batches, vec![], vec![]),
        (Flavor::Valkey81, "mio", &lines, vec!["--concurrency", "64"], vec![("HANDLER_SHUFFLE", "7")]),
        (Flavor::Valkey81, "smol", &batches, vec!["--concurrency", "64"], vec![("HANDLER_SHUFFLE", "7")]),
        (
            Flavor::Redis810,
            "mio",
            &batches,
            vec!["--concurrency", "64"],
            vec![("HANDLER_SHUFFLE", "7"), ("HANDLER_SLOW_MS", "2")],
        ),
    ] {
        let server = Server::start(flavor);
        let mut admin = server.admin();
        // Not a multiple of 8: the last answers held back are given without more entries.
        let n = 3001;
        let last = admin.xadd_n("s", n, 8).pop().unwrap();
        let dir = Scratch::new("pipe");
        let stats = dir.file("stats.json");
        let url = format!("redis://{}", server.addr());
        let mut args = consume(&url, transport, pipe, &extra);
        args.extend(["--stats-json".to_string(), stats.clone()]);
        let mut p = spawn(&args, &env);
        wait_until("all acked", || all_acked(&mut admin, &last));
        p.stop();
        let s = Json::parse(&std::fs::read_to_string(&stats).unwrap());
        assert_eq!(s.get("acked").num() as usize, n, "{flavor} {transport}: {}", p.stderr());
        assert_eq!(s.get("handled").num() as usize, n);
        assert_eq!(s.get("failed").num(), 0.0);
        assert!(!p.stderr().contains("--pipe:"), "nothing told about the answers: {}", p.stderr());
        if extra.is_empty() {
            // A handler that takes batches: twice --count in hand by default, not one.
            let most = s.get("in_hand_max").num();
            assert!(most > 1.0 && most <= 200.0, "{flavor} {transport}: {most}");
        }
    }
}

/// The handler killed with SIGKILL mid-run: its outstanding entries stay pending, it is
/// started again (told on stderr), and every entry ends acked, the PEL empty.
#[test]
fn a_killed_handler_is_started_again_and_nothing_is_lost() {
    for (flavor, transport) in [(Flavor::Redis70, "mio"), (Flavor::Valkey81, "smol")] {
        killed_handler(flavor, transport);
    }
}

fn killed_handler(flavor: Flavor, transport: &str) {
    let server = Server::start(flavor);
    let mut admin = server.admin();
    let last = admin.xadd_n("s", 400, 8).pop().unwrap();
    let dir = Scratch::new("pipe-kill");
    let pid_file = dir.file("pid");
    let url = format!("redis://{}", server.addr());
    let stats = dir.file("stats.json");
    let extra = ["--concurrency", "8", "--min-idle-ms", "1000", "--stats-json", &stats];
    let args = consume(&url, transport, &handler(), &extra);
    let mut p = spawn(&args, &[("HANDLER_SLOW_MS", "20"), ("HANDLER_PID_FILE", &pid_file)]);
    wait_until("the handler's pid", || std::fs::read_to_string(&pid_file).is_ok_and(|s| !s.is_empty()));
    let first = std::fs::read_to_string(&pid_file).unwrap();
    wait_until("entries outstanding", || admin.group_exists("s", "g") && admin.xpending_count("s", "g") > 0);
    assert!(Command::new("kill").args(["-KILL", &first]).status().unwrap().success());
    wait_until("a second handler", || {
        std::fs::read_to_string(&pid_file).is_ok_and(|s| !s.is_empty() && s != first)
    });
    wait_until("all acked", || all_acked(&mut admin, &last));
    p.stop();
    let err = p.stderr();
    // sh -c may run the handler as its child: then sh tells the SIGKILL as status 137.
    assert!(
        err.contains("the --pipe handler was killed by signal 9")
            || err.contains("handler exited with status 137"),
        "{flavor} {transport}: {err}"
    );
    assert!(
        err.contains("outstanding entries are held for the next one, started in 100 ms"),
        "{flavor} {transport}: {err}"
    );
    assert_eq!(admin.xpending_count("s", "g"), 0);
    // What the dead one held was written to the next one: no entry failed, each acked once.
    let stats = Json::parse(&std::fs::read_to_string(&stats).unwrap());
    assert_eq!((stats.get("retried").num(), stats.get("acked").num()), (0.0, 400.0), "{err}");
}

/// A handler that never answers one entry: with --handler-timeout it fails in time, comes
/// back (released at once on 8.10, reclaimed after min_idle elsewhere), and once past
/// --max-deliveries goes to the dead-letter stream. The others are acked.
#[test]
fn an_unanswered_entry_times_out_then_is_dead_lettered() {
    for flavor in [Flavor::Redis70, Flavor::Valkey81, Flavor::Redis810] {
        let server = Server::start(flavor);
        let mut admin = server.admin();
        admin.xadd_n("s", 20, 8);
        let silent = admin.xadd("s", &[("hang", "yes")]);
        let url = format!("redis://{}", server.addr());
        let args = consume(
            &url,
            "mio",
            &handler(),
            &[
                "--handler-timeout",
                "200",
                "--max-deliveries",
                "2",
                "--dead-letter",
                "dl",
                "--min-idle-ms",
                "500",
                "--beat-ms",
                "100",
            ],
        );
        let mut p = spawn(&args, &[("HANDLER_SILENT", "hang")]);
        wait_until("dead-lettered", || admin.xlen("dl") == 1);
        wait_until("nothing pending", || admin.xpending_count("s", "g") == 0);
        p.stop();
        let err = p.stderr();
        assert!(err.contains(&format!("{silent} not answered within 200 ms")), "{flavor}: {err}");
        assert!(err.contains("dead-lettered"), "{flavor}: {err}");
    }
}

/// Lines that are not answers while nothing is outstanding (they fail an entry otherwise:
/// `silence.rs`), and answers for no outstanding entry, are told and ignored; the entries
/// are still acked by their real answers.
#[test]
fn bad_lines_and_unknown_ids_are_told_and_ignored() {
    let server = Server::start(Flavor::Valkey81);
    let mut admin = server.admin();
    let last = admin.xadd_n("s", 5, 8).pop().unwrap();
    let url = format!("redis://{}", server.addr());
    // A line of 100,000 bytes (pelican keeps 64 KiB of it) between the others.
    let noisy = r#"echo 'not json'; head -c 100000 /dev/zero | tr '\0' x; echo; echo '{"id":"9-9","verdict":"ack"}'; echo '{"id":"1-0","verdict":"maybe"}'"#;
    let pipe = format!("{noisy}; sh {}/../examples/pipe/handler.sh", env!("CARGO_MANIFEST_DIR"));
    let args = consume(&url, "mio", &pipe, &[]);
    let mut p = spawn(&args, &[]);
    wait_until("all acked", || all_acked(&mut admin, &last) && p.stderr().contains("9-9"));
    p.stop();
    let err = p.stderr();
    let nothing = "No entry is outstanding to fail for it; the line:";
    let expected = r#"expected {"id": "…", "verdict": "ack"|"retry"|"dead-letter"} on one line (a "retry" may add "retry_after_ms": N)"#;
    assert!(
        err.contains(&format!("--pipe: not an answer: not JSON; {expected}. {nothing} not json")),
        "{err}"
    );
    assert!(err.contains("an answer for no outstanding entry, ignored: {\"id\":\"9-9\""), "{err}");
    assert!(
        err.contains("an answer for no outstanding entry (and with an unknown verdict \"maybe\"), ignored"),
        "{err}"
    );
    assert!(err.contains(&format!("--pipe: not an answer: a line longer than 64 KiB; {expected}.")), "{err}");
    assert!(err.contains(&format!("{nothing} xxxx")), "{err}");
    assert_eq!(admin.xpending_count("s", "g"), 0);
}

/// Two streams with the same ids, handled by the Node example out of order: its answers name
/// their stream, and each entry of each stream is acked once. An answer without "stream" for
/// an id outstanding on both is told and ignored.
#[test]
fn with_several_streams_answers_name_their_stream() {
    let server = Server::start(Flavor::Valkey81);
    let mut admin = server.admin();
    let n = 500;
    for key in ["s", "t"] {
        let adds: Vec<Vec<String>> =
            (1..=n).map(|i| ["XADD", key, &format!("{i}-1"), "f", "v"].map(String::from).to_vec()).collect();
        admin.pipeline(&adds);
    }
    let dir = Scratch::new("pipe-streams");
    let stats = dir.file("stats.json");
    let url = format!("redis://{}", server.addr());
    need("node");
    let node = format!("node {}/../examples/pipe/handler.js", env!("CARGO_MANIFEST_DIR"));
    let extra = ["--stream", "t", "--concurrency", "16", "--stats-json", &stats];
    let mut p = spawn(&handled_by(&url, "mio", "--pipe", &node, &extra), &[("HANDLER_SLOW_MS", "5")]);
    let last = format!("{n}-1");
    wait_until("all acked", || all_acked_on(&mut admin, "s", &last) && all_acked_on(&mut admin, "t", &last));
    p.stop();
    let s = Json::parse(&std::fs::read_to_string(&stats).unwrap());
    assert_eq!(s.get("acked").num() as usize, 2 * n, "{}", p.stderr());
    assert_eq!(s.get("handled").num() as usize, 2 * n);
    assert!(!p.stderr().contains("--pipe:"), "nothing told about the answers: {}", p.stderr());

    // Entry 1-0 on streams u and v, both outstanding when the handler answers.
    for key in ["u", "v"] {
        admin.call(&["XADD", key, "1-0", "f", "v"]);
    }
    let answers = r#"read a; read b; echo '{"id":"1-0","verdict":"ack"}'; for k in u v; do echo "{\"stream\":\"$k\",\"id\":\"1-0\",\"verdict\":\"ack\"}"; done; cat >/dev/null"#;
    let mut args = handled_by(&url, "smol", "--pipe", answers, &["--stream", "v"]);
    assert_eq!(args[3..5], ["--stream", "s"]);
    args[4] = "u".into();
    let mut p = spawn(&args, &[]);
    wait_until("both acked", || all_acked_on(&mut admin, "u", "1-0") && all_acked_on(&mut admin, "v", "1-0"));
    p.stop();
    let err = p.stderr();
    assert!(err.contains(r#"an answer without "stream" for an id outstanding on several streams"#), "{err}");
}

/// Issue 29: a broken deploy is refused at the start, before anything is read: a handler
/// that cannot be started at all, one that fails at once (a missing module), and a mistyped
/// --exec command. Exit 1, nothing delivered.
#[test]
fn a_handler_that_cannot_start_stops_pelican_before_reading() {
    let server = Server::start(Flavor::Redis70);
    let mut admin = server.admin();
    admin.xadd_n("s", 3, 8);
    let url = format!("redis://{}", server.addr());
    need("python3");
    for (flag, command, said) in [
        ("--pipe", "/no/such/handler", "the --pipe handler `/no/such/handler` exited with status 127"),
        ("--pipe", "python3 -c 'import nosuchmodule'", "exited with status 1"),
        (
            "--exec",
            "pythn3 handler.py",
            "the --exec command `pythn3 handler.py` cannot be run: `pythn3` is not found",
        ),
    ] {
        let args = handled_by(&url, "mio", flag, command, &[]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (status, _, err) = run(&args);
        assert_eq!(status.code(), Some(1), "{err}");
        assert!(err.contains(said), "{err}");
        if flag == "--pipe" {
            assert!(err.contains("after its start, before any entry was read"), "{err}");
        }
        assert!(!admin.group_exists("s", "g"), "nothing read, not even connected: {err}");
    }
}

/// Issue 29: a handler that starts, then dies before answering anything, again and again. It
/// is seen: `/healthz` 503 naming it, `pelican_handler_restarts_total` counting; the entries
/// it was given are held (their delivery counts stay 1: no delivery burnt) and written to each
/// next one; after 5 such deaths in a row pelican exits 1 saying so.
#[test]
fn a_handler_that_keeps_dying_is_seen_and_ends_the_run() {
    let server = Server::start(Flavor::Redis70);
    let mut admin = server.admin();
    admin.xadd_n("s", 3, 8);
    let url = format!("redis://{}", server.addr());
    let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    // `keep`: an entry failed at its third death stays as it is (the default backoff would hand
    // it out again within a second, counting a delivery).
    let extra = ["--metrics", &addr, "--concurrency", "2", "--on-retry", "keep"];
    let args = consume(&url, "mio", "sleep 0.7; exit 3", &extra);
    let mut p = spawn(&args, &[]);
    let addr: std::net::SocketAddr = addr.parse().unwrap();
    let mut said = String::new();
    wait_until("/healthz to name the handler", || {
        said = get(addr, "/healthz");
        said.starts_with("HTTP/1.1 503") && said.contains("the --pipe handler is")
    });
    assert!(said.contains("exited with status 3"), "{said}");
    let mut restarts = 0.0;
    wait_until("a restart counted", || {
        let metrics = get(addr, "/metrics");
        restarts = metrics
            .lines()
            .find_map(|l| l.strip_prefix("pelican_handler_restarts_total "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0);
        restarts >= 1.0
    });
    // In hand all along: read once, written to each handler, never failed.
    let pending = admin.xpending_all("s", "g");
    assert!(pending.len() >= 2, "{pending:?}");
    assert!(pending.iter().all(|e| e.3 == 1), "no delivery burnt: {pending:?}");
    let status = p.wait();
    let err = p.stderr();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("stopped: the --pipe handler `sleep 0.7; exit 3` died before answering anything 5 times in a row (the last exited with status 3)"), "{err}");
    assert!(err.contains("its 2 outstanding entries are held for the next one"), "{err}");
    assert!(admin.xpending_all("s", "g").iter().all(|e| e.3 == 1), "no delivery burnt");
}

/// `GET path` on `addr`: the whole answer, status line first (empty if nothing answers).
fn get(addr: std::net::SocketAddr, path: &str) -> String {
    use std::io::{Read, Write};
    let Ok(mut conn) = std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(2)) else {
        return String::new();
    };
    let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(5)));
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut answer = String::new();
    if conn.write_all(request.as_bytes()).is_ok() {
        let _ = conn.read_to_string(&mut answer);
    }
    answer
}

/// SIGTERM mid-run with slow answers outstanding: they are waited for and acked, the handler
/// sees its stdin close and exits, pelican exits 0, and nothing it was given stays pending.
#[test]
fn a_stop_waits_for_the_outstanding_answers() {
    for (flavor, transport) in [(Flavor::Redis70, "mio"), (Flavor::Redis810, "smol")] {
        stop_with_answers_outstanding(flavor, transport);
    }
}

fn stop_with_answers_outstanding(flavor: Flavor, transport: &str) {
    let server = Server::start(flavor);
    let mut admin = server.admin();
    admin.xadd_n("s", 2000, 8);
    let dir = Scratch::new("pipe-stop");
    let stats = dir.file("stats.json");
    let url = format!("redis://{}", server.addr());
    let mut args = consume(&url, transport, &handler(), &["--concurrency", "16"]);
    args.extend(["--stats-json".to_string(), stats.clone()]);
    let mut p = spawn(&args, &[("HANDLER_SLOW_MS", "50")]);
    wait_until("some outstanding", || admin.group_exists("s", "g") && admin.xpending_count("s", "g") > 0);
    std::thread::sleep(std::time::Duration::from_millis(300));
    p.stop();
    let s = Json::parse(&std::fs::read_to_string(&stats).unwrap());
    let handled = s.get("handled").num() as usize;
    assert!(handled > 0 && handled < 2000, "{flavor} {transport}: {handled}");
    let acked = s.get("acked").num() as i64;
    assert_eq!(
        acked as usize, handled,
        "{flavor} {transport}: every answer waited for and its ack confirmed"
    );
    // The server agrees: of the entries delivered, all but those acked are pending.
    assert_eq!(entries_read(&mut admin) - admin.xpending_count("s", "g"), acked, "{flavor} {transport}");
    if flavor == Flavor::Redis810 {
        // What was read and not handed out is released (8.8+): nothing stays with c.
        let held: BTreeSet<String> =
            admin.xpending_consumer("s", "g", "c").into_iter().map(|p| p.0).collect();
        assert!(held.is_empty(), "{held:?}");
    }
}

/// The entries delivered to group `g` of `s` (`entries-read`, Redis 7.0+).
fn entries_read(admin: &mut Admin) -> i64 {
    let groups = admin.call(&["XINFO", "GROUPS", "s"]);
    let group = groups.as_array().and_then(|g| g.first()).and_then(|g| g.as_array()).unwrap_or_default();
    let read = group.chunks(2).find(|kv| kv[0].as_text().as_deref() == Some("entries-read"));
    read.and_then(|kv| kv[1].as_int()).unwrap_or_else(|| panic!("no entries-read in {groups:?}"))
}

/// `--exec` with `--handler-timeout`: a command that hangs is killed (its whole process
/// group) and its entry failed; past `--max-deliveries` it is dead-lettered.
#[test]
fn an_exec_command_past_the_timeout_is_killed() {
    let server = Server::start(Flavor::Redis810);
    let mut admin = server.admin();
    let id = admin.xadd("s", &[("f", "v")]);
    let dir = Scratch::new("exec-timeout");
    let marker = dir.file("still-running");
    let url = format!("redis://{}", server.addr());
    // The child sleeps in the background of the command's group, then would leave a mark.
    let command = format!("(sleep 3; touch {marker}) & sleep 30");
    let extra = ["--handler-timeout", "200", "--max-deliveries", "1", "--dead-letter", "dl"];
    let args = handled_by(&url, "mio", "--exec", &command, &extra);
    let mut p = spawn(&args, &[]);
    wait_until("dead-lettered", || admin.xlen("dl") == 1);
    p.stop();
    let err = p.stderr();
    assert!(err.contains(&format!("{id} took longer than 200 ms: its command was killed")), "{err}");
    assert!(!err.contains("killed by signal"), "told once: {err}");
    std::thread::sleep(std::time::Duration::from_millis(3500));
    assert!(!std::path::Path::new(&marker).exists(), "the command's whole process group was killed");
}

/// A handler written without the examples' loop, in Python, that says it takes batches: it
/// gets many entries a line (its hello came before anything was written, so no line of one
/// entry), and answers each batch with one line of verdicts: `null` for an entry it answers
/// on its own line after, an unknown verdict failing its entry alone (dead-lettered past
/// --max-deliveries, at its third delivery); a batch answered with a verdict short fails its entries (told), which
/// come back and are acked. Both transports.
#[test]
fn a_handler_that_says_so_gets_batches() {
    need("python3");
    const BATCHES: &str = r#"
import json, os, sys
log = open(os.environ["LOG"], "a")
short = os.environ.get("SHORT")
print('{"protocol":"batch"}', flush=True)
for line in sys.stdin:
    m = json.loads(line)
    if "batch" not in m:
        log.write("line\n"); log.flush()
        print(json.dumps({"id": m["id"], "verdict": "ack"}), flush=True)
        continue
    es = m["entries"]
    log.write("batch %d\n" % len(es)); log.flush()
    vs = [None if "later" in e["fields"] else "maybe" if "bad" in e["fields"] else "ack" for e in es]
    if short and len(es) > 1:
        short, vs = None, vs[:-1]
    print(json.dumps({"batch": m["batch"], "verdicts": vs}), flush=True)
    for e in es:
        if "later" in e["fields"]:
            print(json.dumps({"stream": e["stream"], "id": e["id"], "verdict": "ack"}), flush=True)
"#;
    for (flavor, transport, short) in
        [(Flavor::Redis70, "mio", false), (Flavor::Valkey81, "smol", false), (Flavor::Redis70, "mio", true)]
    {
        let server = Server::start(flavor);
        let mut admin = server.admin();
        let mut ids = admin.xadd_n("s", 1000, 8);
        let later: Vec<String> = (0..5).map(|_| admin.xadd("s", &[("later", "1")])).collect();
        let bad = admin.xadd("s", &[("bad", "1")]);
        ids.extend(admin.xadd_n("s", 1000, 8));
        let dir = Scratch::new("pipe-batches");
        let (script, log, stats) = (dir.file("batches.py"), dir.file("log"), dir.file("stats.json"));
        std::fs::write(&script, BATCHES).unwrap();
        let url = format!("redis://{}", server.addr());
        let pipe = format!("{}python3 {script}", if short { "SHORT=1 " } else { "" });
        let extra = [
            "--max-deliveries",
            "2",
            "--dead-letter",
            "dl",
            "--min-idle-ms",
            "1000",
            "--beat-ms",
            "100",
            "--stats-json",
            &stats,
        ];
        let mut p = spawn(&consume(&url, transport, &pipe, &extra), &[("LOG", &log)]);
        let what = format!("{flavor} {transport} short {short}");
        wait_until("the bad one dead-lettered", || admin.xlen("dl") == 1);
        let mut all = ids.clone();
        all.extend(later.iter().cloned());
        wait_until("all acked", || {
            admin.xpending_count("s", "g") == 0 && all_acked(&mut admin, ids.last().unwrap())
        });
        p.stop();
        let err = p.stderr();
        let seen = lines_of(&log);
        assert!(!seen.iter().any(|l| l == "line"), "{what}: a line of one entry: {seen:?}");
        let sizes: Vec<usize> = seen.iter().filter_map(|l| l.strip_prefix("batch ")?.parse().ok()).collect();
        assert!(sizes.iter().any(|n| *n > 1), "{what}: batches of one only: {sizes:?}");
        assert!(sizes.iter().all(|n| *n <= 200), "{what}: at most twice --count in hand: {sizes:?}");
        assert!(
            err.contains(&format!("{bad} failed and stays pending: its verdict in batch")),
            "{what}: {err}"
        );
        assert!(err.contains(r#"an unknown verdict "maybe""#), "{what}: {err}");
        let s = Json::parse(&std::fs::read_to_string(&stats).unwrap());
        assert_eq!(s.get("acked").num() as usize, all.len(), "{what}: {err}");
        if short {
            assert!(err.contains("entries, its answer"), "{what}: {err}");
            assert!(s.get("retried").num() > 1.0, "{what}: the short batch failed whole");
        } else {
            assert!(!err.contains("entries, its answer"), "{what}: {err}");
        }
    }
}

/// The defaults: a handler that answers one line per entry, as before batches, has one entry
/// at a time (`--concurrency` 1), whatever pelican offers.
#[test]
fn an_old_handler_gets_one_entry_at_a_time() {
    let server = Server::start(Flavor::Redis70);
    let mut admin = server.admin();
    let last = admin.xadd_n("s", 300, 8).pop().unwrap();
    let dir = Scratch::new("pipe-old");
    let stats = dir.file("stats.json");
    let url = format!("redis://{}", server.addr());
    let sh = format!("sh {}/../examples/pipe/handler.sh", env!("CARGO_MANIFEST_DIR"));
    let mut p = spawn(&consume(&url, "mio", &sh, &["--stats-json", &stats]), &[]);
    wait_until("all acked", || all_acked(&mut admin, &last));
    p.stop();
    let s = Json::parse(&std::fs::read_to_string(&stats).unwrap());
    assert_eq!((s.get("acked").num(), s.get("in_hand_max").num()), (300.0, 1.0), "{}", p.stderr());
}

/// Issue 41: pelican killed (kill -9) mid-run with the Python example at the defaults (200 in
/// hand, in batches), then started again under its name: no entry is lost — each is handled
/// at least once — and every entry handled twice was pending when pelican died (handled, its
/// ack not yet confirmed). The counts are printed (`--nocapture`).
#[test]
fn pelican_killed_with_the_python_example_loses_nothing() {
    for (flavor, transport) in [(Flavor::Redis70, "mio"), (Flavor::Valkey81, "smol")] {
        let server = Server::start(flavor);
        let mut admin = server.admin();
        let ids = admin.xadd_n("s", 5000, 16);
        let dir = Scratch::new("pipe-kill9");
        let (log, pid_file) = (dir.file("handled"), dir.file("pid"));
        let url = format!("redis://{}", server.addr());
        let args = consume(&url, transport, &handler(), &[]);
        let env = [("HANDLER_LOG", log.as_str()), ("HANDLER_PID_FILE", pid_file.as_str())];
        let mut p = spawn(&args, &env);
        wait_until("a fifth handled", || lines_of(&log).len() >= 1000);
        p.kill9();
        let at = lines_of(&log).len();
        // Its handler reads what was written to it, then the end of its stdin, and exits.
        let handler_pid = std::fs::read_to_string(&pid_file).unwrap();
        wait_until("the handler gone", || !std::path::Path::new(&format!("/proc/{handler_pid}")).exists());
        let pending: BTreeSet<String> =
            admin.xpending_consumer("s", "g", "c").into_iter().map(|e| e.0).collect();
        let mut p = spawn(&args, &env);
        wait_until("all acked", || all_acked(&mut admin, ids.last().unwrap()));
        p.stop();
        let mut handled: BTreeMap<String, usize> = BTreeMap::new();
        for id in lines_of(&log) {
            *handled.entry(id).or_default() += 1;
        }
        let lost = ids.iter().filter(|id| !handled.contains_key(*id)).count();
        let twice: Vec<&String> = handled.iter().filter(|(_, n)| **n > 1).map(|(id, _)| id).collect();
        eprintln!(
            "{flavor} {transport}: kill -9 after {at} of {} handled, {} pending then: {lost} lost, {} handled twice",
            ids.len(),
            pending.len(),
            twice.len()
        );
        assert_eq!(lost, 0, "{flavor} {transport}");
        assert!(twice.iter().all(|id| pending.contains(*id)), "{flavor} {transport}: {twice:?} {pending:?}");
        assert!(handled.values().all(|n| *n <= 2), "{flavor} {transport}");
    }
}

/// `--exit-when-drained`: a batch job through the Python example ends by itself once
/// everything is handled and nothing more comes (exit 0, told), its acks confirmed, the
/// consumer gone from the group; printing too. Both transports.
#[test]
fn exit_when_drained_ends_a_batch_job() {
    for (flavor, transport, pipe) in
        [(Flavor::Redis70, "mio", true), (Flavor::Valkey81, "smol", true), (Flavor::Redis810, "mio", false)]
    {
        let server = Server::start(flavor);
        let mut admin = server.admin();
        let n = 3000;
        admin.xadd_n("s", n, 8);
        let dir = Scratch::new("pipe-drained");
        let stats = dir.file("stats.json");
        let url = format!("redis://{}", server.addr());
        let extra = ["--exit-when-drained=300", "--stats-json", &stats];
        let mut args: Vec<String> =
            support::consume(&url, transport, &extra).into_iter().map(String::from).collect();
        if pipe {
            args.extend(["--pipe".to_string(), handler()]);
        }
        let mut p = spawn(&args, &[]);
        let what = format!("{flavor} {transport} pipe {pipe}");
        let status = p.wait_within(std::time::Duration::from_secs(60));
        let err = p.stderr();
        assert_eq!(status.code(), Some(0), "{what}: {err}");
        assert!(
            err.contains("drained: nothing pending, nothing new for 300 ms (--exit-when-drained); stopping"),
            "{what}: {err}"
        );
        let s = Json::parse(&std::fs::read_to_string(&stats).unwrap());
        assert_eq!(s.get("acked").num() as usize, n, "{what}: {err}");
        assert_eq!(admin.xpending_count("s", "g"), 0, "{what}");
        assert_eq!(entries_read(&mut admin), n as i64, "{what}");
    }
}
