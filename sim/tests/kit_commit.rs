//! The test kit with handlers that commit ([`Verdict::Commit`]): a stage that writes each
//! input's id into `out` and adds 1 to `n`, with its ack, in one fenced step. Over many
//! worlds and every fault the kit draws — among them a consumer paused past `min_idle` (a
//! zombie) and a connection cut after a commit reached the server, before its answer —
//! each input acked through a commit has exactly one output, none has two, and `n` counts
//! them. Beside it, the same worlds with a handler that writes its output itself, through the
//! kit's simulated server (`HandlerCtx::write`), and then acks: the kit's own checks fail
//! those worlds where an input got two outputs (`Violation::WrittenTwice`), no invariant of
//! the user's needed.

use std::collections::BTreeMap;

use pelican::{Entry, Verdict, Writes};
use pelican_sim::kit::{Fate, Fault, FaultKind, HandlerCtx, NewEntry, Report, Violation, World};
use pelican_sim::Stored;

/// The stage's commit for one input.
fn stage(_: &mut (), _: &HandlerCtx<'_>, entry: &Entry) -> Verdict {
    Verdict::Commit(Writes::new().add("out", [(&b"input"[..], entry.id())]).incr_by("n", 1))
}

/// The same stage written the naive way: the output written first (to the same server, on
/// the application's own connection), then `Ack` — two steps.
fn write_then_ack(_: &mut (), ctx: &HandlerCtx<'_>, entry: &Entry) -> Verdict {
    match ctx.write(&Writes::new().add("out", [(&b"input"[..], entry.id())]).incr_by("n", 1)) {
        Ok(()) => Verdict::Ack,
        Err(_) => Verdict::Retry, // the server is down: nothing written, try again later
    }
}

/// How many outputs in `out` name each input.
fn outputs<S>(report: &Report<S>) -> BTreeMap<String, usize> {
    let mut by_input = BTreeMap::new();
    if let Some(Stored::Stream(entries)) = report.server.written.get(&b"out"[..]) {
        for (_, fields) in entries {
            let input =
                fields.iter().find(|(f, _)| f == b"input").map(|(_, v)| v.clone()).unwrap_or_default();
            *by_input.entry(String::from_utf8_lossy(&input).into_owned()).or_insert(0) += 1;
        }
    }
    by_input
}

/// Each input committed has exactly one output and `n` counts them; no input has two
/// unless `anew` (a destroyed group delivers entries anew: they are committed again).
fn exactly_once<S>(report: &Report<S>, anew: bool) -> Result<(), String> {
    let got = outputs(report);
    let committed: Vec<&str> =
        report.entries.iter().filter(|e| e.fate == Fate::Committed).map(|e| e.id.as_str()).collect();
    for id in &committed {
        match got.get(*id) {
            None => return Err(format!("{id} was committed, and has no output")),
            Some(n) if *n > 1 && !anew => return Err(format!("{id} has {n} outputs")),
            _ => {}
        }
    }
    for (input, n) in &got {
        if !report.entry(input).is_some_and(|e| e.commits as usize == *n) {
            return Err(format!("{input} has {n} outputs, and was not committed as many times"));
        }
    }
    let count = match report.server.written.get(&b"n"[..]) {
        Some(Stored::String(n)) => String::from_utf8_lossy(n).parse().unwrap_or(-1),
        _ => 0,
    };
    let made: i64 = report.entries.iter().map(|e| i64::from(e.commits)).sum();
    if count != made {
        return Err(format!("n is {count}, {made} commits were made"));
    }
    Ok(())
}

/// Every fault kind but a destroyed group (which delivers the stream anew, commits again
/// and so writes again: what no fencing can tell).
fn kinds_but_destroy() -> Vec<FaultKind> {
    FaultKind::ALL.iter().copied().filter(|k| *k != FaultKind::DestroyGroup).collect()
}

