//! What every conformance story stands on: the [`Transport`] a transport's test file
//! implements, the consumer it runs ([`Running`]), the servers a story runs on ([`Target`],
//! [`on_every_target`]), and the small tools the stories share. The stories look down on it;
//! it looks up at none of them.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use pelican::{Config, Entry, Protocol, Source, Stats, Verdict};

use crate::admin::Admin;
use crate::server::{Endpoint, Flavor, Options, Server, Tls};

/// The application's handler, as the suite hands it to a transport.
pub type Handler = Box<dyn FnMut(&Entry) -> Verdict + Send>;

/// A handler many entries are in at once: shared by whatever runs them side by side. It may
/// block (a slow handler is a sleep, or a bounded wait for the story to go on): the
/// transport runs it so that the others in hand go on meanwhile.
pub type SharedHandler = Arc<dyn Fn(&Entry) -> Verdict + Send + Sync>;

/// What a transport must offer the suite: run one consumer on a thread of its own.
pub trait Transport {
    /// Starts a consumer for `config` against `to` (over TLS if it says so), handling
    /// entries with `handler`.
    fn spawn(to: Endpoint, config: Config, handler: Handler) -> Running;

    /// Starts a consumer for `config` against `to` that keeps up to
    /// [`Config::concurrency`] entries in hand, handling them with `handler` at once (each
    /// call may block without holding up the others), each settled by its verdict as it
    /// returns. An [`abandon`](Running::abandon) gives up the entries in hand: their
    /// verdicts are not sent, whenever their handlers return.
    fn spawn_concurrent(to: Endpoint, config: Config, handler: SharedHandler) -> Running;
}

/// A consumer running on its own thread.
pub struct Running {
    stop: Box<dyn Fn() + Send + Sync>,
    abandon: Box<dyn Fn() + Send + Sync>,
    thread: JoinHandle<Result<Stats, String>>,
    /// Adds (`true`) or removes a stream, where the transport can while it runs; says
    /// whether the change was taken.
    streams: Option<StreamChange>,
}

/// How a transport adds (`true`) or removes a stream of a running consumer, and whether it
/// took the change.
type StreamChange = Box<dyn Fn(&str, bool) -> bool + Send + Sync>;

impl Running {
    /// Wraps a transport's stop and abandon functions and the thread that returns the final
    /// stats (or the fatal error, as text).
    pub fn new(
        stop: impl Fn() + Send + Sync + 'static,
        abandon: impl Fn() + Send + Sync + 'static,
        thread: JoinHandle<Result<Stats, String>>,
    ) -> Running {
        Running { stop: Box::new(stop), abandon: Box::new(abandon), thread, streams: None }
    }

    /// How the transport adds (`true`) and removes streams while it runs, and whether it
    /// took the change.
    #[must_use]
    pub fn with_stream_set(mut self, change: impl Fn(&str, bool) -> bool + Send + Sync + 'static) -> Running {
        self.streams = Some(Box::new(change));
        self
    }

    /// Reads `key` too, from now on; whether the consumer took it.
    pub fn add_stream(&self, key: &str) -> bool {
        (self.streams.as_ref().expect("the transport adds streams"))(key, true)
    }

    /// Reads `key` no more; whether the consumer took it.
    pub fn remove_stream(&self, key: &str) -> bool {
        (self.streams.as_ref().expect("the transport removes streams"))(key, false)
    }

    /// Asks the consumer to stop (between entries).
    pub fn stop(&self) {
        (self.stop)();
    }

    /// Asks the consumer to stop without waiting on the server.
    pub fn abandon(&self) {
        (self.abandon)();
    }

    /// A crash, as `kill -9` leaves one: the connection of `consumer` (named as
    /// [`Target::config`] names it) cut, so that nothing more reaches the server (not even
    /// an abandon's parting write), then the run abandoned.
    pub fn crash(&self, admin: &mut Admin, consumer: &str) {
        let killed = admin.client_kill_by_name(&format!("pelican-{consumer}"));
        assert!(killed >= 1, "{consumer} was not connected");
        self.abandon();
    }

    /// True once the consumer's thread has returned.
    pub fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }

    /// Waits (at most `limit`) for the consumer's thread to return.
    pub fn join(self, limit: Duration) -> Result<Stats, String> {
        assert!(
            wait_until(limit, || self.thread.is_finished()),
            "the consumer did not return within {limit:?}"
        );
        self.thread.join().unwrap_or_else(|_| Err("the consumer thread panicked".into()))
    }

    /// Stops and waits (at most 10 s); panics on an error.
    pub fn finish(self) -> Stats {
        self.stop();
        self.join(Duration::from_secs(10)).expect("the consumer stopped cleanly")
    }
}

/// Polls `cond` every 5 ms until it holds or `limit` passes.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// One server flavor and protocol for a scenario, over TLS or not.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    /// The server.
    pub flavor: Flavor,
    /// The wire protocol.
    pub protocol: Protocol,
    /// Over TLS, and how the server serves it.
    pub tls: Option<Tls>,
}

