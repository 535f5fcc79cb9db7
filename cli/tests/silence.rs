//! Issue 36, item 2: a handler used slightly wrong never hangs pelican in silence. A
//! `--pipe` answer that cannot be read (single quotes, an unknown verdict, no id) fails its
//! entry, told with the line; an answer that never comes (Python's `print` without a flush,
//! into a pipe) or a command that never ends is told on stderr and by `/healthz` once
//! overdue; and the first SIGTERM ends the process within `--stop-timeout-ms`, the entry in
//! hand given back unhandled — not acked, taken by a peer at once. Real servers, both
//! transports.

mod support;

use std::io::Read;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pelican_tests::server::{Flavor, Server};
use support::{wait_until, Json, Pelican, Scratch, BIN};

/// Fails loudly, naming it, if `program` cannot be run.
fn need(program: &str) {
    let ran = Command::new(program).arg("--version").output();
    assert!(ran.is_ok_and(|o| o.status.success()), "these tests need `{program}` on PATH");
}

/// `consume` of `s` as `c` of `g` on `transport` with `extra`, as owned strings.
fn consume(url: &str, transport: &str, extra: &[&str]) -> Vec<String> {
    support::consume(url, transport, extra).into_iter().map(String::from).collect()
}

fn spawn(args: &[String]) -> Pelican {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Pelican::spawn(&args)
}

/// A free loopback port for `--metrics`.
fn free_addr() -> String {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string()
}

/// `GET path` on `addr`: the whole answer, status line first (empty if nothing answers).
fn get(addr: &str, path: &str) -> String {
    use std::io::Write;
    let addr: SocketAddr = addr.parse().unwrap();
    let Ok(mut conn) = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else {
        return String::new();
    };
    let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut answer = String::new();
    if conn.write_all(request.as_bytes()).is_ok() {
        let _ = conn.read_to_string(&mut answer);
    }
    answer
}

/// A Python `--pipe` handler answering each entry's first delivery in the way `bad` says,
/// and later ones well: `quotes` prints the dict itself (single quotes), `ok` an unknown
/// verdict, `noid` no id.
const MISTAKEN: &str = r#"
import json, os, sys
BAD = os.environ["BAD"]
for line in sys.stdin:
    e = json.loads(line)
    if e["deliveries"] > 1:
        print(json.dumps({"id": e["id"], "verdict": "ack"}), flush=True)
    elif BAD == "quotes":
        print({"id": e["id"], "verdict": "ack"}, flush=True)
    elif BAD == "ok":
        print(json.dumps({"id": e["id"], "verdict": "ok"}), flush=True)
    else:
        print(json.dumps({"verdict": "ack"}), flush=True)
"#;

/// Each unreadable answer fails its entry (retried, then acked at its second delivery), told
/// with its cause and the line: never ignored, which left the entry in hand for good. Four
/// outstanding at once: with single quotes each line names its own entry; without an id the
/// oldest outstanding fails, one per line.
#[test]
fn an_answer_that_cannot_be_read_fails_its_entry_and_says_why() {
    need("python3");
    for (flavor, transport) in [(Flavor::Redis70, "mio"), (Flavor::Valkey81, "smol")] {
        for bad in ["quotes", "ok", "noid"] {
            unreadable(flavor, transport, bad);
        }
    }
}

