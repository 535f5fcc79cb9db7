//! Deterministic simulation: several pelican consumers (the real sans-IO core) against one
//! simulated server on a virtual clock, with seeded random faults — crashes, restarts under
//! the same name, deaths, disconnects, deleted and trimmed pending entries, failing handlers,
//! slow handlers (under and over `min_idle`), poison entries that always fail, dead-letter
//! verdicts, big entries (reads past `read_bytes`), stops, abandons (stops that drop the entry
//! in hand and give up owed acks), a destroyed group. The drivers here keep driving while a
//! handler runs (like `pelican-smol`), so leases are renewed meanwhile. After every run:
//! every added entry was handled with `Ack` at least once, or moved to the dead-letter
//! stream (exactly once), or was deleted; poison entries went to the dead-letter stream; no
//! `XACK` went out without an `Ack` verdict, the pending list is empty at quiescence, no
//! consumer ever held two entries, and a stop never cut an entry short.
//!
//! `PELICAN_SIM_SEEDS=n` sets how many seeds run (default 1000); `PELICAN_SIM_SEED=s` replays
//! one seed, printed on failure.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use pelican::{Config, Consumer, Event, GroupGone, Notice, Protocol, Verdict};
use pelican_sim::{ConnId, Sim, SimOptions};

const STREAM: &[u8] = b"s";
const GROUP: &[u8] = b"g";
/// Faults and new entries happen before this (virtual ms); then the system must settle.
const FAULT_PHASE: u64 = 8_000;
/// Quiescence must come before this.
const DEADLINE: u64 = 120_000;
const MIN_IDLE: u64 = 1_000;
const DEAD_LETTER: &[u8] = b"dl";
/// Deliveries an entry may have before it goes to the dead-letter stream.
const MAX_DELIVERIES: u64 = 5;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    Crash,
    Death,
    Disconnect,
    DeletePending,
    TrimPending,
    HandlerFails,
    /// A handler that takes between half of `min_idle` and `min_idle`.
    SlowHandler,
    /// A handler that takes longer than `min_idle`.
    VerySlowHandler,
    /// An entry whose handler always fails.
    PoisonEntry,
    /// A handler that answers `DeadLetter`.
    DeadLetterVerdict,
    /// Entries too big for one read of several (`read_bytes` is 4 KiB here).
    BigEntries,
    Stop,
    Abandon,
    DestroyGroup,
}

const ALL_FAULTS: [Fault; 14] = [
    Fault::Crash,
    Fault::Death,
    Fault::Disconnect,
    Fault::DeletePending,
    Fault::TrimPending,
    Fault::HandlerFails,
    Fault::SlowHandler,
    Fault::VerySlowHandler,
    Fault::PoisonEntry,
    Fault::DeadLetterVerdict,
    Fault::BigEntries,
    Fault::Stop,
    Fault::Abandon,
    Fault::DestroyGroup,
];

/// `PELICAN_SIM_TRACE=1` (with `PELICAN_SIM_SEED`) prints what each node writes, reads,
/// handles and settles: the story of a failing seed.
fn tracing() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("PELICAN_SIM_TRACE").is_some())
}

/// splitmix64: the run's only randomness.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// One consumer process: its core while alive, its connection, the entry it works on.
struct Node {
    name: String,
    config: Config,
    consumer: Option<Consumer>,
    conn: Option<ConnId>,
    /// The entry in hand, when its handler finishes, and the verdict it will give.
    work: Option<(String, u64, Verdict)>,
    restart_at: Option<u64>,
    dead: bool,
    stop_asked: bool,
    /// Ids this node's handler answered `Ack` for (over all its lives).
    acked: BTreeSet<String>,
    fail_next: bool,
    /// How long the next handler takes, if a fault said so.
    slow_next: Option<u64>,
    dead_letter_next: bool,
}

struct World {
    seed: u64,
    rng: Rng,
    sim: Sim,
    admin: ConnId,
    base: Instant,
    nodes: Vec<Node>,
    added: BTreeSet<String>,
    deleted: BTreeSet<String>,
    /// Handlings with an `Ack` verdict, per id.
    acks: BTreeMap<String, u32>,
    /// Entries whose handler always fails.
    poison: BTreeSet<String>,
    /// Entries the handler sent to the dead-letter stream.
    dead_letter_verdicts: BTreeSet<String>,
    /// Entries reported moved to the dead-letter stream.
    dead_lettered: BTreeSet<String>,
    /// How many times each was reported moved.
    dead_letter_moves: BTreeMap<String, u32>,
    faults: BTreeMap<Fault, u32>,
    next_id: u64,
}

