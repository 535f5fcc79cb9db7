//! [`Sim`]: the keyspace, the connections and the virtual clock, tied together.

use std::collections::{BTreeMap, VecDeque};

use crate::command::{execute, nogroup_read, serve_read, Ctx, Outcome, Replica, Signal};
use crate::conn::{Blocked, Conn, ConnId};
use crate::id::EntryId;
use crate::model::{Db, Fields, Origin, PendingEntry};
use crate::options::{GroupGoneWhileParked, KeyDeletedWhileParked, SimOptions};
use crate::reply::Reply;

/// An entry of a stream as [`Sim::entries`] tells it: its id and its field/value pairs.
pub type StreamEntry = (EntryId, Vec<(Vec<u8>, Vec<u8>)>);

/// An in-memory server holding streams with consumer groups, driven entirely by its caller:
/// bytes in through [`input`](Sim::input), bytes out through [`output`](Sim::output), time
/// through [`advance_to`](Sim::advance_to). Nothing in it blocks, sleeps or reads a clock.
///
/// Methods by group:
/// - connections: [`connect`](Sim::connect), [`disconnect`](Sim::disconnect),
///   [`input`](Sim::input), [`output`](Sim::output), [`is_blocked`](Sim::is_blocked),
///   [`is_closed`](Sim::is_closed);
/// - time: [`now`](Sim::now), [`advance_to`](Sim::advance_to),
///   [`next_wakeup`](Sim::next_wakeup);
/// - inspection for test checks (no RESP): [`pending`](Sim::pending), [`origin`](Sim::origin),
///   [`stream_ids`](Sim::stream_ids), [`entries`](Sim::entries),
///   [`group_exists`](Sim::group_exists), [`consumers`](Sim::consumers);
/// - the server itself: [`restart`](Sim::restart).
#[derive(Debug)]
pub struct Sim {
    options: SimOptions,
    now: u64,
    db: Db,
    conns: BTreeMap<ConnId, Conn>,
    next_conn: u64,
    next_order: u64,
    /// Connections just unparked, whose pipelined input must now run.
    ready: VecDeque<ConnId>,
    /// The replica ([`SimOptions::replica_lag_ms`]).
    replica: Option<Replica>,
}

impl Sim {
    /// An empty server at virtual time 0.
    pub fn new(options: SimOptions) -> Sim {
        Sim {
            replica: options.replica_lag_ms.map(|_| Replica { db: Db::default(), synced_at: 0 }),
            options,
            now: 0,
            db: Db::default(),
            conns: BTreeMap::new(),
            next_conn: 0,
            next_order: 0,
            ready: VecDeque::new(),
        }
    }

    /// The options it was built with.
    pub fn options(&self) -> &SimOptions {
        &self.options
    }

    /// The virtual clock, in milliseconds. `XADD … *` ids, delivery times and idle times use it.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Moves the clock to `ms` (never backwards: an earlier `ms` is ignored). Parked reads
    /// whose `BLOCK` deadline is reached time out in deadline order, each at its own
    /// deadline: they answer nil and the commands pipelined behind them run then.
    ///
    /// A parked `XREADGROUP … CLAIM` read also looks again, at its own time, for pending
    /// entries become idle enough (Redis 8): served then if it finds some.
    pub fn advance_to(&mut self, ms: u64) {
        loop {
            // (time, is a timeout, parking order): a claim look at the same ms goes first.
            let due = self
                .conns
                .iter()
                .filter_map(|(&c, conn)| {
                    let b = conn.blocked.as_ref()?;
                    let timeout = b.deadline.map(|d| (d, true));
                    let look = b.claim_wake.map(|w| (w, false));
                    let (at, is_timeout) = [timeout, look].into_iter().flatten().min()?;
                    (at <= ms).then_some((at, is_timeout, b.order, c))
                })
                .min();
            let Some((at, is_timeout, _, c)) = due else { break };
            self.now = self.now.max(at);
            if is_timeout {
                if let Some(conn) = self.conns.get_mut(&c) {
                    conn.blocked = None;
                    conn.reply(&Reply::NilArray);
                }
                self.ready.push_back(c);
            } else {
                self.look_again(c);
            }
            self.run_ready();
        }
        self.now = self.now.max(ms);
        self.sync_replica_if_due();
    }

