//! One blocking session for one-shot commands: resolve, connect, TLS, login, the node's role
//! vetted, the master found through Sentinel, cluster redirects followed. Built of the same
//! parts as the [`Driver`](crate::Driver): the core's [`Locator`] (where to dial, and the
//! ceiling on dials), [`SentinelSession`](pelican::locate::SentinelSession) asked over the
//! driver's own sentinel connection (its scout), [`Backoff`]; commands and replies are the
//! core's ([`pelican::oneshot`]).

mod config;
mod error;
pub(crate) mod node;

use std::io;
use std::net::SocketAddr;
use std::thread;
use std::time::{Duration, Instant};

use mio::{Events, Poll, Token};
use pelican::cluster::RedirectKind;
use pelican::locate::{Dial, Found, NodeRole, SentinelAnswer, SentinelSession};
use pelican::oneshot::{Reply, Request};
use pelican::retire::{ConsumerState, Retirement, Step};
use pelican::{Backoff, Endpoint, HostPort, Locator};

pub use config::{SessionConfig, DEFAULT_SESSION_TIMEOUT};
pub use error::SessionError;
use node::{Node, Open, FIRST_REPLY};

use crate::scout::{Scout, ScoutError};

/// How long a connect keeps asking the sentinels when the node they name is not a master
/// yet (a failover under way).
const FIND_MASTER: Duration = Duration::from_secs(10);

/// How many redirects one command follows before giving up: a slot moves once, maybe twice
/// (a migration, then a failover); more means the cluster is still settling.
const MAX_REDIRECTS: usize = 5;

impl SessionConfig {
    /// Where sessions connect.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// A session: see [`Session::connect`].
    pub fn connect(&self) -> Result<Session, SessionError> {
        Session::connect(self)
    }

    /// The services a node that turned out to be a sentinel watches, to name it well: asked
    /// (`ROLE`) on a connection of its own to the endpoint's node, logged in as configured.
    /// `None` without a node endpoint, or if it cannot be reached or does not say.
    pub fn sentinel_services(&self) -> Option<Vec<String>> {
        let Endpoint::Node(node) = &self.endpoint else { return None };
        let mut locator = Locator::new(self.endpoint.clone());
        let host = self.tls_host(node);
        connect_node(self, &mut locator, node, &host).ok()?.services()
    }

    /// The host a node's certificate is checked against.
    fn tls_host(&self, dialled: &HostPort) -> String {
        match &self.tls {
            Some((_, host)) if !host.is_empty() && matches!(self.endpoint, Endpoint::Node(_)) => host.clone(),
            _ => dialled.host.clone(),
        }
    }
}

/// A blocking connection for one-shot commands (an inspection, a producer's appends, a
/// retirement), one command or pipeline at a time, every wait bounded.
///
/// [`Session::connect`] resolves the endpoint's host now (a name a failover moved is
/// followed) or, with Sentinel, asks the sentinels in turn where the master is (over the
/// same connection code as a [`Driver`](crate::Driver)'s, each dial through the core's
/// [`Locator`] and its ceiling); connects over TLS where configured; logs in; and proves the
/// link and vets the node with a bare `HELLO`: a sentinel ([`SessionError::IsSentinel`]) or
/// a replica ([`SessionError::Replica`]; with Sentinel, asked again for a while first: a
/// failover may be under way) is refused before any command of its own.
///
/// In a Redis/Valkey Cluster, [`call`](Self::call) follows the redirects, a few at most:
/// `MOVED` connects to the node named and sends the command again there (that node is kept
/// for the next commands); `ASK` (the slot is being migrated) sends `ASKING` and the command
/// once to the node named. Pipelines ([`send`](Self::send), [`receive`](Self::receive))
/// follow none: their replies say where to go ([`Reply::redirect`]).
#[derive(Debug)]
pub struct Session {
    config: SessionConfig,
    locator: Locator,
    node: Node,
    /// The node the last `ASK` named, connected: the next `ASK` is likely while the
    /// migration lasts.
    asked: Option<Node>,
    /// With Sentinel: the master the sentinels named, connected to.
    master: Option<HostPort>,
}

