//! `pelican consume --stream-pattern … --exec CMD`: its threads, counted in
//! `/proc/<pid>/task` on a real server, are no more than what can be in hand — the streams
//! found times `--concurrency`, capped by `--most-in-hand` — and grow as later streams are
//! found. The commands wait on a gate file, so that everything that can be in hand is, and
//! the count is taken then: nothing here times anything.

mod support;

use std::collections::BTreeMap;

use pelican_tests::admin::Admin;
use pelican_tests::server::{Flavor, Server};
use support::{lines_of, wait_until, Pelican, Scratch};

/// The threads of process `pid`, counted by name (the kernel keeps 15 bytes of a name: a
/// lane's worker `pelican-lane-0-12` is `pelican-lane-0-`, smol's pool's `blocking-12`
/// `blocking-12`, counted here as `blocking`).
fn threads(pid: u32) -> BTreeMap<String, usize> {
    let mut by_name = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return by_name };
    for task in tasks.flatten() {
        let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let name = name.trim_end();
        let name = if name.starts_with("blocking-") { "blocking" } else { name };
        *by_name.entry(name.to_string()).or_insert(0) += 1;
    }
    by_name
}

/// The threads that run commands: mio's lanes' workers, smol's blocking pool (which also
/// runs the rescan's `SCAN`: one more at most).
fn workers(transport: &str, threads: &BTreeMap<String, usize>) -> usize {
    let prefix = if transport == "mio" { "pelican-lane-" } else { "blocking" };
    threads.iter().filter(|(name, _)| name.starts_with(prefix)).map(|(_, n)| n).sum()
}

/// A command that logs `start <id>` to `log` and waits for `gate` (20 s at most, so that a
/// failed test leaves no command behind for long).
fn gated(log: &str, gate: &str) -> String {
    format!(
        "echo \"start $PELICAN_ID\" >> {log}; i=0; while [ ! -e {gate} ] && [ $i -lt 400 ]; do sleep 0.05; \
         i=$((i+1)); done; cat >/dev/null"
    )
}

fn add(admin: &mut Admin, streams: std::ops::Range<usize>, per: usize) {
    for s in streams {
        admin.xadd_n(&format!("t:{s}"), per, 4);
    }
}

/// Three streams found at the start, `--concurrency 2`, `--most-in-hand 8`: six commands in
/// hand at once, and no more worker threads than six (smol: seven, with the rescan's); two
/// streams found later raise what can be in hand to eight (ten, capped): eight commands, and
/// threads to match, no more.
fn threads_follow_what_can_be_in_hand(flavor: Flavor, transport: &str) {
    let server = Server::start(flavor);
    let mut admin = server.admin();
    add(&mut admin, 0..3, 4);
    let dir = Scratch::new("threads");
    let (log, first, second) = (dir.file("log"), dir.file("gate-1"), dir.file("gate-2"));
    // One command: which gate it waits on is read as it starts.
    let command =
        format!("if [ -e {first} ]; then {}; else {}; fi", gated(&log, &second), gated(&log, &first));
    let url = format!("redis://{}", server.addr());
    let args = [
        "consume",
        "--url",
        &url,
        "--stream-pattern",
        "t:*",
        "--rescan-ms",
        "100",
        "--group",
        "g",
        "--consumer",
        "c",
        "--create-group",
        "0",
        "--transport",
        transport,
        "--exec",
        &command,
        "--concurrency",
        "2",
        "--most-in-hand",
        "8",
    ];
    let mut p = Pelican::spawn(&args);
    let started = || lines_of(&log).len();
    wait_until("six commands in hand", || started() == 6);
    let at_six = threads(p.pid());
    let extra = usize::from(transport == "smol");
    assert!(
        (6..=6 + extra).contains(&workers(transport, &at_six)),
        "{transport}: three streams, two each: {at_six:?}"
    );
    assert_eq!(started(), 6, "{transport}: no more in hand than three streams, two each");

    // Two more streams, found by the rescan; the six through the first gate, what comes
    // next waits on the second: the first three streams' last six and the new ones' eight,
    // of which eight in hand.
    add(&mut admin, 3..5, 4);
    std::fs::write(&first, "").unwrap();
    wait_until("eight more in hand", || started() == 6 + 8);
    let at_eight = threads(p.pid());
    assert!(
        (8..=8 + extra).contains(&workers(transport, &at_eight)),
        "{transport}: five streams, two each, at most eight: {at_eight:?}"
    );
    assert_eq!(started(), 14, "{transport}: no more in hand than --most-in-hand");
    std::fs::write(&second, "").unwrap();
    let pending =
        |admin: &mut Admin| (0..5).map(|s| admin.xpending_count(&format!("t:{s}"), "g")).sum::<i64>();
    wait_until("all 20 handled", || started() == 20 && pending(&mut admin) == 0);
    p.stop();
    let total = |t: &BTreeMap<String, usize>| t.values().sum::<usize>();
    eprintln!(
        "{transport}: {} threads with 6 in hand ({} workers), {} with 8 ({} workers)",
        total(&at_six),
        workers(transport, &at_six),
        total(&at_eight),
        workers(transport, &at_eight)
    );
}

#[test]
fn threads_follow_what_can_be_in_hand_on_mio() {
    threads_follow_what_can_be_in_hand(Flavor::Redis70, "mio");
}

#[test]
fn threads_follow_what_can_be_in_hand_on_smol() {
    threads_follow_what_can_be_in_hand(Flavor::Valkey81, "smol");
}