impl World {
    fn new(seed: u64, enabled: &[Fault]) -> (World, Vec<Fault>) {
        let mut rng = Rng(seed);
        let options = match rng.below(3) {
            0 => SimOptions::redis62(),
            1 => SimOptions::redis70(),
            _ => SimOptions::valkey81(),
        };
        let mut sim = Sim::new(options);
        let admin = sim.connect();
        let nodes = (0..2 + rng.below(3))
            .map(|i| {
                let protocol = if rng.chance(50) { Protocol::Resp3 } else { Protocol::Resp2 };
                let name = format!("c{i}");
                let config = Config::new("s", "g", &name)
                    .protocol(protocol)
                    .count(1 + rng.below(10) as u32)
                    .beat(Duration::from_millis(100))
                    .min_idle(Duration::from_millis(MIN_IDLE))
                    .read_grace(Duration::from_secs(1))
                    .create_group("0")
                    .on_group_gone(GroupGone::Recreate)
                    .backoff(Duration::from_millis(20), Duration::from_millis(500))
                    .dead_letter_after(MAX_DELIVERIES, DEAD_LETTER)
                    .read_bytes(4096)
                    .seed(rng.next());
                Node {
                    name,
                    consumer: Some(Consumer::new(config.clone()).unwrap()),
                    config,
                    conn: None,
                    work: None,
                    restart_at: None,
                    dead: false,
                    stop_asked: false,
                    acked: BTreeSet::new(),
                    fail_next: false,
                    slow_next: None,
                    dead_letter_next: false,
                }
            })
            .collect();
        let world = World {
            seed,
            rng,
            sim,
            admin,
            base: origin(),
            nodes,
            added: BTreeSet::new(),
            deleted: BTreeSet::new(),
            acks: BTreeMap::new(),
            poison: BTreeSet::new(),
            dead_letter_verdicts: BTreeSet::new(),
            dead_lettered: BTreeSet::new(),
            dead_letter_moves: BTreeMap::new(),
            faults: BTreeMap::new(),
            next_id: 0,
        };
        (world, enabled.to_vec())
    }

    fn now(&self) -> u64 {
        self.sim.now()
    }

    fn instant(&self) -> Instant {
        self.base + Duration::from_millis(self.now())
    }

