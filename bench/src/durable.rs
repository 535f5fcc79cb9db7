//! What `Config::ack_replicas` costs and what it saves (`--durable`):
//!
//! - **Cost**: a master and its replica; the same backlog consumed by `pelican-mio` with plain
//!   acks and with `ack_replicas(1, 1 s)` (a `WAIT 1` behind each batch of acks), interleaved
//!   round after round, at each `--batch`: entries/s, and the ratio.
//! - **Savings**: a master, its replica and three sentinels; a consumer works through a
//!   backlog; the replica is frozen (SIGSTOP) and its link cut (`CLIENT KILL TYPE replica` on
//!   the master), so it copies nothing for 300 ms, then the master is killed (`kill -9`); the
//!   replica, thawed, is promoted, lacking the acks of those 300 ms. (Freezing the replica
//!   alone loses nothing: the kernel still holds what the master sent, and the replica reads
//!   it when it wakes.) Entries handled twice afterwards, with plain acks and with
//!   `ack_replicas`, each run several times; nothing may be lost either way.

use std::collections::HashMap;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use pelican::{Config, Verdict};
use pelican_tests::sentinel::{Topology, TopologyOptions};
use pelican_tests::server::{Flavor, Options};

use crate::measure::median_range;

const STREAM: &str = "durable";
const GROUP: &str = "g";

/// The cost: entries/s with and without `ack_replicas`, at each of `batches`.
pub fn cost(flavor: Flavor, entries: usize, rounds: usize, batches: &[usize]) -> Result<(), String> {
    let topology = Topology::start_pair(flavor);
    let master = topology.master();
    println!(
        "\n{} — {entries} entries, master + replica on loopback, {rounds} rounds, medians (min–max)",
        flavor.name()
    );
    println!("  {:>6}  {:>22}  {:>22}  {:>7}", "COUNT", "plain acks", "ack_replicas(1, 1 s)", "ratio");
    for &batch in batches {
        let (mut plain, mut waited) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            for (wait, rates) in [(false, &mut plain), (true, &mut waited)] {
                let mut admin = topology.admin(master);
                admin.cmd(&["DEL", STREAM]);
                admin.xadd_n(STREAM, entries, 16);
                admin.call(&["XGROUP", "CREATE", STREAM, GROUP, "0"]);
                admin.cmd(&["WAIT", "1", "5000"]);
                let mut config = Config::new(STREAM, GROUP, "bench").count(batch as u32);
                if wait {
                    config = config.ack_replicas(1, Duration::from_secs(1));
                }
                let runner = pelican_mio::Runner::new(master, config).map_err(|e| e.to_string())?;
                let stop = runner.stop_handle();
                let started = Instant::now();
                let mut handled = 0;
                let stats = runner
                    .run(|_| {
                        handled += 1;
                        if handled == entries {
                            stop.stop();
                        }
                        Verdict::Ack
                    })
                    .map_err(|e| e.to_string())?;
                let took = started.elapsed();
                if stats.acked != entries as u64 || stats.acks_unreplicated != 0 {
                    return Err(format!("COUNT {batch}, wait {wait}: {stats:?}"));
                }
                rates.push(entries as f64 / took.as_secs_f64());
            }
        }
        let (p, p_lo, p_hi) = median_range(&mut plain);
        let (w, w_lo, w_hi) = median_range(&mut waited);
        println!(
            "  {batch:>6}  {:>6.0}k ({:>5.0}k–{:>5.0}k)  {:>6.0}k ({:>5.0}k–{:>5.0}k)  {:>6.2}×",
            p / 1e3,
            p_lo / 1e3,
            p_hi / 1e3,
            w / 1e3,
            w_lo / 1e3,
            w_hi / 1e3,
            w / p
        );
    }
    Ok(())
}

