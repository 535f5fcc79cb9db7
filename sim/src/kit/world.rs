//! [`World`]: the description of a run — seed, consumers, server, entries, faults — and the
//! entry stream's [`NewEntry`].

use std::fmt;
use std::sync::Arc;

use pelican::{AckWait, Config};

use super::fault::{Fault, FaultKind};
use super::rng::{self, Rng};
use crate::SimOptions;

/// One entry the producer adds to the stream, at `at_ms` on the virtual clock. Entries get
/// the ids `1-0`, `2-0`, … in the order of the list (which must not go back in time: an
/// entry due before the one ahead of it is added right after it).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct NewEntry {
    /// When it is added (virtual ms).
    pub at_ms: u64,
    /// Its field/value pairs. An entry needs one: an empty list is added as one field `_`
    /// with an empty value.
    pub fields: Vec<(Vec<u8>, Vec<u8>)>,
}

impl NewEntry {
    /// An entry added at `at_ms` with these field/value pairs.
    pub fn new<N, V>(at_ms: u64, fields: impl IntoIterator<Item = (N, V)>) -> NewEntry
    where
        N: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        let fields = fields.into_iter().map(|(n, v)| (n.as_ref().to_vec(), v.as_ref().to_vec())).collect();
        NewEntry { at_ms, fields }
    }
}

/// Changes the kit makes to each consumer's configuration (see [`World::configure`]).
type Configure = Arc<dyn Fn(Config) -> Config + Send + Sync>;

/// A deterministic world: N consumers running pelican's real core with your handler, against
/// the simulated server ([`Sim`](crate::Sim)) on a virtual clock, with entries added and
/// faults happening on a schedule or at random from a seed. [`run`](World::run) plays it to
/// quiescence (every entry settled, nothing pending) or to its deadline, in milliseconds of
/// real time, and tells what happened in a [`Report`](super::Report). The same world always
/// runs the same way: its [`Display`](fmt::Display) is the Rust code that builds it again,
/// for a replay.
///
/// `World::new(seed)` draws from the seed what is not set: the server's flavor (Redis 6.2,
/// Redis 7.0, Valkey 8.1 or Redis 8.10), 2 to 4 consumers, each consumer's protocol (RESP2/RESP3) and
/// `count` (1 to 10), the entry stream (batches of 1 to 8 entries with a field `n`, every
/// 50–450 ms, for [`phase_ms`](World::phase_ms); with [`order_by`](World::order_by), each
/// with that field too, one of [`keys`](World::keys) values), each handling's duration
/// ([`handler_ms`](World::handler_ms)); faults are drawn only when asked
/// ([`random_faults`](World::random_faults)).
///
/// Consumers are configured as `Config::new("s", "g", "c<i>")` with a 100 ms beat,
/// `min_idle` 1 s, `read_grace` 1 s, the group created at `0` and re-created if it goes,
/// reconnects after 20–500 ms, entries moved to the dead-letter stream `dl` after 5
/// deliveries, 4 KiB reads, one entry in hand at a time unless
/// [`concurrency`](World::concurrency) says more, ordered by key if
/// [`order_by`](World::order_by) says so, acks waiting for the replica if
/// [`ack_wait`](World::ack_wait) says so; [`configure`](World::configure) changes any of it.
/// The producer adds each entry with `XADD` on a connection of its own, confirming them with
/// `WAIT 1` if [`confirm_adds`](World::confirm_adds) says so.
///
/// With many entries in hand, each handling has its own time and verdict, and verdicts reach
/// the consumer as handlings finish (in that order, by id). With an order by key, the checks
/// also hold the consumers to [`OrderBy`](pelican::OrderBy)'s promise (see
/// [`Violation::KeyInHandTwice`](super::Violation::KeyInHandTwice) and
/// [`Violation::OutOfOrder`](super::Violation::OutOfOrder)).
#[derive(Clone)]
pub struct World {
    pub(crate) seed: u64,
    pub(crate) consumers: usize,
    pub(crate) server: SimOptions,
    pub(crate) entries: Option<Vec<NewEntry>>,
    pub(crate) faults: Vec<(u64, Fault)>,
    pub(crate) random_faults: Vec<FaultKind>,
    pub(crate) fault_gap_ms: (u64, u64),
    pub(crate) phase_ms: u64,
    pub(crate) deadline_ms: u64,
    pub(crate) handler_ms: (u64, u64),
    pub(crate) configure: Option<Configure>,
    pub(crate) trace: bool,
    pub(crate) concurrency: u32,
    pub(crate) order_by: Option<Vec<u8>>,
    pub(crate) keys: u32,
    pub(crate) ack_wait: Option<AckWait>,
    pub(crate) confirm_adds_ms: Option<u64>,
}