    /// The replica copies the data when its lag has passed since it last did: what was
    /// written in the meantime is on the master alone until then.
    fn sync_replica_if_due(&mut self) {
        let Some(lag) = self.options.replica_lag_ms else { return };
        if let Some(replica) = self.replica.as_mut().filter(|r| self.now >= r.synced_at.saturating_add(lag)) {
            replica.db = self.db.clone();
            replica.synced_at = self.now;
        }
    }

    /// A failover: the replica ([`SimOptions::replica_lag_ms`]) is promoted, with the data as
    /// it last copied it — what was written since is lost (replication is asynchronous),
    /// acks and dead-letter moves included — and every connection is dropped, as the old
    /// master's clients are when it is demoted (parked reads with them; [`is_closed`](Sim::is_closed)
    /// says so). A new replica starts from the new master's data. The clock goes on. Returns
    /// false, doing nothing, without a replica.
    pub fn failover(&mut self) -> bool {
        let Some(replica) = self.replica.as_mut() else { return false };
        self.db = std::mem::take(&mut replica.db);
        replica.db = self.db.clone();
        replica.synced_at = self.now;
        self.conns.clear();
        self.ready.clear();
        true
    }

    /// When the replica last copied the data (virtual ms); `None` without a replica.
    pub fn replica_synced_at(&self) -> Option<u64> {
        self.replica.as_ref().map(|r| r.synced_at)
    }

    /// The earliest time a parked read times out or looks again for idle entries, if
    /// any: call [`advance_to`](Sim::advance_to) with it.
    pub fn next_wakeup(&self) -> Option<u64> {
        self.conns
            .values()
            .filter_map(|c| {
                let b = c.blocked.as_ref()?;
                [b.deadline, b.claim_wake].into_iter().flatten().min()
            })
            .min()
    }

    /// Opens a client connection. It speaks RESP2 until `HELLO 3`; with
    /// [`SimOptions::requirepass`] it must authenticate first.
    pub fn connect(&mut self) -> ConnId {
        self.next_conn += 1;
        let id = ConnId(self.next_conn);
        self.conns.insert(id, Conn::new(self.options.requirepass.is_none()));
        id
    }

    /// Drops a connection: a parked read is forgotten (nothing is delivered to it), unread
    /// output is discarded. Unknown ids are ignored.
    pub fn disconnect(&mut self, c: ConnId) {
        self.conns.remove(&c);
    }

    /// Appends bytes received from the client `c` and runs every complete command in order.
    /// A parked `XREADGROUP` holds back the commands behind it until it answers (as the real
    /// servers do). Malformed input answers `-ERR Protocol error: …` and closes the
    /// connection ([`is_closed`](Sim::is_closed)); later input is ignored. Unknown ids are
    /// ignored.
    pub fn input(&mut self, c: ConnId, bytes: &[u8]) {
        let Some(conn) = self.conns.get_mut(&c) else { return };
        conn.push_input(bytes);
        self.pump(c);
        self.run_ready();
    }

    /// Takes the reply bytes produced for `c` so far (empty for an unknown id).
    #[must_use]
    pub fn output(&mut self, c: ConnId) -> Vec<u8> {
        self.conns.get_mut(&c).map(|conn| std::mem::take(&mut conn.output)).unwrap_or_default()
    }

    /// Whether `c` is parked on an `XREADGROUP … BLOCK`.
    pub fn is_blocked(&self, c: ConnId) -> bool {
        self.conns.get(&c).is_some_and(|conn| conn.blocked.is_some())
    }

    /// Whether the server has closed `c` (after a protocol error or `QUIT`): once its
    /// [`output`](Sim::output) is taken, the connection should be dropped. Unknown ids count
    /// as closed.
    pub fn is_closed(&self, c: ConnId) -> bool {
        self.conns.get(&c).map_or(true, |conn| conn.closed)
    }

