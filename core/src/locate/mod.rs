//! Where the consumer's server is, sans-IO: a node named by host and port, looked up again at
//! every connect (a managed service's primary endpoint moves its name to the promoted node),
//! or the master of a service that Redis Sentinel watches, found by asking the sentinels
//! and followed through failovers.
//!
//! A transport holds a [`Locator`] beside its [`Consumer`](crate::Consumer). Whenever the
//! consumer wants a connection ([`Consumer::connect_due`](crate::Consumer::connect_due)), it
//! asks [`Locator::dial`] where to:
//!
//! - [`Dial::Node`]: resolve the host (again, every time) and connect the consumer there;
//! - [`Dial::Sentinel`]: first ask that sentinel, over a connection of its own, with a
//!   [`SentinelSession`]: write what it gives, feed it what comes back, and pass each
//!   [`SentinelAnswer`] to [`Locator::on_answer`]. Once a master is named, `dial` names it.
//!   A sentinel that cannot be reached or answers nothing useful is passed to
//!   [`Locator::on_sentinel_failed`], which moves on to the next; once every sentinel failed
//!   in a round it says why, for the consumer's
//!   [`on_disconnected_because`](crate::Consumer::on_disconnected_because) (which backs off).
//!
//! Keep the sentinel's connection open after its answer: the session stays subscribed to
//! `+switch-master` and tells [`SentinelAnswer::Switched`] when a failover ends. If
//! [`Locator::on_answer`] then says [`Found::Moved`], close the consumer's connection and
//! reconnect at once ([`Consumer::connect_now`](crate::Consumer::connect_now)).
//!
//! Tell the locator every time the consumer's connection is lost or a connect to a node
//! fails ([`Locator::on_link_down`]): with Sentinel, the master is then asked for again (a
//! lost connection, `READONLY`, `-UNBLOCKED` and a node that turns out to be a replica all
//! may mean a failover), on a new session (a subscribed one cannot ask). A node that is a
//! replica is never read from: the consumer checks each node's role itself
//! ([`Error::NotMaster`](crate::Error::NotMaster)).
//!
//! # When to dial
//!
//! A transport dials only when told: the consumer's connection when
//! [`Consumer::connect_due`](crate::Consumer::connect_due) says so (its backoff paces failed
//! connects, logins, node checks and whole rounds of sentinels alike), a lost watch when
//! [`Locator::rewatch_at`] has come (the watch's own backoff). And every TCP connect it opens
//! — to a node, a sentinel, a node a cluster redirect names — asks [`Locator::admit`] first:
//! a hard ceiling of [`DIAL_BURST`] dials to one address at once, then one every
//! [`DIAL_SPACING`], which no misconfiguration (a backoff of a millisecond, a failure path that
//! forgets the backoff) gets past. A dial refused there waits until the instant it gives.

mod pace;
mod role;
mod sentinel;

use std::fmt;
use std::time::{Duration, Instant};

use crate::backoff::Backoff;
use pace::Pace;

pub use pace::{DIAL_BURST, DIAL_SPACING};
pub use role::{
    read_node_role, read_replica_of, read_sentinel_services, NodeRole, MASTER_REQUEST, ROLE_REQUEST,
};
pub use sentinel::{SentinelAnswer, SentinelError, SentinelSession};

// Addresses are vocabulary, below every layer that names one; their public path is here too.
pub use crate::endpoint::{Endpoint, EndpointError, HostPort, IntoEndpoint, Sentinels};

/// Where to connect next (see [`Locator::dial`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dial<'a> {
    /// Connect the consumer to this node (look its host up now).
    Node(&'a HostPort),
    /// Ask this sentinel where the master is first, with [`Locator::session`].
    Sentinel(&'a HostPort),
}

/// What a sentinel's answer changed (see [`Locator::on_answer`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Found {
    /// The master is known: [`Locator::dial`] names it.
    Master,
    /// A failover moved the master away from where the consumer is connected: close the
    /// consumer's connection and connect it at once where `dial` says.
    Moved {
        /// The master before.
        from: HostPort,
    },
    /// Nothing changed (the master named again, or another service's switch).
    Same,
    /// This sentinel knows no such service, or answered as no sentinel does: it counts as
    /// failed ([`Locator::on_sentinel_failed`] has been applied; `Some` once every sentinel
    /// failed this round, with why).
    Failed(Option<String>),
}