/// The most consumers a world runs.
const MAX_CONSUMERS: usize = 64;
/// The longest phase or deadline: a year of virtual time (the clock stays far from any
/// overflow of `Instant`).
const MAX_MS: u64 = 365 * 24 * 3600 * 1000;
/// How many key values drawn entries carry, by default.
const DEFAULT_KEYS: u32 = 4;
/// The most key values drawn entries carry.
const MAX_KEYS: u32 = 1_000_000;

impl World {
    /// A world drawn from `seed` (see [`World`]): no faults until you add some.
    pub fn new(seed: u64) -> World {
        let mut setup = Rng::new(seed, rng::SETUP);
        let server = match setup.below(4) {
            0 => SimOptions::redis62(),
            1 => SimOptions::redis70(),
            2 => SimOptions::valkey81(),
            _ => SimOptions::redis810(),
        };
        World {
            seed,
            consumers: 2 + setup.below(3) as usize,
            server,
            entries: None,
            faults: Vec::new(),
            random_faults: Vec::new(),
            fault_gap_ms: (100, 900),
            phase_ms: 8_000,
            deadline_ms: 120_000,
            handler_ms: (0, 30),
            configure: None,
            trace: false,
            concurrency: 1,
            order_by: None,
            keys: DEFAULT_KEYS,
            ack_wait: None,
            confirm_adds_ms: None,
        }
    }

    /// Runs `n` consumers, `c0` … (1 to 64).
    #[must_use]
    pub fn consumers(mut self, n: usize) -> World {
        self.consumers = n.clamp(1, MAX_CONSUMERS);
        self
    }

    /// Lets each consumer hold up to `n` entries in hand at once
    /// ([`Config::concurrency`](pelican::Config::concurrency); 1 to
    /// [`MAX_CONCURRENCY`](pelican::MAX_CONCURRENCY), default 1). Each handling takes its own
    /// time and gets its own verdict; a crash, a death or an abandon drops every entry in
    /// hand, a stop waits for them all, a slow or failing handler is one handling's.
    #[must_use]
    pub fn concurrency(mut self, n: u32) -> World {
        self.concurrency = n.clamp(1, pelican::MAX_CONCURRENCY);
        self
    }

    /// Has each consumer order entries by the value of `field`
    /// ([`Config::order_by`](pelican::Config::order_by)): never two entries of one key in
    /// hand at once, each key's entries handed out in the order read. Entries drawn from the
    /// seed then carry `field` with one of [`keys`](World::keys) values (`k0`, `k1`, …); give
    /// your own entries the field yourself. (For a key function, use
    /// [`configure`](World::configure) with
    /// [`Config::order_by_key`](pelican::Config::order_by_key): the checks use whatever
    /// order each consumer's configuration has.)
    #[must_use]
    pub fn order_by(mut self, field: impl AsRef<[u8]>) -> World {
        self.order_by = Some(field.as_ref().to_vec());
        self
    }

    /// How many distinct values of the [`order_by`](World::order_by) field the entries drawn
    /// from the seed carry (default 4; 1 to 1,000,000): few keys, long runs of one key.
    #[must_use]
    pub fn keys(mut self, n: u32) -> World {
        self.keys = n.clamp(1, MAX_KEYS);
        self
    }

    /// Simulates this server ([`SimOptions::redis62`], [`SimOptions::redis70`],
    /// [`SimOptions::valkey81`], [`SimOptions::redis810`] (the Redis 8 dialect), or your
    /// own).
    #[must_use]
    pub fn server(mut self, options: SimOptions) -> World {
        self.server = options;
        self
    }