impl Target {
    /// Starts the target's server (with TLS if the target has it).
    pub fn start(&self) -> Server {
        self.start_with(Options::default())
    }

    /// Starts the target's server with `options` (and TLS if the target has it).
    pub fn start_with(&self, options: Options) -> Server {
        match self.tls {
            Some(tls) => Server::start_with(self.flavor, options.with_tls(tls)),
            None => Server::start_with(self.flavor, options),
        }
    }

    /// A consumer config with short, test-friendly timings, reading 50 at a time from the
    /// start (the scenarios speak of batches read whole).
    pub fn config(&self, consumer: &str) -> Config {
        Config::new(STREAM, GROUP, consumer)
            .protocol(self.protocol)
            .count(50)
            .start_count(50)
            .beat(Duration::from_millis(200))
            .min_idle(Duration::from_secs(3600))
            .backoff(Duration::from_millis(20), Duration::from_millis(200))
            .client_name(format!("pelican-{consumer}"))
    }
}

/// The stream key every scenario uses.
pub const STREAM: &str = "s";
/// The group every scenario uses.
pub const GROUP: &str = "g";

/// What the handler saw: every delivery, in order.
#[derive(Clone, Default)]
pub struct Seen(Arc<Mutex<Vec<(String, Source)>>>);

impl Seen {
    /// A handler that records each delivery and answers with `verdict(id, times seen)`.
    pub fn handler(&self, mut verdict: impl FnMut(&str, usize) -> Verdict + Send + 'static) -> Handler {
        let seen = self.clone();
        Box::new(move |e: &Entry| {
            let id = String::from_utf8_lossy(e.id()).into_owned();
            let mut all = seen.0.lock().unwrap();
            all.push((id.clone(), e.source));
            let times = all.iter().filter(|(i, _)| *i == id).count();
            drop(all);
            verdict(&id, times)
        })
    }
    /// A handler that acks everything.
    pub fn acking(&self) -> Handler {
        self.handler(|_, _| Verdict::Ack)
    }
    /// Deliveries so far.
    pub fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
    /// True if nothing was delivered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Distinct ids delivered.
    pub fn ids(&self) -> BTreeSet<String> {
        self.0.lock().unwrap().iter().map(|(id, _)| id.clone()).collect()
    }
    /// Every delivery.
    pub fn all(&self) -> Vec<(String, Source)> {
        self.0.lock().unwrap().clone()
    }
}

pub(crate) fn set(ids: &[String]) -> BTreeSet<String> {
    ids.iter().cloned().collect()
}

/// Creates the group at `0` (with MKSTREAM).
pub(crate) fn create_group(admin: &mut Admin) {
    admin.call(&["XGROUP", "CREATE", STREAM, GROUP, "0", "MKSTREAM"]);
}

/// Reads every new entry as `consumer` (who then holds them, as a peer that dies would).
pub(crate) fn hold(admin: &mut Admin, consumer: &str) -> usize {
    let reply =
        admin.call(&["XREADGROUP", "GROUP", GROUP, consumer, "COUNT", "1000000", "STREAMS", STREAM, ">"]);
    reply
        .as_array()
        .and_then(|s| s.first())
        .and_then(|s| s.as_array())
        .and_then(|s| s.get(1))
        .and_then(|e| e.as_array())
        .map_or(0, |e| e.len())
}

pub(crate) const SETTLE: Duration = Duration::from_secs(10);

/// Runs `scenario` on every server flavor and protocol, a thread per target; panics with
/// the list of targets that failed.
pub fn on_every_target(name: &str, scenario: fn(Target)) {
    let mut targets = Vec::new();
    for flavor in Flavor::ALL {
        for protocol in [Protocol::Resp2, Protocol::Resp3] {
            targets.push(Target { flavor, protocol, tls: None });
        }
    }
    // Only the Redis 7.0 and 8.10 binaries serve TLS (PROTOCOL.md 27).
    let tls = |client_auth| Some(Tls { client_auth, ..Tls::default() });
    for flavor in Flavor::TLS {
        for (protocol, tls) in
            [(Protocol::Resp2, tls(false)), (Protocol::Resp3, tls(false)), (Protocol::Resp3, tls(true))]
        {
            targets.push(Target { flavor, protocol, tls });
        }
    }
    let total = targets.len();
    let threads: Vec<_> = targets
        .into_iter()
        .map(|t| {
            let over = match t.tls {
                None => "",
                Some(Tls { client_auth: false, .. }) => " over TLS",
                Some(Tls { client_auth: true, .. }) => " over mutual TLS",
            };
            let label = format!("{name} on {} {:?}{over}", t.flavor.name(), t.protocol);
            (label.clone(), thread::Builder::new().name(label).spawn(move || scenario(t)).unwrap())
        })
        .collect();
    let failed: Vec<String> =
        threads.into_iter().filter_map(|(label, th)| th.join().is_err().then_some(label)).collect();
    assert!(failed.is_empty(), "{} of {total} targets failed: {failed:?}", failed.len());
}
