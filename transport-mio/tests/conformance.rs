//! The conformance suite (`pelican-tests`) over `pelican-mio`, on Redis 6.2, Redis 7.0 and
//! Valkey 8.1, RESP2 and RESP3, and over TLS (and mutual TLS) on Redis 7.0. One entry at a
//! time runs inline (`Runner::run`); many in hand run on the pool (`Runner::run_pool`).

use std::thread;

use pelican::Config;
use pelican_mio::Runner;
use pelican_tests::conformance::{Handler, Running, SharedHandler, Transport};
use pelican_tests::server::Endpoint;

struct Mio;

/// A runner for `config` against `to`, over TLS if it says so.
fn runner(to: Endpoint, config: Config) -> Runner {
    let mut runner = Runner::new(to.at, config).expect("a valid runner").fallback_addrs(to.fallbacks);
    if let Some((tls, host)) = to.tls {
        runner = runner.tls(tls, host);
    }
    if let Some(timeout) = to.connect_timeout {
        runner = runner.connect_timeout(timeout);
    }
    if let Some(lookup) = to.lookup {
        runner = runner.resolve_with(move |host, port| lookup(host, port));
    }
    if let Some(sink) = to.notices {
        runner = runner.on_notice(move |notice| sink(notice));
    }
    runner
}

/// `run` on a thread of its own, stopped and abandoned through the runner's handle.
fn running(
    runner: Runner,
    run: impl FnOnce(Runner) -> Result<pelican::Stats, pelican_mio::RunError> + Send + 'static,
) -> Running {
    let (stop, set) = (runner.stop_handle(), runner.stream_set());
    let thread = thread::spawn(move || run(runner).map_err(|e| e.to_string()));
    let abandon = stop.clone();
    Running::new(move || stop.stop(), move || abandon.abandon(), thread).with_stream_set(move |key, add| {
        match add {
            true => set.add(key.to_string()),
            false => set.remove(key.to_string()),
        }
    })
}

impl Transport for Mio {
    fn spawn(to: Endpoint, config: Config, mut handler: Handler) -> Running {
        running(runner(to, config), move |runner| runner.run(|e| handler(e)))
    }

    fn spawn_concurrent(to: Endpoint, config: Config, handler: SharedHandler) -> Running {
        running(runner(to, config), move |runner| runner.run_pool(|e| handler(e)))
    }
}

pelican_tests::conformance_suite!(Mio);
