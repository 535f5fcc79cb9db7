//! Issue 36, item 2: a handler used slightly wrong never hangs pelican in silence. A
//! `--pipe` answer that cannot be read (single quotes, an unknown verdict, no id) fails its
//! entry, told with the line. Real servers, both transports.

mod support;

use std::process::Command;

use pelican_tests::server::{Flavor, Server};
use support::{wait_until, Json, Pelican, Scratch};

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
                 on one line. {id} failed for it (named in the line) and stays pending; the line: {{'id': '{id}', \
                 'verdict': 'ack'}}"
            ),
            "ok" => format!(
                "pelican: --pipe: {id} failed and stays pending: its answer has an unknown verdict \"ok\"; expected \
                 {{\"id\": \"…\", \"verdict\": \"ack\"|\"retry\"|\"dead-letter\"}} on one line; the line: \
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
