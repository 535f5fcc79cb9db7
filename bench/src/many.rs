//! Many streams on one connection (`--many-streams N`): one `pelican-mio` consumer reading N
//! streams through `Config::streams`, beside one reading a single stream, each on a fresh
//! server.
//!
//! - **Idle**: the streams are created empty with the group (`XGROUP CREATE … $ MKSTREAM`),
//!   the consumer parks (`beat` 2 s, `min_idle` 30 s: the defaults); 5 s later, the server's
//!   `total_commands_processed` over 20 s, less the bench's own `INFO`, and its
//!   `connected_clients`, less the bench's own connection.
//! - **Load**: a producer adds `--rate` entries/s in all, round-robin over the streams, in
//!   small pipelines every millisecond, each stamped when sent (`t`: ns since the start of
//!   the run); the consumer (`Runner::run`, an instant handler that acks) records, for each
//!   entry after a 2 s warm-up (the first `rate × 2` handled), how long after its stamp the
//!   handler saw it, and the CPU it used across those entries: its own thread's
//!   (`/proc/thread-self/schedstat`) and the whole process's, producer included
//!   (`/proc/self/stat`).
//!
//! Under the table, what the server did in each phase: its commands by name, a second each
//! (`INFO commandstats`, the bench's `INFO` left out), and under load µs per call and the
//! server's CPU per entry (`INFO cpu`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use pelican::{Config, Entry, Verdict};
use pelican_mio::Runner;
use pelican_tests::admin::Admin;
use pelican_tests::server::{Flavor, Server};

use crate::measure::{process_cpu, produce, server_cpu, thread_cpu};

const GROUP: &str = "g";
/// From the consumer's start to the idle measurement.
const SETTLE: Duration = Duration::from_secs(5);
/// How long the idle server's commands are counted.
const IDLE: Duration = Duration::from_secs(20);
/// Seconds of load before latency and CPU are recorded.
const WARM_UP: u64 = 2;
/// How long the consumer may take to finish after the producer's last entry.
const DRAIN: Duration = Duration::from_secs(30);
/// Commands the bench itself sends in an idle measurement and the server counts: the first
/// `INFO stats` (each is counted once it has answered, so only in the second reading).
const OWN_COMMANDS: u64 = 1;

/// The goals: idle commands/s, p50 and CPU per entry of many streams over one.
const GOALS: [(&str, f64); 3] = [("idle", 10.0), ("p50", 1.5), ("CPU", 2.0)];

/// What one consumer cost, reading some number of streams.
#[derive(Debug)]
struct Row {
    streams: usize,
    /// The server's clients, the bench's own connection not counted.
    connections: i64,
    /// Commands/s the server processed while the streams were idle.
    idle: f64,
    p50: Duration,
    p99: Duration,
    /// The consumer thread's CPU per entry.
    cpu: Option<Duration>,
    /// The process's CPU per entry (the producer's included), in 10 ms ticks.
    process: Option<Duration>,
    /// The server's commands while idle, and under load.
    idle_mix: String,
    load_mix: String,
}

/// Measures `streams` streams and one on `flavor`, `rate` entries/s for `seconds`, and
/// prints both rows and the ratios to the goals.
pub fn run(flavor: Flavor, streams: usize, rate: u32, seconds: u64) -> Result<(), String> {
    if streams == 0 || rate == 0 || seconds == 0 {
        return Err("--many-streams, --rate and --seconds must be at least 1".into());
    }
    let many = measure(flavor, streams, rate, seconds)?;
    let one = measure(flavor, 1, rate, seconds)?;
    println!(
        "\n{} — idle: {} s after {} s; load: {rate} entries/s in all, round-robin, {seconds} s after {WARM_UP} s",
        flavor.name(),
        IDLE.as_secs(),
        SETTLE.as_secs()
    );
    println!(
        "  {:<11} {:>7} {:>11} {:>11} {:>9} {:>9} {:>13} {:>17}",
        "server",
        "streams",
        "connections",
        "idle cmd/s",
        "p50 µs",
        "p99 µs",
        "CPU µs/entry",
        "process µs/entry"
    );
    let micros = |d: Option<Duration>| d.map_or("n/a".into(), |d| format!("{:.2}", d.as_secs_f64() * 1e6));
    for row in [&many, &one] {
        println!(
            "  {:<11} {:>7} {:>11} {:>11.2} {:>9.0} {:>9.0} {:>13} {:>17}",
            flavor.name(),
            row.streams,
            row.connections,
            row.idle,
            row.p50.as_secs_f64() * 1e6,
            row.p99.as_secs_f64() * 1e6,
            micros(row.cpu),
            micros(row.process)
        );
    }
    for row in [&many, &one] {
        println!("  {:>5} idle: {}", row.streams, row.idle_mix);
        println!("  {:>5} load: {}", row.streams, row.load_mix);
    }
    let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b);
    let seconds_of = |d: Option<Duration>| d.map(|d| d.as_secs_f64());
    let ratios = [
        Some(many.idle / one.idle),
        Some(many.p50.as_secs_f64() / one.p50.as_secs_f64()),
        ratio(seconds_of(many.cpu), seconds_of(one.cpu)),
    ];
    let said: Vec<String> = GOALS
        .iter()
        .zip(ratios)
        .map(|((what, goal), r)| match r {
            Some(r) => {
                format!("{what} {r:.2}× (goal ≤ {goal}×: {})", if r <= *goal { "met" } else { "missed" })
            }
            None => format!("{what} n/a"),
        })
        .collect();
    println!("  {streams} streams / 1: {}", said.join(", "));
    if let Some(p) = ratio(seconds_of(many.process), seconds_of(one.process)) {
        println!("  process CPU per entry, {streams} streams / 1: {p:.2}×");
    }
    Ok(())
}

