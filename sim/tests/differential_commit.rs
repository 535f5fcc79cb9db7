//! Differential test of pelican's commits: one scripted story run against the simulator and
//! against each real server (Redis 6.2, Redis 7.0, Valkey 8.1, Redis 8.10), in RESP2 and
//! RESP3, every reply compared byte for byte after normalisation: `EVALSHA` before `SCRIPT
//! LOAD` (`NOSCRIPT`), the load (the same sha), an entry committed, the same commit again
//! (0: settled), an entry another consumer holds and one delivered another number of times
//! (`[owner, count]`), refused writes (an `XADD` onto a hash, an `INCRBY` of a word: the
//! refusal's text, nothing of the entry written), an `INCRBY` followed through an entry's
//! `SET` and `DEL`, `MAXLEN ~` trimming a stream of 150 entries, one entry twice in one batch
//! (the second finds it settled), `HINCRBY` (a hash made by it, a field followed through an
//! entry's `HSET` and `DEL` and across a batch's entries; refused: a field holding a word,
//! set before or by the entry's own `HSET`, an overflow, a string, a stream — nothing of the
//! entry written), the check at connect, and the writes read back (`XRANGE`, `GET`,
//! `HGETALL`, `HGET`, `TYPE`, `XPENDING`); and `HINCRBY`/`HGET` sent as they are, errors
//! included.
//!
//! Normalisations (both sides): ids made by the clock (`XADD … *` inside the script, nine
//! digits or more before the dash) are numbered by first appearance in each reply; the idle
//! field of extended `XPENDING` rows is 0.

mod common;

use common::{commit_args, encode, sim_options, zero_pending_idle, Remote, W};
use pelican_sim::Sim;
use pelican_tests::server::{Flavor, Server};

/// Clock-made ids (`<9+ digits>-<seq>` lines) numbered by first appearance (`ids` keeps them).
fn number_clock_ids(reply: &[u8], ids: &mut Vec<String>) -> Vec<u8> {
    let text = String::from_utf8_lossy(reply).into_owned();
    let mut lines: Vec<String> = text
        .split("\r\n")
        .map(|line| {
            let clock = line.split_once('-').is_some_and(|(ms, seq)| {
                ms.len() >= 9
                    && ms.bytes().all(|b| b.is_ascii_digit())
                    && !seq.is_empty()
                    && seq.bytes().all(|b| b.is_ascii_digit())
            });
            if !clock {
                return line.to_string();
            }
            let n = ids.iter().position(|id| id == line).unwrap_or_else(|| {
                ids.push(line.to_string());
                ids.len() - 1
            });
            format!("<id #{n}>")
        })
        .collect();
    // Their lengths go with them.
    for i in 1..lines.len() {
        if lines[i].starts_with("<id #") && lines[i - 1].starts_with('$') {
            lines[i - 1] = "$<len>".into();
        }
    }
    lines.join("\r\n").into_bytes()
}