    /// Gives the server a replica that copies it every `lag_ms` ([`SimOptions::with_replica`]),
    /// which a [`Fault::Failover`](super::Fault::Failover) promotes: what the master took
    /// since its replica's last copy is then lost (up to `lag_ms` of writes, more after a
    /// [`Fault::ReplicaLinkDown`](super::Fault::ReplicaLinkDown)). A world with failovers or
    /// replica link faults (scheduled or drawn) and no replica gets one 100 ms behind.
    #[must_use]
    pub fn replica_lag(mut self, lag_ms: u64) -> World {
        self.server.replica_lag_ms = Some(lag_ms);
        self
    }

    /// Has each consumer wait for its acks to reach the replica
    /// ([`Config::ack_wait`](pelican::Config::ack_wait)): `WAIT` (or `WAITAOF`) after each
    /// batch of acks and dead-letter moves, so that a failover loses fewer of them (fewer
    /// entries handled twice), at the cost of the wait. Set before
    /// [`configure`](World::configure), which may change it; written in the replay.
    #[must_use]
    pub fn ack_wait(mut self, wait: AckWait) -> World {
        self.ack_wait = Some(wait);
        self
    }

    /// Has the producer confirm its adds: after the entries it adds at one moment it sends
    /// `WAIT 1 timeout_ms` and adds nothing more until the answer (entries due meanwhile
    /// wait). Entries the answer counts as on the replica are
    /// [`confirmed`](super::EntryReport::confirmed), and the check holds that a failover
    /// never loses one ([`Violation::ConfirmedLost`](super::Violation::ConfirmedLost)).
    /// Without a replica nothing is confirmed (and the producer waits out every timeout).
    #[must_use]
    pub fn confirm_adds(mut self, timeout_ms: u64) -> World {
        self.confirm_adds_ms = Some(timeout_ms.max(1));
        self
    }

    /// The entries to add, instead of the stream drawn from the seed.
    #[must_use]
    pub fn entries(mut self, entries: impl IntoIterator<Item = NewEntry>) -> World {
        self.entries = Some(entries.into_iter().collect());
        self
    }

    /// Adds one entry to the list (starting an empty list if the stream was to be drawn).
    #[must_use]
    pub fn entry(mut self, entry: NewEntry) -> World {
        self.entries.get_or_insert_with(Vec::new).push(entry);
        self
    }

    /// Schedules `fault` at `at_ms` (virtual). Faults due at the same moment happen in the
    /// order they were scheduled, after the entries due then are added.
    #[must_use]
    pub fn fault(mut self, at_ms: u64, fault: Fault) -> World {
        self.faults.push((at_ms, fault));
        self
    }

    /// Schedules each `(at_ms, fault)`.
    #[must_use]
    pub fn faults(mut self, faults: impl IntoIterator<Item = (u64, Fault)>) -> World {
        self.faults.extend(faults);
        self
    }

    /// Also draws faults of these kinds from the seed during [`phase_ms`](World::phase_ms):
    /// the first 200–600 ms in, then one every [`fault_gap_ms`](World::fault_gap_ms), each
    /// of a kind picked uniformly (list a kind twice to draw it twice as often) with its
    /// parameters drawn. The report's [`world`](super::Report::world) has them written out.
    #[must_use]
    pub fn random_faults(
        mut self,
        kinds: impl IntoIterator<Item = impl std::borrow::Borrow<FaultKind>>,
    ) -> World {
        self.random_faults = kinds.into_iter().map(|k| *k.borrow()).collect();
        self
    }

    /// The time between two random faults: drawn in `min_ms..max_ms` (default 100–900).
    #[must_use]
    pub fn fault_gap_ms(mut self, min_ms: u64, max_ms: u64) -> World {
        self.fault_gap_ms = (min_ms.max(1), max_ms.max(min_ms.max(1)));
        self
    }

    /// How long the eventful part lasts (default 8,000 ms; at most a year): the drawn
    /// entries (about 18 a second, 100,000 at most) and random faults happen before it, and
    /// the run is judged settled only after it (and after the last entry and scheduled fault).
    #[must_use]
    pub fn phase_ms(mut self, ms: u64) -> World {
        self.phase_ms = ms.min(MAX_MS);
        self
    }

    /// When the run gives up waiting for quiescence (default 120,000 virtual ms; at most a
    /// year): a world not settled by then fails its check with
    /// [`Violation::NoQuiescence`](super::Violation::NoQuiescence).
    #[must_use]
    pub fn deadline_ms(mut self, ms: u64) -> World {
        self.deadline_ms = ms.min(MAX_MS);
        self
    }

