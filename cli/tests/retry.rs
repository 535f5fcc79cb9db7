//! Retries that wait, from the command line, against real servers: a `--pipe` answer
//! `"retry_after_ms"` and `--retry-backoff` each hand the entry out again no earlier than
//! asked, and soon after, on every server; counted as `retries_delayed` in `--stats-json`
//! and `/metrics`; with three consumers too, across a `kill -9` of the one that parked them.
//! Bad values are refused (exit 2) or fail the entry.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use pelican_tests::server::{Flavor, Server};
use support::{consume, run, wait_until, Json, Pelican, Scratch};

/// A `--pipe` handler: each entry's first delivery answered as `FIRST` says (`after`: a
/// retry with `retry_after_ms` `WAIT_MS`; `plain`: a plain retry; `bad`: a
/// `retry_after_ms` that is not a number), the next ones acked; each handling logged to
/// `LOG` as `id deliveries unix_ms consumer` (the time of the answer to the first, of the hand-out
/// of the next).
const HANDLER: &str = r#"
import json, os, sys, time
log = open(os.environ["LOG"], "a")
first = os.environ["FIRST"]
for line in sys.stdin:
    e = json.loads(line)
    ms = int(time.time() * 1000)
    log.write("%s %d %d %s\n" % (e["id"], e["deliveries"], ms, os.environ.get("WHO", "c")))
    log.flush()
    answer = {"id": e["id"], "verdict": "ack"}
    if e["deliveries"] == 1:
        answer["verdict"] = "retry"
        if first == "after":
            answer["retry_after_ms"] = int(os.environ["WAIT_MS"])
        elif first == "bad":
            answer["retry_after_ms"] = "soon"
    print(json.dumps(answer), flush=True)
"#;

fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

/// `/metrics`' body (empty if it does not answer).
fn metrics(addr: SocketAddr) -> String {
    let Ok(mut conn) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else {
        return String::new();
    };
    let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
    let mut answer = String::new();
    if conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").is_ok() {
        let _ = conn.read_to_string(&mut answer);
    }
    answer.split_once("\r\n\r\n").map(|(_, body)| body.to_string()).unwrap_or_default()
}

/// The delay observed per entry: from the first handling's answer to the second's hand-out.
fn delays(log: &str) -> Vec<u64> {
    let mut firsts = std::collections::BTreeMap::new();
    let mut out = Vec::new();
    for line in std::fs::read_to_string(log).unwrap().lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        let (id, deliveries, at): (&str, u64, u64) =
            (parts[0], parts[1].parse().unwrap(), parts[2].parse().unwrap());
        match deliveries {
            1 => {
                firsts.insert(id.to_string(), at);
            }
            _ => out.push(at - firsts[id]),
        }
    }
    out.sort_unstable();
    out
}

