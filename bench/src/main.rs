//! `pelican-bench`: consumes the same stream with a hand-pipelined client, `pelican-mio`,
//! `pelican-smol` and the `redis` crate, interleaved round after round, on Redis 7.0 and
//! Valkey 8.1 started on loopback by the test harness (and pelican over TLS on Redis 7.0); prints entries/s (median and range),
//! the ratio to the hand-pipelined client, client CPU per entry, and the server-bound limit
//! (the server's own CPU per entry, from `INFO cpu`).
//!
//! ```text
//! cargo run --release -p pelican-bench -- [--entries 200000] [--rounds 5] [--batch 10,100,1000]
//! cargo run --release -p pelican-bench -- --slow-ms 10 --concurrency 1,16,64 --consumers 8 --servers redis-7.0
//! cargo run --release -p pelican-bench -- --latency 10000 --seconds 30 --concurrency 1,64 --servers redis-7.0
//! cargo run --release -p pelican-bench -- --reclaim 10000 --servers redis-7.0,redis-8.10
//! cargo run --release -p pelican-bench -- --durable 5 --entries 100000 --batch 100,1000 --servers redis-7.0
//! cargo run --release -p pelican-bench -- --stage 3 --entries 100000 --batch 100,1000 --servers redis-7.0
//! cargo run --release -p pelican-bench -- --many-streams 1000 --rate 10000 --seconds 10 --servers redis-7.0
//! ```

mod contenders;
mod durable;
mod lanes;
mod latency;
mod many;
mod measure;
mod raw;
mod reclaim;
mod slow;
mod stage;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use contenders::{Contender, Job};
use measure::{median_range, Sample};
use pelican_tests::admin::Admin;
use pelican_tests::cluster::Cluster;
use pelican_tests::server::{Flavor, Options, Server, Tls};

/// Throughput of stream consumers against real servers, side by side.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Entries in the stream; each run consumes and acks all of them.
    #[arg(long, default_value_t = 200_000)]
    entries: usize,
    /// Rounds: each runs every contender once, in turn.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Entries per read (COUNT), one table each.
    #[arg(long, value_delimiter = ',', default_values_t = [10, 100, 1000])]
    batch: Vec<usize>,
    /// Bytes of the one field of each entry.
    #[arg(long, default_value_t = 16)]
    field_size: usize,
    /// Servers to run on: any of redis-6.2, redis-7.0, valkey-8.1, redis-8.10.
    #[arg(long, value_delimiter = ',', default_values_t = ["redis-7.0".to_string(), "valkey-8.1".to_string()])]
    servers: Vec<String>,
    /// Contenders to run.
    #[arg(long, value_delimiter = ',', value_enum, default_values_t = Contender::ALL)]
    only: Vec<Contender>,
    /// Instead: one thread consuming `--lanes` streams (one `pelican-mio` Driver each, on one
    /// Poll) across a 3-master cluster and on one server, `--entries` in all, at the first
    /// `--batch`.
    #[arg(long)]
    lanes: Option<usize>,
    /// Instead: handlers that wait this many ms — one consumer with each `--concurrency` in
    /// hand (pelican-smol awaiting a timer, pelican-mio `run_pool` asleep), then
    /// `--consumers` pelican-smol consumers sharing `--entries` entries.
    #[arg(long)]
    slow_ms: Option<u64>,
    /// Instead: latency from XADD to the handler, a producer adding this many entries a
    /// second at an even pace for `--seconds`, at each `--concurrency`.
    #[arg(long)]
    latency: Option<u32>,
    /// How long the producer runs, for `--latency` (default 30) and `--many-streams`
    /// (default 10, after a 2 s warm-up).
    #[arg(long)]
    seconds: Option<u64>,
    /// Entries in hand at once (`Config::concurrency`), for `--slow-ms` and `--latency`.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 64])]
    concurrency: Vec<u32>,
    /// Entries in hand at once for pelican's contenders in the throughput tables
    /// (`Config::concurrency`; the handlers are instant).
    #[arg(long, default_value_t = 1)]
    in_hand: u32,
    /// Consumers sharing one backlog, for `--slow-ms` (0: none).
    #[arg(long, default_value_t = 8)]
    consumers: usize,
    /// Instead: a dead peer's this many entries reclaimed, commands per 1,000 entries and
    /// time, in each dialect the server speaks (classic; Redis 8's reads that claim).
    #[arg(long)]
    reclaim: Option<usize>,
    /// Instead: what acks that wait for a replica (`ack_replicas`) cost — throughput with and
    /// without, at each `--batch`, `--entries`, `--rounds` — and save: entries handled twice
    /// after a failover that lost the last writes, this many runs each way.
    #[arg(long)]
    durable: Option<usize>,
    /// Instead: exactly-once stages (`Verdict::Commit`) beside today's way (the handler writes,
    /// then acks) — outputs lost and duplicated under 15 kill -9s and under frozen zombies,
    /// this many runs each — and commits' throughput beside plain acks at each `--batch`.
    #[arg(long)]
    stage: Option<usize>,
    /// Instead: one consumer reading this many streams on one connection
    /// (`Config::streams`) beside one reading a single stream — the idle server's commands/s,
    /// then latency from XADD to the handler and client CPU per entry at `--rate`.
    #[arg(long)]
    many_streams: Option<usize>,
    /// Entries/s in all for `--many-streams`, spread round-robin over the streams.
    #[arg(long, default_value_t = 10_000)]
    rate: u32,
}

