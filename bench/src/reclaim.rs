//! A dead peer's backlog reclaimed: one consumer takes `n` entries a dead consumer held, in
//! the classic dialect (`XAUTOCLAIM` each beat, `XPENDING` for the counts) and, where the
//! server speaks it, the Redis 8 dialect (reads that `CLAIM`). Commands the server ran per
//! 1,000 entries (`INFO commandstats`, reset before each run) and the time to handle them all.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pelican::{Config, Verdict};
use pelican_tests::admin::Admin;

const STREAM: &str = "reclaim";
const GROUP: &str = "g";
const MIN_IDLE: Duration = Duration::from_millis(200);

/// The runs on one server: each dialect it speaks.
pub fn compare(admin: &mut Admin, addr: SocketAddr, n: usize, redis8: bool) -> Result<(), String> {
    println!("\n  a dead peer's {n} entries reclaimed by one consumer (COUNT 100, min_idle {MIN_IDLE:?})");
    println!("  {:<26} {:>9} {:>14} {:>10}  by command", "dialect", "commands", "per 1,000", "time");
    let mut dialects = vec![("classic (XAUTOCLAIM)", true)];
    if redis8 {
        dialects.push(("Redis 8 (XREADGROUP CLAIM)", false));
    }
    for (name, classic) in dialects {
        admin.cmd(&["DEL", STREAM]);
        admin.xadd_n(STREAM, n, 16);
        admin.call(&["XGROUP", "CREATE", STREAM, GROUP, "0"]);
        admin.call(&["XREADGROUP", "GROUP", GROUP, "dead", "COUNT", "1000000000", "STREAMS", STREAM, ">"]);
        std::thread::sleep(MIN_IDLE + Duration::from_millis(20));
        admin.call(&["CONFIG", "RESETSTAT"]);
        let started = Instant::now();
        let mut config = Config::new(STREAM, GROUP, "c1").min_idle(MIN_IDLE).count(100).start_count(100);
        if classic {
            config = config.classic_verbs();
        }
        let handled = run(addr, config, n)?;
        let took = started.elapsed();
        let stats = admin.info("commandstats");
        if handled != n || admin.xpending_count(STREAM, GROUP) != 0 {
            return Err(format!("{name}: handled {handled} of {n}, or entries left pending"));
        }
        let calls = command_calls(&stats);
        let total: u64 = calls.iter().map(|(_, c, _)| c).sum();
        let per = total as f64 * 1000.0 / n as f64;
        let by: Vec<String> = calls
            .iter()
            .map(|(cmd, c, usec)| format!("{cmd} {c} ({:.1} ms)", *usec as f64 / 1000.0))
            .collect();
        println!("  {name:<26} {total:>9} {per:>14.1} {:>9.0?}  {}", took, by.join(", "));
    }
    Ok(())
}

fn run(addr: SocketAddr, config: Config, n: usize) -> Result<usize, String> {
    let runner = pelican_mio::Runner::new(addr, config).map_err(|e| e.to_string())?;
    let stop = runner.stop_handle();
    let handled = AtomicUsize::new(0);
    runner
        .run(|_| {
            if handled.fetch_add(1, Ordering::Relaxed) + 1 == n {
                stop.stop();
            }
            Verdict::Ack
        })
        .map_err(|e| e.to_string())?;
    Ok(handled.load(Ordering::Relaxed))
}

/// `cmdstat_<name>:calls=N,usec=U,…` lines (name, calls, the server's time in them in µs),
/// but the bench's own `INFO` and `CONFIG`; most first.
fn command_calls(stats: &str) -> Vec<(String, u64, u64)> {
    let mut calls: Vec<(String, u64, u64)> = stats
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let mut fields = rest.split(',');
            let n = fields.next()?.strip_prefix("calls=")?.parse().ok()?;
            let usec = fields.next()?.strip_prefix("usec=")?.parse().ok()?;
            Some((name.to_string(), n, usec))
        })
        .filter(|(name, ..)| !matches!(name.as_str(), "info" | "config|resetstat" | "config"))
        .collect();
    calls.sort_by_key(|c| std::cmp::Reverse(c.1));
    calls
}