/// Runs `n` entries through [`HANDLER`] with `first` and `extra`; returns the delays
/// observed, shortest first.
fn retried(flavor: Flavor, transport: &str, first: &str, wait_ms: &str, extra: &[&str]) -> Vec<u64> {
    let n = 100;
    let server = Server::start(flavor);
    let mut admin = server.admin();
    admin.xadd_n("s", n, 8);
    let dir = Scratch::new("retry");
    let (script, log, stats) = (dir.file("handler.py"), dir.file("log"), dir.file("stats.json"));
    std::fs::write(&script, HANDLER).unwrap();
    let pipe = format!("python3 {script}");
    let addr = free_addr().to_string();
    let url = format!("redis://{}", server.addr());
    let mut args = consume(&url, transport, &["--pipe", &pipe, "--concurrency", "8", "--stats-json", &stats]);
    args.extend_from_slice(&["--metrics", &addr, "--min-idle-ms", "3000", "--beat-ms", "200"]);
    args.extend_from_slice(extra);
    let mut p = Pelican::spawn_env(&args, &[("LOG", &log), ("FIRST", first), ("WAIT_MS", wait_ms)]);
    let handled = || std::fs::read_to_string(&log).map_or(0, |t| t.lines().count());
    wait_until("each handled twice", || handled() == 2 * n && admin.xpending_count("s", "g") == 0);
    let addr: SocketAddr = addr.parse().unwrap();
    let delayed = format!("pelican_retries_delayed_total{{stream=\"s\",group=\"g\",consumer=\"c\"}} {n}");
    // The counters are published a turn of the loop after the last verdict.
    let mut body = String::new();
    for _ in 0..50 {
        body = metrics(addr);
        if body.contains(&delayed) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(body.contains(&delayed), "{flavor}: /metrics lacks {delayed}:\n{body}");
    p.stop();
    let stats = Json::parse(&std::fs::read_to_string(&stats).unwrap());
    assert_eq!(stats.get("retries_delayed").num() as usize, n, "{flavor}: {}", p.stderr());
    assert_eq!((stats.get("retried").num() as usize, stats.get("acked").num() as usize), (n, n));
    delays(&log)
}

/// `"retry_after_ms": 1000` (within `--min-idle-ms` 3000: one park): every entry back no
/// earlier than 1 s after its answer, and well before `--min-idle-ms` would bring it.
#[test]
fn a_pipe_answer_retry_after_ms_waits_on_every_server() {
    for (flavor, transport) in [
        (Flavor::Redis62, "mio"),
        (Flavor::Redis70, "smol"),
        (Flavor::Valkey81, "mio"),
        (Flavor::Redis810, "smol"),
    ] {
        let delays = retried(flavor, transport, "after", "1000", &[]);
        let (least, most) = (delays[0], delays[delays.len() - 1]);
        eprintln!(
            "{flavor} {transport}: asked 1000 ms, observed median {} ms, worst {most} ms",
            delays[delays.len() / 2]
        );
        // The handler logs its answer a hair before pelican gets it: a few ms of slack.
        assert!(least >= 990, "{flavor}: back {least} ms after a retry_after_ms of 1000: {delays:?}");
        assert!(most < 2500, "{flavor}: back only {most} ms later: {delays:?}");
    }
}

/// `"retry_after_ms": 4000`, past `--min-idle-ms` 3000: parked again while pelican runs,
/// still back no earlier than asked.
#[test]
fn a_wait_longer_than_min_idle_is_kept_while_pelican_runs() {
    let delays = retried(Flavor::Redis70, "mio", "after", "4000", &[]);
    let (least, most) = (delays[0], delays[delays.len() - 1]);
    eprintln!("redis-7.0 mio: asked 4000 ms, observed least {least} ms, worst {most} ms");
    assert!(least >= 3990, "back {least} ms after a retry_after_ms of 4000: {delays:?}");
    assert!(most < 6500, "back only {most} ms later: {delays:?}");
}

/// `--retry-backoff 800,800`: a plain retry waits between 400 and 800 ms (then a beat at
/// most), not --min-idle-ms, and not at once on Redis 8.10 either.
#[test]
fn retry_backoff_makes_plain_retries_wait() {
    for (flavor, transport) in [(Flavor::Valkey81, "smol"), (Flavor::Redis810, "mio")] {
        let delays = retried(flavor, transport, "plain", "0", &["--retry-backoff", "800,800"]);
        let (least, most) = (delays[0], delays[delays.len() - 1]);
        eprintln!("{flavor} {transport}: backoff 400–800 ms, observed least {least} ms, worst {most} ms");
        assert!(least >= 390, "{flavor}: back {least} ms after a backoff of 400–800: {delays:?}");
        assert!(most < 2500, "{flavor}: back only {most} ms later: {delays:?}");
    }
}

/// A `retry_after_ms` that is no number fails the entry (told, it stays pending and comes
/// back as a plain retry would); bad flags are refused before connecting.
#[test]
fn bad_waits_are_refused() {
    let server = Server::start(Flavor::Redis70);
    let mut admin = server.admin();
    let id = admin.xadd("s", &[("f", "v")]);
    let dir = Scratch::new("retry-bad");
    let (script, log) = (dir.file("handler.py"), dir.file("log"));
    std::fs::write(&script, HANDLER).unwrap();
    let pipe = format!("python3 {script}");
    let url = format!("redis://{}", server.addr());
    let args = consume(&url, "mio", &["--pipe", &pipe, "--min-idle-ms", "500", "--beat-ms", "100"]);
    let mut p = Pelican::spawn_env(&args, &[("LOG", &log), ("FIRST", "bad")]);
    wait_until("acked at its next delivery", || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.lines().count() == 2)
            && admin.xpending_count("s", "g") == 0
    });
    p.stop();
    let err = p.stderr();
    let said = format!(
        "pelican: --pipe: {id} failed and stays pending: its answer has a \"retry_after_ms\" that is not a whole \
         number of milliseconds (\"soon\")"
    );
    assert!(err.contains(&said), "{err}");
    for (flags, want) in [
        (&["--retry-backoff", "0"][..], "FIRST_MS \"0\""),
        (&["--retry-backoff", "100,x"][..], "MAX_MS \"x\""),
        (&["--retry-backoff", "100", "--on-retry", "keep"][..], "cannot be used with"),
    ] {
        let mut args = consume(&url, "mio", &[]);
        args.extend_from_slice(flags);
        let (status, _, err) = run(&args);
        assert_eq!(status.code(), Some(2), "{flags:?}: {err}");
        assert!(err.contains(want), "{flags:?}: {err}");
    }
}