/// Where the consumer's server is, and when to ask again (see the module docs).
#[derive(Debug)]
pub struct Locator {
    endpoint: Endpoint,
    /// Other nodes to try in turn after a connect fails (a cluster's nodes).
    fallbacks: Vec<HostPort>,
    /// The node tried next: 0 is the endpoint's, then the fallbacks.
    next_node: usize,
    /// With Sentinel: the master last named; `None` until asked (again).
    master: Option<HostPort>,
    /// With Sentinel: the sentinel asked next.
    turn: usize,
    /// With Sentinel: sentinels failed in a row this round, and why.
    failures: Vec<String>,
    /// With Sentinel: when the watch (a subscribed session) may be opened again after it
    /// was lost, and the backoff between such tries.
    rewatch_at: Option<Instant>,
    rewatch: Backoff,
    /// The ceiling on dials, per address.
    pace: Pace,
}

/// How long a lost watch waits before the first try to open it again, and at most.
const REWATCH_MIN: Duration = Duration::from_millis(500);
const REWATCH_MAX: Duration = Duration::from_secs(10);

impl Locator {
    /// A locator for `endpoint`.
    pub fn new(endpoint: Endpoint) -> Locator {
        Locator {
            endpoint,
            fallbacks: Vec::new(),
            next_node: 0,
            master: None,
            turn: 0,
            failures: Vec::new(),
            rewatch_at: None,
            rewatch: Backoff::new(REWATCH_MIN, REWATCH_MAX, 0x5e47),
            pace: Pace::default(),
        }
    }

    /// Whether a TCP connect to `to` may be opened at `now`: `Ok` (it is counted), or
    /// `Err(at)`: not before `at` — wait until then (a timer), and ask again. Every connect a
    /// transport opens asks first, to a node, a sentinel, or a node a redirect names (see
    /// [When to dial](self#when-to-dial)).
    pub fn admit(&mut self, to: &HostPort, now: Instant) -> Result<(), Instant> {
        self.pace.admit(to, now)
    }

    /// Seeds the jitter of its waits (a lost watch opened again) from the driver's
    /// randomness, as [`Consumer::reseed`](crate::Consumer::reseed) does the consumer's: the
    /// transports give each a seed of their process.
    pub fn reseed(&mut self, seed: u64) {
        self.rewatch = Backoff::new(REWATCH_MIN, REWATCH_MAX, seed);
    }

    /// The endpoint it locates.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Adds nodes to try in turn after a connect to the endpoint's node fails: a cluster's
    /// other nodes, so that a lane whose node died finds its slot's new master through any
    /// of them (`MOVED`). Without Sentinel only.
    pub fn add_fallbacks(&mut self, nodes: impl IntoIterator<Item = HostPort>) {
        for node in nodes {
            if !self.fallbacks.contains(&node) && Endpoint::Node(node.clone()) != self.endpoint {
                self.fallbacks.push(node);
            }
        }
    }

