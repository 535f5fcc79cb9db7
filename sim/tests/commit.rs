//! Pelican's commits on the simulator: the plain commands that read their writes back
//! (strings, hashes, `TYPE`), `SCRIPT LOAD` and `EVALSHA` of the commit script run natively
//! (committed, settled, held by another owner or delivery, refused with nothing written,
//! `INCRBY` followed through an entry's writes, `MAXLEN ~` trimming whole nodes), and the
//! script cache's life (connections, restarts, failovers).

mod common;

use common::{call_s, cmd_s, commit_args, W};
use pelican_sim::{ConnId, OldMaster, Sim, SimOptions, Stored};

fn load(sim: &mut Sim, c: ConnId) -> String {
    let reply = call_s(sim, c, &["SCRIPT".into(), "LOAD".into(), pelican::COMMIT_SCRIPT.into()]);
    let sha = reply.split("\r\n").nth(1).expect("a bulk sha").to_string();
    assert_eq!(reply, format!("$40\r\n{sha}\r\n"));
    sha
}

/// A stream `s` with a group `g`, entries 1-0 … 3-0 read by A (each delivered once).
fn setup() -> (Sim, ConnId) {
    let mut sim = Sim::new(SimOptions::redis70());
    let c = sim.connect();
    cmd_s(&mut sim, c, "XGROUP CREATE s g 0 MKSTREAM");
    for n in 1..=3 {
        cmd_s(&mut sim, c, &format!("XADD s {n}-0 f v{n}"));
    }
    assert!(cmd_s(&mut sim, c, "XREADGROUP GROUP g A STREAMS s >").starts_with("*1"));
    (sim, c)
}

#[test]
fn strings_hashes_and_types() {
    let mut sim = Sim::new(SimOptions::redis70());
    let c = sim.connect();
    assert_eq!(cmd_s(&mut sim, c, "SET k 5"), "+OK\r\n");
    assert_eq!(cmd_s(&mut sim, c, "INCRBY k -7"), ":-2\r\n");
    assert_eq!(cmd_s(&mut sim, c, "GET k"), "$2\r\n-2\r\n");
    assert_eq!(cmd_s(&mut sim, c, "INCRBY new 3"), ":3\r\n");
    assert_eq!(cmd_s(&mut sim, c, "SET w seven"), "+OK\r\n");
    assert_eq!(cmd_s(&mut sim, c, "INCRBY w 1"), "-ERR value is not an integer or out of range\r\n");
    assert_eq!(cmd_s(&mut sim, c, "SET big 9223372036854775807"), "+OK\r\n");
    assert_eq!(cmd_s(&mut sim, c, "INCRBY big 1"), "-ERR increment or decrement would overflow\r\n");
    assert_eq!(cmd_s(&mut sim, c, "HSET h a 1 b 2"), ":2\r\n");
    assert_eq!(cmd_s(&mut sim, c, "HSET h a 3 c 4"), ":1\r\n");
    assert_eq!(
        cmd_s(&mut sim, c, "HGETALL h"),
        "*6\r\n$1\r\na\r\n$1\r\n3\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n4\r\n"
    );
    assert_eq!(cmd_s(&mut sim, c, "HSET h a"), "-ERR wrong number of arguments for 'hset' command\r\n");
    cmd_s(&mut sim, c, "XADD st 1-0 f v");
    let wrong = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";
    for line in ["GET h", "GET st", "INCRBY h 1", "HSET k f v", "HGETALL st", "XADD h * f v", "XLEN k"] {
        assert_eq!(cmd_s(&mut sim, c, line), wrong, "{line}");
    }
    for (key, kind) in [("k", "string"), ("h", "hash"), ("st", "stream"), ("nope", "none")] {
        assert_eq!(cmd_s(&mut sim, c, &format!("TYPE {key}")), format!("+{kind}\r\n"));
    }
    assert_eq!(cmd_s(&mut sim, c, "EXISTS k h st nope k"), ":4\r\n");
    // SET replaces a stream; DEL removes any type.
    assert_eq!(cmd_s(&mut sim, c, "SET st x"), "+OK\r\n");
    assert_eq!(cmd_s(&mut sim, c, "DEL st h nope"), ":2\r\n");
    assert_eq!(sim.value(b"k"), Some(Stored::String(b"-2".to_vec())));
    // PX on the virtual clock.
    assert_eq!(cmd_s(&mut sim, c, "SET t 1 PX 100"), "+OK\r\n");
    assert_eq!(cmd_s(&mut sim, c, "SET t0 1 PX 0"), "-ERR invalid expire time in 'set' command\r\n");
    sim.advance_to(99);
    assert_eq!(cmd_s(&mut sim, c, "GET t"), "$1\r\n1\r\n");
    sim.advance_to(100);
    assert_eq!(cmd_s(&mut sim, c, "GET t"), "$-1\r\n");
    assert_eq!(cmd_s(&mut sim, c, "XADD t 1-0 f v"), "$3\r\n1-0\r\n", "an expired key is free");
    assert_eq!(cmd_s(&mut sim, c, "FLUSHALL"), "+OK\r\n");
    assert_eq!(cmd_s(&mut sim, c, "EXISTS k"), ":0\r\n");
}

