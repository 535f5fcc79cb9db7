//! The look for *twins*: other live connections under this consumer's name (two processes
//! under one name share one pending list and handle each other's entries twice). What was
//! seen and decided lives here; the consumer sends the look (`CLIENT ID`, `CLIENT LIST`) and
//! acts on the outcome.

use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::error::Error;
use crate::notice::Notice;
use crate::reply::Client;

#[derive(Debug, Default)]
pub(crate) struct Twins {
    /// The first look answered: no twin at the start. Until then every connection looks
    /// before it reads.
    vetted: bool,
    /// A twin was seen by the first look: looked again once (a predecessor whose connection
    /// had just closed can still be listed), then refused.
    seen_once: bool,
    /// This connection's id (`CLIENT ID`), so that it is not its own twin.
    own_id: Option<u64>,
    /// When the next look is due, once vetted.
    next_at: Option<Instant>,
    /// A look is in flight.
    asking: bool,
    /// Twins told (by connection id), each once.
    told: Vec<u64>,
    /// The server refused the look: told once, then not asked again.
    refused: bool,
    /// When the first look, having seen a twin, looks again (reads wait till then).
    again_at: Option<Instant>,
}

/// How long the first look waits before it looks again at a twin it saw: time for the server
/// to see a predecessor's connection close (a process just killed, a TLS connection closing).
const LOOK_AGAIN_AFTER: Duration = Duration::from_millis(250);

/// What a look's answer leads to.
pub(crate) enum Outcome {
    /// Nothing to do (vetted, or twins already told).
    Done,
    /// The first look saw a twin: look once more, at [`Twins::again_at`].
    LookAgain,
    /// Twins seen later, each told once.
    Tell(Vec<Notice>),
}

impl Twins {
    /// Whether a first look is owed before anything is read.
    pub(crate) fn vetted(&self) -> bool {
        self.vetted
    }

    /// Whether the server refused the look (then it is not asked again).
    pub(crate) fn refused(&self) -> bool {
        self.refused
    }

    /// When the first look looks again, if it is waiting to (nothing is read meanwhile).
    pub(crate) fn again_at(&self) -> Option<Instant> {
        self.again_at.filter(|_| !self.asking)
    }

    /// Whether the look every `min_idle` is due.
    pub(crate) fn due(&self, now: Instant) -> bool {
        self.vetted && self.next_at.is_some_and(|at| now >= at)
    }

    /// A look goes out now, unless one is in flight; the next one is due `every` later.
    /// Returns whether it goes out, and whether it is a first one (reads wait for it).
    pub(crate) fn start(&mut self, now: Instant, every: Duration) -> Option<bool> {
        if self.asking {
            return None;
        }
        self.asking = true;
        self.again_at = None;
        self.own_id = None;
        self.next_at = Some(now + every);
        Some(!self.vetted)
    }

    /// The connection was lost: the look in flight with it, and the connection's id.
    pub(crate) fn lost(&mut self) {
        self.asking = false;
        self.own_id = None;
    }

    /// This connection's id, once a look has asked it (a stop ends the read it cuts by it).
    pub(crate) fn id(&self) -> Option<u64> {
        self.own_id
    }

    /// `CLIENT ID`'s answer.
    pub(crate) fn own_id(&mut self, id: i64) {
        self.own_id = u64::try_from(id).ok();
    }

    /// `CLIENT LIST`'s answer: the live connections under `name` but this one. A connection
    /// counts as live if it spoke within `live` (a consumer running speaks at least every
    /// beat), so one the server has not yet seen die (a host that vanished) does not keep a
    /// replacement from starting for long. `Err` at the first look: refused to start.
    pub(crate) fn on_list(
        &mut self,
        clients: Vec<Client>,
        name: &Bytes,
        live: Duration,
        first: bool,
        now: Instant,
        every: Duration,
    ) -> Result<Outcome, Error> {
        self.asking = false;
        let live_secs = live.as_secs().max(1);
        let own = self.own_id;
        let mut twins =
            clients.into_iter().filter(|c| c.name == name && Some(c.id) != own && c.idle_secs <= live_secs);
        if first {
            return match twins.next() {
                None => {
                    self.vetted = true;
                    self.next_at = Some(now + every);
                    Ok(Outcome::Done)
                }
                Some(_) if !self.seen_once => {
                    self.seen_once = true;
                    self.again_at = Some(now + LOOK_AGAIN_AFTER);
                    Ok(Outcome::LookAgain)
                }
                Some(twin) => Err(Error::Twin {
                    name: String::from_utf8_lossy(name).into_owned(),
                    addr: twin.addr,
                    idle: Duration::from_secs(twin.idle_secs),
                }),
            };
        }
        let mut told = Vec::new();
        for twin in twins {
            if !self.told.contains(&twin.id) {
                self.told.push(twin.id);
                told.push(Notice::Twin { addr: twin.addr, idle: Duration::from_secs(twin.idle_secs) });
            }
        }
        Ok(Outcome::Tell(told))
    }

    /// The server refused `CLIENT ID` or `CLIENT LIST` (an ACL without them): twins go
    /// unseen, said once. Both commands of the pair answer so; `list` is the second.
    pub(crate) fn on_refused(&mut self, list: bool, reason: String) -> Option<Notice> {
        self.vetted = true;
        if list {
            self.asking = false;
        }
        if self.refused {
            return None;
        }
        self.refused = true;
        Some(Notice::Refused { feature: Notice::TWINS, reason })
    }
}