    /// Where to connect next: a node, or (with Sentinel, while the master is not known) a
    /// sentinel to ask first. `None` only for [`Sentinels`] without a single sentinel.
    pub fn dial(&self) -> Option<Dial<'_>> {
        match &self.endpoint {
            Endpoint::Node(node) => Some(Dial::Node(match self.next_node {
                0 => node,
                i => self.fallbacks.get((i - 1) % self.fallbacks.len().max(1)).unwrap_or(node),
            })),
            Endpoint::Sentinel(_) => match &self.master {
                Some(master) => Some(Dial::Node(master)),
                None => self.sentinel().map(Dial::Sentinel),
            },
        }
    }

    /// With Sentinel: the sentinel asked next (the one that answered last, unless it failed
    /// since); what a watch opened again asks.
    pub fn sentinel(&self) -> Option<&HostPort> {
        match &self.endpoint {
            Endpoint::Sentinel(sentinels) => sentinels.nodes.get(self.turn % sentinels.nodes.len().max(1)),
            Endpoint::Node(_) => None,
        }
    }

    /// The master the sentinels named last, if any is known now.
    pub fn master(&self) -> Option<&HostPort> {
        self.master.as_ref()
    }

    /// A session to ask the sentinel [`dial`](Self::dial) names (and to watch it after),
    /// for the connection opened to it. `None` without Sentinel.
    pub fn session(&self) -> Option<SentinelSession> {
        match &self.endpoint {
            Endpoint::Sentinel(sentinels) => Some(SentinelSession::new(sentinels)),
            Endpoint::Node(_) => None,
        }
    }

    /// The consumer is connected (the node answered as a master): the node tried first next
    /// time is this one.
    pub fn on_connected(&mut self) {
        self.failures.clear();
    }

    /// The consumer's connection is down: lost after it was up (`was_up`), or a connect
    /// failed (refused, timed out, the node not a master). Without Sentinel a failed connect
    /// moves on to the next node (a cluster's); with Sentinel the master is asked for again.
    pub fn on_link_down(&mut self, was_up: bool) {
        match &self.endpoint {
            Endpoint::Node(_) if !was_up && !self.fallbacks.is_empty() => {
                self.next_node = (self.next_node + 1) % (self.fallbacks.len() + 1);
            }
            Endpoint::Node(_) => {}
            Endpoint::Sentinel(_) => self.master = None,
        }
    }

    /// What the sentinel asked said (see [`Found`]).
    pub fn on_answer(&mut self, answer: SentinelAnswer) -> Found {
        let Endpoint::Sentinel(sentinels) = &self.endpoint else { return Found::Same };
        match answer {
            SentinelAnswer::Master(at) => {
                self.failures.clear();
                self.rewatch.reset();
                match self.master.replace(at) {
                    None => Found::Master,
                    Some(before) if Some(&before) == self.master.as_ref() => Found::Same,
                    Some(from) => Found::Moved { from },
                }
            }
            SentinelAnswer::Switched(to) => match self.master.replace(to) {
                Some(from) if Some(&from) != self.master.as_ref() => Found::Moved { from },
                None => Found::Master,
                Some(_) => Found::Same,
            },
            SentinelAnswer::Unknown { watched } => {
                let watches = match watched.as_deref() {
                    None => String::new(),
                    Some([]) => " (it watches none)".to_string(),
                    Some(names) => {
                        let names: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
                        format!(" (it watches {})", names.join(", "))
                    }
                };
                let why = format!("it watches no service named {:?}{watches}", sentinels.service);
                Found::Failed(self.on_sentinel_failed(why))
            }
        }
    }

    /// The sentinel [`dial`](Self::dial) named could not be asked (refused, timed out, an
    /// error reply, the connection lost before its answer): the next one is asked. Once
    /// every sentinel failed in a row, returns why (each one's reason), to pass to the
    /// consumer as a failed connect; the round starts over after the consumer's backoff.
    pub fn on_sentinel_failed(&mut self, reason: impl fmt::Display) -> Option<String> {
        let Endpoint::Sentinel(sentinels) = &self.endpoint else { return None };
        let n = sentinels.nodes.len().max(1);
        match sentinels.nodes.get(self.turn % n) {
            Some(asked) => self.failures.push(format!("{asked}: {reason}")),
            None => self.failures.push(reason.to_string()),
        }
        self.turn = (self.turn + 1) % n;
        if self.failures.len() < n {
            return None;
        }
        let why = format!(
            "no sentinel named the master of {:?}: {}",
            sentinels.service,
            std::mem::take(&mut self.failures).join("; ")
        );
        Some(why)
    }

    /// The watch (the subscribed session kept open after an answer) was lost while the
    /// master is known: open another at [`rewatch_at`](Self::rewatch_at), asking the next
    /// sentinel (its answer may move the consumer).
    pub fn on_watch_lost(&mut self, now: Instant) {
        if let Endpoint::Sentinel(sentinels) = &self.endpoint {
            self.turn = (self.turn + 1) % sentinels.nodes.len().max(1);
            self.rewatch_at = Some(now + self.rewatch.next_delay());
        }
    }

    /// When a lost watch may be opened again (`None`: now, or no watch was lost): after the
    /// watch's backoff, and once the sentinel it asks may be dialled ([`admit`](Self::admit)).
    pub fn rewatch_at(&self) -> Option<Instant> {
        let ceiling = self.sentinel().and_then(|s| self.pace.earliest(s));
        self.rewatch_at.map(|at| ceiling.map_or(at, |c| c.max(at)))
    }

    /// A watch is being opened again: clears [`rewatch_at`](Self::rewatch_at).
    pub fn on_rewatch(&mut self) {
        self.rewatch_at = None;
    }

    /// True with Sentinel: the transport keeps a session open as the watch.
    pub fn watches(&self) -> bool {
        matches!(self.endpoint, Endpoint::Sentinel(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hp(text: &str) -> HostPort {
        HostPort::parse(text).unwrap()
    }

    #[test]
    fn a_failed_connect_tries_the_next_node() {
        let mut locator = Locator::new(hp("a:1").into());
        assert_eq!(locator.dial().unwrap(), Dial::Node(&hp("a:1")));
        locator.on_link_down(false);
        assert_eq!(locator.dial().unwrap(), Dial::Node(&hp("a:1")), "no fallback: the same node");
        locator.add_fallbacks([hp("b:2"), hp("a:1"), hp("c:3")]);
        locator.on_link_down(false);
        assert_eq!(locator.dial().unwrap(), Dial::Node(&hp("b:2")));
        locator.on_link_down(true);
        assert_eq!(locator.dial().unwrap(), Dial::Node(&hp("b:2")), "lost after it was up: the same node");
        locator.on_link_down(false);
        assert_eq!(locator.dial().unwrap(), Dial::Node(&hp("c:3")));
        locator.on_link_down(false);
        assert_eq!(locator.dial().unwrap(), Dial::Node(&hp("a:1")), "round and round");
    }

    fn sentinels() -> Locator {
        Locator::new(Sentinels::new("mymaster", [hp("s1:26379"), hp("s2:26379"), hp("s3:26379")]).into())
    }

    #[test]
    fn sentinels_asked_in_turn_until_one_names_the_master() {
        let mut locator = sentinels();
        assert_eq!(locator.dial().unwrap(), Dial::Sentinel(&hp("s1:26379")));
        assert_eq!(locator.on_sentinel_failed("connection refused"), None);
        assert_eq!(locator.dial().unwrap(), Dial::Sentinel(&hp("s2:26379")));
        let watched = Some(vec!["other".to_string()]);
        assert_eq!(locator.on_answer(SentinelAnswer::Unknown { watched }), Found::Failed(None));
        assert_eq!(locator.dial().unwrap(), Dial::Sentinel(&hp("s3:26379")));
        let why = locator.on_sentinel_failed("timed out").unwrap();
        assert_eq!(
            why,
            "no sentinel named the master of \"mymaster\": s1:26379: connection refused; \
             s2:26379: it watches no service named \"mymaster\" (it watches \"other\"); s3:26379: timed out"
        );
        // The next round starts where this one ended, and the one that answers is kept.
        assert_eq!(locator.dial().unwrap(), Dial::Sentinel(&hp("s1:26379")));
        assert_eq!(locator.on_sentinel_failed("refused"), None);
        assert_eq!(locator.on_answer(SentinelAnswer::Master(hp("10.0.0.1:6379"))), Found::Master);
        assert_eq!(locator.dial().unwrap(), Dial::Node(&hp("10.0.0.1:6379")));
        locator.on_link_down(true);
        assert_eq!(
            locator.dial().unwrap(),
            Dial::Sentinel(&hp("s2:26379")),
            "asked again, the last to answer first"
        );
        // A failed round's count starts over after an answer.
        assert_eq!(locator.on_answer(SentinelAnswer::Master(hp("10.0.0.1:6379"))), Found::Master);
        assert_eq!(locator.on_answer(SentinelAnswer::Master(hp("10.0.0.1:6379"))), Found::Same);
    }

    #[test]
    fn a_switch_moves_the_master() {
        let mut locator = sentinels();
        assert_eq!(locator.on_answer(SentinelAnswer::Master(hp("10.0.0.1:6379"))), Found::Master);
        assert_eq!(
            locator.on_answer(SentinelAnswer::Switched(hp("10.0.0.2:6379"))),
            Found::Moved { from: hp("10.0.0.1:6379") }
        );
        assert_eq!(locator.dial().unwrap(), Dial::Node(&hp("10.0.0.2:6379")));
        assert_eq!(locator.on_answer(SentinelAnswer::Switched(hp("10.0.0.2:6379"))), Found::Same);
        // Heard while the master was being asked for again: it is the answer.
        locator.on_link_down(false);
        assert_eq!(locator.on_answer(SentinelAnswer::Switched(hp("10.0.0.3:6379"))), Found::Master);
        assert_eq!(locator.dial().unwrap(), Dial::Node(&hp("10.0.0.3:6379")));
    }
}
