//! A complete driver of pelican's sans-IO core over `std::net::TcpStream`, in one function:
//! the loop the core's crate docs describe (*Run loop*), with a real socket, a real clock, a
//! stop flag another thread can raise, and reconnects. It is what an embedding in a runtime
//! of your own looks like; `pelican-mio` and `pelican-smol` are the same loop, tuned.
//!
//! Its tests run it against the real servers: a backlog, a connection killed under it, a
//! stop while parked (the case a driver that forgot rule 1 would hang on), a restart
//! that drains its own pending entries — and beside `pelican-mio`'s `Runner`.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pelican::{Config, ConfigError, Consumer, Entry, Error, Event, Notice, Stats, Verdict};

/// How long a connect may take before it counts as failed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why [`run`] ended without a clean stop.
#[derive(Debug)]
pub enum Failed {
    /// The configuration was refused.
    Config(ConfigError),
    /// The consumer gave up (a wrong password, a missing group…).
    Consumer(Error),
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failed::Config(e) => write!(f, "{e}"),
            Failed::Consumer(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Failed {}

/// Consumes as `config` says from the server at `addr`, handing each entry to `handle` and
/// settling it with the verdict, until `stop` is raised (then it stops between entries,
/// once the acks earned are confirmed) or the consumer fails for good. Every notice goes to
/// `notice`. Returns the final counts.
pub fn run(
    addr: SocketAddr,
    config: Config,
    mut handle: impl FnMut(&Entry) -> Verdict,
    mut notice: impl FnMut(&Notice),
    stop: &AtomicBool,
) -> Result<Stats, Failed> {
    let mut consumer = Consumer::new(config).map_err(Failed::Config)?;
    // This process's own randomness: consumers restarted together do not reconnect in step.
    consumer.reseed(RandomState::new().hash_one(0u64));
    let mut socket: Option<TcpStream> = None;
    let mut stopping = false;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let now = Instant::now();
        if stop.load(Ordering::SeqCst) && !stopping {
            stopping = true;
            consumer.stop();
        }
        // 1. Connect when the consumer says — also while a socket is open: a stop drops a
        //    parked connection to finish on a new one.
        if consumer.wants_connection() {
            socket = None;
            if consumer.connect_due(now) {
                match connect(addr) {
                    Ok(s) => {
                        socket = Some(s);
                        consumer.on_connected(now);
                    }
                    Err(e) => consumer.on_disconnected_because(now, format_args!("{addr}: {e}")),
                }
            }
        }
        // 2. Write what it has, then every event (a settle may queue more: round again).
        if let Some(s) = socket.as_mut() {
            if let Err(e) = write_all(&mut consumer, s) {
                socket = None;
                consumer.on_disconnected_because(now, e);
            }
        }
        while let Some(event) = consumer.poll_event() {
            match event {
                Event::Entry(entry) => {
                    let verdict = handle(&entry);
                    consumer.settle_entry(&entry, verdict, Instant::now());
                }
                Event::Notice(n) => notice(&n),
                Event::Stopped => return Ok(consumer.stats().clone()),
                _ => {}
            }
        }
        if let Some(e) = consumer.error() {
            return Err(Failed::Consumer(e.clone()));
        }
        if consumer.wants_connection() || (socket.is_some() && consumer.poll_transmit().is_some()) {
            continue;
        }
        // 3. Wait for input until the next deadline (never more than a tenth of a second, so
        //    that the stop flag is seen).
        let wait =
            consumer.timeout_from(Instant::now()).unwrap_or(Duration::MAX).min(Duration::from_millis(100));
        let Some(s) = socket.as_mut() else {
            std::thread::sleep(wait);
            continue;
        };
        let read = s.set_read_timeout(Some(wait)).and_then(|()| s.read(&mut buf));
        let outcome = match read {
            Ok(n) if n > 0 => consumer.handle_input(&buf[..n], Instant::now()),
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                consumer.handle_timeout(Instant::now())
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            lost => {
                socket = None;
                let why =
                    lost.err().map_or_else(|| "the server closed the connection".into(), |e| e.to_string());
                consumer.on_disconnected_because(Instant::now(), why);
                Ok(())
            }
        };
        // 4. An error ends the connection (what follows is scheduled); a fatal one ends the
        //    consumer, at the next turn's events.
        if outcome.is_err() {
            socket = None;
        }
    }
}

/// A connection to `addr`, with Nagle off (commands are small and pipelined).
fn connect(addr: SocketAddr) -> io::Result<TcpStream> {
    let socket = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)?;
    socket.set_nodelay(true)?;
    Ok(socket)
}

/// Writes everything the consumer has to send.
fn write_all(consumer: &mut Consumer, socket: &mut TcpStream) -> io::Result<()> {
    while let Some(bytes) = consumer.poll_transmit() {
        let n = socket.write(bytes)?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        consumer.advance_transmit(n);
    }
    Ok(())
}
