//! [`Sim`]: the keyspace, the connections and the virtual clock, tied together.

use std::collections::{BTreeMap, VecDeque};

use crate::command::{execute, nogroup_read, serve_read, Ctx, NodeView, Outcome, Signal};
use crate::conn::{Blocked, Conn, ConnId};
use crate::id::EntryId;
use crate::model::{Commit, Db, Fields, Origin, PendingEntry, Value};
use crate::options::{GroupGoneWhileParked, KeyDeletedWhileParked, SimOptions};
use crate::replication::{command_len, is_write, Replica, NODES, SERVED_READ_LEN, UNBLOCKED_DEMOTED};
use crate::reply::Reply;
use crate::script::Scripts;

/// An entry of a stream as [`Sim::entries`] tells it: its id and its field/value pairs.
pub type StreamEntry = (EntryId, Vec<(Vec<u8>, Vec<u8>)>);

/// What a key holds ([`Sim::value`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stored {
    /// A stream: its entries in id order.
    Stream(Vec<StreamEntry>),
    /// A hash: its fields and values, in the order first set.
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
    /// A string.
    String(Vec<u8>),
}

/// What becomes of the old master's clients in a failover ([`Sim::failover_with`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OldMaster {
    /// Every connection to it closes: it died (`kill -9`, a lost host), or Sentinel demoted
    /// it, which kills its clients (`CLIENT KILL TYPE normal`) so that they look for the new
    /// master. Parked commands go with their connections, unanswered.
    Killed,
    /// It becomes a replica of the new master with its clients still connected, as after
    /// `REPLICAOF host port` or the `FAILOVER` command: a parked read or `WAIT` answers
    /// `-UNBLOCKED force unblock from blocking operation, instance state changed (master ->
    /// replica?)` and its connection closes (every server does both); the other connections
    /// stay open, now to a replica (`HELLO` says `role replica`, writes answer `-READONLY
    /// You can't write against a read only replica.`), as do the connections
    /// [`connect_replica`](Sim::connect_replica) opens to it afterwards.
    Demoted,
}

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
/// - the server itself: [`restart`](Sim::restart);
/// - its replica ([`SimOptions::replica_lag_ms`]): [`connect_replica`](Sim::connect_replica),
///   [`set_replica_link`](Sim::set_replica_link), [`failover`](Sim::failover),
///   [`failover_with`](Sim::failover_with), [`repl_offset`](Sim::repl_offset),
///   [`replica_offset`](Sim::replica_offset), [`replica_synced_at`](Sim::replica_synced_at).
///
/// ## The replica
///
/// With [`SimOptions::replica_lag_ms`] the server is two nodes: a master and its replica,
/// which copies the master's data asynchronously. The master counts a replication offset,
/// moved by every write it takes (a command that changes data or may: `XADD`, `XACK`,
/// `XREADGROUP`'s deliveries, `XCLAIM`, `XAUTOCLAIM`, `XGROUP …`, `XDEL`, `XTRIM`, `DEL`,
/// `FLUSHALL`, `SET`, `INCRBY`, `HSET`, `EVAL`, `EVALSHA`, the Redis 8 verbs) by its length
/// as the master would send it. The replica copies everything the master holds whenever `replica_lag_ms` of virtual time has
/// passed since it last did ([`advance_to`](Sim::advance_to) checks), and at once when a
/// `WAIT` or `WAITAOF` asks (a healthy replica acknowledges within a round trip); what it
/// copies is what the master sends, so a read of a consumer's own pending list, which raises
/// delivery counts and times without being sent, is not in its copy (as after a
/// [`restart`](Sim::restart)). Cut off ([`set_replica_link`](Sim::set_replica_link)), it
/// copies nothing and `WAIT` waits for its link or its timeout. A
/// [`failover`](Sim::failover) promotes it: its copy becomes the data — what the master took
/// since the last copy is lost — and the old master becomes its replica. Without a replica
/// the offset stays 0, as on a server that never had one.
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
    /// The master's replication offset (0 without a replica).
    offset: u64,
    /// Which node is the master (0 until a failover; see [`NODES`]).
    master_node: u8,
    /// Each node's script cache (`SCRIPT LOAD`), by node.
    scripts: [Scripts; 2],
}