    /// How long a handling takes, unless a fault or the handler
    /// ([`HandlerCtx::takes`](super::HandlerCtx::takes)) says otherwise: drawn in
    /// `min_ms..max_ms` (default 0–30).
    #[must_use]
    pub fn handler_ms(mut self, min_ms: u64, max_ms: u64) -> World {
        self.handler_ms = (min_ms, max_ms.max(min_ms));
        self
    }

    /// Changes each consumer's configuration after the kit's own settings (keep the stream
    /// and group names the same for all; the kit reads the stream, group, dead-letter stream,
    /// `max_deliveries` and `min_idle` from the first consumer's).
    #[must_use]
    pub fn configure(mut self, change: impl Fn(Config) -> Config + Send + Sync + 'static) -> World {
        self.configure = Some(Arc::new(change));
        self
    }

    /// Keeps the story of the run, line by line (what each consumer writes, reads, handles
    /// and settles, each fault), in [`Report::trace`](super::Report::trace): to read why a
    /// world failed.
    #[must_use]
    pub fn trace(mut self, on: bool) -> World {
        self.trace = on;
        self
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// How many consumers it runs.
    pub fn consumer_count(&self) -> usize {
        self.consumers
    }

    /// The server's options.
    pub fn server_options(&self) -> &SimOptions {
        &self.server
    }

    /// The entries given, or `None` when they are drawn from the seed.
    pub fn given_entries(&self) -> Option<&[NewEntry]> {
        self.entries.as_deref()
    }

    /// The faults scheduled (not those drawn at random).
    pub fn scheduled_faults(&self) -> &[(u64, Fault)] {
        &self.faults
    }

    /// The kinds of faults drawn at random.
    pub fn random_fault_kinds(&self) -> &[FaultKind] {
        &self.random_faults
    }

    /// How many entries each consumer may hold in hand at once (as set by
    /// [`concurrency`](World::concurrency), before any [`configure`](World::configure)).
    pub fn max_in_hand(&self) -> u32 {
        self.concurrency
    }

    /// What each consumer's acks wait for, if [`ack_wait`](World::ack_wait) set it.
    pub fn acks_wait_for(&self) -> Option<AckWait> {
        self.ack_wait
    }

    /// The producer's `WAIT` timeout, if it [confirms its adds](World::confirm_adds).
    pub fn adds_confirmed_within_ms(&self) -> Option<u64> {
        self.confirm_adds_ms
    }

    /// The field consumers order entries by, if [`order_by`](World::order_by) set one.
    pub fn ordered_by(&self) -> Option<&[u8]> {
        self.order_by.as_deref()
    }

    /// How many key values drawn entries carry ([`keys`](World::keys)).
    pub fn key_count(&self) -> u32 {
        self.keys
    }

    /// A world decoded from arbitrary bytes, for fuzzing (`cargo fuzz`): any input is a valid
    /// world, and similar inputs make similar worlds. The first 8 bytes are the seed
    /// (little-endian, missing bytes 0); the 9th says how the consumers run: bits 0–1 how
    /// many (1–4), bits 2–3 their [`concurrency`](World::concurrency) (1, 2, 8 or 3), bits 4–5
    /// their order (none, or by a field `k` with 1, 3 or 8 [`keys`](World::keys)), bits 6–7
    /// are the fuzz target's (`01`: its handler commits, [`World::commits_from_bytes`]); the
    /// 10th is the server's flavor; then each 4 bytes are a fault: its kind (224 to 253:
    /// [`Fault::Pause`] when even, [`Fault::CutAfterCommit`] when odd; any other value one
    /// of the first 14 kinds of [`FaultKind::ALL`], modulo 14, as before those two came: the
    /// inputs kept from then mean what they meant), its consumer, a parameter, and the time
    /// since the previous fault in units of 8 ms.
    /// Entries are drawn from the seed for 2 s ([`phase_ms`](World::phase_ms) 2,000).
    ///
    /// ```
    /// use pelican::Verdict;
    /// use pelican_sim::kit::World;
    ///
    /// // In a fuzz target: fuzz_target!(|data: &[u8]| { … });
    /// let data = [7, 0, 0, 0, 0, 0, 0, 0, 2, 1, 0, 1, 200, 40];
    /// let report = World::from_bytes(&data).run((), |_, _, _| Verdict::Ack);
    /// if let Err(failure) = report.check() {
    ///     panic!("{failure}");
    /// }
    /// ```
    pub fn from_bytes(data: &[u8]) -> World {
        let mut seed = [0u8; 8];
        let n = data.len().min(8);
        seed[..n].copy_from_slice(&data[..n]);
        let rest = data.get(8..).unwrap_or_default();
        let byte = |i: usize| rest.get(i).copied().unwrap_or(0);
        let server = match byte(1) % 4 {
            0 => SimOptions::redis62(),
            1 => SimOptions::redis70(),
            2 => SimOptions::valkey81(),
            _ => SimOptions::redis810(),
        };
        let how = byte(0);
        let mut world = World::new(u64::from_le_bytes(seed))
            .consumers(1 + usize::from(how & 3))
            .concurrency([1, 2, 8, 3][usize::from((how >> 2) & 3)])
            .server(server)
            .phase_ms(2_000);
        if let Some(keys) = [None, Some(1), Some(3), Some(8)][usize::from((how >> 4) & 3)] {
            world = world.order_by("k").keys(keys);
        }
        let mut at = 0u64;
        for record in rest.get(2..).unwrap_or_default().chunks_exact(4) {
            let [kind, consumer, param, gap] = [record[0], record[1], record[2], record[3]];
            at += u64::from(gap) * 8;
            let consumer = usize::from(consumer);
            let param = u64::from(param);
            let fault = match if (224..=253).contains(&kind) { 14 + kind % 2 } else { kind % 14 } {
                0 => Fault::Crash { consumer, restart_ms: 50 + param * 10 },
                1 => Fault::Death { consumer },
                2 => Fault::Disconnect { consumer },
                3 => Fault::SlowHandler { consumer, ms: param * 12 },
                4 => Fault::FailingHandler { consumer },
                5 => Fault::DeadLetterVerdict { consumer },
                6 => Fault::DeletePending { pick: param as u32 },
                7 => Fault::Trim { count: 1 + (param % 5) as u32 },
                8 => Fault::DestroyGroup,
                9 => Fault::Stop { consumer, restart_ms: 50 + param * 4 },
                10 => Fault::Abandon { consumer, restart_ms: 50 + param * 4 },
                11 => Fault::ServerRestart { down_ms: param * 8 },
                // Even: the old master's clients cut off; odd: it stays reachable a while.
                12 => Fault::Failover { stale_ms: (param % 2) * param * 8 },
                13 => Fault::ReplicaLinkDown { ms: param * 16 },
                // Past the kit's min_idle of 1 s.
                14 => Fault::Pause { consumer, ms: 1_000 + param * 16 },
                _ => Fault::CutAfterCommit { consumer },
            };
            world = world.fault(at, fault);
        }
        world
    }

    /// Whether the kit fuzz target's handler commits for these bytes (bits 6–7 of the 9th
    /// byte `01`, see [`from_bytes`](World::from_bytes)): each entry then an
    /// [`Verdict::Commit`](pelican::Verdict::Commit) of `XADD out * input <id>` and
    /// `INCRBY n 1`, else [`Verdict::Ack`](pelican::Verdict::Ack).
    pub fn commits_from_bytes(data: &[u8]) -> bool {
        data.get(8).is_some_and(|b| b & 0xc0 == 0x40)
    }
}

/// The name of a preset the options are, if they are one.
fn preset(options: &SimOptions) -> Option<&'static str> {
    [
        (SimOptions::redis62(), "SimOptions::redis62()"),
        (SimOptions::redis70(), "SimOptions::redis70()"),
        (SimOptions::valkey81(), "SimOptions::valkey81()"),
        (SimOptions::redis810(), "SimOptions::redis810()"),
    ]
    .into_iter()
    .find(|(o, _)| o == options)
    .map(|(_, name)| name)
}