    fn admin(&mut self, args: &[&[u8]]) -> Vec<u8> {
        let mut cmd = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            cmd.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            cmd.extend_from_slice(a);
            cmd.extend_from_slice(b"\r\n");
        }
        self.sim.input(self.admin, &cmd);
        self.sim.output(self.admin)
    }

    fn produce(&mut self, n: u64) {
        self.produce_sized(n, 1);
    }

    fn produce_sized(&mut self, n: u64, size: usize) -> Vec<String> {
        let mut ids = Vec::new();
        for _ in 0..n {
            self.next_id += 1;
            let id = format!("{}-0", self.next_id);
            let value = vec![b'v'; size];
            let reply = self.admin(&[b"XADD", STREAM, id.as_bytes(), b"f", &value]);
            assert!(
                reply.starts_with(b"$"),
                "seed {}: XADD answered {:?}",
                self.seed,
                String::from_utf8_lossy(&reply)
            );
            self.added.insert(id.clone());
            ids.push(id);
        }
        ids
    }

    /// Drives node `i` until it has nothing more to do at this instant.
    fn drive(&mut self, i: usize) {
        let now = self.now();
        let at = self.instant();
        let seed = self.seed;
        for _ in 0..10_000 {
            let node = &mut self.nodes[i];
            let Some(consumer) = node.consumer.as_mut() else { return };
            let mut progress = false;
            if consumer.connect_due(at) {
                node.conn = Some(self.sim.connect());
                consumer.on_connected(at);
                progress = true;
            }
            if let (Some(conn), Some(bytes)) = (node.conn, consumer.poll_transmit()) {
                let bytes = bytes.to_vec();
                consumer.advance_transmit(bytes.len());
                for cmd in parse_commands(&bytes) {
                    if tracing() {
                        let words: Vec<_> =
                            cmd.iter().map(|a| String::from_utf8_lossy(&a[..a.len().min(20)])).collect();
                        eprintln!("{now} ms {} writes {}", node.name, words.join(" "));
                    }
                    if cmd[0] == b"XACK" {
                        for id in &cmd[3..] {
                            let id = String::from_utf8_lossy(id).into_owned();
                            assert!(
                                node.acked.contains(&id) || self.deleted.contains(&id),
                                "seed {seed}: {} sent XACK {id} without an Ack verdict",
                                node.name
                            );
                        }
                    }
                }
                self.sim.input(conn, &bytes);
                progress = true;
            }
            if let Some(conn) = node.conn {
                let input = self.sim.output(conn);
                let closed = self.sim.is_closed(conn);
                let mut result = Ok(());
                if !input.is_empty() {
                    if tracing() {
                        eprintln!(
                            "{now} ms {} reads {:?}",
                            node.name,
                            String::from_utf8_lossy(&input[..input.len().min(300)])
                        );
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
                    Err(e) if e.is_fatal() => panic!("seed {seed}: {} failed for good: {e}", node.name),
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
            if let Some((id, done_at, verdict)) = node.work.clone() {
                if done_at <= now {
                    if verdict == Verdict::Ack {
                        node.acked.insert(id.clone());
                        *self.acks.entry(id.clone()).or_default() += 1;
                    }
                    if verdict == Verdict::DeadLetter {
                        self.dead_letter_verdicts.insert(id.clone());
                    }
                    node.work = None;
                    if tracing() {
                        eprintln!("{now} ms {} settles {id}: {verdict:?}", node.name);
                    }
                    consumer.settle(verdict, at);
                    progress = true;
                }
            }
            match consumer.poll_event() {
                Some(Event::Entry(entry)) => {
                    assert!(node.work.is_none(), "seed {seed}: {} got two entries in hand", node.name);
                    assert!(!node.stop_asked, "seed {seed}: {} got an entry after its stop", node.name);
                    let id = String::from_utf8_lossy(entry.id()).into_owned();
                    if tracing() {
                        eprintln!(
                            "{now} ms {} handles {id} ({:?}, delivery {})",
                            node.name, entry.source, entry.deliveries
                        );
                    }
                    assert!(
                        entry.deliveries <= MAX_DELIVERIES,
                        "seed {seed}: {id} handed out after {} deliveries",
                        entry.deliveries
                    );
                    let in_faults = now < FAULT_PHASE;
                    let verdict = if std::mem::take(&mut node.dead_letter_next) {
                        Verdict::DeadLetter
                    } else if std::mem::take(&mut node.fail_next)
                        || self.poison.contains(&id)
                        || (in_faults && self.rng.chance(5))
                    {
                        Verdict::Retry
                    } else {
                        Verdict::Ack
                    };
                    let took = node.slow_next.take().unwrap_or_else(|| self.rng.below(30));
                    node.work = Some((id, now + took, verdict));
                    progress = true;
                }
                Some(Event::Stopped) => {
                    assert!(node.stop_asked, "seed {seed}: {} stopped unasked", node.name);
                    assert!(node.work.is_none(), "seed {seed}: {} stopped with an entry in hand", node.name);
                    if let Some(conn) = node.conn.take() {
                        self.sim.disconnect(conn);
                    }
                    node.consumer = None;
                    node.stop_asked = false;
                    node.restart_at = Some(now + 50 + self.rng.below(500));
                    return;
                }
                Some(Event::Notice(Notice::DeadLettered { id, .. })) => {
                    let id = String::from_utf8_lossy(&id).into_owned();
                    // Only a group destroyed and created again at 0 delivers an entry anew.
                    let again = self.faults.contains_key(&Fault::DestroyGroup);
                    assert!(
                        self.dead_lettered.insert(id.clone()) || again,
                        "seed {seed}: {id} dead-lettered twice"
                    );
                    *self.dead_letter_moves.entry(id).or_default() += 1;
                    progress = true;
                }
                Some(_) => progress = true,
                None => {}
            }
            if !progress {
                return;
            }
        }
        panic!("seed {seed}: node {i} livelocked at {now} ms");
    }

    fn alive(&self) -> usize {
        self.nodes.iter().filter(|n| !n.dead).count()
    }

    fn inject(&mut self, fault: Fault) {
        let i = self.rng.below(self.nodes.len() as u64) as usize;
        let at = self.instant();
        let now = self.now();
        let up = self.nodes[i].consumer.is_some() && !self.nodes[i].dead;
        let applied = match fault {
            Fault::Crash | Fault::Death if up && (fault == Fault::Crash || self.alive() > 1) => {
                let delay = 100 + self.rng.below(2_000);
                let node = &mut self.nodes[i];
                if let Some(conn) = node.conn.take() {
                    self.sim.disconnect(conn);
                }
                // The process is gone: its state, its entry in hand, its unsent acks.
                node.consumer = None;
                node.work = None;
                node.stop_asked = false;
                if fault == Fault::Death {
                    node.dead = true;
                } else {
                    node.restart_at = Some(now + delay);
                }
                true
            }
            Fault::Disconnect if up => {
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
            Fault::DeletePending | Fault::TrimPending => {
                let pending = self.sim.pending(STREAM, GROUP).unwrap_or_default();
                if pending.is_empty() {
                    false
                } else if fault == Fault::DeletePending {
                    let victim = pending[self.rng.below(pending.len() as u64) as usize].id.to_string();
                    if tracing() {
                        eprintln!("{now} ms XDEL {victim}");
                    }
                    self.admin(&[b"XDEL", STREAM, victim.as_bytes()]);
                    self.deleted.insert(victim);
                    true
                } else {
                    let ids: Vec<String> =
                        self.sim.stream_ids(STREAM).iter().map(|id| id.to_string()).collect();
                    let keep = ids.len() - 1 - self.rng.below(ids.len().min(5) as u64) as usize;
                    self.admin(&[b"XTRIM", STREAM, b"MAXLEN", keep.to_string().as_bytes()]);
                    self.deleted.extend(ids[..ids.len() - keep].iter().cloned());
                    true
                }
            }
            Fault::HandlerFails if up => {
                self.nodes[i].fail_next = true;
                true
            }
            Fault::SlowHandler if up => {
                self.nodes[i].slow_next = Some(MIN_IDLE / 2 + self.rng.below(MIN_IDLE / 2));
                true
            }
            Fault::VerySlowHandler if up => {
                self.nodes[i].slow_next = Some(MIN_IDLE + 500 + self.rng.below(1_000));
                true
            }
            Fault::PoisonEntry => {
                let ids = self.produce_sized(1, 1);
                self.poison.extend(ids);
                true
            }
            Fault::DeadLetterVerdict if up => {
                self.nodes[i].dead_letter_next = true;
                true
            }
            Fault::BigEntries => {
                let n = 2 + self.rng.below(4);
                let size = 1500 + self.rng.below(1500) as usize;
                self.produce_sized(n, size);
                true
            }
            Fault::Stop if up && !self.nodes[i].stop_asked => {
                let node = &mut self.nodes[i];
                node.stop_asked = true;
                node.consumer.as_mut().unwrap().stop();
                true
            }
            Fault::Abandon if up => {
                let node = &mut self.nodes[i];
                node.stop_asked = true;
                // The handler under way is dropped: it never gives its verdict.
                node.work = None;
                node.consumer.as_mut().unwrap().abandon();
                true
            }
            Fault::DestroyGroup => {
                self.admin(&[b"XGROUP", b"DESTROY", STREAM, GROUP]);
                true
            }
            _ => false,
        };
        if applied {
            *self.faults.entry(fault).or_default() += 1;
        }
    }

    fn restart_due(&mut self) {
        let now = self.now();
        for node in &mut self.nodes {
            if node.restart_at.is_some_and(|t| t <= now) && !node.dead {
                node.restart_at = None;
                // A new process under the same name: its own pending list comes back to it.
                node.consumer = Some(Consumer::new(node.config.clone()).unwrap());
            }
        }
    }

    /// Handled with `Ack`, moved to the dead-letter stream, or deleted.
    fn settled(&self, id: &String) -> bool {
        self.acks.contains_key(id) || self.dead_lettered.contains(id) || self.deleted.contains(id)
    }

    fn quiescent(&self) -> bool {
        let all_acked = self.added.iter().all(|id| self.settled(id));
        let pel_empty = self.sim.pending(STREAM, GROUP).map_or(true, |p| p.is_empty());
        let idle = self.nodes.iter().all(|n| n.work.is_none() && n.restart_at.is_none());
        all_acked && pel_empty && idle
    }

    /// The next moment anything can happen.
    fn next_time(&self, fault_at: u64, produce_at: u64) -> u64 {
        let mut t = u64::MAX;
        if self.now() < FAULT_PHASE {
            t = t.min(fault_at).min(produce_at).min(FAULT_PHASE);
        }
        if let Some(w) = self.sim.next_wakeup() {
            t = t.min(w);
        }
        for node in &self.nodes {
            if let Some((_, done, _)) = &node.work {
                t = t.min(*done);
            }
            if let Some(r) = node.restart_at {
                t = t.min(r);
            }
            if let Some(at) = node.consumer.as_ref().and_then(Consumer::poll_timeout) {
                let ms = at.saturating_duration_since(self.base).as_millis() as u64;
                // Deadlines round up so that the instant passed in is at or after them.
                t = t.min(ms + u64::from(at > self.base + Duration::from_millis(ms)));
            }
        }
        t.max(self.now())
    }
}

struct Outcome {
    duplicates: u64,
    faults: BTreeMap<Fault, u32>,
}

fn run(seed: u64, enabled: &[Fault]) -> Outcome {
    let (mut w, enabled) = World::new(seed, enabled);
    let mut fault_at = 200 + w.rng.below(400);
    let mut produce_at = 0;
    loop {
        let now = w.now();
        if now < FAULT_PHASE {
            if now >= produce_at {
                let n = 1 + w.rng.below(8);
                w.produce(n);
                produce_at = now + 50 + w.rng.below(400);
            }
            if now >= fault_at && !enabled.is_empty() {
                let fault = enabled[w.rng.below(enabled.len() as u64) as usize];
                w.inject(fault);
                fault_at = now + 100 + w.rng.below(800);
            }
        }
        w.restart_due();
        for i in 0..w.nodes.len() {
            w.drive(i);
        }
        if now >= FAULT_PHASE && w.quiescent() {
            break;
        }
        assert!(now < DEADLINE, "seed {seed}: no quiescence by {DEADLINE} ms: {}", w.report());
        let next = w.next_time(fault_at, produce_at);
        // Always move forward: everything due at `now` was driven above.
        w.sim.advance_to(if next <= now { now + 1 } else { next });
    }
    for id in &w.added {
        assert!(w.settled(id), "seed {seed}: {id} was lost");
    }
    // The dead-letter stream holds exactly the moves reported, with fields and origin: each
    // entry once (a group created again delivers entries anew, and may move them again).
    let moved = w.dead_letter_stream();
    let mut in_stream: BTreeMap<String, u32> = BTreeMap::new();
    for id in moved {
        *in_stream.entry(id).or_default() += 1;
    }
    assert_eq!(
        in_stream, w.dead_letter_moves,
        "seed {seed}: the dead-letter stream against the moves reported"
    );
    for id in w.poison.iter().chain(&w.dead_letter_verdicts) {
        assert!(
            w.dead_lettered.contains(id) || w.deleted.contains(id) || w.acks.contains_key(id),
            "seed {seed}: {id} should be in the dead-letter stream"
        );
    }
    for id in &w.poison {
        assert!(!w.acks.contains_key(id), "seed {seed}: poison {id} acked");
    }
    let handled: u64 = w.acks.values().map(|n| u64::from(*n)).sum();
    Outcome { duplicates: handled - w.acks.len() as u64, faults: w.faults }
}

impl World {
    /// The `pelican-id` of every entry in the dead-letter stream, in order; checks each
    /// carries the original field and its origin.
    fn dead_letter_stream(&mut self) -> Vec<String> {
        let reply = self.admin(&[b"XRANGE", DEAD_LETTER, b"-", b"+"]);
        let text = String::from_utf8_lossy(&reply).into_owned();
        let lines: Vec<&str> = text.split("\r\n").collect();
        let mut ids = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            if *line == "pelican-id" {
                ids.push(lines[i + 2].to_string());
            }
        }
        let entries = text.matches("pelican-stream").count();
        assert_eq!(entries, ids.len(), "seed {}: {text}", self.seed);
        assert_eq!(text.matches("$1\r\nf\r\n").count(), ids.len(), "seed {}: fields kept", self.seed);
        ids
    }

    fn report(&self) -> String {
        let pending = self.sim.pending(STREAM, GROUP).unwrap_or_default();
        let unacked: Vec<&String> = self.added.iter().filter(|id| !self.settled(id)).take(10).collect();
        format!(
            "{} pending ({:?}…), unacked {:?}, nodes {:?}",
            pending.len(),
            pending.first().map(|p| (p.id.to_string(), String::from_utf8_lossy(&p.consumer).into_owned())),
            unacked,
            self.nodes
                .iter()
                .map(|n| (n.name.clone(), n.consumer.is_some(), n.dead, n.work.clone(), n.restart_at))
                .collect::<Vec<_>>()
        )
    }
}

/// The origin of the virtual clock's `Instant`s; only offsets from it matter.
fn origin() -> Instant {
    Instant::now()
}

/// Splits bytes a consumer wrote into commands (arrays of bulk strings).
fn parse_commands(mut b: &[u8]) -> Vec<Vec<Vec<u8>>> {
    fn line<'a>(b: &mut &'a [u8]) -> &'a [u8] {
        let i = b.windows(2).position(|w| w == b"\r\n").expect("CRLF");
        let l = &b[1..i];
        *b = &b[i + 2..];
        l
    }
    let num = |l: &[u8]| std::str::from_utf8(l).unwrap().parse::<usize>().unwrap();
    let mut out = Vec::new();
    while !b.is_empty() {
        let n = num(line(&mut b));
        let mut args = Vec::with_capacity(n);
        for _ in 0..n {
            let len = num(line(&mut b));
            args.push(b[..len].to_vec());
            b = &b[len + 2..];
        }
        out.push(args);
    }
    out
}

