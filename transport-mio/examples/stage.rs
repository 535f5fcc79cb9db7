//! An exactly-once stage: reads `orders`, writes one priced entry per order to
//! `orders:priced` and counts them in `orders:count` — the writes and the ack in one fenced
//! step (`Verdict::Commit`), so a crash, a lost connection or a pause past `min_idle` never
//! writes an order twice.
//!
//! ```text
//! cargo run -p pelican-mio --example stage -- 127.0.0.1:6379 [max-seconds]
//! redis-cli XADD orders '*' item pen qty 3
//! ```

use std::process::ExitCode;
use std::thread;
use std::time::Duration;

use pelican::{Config, Trim, Verdict, Writes};
use pelican_mio::Runner;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let addr = args.first().map_or("127.0.0.1:6379", String::as_str);
    let seconds: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(10);
    // Declaring the keys checks, at every connect, that they may be written (and share the
    // stream's slot in a cluster) before anything is read.
    let config = Config::new("orders", "pricing", "stage-1")
        .create_group("0")
        .commit_to(["orders:priced", "orders:count"]);
    let runner = match Runner::new(addr, config) {
        Ok(runner) => runner,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let stop = runner.stop_handle();
    thread::spawn(move || {
        thread::sleep(Duration::from_secs(seconds));
        stop.stop();
    });
    let outcome = runner.run(|order| {
        let qty: u64 =
            order.field(b"qty").and_then(|q| std::str::from_utf8(q).ok()?.parse().ok()).unwrap_or(1);
        let total = format!("{:.2}", qty as f64 * 1.25);
        Verdict::Commit(
            Writes::new()
                .add_trimmed(
                    "orders:priced",
                    [(&b"order"[..], order.id()), (b"total", total.as_bytes())],
                    Trim::MaxLen(100_000),
                )
                .incr_by("orders:count", 1),
        )
    });
    match outcome {
        Ok(stats) => {
            println!(
                "committed {}, fenced {}, refused {}",
                stats.committed, stats.commits_fenced, stats.commits_refused
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