/// Three consumers of 100 entries, each retried once with `"retry_after_ms": 1000`; once
/// every first answer is in, the consumer that parked the most is killed with SIGKILL: its
/// parks are the server's, and its peers hand those entries out again on time too.
#[test]
fn a_wait_outlives_a_kill_9_of_the_consumer_that_asked_it() {
    for (flavor, transport) in [
        (Flavor::Redis62, "mio"),
        (Flavor::Redis70, "smol"),
        (Flavor::Valkey81, "smol"),
        (Flavor::Redis810, "mio"),
    ] {
        let n = 100;
        let server = Server::start(flavor);
        let mut admin = server.admin();
        admin.xadd_n("s", n, 8);
        admin.call(&["XGROUP", "CREATE", "s", "g", "0"]);
        let dir = Scratch::new("retry-kill");
        let (script, log) = (dir.file("handler.py"), dir.file("log"));
        std::fs::write(&script, HANDLER).unwrap();
        let pipe = format!("python3 {script}");
        let url = format!("redis://{}", server.addr());
        let mut consumers: Vec<(String, Pelican)> = ["c1", "c2", "c3"]
            .iter()
            .map(|who| {
                let mut args = consume(&url, transport, &["--pipe", &pipe, "--concurrency", "4"]);
                args.extend_from_slice(&["--min-idle-ms", "3000", "--beat-ms", "200", "--count", "10"]);
                let at = args.iter().position(|a| *a == "c").unwrap();
                args[at] = who;
                let env = [("LOG", log.as_str()), ("FIRST", "after"), ("WAIT_MS", "1000"), ("WHO", who)];
                (who.to_string(), Pelican::spawn_env(&args, &env))
            })
            .collect();
        let lines = || std::fs::read_to_string(&log).unwrap_or_default();
        let firsts = |text: &str| text.lines().filter(|l| l.split(' ').nth(1) == Some("1")).count();
        wait_until("every first answer", || firsts(&lines()) == n);
        // The parks go out a few ms after the answers: then the kill.
        std::thread::sleep(std::time::Duration::from_millis(100));
        let text = lines();
        let parked_by = |who: &str| {
            text.lines()
                .filter(|l| l.split(' ').nth(1) == Some("1") && l.split(' ').nth(3) == Some(who))
                .count()
        };
        let victim = ["c1", "c2", "c3"].into_iter().max_by_key(|who| parked_by(who)).unwrap().to_string();
        let theirs: std::collections::BTreeSet<String> = text
            .lines()
            .filter(|l| l.split(' ').nth(1) == Some("1") && l.split(' ').nth(3) == Some(victim.as_str()))
            .map(|l| l.split(' ').next().unwrap().to_string())
            .collect();
        consumers.iter_mut().find(|(who, _)| *who == victim).unwrap().1.kill9();
        let handled = || lines().lines().count();
        wait_until("each handled twice", || handled() == 2 * n && admin.xpending_count("s", "g") == 0);
        for (who, p) in consumers.iter_mut().filter(|(who, _)| *who != victim) {
            p.stop();
            assert!(!p.stderr().contains("panicked"), "{who}");
        }
        // Each entry's delay, and apart those the killed one had parked.
        let mut firsts = std::collections::BTreeMap::new();
        let (mut all, mut orphans) = (Vec::new(), Vec::new());
        for line in lines().lines() {
            let parts: Vec<&str> = line.split(' ').collect();
            let at: u64 = parts[2].parse().unwrap();
            match parts[1] {
                "1" => {
                    firsts.insert(parts[0].to_string(), at);
                }
                _ => {
                    let delay = at - firsts[parts[0]];
                    all.push(delay);
                    if theirs.contains(parts[0]) {
                        orphans.push(delay);
                    }
                }
            }
        }
        all.sort_unstable();
        orphans.sort_unstable();
        eprintln!(
            "{flavor} {transport}, 3 consumers, {} parked by {victim} (killed): asked 1000 ms, observed median {} ms, \
             worst {} ms, least {} ms; of the killed one's: median {} ms, worst {} ms",
            theirs.len(),
            all[all.len() / 2],
            all[all.len() - 1],
            all[0],
            orphans[orphans.len() / 2],
            orphans[orphans.len() - 1]
        );
        assert!(!theirs.is_empty());
        assert!(all[0] >= 990, "{flavor}: back {} ms after a retry_after_ms of 1000: {all:?}", all[0]);
        assert!(all[all.len() - 1] < 2500, "{flavor}: back only {} ms later: {all:?}", all[all.len() - 1]);
    }
}
