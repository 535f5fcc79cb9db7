//! Playing a [`World`]: the drivers of the consumers (the real core), the producer, the
//! faults and the clock, and what is recorded on the way into the [`Report`].

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use pelican::{Config, Consumer, Entry, Event, GroupGone, Notice, OnRetry, Protocol, Verdict, Write, Writes};

use super::fault::{Fault, FaultKind};
use super::report::{self, EntryReport, FaultRecord, Handling, Record, Report, Violation};
use super::rng::{self, Rng};
use super::world::{NewEntry, World};
use crate::{ConnId, OldMaster, Sim};

/// What a handler is told besides its entry, and its way to the simulated server
/// ([`write`](HandlerCtx::write)).
#[derive(Debug)]
pub struct HandlerCtx<'a> {
    consumer: &'a str,
    index: usize,
    life: u32,
    now_ms: u64,
    in_hand: usize,
    took: Cell<Option<u64>>,
    app: RefCell<App<'a>>,
}

/// The application's own connection to the simulated server, which [`HandlerCtx::write`]
/// writes on, and what the server made of it.
#[derive(Debug)]
struct App<'a> {
    sim: &'a mut Sim,
    /// Made at the first write (a world whose handlers write nothing plays as it did).
    conn: &'a mut Option<ConnId>,
    /// The server is down (a restart): nothing reaches it.
    down: bool,
    /// Each write the server made, with the replication offset right after it.
    made: Vec<(Write, u64)>,
}

impl HandlerCtx<'_> {
    /// The name of the consumer handling the entry (`c0`, `c1`, …).
    pub fn consumer(&self) -> &str {
        self.consumer
    }

    /// Its index (0 for `c0`).
    pub fn index(&self) -> usize {
        self.index
    }

    /// Which life of the consumer's process this is: 0 at first, one more after each
    /// restart (a crash, a stop). What a process keeps in memory — a cache, a batch not yet
    /// written — is lost with its life: key it by `(index, life)`.
    pub fn life(&self) -> u32 {
        self.life
    }

    /// The virtual time, in ms, when the entry was handed out.
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// How many entries the consumer has in hand, this one included (at most its
    /// [`concurrency`](super::World::concurrency)).
    pub fn in_hand(&self) -> usize {
        self.in_hand
    }

    /// Says how long this handling takes, in ms (else it is drawn from
    /// [`World::handler_ms`]; a [`Fault::SlowHandler`] overrides both).
    pub fn takes(&self, ms: u64) {
        self.took.set(Some(ms));
    }

    /// Makes `writes` on the simulated server now, outside any commit, one command each
    /// (see [`Write::args`]), on the application's own connection to the master: what a
    /// handler does that writes its output itself — into the same Redis, or a database the
    /// kit stands in for — and then answers `Ack`. The verdict reaches the consumer later
    /// (when the handling's time is up), so a crash, a pause past `min_idle` or a lost ack
    /// between the two has the entry handled, and its output written, again: the kit
    /// catches that ([`Violation::WrittenTwice`](super::Violation::WrittenTwice)), where a
    /// [`Verdict::Commit`] of the same writes makes them with the ack in one step.
    ///
    /// The writes the server made are told in the handling's story
    /// ([`Handling::wrote`](super::Handling::wrote)) and held, with the commits', to what
    /// their keys end up holding ([`Violation::CommitWrites`](super::Violation::CommitWrites)).
    /// Fails, with the server's error, at the first write refused (those before it stay
    /// made: they are separate commands) or malformed ([`Writes::check`]); while the server
    /// restarts, at once, writing nothing. A failover loses those its replica had not copied,
    /// as it loses any write.
    pub fn write(&self, writes: &Writes) -> Result<(), String> {
        writes.check(None)?;
        let mut app = self.app.borrow_mut();
        if app.down {
            return Err("connection refused (the server is restarting)".into());
        }
        for write in writes {
            let args = write.args();
            let args: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
            let conn = app.conn();
            app.sim.input(conn, &encode(&args));
            let reply = app.sim.output(conn);
            if let Some(error) = reply.strip_prefix(b"-") {
                return Err(String::from_utf8_lossy(error).trim_end().to_string());
            }
            if reply.is_empty() {
                return Err(format!("{} got no answer", write.command()));
            }
            let offset = app.sim.repl_offset();
            app.made.push((write.clone(), offset));
        }
        Ok(())
    }
}

/// How many driving rounds a consumer may take at one instant before it counts as a livelock.
const MAX_ROUNDS: usize = 10_000;
/// How far behind its master a world's replica is when failovers (or replica link faults)
/// ask for one and the world does not say ([`World::replica_lag`]).
const DEFAULT_REPLICA_LAG_MS: u64 = 100;
/// How many violations found while running are kept (the rest would say the same).
const MAX_VIOLATIONS: usize = 100;

/// An entry a consumer's handler is working on (in hand).
#[derive(Clone, Debug)]
struct Work {
    /// Index of its record, and of the handling in it.
    record: usize,
    handling: usize,
    done_at: u64,
    verdict: Verdict,
    /// Its key, when the consumer orders by key.
    key: Option<Vec<u8>>,
}

/// One consumer process, over its lives.
struct Node {
    name: String,
    config: Config,
    consumer: Option<Consumer>,
    conn: Option<ConnId>,
    /// The entries in hand, in the order handed out.
    work: Vec<Work>,
    /// Per key, the latest entry (record index) this life read as new (since the last
    /// destroyed group) and first handed out: for the order check (with an order by key).
    order: BTreeMap<Vec<u8>, usize>,
    /// When this life began.
    born_at: u64,
    /// Entries (record indices) this life held unacked when the group was destroyed: it
    /// may hand out the copy it read before, or the one the new group delivers, whose
    /// reads are not one order.
    across_destroy: BTreeSet<usize>,
    restart_at: Option<u64>,
    /// How long after its `Stopped` the next life starts.
    restart_after: u64,
    dead: bool,
    stop_asked: bool,
    life: u32,
    /// Records whose entries this consumer's handler answered `Ack` for, settled (over all
    /// its lives): the only ids it may `XACK`, besides deleted ones.
    acked: BTreeSet<usize>,
    /// Records it settled with a `Commit` verdict (over all its lives): the only ids it may
    /// commit.
    committed: BTreeSet<usize>,
    /// Until when its process stands still ([`Fault::Pause`]).
    paused_until: Option<u64>,
    /// Its connection drops after its next commit reaches the server ([`Fault::CutAfterCommit`]).
    cut_after_commit: bool,
    fail_next: bool,
    dead_letter_next: bool,
    slow_next: Option<u64>,
}

impl App<'_> {
    /// The connection: a new one (to the master) if there is none or it closed.
    fn conn(&mut self) -> ConnId {
        match self.conn.filter(|&c| !self.sim.is_closed(c)) {
            Some(conn) => conn,
            None => {
                if let Some(old) = self.conn.take() {
                    self.sim.disconnect(old);
                }
                let conn = self.sim.connect();
                *self.conn = Some(conn);
                conn
            }
        }
    }
}

