//! Several consumers on one thread: one `Driver` each, all on one `mio::Poll`, each under
//! its own `Token`, plus a `Waker` to stop them all from another thread.
//!
//! ```text
//! cargo run -p pelican-mio --example many -- 127.0.0.1:6379 orders billing [consumers] [seconds]
//! ```
//!
//! Runs `consumers` consumers (default 4) named `worker-0`, `worker-1`… in the group for
//! `seconds` seconds (default 10), acking every entry, then stops them and prints how many
//! entries each one handled.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use mio::{Events, Poll, Registry, Token, Waker};
use pelican::{Config, Consumer, Entry, Verdict};
use pelican_mio::{DriveError, Driver, Status};

/// The waker's token; drivers get tokens from 0.
const WAKER: Token = Token(usize::MAX);

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
    let [addr, stream, group, rest @ ..] = &args[..] else {
        return Err("usage: many ADDR STREAM GROUP [CONSUMERS] [SECONDS]".into());
    };
    let consumers: usize = rest.first().map(|s| s.parse()).transpose()?.unwrap_or(4);
    let seconds: u64 = rest.get(1).map(|s| s.parse()).transpose()?.unwrap_or(10);
    let addr: pelican::Endpoint = addr.parse()?;

    let mut poll = Poll::new()?;
    let mut drivers = Vec::new();
    for i in 0..consumers {
        let config = Config::new(stream.clone(), group.clone(), format!("worker-{i}"))
            .create_group("0")
            .seed(i as u64);
        drivers.push(Driver::new(addr.clone(), Consumer::new(config)?, Token(i)));
    }
    let mut handled = vec![0u64; consumers];

    // Another thread asks everyone to stop after a while; the waker gets the loop's attention.
    let stop = Arc::new(AtomicBool::new(false));
    let waker = Waker::new(poll.registry(), WAKER)?;
    thread::spawn({
        let stop = stop.clone();
        move || {
            thread::sleep(Duration::from_secs(seconds));
            stop.store(true, Ordering::Release);
            let _ = waker.wake();
        }
    });

    let mut events = Events::with_capacity(256);
    let mut stopping = false;
    while !drivers.iter().all(Driver::is_stopped) {
        if !stopping && stop.load(Ordering::Acquire) {
            stopping = true;
            drivers.iter_mut().for_each(Driver::stop);
        }
        // Drive those with an event on their token…
        for event in events.iter() {
            if let Some(driver) = drivers.get_mut(event.token().0) {
                drive(driver, poll.registry(), &mut handled[event.token().0])?;
            }
        }
        // …those whose deadline passed, and after a stop request everyone, until each
        // reports Stopped. Driving one more often than needed is harmless.
        let now = Instant::now();
        for (driver, count) in drivers.iter_mut().zip(&mut handled) {
            if stopping || driver.next_deadline().is_some_and(|at| at <= now) {
                drive(driver, poll.registry(), count)?;
            }
        }
        let next = drivers.iter().filter_map(Driver::next_deadline).min();
        let timeout = next.map(|at| at.saturating_duration_since(Instant::now()));
        poll.poll(&mut events, timeout)?;
    }
    Ok(())
}

/// One driver's turn: its handler counts and acks every entry.
fn drive(driver: &mut Driver, registry: &Registry, count: &mut u64) -> Result<(), DriveError> {
    if driver.is_stopped() {
        return Ok(());
    }
    let mut handler = |_: &Entry| {
        *count += 1;
        Verdict::Ack
    };
    if driver.drive(registry, &mut handler)? == Status::Stopped {
        let name = String::from_utf8_lossy(&driver.consumer().config().consumer).into_owned();
        println!("{name} stopped after {count} entries: {:?}", driver.consumer().stats());
    }
    Ok(())
}
