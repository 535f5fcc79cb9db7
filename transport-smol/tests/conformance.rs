//! The conformance suite (`pelican-tests`) over `pelican-smol`, on Redis 6.2, Redis 7.0 and
//! Valkey 8.1, RESP2 and RESP3.

use std::thread;

use pelican::Config;
use pelican_tests::conformance::{Handler, Running, Transport};
use pelican_tests::server::Endpoint;

struct Smol;

impl Transport for Smol {
    fn spawn(to: Endpoint, config: Config, mut handler: Handler) -> Running {
        let mut runner = pelican_smol::Runner::new(to.addr, config).expect("a valid runner");
        if let Some((tls, host)) = to.tls {
            runner = runner.tls(tls, host);
        }
        if let Some(timeout) = to.connect_timeout {
            runner = runner.connect_timeout(timeout);
        }
        let stop = runner.stop_handle();
        let thread = thread::spawn(move || {
            smol::block_on(runner.run(move |e| {
                let v = handler(&e);
                async move { v }
            }))
            .map_err(|e| e.to_string())
        });
        let abandon = stop.clone();
        Running::new(move || stop.stop(), move || abandon.abandon(), thread)
    }
}

pelican_tests::conformance_suite!(Smol);