/// A write a handler made itself ([`HandlerCtx::write`]).
struct Direct {
    record: usize,
    handling: usize,
    write: Write,
    /// The master's replication offset right after it.
    offset: u64,
    /// A failover lost it (the replica had not copied it).
    lost: bool,
}

struct Runner<'w, S, H> {
    world: &'w World,
    state: S,
    handler: H,
    handlings_rng: Rng,
    faults_rng: Rng,
    sim: Sim,
    admin: ConnId,
    /// The producer's connection (apart from `admin`: its `WAIT` may park).
    producer: ConnId,
    /// The handlers' own connection ([`HandlerCtx::write`]), once one has written.
    app: Option<ConnId>,
    /// What the handlers wrote themselves, each write with its handling.
    direct: Vec<Direct>,
    /// Records added since the producer's last `WAIT` was sent, and whether one is out for
    /// them ([`World::confirm_adds`]).
    unconfirmed: Vec<usize>,
    confirm_out: bool,
    /// Until when the consumers' connections reach the old master, demoted
    /// ([`Fault::Failover`] with `stale_ms`).
    stale_until: Option<u64>,
    /// When the replica's link comes back ([`Fault::ReplicaLinkDown`]).
    link_up_at: Option<u64>,
    /// Acks the consumers counted unreplicated, over the lives that ended.
    acks_unreplicated: u64,
    base: Instant,
    nodes: Vec<Node>,
    stream: Vec<u8>,
    group: Vec<u8>,
    dead_letter: Option<Vec<u8>>,
    max_deliveries: Option<u64>,
    min_idle_ms: u64,
    /// What a `Retry` does (the first consumer's): how long it waits at the least.
    on_retry: OnRetry,
    records: Vec<Record>,
    by_id: BTreeMap<Vec<u8>, usize>,
    /// Entries still to add, and the list written out for the replay.
    due: VecDeque<NewEntry>,
    entries: Vec<NewEntry>,
    scheduled: VecDeque<(u64, Fault)>,
    next_random: Option<u64>,
    faults: Vec<FaultRecord>,
    down_until: Option<u64>,
    group_destroyed: bool,
    /// A failover happened: acks and dead-letter moves may have been lost with the writes the
    /// replica had not copied, so an entry may be moved again.
    failed_over: bool,
    /// When the group was last destroyed.
    last_destroy: Option<u64>,
    notices: BTreeMap<&'static str, u64>,
    violations: Vec<Violation>,
    livelocked: bool,
    trace: Option<Vec<String>>,
}

impl World {
    /// Plays the world with `handler` and the application's `state`, to quiescence or the
    /// deadline. The handler runs when its entry is handed out (its side effects on `state`
    /// happen then) and its verdict is given to the consumer when the handling's time is up:
    /// a crash meanwhile loses the verdict but not the side effects, as when a process dies
    /// between writing to its database and acknowledging. `state` is shared by all
    /// consumers and survives crashes (a database); keep what a process would lose in
    /// memory keyed by [`HandlerCtx::life`].
    pub fn run<S, H>(&self, state: S, handler: H) -> Report<S>
    where
        H: FnMut(&mut S, &HandlerCtx<'_>, &Entry) -> Verdict,
    {
        run(self, state, handler)
    }
}

pub(crate) fn run<S, H>(world: &World, state: S, handler: H) -> Report<S>
where
    H: FnMut(&mut S, &HandlerCtx<'_>, &Entry) -> Verdict,
{
    let mut setup = Rng::new(world.seed, rng::SETUP);
    // The flavor and consumer count were drawn by World::new: skip those draws.
    setup.next();
    setup.next();
    let mut nodes = Vec::with_capacity(world.consumers);
    let mut violations = Vec::new();
    for i in 0..world.consumers {
        let name = format!("c{i}");
        let protocol = if setup.chance(50) { Protocol::Resp3 } else { Protocol::Resp2 };
        let mut config = Config::new("s", "g", &name)
            .protocol(protocol)
            .count(1 + setup.below(10) as u32)
            .beat(Duration::from_millis(100))
            .min_idle(Duration::from_millis(1_000))
            .read_grace(Duration::from_secs(1))
            .create_group("0")
            .on_group_gone(GroupGone::Recreate)
            .backoff(Duration::from_millis(20), Duration::from_millis(500))
            .dead_letter_after(5, "dl")
            .read_bytes(4096)
            .seed(setup.next())
            .concurrency(world.concurrency);
        if let Some(wait) = world.ack_wait {
            config = config.ack_wait(wait);
        }
        if let Some(field) = &world.order_by {
            config = config.order_by(field);
        }
        if let Some(change) = &world.configure {
            config = change(config);
        }
        let consumer = match Consumer::new(config.clone()) {
            Ok(c) => Some(c),
            Err(e) => {
                violations.push(Violation::Kit { detail: format!("{name}'s configuration is refused: {e}") });
                None
            }
        };
        nodes.push(Node {
            name,
            config,
            consumer,
            conn: None,
            work: Vec::new(),
            order: BTreeMap::new(),
            born_at: 0,
            across_destroy: BTreeSet::new(),
            restart_at: None,
            restart_after: 0,
            dead: false,
            stop_asked: false,
            life: 0,
            acked: BTreeSet::new(),
            committed: BTreeSet::new(),
            paused_until: None,
            cut_after_commit: false,
            fail_next: false,
            dead_letter_next: false,
            slow_next: None,
        });
    }
    let first = &nodes[0].config;
    let entries = world.entries.clone().unwrap_or_else(|| drawn_entries(world));
    let replicated = |k: FaultKind| matches!(k, FaultKind::Failover | FaultKind::ReplicaLinkDown);
    let needs_replica = world.random_faults.iter().copied().any(replicated)
        || world.faults.iter().any(|(_, f)| replicated(f.kind()));
    let mut server = world.server.clone();
    if needs_replica && server.replica_lag_ms.is_none() {
        server.replica_lag_ms = Some(DEFAULT_REPLICA_LAG_MS);
    }
    let mut sim = Sim::new(server);
    let admin = sim.connect();
    let producer = sim.connect();
    let mut scheduled: Vec<(u64, Fault)> = world.faults.clone();
    scheduled.sort_by_key(|(at, _)| *at); // stable: same-time faults keep their order
    let mut faults_rng = Rng::new(world.seed, rng::FAULTS);
    let next_random = (!world.random_faults.is_empty()).then(|| 200 + faults_rng.below(400));
    let mut runner = Runner {
        world,
        state,
        handler,
        handlings_rng: Rng::new(world.seed, rng::HANDLINGS),
        faults_rng,
        sim,
        admin,
        producer,
        app: None,
        direct: Vec::new(),
        unconfirmed: Vec::new(),
        confirm_out: false,
        stale_until: None,
        link_up_at: None,
        acks_unreplicated: 0,
        base: Instant::now(),
        stream: first.stream.to_vec(),
        group: first.group.to_vec(),
        dead_letter: first.dead_letter.as_ref().map(|d| d.to_vec()),
        max_deliveries: first.max_deliveries,
        min_idle_ms: first.min_idle.as_millis() as u64,
        on_retry: first.on_retry,
        nodes,
        records: Vec::new(),
        by_id: BTreeMap::new(),
        due: entries.iter().cloned().collect(),
        entries,
        scheduled: scheduled.into(),
        next_random,
        faults: Vec::new(),
        down_until: None,
        group_destroyed: false,
        failed_over: false,
        last_destroy: None,
        notices: BTreeMap::new(),
        violations,
        livelocked: false,
        trace: world.trace.then(Vec::new),
    };
    let quiescent = if runner.violations.is_empty() { runner.play() } else { false };
    runner.finish(quiescent)
}

/// The most entries drawn (about 30 minutes' worth): a longer phase draws no more.
const MAX_DRAWN: usize = 100_000;

/// The entry stream drawn from the seed: batches of 1–8 entries every 50–450 ms, with a key
/// (`k0`, `k1`, …) when the world orders by key (drawn apart, so that the times and counts
/// do not change with it).
fn drawn_entries(world: &World) -> Vec<NewEntry> {
    let mut rng = Rng::new(world.seed, rng::ENTRIES);
    let mut keys = Rng::new(world.seed, rng::KEYS);
    let mut entries = Vec::new();
    let mut at = 0;
    while at < world.phase_ms && entries.len() < MAX_DRAWN {
        for _ in 0..1 + rng.below(8) {
            let n = (entries.len() + 1).to_string();
            let mut entry = NewEntry::new(at, [("n", n)]);
            if let Some(field) = &world.order_by {
                let key = format!("k{}", keys.below(u64::from(world.keys)));
                entry.fields.push((field.clone(), key.into_bytes()));
            }
            entries.push(entry);
        }
        at += 50 + rng.below(400);
    }
    entries
}

/// RESP for a command.
fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// The ids of every `XACK` (false) and every commit (`EVALSHA`, true) in bytes a consumer
/// wrote (whole commands: arrays of bulk strings); stops quietly at anything else.
fn acked_ids(mut b: &[u8]) -> Vec<(bool, &[u8])> {
    fn line<'a>(b: &mut &'a [u8]) -> Option<&'a [u8]> {
        let i = b.windows(2).position(|w| w == b"\r\n")?;
        let l = b.get(1..i)?;
        *b = &b[i + 2..];
        Some(l)
    }
    fn num(l: &[u8]) -> Option<usize> {
        std::str::from_utf8(l).ok()?.parse().ok()
    }
    let mut ids = Vec::new();
    while !b.is_empty() {
        let Some(n) = line(&mut b).and_then(num) else { break };
        let mut args = Vec::with_capacity(n.min(64));
        for _ in 0..n {
            let Some(len) = line(&mut b).and_then(num) else { return ids };
            let Some(arg) = b.get(..len) else { return ids };
            args.push(arg);
            b = b.get(len + 2..).unwrap_or_default();
        }
        if args.first().is_some_and(|a| a.eq_ignore_ascii_case(b"XACK")) {
            ids.extend(args.into_iter().skip(3).map(|id| (false, id)));
        } else if args.first().is_some_and(|a| a.eq_ignore_ascii_case(b"EVALSHA")) {
            ids.extend(commit_ids(&args).into_iter().map(|id| (true, id)));
        }
    }
    ids
}

