//! A lane: one consumer and its connection, reading one stream or many, each stream with a
//! handler of its own. `consume` reads every `--stream` in one lane (in a cluster, one lane
//! per hash slot they fall in), all in one process; the transports ([`super::mio_lanes`],
//! [`super::smol_lanes`]) run them and say how each ended.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::collections::HashMap;

use pelican::{Config, Endpoint, Entry, HostPort, Notice, Stats};
use pelican_tls::Tls;

use super::handler::Handler;
use super::metrics::Published;

/// Where every lane connects: the URL's node (looked up again at every connect; in a
/// cluster any node: each lane follows `MOVED` to the node serving its stream) or the master
/// the sentinels name, and TLS with the host a node's certificate must name.
pub struct Net {
    /// The URL's node, or its sentinels.
    pub endpoint: Endpoint,
    /// `rediss://`: the TLS settings and the URL's host (none with Sentinel).
    pub tls: Option<(Tls, String)>,
    /// In a cluster, the master serving each stream (see [`Net::locate`]).
    pub homes: Vec<(Vec<u8>, SocketAddr)>,
    /// In a cluster, its masters: where a lane whose node is gone looks for its slot's new one.
    pub masters: Vec<HostPort>,
}

impl Net {
    /// Where the lane for `stream` connects first, and the nodes it tries in turn after a
    /// connect there fails: the master serving it, when the URL's node is a cluster node that
    /// says so (plaintext: `pelican_mio::locate_with_masters`), then the URL's node and the
    /// cluster's masters. Without that answer, the URL's endpoint.
    pub fn place(&self, stream: &[u8]) -> (Endpoint, Vec<HostPort>) {
        let home = self.homes.iter().find(|(s, _)| s == stream).map(|(_, at)| *at);
        match (home, &self.endpoint) {
            (Some(home), Endpoint::Node(node)) => {
                (home.into(), std::iter::once(node.clone()).chain(self.masters.iter().cloned()).collect())
            }
            _ => (self.endpoint.clone(), Vec::new()),
        }
    }

    /// Asks the URL's node once where each of `streams` is served (nothing if it is not a
    /// cluster node, wants TLS or a password first, or does not answer in 2 s; nothing with
    /// Sentinel).
    pub fn locate(mut self, streams: &[&[u8]]) -> Net {
        let (Endpoint::Node(node), None) = (&self.endpoint, &self.tls) else { return self };
        let Some(seed) = (node.host.as_str(), node.port).to_socket_addrs().ok().and_then(|mut a| a.next())
        else {
            return self;
        };
        if let Ok((found, masters)) =
            pelican_mio::locate_with_masters(seed, streams, std::time::Duration::from_secs(2))
        {
            self.homes =
                streams.iter().zip(found).filter_map(|(stream, at)| Some((stream.to_vec(), at?))).collect();
            self.masters = masters;
        }
        self
    }
}

/// A consumer and its streams, ready to run.
pub struct Lane {
    /// The consumer's settings (its streams, the dead-letter stream…).
    pub config: Config,
    /// Each stream's handler (its stream, counters and running command).
    pub handlers: Handlers,
    /// Where its snapshots are published for `--metrics` (`None` without it).
    pub published: Option<Published>,
}

impl Lane {
    /// The lane as lines name it: its stream, or its first and how many more.
    pub fn name(&self) -> String {
        match &self.handlers.list[..] {
            [one] => one.stream.clone(),
            [first, rest @ ..] => format!("{} and {} more", first.stream, rest.len()),
            [] => String::new(),
        }
    }
}

/// A lane's handlers, one per stream, found by an entry's stream.
#[derive(Clone)]
pub struct Handlers {
    /// In the order of the lane's streams.
    pub list: Vec<Arc<Handler>>,
    by_stream: Arc<HashMap<Vec<u8>, usize>>,
}

impl Handlers {
    /// The handlers of a lane's streams, in its order (at least one).
    pub fn new(list: Vec<Arc<Handler>>) -> Handlers {
        let by_stream = list.iter().enumerate().map(|(i, h)| (h.stream_bytes().to_vec(), i)).collect();
        Handlers { list, by_stream: Arc::new(by_stream) }
    }

    /// The handler of `entry`'s stream.
    pub fn of(&self, entry: &Entry) -> &Arc<Handler> {
        let i = match self.list.len() {
            1 => 0,
            _ => self.by_stream.get(entry.stream()).copied().unwrap_or(0),
        };
        &self.list[i]
    }

    /// The first handler: what every handler shares is reached through it.
    pub fn first(&self) -> &Arc<Handler> {
        &self.list[0]
    }

    /// Handler counts summed over the lane's streams.
    pub fn sum(&self, get: impl Fn(&Handler) -> u64) -> u64 {
        self.list.iter().map(|h| get(h)).sum()
    }
}

/// How a lane failed for good.
#[derive(Debug)]
pub struct LaneFailure {
    /// What to tell, TLS failures worded in terms of the flags.
    pub message: String,
    /// The consumer's error, if that is what it was (for hints: a missing group, keys in
    /// two cluster slots).
    pub error: Option<pelican::Error>,
}

/// How a lane ended: stopped (its counters), or failed for good.
pub type Outcome = Result<Stats, LaneFailure>;