#[test]
fn noscript_until_loaded_then_commits() {
    let (mut sim, c) = setup();
    let writes = || vec![W("a", "out", vec!["", "", "input", "1-0"]), W("i", "n", vec!["1"])];
    let sha = pelican_sim_sha();
    let call = commit_args(["EVALSHA", &sha], "s", "g", "A", &[("1-0", 1, writes())]);
    assert_eq!(call_s(&mut sim, c, &call), "-NOSCRIPT No matching script. Please use EVAL.\r\n");
    assert_eq!(load(&mut sim, c), sha);
    assert_eq!(call_s(&mut sim, c, &call), "*1\r\n:1\r\n");
    assert_eq!(sim.commits().len(), 1);
    assert_eq!(sim.commits()[0].consumer, b"A");
    // Sent again (its answer lost): settled, nothing written twice.
    assert_eq!(call_s(&mut sim, c, &call), "*1\r\n:0\r\n");
    assert_eq!(cmd_s(&mut sim, c, "XLEN out"), ":1\r\n");
    assert_eq!(cmd_s(&mut sim, c, "GET n"), "$1\r\n1\r\n");
    assert_eq!(cmd_s(&mut sim, c, "XPENDING s g"), pending_summary(2, "2-0", "3-0", "A"));
    // Uppercase shas are the same script.
    let upper = commit_args(["EVALSHA", &sha.to_uppercase()], "s", "g", "A", &[("1-0", 1, vec![])]);
    assert_eq!(call_s(&mut sim, c, &upper), "*1\r\n:0\r\n");
}

fn pelican_sim_sha() -> String {
    // The real SHA-1 of the script's text, as every server names it.
    let mut sim = Sim::new(SimOptions::redis70());
    let c = sim.connect();
    load(&mut sim, c)
}

fn pending_summary(n: usize, first: &str, last: &str, owner: &str) -> String {
    format!(
        "*4\r\n:{n}\r\n${}\r\n{first}\r\n${}\r\n{last}\r\n*1\r\n*2\r\n${}\r\n{owner}\r\n$1\r\n{n}\r\n",
        first.len(),
        last.len(),
        owner.len()
    )
}

#[test]
fn fenced_by_owner_and_delivery_count() {
    let (mut sim, c) = setup();
    let sha = load(&mut sim, c);
    // B takes 2-0 (its count 2).
    assert!(cmd_s(&mut sim, c, "XCLAIM s g B 0 2-0 JUSTID").contains("2-0"));
    cmd_s(&mut sim, c, "XCLAIM s g B 0 2-0");
    let out = || vec![W("a", "out", vec!["", "", "k", "v"])];
    let call = commit_args(
        ["EVALSHA", &sha],
        "s",
        "g",
        "A",
        &[("2-0", 1, out()), ("3-0", 2, out()), ("9-0", 1, out()), ("1-0", 1, out())],
    );
    assert_eq!(
        call_s(&mut sim, c, &call),
        "*4\r\n*2\r\n$1\r\nB\r\n:2\r\n*2\r\n$1\r\nA\r\n:1\r\n:0\r\n:1\r\n",
        "held by B, delivered once not twice, never pending, committed"
    );
    assert_eq!(cmd_s(&mut sim, c, "XLEN out"), ":1\r\n");
}

#[test]
fn a_refused_write_writes_nothing_and_incrby_is_followed_through_the_entry() {
    let (mut sim, c) = setup();
    let sha = load(&mut sim, c);
    cmd_s(&mut sim, c, "HSET h f v");
    cmd_s(&mut sim, c, "SET word seven");
    let entries = [
        // The counter first, then an XADD onto a hash: refused, the counter unwritten.
        ("1-0", 1, vec![W("i", "n", vec!["1"]), W("a", "h", vec!["", "", "k", "v"])]),
        // SET 5, INCRBY 2, INCRBY 3 in one entry: followed, 10.
        ("2-0", 1, vec![W("s", "m", vec!["5", ""]), W("i", "m", vec!["2"]), W("i", "m", vec!["3"])]),
        // A word is no integer; past ±9.2e18 would overflow (as a double).
        ("3-0", 1, vec![W("i", "word", vec!["1"])]),
    ];
    let call = commit_args(["EVALSHA", &sha], "s", "g", "A", &entries);
    let got = call_s(&mut sim, c, &call);
    assert_eq!(
        got,
        "*3\r\n$38\r\nWRONGTYPE h holds a hash, not a stream\r\n:1\r\n$33\r\nERR word does not hold an integer\r\n"
    );
    assert_eq!(cmd_s(&mut sim, c, "EXISTS n"), ":0\r\n");
    assert_eq!(cmd_s(&mut sim, c, "GET m"), "$2\r\n10\r\n");
    assert_eq!(
        cmd_s(&mut sim, c, "XPENDING s g"),
        common_pending(2, "1-0", "3-0"),
        "the refused stay pending"
    );
    let big = [("1-0", 1, vec![W("s", "x", vec!["9199999999999999999", ""]), W("i", "x", vec!["1000"])])];
    let call = commit_args(["EVALSHA", &sha], "s", "g", "A", &big);
    assert_eq!(call_s(&mut sim, c, &call), "*1\r\n$27\r\nERR INCRBY x would overflow\r\n");
    // A DEL then an INCRBY starts from 0; a key's type follows the writes before it.
    let flow =
        [("1-0", 1, vec![W("d", "word", vec![]), W("i", "word", vec!["4"]), W("h", "hh", vec!["a", "1"])])];
    let call = commit_args(["EVALSHA", &sha], "s", "g", "A", &flow);
    assert_eq!(call_s(&mut sim, c, &call), "*1\r\n:1\r\n");
    assert_eq!(cmd_s(&mut sim, c, "GET word"), "$1\r\n4\r\n");
    assert_eq!(cmd_s(&mut sim, c, "HGETALL hh"), "*2\r\n$1\r\na\r\n$1\r\n1\r\n");
}

