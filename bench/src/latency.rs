//! From `XADD` to the handler: a producer adds entries at an even pace, each stamped with
//! the time it was sent; a consumer already parked on the stream records, for each entry,
//! how long after its stamp the handler saw it. p50 / p99 / max per contender.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use pelican::{Config, Entry, Verdict};
use pelican_tests::admin::Admin;

use crate::measure::produce;

const STREAM: &str = "latency";
const GROUP: &str = "g";

/// Who consumes, and with how many in hand.
#[derive(Clone, Copy, Debug)]
enum Who {
    Raw,
    Mio(u32),
    Smol(u32),
}

impl Who {
    fn name(self) -> String {
        match self {
            Who::Raw => "hand-pipelined".into(),
            Who::Mio(1) => "pelican-mio run, n = 1".into(),
            Who::Mio(n) => format!("pelican-mio run_pool, n = {n}"),
            Who::Smol(n) => format!("pelican-smol, n = {n}"),
        }
    }
}

/// Latencies seen, in µs, against one clock: `origin`.
struct Seen {
    origin: Instant,
    micros: Mutex<Vec<u64>>,
}

impl Seen {
    fn record(&self, stamp: &[u8]) {
        let Some(sent) = std::str::from_utf8(stamp).ok().and_then(|s| s.parse::<u64>().ok()) else { return };
        let now = self.origin.elapsed().as_micros() as u64;
        self.micros.lock().unwrap().push(now.saturating_sub(sent));
    }

    fn entry(&self, entry: &Entry) {
        if let Some(stamp) = entry.field(b"t") {
            self.record(stamp);
        }
    }
}

/// Each contender in turn: parked first, then `rate` entries/s for `seconds`.
pub fn run(admin: &mut Admin, addr: SocketAddr, rate: u32, seconds: u64, ns: &[u32]) -> Result<(), String> {
    let total = rate as usize * seconds as usize;
    println!(
        "\n  from XADD to the handler, {rate} entries/s at an even pace for {seconds} s ({total} entries)"
    );
    println!("  {:<28} {:>10} {:>10} {:>10}", "", "p50", "p99", "max");
    let mut who = vec![Who::Raw];
    for &n in ns {
        if n == 1 {
            who.push(Who::Mio(1));
        } else {
            who.push(Who::Mio(n));
        }
        who.push(Who::Smol(n));
    }
    for w in who {
        admin.cmd(&["DEL", STREAM]);
        admin.call(&["XGROUP", "CREATE", STREAM, GROUP, "$", "MKSTREAM"]);
        let seen = Arc::new(Seen { origin: Instant::now(), micros: Mutex::new(Vec::with_capacity(total)) });
        let consumer = {
            let seen = seen.clone();
            thread::spawn(move || consume(w, addr, total, &seen))
        };
        thread::sleep(Duration::from_millis(500)); // connected and parked
        let origin = seen.origin;
        let keys = [STREAM.to_string()];
        produce(admin, &keys, rate, rate as u64 * seconds, || origin.elapsed().as_micros().to_string())?;
        consumer.join().map_err(|_| "the consumer panicked".to_string())??;
        let mut micros = std::mem::take(&mut *seen.micros.lock().unwrap());
        if micros.len() != total {
            return Err(format!("{}: saw {} of {total}", w.name(), micros.len()));
        }
        micros.sort_unstable();
        let at = |q: f64| Duration::from_micros(micros[((micros.len() - 1) as f64 * q) as usize]);
        println!(
            "  {:<28} {:>10.2?} {:>10.2?} {:>10.2?}",
            w.name(),
            at(0.5),
            at(0.99),
            Duration::from_micros(*micros.last().unwrap_or(&0))
        );
    }
    Ok(())
}

fn consume(who: Who, addr: SocketAddr, total: usize, seen: &Seen) -> Result<(), String> {
    let done = AtomicBool::new(false);
    let count = std::sync::atomic::AtomicUsize::new(0);
    let counted = |stop: &dyn Fn()| {
        if count.fetch_add(1, Ordering::Relaxed) + 1 == total && !done.swap(true, Ordering::Relaxed) {
            stop();
        }
    };
    let config = |n: u32| Config::new(STREAM, GROUP, "c").concurrency(n);
    match who {
        Who::Raw => crate::raw::follow(addr, STREAM, GROUP, "c", total, |stamp| seen.record(stamp))
            .map_err(|e| e.to_string()),
        Who::Mio(1) => {
            let runner = pelican_mio::Runner::new(addr, config(1)).map_err(|e| e.to_string())?;
            let stop = runner.stop_handle();
            runner
                .run(|e| {
                    seen.entry(e);
                    counted(&|| stop.stop());
                    Verdict::Ack
                })
                .map(drop)
                .map_err(|e| e.to_string())
        }
        Who::Mio(n) => {
            let runner = pelican_mio::Runner::new(addr, config(n)).map_err(|e| e.to_string())?;
            let stop = runner.stop_handle();
            runner
                .run_pool(|e| {
                    seen.entry(e);
                    counted(&|| stop.stop());
                    Verdict::Ack
                })
                .map(drop)
                .map_err(|e| e.to_string())
        }
        Who::Smol(n) => {
            let runner = pelican_smol::Runner::new(addr, config(n)).map_err(|e| e.to_string())?;
            let stop = runner.stop_handle();
            smol::block_on(runner.run(|e| {
                seen.entry(&e);
                counted(&|| stop.stop());
                async { Verdict::Ack }
            }))
            .map(drop)
            .map_err(|e| e.to_string())
        }
    }
}
