//! A lane: one consumer and its connection, reading one stream or many, each stream with a
//! handler of its own. `consume` reads every `--stream` in one lane (in a cluster, one lane
//! per hash slot they fall in), all in one process; the transports ([`super::mio_lanes`],
//! [`super::smol_lanes`]) run them and say how each ended.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use std::collections::HashMap;

use pelican::{Config, Endpoint, Entry, HostPort, Notice, Stats};
use pelican_tls::Tls;

use super::handler::Handler;
use super::pipe::Pipe;
use super::published::Published;

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
    /// Where its snapshots are published, for `--metrics` and the overdue watch.
    pub published: Published,
}

impl Lane {
    /// The lane as lines name it: its stream, or its first and how many more.
    pub fn name(&self) -> String {
        self.handlers.name()
    }
}

/// Handlers, one per stream, found by an entry's stream: a lane's, or every stream's. More
/// join as streams are found (`--stream-pattern`). With `--pipe`, the one handler process
/// they all hand their entries to.
#[derive(Clone, Default)]
pub struct Handlers {
    known: Arc<RwLock<Known>>,
    pipe: Option<Arc<Pipe>>,
}

/// The handlers, in the order their streams came, and where each is by its stream.
#[derive(Default)]
struct Known {
    list: Vec<Arc<Handler>>,
    by_stream: HashMap<Vec<u8>, usize>,
}

impl Handlers {
    /// These handlers, and the `--pipe` handler process if there is one.
    pub fn new(list: Vec<Arc<Handler>>, pipe: Option<Arc<Pipe>>) -> Handlers {
        let handlers = Handlers { known: Arc::default(), pipe };
        for handler in list {
            handlers.add(handler);
        }
        handlers
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Known> {
        self.known.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds `handler`, unless its stream has one; true if added.
    pub fn add(&self, handler: Arc<Handler>) -> bool {
        let mut known = self.known.write().unwrap_or_else(|e| e.into_inner());
        if known.by_stream.contains_key(handler.stream_bytes()) {
            return false;
        }
        let i = known.list.len();
        known.by_stream.insert(handler.stream_bytes().to_vec(), i);
        known.list.push(handler);
        true
    }

    /// The handler of `entry`'s stream (the first, if it has none: cannot be).
    pub fn of(&self, entry: &Entry) -> Arc<Handler> {
        let known = self.read();
        let i = match known.list.len() {
            1 => 0,
            _ => known.by_stream.get(entry.stream()).copied().unwrap_or(0),
        };
        known.list[i].clone()
    }

    /// Whether `stream` has a handler.
    pub fn has(&self, stream: &[u8]) -> bool {
        self.read().by_stream.contains_key(stream)
    }

    /// The first handler: what every handler shares is reached through it.
    pub fn first(&self) -> Arc<Handler> {
        self.read().list[0].clone()
    }

    /// `--pipe`'s handler process, which every entry goes to.
    pub fn pipe(&self) -> Option<&Arc<Pipe>> {
        self.pipe.as_ref()
    }

    /// Every handler, in order.
    pub fn list(&self) -> Vec<Arc<Handler>> {
        self.read().list.clone()
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.read().list.len()
    }

    /// Handler counts summed.
    pub fn sum(&self, get: impl Fn(&Handler) -> u64) -> u64 {
        self.read().list.iter().map(|h| get(h)).sum()
    }

    /// As lines name them: the stream, or the first and how many more.
    pub fn name(&self) -> String {
        match &self.read().list[..] {
            [one] => one.stream.clone(),
            [first, rest @ ..] => format!("{} and {} more", first.stream, rest.len()),
            [] => String::new(),
        }
    }
}

/// Streams found after the start (`--stream-pattern`), for the lanes to join.
pub struct Rescan {
    /// Looks again: the handlers of the streams found since, already among every stream's.
    pub look: Box<dyn FnMut() -> Vec<Arc<Handler>> + Send>,
    /// How often.
    pub every: Duration,
    /// In a cluster a stream joins the lane of its hash slot only (a read's streams share
    /// one).
    pub cluster: bool,
}

/// The lane a stream found later joins: in a cluster the one of its slot, if any; else the
/// first with room.
pub fn lane_for(lanes: &[Handlers], cluster: bool, stream: &[u8]) -> Option<usize> {
    let slot = pelican::cluster::key_slot;
    lanes.iter().position(|lane| match cluster {
        true => slot(lane.first().stream_bytes()) == slot(stream),
        false => lane.len() < pelican::MAX_STREAMS,
    })
}

/// Tells that `stream` was found but cannot be read by the lanes running: in a cluster, no
/// lane reads its slot; else every lane reads [`pelican::MAX_STREAMS`] streams already.
pub fn tell_unjoined(handler: &Handler, cluster: bool) {
    let why = match cluster {
        true => "no connection reads its cluster slot".to_string(),
        false => {
            format!("every connection reads {} streams already, the most one reads", pelican::MAX_STREAMS)
        }
    };
    handler.shared.screen.tell(format_args!(
        "pelican: stream {} matches --stream-pattern, but {why}; restart pelican to read it",
        handler.stream
    ));
}

/// Tells that `stream` was found but is not read: its lane's consumer (in a cluster, the
/// one of its slot) reads [`pelican::MAX_STREAMS`] streams already, the most one reads.
pub fn tell_too_many(handler: &Handler) {
    handler.shared.screen.tell(format_args!(
        "pelican: stream {} matches --stream-pattern, but is not read: the connection for its cluster \
         slot reads {} streams already, the most one reads",
        handler.stream,
        pelican::MAX_STREAMS
    ));
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
    let handlers = lane.handlers.clone();
    let prefix = match (several, lane.handlers.len()) {
        (false, _) => String::new(),
        (true, 1) => format!("stream {}: ", handler.stream),
        (true, _) => format!("streams {}: ", lane.name()),
    };
    let mut failing = Failing::default();
    move |notice| {
        match notice {
            Notice::Health(health) => {
                // Asked only of a lane of one stream (a notice names no stream).
                *handlers.first().watch.health.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(health.clone());
                return; // shown by the progress line
            }
            Notice::Connected { .. } => {
                handlers.list().iter().for_each(|h| h.watch.down.store(false, Relaxed))
            }
            Notice::ConnectFailed { .. } | Notice::ConnectionLost { .. } | Notice::NotMaster { .. } => {
                handlers.list().iter().for_each(|h| h.watch.down.store(true, Relaxed))
            }
            _ => {}
        }
        let Some(line) = failing.line(notice) else { return };
        if !quiet {
            // The library names its API as the fix; here, the flags.
            screen.tell(format_args!("pelican: {prefix}{}", crate::server::in_flags(&line)));
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