#[test]
fn maxlen_approximately_trims_whole_nodes_of_a_hundred() {
    let (mut sim, c) = setup();
    let sha = load(&mut sim, c);
    for n in 1..=150 {
        cmd_s(&mut sim, c, &format!("XADD out {n}-0 k v"));
    }
    let entries = [("1-0", 1, vec![W("a", "out", vec!["MAXLEN", "10", "k", "w"])])];
    let call = commit_args(["EVALSHA", &sha], "s", "g", "A", &entries);
    assert_eq!(call_s(&mut sim, c, &call), "*1\r\n:1\r\n");
    // 151 entries: the first node (100) goes, the second (51) stays whole.
    assert_eq!(cmd_s(&mut sim, c, "XLEN out"), ":51\r\n");
    // Small streams keep everything under `~`; `=` trims exactly.
    cmd_s(&mut sim, c, "XADD small MAXLEN ~ 1 1-0 k v");
    cmd_s(&mut sim, c, "XADD small MAXLEN ~ 1 2-0 k v");
    assert_eq!(cmd_s(&mut sim, c, "XLEN small"), ":2\r\n");
    assert_eq!(cmd_s(&mut sim, c, "XTRIM small MAXLEN = 1"), ":1\r\n");
}

#[test]
fn the_script_cache_survives_connections_not_restarts_and_a_promoted_replica_has_its_own() {
    let mut sim = Sim::new(SimOptions::redis70().with_replica(100));
    let c = sim.connect();
    let sha = load(&mut sim, c);
    let exists =
        |sim: &mut Sim, c| call_s(sim, c, &["SCRIPT".into(), "EXISTS".into(), sha.clone(), "nope".into()]);
    let other = sim.connect();
    assert_eq!(exists(&mut sim, other), "*2\r\n:1\r\n:0\r\n", "another connection sees it");
    assert_eq!(sim.scripts(), vec![sha.clone()]);
    // The replica has not loaded it: promoted, it answers NOSCRIPT.
    let r = sim.connect_replica().unwrap();
    assert_eq!(exists(&mut sim, r), "*2\r\n:0\r\n:0\r\n");
    assert!(sim.failover_with(OldMaster::Demoted));
    let c = sim.connect();
    assert_eq!(exists(&mut sim, c), "*2\r\n:0\r\n:0\r\n");
    load(&mut sim, c);
    // The old master, demoted in place, kept its own; a failover back finds it there.
    assert!(sim.failover_with(OldMaster::Demoted));
    let c = sim.connect();
    assert_eq!(exists(&mut sim, c), "*2\r\n:1\r\n:0\r\n");
    sim.restart();
    let c = sim.connect();
    assert_eq!(exists(&mut sim, c), "*2\r\n:0\r\n:0\r\n", "a restart empties it");
    // EVAL caches what it runs.
    let args = commit_args(["EVAL", pelican::COMMIT_SCRIPT], "s", "g", "A", &[]);
    assert!(call_s(&mut sim, c, &args).starts_with('-'), "no group: the script's error");
    assert_eq!(exists(&mut sim, c), "*2\r\n:1\r\n:0\r\n");
    assert_eq!(call_s(&mut sim, c, &["SCRIPT".into(), "FLUSH".into()]), "+OK\r\n");
    assert_eq!(exists(&mut sim, c), "*2\r\n:0\r\n:0\r\n");
}

#[test]
fn the_check_at_connect_answers_one() {
    let (mut sim, c) = setup();
    let check = |keys: &[&str]| {
        let mut args =
            vec!["EVAL".to_string(), pelican::COMMIT_CHECK_SCRIPT.into(), (1 + keys.len()).to_string()];
        args.push("s".into());
        args.extend(keys.iter().map(|k| k.to_string()));
        args.extend(["g".into(), "A".into()]);
        args
    };
    assert_eq!(call_s(&mut sim, c, &check(&["out", "n"])), ":1\r\n");
    let mut bad = check(&["out"]);
    bad[2] = "9".into();
    assert_eq!(call_s(&mut sim, c, &bad), "-ERR Number of keys can't be greater than number of args\r\n");
}

fn common_pending(n: usize, first: &str, last: &str) -> String {
    pending_summary(n, first, last, "A")
}