/// Prints a lane's notices on stderr, one line each (none with `--quiet`), clearing the
/// progress line on a terminal; notes the connection's state and the group's health for
/// the progress line. With several lanes each line names its stream, as failures do. A
/// connect failing again for the same reason is told again only every 30 s, with how many
/// attempts failed meanwhile: an outage is one line every 30 s, not one per retry.
pub fn teller(lane: &Lane, several: bool) -> impl FnMut(&Notice) + Send + 'static {
    let handler = lane.handlers.first();
    let (screen, quiet) = (handler.shared.screen.clone(), handler.shared.quiet);
    let watches: Vec<_> = lane.handlers.list.iter().map(|h| h.watch.clone()).collect();
    let prefix = match (several, lane.handlers.list.len()) {
        (false, _) => String::new(),
        (true, 1) => format!("stream {}: ", handler.stream),
        (true, _) => format!("streams {}: ", lane.name()),
    };
    let mut failing = Failing::default();
    move |notice| {
        match notice {
            Notice::Health(health) => {
                // Asked only of a lane of one stream (a notice names no stream).
                *watches[0].health.lock().unwrap_or_else(|e| e.into_inner()) = Some(health.clone());
                return; // shown by the progress line
            }
            Notice::Connected { .. } => watches.iter().for_each(|w| w.down.store(false, Relaxed)),
            Notice::ConnectFailed { .. } | Notice::ConnectionLost { .. } | Notice::NotMaster { .. } => {
                watches.iter().for_each(|w| w.down.store(true, Relaxed))
            }
            _ => {}
        }
        let Some(line) = failing.line(notice) else { return };
        if !quiet {
            screen.tell(format_args!("pelican: {prefix}{line}"));
        }
    }
}

/// Repeated connect failures, told sparingly.
#[derive(Default)]
struct Failing {
    /// The reason last told, when it was told, and attempts failed since for it.
    last: Option<(String, Instant, u64)>,
    /// Whether a connection was ever made, or the first connect's wait was told.
    settled: bool,
}

/// How often a connect failing for the same reason is told again.
const RETELL: Duration = Duration::from_secs(30);
/// When a first connect that keeps failing is told again: a wrong address should not look
/// like a consumer waiting quietly for entries.
const FIRST_RETELL: Duration = Duration::from_secs(3);

impl Failing {
    /// The line to tell for `notice`, if any.
    fn line(&mut self, notice: &Notice) -> Option<String> {
        let Notice::ConnectFailed { reason, .. } = notice else {
            if matches!(notice, Notice::Connected { .. }) {
                (self.last, self.settled) = (None, true);
            }
            return Some(notice.to_string());
        };
        match &mut self.last {
            Some((last, at, quiet)) if last == reason && !self.settled && at.elapsed() >= FIRST_RETELL => {
                self.settled = true;
                let line = format!(
                    "still waiting for a first connection ({} attempts failed in {} s): {notice}",
                    *quiet + 2,
                    at.elapsed().as_secs()
                );
                (*at, *quiet) = (Instant::now(), 0);
                Some(line)
            }
            Some((last, at, quiet)) if last == reason && at.elapsed() < RETELL => {
                *quiet += 1;
                None
            }
            Some((last, at, quiet)) if last == reason => {
                let line = format!("{notice} ({} attempts failed since the last line)", *quiet + 1);
                (*at, *quiet) = (Instant::now(), 0);
                Some(line)
            }
            _ => {
                self.last = Some((reason.clone(), Instant::now(), 0));
                Some(notice.to_string())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_connect_failures_are_told_sparingly() {
        let failed =
            |reason: &str| Notice::ConnectFailed { reason: reason.into(), retry_in: Duration::from_secs(5) };
        let mut f = Failing::default();
        assert!(f.line(&failed("refused")).unwrap().starts_with("cannot connect: refused"));
        assert_eq!(f.line(&failed("refused")), None, "the same reason again, at once");
        assert_eq!(f.line(&failed("refused")), None);
        assert!(f.line(&failed("timed out")).is_some(), "a new reason is told");
        // Never connected: told again after a few seconds, once, saying what it waits for.
        f.last.as_mut().unwrap().1 -= FIRST_RETELL;
        f.last.as_mut().unwrap().2 = 3;
        assert_eq!(
            f.line(&failed("timed out")).unwrap(),
            "still waiting for a first connection (5 attempts failed in 3 s): cannot connect: timed out; \
             retrying in 5.0 s"
        );
        f.last.as_mut().unwrap().1 -= FIRST_RETELL;
        assert_eq!(f.line(&failed("timed out")), None, "then every 30 s");
        // Past the interval, told again with the count of those not told.
        f.last.as_mut().unwrap().1 -= RETELL;
        f.last.as_mut().unwrap().2 = 5;
        assert_eq!(
            f.line(&failed("timed out")).unwrap(),
            "cannot connect: timed out; retrying in 5.0 s (6 attempts failed since the last line)"
        );
        // Connected: the next failure is news.
        assert_eq!(
            f.line(&Notice::Connected { reconnect: true, dialect: pelican::Dialect::CLASSIC }).unwrap(),
            "reconnected"
        );
        assert!(f.line(&failed("timed out")).is_some());
    }
}