const STREAM: &str = "bench";
const GROUP: &str = "g";

fn main() -> ExitCode {
    let args = Args::parse();
    for name in &args.servers {
        let Some(flavor) = Flavor::ALL.into_iter().find(|f| f.name() == name) else {
            let known: Vec<&str> = Flavor::ALL.iter().map(|f| f.name()).collect();
            eprintln!("pelican-bench: unknown server {name} ({})", known.join(", "));
            return ExitCode::from(2);
        };
        let outcome = match (args.lanes, args.slow_ms, args.latency) {
            _ if args.many_streams.is_some() => {
                many::run(flavor, args.many_streams.unwrap_or(1), args.rate, args.seconds.unwrap_or(10))
            }
            _ if args.stage.is_some() => {
                stage::run(flavor, args.stage.unwrap_or(1), args.entries, args.rounds, &args.batch)
            }
            _ if args.durable.is_some() => durable::cost(flavor, args.entries, args.rounds, &args.batch)
                .and_then(|()| durable::savings(flavor, args.durable.unwrap_or(1))),
            _ if args.reclaim.is_some() => {
                let server = Server::start(flavor);
                println!("\n{}", flavor.name());
                let n = args.reclaim.unwrap_or_default();
                reclaim::compare(&mut server.admin(), server.addr(), n, flavor == Flavor::Redis810)
            }
            (Some(lanes), _, _) => bench_lanes(flavor, lanes, &args),
            (_, Some(ms), _) => bench_slow(flavor, Duration::from_millis(ms), &args),
            (_, _, Some(rate)) => bench_latency(flavor, rate, &args),
            _ => bench_server(flavor, &args),
        };
        if let Err(e) = outcome {
            eprintln!("pelican-bench: {e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

fn bench_server(flavor: Flavor, args: &Args) -> Result<(), String> {
    // Over TLS too where the server serves it (Redis 7.0 and 8.10), on a second port.
    let server = match flavor {
        f if f.serves_tls() => Server::start_with(flavor, Options::default().with_tls(Tls::default())),
        _ => Server::start(flavor),
    };
    let endpoint = server.endpoint();
    let tls = endpoint.tls.is_some().then_some(&endpoint);
    let mut admin = server.admin();
    admin.xadd_n(STREAM, args.entries, args.field_size);
    println!(
        "\n{} — {} entries of one {}-byte field, {} rounds, medians (min–max)",
        flavor.name(),
        args.entries,
        args.field_size,
        args.rounds
    );
    for &batch in &args.batch {
        let job = Job {
            addr: server.addr(),
            tls,
            stream: STREAM,
            group: GROUP,
            batch,
            total: args.entries,
            in_hand: args.in_hand,
        };
        let mut samples: Vec<(Contender, Vec<Sample>)> =
            args.only.iter().filter(|c| !c.over_tls() || tls.is_some()).map(|c| (*c, Vec::new())).collect();
        for _ in 0..args.rounds {
            for (who, runs) in &mut samples {
                runs.push(one_run(&mut admin, *who, job)?);
            }
        }
        report(batch, args.entries, &samples);
    }
    Ok(())
}

/// `lanes` streams, `--entries` in all, consumed by one thread from a 3+3 cluster (every lane
/// starting at one master, following `MOVED` to its own) and from one server, interleaved.
fn bench_lanes(flavor: Flavor, lanes: usize, args: &Args) -> Result<(), String> {
    let cluster = Cluster::start(flavor);
    let masters = cluster.masters();
    let streams = lanes::spread(lanes, masters.len(), |key| {
        let owner = cluster.owner_of(key);
        masters.iter().position(|m| *m == owner).unwrap_or(0)
    });
    let single = Server::start(flavor);
    let per_stream = args.entries / lanes;
    let batch = args.batch.first().copied().unwrap_or(100);
    let (mut on_cluster, mut on_one) = (Vec::new(), Vec::new());
    for _ in 0..args.rounds {
        for s in &streams {
            lanes::fill(&mut cluster.admin_for(s), s, GROUP, per_stream, args.field_size);
        }
        let took = lanes::consume(masters[0], &streams, GROUP, per_stream, batch)?;
        on_cluster.push((per_stream * lanes) as f64 / took.as_secs_f64());
        let mut admin = single.admin();
        for s in &streams {
            lanes::fill(&mut admin, s, GROUP, per_stream, args.field_size);
        }
        let took = lanes::consume(single.addr(), &streams, GROUP, per_stream, batch)?;
        on_one.push((per_stream * lanes) as f64 / took.as_secs_f64());
    }
    let (cluster_rate, lo_c, hi_c) = median_range(&mut on_cluster);
    let (one_rate, lo_o, hi_o) = median_range(&mut on_one);
    println!(
        "\n{} — {lanes} streams, {} entries each, COUNT {batch}, one thread, {} rounds, medians (min–max)",
        flavor.name(),
        per_stream,
        args.rounds
    );
    println!(
        "  3-master cluster  {:>8.0}k ({:>5.0}k–{:>5.0}k) entries/s",
        cluster_rate / 1e3,
        lo_c / 1e3,
        hi_c / 1e3
    );
    println!(
        "  one server        {:>8.0}k ({:>5.0}k–{:>5.0}k) entries/s",
        one_rate / 1e3,
        lo_o / 1e3,
        hi_o / 1e3
    );
    println!("  cluster / one     {:>8.2}×", cluster_rate / one_rate);
    Ok(())
}

/// Handlers that wait on I/O (see `slow.rs`).
fn bench_slow(flavor: Flavor, wait: Duration, args: &Args) -> Result<(), String> {
    let server = Server::start(flavor);
    let mut admin = server.admin();
    println!("\n{}", flavor.name());
    slow::throughput(&mut admin, server.addr(), wait, &args.concurrency)?;
    if args.consumers > 0 {
        let n = args.concurrency.iter().copied().find(|n| *n > 1).unwrap_or(1).min(8);
        slow::shared(&mut admin, server.addr(), wait, args.consumers, n, args.entries.min(500))?;
    }
    Ok(())
}

/// Latency from XADD to the handler (see `latency.rs`).
fn bench_latency(flavor: Flavor, rate: u32, args: &Args) -> Result<(), String> {
    let server = Server::start(flavor);
    let mut admin = server.admin();
    println!("\n{}", flavor.name());
    latency::run(&mut admin, server.addr(), rate, args.seconds.unwrap_or(30), &args.concurrency)
}

/// A fresh group at 0, one contender consuming all of it, and the checks that it did.
fn one_run(admin: &mut Admin, who: Contender, job: Job<'_>) -> Result<Sample, String> {
    admin.cmd(&["XGROUP", "DESTROY", STREAM, GROUP]);
    admin.call(&["XGROUP", "CREATE", STREAM, GROUP, "0"]);
    let mut handled = Ok(0);
    let sample = Sample::take(admin, || handled = contenders::run(who, job));
    let handled = handled.map_err(|e| format!("{} at COUNT {}: {e}", who.name(), job.batch))?;
    let pending = admin.xpending_count(STREAM, GROUP);
    if handled != job.total || pending != 0 {
        return Err(format!(
            "{} at COUNT {}: handled {handled} of {}, {pending} pending",
            who.name(),
            job.batch,
            job.total
        ));
    }
    Ok(sample)
}

fn report(batch: usize, total: usize, samples: &[(Contender, Vec<Sample>)]) {
    let per_second = |s: &Sample| total as f64 / s.wall.as_secs_f64();
    let median_of = |who: Contender| {
        samples.iter().find(|(c, _)| *c == who).map(|(_, runs)| {
            let mut rates: Vec<f64> = runs.iter().map(per_second).collect();
            median_range(&mut rates).0
        })
    };
    let (base, redis) = (median_of(Contender::Raw), median_of(Contender::Redis));
    let ratio = |median: f64, to: Option<f64>| to.map_or(String::new(), |b| format!("{:.2}", median / b));
    println!("\n  COUNT {batch}");
    println!(
        "  {:<16} {:>22} {:>8} {:>8} {:>12} {:>12} {:>14} {:>9}",
        "", "entries/s", "× base", "× redis", "client ns/e", "server ns/e", "server limit", "reached"
    );
    for (who, runs) in samples {
        let mut rates: Vec<f64> = runs.iter().map(per_second).collect();
        let (median, lo, hi) = median_range(&mut rates);
        let mut client: Vec<f64> =
            runs.iter().filter_map(|s| s.client_cpu).map(|c| c.as_nanos() as f64 / total as f64).collect();
        let client =
            if client.is_empty() { "n/a".to_string() } else { format!("{:.0}", median_range(&mut client).0) };
        let mut server: Vec<f64> =
            runs.iter().map(|s| s.server_cpu.as_nanos() as f64 / total as f64).collect();
        let server = median_range(&mut server).0;
        // How near each run came to its limit, entries/s if the server did nothing but this
        // work: the share of the wall time the server was busy.
        let mut share: Vec<f64> =
            runs.iter().map(|s| s.server_cpu.as_secs_f64() / s.wall.as_secs_f64()).collect();
        let share = median_range(&mut share).0;
        println!(
            "  {:<16} {:>8.0}k ({:>5.0}k–{:>5.0}k) {:>8} {:>8} {:>12} {:>12.0} {:>13.0}k {:>8.0}%",
            who.name(),
            median / 1e3,
            lo / 1e3,
            hi / 1e3,
            ratio(median, base),
            ratio(median, redis),
            client,
            server,
            1e6 / server,
            share * 100.0
        );
    }
}