/// One consumer over `streams` fresh streams on a fresh server: idle, then under load.
fn measure(flavor: Flavor, streams: usize, rate: u32, seconds: u64) -> Result<Row, String> {
    let server = Server::start(flavor);
    let mut admin = server.admin();
    let keys: Vec<String> = (0..streams).map(|i| format!("many:{i}")).collect();
    let create: Vec<Vec<&str>> =
        keys.iter().map(|k| vec!["XGROUP", "CREATE", k, GROUP, "$", "MKSTREAM"]).collect();
    if let Some(e) = admin.pipeline(&create).iter().find(|r| r.is_error()) {
        return Err(format!("XGROUP CREATE: {e:?}"));
    }
    let total = u64::from(rate) * (WARM_UP + seconds);
    let warm = u64::from(rate) * WARM_UP;
    let origin = Instant::now();
    let handled = Arc::new(AtomicU64::new(0));
    let (stop, consumer) = start(server.addr(), &keys, origin, warm, total, handled.clone())?;
    thread::sleep(SETTLE);
    let (idle, connections, idle_mix) = idle_cost(&mut admin)?;
    let (calls, cpu, loaded) = (command_stats(&mut admin), server_cpu(&mut admin), Instant::now());
    produce(&mut admin, &keys, rate, total, || origin.elapsed().as_nanos().to_string())?;
    let waited = Instant::now();
    while handled.load(Ordering::Relaxed) < total && waited.elapsed() < DRAIN && !consumer.is_finished() {
        thread::sleep(Duration::from_millis(1));
    }
    let server_us = server_cpu(&mut admin).saturating_sub(cpu).as_secs_f64() * 1e6 / total as f64;
    let load_mix = format!(
        "{}; server CPU {server_us:.1} µs/entry",
        mix(&calls, &command_stats(&mut admin), loaded.elapsed(), true)
    );
    stop.stop(); // all handled, or the consumer is short: then it says so
    let load = consumer.join().map_err(|_| "the consumer panicked".to_string())??;
    let mut nanos = load.nanos;
    nanos.sort_unstable();
    let at = |q: f64| Duration::from_nanos(nanos[((nanos.len() - 1) as f64 * q) as usize]);
    let per_entry = |d: Duration| Duration::from_secs_f64(d.as_secs_f64() / (total - warm) as f64);
    Ok(Row {
        streams,
        connections,
        idle,
        p50: at(0.5),
        p99: at(0.99),
        cpu: load.cpu.map(per_entry),
        process: load.process.map(per_entry),
        idle_mix,
        load_mix,
    })
}

/// What the consumer saw after the warm-up: latencies (ns) and CPU used.
struct Load {
    nanos: Vec<u64>,
    cpu: Option<Duration>,
    process: Option<Duration>,
}

/// Starts the consumer on a thread of its own; `handled` counts the entries it has handled.
fn start(
    addr: SocketAddr,
    keys: &[String],
    origin: Instant,
    warm: u64,
    total: u64,
    handled: Arc<AtomicU64>,
) -> Result<(pelican_mio::StopHandle, thread::JoinHandle<Result<Load, String>>), String> {
    let config = Config::new(&keys[0], GROUP, "c").streams(keys);
    let runner = Runner::new(addr, config).map_err(|e| e.to_string())?;
    let stop = runner.stop_handle();
    let consumer = thread::spawn(move || consume(runner, origin, warm, total, &handled));
    Ok((stop, consumer))
}

