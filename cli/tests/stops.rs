//! `pelican consume` stopped by SIGTERM at any instant while a producer adds entries one
//! `XADD` at a time: nothing the server handed to the stopped consumer waits `min_idle`
//! under its name (a read the stop cut short is given back), on every server, both
//! transports.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use pelican_tests::server::{Flavor, Server};
use support::{consume, Pelican};

/// Stops per server and transport (`PELICAN_STOPS` sets another number, for a measurement).
const STOPS: usize = 10;

fn stops() -> usize {
    std::env::var("PELICAN_STOPS").ok().and_then(|n| n.parse().ok()).unwrap_or(STOPS)
}
/// The default `--min-idle-ms`: an entry given back has at least this idle time.
const MIN_IDLE_MS: i64 = 30_000;

fn stops_strand_nothing(flavor: Flavor, transport: &'static str) -> Vec<String> {
    let server = Server::start(flavor);
    let url = format!("redis://{}", server.addr());
    let producing = Arc::new(AtomicBool::new(true));
    let producer = {
        let (mut admin, producing) = (server.admin(), producing.clone());
        thread::spawn(move || {
            let mut n = 0u64;
            while producing.load(Ordering::SeqCst) {
                admin.xadd("s", &[("n", n.to_string())]);
                n += 1;
                thread::sleep(Duration::from_micros(400));
            }
        })
    };
    let mut admin = server.admin();
    let mut stranded = Vec::new();
    for i in 0..stops() {
        let name = format!("pod-{i}");
        let mut args = consume(&url, transport, &["--beat-ms", "500"]);
        let at = args.iter().position(|a| *a == "c").expect("the consumer's name");
        args[at] = &name;
        let mut pelican = Pelican::spawn(&args);
        for _ in 0..3 {
            pelican.line(); // handling
        }
        thread::sleep(Duration::from_micros(173 * (i as u64 % 7)));
        pelican.stop();
        for (id, _, idle, deliveries) in admin.xpending_consumer("s", "g", &name) {
            if idle < MIN_IDLE_MS {
                stranded.push(format!("{name} holds {id} (idle {idle} ms, delivered {deliveries}×)"));
            }
        }
    }
    producing.store(false, Ordering::SeqCst);
    producer.join().expect("the producer");
    stranded
}

#[test]
fn sigterm_under_load_strands_nothing() {
    let runs: Vec<_> = Flavor::ALL
        .into_iter()
        .flat_map(|flavor| ["mio", "smol"].map(move |transport| (flavor, transport)))
        .map(|(flavor, transport)| {
            let label = format!("{} over {transport}", flavor.name());
            (label, thread::spawn(move || stops_strand_nothing(flavor, transport)))
        })
        .collect();
    let mut failed = Vec::new();
    for (label, run) in runs {
        match run.join() {
            Ok(stranded) if stranded.is_empty() => eprintln!("{label}: 0 of {} stops stranded", stops()),
            Ok(stranded) => failed.push(format!(
                "{label}: {} of {} stops stranded: {stranded:?}",
                stranded.len(),
                stops()
            )),
            Err(_) => failed.push(format!("{label}: panicked")),
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}
