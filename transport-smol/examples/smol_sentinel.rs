//! One consumer of a master that Redis Sentinel watches, following it through failovers:
//!
//! ```text
//! cargo run -p pelican-smol --example smol_sentinel -- mymaster 127.0.0.1:26379,127.0.0.1:26380 orders billing worker-1 [max-seconds]
//! ```
//!
//! As `pelican-mio`'s example of the same name, with an async handler.

use std::time::Duration;

use pelican::{Config, HostPort, Sentinels, Verdict};
use pelican_smol::Runner;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [service, sentinels, stream, group, consumer, rest @ ..] = &args[..] else {
        return Err(
            "usage: sentinel SERVICE HOST:PORT[,HOST:PORT…] STREAM GROUP CONSUMER [MAX_SECONDS]".into()
        );
    };
    let max_seconds: u64 = rest.first().map(|s| s.parse()).transpose()?.unwrap_or(60);
    let nodes = sentinels.split(',').map(str::parse).collect::<Result<Vec<HostPort>, _>>()?;
    let config = Config::new(stream.clone(), group.clone(), consumer.clone()).create_group("0");
    let runner = Runner::new(Sentinels::new(service.clone(), nodes), config)?.on_notice(|n| eprintln!("{n}"));
    let stop = runner.stop_handle();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(max_seconds));
        stop.stop();
    });
    let stats = smol::block_on(runner.run(|entry| async move {
        println!("{} {:?}", String::from_utf8_lossy(entry.id()), entry.source);
        Verdict::Ack
    }))?;
    eprintln!("stopped: acked {}, reconnects {}", stats.acked, stats.reconnects);
    Ok(())
}
