//! One consumer on the calling thread: `cargo run -p pelican-smol --example smol_blocking [ADDR]`.
//! Stops on its own after 10 seconds.

use std::time::Duration;

use pelican::{Config, Verdict};
use pelican_smol::Runner;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:6379".into());
    let config = Config::new("orders", "billing", "worker-1").create_group("0");
    let runner = Runner::new(addr.as_str(), config)?;
    let stop = runner.stop_handle();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(10));
        stop.stop();
    });
    let stats = smol::block_on(runner.run(|entry| async move {
        println!("{:?}", entry);
        Verdict::Ack
    }))?;
    println!("{stats:?}");
    Ok(())
}
