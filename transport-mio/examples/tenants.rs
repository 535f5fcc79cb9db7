//! One consumer for many streams on one connection (`Config::streams`): a worker for every
//! tenant's stream, one parked read over all of them.
//!
//! ```text
//! cargo run --release -p pelican-mio --example tenants -- 127.0.0.1:6379 billing [streams] [seconds]
//! ```
//!
//! Reads `tenant:0` … `tenant:<streams - 1>` (default 1,000) in the group (created from the
//! start of each stream if missing) for `seconds` seconds (default 10), acking every entry,
//! then stops and prints how many entries each stream brought and the counters.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::thread;
use std::time::Duration;

use pelican::{Config, Verdict};
use pelican_mio::Runner;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, group, rest @ ..] = &args[..] else {
        return Err("usage: tenants ADDR GROUP [STREAMS] [SECONDS]".into());
    };
    let streams: usize = rest.first().map(|s| s.parse()).transpose()?.unwrap_or(1000);
    let seconds: u64 = rest.get(1).map(|s| s.parse()).transpose()?.unwrap_or(10);
    let keys = (0..streams).map(|i| format!("tenant:{i}"));
    let config = Config::new("tenant:0", group, "worker-1").streams(keys).create_group("0");
    let runner = Runner::new(addr.as_str(), config)?;
    let stop = runner.stop_handle();
    thread::spawn(move || {
        thread::sleep(Duration::from_secs(seconds));
        stop.stop();
    });
    let mut per_stream: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    let stats = runner.run(|entry| {
        *per_stream.entry(entry.stream().to_vec()).or_default() += 1;
        Verdict::Ack
    })?;
    for (stream, n) in per_stream.iter().take(10) {
        println!("{}: {n}", String::from_utf8_lossy(stream));
    }
    if per_stream.len() > 10 {
        println!("… {} streams brought entries", per_stream.len());
    }
    println!("{stats:?}");
    Ok(())
}