impl Session {
    /// Connects as `config` says (see the type's docs).
    pub fn connect(config: &SessionConfig) -> Result<Session, SessionError> {
        let mut locator = Locator::new(config.endpoint.clone());
        locator.reseed(crate::seed::seed());
        let (node, master) = open(config, &mut locator)?;
        Ok(Session { config: config.clone(), locator, node, asked: None, master })
    }

    /// Connects again, as [`connect`](Self::connect) did (with Sentinel, asking where the
    /// master is now). On failure the session keeps its old connection, which failed.
    pub fn reconnect(&mut self) -> Result<(), SessionError> {
        self.locator.on_link_down(true);
        let (node, master) = open(&self.config, &mut self.locator)?;
        (self.node, self.asked, self.master) = (node, None, master);
        Ok(())
    }

    /// The address connected to.
    pub fn peer(&self) -> SocketAddr {
        self.node.peer
    }

    /// With Sentinel: the master the sentinels named, connected to.
    pub fn master(&self) -> Option<&HostPort> {
        self.master.as_ref()
    }

    /// With Sentinel: asks the sentinels where the master is now; `Some` if not where this
    /// session is connected (a failover moved it: [`reconnect`](Self::reconnect) to follow).
    /// Without Sentinel: `Ok(None)`.
    pub fn master_moved(&mut self) -> Result<Option<HostPort>, SessionError> {
        let Some(connected) = self.master.clone() else { return Ok(None) };
        // Forgotten, so that it is asked for again.
        self.locator.on_link_down(false);
        let now = find_master(&self.config, &mut self.locator)?;
        Ok((now != connected).then_some(now))
    }

    /// One command and its reply, cluster redirects followed (see the type's docs). An error
    /// reply is [`SessionError::Server`] with the server's text.
    pub fn call(&mut self, request: &Request) -> Result<Reply, SessionError> {
        let mut reply = self.node.exchange(request)?;
        let mut followed = 0;
        while let Some(to) = reply.redirect() {
            if followed == MAX_REDIRECTS {
                return Err(SessionError::Redirected { times: followed });
            }
            followed += 1;
            reply = match to.kind {
                RedirectKind::Moved => {
                    self.node = self.redirected(&to.host, to.port)?;
                    self.asked = None;
                    self.node.exchange(request)?
                }
                RedirectKind::Ask => {
                    let again = self.ask(&to.host, to.port, request)?;
                    if again.redirect().is_some_and(|r| r.kind == RedirectKind::Ask) {
                        // `ASK` is followed once: the node asked sends the command on again.
                        return Ok(again.refused()?);
                    }
                    again
                }
            };
        }
        Ok(reply.refused()?)
    }

    /// Writes commands already encoded (a pipeline), in parts: small ones are gathered into
    /// few writes, big ones (a big value) go out from where they are, uncopied. Read their
    /// replies with [`receive`](Self::receive), in order. Redirects are not followed.
    pub fn send(&mut self, parts: &[&[u8]]) -> Result<(), SessionError> {
        self.node.send(parts)
    }

    /// The next reply to what [`send`](Self::send) wrote (error replies included).
    pub fn receive(&mut self) -> Result<Reply, SessionError> {
        self.node.receive()
    }

    /// `WAIT replicas timeout` on every node this session wrote to (the one connected, and
    /// the one an `ASK` named): the fewest replicas that acknowledged everything written so
    /// far, once that many did or `timeout` ran out. A refusal is [`SessionError::Server`].
    pub fn wait(&mut self, replicas: u32, timeout: Duration) -> Result<u64, SessionError> {
        let here = self.node.wait(replicas, timeout)?;
        match &mut self.asked {
            Some(asked) => Ok(here.min(asked.wait(replicas, timeout)?)),
            None => Ok(here),
        }
    }

