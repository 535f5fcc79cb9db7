//! The consumers measured: the hand-pipelined baseline, pelican over mio and over smol (over
//! TCP, and over TLS where the server serves it), and the `redis` crate's idiomatic
//! read-then-ack loop. Each consumes exactly `total` new
//! entries, acks them all, and returns how many it handled.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use pelican::{Config, Verdict};
use pelican_tests::server::Endpoint;
use redis::streams::{StreamReadOptions, StreamReadReply};
use redis::Commands;

/// Who consumes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Contender {
    /// The hand-pipelined minimal client (`raw.rs`).
    Raw,
    /// `pelican-mio`'s blocking `Runner`.
    Mio,
    /// `pelican-smol`'s `Runner` under `smol::block_on`, with an async handler.
    Smol,
    /// The `redis` crate: `XREADGROUP`, then `XACK` the batch, in turn.
    Redis,
    /// `pelican-mio` over TLS (Redis 7.0 only).
    MioTls,
    /// `pelican-smol` over TLS (Redis 7.0 only).
    SmolTls,
}

impl Contender {
    pub const ALL: [Contender; 6] = [
        Contender::Raw,
        Contender::Mio,
        Contender::Smol,
        Contender::Redis,
        Contender::MioTls,
        Contender::SmolTls,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Contender::Raw => "hand-pipelined",
            Contender::Mio => "pelican-mio",
            Contender::Smol => "pelican-smol",
            Contender::Redis => "redis crate",
            Contender::MioTls => "pelican-mio TLS",
            Contender::SmolTls => "pelican-smol TLS",
        }
    }

    /// Whether it needs a server that serves TLS.
    pub fn over_tls(self) -> bool {
        matches!(self, Contender::MioTls | Contender::SmolTls)
    }
}

/// Where and what to consume.
#[derive(Clone, Copy, Debug)]
pub struct Job<'a> {
    pub addr: SocketAddr,
    /// The server's TLS port and settings, if it serves TLS.
    pub tls: Option<&'a Endpoint>,
    pub stream: &'static str,
    pub group: &'static str,
    pub batch: usize,
    pub total: usize,
    /// `Config::concurrency` for pelican.
    pub in_hand: u32,
}

/// Runs `who` over `job`; the number of entries it handled.
pub fn run(who: Contender, job: Job<'_>) -> Result<usize, String> {
    match who {
        Contender::Raw => crate::raw::consume(job.addr, job.stream, job.group, "bench", job.batch, job.total)
            .map_err(|e| e.to_string()),
        Contender::Mio => mio(job, None),
        Contender::Smol => smol(job, None),
        Contender::MioTls => mio(job, job.tls),
        Contender::SmolTls => smol(job, job.tls),
        Contender::Redis => redis_crate(job).map_err(|e| e.to_string()),
    }
}

fn config(job: Job<'_>) -> Config {
    Config::new(job.stream, job.group, "bench").count(job.batch as u32).concurrency(job.in_hand)
}

fn mio(job: Job<'_>, tls: Option<&Endpoint>) -> Result<usize, String> {
    let mut runner =
        pelican_mio::Runner::new(tls.map_or_else(|| job.addr.into(), |to| to.at.clone()), config(job))
            .map_err(|e| e.to_string())?;
    if let Some((tls, host)) = tls.and_then(|to| to.tls.clone()) {
        runner = runner.tls(tls, host);
    }
    let stop = runner.stop_handle();
    let mut handled = 0;
    runner
        .run(|_| {
            handled += 1;
            if handled == job.total {
                stop.stop();
            }
            Verdict::Ack
        })
        .map_err(|e| e.to_string())?;
    Ok(handled)
}

fn smol(job: Job<'_>, tls: Option<&Endpoint>) -> Result<usize, String> {
    let mut runner =
        pelican_smol::Runner::new(tls.map_or_else(|| job.addr.into(), |to| to.at.clone()), config(job))
            .map_err(|e| e.to_string())?;
    if let Some((tls, host)) = tls.and_then(|to| to.tls.clone()) {
        runner = runner.tls(tls, host);
    }
    let stop = runner.stop_handle();
    let handled = Arc::new(AtomicUsize::new(0));
    let count = handled.clone();
    smol::block_on(runner.run(move |_| {
        if count.fetch_add(1, Ordering::Relaxed) + 1 == job.total {
            stop.stop();
        }
        async { Verdict::Ack }
    }))
    .map_err(|e| e.to_string())?;
    Ok(handled.load(Ordering::Relaxed))
}

fn redis_crate(job: Job<'_>) -> redis::RedisResult<usize> {
    let client = redis::Client::open(format!("redis://{}/", job.addr))?;
    let mut con = client.get_connection()?;
    let options = StreamReadOptions::default().group(job.group, "bench").count(job.batch);
    let mut handled = 0;
    while handled < job.total {
        let reply: StreamReadReply = con.xread_options(&[job.stream], &[">"], &options)?;
        let ids: Vec<String> = reply.keys.into_iter().flat_map(|k| k.ids).map(|e| e.id).collect();
        if ids.is_empty() {
            break;
        }
        handled += ids.len();
        let _: usize = con.xack(job.stream, job.group, &ids)?;
    }
    Ok(handled)
}