fn consume(
    runner: Runner,
    origin: Instant,
    warm: u64,
    total: u64,
    count: &AtomicU64,
) -> Result<Load, String> {
    let mut handled = 0u64;
    let mut nanos = Vec::with_capacity((total - warm) as usize);
    let (mut from, mut to) = (None, None);
    let stats = runner
        .run(|entry| {
            handled += 1;
            count.store(handled, Ordering::Relaxed);
            if handled > warm {
                if let Some(sent) = stamp(entry) {
                    nanos.push((origin.elapsed().as_nanos() as u64).saturating_sub(sent));
                }
            }
            if handled == warm {
                from = Some((thread_cpu(), process_cpu()));
            }
            if handled == total {
                to = Some((thread_cpu(), process_cpu()));
            }
            Verdict::Ack
        })
        .map_err(|e| e.to_string())?;
    if handled != total || stats.acked != total || nanos.len() as u64 != total - warm {
        return Err(format!(
            "handled {handled} of {total}, {} stamped after the warm-up; {stats:?}",
            nanos.len()
        ));
    }
    let (Some(from), Some(to)) = (from, to) else { return Err("no CPU marks".into()) };
    let used = |a: Option<Duration>, b: Option<Duration>| b.zip(a).map(|(b, a)| b.saturating_sub(a));
    Ok(Load { nanos, cpu: used(from.0, to.0), process: used(from.1, to.1) })
}

/// The entry's send time, ns since the run's start.
fn stamp(entry: &Entry) -> Option<u64> {
    std::str::from_utf8(entry.field(b"t")?).ok()?.parse().ok()
}

/// (commands/s, connections, commands by name) of the idle server, the bench's own not
/// counted.
fn idle_cost(admin: &mut Admin) -> Result<(f64, i64, String), String> {
    let calls = command_stats(admin);
    let before = info_int(admin, "stats", "total_commands_processed")?;
    thread::sleep(IDLE);
    let after = info_int(admin, "stats", "total_commands_processed")?;
    let clients = info_int(admin, "clients", "connected_clients")?;
    let commands = after.saturating_sub(before).saturating_sub(OWN_COMMANDS as i64);
    let mix = mix(&calls, &command_stats(admin), IDLE, false);
    Ok((commands as f64 / IDLE.as_secs_f64(), clients - 1, mix))
}

/// Calls and µs spent so far by command (`INFO commandstats`), `INFO` left out.
fn command_stats(admin: &mut Admin) -> BTreeMap<String, (u64, u64)> {
    let text = admin.info("commandstats");
    let parse = |line: &str| {
        let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
        let field = |key: &str| {
            rest.split(',').find_map(|kv| kv.strip_prefix(key)?.strip_prefix('=')?.parse::<u64>().ok())
        };
        Some((name.to_string(), (field("calls")?, field("usec")?)))
    };
    text.lines().filter_map(|line| parse(line.trim())).filter(|(name, _)| name != "info").collect()
}

/// The commands between two [`command_stats`], a second each over `took`, the busiest
/// first (with µs per call if `timed`).
fn mix(
    before: &BTreeMap<String, (u64, u64)>,
    after: &BTreeMap<String, (u64, u64)>,
    took: Duration,
    timed: bool,
) -> String {
    let mut ran: Vec<(&str, u64, u64)> = after
        .iter()
        .map(|(name, (calls, usec))| {
            let (c, u) = before.get(name).copied().unwrap_or_default();
            (name.as_str(), calls.saturating_sub(c), usec.saturating_sub(u))
        })
        .filter(|(_, calls, _)| *calls > 0)
        .collect();
    ran.sort_by_key(|(_, calls, _)| std::cmp::Reverse(*calls));
    let said: Vec<String> = ran
        .iter()
        .map(|(name, calls, usec)| {
            let rate = *calls as f64 / took.as_secs_f64();
            match timed {
                true => format!("{name} {rate:.1}/s ({:.1} µs each)", *usec as f64 / *calls as f64),
                false => format!("{name} {rate:.2}/s"),
            }
        })
        .collect();
    match said.is_empty() {
        true => "no commands".into(),
        false => said.join(", "),
    }
}

fn info_int(admin: &mut Admin, section: &str, field: &str) -> Result<i64, String> {
    let value = admin.info_field(section, field);
    value
        .as_deref()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("INFO {section}: {field} is {value:?}"))
}