/// The server's flavor in a few words.
pub(crate) fn flavor(options: &SimOptions) -> String {
    format!("{} {}", options.server_name, options.server_version)
}

/// Writes field/value pairs as Rust: strings when they are UTF-8, else byte strings.
fn fields_code(fields: &[(Vec<u8>, Vec<u8>)]) -> String {
    let utf8 = fields.iter().all(|(n, v)| std::str::from_utf8(n).is_ok() && std::str::from_utf8(v).is_ok());
    let one = |b: &[u8]| {
        if utf8 {
            format!("{:?}", String::from_utf8_lossy(b))
        } else {
            format!("&b\"{}\"[..]", b.escape_ascii())
        }
    };
    let pairs: Vec<String> = fields.iter().map(|(n, v)| format!("({}, {})", one(n), one(v))).collect();
    format!("[{}]", pairs.join(", "))
}

impl fmt::Display for World {
    /// The Rust code that builds this world again (`use pelican_sim::kit::*;` and
    /// `pelican_sim::SimOptions` in scope); a world changed by [`World::configure`] needs that
    /// call added back by hand.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let defaults = World::new(self.seed);
        write!(f, "World::new({})", self.seed)?;
        if self.consumers != defaults.consumers {
            write!(f, "\n    .consumers({})", self.consumers)?;
        }
        // A preset with a replica is written as the preset and `.replica_lag(…)`.
        let lag = self.server.replica_lag_ms;
        let server = SimOptions { replica_lag_ms: None, ..self.server.clone() };
        match preset(&server) {
            Some(_) if server == defaults.server => {}
            Some(name) => write!(f, "\n    .server({name})")?,
            None => write!(f, "\n    .server({:?})", server)?,
        }
        if let Some(lag) = lag {
            write!(f, "\n    .replica_lag({lag})")?;
        }
        if self.phase_ms != defaults.phase_ms {
            write!(f, "\n    .phase_ms({})", self.phase_ms)?;
        }
        if self.deadline_ms != defaults.deadline_ms {
            write!(f, "\n    .deadline_ms({})", self.deadline_ms)?;
        }
        if self.handler_ms != defaults.handler_ms {
            write!(f, "\n    .handler_ms({}, {})", self.handler_ms.0, self.handler_ms.1)?;
        }
        if self.concurrency != defaults.concurrency {
            write!(f, "\n    .concurrency({})", self.concurrency)?;
        }
        if let Some(field) = &self.order_by {
            match std::str::from_utf8(field) {
                Ok(text) => write!(f, "\n    .order_by({text:?})")?,
                Err(_) => write!(f, "\n    .order_by(&b\"{}\"[..])", field.escape_ascii())?,
            }
        }
        if self.keys != defaults.keys {
            write!(f, "\n    .keys({})", self.keys)?;
        }
        match self.ack_wait {
            None => {}
            Some(AckWait::Replicas { replicas, timeout }) => write!(
                f,
                "\n    .ack_wait(pelican::AckWait::Replicas {{ replicas: {replicas}, timeout: \
                 std::time::Duration::from_millis({}) }})",
                timeout.as_millis()
            )?,
            Some(AckWait::Aof { local, replicas, timeout }) => write!(
                f,
                "\n    .ack_wait(pelican::AckWait::Aof {{ local: {local}, replicas: {replicas}, timeout: \
                 std::time::Duration::from_millis({}) }})",
                timeout.as_millis()
            )?,
            Some(other) => write!(f, "\n    .ack_wait({other:?})")?,
        }
        if let Some(ms) = self.confirm_adds_ms {
            write!(f, "\n    .confirm_adds({ms})")?;
        }
        if let Some(entries) = &self.entries {
            f.write_str("\n    .entries([")?;
            for e in entries {
                write!(f, "\n        NewEntry::new({}, {}),", e.at_ms, fields_code(&e.fields))?;
            }
            f.write_str("\n    ])")?;
        }
        for (at, fault) in &self.faults {
            write!(f, "\n    .fault({at}, Fault::{fault:?})")?;
        }
        if !self.random_faults.is_empty() {
            let kinds: Vec<String> = self.random_faults.iter().map(|k| format!("FaultKind::{k:?}")).collect();
            write!(f, "\n    .random_faults([{}])", kinds.join(", "))?;
            if self.fault_gap_ms != defaults.fault_gap_ms {
                write!(f, "\n    .fault_gap_ms({}, {})", self.fault_gap_ms.0, self.fault_gap_ms.1)?;
            }
        }
        if self.configure.is_some() {
            f.write_str("\n    .configure(/* as in the original world */)")?;
        }
        Ok(())
    }
}

impl fmt::Debug for World {
    /// As [`Display`](fmt::Display): the code that builds it again (so that a property
    /// test's shrunk input prints as a replay).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