/// The savings: entries handled twice after a failover that lost the last writes, with and
/// without `ack_replicas`, over `runs` runs each.
pub fn savings(flavor: Flavor, runs: usize) -> Result<(), String> {
    println!(
        "\n{} — a failover that loses 300 ms of writes (the replica cut off, the master killed), {runs} runs each",
        flavor.name()
    );
    for wait in [false, true] {
        let mut twice = Vec::new();
        for _ in 0..runs {
            twice.push(one_failover(flavor, wait)? as f64);
        }
        let (median, lo, hi) = median_range(&mut twice);
        let how = if wait { "ack_replicas(1, 1 s)" } else { "plain acks" };
        println!("  {how:<22} handled twice: median {median:.0} (min {lo:.0}, max {hi:.0}); none lost");
    }
    Ok(())
}

/// One run: a backlog of 20,000 entries, the consumer through a quarter of it, then the
/// failover; returns how many entries were handled more than once. Fails if one was lost.
fn one_failover(flavor: Flavor, wait: bool) -> Result<usize, String> {
    const ENTRIES: usize = 20_000;
    let options = TopologyOptions { data: Options::default(), ..TopologyOptions::default() };
    let mut topology = Topology::start_with(flavor, options);
    let master = topology.master();
    let mut admin = topology.admin(master);
    admin.xadd_n(STREAM, ENTRIES, 16);
    admin.call(&["XGROUP", "CREATE", STREAM, GROUP, "0"]);
    admin.cmd(&["WAIT", "1", "5000"]);
    let mut config = Config::new(STREAM, GROUP, "bench")
        .count(100)
        .backoff(Duration::from_millis(20), Duration::from_millis(500));
    if wait {
        config = config.ack_replicas(1, Duration::from_secs(1));
    }
    let seen: Arc<Mutex<HashMap<Vec<u8>, u32>>> = Arc::default();
    let runner = pelican_mio::Runner::new(topology.sentinels(), config).map_err(|e| e.to_string())?;
    let stop = runner.stop_handle();
    let counts = seen.clone();
    let consumer = thread::spawn(move || {
        runner.run(|entry| {
            *counts.lock().unwrap().entry(entry.id().to_vec()).or_default() += 1;
            // A little work, so that the failover finds the backlog half done.
            thread::sleep(Duration::from_micros(200));
            Verdict::Ack
        })
    });
    let waited = Instant::now();
    while seen.lock().unwrap().len() < ENTRIES / 4 {
        if waited.elapsed() > Duration::from_secs(30) {
            return Err("the consumer did not get going".into());
        }
        thread::sleep(Duration::from_millis(5));
    }
    let replica = topology.replica();
    let pid =
        topology.nodes().iter().find(|n| n.addr() == replica).and_then(|n| n.pid()).ok_or("no replica")?;
    signal("STOP", pid)?;
    topology.admin(master).cmd(&["CLIENT", "KILL", "TYPE", "slave"]);
    thread::sleep(Duration::from_millis(300));
    topology.node_mut(master).kill9();
    thread::sleep(Duration::from_millis(100));
    signal("CONT", pid)?;
    topology.wait_for_master(master);
    let waited = Instant::now();
    while seen.lock().unwrap().len() < ENTRIES {
        if waited.elapsed() > Duration::from_secs(60) {
            let got = seen.lock().unwrap().len();
            return Err(format!(
                "only {got} of {ENTRIES} entries handled after the failover: some were lost"
            ));
        }
        thread::sleep(Duration::from_millis(20));
    }
    stop.stop();
    consumer.join().map_err(|_| "the consumer panicked")?.map_err(|e| e.to_string())?;
    let twice = seen.lock().unwrap().values().filter(|n| **n > 1).count();
    Ok(twice)
}

/// `kill -SIG pid`.
fn signal(sig: &str, pid: u32) -> Result<(), String> {
    let status = Command::new("kill").args([format!("-{sig}"), pid.to_string()]).status();
    match status {
        Ok(s) if s.success() => Ok(()),
        other => Err(format!("kill -{sig} {pid}: {other:?}")),
    }
}