/// The entries a commit's `EVALSHA` names (see [`pelican::COMMIT_SCRIPT`]: after the keys,
/// group, consumer, lowest and highest id, count; then per entry id, deliveries, writes, and
/// each write as op, key index, n, n arguments).
fn commit_ids<'a>(args: &[&'a [u8]]) -> Vec<&'a [u8]> {
    let num = |a: Option<&&[u8]>| a.and_then(|a| std::str::from_utf8(a).ok()?.parse::<usize>().ok());
    let Some(keys) = num(args.get(2)) else { return Vec::new() };
    let argv = args.get(3 + keys..).unwrap_or_default();
    let mut ids = Vec::new();
    let mut i = 5;
    while let (Some(id), Some(writes)) = (argv.get(i), num(argv.get(i + 2))) {
        ids.push(*id);
        i += 3;
        for _ in 0..writes {
            let Some(n) = num(argv.get(i + 2)) else { return ids };
            i += 3 + n;
        }
    }
    ids
}

/// The name a notice is counted under in [`Report::notices`].
fn notice_name(notice: &Notice) -> &'static str {
    match notice {
        Notice::Connected { reconnect: false, .. } => "connected",
        Notice::Connected { reconnect: true, .. } => "reconnected",
        Notice::ConnectFailed { .. } => "connect-failed",
        Notice::ConnectionLost { .. } => "connection-lost",
        Notice::NotMaster { .. } => "not-master",
        Notice::AcksUnreplicated { .. } => "acks-unreplicated",
        Notice::Reclaimed { .. } => "reclaimed",
        Notice::Health(_) => "health",
        Notice::LeaseLost { in_hand: false, .. } => "lease-lost",
        Notice::LeaseLost { in_hand: true, .. } => "lease-lost-in-hand",
        Notice::DeadLettered { .. } => "dead-lettered",
        Notice::ReadShrunk { cause: pelican::ShrinkCause::SlowHandler, .. } => "read-shrunk-slow-handler",
        Notice::ReadShrunk { .. } => "read-shrunk-big-entries",
        Notice::CommitFenced { .. } => "commit-fenced",
        Notice::CommitRefused { .. } => "commit-refused",
        _ => "other",
    }
}

