//! The conformance suite (`pelican-tests`) over `pelican-mio`, on Redis 6.2, Redis 7.0 and
//! Valkey 8.1, RESP2 and RESP3.

use std::net::SocketAddr;
use std::thread;

use pelican::Config;
use pelican_tests::conformance::{Handler, Running, Transport};

struct Mio;

impl Transport for Mio {
    fn spawn(addr: SocketAddr, config: Config, mut handler: Handler) -> Running {
        let runner = pelican_mio::Runner::new(addr, config).expect("a valid runner");
        let stop = runner.stop_handle();
        let thread = thread::spawn(move || runner.run(|e| handler(e)).map_err(|e| e.to_string()));
        let abandon = stop.clone();
        Running::new(move || stop.stop(), move || abandon.abandon(), thread)
    }
}

pelican_tests::conformance_suite!(Mio);