fn unreadable(flavor: Flavor, transport: &str, bad: &str) {
    let server = Server::start(flavor);
    let mut admin = server.admin();
    let ids = admin.xadd_n("s", 4, 8);
    let dir = Scratch::new("silence-bad");
    let (script, stats) = (dir.file("handler.py"), dir.file("stats.json"));
    std::fs::write(&script, MISTAKEN).unwrap();
    let pipe = format!("BAD={bad} python3 {script}");
    let url = format!("redis://{}", server.addr());
    let timing = ["--min-idle-ms", "1000", "--beat-ms", "100", "--concurrency", "4"];
    let mut args =
        consume(&url, transport, &[&["--pipe", &pipe, "--stats-json", &stats], &timing[..]].concat());
    args.push("--quiet".into());
    let mut p = spawn(&args);
    let what = format!("{flavor} {transport} {bad}");
    wait_until("every entry failed once, then acked", || {
        admin.group_exists("s", "g")
            && admin.xpending_count("s", "g") == 0
            && p.stderr().matches("failed").count() >= 4
    });
    p.stop();
    let err = p.stderr();
    let s = Json::parse(&std::fs::read_to_string(&stats).unwrap());
    assert_eq!((s.get("retried").num(), s.get("acked").num()), (4.0, 4.0), "{what}: {err}");
    for id in &ids {
        let said = match bad {
            "quotes" => format!(
                "pelican: --pipe: not an answer: not JSON (single quotes: JSON strings take double quotes, as \
                 json.dumps writes them); expected {{\"id\": \"…\", \"verdict\": \"ack\"|\"retry\"|\"dead-letter\"}} \
                 on one line (a \"retry\" may add \"retry_after_ms\": N). {id} failed for it (named in the line) and stays pending; the line: {{'id': '{id}', \
                 'verdict': 'ack'}}"
            ),
            "ok" => format!(
                "pelican: --pipe: {id} failed and stays pending: its answer has an unknown verdict \"ok\"; expected \
                 {{\"id\": \"…\", \"verdict\": \"ack\"|\"retry\"|\"dead-letter\"}} on one line (a \"retry\" may add \"retry_after_ms\": N); the line: \
                 {{\"id\": \"{id}\", \"verdict\": \"ok\"}}"
            ),
            _ => r#"{"verdict": "ack"}"#.to_string(),
        };
        assert!(err.contains(&said), "{what}: {said}\n{err}");
    }
    if bad == "noid" {
        let told: Vec<&str> = err.lines().filter(|l| l.contains("not an answer: no \"id\";")).collect();
        assert_eq!(told.len(), 4, "{what}: {err}");
        assert!(
            told.iter().all(|l| l.ends_with(r#"and stays pending; the line: {"verdict": "ack"}"#)),
            "{err}"
        );
        assert!(told.iter().any(
            |l| l.contains("failed for it (the oldest of ") || l.contains("(the only entry outstanding)")
        ));
    }
}

/// Python's `print` without a flush into a pipe: the answer never comes. Once overdue the
/// entry is told on stderr (with the flush hint) and by `/healthz` (503 naming it), its age
/// a gauge; the first SIGTERM ends pelican within `--stop-timeout-ms` (exit 75), the handler
/// ended, the entry not acked but given back with its delivery counted, and a peer takes it
/// at once.
#[test]
fn an_answer_that_never_comes_is_told_and_the_stop_ends_in_time() {
    need("python3");
    // `env -u`: a PYTHONUNBUFFERED=1 inherited would flush each print and hide the mistake.
    let handler = r#"env -u PYTHONUNBUFFERED python3 -c '
import json, sys
for line in sys.stdin:
    print(json.dumps({"id": json.loads(line)["id"], "verdict": "ack"}))
'"#;
    for (flavor, transport) in [(Flavor::Redis70, "mio"), (Flavor::Redis810, "smol")] {
        silent(flavor, transport, &["--pipe", handler], "no answer from the --pipe handler for");
    }
}

/// An `--exec` command that never ends: told, `/healthz` 503, and the stop bounded the same
/// way (the command killed; the entry given back).
#[test]
fn a_command_that_never_ends_is_told_and_the_stop_ends_in_time() {
    for (flavor, transport) in [(Flavor::Redis62, "mio"), (Flavor::Valkey81, "smol")] {
        silent(flavor, transport, &["--exec", "cat >/dev/null; exec sleep 600"], "the command for");
    }
}

fn silent(flavor: Flavor, transport: &str, handler: &[&str], told: &str) {
    let server = Server::start(flavor);
    let mut admin = server.admin();
    let id = admin.xadd("s", &[("f", "v")]);
    let url = format!("redis://{}", server.addr());
    let metrics = free_addr();
    let what = format!("{flavor} {transport} {}", handler[0]);
    let limits = ["--overdue-ms", "1000", "--stop-timeout-ms", "3000", "--min-idle-ms", "5000"];
    let mut args = consume(&url, transport, &[handler, &limits[..], &["--metrics", &metrics]].concat());
    args.push("--quiet".into());
    let mut p = spawn(&args);
    wait_until("the entry in hand", || admin.group_exists("s", "g") && admin.xpending_count("s", "g") == 1);
    let mut health = String::new();
    wait_until("/healthz to name the overdue entry", || {
        health = get(&metrics, "/healthz");
        health.starts_with("HTTP/1.1 503")
            && health.contains(&format!("entry {id} of stream s has been in hand for"))
    });
    assert!(health.contains("with no verdict from its handler (the limit is 1 s)"), "{what}: {health}");
    // Not alive either: a restart is what ends a handler gone silent.
    let live = get(&metrics, "/livez");
    assert!(
        live.starts_with("HTTP/1.1 503") && live.contains(&format!("entry {id} of stream s")),
        "{what}: {live}"
    );
    let age = get(&metrics, "/metrics")
        .lines()
        .find_map(|l| {
            l.strip_prefix("pelican_in_hand_oldest_age_seconds{")?.split("} ").nth(1)?.parse::<f64>().ok()
        })
        .unwrap_or_default();
    assert!(age >= 1.0, "{what}: the gauge {age}");
    wait_until("the overdue entry told", || p.stderr().contains(&format!("{told} {id}")));
    if handler[0] == "--pipe" {
        assert!(
            p.stderr().contains("Does the handler flush its stdout after each answer?"),
            "{}",
            p.stderr()
        );
    }

    let asked = Instant::now();
    p.term();
    let status = p.wait_within(Duration::from_secs(30));
    let took = asked.elapsed();
    eprintln!("{what}: SIGTERM to exit took {took:?}");
    let err = p.stderr();
    assert_eq!(status.code(), Some(75), "{what}: {err}");
    assert!(took < Duration::from_secs(15), "{what}: stopped in {took:?} with a 3 s deadline");
    assert!(
        err.contains(
            "the stop did not finish within 3000 ms (--stop-timeout-ms): the entry in hand is given back \
                       unhandled (not acked; a peer takes it at once); the handler is ended (SIGTERM"
        ),
        "{what}: {err}"
    );
    assert!(err.contains("stopped after --stop-timeout-ms (3000 ms)"), "{what}: {err}");
    // Not acked; its delivery counted; released (8.8+) or idle past --min-idle-ms.
    let pending = admin.xpending_all("s", "g");
    assert_eq!(pending.len(), 1, "{what}: {pending:?}");
    let (_, owner, idle, deliveries) = &pending[0];
    assert_eq!(*deliveries, 1, "{what}: {pending:?}");
    assert!(owner.is_empty() || *idle >= 5000, "{what}: given back: {pending:?}");
    // A peer takes it at once (its first reclaim, or its first read on 8.8+).
    let mut peer_args = consume(&url, transport, &["--min-idle-ms", "5000", "--beat-ms", "100", "--quiet"]);
    peer_args[8] = "peer".into();
    let mut peer = spawn(&peer_args);
    let line = peer.line();
    assert_eq!(Json::parse(&line).get("id").str(), id, "{what}");
    wait_until("acked by the peer", || admin.xpending_count("s", "g") == 0);
    peer.stop();
}

/// Printing into a stdout nobody reads: the entry whose line waits is overdue (told,
/// `/healthz`), and the stop still ends in time (exit 75): the line cannot be taken back
/// from the blocked write, so pelican exits without it, the entry pending.
#[test]
fn a_line_stdout_never_takes_is_told_and_the_stop_ends_in_time() {
    for transport in ["mio", "smol"] {
        let server = Server::start(Flavor::Redis70);
        let mut admin = server.admin();
        admin.xadd_n("s", 2000, 100); // lines of ~160 bytes: the pipe fills
        let url = format!("redis://{}", server.addr());
        let metrics = free_addr();
        let limits = ["--overdue-ms", "1000", "--stop-timeout-ms", "2000", "--metrics", &metrics];
        let mut child = Command::new(BIN)
            .args(support::consume(&url, transport, &limits))
            .env_remove("PELICAN_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn pelican");
        let _stdout = child.stdout.take(); // held, never read
        let mut stderr = child.stderr.take().unwrap();
        let mut health = String::new();
        wait_until("/healthz to name the overdue entry", || {
            health = get(&metrics, "/healthz");
            health.starts_with("HTTP/1.1 503") && health.contains("has been in hand for")
        });
        let asked = Instant::now();
        let kill = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
        assert!(kill.success());
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("{transport}: pelican did not exit within 30 s");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let took = asked.elapsed();
        eprintln!("print {transport}: SIGTERM to exit took {took:?}");
        let mut err = String::new();
        stderr.read_to_string(&mut err).unwrap();
        let err = support::unstamped(&err);
        assert_eq!(status.code(), Some(75), "{transport}: {err}");
        assert!(took < Duration::from_secs(15), "{transport}: {took:?}");
        assert!(
            err.contains("for stdout to take it (over --overdue-ms 1000): is anything reading it?"),
            "{err}"
        );
        assert!(err.contains("pelican: exiting (status 75)"), "{transport}: {err}");
        assert!(admin.xpending_count("s", "g") > 0, "nothing it could not write was acked");
    }
}
