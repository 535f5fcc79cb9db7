//! One consumer of a master that Redis Sentinel watches, following it through failovers.
//!
//! ```text
//! cargo run -p pelican-mio --example sentinel -- mymaster 127.0.0.1:26379,127.0.0.1:26380 orders billing worker-1 [max-seconds]
//! ```
//!
//! Asks the sentinels where `mymaster`'s master is, consumes `orders` there as `worker-1` of
//! `billing` (creating the group from the start of the stream if it does not exist), and
//! when a failover moves the master (`+switch-master`, a lost connection, a node that turns
//! out to be a replica), asks again and goes on there. Prints each entry and what happens
//! to the connection; stops after `max-seconds` (default 60).

use std::process::ExitCode;
use std::thread;
use std::time::Duration;

use pelican::{Config, HostPort, Sentinels, Verdict};
use pelican_mio::Runner;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [service, sentinels, stream, group, consumer, rest @ ..] = &args[..] else {
        eprintln!("usage: sentinel SERVICE HOST:PORT[,HOST:PORT…] STREAM GROUP CONSUMER [MAX_SECONDS]");
        return ExitCode::from(2);
    };
    let max_seconds: u64 = rest.first().and_then(|s| s.parse().ok()).unwrap_or(60);
    let nodes: Result<Vec<HostPort>, _> = sentinels.split(',').map(str::parse).collect();
    let nodes = match nodes {
        Ok(nodes) => nodes,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let config = Config::new(stream.clone(), group.clone(), consumer.clone()).create_group("0");
    let runner = match Runner::new(Sentinels::new(service.clone(), nodes), config) {
        Ok(runner) => runner.on_notice(|notice| eprintln!("{notice}")),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let stop = runner.stop_handle();
    thread::spawn(move || {
        thread::sleep(Duration::from_secs(max_seconds));
        stop.stop();
    });
    let result = runner.run(|entry| {
        println!("{} {:?}", String::from_utf8_lossy(entry.id()), entry.source);
        Verdict::Ack
    });
    match result {
        Ok(stats) => {
            eprintln!("stopped: acked {}, reconnects {}", stats.acked, stats.reconnects);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
