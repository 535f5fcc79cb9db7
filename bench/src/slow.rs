//! Handlers that wait on I/O: one consumer with `n` entries in hand (entries/s against the
//! `n / latency` a perfect consumer reaches), and several consumers sharing one backlog (who
//! handled how many, and how long it took).

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pelican::{Config, Verdict};
use pelican_tests::admin::Admin;

const STREAM: &str = "slow";
const GROUP: &str = "g";

/// A fresh stream of `n` entries and its group at 0.
fn fill(admin: &mut Admin, n: usize) {
    admin.cmd(&["DEL", STREAM]);
    admin.xadd_n(STREAM, n, 16);
    admin.call(&["XGROUP", "CREATE", STREAM, GROUP, "0"]);
}

fn config(consumer: &str, n: u32) -> Config {
    Config::new(STREAM, GROUP, consumer).concurrency(n)
}

/// One consumer, `n` in hand, each handler waiting `wait`: entries/s for pelican-smol (a timer
/// awaited) and pelican-mio's `run_pool` (a thread asleep).
pub fn throughput(admin: &mut Admin, addr: SocketAddr, wait: Duration, ns: &[u32]) -> Result<(), String> {
    println!("\n  one consumer, handler waiting {wait:?}: entries/s (× the n / latency ideal)");
    println!("  {:>6} {:>8} {:>22} {:>22}", "n", "entries", "pelican-smol", "pelican-mio run_pool");
    for &n in ns {
        let total = (100 * n as usize).max(200);
        let ideal = f64::from(n) / wait.as_secs_f64();
        fill(admin, total);
        let smol = timed(total, || smol_one(addr, config("smol", n), wait, total))?;
        fill(admin, total);
        let mio = timed(total, || mio_pool(addr, config("mio", n), wait, total))?;
        let cell = |rate: f64| format!("{rate:>9.0} ({:>4.2}×)", rate / ideal);
        println!("  {n:>6} {total:>8} {:>22} {:>22}", cell(smol), cell(mio));
        if admin.xpending_count(STREAM, GROUP) != 0 {
            return Err(format!("n = {n}: entries left pending"));
        }
    }
    Ok(())
}

/// Entries/s of `run`, which must handle `total` entries.
fn timed(total: usize, run: impl FnOnce() -> Result<usize, String>) -> Result<f64, String> {
    let started = Instant::now();
    let handled = run()?;
    if handled != total {
        return Err(format!("handled {handled} of {total}"));
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

fn smol_one(addr: SocketAddr, config: Config, wait: Duration, total: usize) -> Result<usize, String> {
    let runner = pelican_smol::Runner::new(addr, config).map_err(|e| e.to_string())?;
    let stop = runner.stop_handle();
    let handled = AtomicUsize::new(0);
    let handled = &handled;
    smol::block_on(runner.run(|_| {
        let stop = stop.clone();
        async move {
            smol::Timer::after(wait).await;
            if handled.fetch_add(1, Ordering::Relaxed) + 1 == total {
                stop.stop();
            }
            Verdict::Ack
        }
    }))
    .map_err(|e| e.to_string())?;
    Ok(handled.load(Ordering::Relaxed))
}

fn mio_pool(addr: SocketAddr, config: Config, wait: Duration, total: usize) -> Result<usize, String> {
    let runner = pelican_mio::Runner::new(addr, config).map_err(|e| e.to_string())?;
    let stop = runner.stop_handle();
    let handled = AtomicUsize::new(0);
    runner
        .run_pool(|_| {
            std::thread::sleep(wait);
            if handled.fetch_add(1, Ordering::Relaxed) + 1 == total {
                stop.stop();
            }
            Verdict::Ack
        })
        .map_err(|e| e.to_string())?;
    Ok(handled.load(Ordering::Relaxed))
}

/// `consumers` pelican-smol consumers on one executor, `n` in hand each, sharing `total`
/// waiting entries, each handler waiting `wait`: how many each handled, and the time.
pub fn shared(
    admin: &mut Admin,
    addr: SocketAddr,
    wait: Duration,
    consumers: usize,
    n: u32,
    total: usize,
) -> Result<(), String> {
    fill(admin, total);
    let runners: Vec<pelican_smol::Runner> = (0..consumers)
        .map(|i| pelican_smol::Runner::new(addr, config(&format!("c{i}"), n)).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let stops: Vec<pelican_smol::StopHandle> = runners.iter().map(|r| r.stop_handle()).collect();
    let counts: Vec<Rc<Cell<usize>>> = (0..consumers).map(|_| Rc::new(Cell::new(0))).collect();
    let all = Rc::new(Cell::new(0));
    let executor = smol::LocalExecutor::new();
    let started = Instant::now();
    let tasks: Vec<_> = runners
        .into_iter()
        .zip(&counts)
        .map(|(runner, count)| {
            let (count, all, stops) = (count.clone(), all.clone(), stops.clone());
            executor.spawn(async move {
                runner
                    .run(move |_| {
                        let (count, all, stops) = (count.clone(), all.clone(), stops.clone());
                        async move {
                            smol::Timer::after(wait).await;
                            count.set(count.get() + 1);
                            all.set(all.get() + 1);
                            if all.get() == total {
                                stops.iter().for_each(|s| s.stop());
                            }
                            Verdict::Ack
                        }
                    })
                    .await
            })
        })
        .collect();
    smol::block_on(executor.run(async {
        for task in tasks {
            task.await.map_err(|e| e.to_string())?;
        }
        Ok::<(), String>(())
    }))?;
    let took = started.elapsed();
    let each: Vec<usize> = counts.iter().map(|c| c.get()).collect();
    println!(
        "\n  {consumers} pelican-smol consumers on one executor, n = {n} each, {total} entries, handler waiting \
         {wait:?}: {took:.2?} in all ({:.0} entries/s), handled per consumer {each:?}",
        total as f64 / took.as_secs_f64()
    );
    if each.iter().sum::<usize>() != total || admin.xpending_count(STREAM, GROUP) != 0 {
        return Err(format!("handled {each:?} of {total}, or entries left pending"));
    }
    Ok(())
}