    /// Retires the consumers of `group` on `stream` idle at least `min_idle` with nothing
    /// pending and no live connection under their default names (see [`pelican::retire`];
    /// `dry_run`: only tell which would go). The connections are listed and the script run
    /// on the node serving the stream, both together: after `MOVED` both go again to the
    /// node named; after `ASK` (the slot is migrating) the list of both nodes counts, and
    /// the script goes to the node named. A refusal (no such group or key, `CLIENT LIST` not
    /// allowed) is [`SessionError::Server`].
    pub fn retire(
        &mut self,
        stream: &[u8],
        group: &[u8],
        min_idle: Duration,
        dry_run: bool,
    ) -> Result<Vec<ConsumerState>, SessionError> {
        let start = || Retirement::script(stream, group, min_idle, dry_run);
        let list = Request::client_list();
        for _ in 0..=MAX_REDIRECTS {
            let here = self.node.exchange(&list)?.refused()?;
            let mut retirement = start();
            let script = script_after(retirement.read_lists(&[here.as_bytes()]), &retirement)?;
            let reply = self.node.exchange(&script)?;
            let Some(to) = reply.redirect() else { return retired(&mut retirement, reply) };
            match to.kind {
                RedirectKind::Moved => {
                    self.node = self.redirected(&to.host, to.port)?;
                    self.asked = None;
                }
                RedirectKind::Ask => {
                    let node = self.asked_node(&to.host, to.port)?;
                    let there = node.exchange(&list)?.refused()?;
                    let mut retirement = start();
                    let lists = retirement.read_lists(&[here.as_bytes(), there.as_bytes()]);
                    let script = script_after(lists, &retirement)?;
                    let node = self.asked_node(&to.host, to.port)?;
                    asking(node)?;
                    let reply = node.exchange(&script)?;
                    if reply.redirect().is_none() {
                        return retired(&mut retirement, reply);
                    }
                    // The migration moved on meanwhile: start again from this node.
                }
            }
        }
        Err(SessionError::Redirected { times: MAX_REDIRECTS + 1 })
    }

    /// `ASKING`, then the command, on the node an `ASK` named.
    fn ask(&mut self, host: &str, port: u16, request: &Request) -> Result<Reply, SessionError> {
        let node = self.asked_node(host, port)?;
        asking(node)?;
        node.exchange(request)
    }

    /// The connection to the node an `ASK` named, kept for the next `ASK`.
    fn asked_node(&mut self, host: &str, port: u16) -> Result<&mut Node, SessionError> {
        let addr = redirect_addr(&self.config, host, port, self.node.peer)?;
        let node = match self.asked.take() {
            Some(node) if node.peer == addr => node,
            _ => self.redirected(host, port)?,
        };
        Ok(self.asked.insert(node))
    }

    /// A connection like this one to the node a redirect names (`host` empty: this one's).
    fn redirected(&mut self, host: &str, port: u16) -> Result<Node, SessionError> {
        let addr = redirect_addr(&self.config, host, port, self.node.peer)?;
        // A node named by IP address has its certificate checked for that address.
        let tls_host = if host.is_empty() { self.node.tls_host().to_string() } else { host.to_string() };
        admit(&mut self.locator, &HostPort::new(addr.ip().to_string(), port));
        Node::open(&self.config, addr, &tls_host)
            .map_err(|e| SessionError::Redirect(Box::new(e.into_inner())))
    }
}

/// `ASKING` on `node`: the next command is for the slot being migrated there.
fn asking(node: &mut Node) -> Result<(), SessionError> {
    match node.exchange(&Request::asking())?.error() {
        Some(text) => Err(SessionError::Asking(text.into_owned())),
        None => Ok(()),
    }
}

