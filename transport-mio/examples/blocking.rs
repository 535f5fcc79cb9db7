//! One consumer on the calling thread, stopped from another thread.
//!
//! ```text
//! cargo run -p pelican-mio --example blocking -- 127.0.0.1:6379 orders billing worker-1 [max-entries] [max-seconds]
//! ```
//!
//! Prints each entry, acks it, and stops after `max-entries` entries (default 100) or
//! `max-seconds` seconds (default 10), whichever comes first. Creates the group (from the
//! start of the stream) if it does not exist.

use std::process::ExitCode;
use std::thread;
use std::time::Duration;

use pelican::{Config, Verdict};
use pelican_mio::Runner;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, stream, group, consumer, rest @ ..] = &args[..] else {
        eprintln!("usage: blocking ADDR STREAM GROUP CONSUMER [MAX_ENTRIES] [MAX_SECONDS]");
        return ExitCode::from(2);
    };
    let max_entries: u64 = rest.first().and_then(|s| s.parse().ok()).unwrap_or(100);
    let max_seconds: u64 = rest.get(1).and_then(|s| s.parse().ok()).unwrap_or(10);

    let config = Config::new(stream.clone(), group.clone(), consumer.clone()).create_group("0");
    let runner = match Runner::new(addr.as_str(), config) {
        Ok(runner) => runner,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };

    // Stop after a while, from another thread.
    let stop = runner.stop_handle();
    thread::spawn(move || {
        thread::sleep(Duration::from_secs(max_seconds));
        stop.stop();
    });

    // Or after enough entries, from the handler itself.
    let stop = runner.stop_handle();
    let mut seen = 0;
    let result = runner.run(|entry| {
        seen += 1;
        let fields: Vec<String> = entry
            .fields()
            .map(|(k, v)| format!("{}={}", String::from_utf8_lossy(k), String::from_utf8_lossy(v)))
            .collect();
        println!("{} {:?} {}", String::from_utf8_lossy(entry.id()), entry.source, fields.join(" "));
        if seen == max_entries {
            stop.stop();
        }
        Verdict::Ack
    });
    match result {
        Ok(stats) => {
            eprintln!("stopped: {stats:?}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
