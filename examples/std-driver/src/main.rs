//! `pelican-std-driver ADDR STREAM GROUP CONSUMER [COUNT]`: prints each entry of the group
//! (its id and fields) as the std driver hands it out, acks it, and stops cleanly after COUNT
//! entries (or runs until killed). The group is made at `0` if missing.

use std::sync::atomic::{AtomicBool, Ordering};

use pelican::{Config, Verdict};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, stream, group, consumer, rest @ ..] = &args[..] else {
        eprintln!("usage: pelican-std-driver ADDR STREAM GROUP CONSUMER [COUNT]");
        std::process::exit(2);
    };
    let Ok(addr) = addr.parse() else {
        eprintln!("{addr:?} is not an address (host:port, an IP address)");
        std::process::exit(2);
    };
    let count: Option<u64> = rest.first().and_then(|n| n.parse().ok());
    let stop = AtomicBool::new(false);
    let mut handled = 0;
    let config = Config::new(stream.as_str(), group.as_str(), consumer.as_str()).create_group("0");
    let outcome = pelican_std_driver::run(
        addr,
        config,
        |entry| {
            let fields: Vec<String> =
                entry.fields().map(|(f, v)| format!("{}={}", f.escape_ascii(), v.escape_ascii())).collect();
            println!("{} {}", entry.id().escape_ascii(), fields.join(" "));
            handled += 1;
            if count.is_some_and(|n| handled >= n) {
                stop.store(true, Ordering::SeqCst);
            }
            Verdict::Ack
        },
        |notice| eprintln!("pelican-std-driver: {notice}"),
        &stop,
    );
    match outcome {
        Ok(stats) => eprintln!("pelican-std-driver: stopped; {} acked", stats.acked),
        Err(e) => {
            eprintln!("pelican-std-driver: gave up: {e}");
            std::process::exit(1);
        }
    }
}