    /// The pending entries of `group` on `key` in id order, or `None` when the key or group
    /// does not exist.
    pub fn pending(&self, key: &[u8], group: &[u8]) -> Option<Vec<PendingEntry>> {
        self.db.streams.get(key)?.pending(group)
    }

    /// How pending entry `id` of `group` on `key` reached the consumer that owns it: who read
    /// it as new (`XREADGROUP … >`), when, and whether a claim has moved it to another
    /// consumer since. `None` when it is not pending (or the key or group does not exist).
    /// For checks of what a consumer does with what it read (the servers keep no such
    /// record).
    pub fn origin(&self, key: &[u8], group: &[u8], id: EntryId) -> Option<Origin> {
        self.db.streams.get(key)?.origin(group, id)
    }

    /// The ids of the entries of stream `key` (empty when missing).
    pub fn stream_ids(&self, key: &[u8]) -> Vec<EntryId> {
        self.db.streams.get(key).map(|s| s.entries.keys().copied().collect()).unwrap_or_default()
    }

    /// The entries of stream `key` in id order, each with its field/value pairs (empty when
    /// missing).
    pub fn entries(&self, key: &[u8]) -> Vec<StreamEntry> {
        let Some(stream) = self.db.streams.get(key) else { return Vec::new() };
        let pairs = |f: &Fields| f.iter().map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
        stream.entries.iter().map(|(id, f)| (*id, pairs(f))).collect()
    }

    /// Restarts the server from an append-only file written on every command (`appendonly
    /// yes`, `appendfsync always`): every connection is dropped (parked reads with it, and
    /// [`is_closed`](Sim::is_closed) says so), the data comes back, but what the servers
    /// never write to the file is forgotten — a read of a consumer's own pending list
    /// (`XREADGROUP … <id>`) raises its entries' delivery counts and resets their idle
    /// times without recording it, so those go back to their last delivery of a new entry
    /// or claim (`XCLAIM`, `XAUTOCLAIM`). Writes lost to a less frequent `fsync` are not
    /// modelled. The clock goes on.
    pub fn restart(&mut self) {
        self.conns.clear();
        self.ready.clear();
        self.db.restart();
    }

    /// Whether `group` exists on stream `key`.
    pub fn group_exists(&self, key: &[u8], group: &[u8]) -> bool {
        self.db.streams.get(key).is_some_and(|s| s.groups.contains_key(group))
    }