impl<S, H> Runner<'_, S, H>
where
    H: FnMut(&mut S, &HandlerCtx<'_>, &Entry) -> Verdict,
{
    fn now(&self) -> u64 {
        self.sim.now()
    }

    fn instant(&self) -> Instant {
        self.base + Duration::from_millis(self.now())
    }

    fn note(&mut self, line: impl FnOnce() -> String) {
        if let Some(trace) = &mut self.trace {
            trace.push(format!("{} ms {}", self.sim.now(), line()));
        }
    }

    fn violation(&mut self, v: Violation) {
        if self.violations.len() < MAX_VIOLATIONS {
            self.violations.push(v);
        }
    }

    fn is_down(&self) -> bool {
        self.down_until.is_some_and(|t| self.now() < t)
    }

    fn admin(&mut self, args: &[&[u8]]) -> Vec<u8> {
        self.sim.input(self.admin, &encode(args));
        self.sim.output(self.admin)
    }

    /// Plays until quiescence (true) or the deadline or a livelock (false).
    fn play(&mut self) -> bool {
        let phase = self.world.phase_ms;
        loop {
            let now = self.now();
            if !self.is_down() {
                self.down_until = None;
                self.produce();
            }
            self.inject_due();
            self.restart_due();
            if self.link_up_at.is_some_and(|t| t <= now) {
                self.link_up_at = None;
                self.sim.set_replica_link(true);
                self.note(|| "the replica's link is back".into());
            }
            for i in 0..self.nodes.len() {
                self.drive(i);
                if self.livelocked {
                    return false;
                }
            }
            if now >= phase && self.quiescent() {
                return true;
            }
            if now >= self.world.deadline_ms {
                return false;
            }
            let next = self.next_time().min(self.world.deadline_ms);
            // Always move forward: everything due now was done above.
            self.sim.advance_to(if next <= now { now + 1 } else { next });
        }
    }

    /// The producer's connection: a new one (to the master) if it was closed.
    fn producer(&mut self) -> ConnId {
        if self.sim.is_closed(self.producer) {
            self.sim.disconnect(self.producer);
            self.producer = self.sim.connect();
        }
        self.producer
    }

    /// One command on the producer's connection; its reply (empty if it parked).
    fn producer_call(&mut self, args: &[&[u8]]) -> Vec<u8> {
        let producer = self.producer();
        self.sim.input(producer, &encode(args));
        self.sim.output(producer)
    }

    /// The answer to the producer's `WAIT`, if it came: the entries it counts as on the
    /// replica are confirmed. Returns whether the producer may add more.
    fn confirmation(&mut self, answer: &[u8]) -> bool {
        if answer.is_empty() && !self.sim.is_closed(self.producer) {
            return false; // still waiting
        }
        // An answer of 0 (or none: the connection went with a failover or a restart)
        // confirms nothing.
        if answer.starts_with(b":") && answer != b":0\r\n" {
            for &r in &self.unconfirmed {
                self.records[r].confirmed = true;
            }
        }
        let n = self.unconfirmed.len();
        self.note(|| format!("the producer's WAIT answered {} for {n} entries", report::text(answer, 40)));
        self.unconfirmed.clear();
        self.confirm_out = false;
        true
    }

    /// Adds the entries that are due (unless the producer waits for a `WAIT`'s answer), and
    /// confirms them with `WAIT 1` if the world says so.
    fn produce(&mut self) {
        if self.confirm_out {
            let answer = self.sim.output(self.producer);
            if !self.confirmation(&answer) {
                return;
            }
        }
        let now = self.now();
        while self.due.front().is_some_and(|e| e.at_ms <= now) {
            let Some(entry) = self.due.pop_front() else { break };
            let id = format!("{}-0", self.records.len() + 1);
            let mut fields = entry.fields.clone();
            if fields.is_empty() {
                fields.push((b"_".to_vec(), Vec::new()));
            }
            let stream = self.stream.clone();
            let mut args: Vec<&[u8]> = vec![b"XADD", &stream, id.as_bytes()];
            for (n, v) in &fields {
                args.push(n);
                args.push(v);
            }
            let reply = self.producer_call(&args);
            if !reply.starts_with(b"$") {
                let detail = format!("XADD {id} answered {:?}", String::from_utf8_lossy(&reply));
                self.violation(Violation::Kit { detail });
                continue;
            }
            self.by_id.insert(id.clone().into_bytes(), self.records.len());
            self.unconfirmed.push(self.records.len());
            self.records.push(Record {
                id,
                fields: entry.fields,
                added_at: now,
                handlings: Vec::new(),
                acked: false,
                deleted: false,
                dead_letter_moves: 0,
                offset: self.sim.repl_offset(),
                unreplicated: false,
                confirmed: false,
                commits: 0,
            });
        }
        match self.world.confirm_adds_ms {
            Some(timeout) if !self.unconfirmed.is_empty() => {
                let timeout = timeout.to_string();
                let answer = self.producer_call(&[b"WAIT", b"1", timeout.as_bytes()]);
                self.confirm_out = true;
                self.confirmation(&answer);
            }
            _ => self.unconfirmed.clear(),
        }
    }

    /// Applies the scheduled and random faults that are due.
    fn inject_due(&mut self) {
        let now = self.now();
        while self.scheduled.front().is_some_and(|(at, _)| *at <= now) {
            let Some((_, fault)) = self.scheduled.pop_front() else { break };
            self.inject(fault);
        }
        if self.next_random.is_some_and(|at| at <= now && now < self.world.phase_ms) {
            let kinds = &self.world.random_faults;
            let kind = kinds[self.faults_rng.below(kinds.len() as u64) as usize];
            let fault = Fault::draw(kind, self.nodes.len(), self.min_idle_ms, &mut self.faults_rng);
            self.inject(fault);
            let (lo, hi) = self.world.fault_gap_ms;
            self.next_random = Some(now.saturating_add(self.faults_rng.between(lo, hi)));
        }
    }

    fn alive(&self) -> usize {
        self.nodes.iter().filter(|n| !n.dead).count()
    }

    /// Whether node `i`'s process stands still now ([`Fault::Pause`]).
    fn paused(&self, i: usize) -> bool {
        self.nodes[i].paused_until.is_some_and(|t| self.now() < t)
    }

    /// Applies one fault (or skips it, when it cannot apply now), and records it.
    fn inject(&mut self, fault: Fault) {
        let at = self.instant();
        let now = self.now();
        let target = fault.consumer().map(|c| c % self.nodes.len());
        // A paused process can only be killed.
        let alive = target.is_some_and(|i| self.nodes[i].consumer.is_some() && !self.nodes[i].dead);
        let up = alive && target.is_some_and(|i| !self.paused(i));
        let i = target.unwrap_or(0);
        let down = self.is_down();
        let applied = match fault {
            Fault::Crash { restart_ms, .. } if alive => {
                self.kill(i);
                self.nodes[i].restart_at = Some(now.saturating_add(restart_ms));
                true
            }
            Fault::Death { .. } if alive && self.alive() > 1 => {
                self.kill(i);
                self.nodes[i].dead = true;
                true
            }
            Fault::Disconnect { .. } if up => {
                let node = &mut self.nodes[i];
                match (node.conn.take(), node.consumer.as_mut()) {
                    (Some(conn), Some(c)) => {
                        self.sim.disconnect(conn);
                        c.on_disconnected(at);
                        true
                    }
                    _ => false,
                }
            }
            Fault::SlowHandler { ms, .. } if up => {
                self.nodes[i].slow_next = Some(ms);
                true
            }
            Fault::FailingHandler { .. } if up => {
                self.nodes[i].fail_next = true;
                true
            }
            Fault::DeadLetterVerdict { .. } if up => {
                self.nodes[i].dead_letter_next = true;
                true
            }
            Fault::DeletePending { pick } if !down => {
                let pending = self.sim.pending(&self.stream, &self.group).unwrap_or_default();
                if pending.is_empty() {
                    false
                } else {
                    let victim = pending[pick as usize % pending.len()].id.to_string();
                    let stream = self.stream.clone();
                    self.admin(&[b"XDEL", &stream, victim.as_bytes()]);
                    self.mark_deleted(victim.as_bytes());
                    true
                }
            }
            Fault::Trim { count } if !down => {
                let pending = self.sim.pending(&self.stream, &self.group).unwrap_or_default();
                let ids = self.sim.stream_ids(&self.stream);
                if pending.is_empty() || ids.is_empty() {
                    false
                } else {
                    let gone = (count.max(1) as usize).min(ids.len());
                    let keep = (ids.len() - gone).to_string();
                    let stream = self.stream.clone();
                    self.admin(&[b"XTRIM", &stream, b"MAXLEN", keep.as_bytes()]);
                    for id in &ids[..gone] {
                        self.mark_deleted(id.to_string().as_bytes());
                    }
                    true
                }
            }
            Fault::DestroyGroup if !down => {
                self.delivered_anew(now);
                let (stream, group) = (self.stream.clone(), self.group.clone());
                self.admin(&[b"XGROUP", b"DESTROY", &stream, &group]);
                self.group_destroyed = true;
                true
            }
            Fault::Stop { restart_ms, .. } if up && !self.nodes[i].stop_asked => {
                let node = &mut self.nodes[i];
                node.stop_asked = true;
                node.restart_after = restart_ms;
                node.consumer.as_mut().map(Consumer::stop).is_some()
            }
            Fault::Abandon { restart_ms, .. } if up => {
                let node = &mut self.nodes[i];
                node.stop_asked = true;
                node.restart_after = restart_ms;
                // The handlings under way are dropped: their verdicts never come.
                node.work.clear();
                node.consumer.as_mut().map(Consumer::abandon).is_some()
            }
            Fault::ServerRestart { down_ms } if !down => {
                self.sim.restart();
                self.admin = self.sim.connect();
                self.down_until = Some(now.saturating_add(down_ms));
                true
            }
            Fault::Failover { stale_ms } if !down && self.sim.replica_synced_at().is_some() => {
                self.failover(stale_ms);
                true
            }
            Fault::ReplicaLinkDown { ms } if self.sim.replica_link_up() == Some(true) => {
                self.sim.set_replica_link(false);
                self.link_up_at = Some(now.saturating_add(ms));
                true
            }
            Fault::Pause { ms, .. } if up => {
                // Its handlings stand still with it: they end as much later.
                let node = &mut self.nodes[i];
                node.paused_until = Some(now.saturating_add(ms));
                for work in &mut node.work {
                    work.done_at = work.done_at.saturating_add(ms);
                }
                true
            }
            Fault::CutAfterCommit { .. } if up => {
                self.nodes[i].cut_after_commit = true;
                true
            }
            _ => false,
        };
        self.note(|| format!("fault {fault:?}{}", if applied { "" } else { " (skipped)" }));
        self.faults.push(FaultRecord { at_ms: now, fault, consumer: target, applied });
    }

    /// A failover ([`Fault::Failover`]): the replica is promoted, the entries it did not have
    /// never were for the surviving history, and those it had must all be there.
    fn failover(&mut self, stale_ms: u64) {
        let now = self.now();
        // What the old master delivered and the replica had not copied is delivered again
        // by the new one, as after a destroyed group.
        self.delivered_anew(now);
        if self.confirm_out {
            // An answer the producer's WAIT got before the failover counts.
            let answer = self.sim.output(self.producer);
            self.confirmation(&answer);
        }
        let had = self.sim.replica_offset().unwrap_or(0);
        let old = if stale_ms == 0 { OldMaster::Killed } else { OldMaster::Demoted };
        self.sim.failover_with(old);
        self.failed_over = true;
        self.link_up_at = None;
        self.stale_until = (stale_ms > 0).then(|| now.saturating_add(stale_ms));
        // The kit's own connections find the new master (an answer the producer waited for
        // died with the old one).
        for conn in [self.admin, self.producer].into_iter().chain(self.app.take()) {
            self.sim.disconnect(conn);
        }
        self.admin = self.sim.connect();
        for d in self.direct.iter_mut().filter(|d| d.offset > had) {
            d.lost = true;
        }
        if self.confirm_out {
            self.confirmation(b""); // it died with the old master
        }
        let kept: BTreeSet<String> =
            self.sim.stream_ids(&self.stream).iter().map(|id| id.to_string()).collect();
        let mut violations = Vec::new();
        for r in self.records.iter_mut().filter(|r| !r.unreplicated) {
            if kept.contains(&r.id) {
                // A deletion the replica had not copied is undone.
                r.deleted = false;
            } else if r.offset > had {
                r.unreplicated = true;
                if r.confirmed {
                    violations.push(Violation::ConfirmedLost { id: r.id.clone() });
                }
            } else if !r.deleted && !r.acked && r.dead_letter_moves == 0 {
                violations.push(Violation::ReplicatedLost { id: r.id.clone() });
            }
        }
        for v in violations {
            self.violation(v);
        }
    }

    /// Adds the acks a consumer's life counted unreplicated, before it ends.
    fn count_unreplicated(&mut self, i: usize) {
        if let Some(c) = self.nodes[i].consumer.as_ref() {
            self.acks_unreplicated += c.stats().acks_unreplicated;
        }
    }

    /// The process of node `i` dies: its core, its connection, the entries in hand.
    fn kill(&mut self, i: usize) {
        self.count_unreplicated(i);
        let node = &mut self.nodes[i];
        if let Some(conn) = node.conn.take() {
            self.sim.disconnect(conn);
        }
        node.consumer = None;
        node.work.clear();
        node.order.clear();
        node.across_destroy.clear();
        node.stop_asked = false;
        node.paused_until = None;
        node.cut_after_commit = false;
        node.fail_next = false;
        node.dead_letter_next = false;
        node.slow_next = None;
    }

    /// The group's deliveries are about to be forgotten (a destroyed group; a failover, in
    /// part): entries pending now may be read again by their owners, and reads before and
    /// after are not one order.
    fn delivered_anew(&mut self, now: u64) {
        for p in self.sim.pending(&self.stream, &self.group).unwrap_or_default() {
            let owner = self.nodes.iter().position(|n| n.name.as_bytes() == &p.consumer[..]);
            if let (Some(n), Some(&r)) = (owner, self.by_id.get(p.id.to_string().as_bytes())) {
                self.nodes[n].across_destroy.insert(r);
            }
        }
        self.last_destroy = Some(now);
        for node in &mut self.nodes {
            node.order.clear();
        }
    }

    fn mark_deleted(&mut self, id: &[u8]) {
        if let Some(&r) = self.by_id.get(id) {
            self.records[r].deleted = true;
        }
    }

    fn restart_due(&mut self) {
        let now = self.now();
        for node in &mut self.nodes {
            if node.restart_at.is_some_and(|t| t <= now) && !node.dead {
                node.restart_at = None;
                node.life += 1;
                node.born_at = now;
                node.order.clear();
                node.across_destroy.clear();
                // A new process under the same name: its own pending list comes back to it.
                node.consumer = Consumer::new(node.config.clone()).ok();
            }
        }
    }

    /// Drives node `i` until it has nothing more to do at this instant.
    fn drive(&mut self, i: usize) {
        if self.paused(i) {
            return;
        }
        let now = self.now();
        let at = self.instant();
        for _ in 0..MAX_ROUNDS {
            let mut progress = false;
            let down = self.is_down();
            let node = &mut self.nodes[i];
            let Some(consumer) = node.consumer.as_mut() else { return };
            if consumer.connect_due(at) {
                // Still open if the consumer dropped it (a stop leaving the group from a
                // parked read).
                if let Some(old) = node.conn.take() {
                    self.sim.disconnect(old);
                }
                if down {
                    consumer.on_disconnected_because(at, "connection refused (the server is restarting)");
                } else {
                    // Within a failover's stale window the address still leads to the old
                    // master, a replica now.
                    let stale = self.stale_until.is_some_and(|t| now < t);
                    let conn = if stale { self.sim.connect_replica() } else { None };
                    node.conn = Some(conn.unwrap_or_else(|| self.sim.connect()));
                    consumer.on_connected(at);
                }
                progress = true;
            }
            if let (Some(conn), Some(bytes)) = (node.conn, consumer.poll_transmit()) {
                let bytes = bytes.to_vec();
                consumer.advance_transmit(bytes.len());
                let ids = acked_ids(&bytes);
                for &(commit, id) in &ids {
                    let record = self.by_id.get(id).copied();
                    let allowed = record.is_some_and(|r| match commit {
                        true => node.committed.contains(&r),
                        false => node.acked.contains(&r) || self.records[r].deleted,
                    });
                    if !allowed {
                        let id = String::from_utf8_lossy(id).into_owned();
                        let v = Violation::AckWithoutVerdict { consumer: node.name.clone(), id, at_ms: now };
                        if self.violations.len() < MAX_VIOLATIONS {
                            self.violations.push(v);
                        }
                    }
                }
                if let Some(trace) = &mut self.trace {
                    trace.push(format!("{now} ms {} writes {}", node.name, report::text(&bytes, 300)));
                }
                self.sim.input(conn, &bytes);
                progress = true;
                if node.cut_after_commit && !ids.is_empty() {
                    // The commit (or ack) went through; its answer is lost with the connection.
                    node.cut_after_commit = false;
                    self.sim.disconnect(conn);
                    node.conn = None;
                    consumer.on_disconnected(at);
                    if let Some(trace) = &mut self.trace {
                        trace.push(format!("{now} ms {}'s connection is cut after that write", node.name));
                    }
                }
            }
            if let Some(conn) = node.conn {
                let input = self.sim.output(conn);
                let closed = self.sim.is_closed(conn);
                let mut result = Ok(());
                if !input.is_empty() {
                    if let Some(trace) = &mut self.trace {
                        trace.push(format!("{now} ms {} reads {}", node.name, report::text(&input, 300)));
                    }
                    result = consumer.handle_input(&input, at);
                    progress = true;
                }
                if result.is_ok()
                    && consumer.poll_timeout().is_some_and(|t| t <= at)
                    && consumer.is_connected()
                {
                    result = consumer.handle_timeout(at);
                    // It may have something to write (acks due, lease renewals).
                    progress |= consumer.poll_transmit().is_some();
                }
                match result {
                    Err(e) if e.is_fatal() => {
                        let v = Violation::Fatal {
                            consumer: node.name.clone(),
                            error: e.to_string(),
                            at_ms: now,
                        };
                        if self.violations.len() < MAX_VIOLATIONS {
                            self.violations.push(v);
                        }
                        self.kill(i);
                        self.nodes[i].dead = true;
                        return;
                    }
                    Err(_) => {
                        self.sim.disconnect(conn);
                        node.conn = None;
                        progress = true;
                    }
                    Ok(()) if closed => {
                        self.sim.disconnect(conn);
                        node.conn = None;
                        consumer.on_disconnected(at);
                        progress = true;
                    }
                    Ok(()) => {}
                }
            }
            // A fatal error found while no call returns it (the consumer finished its stop
            // first, or failed on a settle) is told by `error` alone.
            if let Some(e) = consumer.error() {
                let v = Violation::Fatal { consumer: node.name.clone(), error: e.to_string(), at_ms: now };
                if self.violations.len() < MAX_VIOLATIONS {
                    self.violations.push(v);
                }
                self.kill(i);
                self.nodes[i].dead = true;
                return;
            }
            progress |= self.settle_due(i);
            match self.nodes[i].consumer.as_mut().and_then(Consumer::poll_event) {
                Some(Event::Entry(entry)) => {
                    self.hand_out(i, &entry);
                    progress = true;
                }
                Some(Event::Stopped) => {
                    let node = &mut self.nodes[i];
                    let name = node.name.clone();
                    if !node.stop_asked {
                        self.violation(Violation::Contract {
                            consumer: name,
                            at_ms: now,
                            what: "stopped unasked".into(),
                        });
                    } else if !node.work.is_empty() {
                        let what = format!("stopped with {} entries in hand", node.work.len());
                        self.violation(Violation::Contract { consumer: name, at_ms: now, what });
                    }
                    self.count_unreplicated(i);
                    let node = &mut self.nodes[i];
                    if let Some(conn) = node.conn.take() {
                        self.sim.disconnect(conn);
                    }
                    node.consumer = None;
                    node.work.clear();
                    node.stop_asked = false;
                    node.restart_at = Some(now.saturating_add(node.restart_after));
                    return;
                }
                Some(Event::Notice(notice)) => {
                    self.on_notice(i, &notice);
                    progress = true;
                }
                Some(_) => progress = true,
                None => {}
            }
            if !progress {
                return;
            }
        }
        let consumer = self.nodes[i].name.clone();
        self.violation(Violation::Livelock { consumer, at_ms: now });
        self.livelocked = true;
    }

    /// Gives node `i`'s verdicts to its consumer for the handlings whose time is up, in the
    /// order they finished (those finishing together in the order handed out), each by id.
    fn settle_due(&mut self, i: usize) -> bool {
        let now = self.now();
        let at = self.instant();
        let node = &mut self.nodes[i];
        let Some(consumer) = node.consumer.as_mut() else { return false };
        if !node.work.iter().any(|w| w.done_at <= now) {
            return false;
        }
        let mut done: Vec<Work> = node.work.iter().filter(|w| w.done_at <= now).cloned().collect();
        node.work.retain(|w| w.done_at > now);
        done.sort_by_key(|w| w.done_at); // stable: ties keep the order handed out
        for work in done {
            let record = &mut self.records[work.record];
            match work.verdict {
                Verdict::Ack => {
                    node.acked.insert(work.record);
                    record.acked = true;
                }
                Verdict::Commit(_) => {
                    node.committed.insert(work.record);
                }
                _ => {}
            }
            record.handlings[work.handling].settled_at_ms = Some(now);
            if !consumer.settle(record.id.as_bytes(), work.verdict.clone(), at) {
                let what = format!("refused the settle of {}, handed out and not yet settled", record.id);
                if self.violations.len() < MAX_VIOLATIONS {
                    self.violations.push(Violation::Contract {
                        consumer: node.name.clone(),
                        at_ms: now,
                        what,
                    });
                }
            }
            if let Some(trace) = &mut self.trace {
                trace.push(format!("{now} ms {} settles {}: {:?}", node.name, record.id, work.verdict));
            }
        }
        true
    }

    /// An entry handed out to node `i`: the handler runs (unless a fault decides), its
    /// verdict is given when the handling's time is up.
    fn hand_out(&mut self, i: usize, entry: &Entry) {
        let now = self.now();
        let name = self.nodes[i].name.clone();
        let id = entry.id();
        let Some(&record) = self.by_id.get(id) else {
            let what = format!("handed out {}, which was never added", String::from_utf8_lossy(id));
            self.violation(Violation::Contract { consumer: name, at_ms: now, what });
            return;
        };
        let node = &self.nodes[i];
        let (limit, held) = (node.config.concurrency as usize, node.work.len());
        let key = node.config.order_by.as_ref().and_then(|order| order.key(entry)).map(|k| k.to_vec());
        if held >= limit {
            let what = format!("got an entry with {held} in hand (concurrency {limit})");
            self.violation(Violation::Contract { consumer: name.clone(), at_ms: now, what });
        }
        if let Some(key) = &key {
            self.check_order(i, record, key);
        }
        if self.nodes[i].stop_asked {
            let what = format!("got {} after its stop", self.records[record].id);
            self.violation(Violation::Contract { consumer: name.clone(), at_ms: now, what });
        }
        if let Some(max) = self.max_deliveries.filter(|&max| entry.deliveries > max) {
            let id = self.records[record].id.clone();
            self.violation(Violation::OverDelivered { id, deliveries: entry.deliveries, max });
        }
        self.note(|| {
            format!(
                "{name} handles {} ({:?}, delivery {})",
                String::from_utf8_lossy(id),
                entry.source,
                entry.deliveries
            )
        });
        let down = self.is_down();
        let node = &mut self.nodes[i];
        let ctx = HandlerCtx {
            consumer: &node.name,
            index: i,
            life: node.life,
            now_ms: now,
            in_hand: node.work.len() + 1,
            took: Cell::new(None),
            app: RefCell::new(App { sim: &mut self.sim, conn: &mut self.app, down, made: Vec::new() }),
        };
        let (verdict, by_handler) = if std::mem::take(&mut node.dead_letter_next) {
            (Verdict::DeadLetter, false)
        } else if std::mem::take(&mut node.fail_next) {
            (Verdict::Retry, false)
        } else {
            ((self.handler)(&mut self.state, &ctx, entry), true)
        };
        let (lo, hi) = self.world.handler_ms;
        let took = match node.slow_next.take().or(ctx.took.get()) {
            Some(ms) => ms,
            None => self.handlings_rng.between(lo, hi),
        };
        let made = ctx.app.into_inner().made;
        let handlings = &mut self.records[record].handlings;
        handlings.push(Handling {
            consumer: node.name.clone(),
            index: i,
            life: node.life,
            at_ms: now,
            deliveries: entry.deliveries,
            source: entry.source,
            verdict: verdict.clone(),
            by_handler,
            settled_at_ms: None,
            key: key.clone(),
            committed: false,
            wrote: Vec::new(),
        });
        let handling = handlings.len() - 1;
        if !made.is_empty() {
            let name = &node.name;
            if let Some(trace) = &mut self.trace {
                let commands: Vec<&str> = made.iter().map(|(w, _)| w.command()).collect();
                trace.push(format!("{now} ms {name}'s handler writes {}", commands.join(" ")));
            }
        }
        self.direct.extend(made.into_iter().map(|(write, offset)| Direct {
            record,
            handling,
            write,
            offset,
            lost: false,
        }));
        node.work.push(Work { record, handling, done_at: now.saturating_add(took), verdict, key });
        self.check_in_hand(i);
    }

    /// With an order by key, before node `i` hands out `record` of `key`: no other entry of
    /// the key is in hand, and a first handing in this life comes in id order among the
    /// key's, unless the promise explains it (see `Violation::OutOfOrder`).
    fn check_order(&mut self, i: usize, record: usize, key: &[u8]) {
        let now = self.now();
        let lossy = |k: &[u8]| String::from_utf8_lossy(k).into_owned();
        let node = &self.nodes[i];
        if let Some(w) = node.work.iter().find(|w| w.key.as_deref() == Some(key)) {
            let v = Violation::KeyInHandTwice {
                consumer: node.name.clone(),
                key: lossy(key),
                id: self.records[record].id.clone(),
                in_hand: self.records[w.record].id.clone(),
                at_ms: now,
            };
            self.violation(v);
        }
        let node = &self.nodes[i];
        let life = node.life;
        if self.records[record].handlings.iter().any(|h| h.index == i && h.life == life) {
            return; // handed out again (a retry, a drain): the promise is about the first time
        }
        // Only what this life read as new is held to the order: not what it reclaimed from a
        // peer (handled in its own order, whichever way it comes: a reclaim, or a drain after
        // a reclaim's reply was too big to keep), nor what an earlier life left pending, nor
        // what it held across a destroyed group (read twice, once from each group).
        let origin = crate::EntryId::parse_strict(self.records[record].id.as_bytes(), 0)
            .and_then(|id| self.sim.origin(&self.stream, &self.group, id));
        let read_new = !node.across_destroy.contains(&record)
            && origin.is_some_and(|o| {
                o.read_by == node.name.as_bytes()
                    && !o.moved
                    && o.read_at >= node.born_at
                    && self.last_destroy.map_or(true, |d| o.read_at >= d)
            });
        if !read_new {
            return;
        }
        if let Some(&after) = node.order.get(key).filter(|&&after| after > record) {
            let v = Violation::OutOfOrder {
                consumer: node.name.clone(),
                life,
                key: lossy(key),
                id: self.records[record].id.clone(),
                after: self.records[after].id.clone(),
                at_ms: now,
            };
            self.violation(v);
        }
        let latest = self.nodes[i].order.entry(key.to_vec()).or_insert(record);
        *latest = (*latest).max(record);
    }

    /// The entries node `i`'s core has in hand are those the kit handed to the handler.
    fn check_in_hand(&mut self, i: usize) {
        let node = &self.nodes[i];
        let Some(consumer) = node.consumer.as_ref() else { return };
        let mut kit: Vec<&[u8]> = node.work.iter().map(|w| self.records[w.record].id.as_bytes()).collect();
        let mut core: Vec<&[u8]> = consumer.in_hand().collect();
        kit.sort_unstable();
        core.sort_unstable();
        if kit != core {
            let list = |ids: &[&[u8]]| {
                ids.iter().map(|id| String::from_utf8_lossy(id).into_owned()).collect::<Vec<_>>().join(", ")
            };
            let what = format!("holds [{}] in hand, the kit handed out [{}]", list(&core), list(&kit));
            let v = Violation::Contract { consumer: node.name.clone(), at_ms: self.now(), what };
            self.violation(v);
        }
    }

    fn on_notice(&mut self, i: usize, notice: &Notice) {
        *self.notices.entry(notice_name(notice)).or_default() += 1;
        let name = &self.nodes[i].name;
        let line = format!("{name}: {notice}");
        self.note(|| line);
        if let Notice::DeadLettered { id, .. } = notice {
            let Some(&r) = self.by_id.get(&id[..]) else { return };
            let record = &mut self.records[r];
            record.dead_letter_moves += 1;
            // Only a group destroyed and created again at 0 delivers an entry anew.
            if record.dead_letter_moves > 1 && !self.group_destroyed && !self.failed_over {
                let id = record.id.clone();
                self.violation(Violation::DeadLetteredTwice { id });
            }
        }
    }

    /// Every entry added is settled (acked, moved or deleted), nothing pending, nothing
    /// left to add or inject, every consumer idle.
    fn quiescent(&self) -> bool {
        let committed = self.committed_records();
        let settled = |(i, r): (usize, &Record)| {
            r.acked || r.dead_letter_moves > 0 || r.deleted || r.unreplicated || committed.contains(&i)
        };
        self.due.is_empty()
            && !self.confirm_out
            && self.scheduled.is_empty()
            && !self.is_down()
            && self.sim.pending(&self.stream, &self.group).map_or(true, |p| p.is_empty())
            && self.nodes.iter().all(|n| n.work.is_empty() && n.restart_at.is_none())
            && (self.records.iter().enumerate().all(settled) || {
                let moved = self.moved_unreported();
                self.records.iter().enumerate().all(|(i, r)| settled((i, r)) || moved.contains(&i))
            })
    }

    /// The records the server committed (in the history that survives).
    fn committed_records(&self) -> BTreeSet<usize> {
        self.sim
            .commits()
            .iter()
            .filter(|c| c.stream == self.stream && c.group == self.group)
            .filter_map(|c| self.by_id.get(c.id.to_string().as_bytes()).copied())
            .collect()
    }

    /// Each commit the server made (in the history that survives) counted on its record and
    /// put down to its handling: the latest by that consumer with a `Commit` verdict that
    /// reached it by then, and no commit put down to it yet (one batch may commit two
    /// handlings of an entry: two copies a destroyed group delivered).
    fn count_commits(&mut self) {
        let commits: Vec<_> = self
            .sim
            .commits()
            .iter()
            .filter(|c| c.stream == self.stream && c.group == self.group)
            .cloned()
            .collect();
        for c in commits {
            let Some(&r) = self.by_id.get(c.id.to_string().as_bytes()) else { continue };
            let record = &mut self.records[r];
            record.commits += 1;
            let handling = record.handlings.iter_mut().rev().find(|h| {
                !h.committed
                    && h.consumer.as_bytes() == &c.consumer[..]
                    && matches!(h.verdict, Verdict::Commit(_))
                    && h.settled_at_ms.is_some_and(|t| t <= c.at)
            });
            if let Some(h) = handling {
                h.committed = true;
            }
        }
    }

    /// The entries in the dead-letter stream whose move no consumer reported: the process
    /// that made it died (or gave up) before the script's answer came. Counted only after a
    /// fault that loses a process's memory.
    fn moved_unreported(&self) -> BTreeSet<usize> {
        let memory_lost = self.faults.iter().any(|f| {
            f.applied && matches!(f.fault.kind(), FaultKind::Crash | FaultKind::Death | FaultKind::Abandon)
        });
        let Some(key) = self.dead_letter.as_deref().filter(|_| memory_lost) else { return BTreeSet::new() };
        self.sim
            .entries(key)
            .iter()
            .filter_map(|(_, fields)| fields.iter().find(|(n, _)| n == b"pelican-id").map(|(_, v)| v))
            .filter_map(|origin| self.by_id.get(&origin[..]).copied())
            .filter(|&r| self.records[r].dead_letter_moves == 0)
            .collect()
    }

    /// The next moment anything can happen.
    fn next_time(&self) -> u64 {
        let now = self.now();
        let mut t = u64::MAX;
        if now < self.world.phase_ms {
            t = t.min(self.world.phase_ms);
            if let Some(r) = self.next_random {
                t = t.min(r);
            }
        }
        match self.down_until {
            Some(up) => t = t.min(up),
            None => {
                if let Some(e) = self.due.front() {
                    t = t.min(e.at_ms);
                }
            }
        }
        if let Some((at, _)) = self.scheduled.front() {
            t = t.min(*at);
        }
        if let Some(at) = self.link_up_at {
            t = t.min(at);
        }
        if let Some(w) = self.sim.next_wakeup() {
            t = t.min(w);
        }
        for node in &self.nodes {
            for work in &node.work {
                t = t.min(work.done_at);
            }
            if let Some(r) = node.restart_at {
                t = t.min(r);
            }
            if let Some(p) = node.paused_until.filter(|&p| p > now) {
                t = t.min(p);
                continue; // nothing else of it moves before then
            }
            if let Some(at) = node.consumer.as_ref().and_then(Consumer::poll_timeout) {
                let ms = at.saturating_duration_since(self.base).as_millis() as u64;
                // Deadlines round up so that the instant passed in is at or after them.
                t = t.min(ms + u64::from(at > self.base + Duration::from_millis(ms)));
            }
        }
        t.max(now)
    }

    /// The report: the world written out for a replay, each entry's story, what the server
    /// holds, and every violation.
    fn finish(mut self, quiescent: bool) -> Report<S> {
        let mut replay = self.world.clone();
        if !self.world.random_faults.is_empty() {
            // The faults drawn written out, with the scheduled ones, in the order they
            // happened (then any scheduled too late to happen).
            replay.faults = self.faults.iter().map(|f| (f.at_ms, f.fault)).collect();
            replay.faults.extend(self.scheduled.iter().copied());
            replay.random_faults.clear();
        }
        replay.entries = Some(std::mem::take(&mut self.entries));
        for i in 0..self.nodes.len() {
            self.count_unreplicated(i);
        }
        for r in self.moved_unreported() {
            self.records[r].dead_letter_moves = 1;
        }
        self.count_commits();
        for d in std::mem::take(&mut self.direct).into_iter().filter(|d| !d.lost) {
            self.records[d.record].handlings[d.handling].wrote.push(d.write);
        }
        let records: Vec<EntryReport> = self.records.into_iter().map(EntryReport::from).collect();
        let dead_letter = self.dead_letter.as_deref();
        let server = report::server_state(&self.sim, &self.stream, &self.group, dead_letter, &records);
        let mut violations = self.violations;
        report::final_checks(
            &records,
            &server,
            &self.faults,
            quiescent,
            self.sim.now(),
            &self.stream,
            dead_letter,
            &mut violations,
        );
        report::retry_checks(&records, &self.faults, self.on_retry, self.min_idle_ms, &mut violations);
        Report {
            state: self.state,
            world: replay,
            entries: records,
            faults: self.faults,
            server,
            notices: self.notices,
            acks_unreplicated: self.acks_unreplicated,
            ended_at_ms: self.sim.now(),
            quiescent,
            trace: self.trace.unwrap_or_default(),
            violations,
        }
    }
}
