//! Stopping on SIGTERM or SIGINT (Ctrl-C): the first signal stops, within a grace period; a
//! second one abandons at once.
//!
//! ```text
//! cargo run -p pelican-smol --example smol_signals -- 127.0.0.1:6379 orders billing worker-1
//! ```
//!
//! A stop lets the handler futures running finish and waits for the server to confirm the
//! acks earned: during an outage, until the server is back. A service manager waits only so
//! long before it kills (systemd's `TimeoutStopSec`, 90 s by default; Kubernetes'
//! `terminationGracePeriodSeconds`, 30 s), so the stop is given a deadline well within it:
//! past it the stop becomes an abandon — the futures still running are dropped and the acks
//! not yet confirmed given up (their entries stay pending and are delivered again), and the
//! run returns. A second signal (an impatient Ctrl-C) abandons at once.

use std::process::ExitCode;
use std::thread;
use std::time::Duration;

use pelican::{Config, Verdict};
use pelican_smol::Runner;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// How long a stop may wait on the server before it is abandoned.
const GRACE: Duration = Duration::from_secs(20);

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
    let [addr, stream, group, consumer] = &args[..] else {
        return Err("usage: signals ADDR STREAM GROUP CONSUMER".into());
    };
    let config = Config::new(stream, group, consumer).create_group("$");
    let runner = Runner::new(addr.as_str(), config)?;
    let stop = runner.stop_handle();

    // signal-hook's iterator: the signals are taken by a handler that only records them, and
    // told here, on a thread of our own, where anything may be done.
    let mut signals = Signals::new([SIGTERM, SIGINT])?;
    let signals_handle = signals.handle();
    let watcher = thread::spawn(move || {
        for (n, signal) in signals.forever().enumerate() {
            if n == 0 {
                eprintln!(
                    "signal {signal}: stopping (abandoned after {GRACE:?}; signal again to abandon now)"
                );
                stop.stop_within(GRACE);
            } else {
                eprintln!("signal {signal} again: abandoning");
                stop.abandon();
            }
        }
    });

    let stats = smol::block_on(runner.run(|entry| async move {
        println!("{}", String::from_utf8_lossy(entry.id()));
        Verdict::Ack
    }))?;
    signals_handle.close(); // ends the watcher's loop
    let _ = watcher.join();
    eprintln!("stopped: {} acked, {} acks given up", stats.acked, stats.abandoned_acks);
    Ok(())
}
