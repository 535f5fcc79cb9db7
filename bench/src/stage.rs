//! Exactly-once stages (`--stage RUNS`): a stage reads `A` and writes one entry naming each
//! input to `B`, with [`Verdict::Commit`] (the write and the ack in one fenced step) or
//! today's way (the handler `XADD`s to `B` itself, then acks).
//!
//! - **Kill -9 soak**: 3 worker processes (`stage-worker`), 15 kills (`kill -9`, the killed
//!   one started again under its name), 3,000 entries: inputs with no output (lost) and
//!   outputs beyond the first (duplicated).
//! - **Zombies**: 2 workers; one is frozen (`SIGSTOP`) past `min_idle` while it handles an
//!   entry, 5 times; its peer reclaims what it held; then it is thawed: duplicated outputs.
//! - **Throughput**: one consumer through a backlog with instant handlers, plain acks and
//!   commits interleaved round after round, at each `--batch`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use pelican::{Config, Verdict, Writes};
use pelican_tests::admin::Admin;
use pelican_tests::server::{Flavor, Server};

use crate::measure::median_range;

/// The two ways a stage settles an entry.
const MODES: [(&str, &str); 2] = [("commit", "Verdict::Commit"), ("naive", "XADD, then ack")];

/// Runs the three measurements on `flavor`, the soak and the zombie story `runs` times each.
pub fn run(
    flavor: Flavor,
    runs: usize,
    entries: usize,
    rounds: usize,
    batches: &[usize],
) -> Result<(), String> {
    println!("\n{} — exactly-once stages, A → B", flavor.name());
    println!("  kill -9 soak: 3 workers, 15 kills, 3,000 entries, handler 2 ms; {runs} runs each");
    for (mode, how) in MODES {
        let (mut lost, mut twice) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            let (l, t) = soak(flavor, mode)?;
            lost.push(l as f64);
            twice.push(t as f64);
        }
        let (l, l_lo, l_hi) = median_range(&mut lost);
        let (t, t_lo, t_hi) = median_range(&mut twice);
        println!("    {how:<16} lost {l:.0} ({l_lo:.0}–{l_hi:.0}), duplicated {t:.0} ({t_lo:.0}–{t_hi:.0})");
    }
    println!("  zombies: 2 workers, 400 entries, handler 50 ms, one frozen 5 times for 6 × min_idle (500 ms); {runs} runs each");
    for (mode, how) in MODES {
        let mut twice = Vec::new();
        for _ in 0..runs {
            twice.push(zombies(flavor, mode)? as f64);
        }
        let (t, lo, hi) = median_range(&mut twice);
        println!("    {how:<16} duplicated {t:.0} ({lo:.0}–{hi:.0}), none lost");
    }
    throughput(flavor, entries, rounds, batches)
}

fn worker_binary() -> Result<PathBuf, String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let path = me.with_file_name("stage-worker");
    match path.exists() {
        true => Ok(path),
        false => {
            Err(format!("{} is missing: build it (cargo build --release -p pelican-bench)", path.display()))
        }
    }
}

fn spawn(
    server: &Server,
    name: &str,
    mode: &str,
    min_idle_ms: u64,
    handler_ms: u64,
) -> Result<Child, String> {
    let addr = server.addr().to_string();
    Command::new(worker_binary()?)
        .args([&addr, name, mode, &min_idle_ms.to_string(), &handler_ms.to_string()])
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("stage-worker: {e}"))
}

fn signal(child: &Child, signal: &str) {
    let _ = Command::new("kill").args([signal, &child.id().to_string()]).status();
}

fn prepare(server: &Server, entries: usize) -> (Admin, Vec<String>) {
    let mut admin = server.admin();
    admin.call(&["XGROUP", "CREATE", "A", "g", "0", "MKSTREAM"]);
    let ids = admin.xadd_n("A", entries, 16);
    (admin, ids)
}

/// Waits until every input was delivered and acked, then counts (lost, duplicated) outputs.
fn tally(admin: &mut Admin, ids: &[String], workers: &mut [Child]) -> Result<(usize, usize), String> {
    let last = ids.last().cloned().unwrap_or_default();
    let started = Instant::now();
    loop {
        let groups = format!("{:?}", admin.call(&["XINFO", "GROUPS", "A"]));
        if groups.contains(&last) && admin.xpending_count("A", "g") == 0 {
            break;
        }
        if started.elapsed() > Duration::from_secs(120) {
            return Err(format!("not done after 2 minutes: {groups}"));
        }
        thread::sleep(Duration::from_millis(20));
    }
    for w in workers.iter_mut() {
        let _ = w.kill();
        let _ = w.wait();
    }
    let outputs = admin.count_by_field("B", "input");
    let lost = ids.iter().filter(|id| !outputs.contains_key(*id)).count();
    let twice = outputs.values().map(|n| n.saturating_sub(1)).sum();
    Ok((lost, twice))
}

/// One soak: (lost, duplicated).
fn soak(flavor: Flavor, mode: &str) -> Result<(usize, usize), String> {
    let server = Server::start(flavor);
    let (mut admin, ids) = prepare(&server, 3000);
    let names = ["w0", "w1", "w2"];
    let mut workers =
        names.iter().map(|n| spawn(&server, n, mode, 1000, 2)).collect::<Result<Vec<_>, _>>()?;
    for kill in 0..15 {
        thread::sleep(Duration::from_millis(120));
        let i = kill % names.len();
        let _ = workers[i].kill(); // SIGKILL
        let _ = workers[i].wait();
        workers[i] = spawn(&server, names[i], mode, 1000, 2)?;
    }
    tally(&mut admin, &ids, &mut workers)
}

