//! Three consumers of one group as tasks on one `smol::Executor`:
//! `cargo run --example many [ADDR]`. Stops on its own after 10 seconds.

use std::time::Duration;

use pelican::{Config, Verdict};
use pelican_smol::Runner;
use smol::{Executor, Timer};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:6379".into());
    let ex = Executor::new();
    let mut tasks = Vec::new();
    let mut stops = Vec::new();
    for i in 0..3 {
        let name = format!("worker-{i}");
        let runner = Runner::new(addr.as_str(), Config::new("orders", "billing", &name).create_group("0"))?;
        stops.push(runner.stop_handle());
        tasks.push(ex.spawn(runner.run(move |entry| {
            let name = name.clone();
            async move {
                // The handler's own I/O: it yields to the other consumers while it waits.
                Timer::after(Duration::from_millis(10)).await;
                println!("{name}: {:?}", entry.id());
                Verdict::Ack
            }
        })));
    }
    smol::block_on(ex.run(async {
        Timer::after(Duration::from_secs(10)).await;
        stops.iter().for_each(|stop| stop.stop());
        for task in tasks {
            println!("{:?}", task.await?);
        }
        Ok(())
    }))
}