#[test]
fn each_input_has_exactly_one_output_under_every_fault() {
    let (mut committed, mut fenced, mut zombies, mut cuts) = (0, 0, 0, 0);
    for seed in 0..80 {
        // Half the worlds with zombies and cuts twice as often; some with many in hand.
        let mut kinds = kinds_but_destroy();
        if seed % 2 == 0 {
            kinds.extend([FaultKind::Pause, FaultKind::CutAfterCommit]);
        }
        let world = World::new(seed).random_faults(kinds).concurrency([1, 1, 3, 8][seed as usize % 4]);
        let report = world.run((), stage);
        report.check_with(|_| exactly_once(&report, false)).unwrap_or_else(|f| panic!("{f}"));
        committed += report.entries.iter().filter(|e| e.fate == Fate::Committed).count();
        fenced += report.notices.get("commit-fenced").copied().unwrap_or(0);
        let applied = report.faults_applied();
        zombies += applied.get(&FaultKind::Pause).copied().unwrap_or(0);
        cuts += applied.get(&FaultKind::CutAfterCommit).copied().unwrap_or(0);
    }
    eprintln!(
        "{committed} committed, {fenced} commits fenced, {zombies} zombies, {cuts} cuts after a commit"
    );
    assert!(committed > 5_000 && zombies > 20 && cuts > 20, "the worlds reached the cases");
    assert!(fenced > 0, "some zombie's commit was fenced off");
}

#[test]
fn a_destroyed_group_commits_again_and_says_so() {
    for seed in 0..20 {
        let world = World::new(seed).random_faults(FaultKind::ALL);
        let report = world.run((), stage);
        let anew = report.faults_applied().contains_key(&FaultKind::DestroyGroup);
        report.check_with(|_| exactly_once(&report, anew)).unwrap_or_else(|f| panic!("{f}"));
    }
}

#[test]
fn a_zombie_commit_is_fenced_off() {
    // c0 takes 1-0 and freezes past min_idle (1 s) in its handling; c1 reclaims and commits
    // it; c0 wakes and commits too: fenced, one output.
    let world = World::new(3)
        .consumers(2)
        .entries([NewEntry::new(0, [("n", "1")])])
        .handler_ms(300, 300)
        .fault(100, Fault::Pause { consumer: 0, ms: 3_000 })
        .fault(100, Fault::Pause { consumer: 1, ms: 1 })
        .configure(|c| c.seed(1));
    let report = world.run((), stage);
    report.check_with(|_| exactly_once(&report, false)).unwrap_or_else(|f| panic!("{f}"));
    let entry = report.entry("1-0").unwrap();
    assert_eq!(entry.commits, 1);
    assert_eq!(outputs(&report).get("1-0"), Some(&1));
    if entry.handlings.len() == 2 {
        assert_eq!(report.notices.get("commit-fenced"), Some(&1), "{entry}");
        assert_eq!(entry.handlings.iter().filter(|h| h.committed).count(), 1, "{entry}");
    }
}

#[test]
fn a_commit_whose_answer_is_lost_is_sent_again_and_writes_nothing_twice() {
    let world = World::new(5)
        .consumers(1)
        .entries((0..20).map(|i| NewEntry::new(i * 50, [("n", i.to_string())])))
        .faults((0..10).map(|i| (i * 100 + 10, Fault::CutAfterCommit { consumer: 0 })));
    let report = world.run((), stage);
    report.check_with(|_| exactly_once(&report, false)).unwrap_or_else(|f| panic!("{f}"));
    assert!(report.notices.get("reconnected").copied().unwrap_or(0) >= 5, "{:?}", report.notices);
    assert!(report.notices.get("commit-fenced").copied().unwrap_or(0) >= 5, "{:?}", report.notices);
    assert_eq!(report.entries.iter().filter(|e| e.fate == Fate::Committed).count(), 20);
    assert_eq!(report.duplicates().total, 0, "a cut after a commit costs no handling twice");
}

/// A crash between the write and the ack: c0 handles 1-0 for 300 ms, having written its
/// output at once, and dies 100 ms in; its next life drains 1-0 and writes it again. The
/// kit's own check fails it — the output to `out` and to `n` written by two handlings — and
/// tells the story; the committing stage passes the same world with one output.
#[test]
fn a_crash_between_writing_and_acking_fails_the_kit_where_a_commit_passes() {
    let world = World::new(11)
        .consumers(1)
        .entries([NewEntry::new(0, [("n", "1")])])
        .handler_ms(300, 300)
        .fault(100, Fault::Crash { consumer: 0, restart_ms: 200 });
    let naive = world.run((), write_then_ack);
    let failure = naive.check().expect_err("written twice, caught");
    for key in ["n", "out"] {
        let twice = Violation::WrittenTwice { id: "1-0".into(), key: key.into(), handlings: 2 };
        assert!(failure.violations.contains(&twice), "{failure}");
    }
    assert_eq!(failure.violations.len(), 2, "{failure}");
    let told = failure.to_string();
    assert!(told.contains("1-0's output to out was written by 2 handlings"), "{told}");
    assert!(told.contains("having written XADD INCRBY itself"), "the story says so: {told}");
    assert_eq!(outputs(&naive).get("1-0"), Some(&2));
    let handlings = &naive.entry("1-0").unwrap().handlings;
    assert!(handlings.iter().all(|h| h.wrote.len() == 2 && !h.committed), "{handlings:?}");

    let committing = world.run((), stage);
    committing.check_with(|_| exactly_once(&committing, false)).unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(committing.entry("1-0").unwrap().handlings.len(), 2, "handled twice, committed once");
    assert_eq!(outputs(&committing).get("1-0"), Some(&1));
}

