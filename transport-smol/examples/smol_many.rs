//! Three consumers of one group as tasks on one `smol::Executor`:
//! `cargo run -p pelican-smol --example smol_many [ADDR]`. Stops on its own after 10 seconds.
//!
//! Inside the executor the runners are made with `Runner::resolve`, which looks the host up
//! on smol's blocking pool: `Runner::new` would block the executor's thread meanwhile.

use std::time::Duration;

use pelican::{Config, Verdict};
use pelican_smol::Runner;
use smol::{Executor, Timer};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:6379".into());
    let ex = Executor::new();
    smol::block_on(ex.run(async {
        let (mut tasks, mut stops) = (Vec::new(), Vec::new());
        for i in 0..3 {
            let name = format!("worker-{i}");
            let config = Config::new("orders", "billing", &name).create_group("0");
            let runner = Runner::resolve(addr.as_str(), config).await?;
            stops.push(runner.stop_handle());
            tasks.push(ex.spawn(runner.run(move |entry| {
                let name = name.clone();
                async move {
                    // The handler's own I/O: it yields to the other consumers while it waits.
                    Timer::after(Duration::from_millis(10)).await;
                    println!("{name}: {}", String::from_utf8_lossy(entry.id()));
                    Verdict::Ack
                }
            })));
        }
        Timer::after(Duration::from_secs(10)).await;
        stops.iter().for_each(|stop| stop.stop());
        for task in tasks {
            println!("{:?}", task.await?);
        }
        Ok(())
    }))
}