/// One zombie story: duplicated outputs.
fn zombies(flavor: Flavor, mode: &str) -> Result<usize, String> {
    let server = Server::start(flavor);
    let (mut admin, ids) = prepare(&server, 400);
    let mut workers = vec![spawn(&server, "zombie", mode, 500, 50)?, spawn(&server, "peer", mode, 500, 50)?];
    for _ in 0..5 {
        thread::sleep(Duration::from_millis(120)); // at work, an entry in hand
        signal(&workers[0], "-STOP");
        thread::sleep(Duration::from_millis(3000));
        signal(&workers[0], "-CONT");
    }
    let (lost, twice) = tally(&mut admin, &ids, &mut workers)?;
    if lost > 0 {
        return Err(format!("{mode}: {lost} inputs lost"));
    }
    Ok(twice)
}

/// Entries/s with plain acks and with commits (one `XADD` each), at each batch size.
fn throughput(flavor: Flavor, entries: usize, rounds: usize, batches: &[usize]) -> Result<(), String> {
    let server = Server::start(flavor);
    println!("  throughput: {entries} entries, instant handlers, {rounds} rounds, medians (min–max)");
    println!(
        "    {:>6}  {:>22}  {:>22}  {:>7}  {:>22}",
        "COUNT", "plain acks", "commits (1 XADD)", "ratio", "XADD, then ack"
    );
    for &batch in batches {
        let (mut plain, mut committed, mut naive) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            naive.push(naive_rate(&server, entries.min(20_000), batch)?);
            for (commit, rates) in [(false, &mut plain), (true, &mut committed)] {
                let mut admin = server.admin();
                admin.cmd(&["DEL", "A", "B"]);
                admin.xadd_n("A", entries, 16);
                admin.call(&["XGROUP", "CREATE", "A", "g", "0"]);
                let config = Config::new("A", "g", "bench").count(batch as u32);
                let runner = pelican_mio::Runner::new(server.addr(), config).map_err(|e| e.to_string())?;
                let stop = runner.stop_handle();
                let (started, mut handled) = (Instant::now(), 0);
                let stats = runner
                    .run(|entry| {
                        handled += 1;
                        if handled == entries {
                            stop.stop();
                        }
                        match commit {
                            true => Verdict::Commit(Writes::new().add("B", [(&b"input"[..], entry.id())])),
                            false => Verdict::Ack,
                        }
                    })
                    .map_err(|e| e.to_string())?;
                let took = started.elapsed();
                if stats.acked != entries as u64 || (commit && stats.committed != entries as u64) {
                    return Err(format!("COUNT {batch}, commit {commit}: {stats:?}"));
                }
                if commit && admin.xlen("B") != entries as i64 {
                    return Err(format!("COUNT {batch}: {} outputs of {entries}", admin.xlen("B")));
                }
                rates.push(entries as f64 / took.as_secs_f64());
            }
        }
        let (p, p_lo, p_hi) = median_range(&mut plain);
        let (c, c_lo, c_hi) = median_range(&mut committed);
        let (n, n_lo, n_hi) = median_range(&mut naive);
        println!(
            "    {batch:>6}  {:>6.0}k ({:>5.0}k–{:>5.0}k)  {:>6.0}k ({:>5.0}k–{:>5.0}k)  {:>6.2}×  {:>6.1}k ({:>5.1}k–{:>5.1}k)",
            p / 1e3,
            p_lo / 1e3,
            p_hi / 1e3,
            c / 1e3,
            c_lo / 1e3,
            c_hi / 1e3,
            c / p,
            n / 1e3,
            n_lo / 1e3,
            n_hi / 1e3,
        );
    }
    Ok(())
}

/// Entries/s of today's way: the handler `XADD`s each output itself (a round trip each, on
/// a connection of its own), then acks.
fn naive_rate(server: &Server, entries: usize, batch: usize) -> Result<f64, String> {
    let mut admin = server.admin();
    admin.cmd(&["DEL", "A", "B"]);
    admin.xadd_n("A", entries, 16);
    admin.call(&["XGROUP", "CREATE", "A", "g", "0"]);
    let client = redis::Client::open(format!("redis://{}/", server.addr())).map_err(|e| e.to_string())?;
    let mut connection = client.get_connection().map_err(|e| e.to_string())?;
    let config = Config::new("A", "g", "bench").count(batch as u32);
    let runner = pelican_mio::Runner::new(server.addr(), config).map_err(|e| e.to_string())?;
    let stop = runner.stop_handle();
    let (started, mut handled) = (Instant::now(), 0);
    runner
        .run(|entry| {
            handled += 1;
            if handled == entries {
                stop.stop();
            }
            let written: redis::RedisResult<String> =
                redis::cmd("XADD").arg("B").arg("*").arg("input").arg(entry.id()).query(&mut connection);
            match written {
                Ok(_) => Verdict::Ack,
                Err(_) => Verdict::Retry,
            }
        })
        .map_err(|e| e.to_string())?;
    Ok(entries as f64 / started.elapsed().as_secs_f64())
}