/// The same worlds with the stage written the naive way: the kit's own checks fail those
/// where an input got two outputs — exactly the inputs `out` holds twice, a crash, a zombie
/// or a failover that lost the ack between the write and the ack — and the committing stage
/// passes every one.
#[test]
fn writing_then_acking_fails_the_kit_where_committing_passes() {
    let (mut caught, mut twice_by_ack, mut twice_by_commit) = (0, 0, 0);
    for seed in 0..60 {
        let world = World::new(seed).random_faults(kinds_but_destroy());
        let naive = world.run((), write_then_ack);
        let out_twice: Vec<String> =
            outputs(&naive).into_iter().filter(|(_, n)| *n > 1).map(|(id, _)| id).collect();
        twice_by_ack += out_twice.len();
        match naive.check() {
            Ok(()) => assert!(out_twice.is_empty(), "seed {seed}: {out_twice:?} written twice, not caught"),
            Err(failure) => {
                caught += 1;
                let mut flagged: Vec<String> = failure
                    .violations
                    .iter()
                    .filter_map(|v| match v {
                        Violation::WrittenTwice { id, key, .. } if key == "out" => Some(id.clone()),
                        Violation::WrittenTwice { key, .. } if key == "n" => None,
                        other => panic!("seed {seed}: only outputs written twice: {other}\n{failure}"),
                    })
                    .collect();
                flagged.sort();
                assert_eq!(flagged, out_twice, "seed {seed}: the inputs written twice, each caught");
            }
        }
        let committing = world.run((), stage);
        committing.check_with(|_| exactly_once(&committing, false)).unwrap_or_else(|f| panic!("{f}"));
        twice_by_commit += outputs(&committing).values().filter(|n| **n > 1).count();
    }
    eprintln!(
        "over 60 worlds: writing then acking failed the kit's checks in {caught} ({twice_by_ack} inputs written \
         twice); committing passed all ({twice_by_commit} twice)"
    );
    assert!(caught > 0, "the faults caught writing-then-acking");
    assert_eq!(twice_by_commit, 0);
}

/// A count per key in a hash (`HINCRBY`), committed with each input: the kit holds the hash
/// to the commits' sums field by field, under every fault but a destroyed group; counted
/// the naive way (written, then acked) the kit's checks catch the counts made twice.
#[test]
fn counts_per_key_are_held_to_once() {
    fn parity(entry: &Entry) -> &'static str {
        let n: u64 = entry.field(b"n").and_then(|n| std::str::from_utf8(n).ok()?.parse().ok()).unwrap_or(0);
        ["even", "odd"][n as usize % 2]
    }
    let (mut caught, mut committed) = (0, 0);
    for seed in 0..30 {
        let world = World::new(seed).random_faults(kinds_but_destroy());
        let counting =
            world.run((), |_, _, entry| Verdict::Commit(Writes::new().hincr_by("per", parity(entry), 1)));
        counting.check().unwrap_or_else(|f| panic!("{f}"));
        let total: i64 = match counting.server.written.get(&b"per"[..]) {
            Some(Stored::Hash(fields)) => {
                fields.iter().map(|(_, v)| String::from_utf8_lossy(v).parse::<i64>().unwrap()).sum()
            }
            other => panic!("{other:?}"),
        };
        let made: i64 = counting.entries.iter().map(|e| i64::from(e.commits)).sum();
        assert_eq!(total, made, "seed {seed}");
        committed += made;
        let naive = world.run((), |_, ctx: &HandlerCtx<'_>, entry: &Entry| {
            match ctx.write(&Writes::new().hincr_by("per", parity(entry), 1)) {
                Ok(()) => Verdict::Ack,
                Err(_) => Verdict::Retry,
            }
        });
        if let Err(failure) = naive.check() {
            caught += 1;
            let only_twice = failure
                .violations
                .iter()
                .all(|v| matches!(v, Violation::WrittenTwice { key, .. } if key == "per"));
            assert!(only_twice, "seed {seed}: {failure}");
        }
    }
    eprintln!("{committed} counts committed; the naive count caught in {caught} of 30 worlds");
    assert!(caught > 0);
}