impl Sim {
    /// An empty server at virtual time 0.
    pub fn new(options: SimOptions) -> Sim {
        Sim {
            replica: options.replica_lag_ms.map(|_| Replica::of(&Db::default(), 0, 0)),
            offset: 0,
            master_node: 0,
            scripts: Default::default(),
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
    /// entries become idle enough (Redis 8): served then if it finds some. A parked `WAIT`
    /// answers at its deadline with how many replicas have its writes by then. The replica
    /// copies the data if its lag has passed since it last did.
    pub fn advance_to(&mut self, ms: u64) {
        loop {
            // (time, is a timeout, parking order): a claim look at the same ms goes first.
            let due = self
                .conns
                .iter()
                .filter_map(|(&c, conn)| {
                    let (at, is_timeout, order) = match (&conn.blocked, &conn.waiting) {
                        (Some(b), _) => {
                            let timeout = b.deadline.map(|d| (d, true));
                            let look = b.claim_wake.map(|w| (w, false));
                            let (at, is_timeout) = [timeout, look].into_iter().flatten().min()?;
                            (at, is_timeout, b.order)
                        }
                        (None, Some(w)) => (w.deadline?, true, w.order),
                        (None, None) => return None,
                    };
                    (at <= ms).then_some((at, is_timeout, order, c))
                })
                .min();
            let Some((at, is_timeout, _, c)) = due else { break };
            self.now = self.now.max(at);
            if is_timeout {
                let have = self.replica_has(c);
                if let Some(conn) = self.conns.get_mut(&c) {
                    let answer = match conn.waiting.take() {
                        Some(w) => w.answer(have),
                        None => Reply::NilArray,
                    };
                    conn.blocked = None;
                    conn.reply(&answer);
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

    /// The replica copies the data when its lag has passed since it last did (and its link
    /// is up): what was written in the meantime is on the master alone until then.
    fn sync_replica_if_due(&mut self) {
        let Some(lag) = self.options.replica_lag_ms else { return };
        let (now, offset) = (self.now, self.offset);
        let due = |r: &&mut Replica| r.link_up && now >= r.synced_at.saturating_add(lag);
        if let Some(replica) = self.replica.as_mut().filter(due) {
            replica.copy(&self.db, offset, now);
            self.answer_waits();
        }
    }

    /// How many replicas (0 or 1) have every write of connection `c`.
    fn replica_has(&self, c: ConnId) -> u64 {
        let wrote = self.conns.get(&c).map_or(0, |conn| conn.last_write);
        u64::from(self.replica.as_ref().is_some_and(|r| r.offset >= wrote))
    }

    /// Parked `WAIT`s whose count the replica now reaches answer, first parked first.
    fn answer_waits(&mut self) {
        let mut waiting: Vec<(u64, ConnId)> =
            self.conns.iter().filter_map(|(&c, conn)| Some((conn.waiting.as_ref()?.order, c))).collect();
        waiting.sort();
        for (_, c) in waiting {
            let have = self.replica_has(c);
            let Some(conn) = self.conns.get_mut(&c) else { continue };
            let Some(w) =
                conn.waiting.as_ref().filter(|w| have >= w.replicas && w.local.map_or(true, |l| l <= 1))
            else {
                continue;
            };
            let answer = w.answer(have);
            conn.waiting = None;
            conn.reply(&answer);
            self.ready.push_back(c);
        }
        self.run_ready();
    }

    /// A failover in which the old master's clients are cut off
    /// ([`failover_with`](Sim::failover_with)`(`[`OldMaster::Killed`]`)`), as when it dies
    /// or Sentinel demotes it. Returns false, doing nothing, without a replica.
    pub fn failover(&mut self) -> bool {
        self.failover_with(OldMaster::Killed)
    }

    /// A failover: the replica ([`SimOptions::replica_lag_ms`]) is promoted with the data as
    /// it last copied it — what the master took since is lost (replication is asynchronous):
    /// entries added, acks, deliveries, claims, dead-letter moves; delivery counts and times
    /// raised by reads of a consumer's own pending list, which the master never sends, are
    /// as it last sent them. The promoted node keeps its connections
    /// ([`connect_replica`](Sim::connect_replica)'s) and [`connect`](Sim::connect) reaches it
    /// from now on (a client that asks Sentinel where the master is); the old master becomes
    /// its replica, with a copy of the new data (its last writes dropped), a link that is up,
    /// and its clients treated as `old` says. The clock goes on. Returns false, doing
    /// nothing, without a replica.
    pub fn failover_with(&mut self, old: OldMaster) -> bool {
        let Some(replica) = self.replica.as_mut() else { return false };
        let old_node = self.master_node;
        self.master_node = 1 - old_node;
        self.db = std::mem::take(&mut replica.db);
        self.offset = replica.offset;
        replica.copy(&self.db, self.offset, self.now);
        replica.link_up = true;
        match old {
            OldMaster::Killed => {
                self.conns.retain(|_, conn| conn.node != old_node);
                // It died: the process that comes back has loaded no script.
                self.scripts[usize::from(old_node)].clear();
            }
            OldMaster::Demoted => {
                for conn in self.conns.values_mut().filter(|conn| conn.node == old_node && conn.parked()) {
                    conn.blocked = None;
                    conn.waiting = None;
                    conn.reply(&Reply::err(UNBLOCKED_DEMOTED));
                    conn.closed = true;
                }
            }
        }
        // The promoted node's clients never wrote to it.
        for conn in self.conns.values_mut().filter(|conn| conn.node != old_node) {
            conn.last_write = 0;
        }
        let conns = &self.conns;
        self.ready.retain(|c| conns.contains_key(c));
        true
    }

    /// Cuts the replica off from the master (`up` false) or lets it reach it again (`up`
    /// true: it catches up at once, and parked `WAIT`s it now satisfies answer). Cut off, it
    /// copies nothing, and a `WAIT` for writes it lacks waits for its link or its timeout; a
    /// failover meanwhile loses everything the master took since the cut. Returns false,
    /// doing nothing, without a replica.
    pub fn set_replica_link(&mut self, up: bool) -> bool {
        let (now, offset) = (self.now, self.offset);
        let Some(replica) = self.replica.as_mut() else { return false };
        let was_up = std::mem::replace(&mut replica.link_up, up);
        if up && !was_up {
            replica.copy(&self.db, offset, now);
            self.answer_waits();
        }
        true
    }

    /// Whether the replica can reach the master; `None` without a replica.
    pub fn replica_link_up(&self) -> Option<bool> {
        self.replica.as_ref().map(|r| r.link_up)
    }

    /// When the replica last copied the data (virtual ms); `None` without a replica.
    pub fn replica_synced_at(&self) -> Option<u64> {
        self.replica.as_ref().map(|r| r.synced_at)
    }

    /// The master's replication offset: how far the writes it took have moved it (0
    /// without a replica). A write is on the replica when [`replica_offset`](Sim::replica_offset)
    /// has reached the offset this returned right after it.
    pub fn repl_offset(&self) -> u64 {
        self.offset
    }

    /// The master's offset the replica has every write up to; `None` without a replica.
    pub fn replica_offset(&self) -> Option<u64> {
        self.replica.as_ref().map(|r| r.offset)
    }

    /// The earliest time a parked read or `WAIT` times out, or a parked read looks again for
    /// idle entries, if any: call [`advance_to`](Sim::advance_to) with it.
    pub fn next_wakeup(&self) -> Option<u64> {
        self.conns
            .values()
            .filter_map(|c| match (&c.blocked, &c.waiting) {
                (Some(b), _) => [b.deadline, b.claim_wake].into_iter().flatten().min(),
                (None, Some(w)) => w.deadline,
                (None, None) => None,
            })
            .min()
    }

    /// Opens a client connection to the master. It speaks RESP2 until `HELLO 3`; with
    /// [`SimOptions::requirepass`] it must authenticate first.
    pub fn connect(&mut self) -> ConnId {
        self.open(self.master_node)
    }

    /// Opens a client connection to the replica (after a failover, the old master), which
    /// answers as one: `HELLO` says `role replica`, `ROLE` names the master, writes answer
    /// `-READONLY You can't write against a read only replica.`, `WAIT` and `WAITAOF` an
    /// error, and reads (`XRANGE`, `XLEN`, `XPENDING`, `XINFO`) see its copy of the data.
    /// `None` without a replica.
    pub fn connect_replica(&mut self) -> Option<ConnId> {
        self.replica.as_ref()?;
        Some(self.open(1 - self.master_node))
    }

    fn open(&mut self, node: u8) -> ConnId {
        self.next_conn += 1;
        let id = ConnId(self.next_conn);
        self.conns.insert(id, Conn::new(self.options.requirepass.is_none(), node));
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

    /// Whether `c` is parked on an `XREADGROUP … BLOCK`, or a `WAIT` or `WAITAOF`.
    pub fn is_blocked(&self, c: ConnId) -> bool {
        self.conns.get(&c).is_some_and(Conn::parked)
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
    /// modelled. The clock goes on. A replica keeps its copy and its connections.
    pub fn restart(&mut self) {
        let master = self.master_node;
        self.conns.retain(|_, conn| conn.node != master);
        let conns = &self.conns;
        self.ready.retain(|c| conns.contains_key(c));
        self.db.restart();
        self.scripts[usize::from(master)].clear();
    }

    /// Every entry pelican's commit script ([`pelican::COMMIT_SCRIPT`]) committed — its
    /// writes made and its ack in one step — in the order committed, as the master's data
    /// holds them: a failover loses those its replica had not copied, with their writes (the
    /// servers keep no such record).
    pub fn commits(&self) -> &[Commit] {
        &self.db.commits
    }

    /// What key `key` holds on the master, if anything: a stream's entries, a hash's fields
    /// (in the order first set), a string (one that has expired by now is nothing).
    pub fn value(&self, key: &[u8]) -> Option<Stored> {
        if self.db.streams.contains_key(key) {
            return Some(Stored::Stream(self.entries(key)));
        }
        Some(match self.db.value(key, self.now)? {
            Value::Str { data, .. } => Stored::String(data.clone()),
            Value::Hash(fields) => Stored::Hash(fields.clone()),
        })
    }

    /// The shas of the scripts the master's cache holds (`SCRIPT LOAD`, or run by `EVAL`).
    pub fn scripts(&self) -> Vec<String> {
        self.scripts[usize::from(self.master_node)].keys().cloned().collect()
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
            if conn.parked() {
                return;
            }
            let Some(args) = conn.next_command() else { return };
            conn.last_active = self.now;
            let node = conn.node;
            let clients = if is_client_list(&args) { self.clients(node) } else { Vec::new() };
            let Some(conn) = self.conns.get_mut(&c) else { return };
            let on_replica = node != self.master_node;
            let peer = NODES[usize::from(1 - node)];
            let (db, replica, view) = match self.replica.as_mut() {
                Some(r) if on_replica => {
                    let view = NodeView { on_replica, offset: r.offset, peer, link_up: r.link_up };
                    (&mut r.db, None, view)
                }
                r => {
                    let link_up = r.as_ref().map_or(true, |r| r.link_up);
                    (&mut self.db, r, NodeView { on_replica: false, offset: self.offset, peer, link_up })
                }
            };
            let writes =
                replica.is_some() && is_write(&String::from_utf8_lossy(&args[0]).to_ascii_lowercase());
            let mut signals = Vec::new();
            let mut ctx = Ctx {
                db,
                scripts: &mut self.scripts[usize::from(node)],
                options: &self.options,
                now: self.now,
                conn,
                conn_id: c,
                signals: &mut signals,
                clients,
                replica,
                node: view,
            };
            let outcome = execute(&mut ctx, &args);
            if writes && matches!(&outcome, Outcome::Reply(r) if !matches!(r, Reply::Error(_))) {
                // The master sends it to its replica.
                self.offset += command_len(&args);
                conn.last_write = self.offset;
            }
            match outcome {
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
                Outcome::Wait(mut w) => {
                    self.next_order += 1;
                    w.order = self.next_order;
                    conn.waiting = Some(w);
                }
            }
            for signal in signals {
                self.signal(&signal);
            }
        }
    }

    /// Every open connection to `node`: id, name, idle ms (for `CLIENT LIST`).
    fn clients(&self, node: u8) -> Vec<(u64, Option<Vec<u8>>, u64)> {
        self.conns
            .iter()
            .filter(|(_, conn)| !conn.closed && conn.node == node)
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
                if self.replica.is_some() && !matches!(answer, Reply::Error(_)) {
                    // A parked read served now delivers: the master sends it to its replica
                    // (as the `XREADGROUP` it was, for the offset).
                    self.offset += SERVED_READ_LEN;
                    conn.last_write = self.offset;
                }
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