/// The script's command, once the core read the lists of connections.
fn script_after(
    step: Result<Step, pelican::Error>,
    retirement: &Retirement,
) -> Result<Request, SessionError> {
    match step.map_err(SessionError::Retire)? {
        Step::Send(_) => Ok(Request::new(&retirement.args().collect::<Vec<_>>())),
        Step::Done(_) => {
            Err(SessionError::Retire(pelican::Error::Protocol { detail: "no script was sent".into() }))
        }
    }
}

/// The retirement's outcome, from the script's `reply`.
fn retired(retirement: &mut Retirement, reply: Reply) -> Result<Vec<ConsumerState>, SessionError> {
    let reply = reply.refused()?;
    match retirement.read(reply.as_bytes()).map_err(SessionError::Retire)? {
        Some(Step::Done(consumers)) => Ok(consumers),
        _ => Err(SessionError::Retire(pelican::Error::Protocol { detail: "the reply was cut short".into() })),
    }
}

/// Connects where the locator says: with Sentinel, the master the sentinels name (asked
/// again for a while if it answers as a replica: a failover under way). Refuses a sentinel
/// and a replica. Returns the node, and with Sentinel the master it is.
fn open(config: &SessionConfig, locator: &mut Locator) -> Result<(Node, Option<HostPort>), SessionError> {
    let give_up = Instant::now() + FIND_MASTER;
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1), crate::seed::seed());
    let sentinels = matches!(config.endpoint, Endpoint::Sentinel(_));
    loop {
        let target = match locator.dial() {
            Some(Dial::Node(node)) => node.clone(),
            Some(Dial::Sentinel(_)) => find_master(config, locator)?,
            None => return Err(SessionError::NoSentinel),
        };
        let mut node = connect_node(config, locator, &target, &config.tls_host(&target))?;
        match node.role()? {
            NodeRole::Replica if sentinels && Instant::now() < give_up => {
                thread::sleep(backoff.next_delay());
                locator.on_link_down(false);
            }
            NodeRole::Sentinel => {
                // Refused before anything is sent to it as to a data node.
                return Err(SessionError::IsSentinel { node: target, services: node.services() });
            }
            NodeRole::Replica => {
                let master = node.master_of();
                return Err(SessionError::Replica { node: target, master, named_by_sentinels: sentinels });
            }
            _ => {
                locator.on_connected();
                return Ok((node, sentinels.then_some(target)));
            }
        }
    }
}

/// Connects to the first address `node` resolves to now that answers, checking the
/// certificate against `host` over TLS. A TLS or login failure is final: other addresses
/// are not tried.
fn connect_node(
    config: &SessionConfig,
    locator: &mut Locator,
    node: &HostPort,
    host: &str,
) -> Result<Node, SessionError> {
    admit(locator, node);
    let resolve = |error| SessionError::Resolve { host: node.host.clone(), error, redirect: false };
    let addrs = config.resolver.lookup(&node.host, node.port).map_err(|e| resolve(Some(e)))?;
    let mut last = resolve(None);
    for addr in addrs {
        match Node::open(config, addr, host) {
            Ok(node) => return Ok(node),
            Err(Open::Refused(e)) => last = e,
            Err(Open::Failed(e)) => return Err(e),
        }
    }
    Err(last)
}

/// The master the sentinels name: each asked in turn, as the locator says, each answer
/// given to it.
fn find_master(config: &SessionConfig, locator: &mut Locator) -> Result<HostPort, SessionError> {
    loop {
        let (sentinel, session) = match (locator.dial(), locator.session()) {
            (Some(Dial::Node(master)), _) => return Ok(master.clone()),
            (Some(Dial::Sentinel(sentinel)), Some(session)) => (sentinel.clone(), session),
            _ => return Err(SessionError::NoSentinel),
        };
        admit(locator, &sentinel);
        match ask_sentinel(config, &sentinel, session) {
            Ok(answer) => {
                if let Found::Failed(Some(all)) = locator.on_answer(answer) {
                    return Err(SessionError::Sentinels(all));
                }
            }
            Err(ScoutError::Failed(why)) => {
                if let Some(all) = locator.on_sentinel_failed(why) {
                    return Err(SessionError::Sentinels(all));
                }
            }
            Err(ScoutError::Tls(e)) => return Err(SessionError::Tls(e)),
        }
    }
}

