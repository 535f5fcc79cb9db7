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

/// A reader of stderr that goes away (`pelican consume … 2>&1 | head`, a log shipper that
/// died): what pelican tells is lost, but it goes on consuming, and a SIGTERM still stops it.
/// (Its lines were written with `eprintln!`, which panics on a closed pipe: the thread that
/// told something died with it, the signal thread among them, and the stop never came.)
#[test]
fn a_closed_stderr_loses_the_words_not_the_stop() {
    use std::process::{Command, Stdio};
    let server = Server::start(Flavor::Redis70);
    let url = format!("redis://{}", server.addr());
    let mut admin = server.admin();
    let third = admin.xadd_n("s", 3, 8).pop().unwrap();
    let mut child = Command::new(support::BIN)
        .args(consume(&url, "mio", &["--progress"]))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pelican runs");
    drop(child.stderr.take()); // nobody reads it: the first line told meets a closed pipe
    support::wait_until("the three handled", || handled(&mut admin, &third));
    thread::sleep(Duration::from_millis(300));
    // Still consuming after what it told was lost.
    let last = admin.xadd_n("s", 2, 8).pop().unwrap();
    support::wait_until("two more handled", || handled(&mut admin, &last));
    rustix::process::kill_process(rustix::process::Pid::from_child(&child), rustix::process::Signal::TERM)
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("still running 10 s after SIGTERM");
        }
        thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0), "{status:?}");
}

/// Whether the group has read up to `id` and holds nothing pending (each entry acked).
fn handled(admin: &mut pelican_tests::admin::Admin, id: &str) -> bool {
    admin.group_exists("s", "g")
        && format!("{:?}", admin.call(&["XINFO", "GROUPS", "s"])).contains(id)
        && admin.xpending_count("s", "g") == 0
}
