//! An exactly-once stage: reads `orders`, writes one priced entry per order to
//! `orders:priced` and counts them in `orders:count`, the writes and the ack in one fenced
//! step (`Verdict::Commit`): `cargo run -p pelican-smol --example smol_stage [ADDR]`. Stops on
//! its own after 10 seconds.

use std::time::Duration;

use pelican::{Config, Verdict, Writes};
use pelican_smol::Runner;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:6379".into());
    let config = Config::new("orders", "pricing", "stage-1")
        .create_group("0")
        .commit_to(["orders:priced", "orders:count"]);
    let runner = Runner::new(addr.as_str(), config)?;
    let stop = runner.stop_handle();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(10));
        stop.stop();
    });
    let stats = smol::block_on(runner.run(|order| async move {
        let qty: u64 =
            order.field(b"qty").and_then(|q| std::str::from_utf8(q).ok()?.parse().ok()).unwrap_or(1);
        let total = format!("{:.2}", qty as f64 * 1.25);
        Verdict::Commit(
            Writes::new()
                .add("orders:priced", [(&b"order"[..], order.id()), (b"total", total.as_bytes())])
                .incr_by("orders:count", 1),
        )
    }))?;
    println!(
        "committed {}, fenced {}, refused {}",
        stats.committed, stats.commits_fenced, stats.commits_refused
    );
    Ok(())
}
