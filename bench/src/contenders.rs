//! The consumers measured: the hand-pipelined baseline, pelican over mio and over smol, and
//! the `redis` crate's idiomatic read-then-ack loop. Each consumes exactly `total` new
//! entries, acks them all, and returns how many it handled.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use pelican::{Config, Verdict};
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
}

impl Contender {
    pub const ALL: [Contender; 4] = [Contender::Raw, Contender::Mio, Contender::Smol, Contender::Redis];

    pub fn name(self) -> &'static str {
        match self {
            Contender::Raw => "hand-pipelined",
            Contender::Mio => "pelican-mio",
            Contender::Smol => "pelican-smol",
            Contender::Redis => "redis crate",
        }
    }
}

/// Where and what to consume.
#[derive(Clone, Copy, Debug)]
pub struct Job {
    pub addr: SocketAddr,
    pub stream: &'static str,
    pub group: &'static str,
    pub batch: usize,
    pub total: usize,
}

/// Runs `who` over `job`; the number of entries it handled.
pub fn run(who: Contender, job: Job) -> Result<usize, String> {
    match who {
        Contender::Raw => crate::raw::consume(job.addr, job.stream, job.group, "bench", job.batch, job.total)
            .map_err(|e| e.to_string()),
        Contender::Mio => mio(job),
        Contender::Smol => smol(job),
        Contender::Redis => redis_crate(job).map_err(|e| e.to_string()),
    }
}

fn config(job: Job) -> Config {
    Config::new(job.stream, job.group, "bench").count(job.batch as u32)
}

fn mio(job: Job) -> Result<usize, String> {
    let runner = pelican_mio::Runner::new(job.addr, config(job)).map_err(|e| e.to_string())?;
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

fn smol(job: Job) -> Result<usize, String> {
    let runner = pelican_smol::Runner::new(job.addr, config(job)).map_err(|e| e.to_string())?;
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

fn redis_crate(job: Job) -> redis::RedisResult<usize> {
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