/// One sentinel's answer to `session`'s question, over a connection of its own: the
/// driver's [`Scout`], on a `Poll` of this call's own, within [`FIRST_REPLY`].
fn ask_sentinel(
    config: &SessionConfig,
    sentinel: &HostPort,
    session: SentinelSession,
) -> Result<SentinelAnswer, ScoutError> {
    let failed = |e: io::Error| ScoutError::Failed(e.to_string());
    let mut poll = Poll::new().map_err(failed)?;
    let tls = config.tls.as_ref().map(|(tls, _)| tls);
    let within = (Instant::now(), FIRST_REPLY);
    let mut scout =
        Scout::start(sentinel, session, tls, &config.resolver, poll.registry(), Token(0), within)?;
    let mut events = Events::with_capacity(4);
    let answer = loop {
        match scout.drive(Instant::now()) {
            Ok(answers) => {
                if let Some(answer) = answers.into_iter().next() {
                    break Ok(answer);
                }
            }
            Err(e) => break Err(e),
        }
        let wait = scout.deadline().map(|at| at.saturating_duration_since(Instant::now()));
        match poll.poll(&mut events, wait) {
            Err(e) if e.kind() != io::ErrorKind::Interrupted => break Err(failed(e)),
            _ => {}
        }
    };
    scout.close(poll.registry());
    answer
}

/// Waits until the locator admits a dial to `to` (its ceiling: a few at once, then a pace).
fn admit(locator: &mut Locator, to: &HostPort) {
    while let Err(at) = locator.admit(to, Instant::now()) {
        thread::sleep(at.saturating_duration_since(Instant::now()));
    }
}

/// A redirect's node: `host` (an IP address, or a name the cluster announces; empty: the
/// host of `current`) and `port`.
fn redirect_addr(
    config: &SessionConfig,
    host: &str,
    port: u16,
    current: SocketAddr,
) -> Result<SocketAddr, SessionError> {
    let resolve = |error| SessionError::Resolve { host: host.to_string(), error, redirect: true };
    match config.resolver.cluster_node(host, port, current) {
        Ok(Some(addr)) => Ok(addr),
        // The cluster does not know the node's address (cluster-preferred-endpoint-type).
        Ok(None) if host == "?" => Err(SessionError::UnknownNode { port }),
        Ok(None) => Err(resolve(None)),
        Err(e) => Err(resolve(Some(e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirect_addresses() {
        let config = SessionConfig::new(("127.0.0.1", 7000));
        let here: SocketAddr = "127.0.0.1:7000".parse().unwrap();
        assert_eq!(redirect_addr(&config, "", 7001, here).unwrap(), "127.0.0.1:7001".parse().unwrap());
        assert_eq!(redirect_addr(&config, "::1", 7001, here).unwrap(), "[::1]:7001".parse().unwrap());
        let unknown = redirect_addr(&config, "?", 7001, here).unwrap_err();
        assert_eq!(unknown.to_string(), "the cluster redirected to a node of unknown address (port 7001)");
        let nowhere = config.clone().resolve_with(|_, _| Ok(Vec::new()));
        let e = redirect_addr(&nowhere, "node9", 7001, here).unwrap_err();
        assert_eq!(e.to_string(), "node9 (a redirect) resolves to no address");
    }

    #[test]
    fn the_config_keeps_its_password_out_of_debug() {
        let config = SessionConfig::new(("h", 1)).auth(Some("u"), "secret").name("n");
        let shown = format!("{config:?}");
        assert!(shown.contains("\"u\"") && !shown.contains("secret"), "{shown}");
    }
}
