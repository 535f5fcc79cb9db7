//! One process, one thread, eight lanes: eight streams consumed by eight `pelican-mio`
//! `Driver`s on one `mio::Poll`, across a 3-master cluster and on one server, so the two can
//! be compared (`--lanes`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use mio::{Events, Poll, Token};
use pelican::{Config, Consumer, Entry, Verdict};
use pelican_mio::{Driver, Status};
use pelican_tests::admin::Admin;

/// Consumes `per_stream` entries from each of `streams` (group `group`, at 0), the lanes
/// placed by asking `seed` (a cluster node) where each stream is served. Returns the wall time;
/// fails if a lane errs or does not get its entries within a minute.
pub fn consume(
    seed: SocketAddr,
    streams: &[String],
    group: &str,
    per_stream: usize,
    batch: usize,
) -> Result<Duration, String> {
    let mut poll = Poll::new().map_err(|e| e.to_string())?;
    // Each lane starts at its master, where the cluster says it is (on one server: `seed`).
    let keys: Vec<&[u8]> = streams.iter().map(|s| s.as_bytes()).collect();
    let homes = pelican_mio::locate(seed, &keys, Duration::from_secs(2)).unwrap_or_default();
    let mut drivers: Vec<Driver> = Vec::new();
    for (i, stream) in streams.iter().enumerate() {
        let config = Config::new(stream.as_str(), group, "bench").count(batch as u32);
        let consumer = Consumer::new(config).map_err(|e| e.to_string())?;
        let home = homes.get(i).copied().flatten().unwrap_or(seed);
        drivers.push(Driver::new(home, consumer, Token(i)));
    }
    let mut handled = vec![0usize; streams.len()];
    let mut events = Events::with_capacity(256);
    let started = Instant::now();
    loop {
        if started.elapsed() > Duration::from_secs(60) {
            return Err(format!("lanes handled {handled:?} of {per_stream} each in a minute"));
        }
        let due: Vec<usize> = events.iter().map(|e| e.token().0).collect();
        let now = Instant::now();
        for (i, driver) in drivers.iter_mut().enumerate() {
            if driver.is_stopped()
                || !(due.contains(&i) || driver.next_deadline().is_some_and(|at| at <= now))
            {
                continue;
            }
            let count = &mut handled[i];
            let mut handler = |_: &Entry| {
                *count += 1;
                Verdict::Ack
            };
            let status = driver.drive(poll.registry(), &mut handler).map_err(|e| e.to_string())?;
            if handled[i] >= per_stream && status == Status::Running && !driver.consumer().is_stopped() {
                driver.stop();
                let _ = driver.drive(poll.registry(), &mut |_: &Entry| Verdict::Retry);
            }
        }
        if drivers.iter().all(Driver::is_stopped) {
            break;
        }
        let next = drivers.iter().filter_map(Driver::next_deadline).min();
        let timeout = next.map(|at| at.saturating_duration_since(Instant::now()));
        poll.poll(&mut events, timeout).map_err(|e| e.to_string())?;
    }
    if handled.iter().any(|&n| n != per_stream) {
        return Err(format!("lanes handled {handled:?}, {per_stream} each expected"));
    }
    Ok(started.elapsed())
}

/// Streams named `lane-0`, `lane-1`… until there are `n`, as evenly spread over `owners` as
/// their names allow (`owner` says which node serves a key).
pub fn spread(n: usize, owners: usize, owner: impl Fn(&str) -> usize) -> Vec<String> {
    let mut per = vec![0; owners];
    let mut names = Vec::new();
    for name in (0..).map(|i| format!("lane-{i}")) {
        let at = owner(&name);
        if per[at] < n.div_ceil(owners) {
            per[at] += 1;
            names.push(name);
        }
        if names.len() == n {
            return names;
        }
    }
    unreachable!("the names never end")
}

/// A fresh `stream` of `n` entries and a group at 0, through `admin` (connected to its
/// owner).
pub fn fill(admin: &mut Admin, stream: &str, group: &str, n: usize, field: usize) {
    admin.cmd(&["DEL", stream]);
    admin.xadd_n(stream, n, field);
    admin.call(&["XGROUP", "CREATE", stream, group, "0"]);
}