fn seeds() -> Vec<u64> {
    if let Ok(s) = std::env::var("PELICAN_SIM_SEED") {
        return vec![s.parse().expect("PELICAN_SIM_SEED is a number")];
    }
    let n = std::env::var("PELICAN_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(1000);
    (1..=n).collect()
}

#[test]
fn nothing_is_lost_under_every_fault() {
    let seeds = seeds();
    let mut faults: BTreeMap<Fault, u32> = BTreeMap::new();
    let mut duplicates = 0;
    for &seed in &seeds {
        let out = run(seed, &ALL_FAULTS);
        duplicates += out.duplicates;
        for (f, n) in out.faults {
            *faults.entry(f).or_default() += n;
        }
    }
    eprintln!(
        "simulated {} seeds with all faults: {faults:?}, {duplicates} duplicate handlings",
        seeds.len()
    );
    assert!(faults.len() == ALL_FAULTS.len() || seeds.len() < 50, "every fault was exercised: {faults:?}");
}

/// Without faults nothing is handled twice; with one kind of fault at a time, the duplicate
/// handlings each fault costs is the figure reported. Only faults that lose a process's
/// state (crash, death, abandon) or the group may cost any.
#[test]
fn duplicates_per_fault() {
    let seeds: Vec<u64> = seeds().into_iter().take(200).collect();
    let clean: u64 = seeds.iter().map(|&s| run(s, &[]).duplicates).sum();
    assert_eq!(clean, 0, "no faults, no duplicates");
    let mut lines = Vec::new();
    for fault in ALL_FAULTS {
        let (mut dups, mut count) = (0u64, 0u64);
        for &seed in &seeds {
            let out = run(seed ^ 0xfa17, &[fault]);
            dups += out.duplicates;
            count += u64::from(out.faults.get(&fault).copied().unwrap_or(0));
        }
        lines.push(format!(
            "{fault:?}: {count} faults, {dups} duplicates, {:.3} per fault",
            dups as f64 / count.max(1) as f64
        ));
        // Only losing a process (its unsent acks) or the group itself costs duplicates:
        // slow handlers, even slower than min_idle, keep their leases here.
        if !matches!(fault, Fault::Crash | Fault::Death | Fault::Abandon | Fault::DestroyGroup) {
            assert_eq!(dups, 0, "{fault:?} caused duplicate handlings");
        }
    }
    eprintln!("duplicates per fault over {} seeds each:\n  {}", seeds.len(), lines.join("\n  "));
}
