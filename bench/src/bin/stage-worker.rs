//! A stage worker for `pelican-bench --stage`: reads stream `A`, writes one entry naming
//! each input to stream `B`, and settles the input — with a commit (`commit`: the write and
//! the ack in one fenced step) or today's way (`naive`: the handler `XADD`s to `B` itself,
//! then acks). Run as a child process so that the bench can `kill -9` and `SIGSTOP` it.
//!
//! `stage-worker <host:port> <consumer> <commit|naive> <min_idle_ms> <handler_ms>`

use std::process::ExitCode;
use std::thread;
use std::time::Duration;

use pelican::{Config, Verdict, Writes};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, consumer, mode, min_idle, handler] = &args[..] else {
        eprintln!("usage: stage-worker <host:port> <consumer> <commit|naive> <min_idle_ms> <handler_ms>");
        return ExitCode::from(2);
    };
    let ms = |s: &str| Duration::from_millis(s.parse().expect("milliseconds"));
    let (min_idle, handler) = (ms(min_idle), ms(handler));
    let mut naive = match mode.as_str() {
        "commit" => None,
        "naive" => {
            let client = redis::Client::open(format!("redis://{addr}/")).expect("a redis URL");
            Some(client.get_connection().expect("a connection for the handler's own writes"))
        }
        other => {
            eprintln!("stage-worker: unknown mode {other}");
            return ExitCode::from(2);
        }
    };
    let config = Config::new("A", "g", consumer.as_str()).count(10).min_idle(min_idle);
    let outcome = pelican_mio::run(addr.as_str(), config, |entry| {
        thread::sleep(handler);
        match naive.as_mut() {
            None => Verdict::Commit(Writes::new().add("B", [(&b"input"[..], entry.id())])),
            Some(connection) => {
                let written: redis::RedisResult<String> =
                    redis::cmd("XADD").arg("B").arg("*").arg("input").arg(entry.id()).query(connection);
                match written {
                    Ok(_) => Verdict::Ack,
                    Err(_) => Verdict::Retry,
                }
            }
        }
    });
    match outcome {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("stage-worker: {e}");
            ExitCode::FAILURE
        }
    }
}