    /// The consumers of `group` on `key` in name order (empty when missing).
    pub fn consumers(&self, key: &[u8], group: &[u8]) -> Vec<Vec<u8>> {
        self.db
            .streams
            .get(key)
            .and_then(|s| s.groups.get(group))
            .map(|g| g.consumers.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Runs `c`'s buffered commands until it parks, closes or runs out of input.
    fn pump(&mut self, c: ConnId) {
        loop {
            let Some(conn) = self.conns.get_mut(&c) else { return };
            if conn.blocked.is_some() {
                return;
            }
            let Some(args) = conn.next_command() else { return };
            conn.last_active = self.now;
            let clients = if is_client_list(&args) { self.clients() } else { Vec::new() };
            let Some(conn) = self.conns.get_mut(&c) else { return };
            let mut signals = Vec::new();
            let mut ctx = Ctx {
                db: &mut self.db,
                options: &self.options,
                now: self.now,
                conn,
                conn_id: c,
                signals: &mut signals,
                clients,
                replica: self.replica.as_mut(),
            };
            match execute(&mut ctx, &args) {
                Outcome::Reply(r) => conn.reply(&r),
                Outcome::Close(r) => {
                    conn.reply(&r);
                    conn.closed = true;
                }
                Outcome::Block(mut b) => {
                    self.next_order += 1;
                    b.order = self.next_order;
                    conn.blocked = Some(b);
                }
            }
            for signal in signals {
                self.signal(&signal);
            }
        }
    }

    /// Every open connection: id, name, idle ms (for `CLIENT LIST`).
    fn clients(&self) -> Vec<(u64, Option<Vec<u8>>, u64)> {
        self.conns
            .iter()
            .filter(|(_, conn)| !conn.closed)
            .map(|(id, conn)| (id.client_id(), conn.name.clone(), self.now.saturating_sub(conn.last_active)))
            .collect()
    }

    /// Lets parked readers react to a change, first parked first.
    fn signal(&mut self, signal: &Signal) {
        let key = match signal {
            Signal::Added(k) | Signal::Released(k) | Signal::Deleted(k) | Signal::GroupDestroyed(k, _) => k,
        };
        let mut waiting: Vec<(u64, ConnId)> = self
            .conns
            .iter()
            .filter_map(|(&c, conn)| conn.blocked.as_ref().filter(|b| &b.key == key).map(|b| (b.order, c)))
            .collect();
        waiting.sort();
        for (_, c) in waiting {
            let Some(b) = self.conns.get(&c).and_then(|conn| conn.blocked.clone()) else { continue };
            let answer = match signal {
                Signal::Added(_) | Signal::Released(_) => {
                    self.look_again(c);
                    continue;
                }
                Signal::Deleted(_) => match self.options.key_deleted_while_parked {
                    KeyDeletedWhileParked::StayBlocked => None,
                    KeyDeletedWhileParked::Unblocked => {
                        Some(Reply::err("UNBLOCKED the stream key no longer exists"))
                    }
                    KeyDeletedWhileParked::NoGroup => Some(Reply::err(nogroup_read(&b.key, &b.group))),
                },
                Signal::GroupDestroyed(_, g) if *g == b.group => Some(self.group_gone(&b)),
                Signal::GroupDestroyed(..) => None,
            };
            if let Some(answer) = answer {
                if let Some(conn) = self.conns.get_mut(&c) {
                    conn.blocked = None;
                    conn.reply(&answer);
                }
                self.ready.push_back(c);
            }
        }
    }

    /// The error a parked reader gets when its group is gone.
    fn group_gone(&self, b: &Blocked) -> Reply {
        match self.options.group_gone_while_parked {
            GroupGoneWhileParked::BlockedOnGroup => {
                Reply::err("NOGROUP the consumer group this client was blocked on no longer exists")
            }
            GroupGoneWhileParked::NoSuchKey => Reply::err(nogroup_read(&b.key, &b.group)),
        }
    }

    /// A parked read runs again (entries were added or released, or its claim look is
    /// due): it answers if it now has something, else stays parked and, with `CLAIM`,
    /// sets when to look next.
    fn look_again(&mut self, c: ConnId) {
        let Some(conn) = self.conns.get(&c) else { return };
        let (Some(b), proto) = (conn.blocked.clone(), conn.proto) else { return };
        let answer = match self.db.streams.get_mut(&b.key) {
            None => None,
            Some(stream) if !stream.groups.contains_key(&b.group) => Some(self.group_gone(&b)),
            Some(stream) => serve_read(stream, &b, proto, self.now),
        };
        let wake = match (&answer, b.claim, self.db.streams.get(&b.key)) {
            // Never again at this ms (the clock at its end has no later one).
            (None, Some(min), Some(stream)) => {
                Some(stream.claim_wake(&b.group, min, self.now)).filter(|&w| w > self.now)
            }
            _ => None,
        };
        let Some(conn) = self.conns.get_mut(&c) else { return };
        match answer {
            Some(answer) => {
                conn.blocked = None;
                conn.reply(&answer);
                self.ready.push_back(c);
            }
            None => {
                if let Some(parked) = conn.blocked.as_mut() {
                    // A key gone (6.2 stays parked) has nothing to look at until recreated.
                    parked.claim_wake = wake;
                }
            }
        }
    }

    /// Runs the pipelined input of connections that just unparked.
    fn run_ready(&mut self) {
        while let Some(c) = self.ready.pop_front() {
            self.pump(c);
        }
    }
}

/// `CLIENT LIST …`, which needs every connection.
fn is_client_list(args: &[Vec<u8>]) -> bool {
    args.len() >= 2 && args[0].eq_ignore_ascii_case(b"CLIENT") && args[1].eq_ignore_ascii_case(b"LIST")
}
