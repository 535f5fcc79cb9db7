//! A `Driver` in your own event loop, handing entries to a pool of worker threads with
//! `drive_deferred` and settling each by its id as the workers complete them, in any order:
//! up to `workers` entries in hand at once (`Config::concurrency`), their leases renewed by
//! the loop while the workers take their time. (`Runner::run_pool` is this loop, ready made.)
//!
//! ```text
//! cargo run -p pelican-mio --example pool -- 127.0.0.1:6379 orders billing worker-1 [workers] [seconds]
//! ```
//!
//! Runs `workers` workers (default 8), each taking 20 ms per entry as if it waited on a
//! database, for `seconds` seconds (default 10); then stops (the entries in hand finish and
//! their acks are confirmed) and prints the counters. Creates the group (from the start of
//! the stream) if it does not exist.

use std::io;
use std::process::ExitCode;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use mio::{Events, Poll, Token, Waker};
use pelican::{Config, Consumer, Entry, Verdict};
use pelican_mio::{Driver, Status};

const DRIVER: Token = Token(0);
/// The workers wake the loop under this token when they finish an entry.
const WAKER: Token = Token(1);

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The application's work on one entry, on a worker thread.
fn handle(entry: &Entry) -> Verdict {
    thread::sleep(Duration::from_millis(20)); // a query, an HTTP call…
    let id = String::from_utf8_lossy(entry.id());
    println!("{id} handled on {}", thread::current().name().unwrap_or("a worker"));
    Verdict::Ack
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, stream, group, consumer, rest @ ..] = &args[..] else {
        return Err("usage: pool ADDR STREAM GROUP CONSUMER [WORKERS] [SECONDS]".into());
    };
    let workers: u32 = rest.first().map(|s| s.parse()).transpose()?.unwrap_or(8);
    let seconds: u64 = rest.get(1).map(|s| s.parse()).transpose()?.unwrap_or(10);

    let mut poll = Poll::new()?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
    let config =
        Config::new(stream.clone(), group.clone(), consumer.clone()).create_group("0").concurrency(workers); // as many entries in hand as there are workers
    let mut driver = Driver::new(addr.parse::<pelican::Endpoint>()?, Consumer::new(config)?, DRIVER);

    // Entries go to the workers over one channel (shared behind a mutex: the first free
    // worker takes the next); each comes back as its id and verdict over another.
    let (to_workers, work) = mpsc::channel::<Entry>();
    let work = Arc::new(Mutex::new(work));
    let (done, verdicts) = mpsc::channel::<(Vec<u8>, Verdict)>();
    let pool: Vec<_> = (0..workers)
        .map(|i| {
            let (work, done, waker) = (work.clone(), done.clone(), waker.clone());
            thread::Builder::new().name(format!("worker-{i}")).spawn(move || loop {
                let next = match work.lock() {
                    Ok(work) => work.recv(),
                    Err(_) => return,
                };
                let Ok(entry) = next else { return }; // the loop is done
                let verdict = handle(&entry);
                if done.send((entry.id().to_vec(), verdict)).is_err() {
                    return;
                }
                let _ = waker.wake(); // the loop settles it at once
            })
        })
        .collect::<Result<_, _>>()?;

    let stop_at = Instant::now() + Duration::from_secs(seconds);
    let mut stopping = false;
    let mut events = Events::with_capacity(16);
    loop {
        if !stopping && Instant::now() >= stop_at {
            // Nothing more is handed out; keep driving until the entries in hand are
            // settled and their acks confirmed.
            stopping = true;
            driver.stop();
        }
        // Settle what the workers finished, in the order they finished: each settle lets the
        // next entry out, and makes the driver due to send the ack.
        for (id, verdict) in verdicts.try_iter() {
            driver.settle(&id, verdict);
        }
        let status = driver.drive_deferred(poll.registry(), &mut |entry| {
            let _ = to_workers.send(entry); // the workers outlive the loop
        })?;
        if status == Status::Stopped {
            break;
        }
        // Until the driver's next deadline (a lease to renew, an ack to send, a reply late),
        // its socket's next event, a worker's wake-up, or the time to stop.
        let mut timeout = driver.next_deadline().map(|at| at.saturating_duration_since(Instant::now()));
        if !stopping {
            let left = stop_at.saturating_duration_since(Instant::now());
            timeout = Some(timeout.map_or(left, |t| t.min(left)));
        }
        match poll.poll(&mut events, timeout) {
            Err(e) if e.kind() != io::ErrorKind::Interrupted => return Err(e.into()),
            _ => {}
        }
    }
    drop(to_workers); // the workers end
    for worker in pool {
        let _ = worker.join();
    }
    eprintln!("stopped: {:?}", driver.consumer().stats());
    Ok(())
}