/// The story, as commands; `sha` is the script's (the servers' and the sim's, compared).
fn story(sha: &str) -> Vec<Vec<String>> {
    let w = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    let evalsha = |entries: &[(&str, u64, Vec<W<'_>>)], consumer: &str| {
        commit_args(["EVALSHA", sha], "s", "g", consumer, entries)
    };
    let stage = |id: &'static str| vec![W("a", "out", vec!["", "", "input", id]), W("i", "n", vec!["1"])];
    let mut script = vec![w("FLUSHALL"), w("SCRIPT FLUSH"), w("XGROUP CREATE s g 0 MKSTREAM")];
    for n in 1..=16 {
        script.push(w(&format!("XADD s {n}-0 f v{n}")));
    }
    script.push(w("XREADGROUP GROUP g A COUNT 16 STREAMS s >"));
    script.push(evalsha(&[("1-0", 1, stage("1-0"))], "A")); // NOSCRIPT
    script.push(vec!["SCRIPT".into(), "LOAD".into(), pelican::COMMIT_SCRIPT.into()]);
    script.push(vec!["SCRIPT".into(), "EXISTS".into(), sha.into(), "0000".into()]);
    script.push(evalsha(&[("1-0", 1, stage("1-0"))], "A")); // committed
    script.push(evalsha(&[("1-0", 1, stage("1-0"))], "A")); // settled: 0
    script.push(w("XCLAIM s g B 0 2-0 JUSTID"));
    script.push(w("XCLAIM s g B 0 2-0")); // B's, delivered twice
    script.push(evalsha(&[("2-0", 1, stage("2-0")), ("3-0", 2, stage("3-0")), ("3-0", 1, vec![])], "A"));
    script.push(w("HSET h f v"));
    script.push(w("SET word seven"));
    script.push(evalsha(
        &[
            ("4-0", 1, vec![W("i", "n", vec!["1"]), W("a", "h", vec!["", "", "k", "v"])]),
            ("5-0", 1, vec![W("h", "word", vec!["a", "1"])]),
            ("6-0", 1, vec![W("s", "x", vec!["9199999999999999999", ""]), W("i", "x", vec!["1000"])]),
            ("7-0", 1, vec![W("i", "word", vec!["1"])]),
        ],
        "A",
    ));
    script.extend([w("GET n"), w("EXISTS x"), w("GET word"), w("XPENDING s g")]);
    script.push(evalsha(
        &[
            (
                "5-0",
                1,
                vec![
                    W("s", "m", vec!["5", ""]),
                    W("i", "m", vec!["2"]),
                    W("i", "m", vec!["3"]),
                    W("d", "word", vec![]),
                    W("i", "word", vec!["4"]),
                    W("h", "hh", vec!["a", "1", "b", "2"]),
                    W("h", "hh", vec!["a", "3"]),
                    W("s", "t", vec!["v", "100000"]),
                ],
            ),
            ("6-0", 1, vec![W("d", "m", vec![]), W("s", "m", vec!["x", ""]), W("i", "m", vec!["1"])]),
        ],
        "A",
    ));
    script.extend([w("GET m"), w("GET word"), w("HGETALL hh"), w("TYPE t"), w("TYPE hh"), w("TYPE out")]);
    for n in 1..=150 {
        script.push(w(&format!("XADD big {n}-0 k v{n}")));
    }
    script.push(evalsha(&[("7-0", 1, vec![W("a", "big", vec!["MAXLEN", "10", "k", "w"])])], "A"));
    script.push(w("XLEN big"));
    script.push(evalsha(&[("8-0", 1, vec![W("a", "big", vec!["MAXLEN", "10", "k", "w"])])], "A"));
    script.push(w("XLEN big"));
    // One entry twice in one batch with the same delivery count (pelican sent that for two
    // copies of an entry that a destroyed group delivered again, both in hand in turn): the
    // first commits, the second finds it settled (0).
    script.push(evalsha(&[("4-0", 1, stage("4-0")), ("4-0", 1, stage("4-0"))], "A"));
    // HINCRBY as the stage sends it.
    script.push(w("HSET counts word seven big 9199999999999999999"));
    script.push(w("HSET tmp d 100"));
    script.push(evalsha(
        &[
            // Made by the HINCRBYs: a=5, b=-1.
            (
                "9-0",
                1,
                vec![
                    W("k", "per", vec!["a", "2"]),
                    W("k", "per", vec!["a", "3"]),
                    W("k", "per", vec!["b", "-1"]),
                ],
            ),
            // a (asked after 9-0 was made) 15; c set by HSET, then 8; tmp deleted, then d 5
            // (not 105).
            (
                "10-0",
                1,
                vec![
                    W("k", "per", vec!["a", "10"]),
                    W("h", "per", vec!["c", "7"]),
                    W("k", "per", vec!["c", "1"]),
                    W("d", "tmp", vec![]),
                    W("k", "tmp", vec!["d", "4"]),
                    W("k", "tmp", vec!["d", "1"]),
                ],
            ),
            // Refused: a word (n not written), an overflow (new not made), the entry's own
            // HSET of a word, a string, a stream.
            ("11-0", 1, vec![W("i", "n", vec!["1"]), W("k", "counts", vec!["word", "1"])]),
            ("12-0", 1, vec![W("k", "counts", vec!["new", "1"]), W("k", "counts", vec!["big", "1000"])]),
            ("13-0", 1, vec![W("h", "per2", vec!["a", "x"]), W("k", "per2", vec!["a", "1"])]),
            ("14-0", 1, vec![W("k", "m", vec!["f", "1"])]),
            ("15-0", 1, vec![W("k", "out", vec!["f", "1"])]),
            // Near the bound, and a negative sum.
            (
                "16-0",
                1,
                vec![
                    W("k", "counts", vec!["big", "-9199999999999999999"]),
                    W("k", "counts", vec!["neg", "-5"]),
                ],
            ),
        ],
        "A",
    ));
    script.extend([
        w("HGETALL per"),
        w("HGETALL counts"),
        w("EXISTS per2"),
        w("GET n"),
        w("HGETALL tmp"),
        w("HGET tmp d"),
        w("HGET per a"),
        w("HGET nothing f"),
        w("TYPE per"),
        w("XPENDING s g"),
    ]);
    // Sent as they are: the servers' own errors.
    script.extend([
        w("HINCRBY counts word 1"),
        w("HINCRBY counts neg x"),
        w("HINCRBY counts neg 1.5"),
        w("HINCRBY m f 1"),
        w("HINCRBY out f 1"),
        w("HGET m f"),
        w("HGET out f"),
        w("HINCRBY counts big 9223372036854775807"),
        w("HSET counts top 9223372036854775807"),
        w("HINCRBY counts top 1"),
        w("HINCRBY counts top -1"),
        w("HINCRBY counts fresh -9223372036854775808"),
        w("HINCRBY counts fresh -1"),
        w("HINCRBY counts"),
        w("HGET counts"),
        w("HINCRBY brand-new f 12"),
        w("HGETALL brand-new"),
    ]);
    script.extend([
        w("XRANGE out - +"),
        w("XRANGE big 140-0 +"),
        w("XPENDING s g"),
        w("XPENDING s g - + 10"),
    ]);
    let mut check = vec!["EVAL".to_string(), pelican::COMMIT_CHECK_SCRIPT.into(), "4".into()];
    check.extend(w("s out n per g A"));
    script.push(check);
    script
}

/// Runs the story on the server and the sim; returns how many replies it compared.
fn run(server: &Server, flavor: Flavor, resp3: bool) -> usize {
    let mut remote = Remote::connect(server);
    let mut sim = Sim::new(sim_options(flavor));
    let c = sim.connect();
    sim.advance_to(1_000_000_000);
    if resp3 {
        let hello = encode(&[b"HELLO", b"3"]);
        remote.call(&hello);
        sim.input(c, &hello);
        let _ = sim.output(c);
    }
    let sha = {
        let mut probe = Sim::new(sim_options(flavor));
        let p = probe.connect();
        probe.input(p, &encode(&[b"SCRIPT", b"LOAD", pelican::COMMIT_SCRIPT.as_bytes()]));
        let out = probe.output(p);
        String::from_utf8_lossy(&out).split("\r\n").nth(1).unwrap().to_string()
    };
    let mut compared = 0;
    let mut history = Vec::new();
    for cmd in story(&sha) {
        let args: Vec<&[u8]> = cmd.iter().map(|a| a.as_bytes()).collect();
        let bytes = encode(&args);
        let want = remote.call(&bytes);
        // The clock moves between commands, as the servers' does (two streams' clock-made
        // ids of one ms would be numbered as one).
        sim.advance_to(sim.now() + 1);
        sim.input(c, &bytes);
        let got = sim.output(c);
        // Numbered within each reply: two streams' clock-made ids may be the same text.
        let (mut want, mut got) =
            (number_clock_ids(&want, &mut Vec::new()), number_clock_ids(&got, &mut Vec::new()));
        if cmd[0] == "XPENDING" && cmd.len() > 3 {
            want = zero_pending_idle(&want);
            got = zero_pending_idle(&got);
        }
        let shown = |c: &[String]| {
            c.iter().map(|a| if a.len() > 40 { "<script>" } else { a }).collect::<Vec<_>>().join(" ")
        };
        history.push(shown(&cmd));
        assert!(
            want == got,
            "{flavor} {}: `{}` differs\n  server: {}\n  sim:    {}\nbefore:\n    {}",
            if resp3 { "RESP3" } else { "RESP2" },
            shown(&cmd),
            String::from_utf8_lossy(&want).replace("\r\n", " "),
            String::from_utf8_lossy(&got).replace("\r\n", " "),
            history[..history.len() - 1].join("\n    ")
        );
        compared += 1;
    }
    compared
}

#[test]
fn commits_match_real_servers() {
    let handles: Vec<_> = Flavor::ALL
        .into_iter()
        .map(|flavor| {
            std::thread::Builder::new()
                .name(flavor.name().to_string())
                .spawn(move || {
                    let server = Server::start(flavor);
                    let n = run(&server, flavor, false) + run(&server, flavor, true);
                    eprintln!("differential commit: {flavor}: {n} replies compared (RESP2 + RESP3)");
                })
                .expect("spawn")
        })
        .collect();
    let failed: Vec<&str> = Flavor::ALL
        .into_iter()
        .zip(handles)
        .filter_map(|(f, h)| h.join().is_err().then_some(f.name()))
        .collect();
    assert!(failed.is_empty(), "the simulator's commits differ from: {failed:?}");
}
