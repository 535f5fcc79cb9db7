//! The conformance suite (`pelican-tests`) over `pelican-mio`, on Redis 6.2, Redis 7.0 and
//! Valkey 8.1, RESP2 and RESP3, and over TLS (and mutual TLS) on Redis 7.0.

use std::thread;

use pelican::Config;
use pelican_tests::conformance::{Handler, Running, Transport};
use pelican_tests::server::Endpoint;

struct Mio;

impl Transport for Mio {
    fn spawn(to: Endpoint, config: Config, mut handler: Handler) -> Running {
        let mut runner = pelican_mio::Runner::new(to.addr, config).expect("a valid runner");
        if let Some((tls, host)) = to.tls {
            runner = runner.tls(tls, host);
        }
        if let Some(timeout) = to.connect_timeout {
            runner = runner.connect_timeout(timeout);
        }
        let stop = runner.stop_handle();
        let thread = thread::spawn(move || runner.run(|e| handler(e)).map_err(|e| e.to_string()));
        let abandon = stop.clone();
        Running::new(move || stop.stop(), move || abandon.abandon(), thread)
    }
}

pelican_tests::conformance_suite!(Mio);
