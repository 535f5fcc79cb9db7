//! The consumer-group loop as a state machine: drain own pending list, reclaim idle entries,
//! park for new ones, settle each by the application's verdict.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use crate::acks::Acks;
use crate::backoff::Backoff;
use crate::cluster;
use crate::commands;
use crate::commit;
use crate::config::{AckWait, Config, ConfigError, GroupGone, Protocol};
use crate::dead_letter::{self, Job};
use crate::decode::{Budget, DecodeError, Decoder, Frame, Value};
use crate::dialect::{Dialect, Hello};
use crate::encode::Decimal;
use crate::entry::{Entry, Source, Verdict};
use crate::error::{is_group_gone, is_transient, Command, Error};
use crate::held::{key_hash, HeldId, HeldIds, KeyHasher};
use crate::in_flight::{HealthPart, InFlight, Pipeline, Sent};
use crate::lease;
use crate::notice::{DeadLetterReason, GroupHealth, Notice, OldestPending};
use crate::pace::Pace;
use crate::release;
use crate::reply::{self, Role};
use crate::stats::{Snapshot, Stats};
use crate::stream::{Next, Stream, CURSOR_START, DRAIN_START};
use crate::stream_reply::{self, Item, Span};
use crate::twins::{Outcome, Twins};

/// What the consumer has to tell its driver.
#[derive(Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// An entry for the application. It is *in hand* until [`Consumer::settle`] is called
    /// with its id; up to [`Config::concurrency`] entries are in hand at once (one, by
    /// default), and with [`Config::order_by`] never two of one key.
    Entry(Entry),
    /// Something happened that needs no answer (connected, a connect failed or a
    /// connection lost with the reason and the retry delay, entries reclaimed, a lease lost,
    /// a dead letter, a smaller read, the group's health): for logs and metrics.
    Notice(Notice),
    /// [`Consumer::stop`] has been honored: no entry is in hand and every earned ack is
    /// confirmed (or [`Consumer::abandon`] gave them up). Close the connection; the consumer
    /// does nothing more.
    Stopped,
}

/// A consumer-group consumer without I/O.
///
/// # Driving it
///
/// The driver owns the socket and the clock. Methods fall in four groups:
///
/// - **Connection**: [`on_connected`](Self::on_connected) when a fresh connection is up,
///   [`on_disconnected`](Self::on_disconnected) when it is lost or a connect attempt failed.
/// - **Input**: [`handle_input`](Self::handle_input) with bytes read from the socket,
///   [`handle_timeout`](Self::handle_timeout) when [`poll_timeout`](Self::poll_timeout) passes.
/// - **Application**: [`settle`](Self::settle) with the verdict on an entry in hand (by id),
///   [`stop`](Self::stop) to finish, [`abandon`](Self::abandon) to finish without waiting on
///   the server.
/// - **Output**: [`poll_transmit`](Self::poll_transmit) / [`advance_transmit`](Self::advance_transmit)
///   for bytes to write, [`poll_event`](Self::poll_event) for entries, notices and `Stopped`,
///   [`poll_timeout`](Self::poll_timeout) for the next deadline.
///
/// After every call of the first three groups the driver MUST drain the outputs: write what
/// `poll_transmit` gives, handle every `poll_event`, and re-arm its timer from `poll_timeout`.
/// Handing out an entry can queue bytes too (with [`Config::concurrency`] above 1, the next
/// read once slots are free and nothing is buffered): look at `poll_transmit` again after the
/// events, as the example in the crate docs does.
/// A driver SHOULD keep doing so while the application works on an entry (reading, writing,
/// and calling `handle_timeout` at `poll_timeout`): that is what sends earned acks within
/// [`Config::ack_delay`] and keeps the entries in hand leased. A driver that cannot (a handler
/// that blocks its thread) still gets each ack out at the next settle, but a handler running
/// longer than `min_idle` can then lose its entry to a peer, which handles it too.
///
/// An `Err` from `handle_input` or `handle_timeout` means the connection is done: the driver
/// MUST close it. If [`Error::is_fatal`] is false the consumer has already scheduled a
/// reconnect for `poll_timeout`; a fatal error is sticky and returned again by later calls.
///
/// # Leases, delivery counts, dead letters, big entries
///
/// - Entries read but not yet settled stay idle on the server, where a peer's `XAUTOCLAIM`
///   takes them after `min_idle`. So each is leased: before an entry read (or renewed) more
///   than [`Config::lease_threshold`] ago is handed out — and, while a driver keeps driving,
///   as the lease of buffered entries and those in hand runs out — the consumer renews
///   them all with one `XCLAIM … JUSTID` that skips any a peer took meanwhile. Those are
///   dropped unhandled ([`Notice::LeaseLost`]). Reads also ask for fewer entries when
///   handlers are slow, so that a read is handed out well within the lease.
/// - Every entry carries its delivery count ([`Entry::deliveries`]): 1 for a new entry; for
///   drained and reclaimed ones, from an `XPENDING` sent with (drain) or right after (claim)
///   the read. Past [`Config::max_deliveries`] an entry is not handed out but moved to
///   [`Config::dead_letter`] ([`Notice::DeadLettered`]), as is one given
///   [`Verdict::DeadLetter`].
/// - Entries read but dropped unhandled — buffered at a stop, or at a lost connection — get
///   their delivery counts given back (`XCLAIM … JUSTID RETRYCOUNT n IDLE ms`, owner-checked),
///   so that a restart's drain, which counts them again, counts each handling once (on Redis
///   8.8+, those surely still this consumer's are released instead, `XNACK … SILENT`: any
///   consumer's next read takes them at once; see [`Dialect`]). An entry
///   in hand when the process dies keeps the count of that delivery: a handler that crashes
///   the process on an entry still brings it to the cap.
/// - A read reply that outgrows [`Config::read_bytes`] with more than one entry is skipped as
///   it arrives (nothing of it is kept) and read again with fewer entries; later reads ask
///   for as many as fit ([`Notice::ReadShrunk`]). Only a single entry larger than
///   [`Limits::max_frame`](crate::Limits::max_frame) is an error ([`Error::EntryTooLarge`]).
#[derive(Debug)]
pub struct Consumer {
    config: Config,
    // ---- the connection ----
    link: Link,
    out: BytesMut,
    decoder: Decoder,
    in_flight: Pipeline,
    /// How much of `out` is commands already tracked: what follows is the command being
    /// tracked (see `track`).
    tracked_upto: usize,
    backoff: Backoff,
    connected_before: bool,
    /// The server has answered on this connection: it is up and speaks RESP
    /// ([`Notice::Connected`] is told then, not at the TCP connect).
    heard: bool,
    /// A connection was announced before (the next one is a reconnect).
    announced_before: bool,
    /// The cluster node a `MOVED` named, where the next connection goes (see
    /// [`Consumer::redirect`]).
    redirect: Option<(String, u16)>,
    /// The redirect was an `ASK`: the streams' slot is migrating to that node, which serves
    /// a command for it only right after `ASKING`.
    asking: bool,
    /// The server is a cluster node: every key a command names must share its streams' slot.
    cluster: bool,
    /// The stream verbs spoken on this connection (classic until the server's `HELLO` says
    /// more; kept from the last connection meanwhile).
    dialect: Dialect,
    /// The server as `HELLO` named it (`redis 8.10.2`), for errors.
    server: String,
    /// The `HELLO` that tells the dialect and the node's role (or the `ROLE` that names a
    /// replica's master) is in flight: nothing else is sent before its answer, and
    /// [`Notice::Connected`] waits for it.
    vetting: bool,
    /// The node last found to be a replica, as told ([`Notice::NotMaster`]): told again
    /// only for another master, or after a connection that worked.
    told_not_master: Option<String>,
    /// The commit script's sha, once loaded on this connection.
    script: Option<Bytes>,
    /// The last `WAIT` ran out before the replicas had the acks (told once:
    /// [`Notice::AcksUnreplicated`]): until one makes it, each batch waits only a moment, so
    /// that a replica that is down does not stall every batch for the whole timeout.
    replicas_behind: bool,
    /// Looking for twins (see [`Config::allow_twins`]).
    twins: Twins,
    // ---- the streams ----
    /// The streams read, by index (an entry's, a command's); a removed one stays, inactive.
    streams: Vec<Stream>,
    /// Each stream's index by key, to route a read's entries.
    index: HashMap<Bytes, u32>,
    /// The streams read now, by index, in order: what a read of new entries names.
    active: Arc<[u32]>,
    /// Their keys as a command's bulk strings, one after the other (`reading[i]..reading[i +
    /// 1]` is `active[i]`'s), so that a read of every stream copies them at once.
    keys_wire: Vec<u8>,
    reading: Vec<usize>,
    /// Where the next read of new entries starts in `active`, turned at each read where the
    /// server caps a reply (`MAXCOUNT`/`MAXSIZE`), so that no stream is always left out.
    turn: usize,
    // ---- the application's hand ----
    /// Entries read, their delivery counts known, not yet handed out; dropped (they stay
    /// pending) on stop or link loss.
    buffer: VecDeque<Buffered>,
    /// Entries read whose delivery counts are still being asked for.
    staged: Option<Staged>,
    /// The entries handed out and not yet settled, at most `concurrency`.
    in_hand: Vec<InHand>,
    /// The ids of the entries in hand.
    held: HeldIds,
    /// The keys of the entries in hand, with [`Config::order_by`].
    keys_in_hand: HashSet<u64, KeyHasher>,
    /// Emptied id lists of answered `XACK`s, reused for the next acks.
    ack_pool: Vec<Acks>,
    /// When the oldest ack owed must be written.
    ack_due: Option<Instant>,
    /// The last read brought as many entries as it asked for (of some stream): more are
    /// likely waiting, so the next read goes out before this batch is all handed out.
    backlog: bool,
    pace: Pace,
    /// No entry buffered or in hand was read or last renewed before this: a floor that may
    /// lag (an entry gone since may have set it), so that the next renewal's time costs no
    /// walk of the buffer at every turn of the driver.
    lease_floor: Option<Instant>,
    // ---- the run ----
    notices: VecDeque<Notice>,
    stop: Stop,
    /// A fatal error found while the link still works: the consumer stops as for a stop
    /// (confirming earned acks), then fails with it.
    failing: Option<Error>,
    failed: Option<Error>,
    /// The latest time passed in, for the calls that take none.
    last_now: Option<Instant>,
    /// A call that takes no time (`stop`) sent the commands in flight after these many,
    /// dated by `last_now`.
    undated: Option<usize>,
    /// The health being gathered from its three replies, and of which stream.
    health: Option<(u32, GroupHealth)>,
    /// A read was answered: the server knows this consumer (it is made by its first read),
    /// so the group's health, asked from then on, counts it.
    read_answered: bool,
    /// The server refused the health commands: not asked again.
    health_refused: bool,
    /// Whether a clean stop still has to leave the groups ([`Config::leave_on_stop`]): set
    /// once the leaves are sent.
    leave_due: bool,
    /// The stop dropped a parked connection to leave the group on a new one.
    leaving_link: bool,
    /// Dead-letter moves or give-backs were queued since the last flush (a walk of every
    /// stream is then worth it; not at every turn).
    moves_owed: bool,
    /// Entries given `Retry` wait to be released, on some stream.
    releasing: bool,
    /// The leaves answered so far: entries still held where a stream's group was left, and
    /// the first refusal.
    left: (Option<u64>, Option<String>),
    stats: Stats,
}

#[derive(Debug, PartialEq, Eq)]
enum Link {
    /// Never connected: connect now.
    Fresh,
    Up,
    /// Lost: connect again at `retry_at`.
    Down {
        retry_at: Instant,
    },
    /// Stopped or failed: no point in connecting.
    Closed,
}

#[derive(Debug, PartialEq, Eq)]
enum Stop {
    Running,
    Stopping,
    Stopped { reported: bool },
}

/// An entry read and not yet handed out (its stream is the entry's).
#[derive(Debug)]
pub(crate) struct Buffered {
    pub(crate) entry: Entry,
    /// When the reply that delivered or last renewed it arrived.
    pub(crate) read_at: Instant,
    /// `read_at` + the lease: from then on it is renewed before it is handed out. Kept so
    /// that the hot path compares instants instead of subtracting them.
    due: Instant,
    /// Its key's hash, with [`Config::order_by`].
    key: Option<u64>,
}

/// An entry handed out and not yet settled.
#[derive(Debug)]
struct InHand {
    stream: u32,
    id: HeldId,
    /// Its key's hash, with [`Config::order_by`].
    key: Option<u64>,
    deliveries: u64,
    /// When its lease was last renewed; `None` once a peer has taken it (nothing to renew).
    read_at: Option<Instant>,
    handed_at: Instant,
}

/// Entries of a drain page or a reclaim, waiting for their delivery counts.
#[derive(Debug)]
struct Staged {
    stream: u32,
    /// `deliveries` is 0 until `XPENDING` names the entry.
    entries: Vec<Entry>,
    read_at: Instant,
    /// A reclaim's range may hold other entries of ours: it is paged; a drain page is exact.
    paged: bool,
}

/// Why a connection was lost, for its notice.
enum Lost {
    /// The node is not a master: what it is instead.
    NotMaster(String),
    Because(String),
}

/// How long an ack batch waits for the replicas while they are behind (the last wait ran
/// out): long enough for replicas that answer at once, short enough not to stall reads.
const REPLICAS_BEHIND_WAIT: Duration = Duration::from_millis(1);
/// The longest a parked read blocks while entries are in hand: how long their acks may wait
/// behind it when the stream is idle.
const PARK_IN_HAND: Duration = Duration::from_millis(50);
/// With many streams, how many `XAUTOCLAIM` sweeps a beat may bring at most: 1,000 idle
/// streams then cost the server about 8 commands a second beside the parked read, and a dead
/// peer's entries on a server without reads that claim (before Redis 8.4) wait up to
/// `beat × streams / 16` (125 s for 1,000 streams and a 2 s beat) rather than `min_idle`.
const SWEEPS_PER_BEAT: u32 = 16;
/// The same where reads claim idle entries themselves (Redis 8.4+): the sweeps only clear
/// the pending entries whose messages were deleted, which nothing waits for.
const SWEEPS_PER_BEAT_CLAIMING: u32 = 4;
/// The most streams one consumer reads: each read names every stream (and a parked read
/// cannot share its connection), so a command stays under about 100 KiB with keys of
/// ordinary length. More streams take more consumers (connections).
pub const MAX_STREAMS: usize = 4096;

impl Consumer {
    /// A consumer, disconnected: connect, then call [`on_connected`](Self::on_connected).
    pub fn new(config: Config) -> Result<Consumer, ConfigError> {
        config.validate()?;
        let mut streams = vec![Stream::new(config.stream.clone())];
        for key in &config.more_streams {
            if streams.iter().all(|s| s.key != key) {
                streams.push(Stream::new(key.clone()));
            }
        }
        let index = streams.iter().enumerate().map(|(i, s)| (s.key.clone(), i as u32)).collect();
        let mut consumer = Consumer {
            leave_due: config.leave_on_stop && !config.allow_twins,
            leaving_link: false,
            left: (None, None),
            moves_owed: false,
            releasing: false,
            decoder: Decoder::new(config.limits),
            backoff: Backoff::new(config.backoff_min, config.backoff_max, config.seed),
            pace: Pace::new(
                config.count,
                config.lease_threshold(),
                config.read_bytes.min(config.limits.max_frame),
                config.concurrency,
                config.start_count_in_force(),
            ),
            index,
            streams,
            active: Arc::from([]),
            keys_wire: Vec::new(),
            reading: Vec::new(),
            turn: 0,
            config,
            link: Link::Fresh,
            out: BytesMut::with_capacity(4096),
            in_flight: Pipeline::default(),
            buffer: VecDeque::new(),
            staged: None,
            in_hand: Vec::new(),
            held: HeldIds::default(),
            keys_in_hand: HashSet::default(),
            ack_pool: Vec::new(),
            ack_due: None,
            script: None,
            cluster: false,
            backlog: false,
            notices: VecDeque::new(),
            stop: Stop::Running,
            failing: None,
            failed: None,
            connected_before: false,
            heard: false,
            announced_before: false,
            redirect: None,
            asking: false,
            tracked_upto: 0,
            last_now: None,
            undated: None,
            read_answered: false,
            health: None,
            health_refused: false,
            twins: Twins::default(),
            dialect: Dialect::CLASSIC,
            server: String::new(),
            vetting: false,
            told_not_master: None,
            replicas_behind: false,
            lease_floor: None,
            stats: Stats::default(),
        };
        consumer.rebuild_active();
        Ok(consumer)
    }

    // ---- getters ------------------------------------------------------------------------

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Counters since creation.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Ids of the entries the application holds (handed out, not yet settled), oldest first
    /// unless some were settled out of order.
    pub fn in_hand(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        self.in_hand.iter().map(|h| self.held.id(h.id))
    }

    /// How many entries are read and waiting to be handed out.
    pub fn buffered(&self) -> usize {
        self.buffer.len() + self.staged.as_ref().map_or(0, |s| s.entries.len())
    }

    /// The stream verbs spoken on the current (or last) connection ([`Dialect`]).
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// True while a connection is up (between `on_connected` and its loss), whether or not
    /// the node has yet answered as a master ([`Snapshot::connected`] waits for that).
    pub fn is_connected(&self) -> bool {
        self.link == Link::Up
    }

    /// Connected, and the node vetted: commands may go out.
    fn ready(&self) -> bool {
        self.link == Link::Up && !self.vetting
    }

    /// The counters, the entries in hand and buffered, and whether connected, at once.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            stats: self.stats.clone(),
            in_hand: self.in_hand.len(),
            buffered: self.buffered(),
            connected: self.ready(),
            health: self.streams[0].last_health.clone(),
        }
    }

    /// Brings `last` up to date; true if anything changed. For a driver that publishes
    /// snapshots only when they change (compared without copying the counters first).
    pub fn refresh_snapshot(&self, last: &mut Snapshot) -> bool {
        let same = self.stats == last.stats
            && self.in_hand.len() == last.in_hand
            && self.buffered() == last.buffered
            && self.ready() == last.connected
            && self.streams[0].last_health == last.health;
        if !same {
            *last = self.snapshot();
        }
        !same
    }

    /// Where the next connection should go when the server is a cluster node that said the
    /// stream's slot is served elsewhere (`MOVED`), or is moving there (`ASK`: each command
    /// there then follows `ASKING`): a host as the cluster names it (empty:
    /// the host last connected to) and a port. `None`: the address configured. A connect
    /// that fails there forgets it (the configured address leads to the slot's owner again).
    pub fn redirect(&self) -> Option<(&str, u16)> {
        self.redirect.as_ref().map(|(host, port)| (host.as_str(), *port))
    }

    /// True if the driver should open a connection: at once before the first, else once
    /// `poll_timeout` has passed. False while connected, and once stopped or failed. True
    /// with a connection open, after [`stop`](Self::stop) dropped a parked one to leave the
    /// group: close it (without telling [`on_disconnected`](Self::on_disconnected)) and
    /// connect again.
    pub fn wants_connection(&self) -> bool {
        matches!(self.link, Link::Fresh | Link::Down { .. })
    }

    /// True if the driver should connect now: [`wants_connection`](Self::wants_connection)
    /// and the reconnect time (if any) has come.
    pub fn connect_due(&self, now: Instant) -> bool {
        match self.link {
            Link::Fresh => self.is_live(),
            Link::Down { retry_at } => self.is_live() && now >= retry_at,
            Link::Up | Link::Closed => false,
        }
    }

    /// True while parked: connected, caught up (nothing in hand, buffered or owed), waiting
    /// on the blocking read for new entries. A stop now ends at once.
    pub fn is_parked(&self) -> bool {
        self.link == Link::Up
            && self.in_hand.is_empty()
            && self.buffer.is_empty()
            && self.staged.is_none()
            && !self.streams.iter().any(Stream::owes_settles)
            && self.in_flight.len() == 1
            && self.in_flight.parked()
    }

    /// True once `Stopped` has been produced (or is ready for `poll_event`).
    pub fn is_stopped(&self) -> bool {
        matches!(self.stop, Stop::Stopped { .. })
    }

    /// The fatal error that finished the consumer, if one did.
    pub fn error(&self) -> Option<&Error> {
        self.failed.as_ref()
    }

    fn is_live(&self) -> bool {
        self.failed.is_none() && !self.is_stopped()
    }

    // ---- streams ------------------------------------------------------------------------

    /// The streams read now, and their keys encoded once for every read (after a change).
    fn rebuild_active(&mut self) {
        let active: Vec<u32> =
            (0..self.streams.len() as u32).filter(|&s| self.streams[s as usize].active).collect();
        self.keys_wire.clear();
        self.reading.clear();
        for &s in &active {
            self.reading.push(self.keys_wire.len());
            crate::encode::bulk_vec(&mut self.keys_wire, &self.streams[s as usize].key);
        }
        self.active = active.into();
        self.turn = 0;
    }

    /// The keys of the streams read, in the order they were added ([`Config::stream`] first).
    pub fn streams(&self) -> impl Iterator<Item = &Bytes> + '_ {
        self.streams.iter().filter(|s| s.active).map(|s| &s.key)
    }

    /// Reads `key` too, on the same connection: from the next read on (at once if parked:
    /// the parked read is not cut short, the stream joins within a beat), after draining its
    /// own pending entries, with its group created first where [`Config::create_group`] says
    /// so. Returns false, doing nothing, if it is read already, the consumer has
    /// [`MAX_STREAMS`] streams, or it is stopping. In a cluster every stream must hash to one
    /// slot (give them a hash tag: `{tenants}:a`); one that does not fails the consumer with
    /// [`Error::CrossSlot`] at its first read.
    pub fn add_stream(&mut self, key: impl Into<Bytes>) -> bool {
        let key = key.into();
        if self.stop != Stop::Running || !self.is_live() {
            return false;
        }
        let s = match self.index.get(&key[..]) {
            Some(&s) if self.streams[s as usize].active => return false,
            Some(&s) => s as usize,
            None if self.streams.iter().filter(|s| s.active).count() >= MAX_STREAMS => return false,
            None => {
                self.streams.push(Stream::new(key.clone()));
                self.index.insert(key, (self.streams.len() - 1) as u32);
                self.streams.len() - 1
            }
        };
        self.streams[s].active = true;
        self.rebuild_active();
        let stream = &mut self.streams[s];
        stream.restart_drain();
        stream.claim_at = None;
        // Made before its drain, which goes out once no read is parked (the answer to a
        // command sent now could wait a beat behind one).
        stream.make_group = self.config.create_group.is_some();
        if let (true, Some(now)) = (self.ready(), self.last_now) {
            self.pump(now);
        }
        true
    }

    /// Stops reading `key`: its entries buffered are given back (as at a stop), those in hand
    /// are settled as usual and what they earn is sent. Returns false if it is not read.
    /// Removing every stream leaves the consumer connected and idle, reading nothing.
    pub fn remove_stream(&mut self, key: &[u8]) -> bool {
        let Some(&s) = self.index.get(key) else { return false };
        let stream = &mut self.streams[s as usize];
        if !stream.active {
            return false;
        }
        stream.active = false;
        let (kept, dropped): (VecDeque<Buffered>, VecDeque<Buffered>) =
            self.buffer.drain(..).partition(|b| b.entry.stream != s);
        self.buffer = kept;
        stream.returns.extend(dropped);
        self.moves_owed = true;
        self.rebuild_active();
        if let Some(now) = self.last_now {
            self.pump(now);
        }
        true
    }

    // ---- connection ---------------------------------------------------------------------

    /// A fresh connection is up. Queues the handshake, whose `HELLO` tells the server's
    /// version and the node's role. Only once the node answers as a master (a replica is
    /// never read from: [`Error::NotMaster`]) come the group door, acks and dead-letter moves
    /// still owed, and the drain of the own pending list from the start: whatever this
    /// consumer held before (a crash, a lost connection) is handed out again at once.
    pub fn on_connected(&mut self, now: Instant) {
        self.tick(now);
        if !self.is_live() {
            return;
        }
        self.reset_link();
        if self.connected_before && !self.leaving_link {
            self.stats.reconnects += 1;
        }
        self.heard = false;
        self.connected_before = true;
        self.link = Link::Up;
        for command in commands::handshake(&mut self.out, &self.config) {
            self.track(Sent::Handshake(command), now);
        }
        // HELLO 3 tells the server's version and the node's role; in RESP2 a `HELLO` without
        // arguments asks them (and switches nothing).
        if self.config.protocol == Protocol::Resp2 {
            crate::encode::command(&mut self.out, &[b"HELLO"]);
            self.track(Sent::Handshake(Command::ServerInfo), now);
        }
        self.vetting = true;
    }

    /// The node answered the handshake as a master (or as a server that does not say):
    /// what goes out before the first read, then the drain.
    fn open(&mut self, now: Instant) {
        self.vetting = false;
        self.told_not_master = None;
        self.announce();
        if self.checks_twins() && !self.twins.vetted() {
            self.look_for_twins(now);
        }
        // Checked against the first stream: in a cluster all of them share its slot.
        let first = self.streams[0].key.clone();
        if let Some(key) = self.config.dead_letter.as_ref().filter(|_| self.stop == Stop::Running) {
            // Refused now (another cluster slot, an ACL) rather than at the first dead letter.
            let key = crate::config::key_for(key, &first);
            dead_letter::encode_check(&mut self.out, &self.config, &first, &key);
            self.track(Sent::DeadLetterCheck, now);
        }
        if let Some(keys) = self.config.commit_to.as_ref().filter(|_| self.stop == Stop::Running) {
            let keys: Vec<Bytes> = keys.iter().map(|k| crate::config::key_for(k, &first).into()).collect();
            commit::encode_check(&mut self.out, &self.config, &first, &keys);
            self.track(Sent::CommitCheck, now);
        }
        if self.config.commit_to.is_some() || self.streams.iter().any(|s| !s.commits.is_empty()) {
            self.load_script(now);
        }
        if self.config.create_group.is_some() && self.stop == Stop::Running {
            for s in 0..self.streams.len() {
                if self.streams[s].active {
                    self.streams[s].make_group = false;
                    self.send(Sent::CreateGroup(s as u32), now);
                }
            }
        }
        self.renew_in_hand(now);
        self.restart_drain();
        self.pump(now);
    }

    /// The connection was lost, or an attempt to connect failed. Commands in flight are
    /// forgotten (acks and dead-letter moves among them are kept and sent again: both are
    /// idempotent); entries read but not handed out stay pending on the server. A reconnect
    /// is scheduled, told as [`Notice::ConnectionLost`] or [`Notice::ConnectFailed`].
    ///
    /// After an `Err` from `handle_input`/`handle_timeout` the consumer has already done
    /// this; calling it again before the scheduled reconnect time changes nothing.
    pub fn on_disconnected(&mut self, now: Instant) {
        self.on_disconnected_because(now, "the connection closed");
    }

    /// [`on_disconnected`](Self::on_disconnected), saying why (an I/O error, a refused
    /// connect, a TLS failure…): the reason is carried by the notice it produces.
    pub fn on_disconnected_because(&mut self, now: Instant, reason: impl fmt::Display) {
        self.tick(now);
        if self.link != Link::Up {
            // A connect failed: the node a redirect named may be gone (a failover).
            self.redirect = None;
            self.asking = false;
        }
        let scheduled = matches!(self.link, Link::Down { retry_at } if now < retry_at);
        if self.is_live() && !scheduled {
            self.lose_link(now, Lost::Because(reason.to_string()));
        }
    }

    /// The driver learned where the server is now (a sentinel named a new master): the next
    /// connect is due at once rather than after the backoff. Does nothing unless waiting to
    /// reconnect.
    pub fn connect_now(&mut self, now: Instant) {
        if let Link::Down { retry_at } = &mut self.link {
            *retry_at = (*retry_at).min(now);
        }
    }

    // ---- input --------------------------------------------------------------------------

    /// Bytes read from the connection. An `Err` means the connection must be closed.
    pub fn handle_input(&mut self, bytes: &[u8], now: Instant) -> Result<(), Error> {
        self.tick(now);
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.link != Link::Up || self.is_stopped() {
            return Ok(());
        }
        self.decoder.extend(bytes);
        while self.link == Link::Up && !self.is_stopped() {
            let (frame, len) = match self.decoder.next_within(self.config.protocol, self.budget()) {
                Ok(None) => {
                    // A read being skipped: shrink now, so that even a reconnect (the skip
                    // outlasting the reply's deadline) reads less.
                    if let Some(completed) = self.decoder.skipping() {
                        self.pace.record_oversized(completed);
                    }
                    break;
                }
                Ok(Some((Frame::Push, _))) => continue,
                Ok(Some(frame)) => {
                    self.heard = true;
                    frame
                }
                Err(e) => {
                    let limits = self.config.limits;
                    return Err(self.fail(
                        now,
                        match e {
                            // The first words on a connection, and no server ever spoke
                            // RESP to this consumer: not a Redis server at all.
                            DecodeError::Invalid(_) if !self.heard && !self.announced_before => {
                                Error::NotRedis { said: first_line(bytes) }
                            }
                            // One did: a proxy's hiccup, a node being replaced; reconnect.
                            DecodeError::Invalid(_) if !self.heard => Error::Protocol {
                                detail: format!("not a Redis server? it answered \"{}\"", first_line(bytes)),
                            },
                            e => e.into_error(limits),
                        },
                    ));
                }
            };
            let Some(cmd) = self.in_flight.pop_front() else {
                let detail = "a reply arrived for no command".to_string();
                return Err(self.fail(now, Error::Protocol { detail }));
            };
            let outcome = match frame {
                Frame::Reply(value) => self.on_reply(cmd.sent, value, now),
                Frame::Raw { bytes, spans } => {
                    let outcome = self.on_entries(cmd.sent, cmd.sent_at, bytes, &spans, len, now);
                    self.decoder.reuse(spans);
                    outcome
                }
                Frame::Skipped { completed } => self.on_oversized(cmd.sent, completed, now),
                Frame::Push => Ok(()),
            };
            if let Err(e) = outcome {
                return Err(self.fail(now, e));
            }
            // Stop as soon as the last owed ack is confirmed, whatever else is buffered,
            // so that how the bytes were split cannot matter.
            self.finish_stop_if_clear();
        }
        self.pump(now);
        self.failed.clone().map_or(Ok(()), Err)
    }

    /// Call when `poll_timeout` has passed. A reply overdue past its deadline is an
    /// [`Error::Timeout`]: the connection must be closed. Otherwise sends what has come due:
    /// acks past [`Config::ack_delay`], lease renewals.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), Error> {
        self.tick(now);
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.link == Link::Up {
            let late = self.in_flight.iter().find(|c| c.deadline <= now).map(|c| c.sent.command());
            if let Some(command) = late {
                return Err(self.fail(now, Error::Timeout { command }));
            }
            if self.ack_due.is_some_and(|due| due <= now) {
                self.flush_acks(now);
            }
            self.renew_leases(now);
            self.pump(now);
        }
        self.failed.clone().map_or(Ok(()), Err)
    }

    // ---- application --------------------------------------------------------------------

    /// The application's verdict on the entry in hand with this `id` (from an
    /// [`Event::Entry`]), in any order. With many streams ([`Config::streams`]) two entries
    /// in hand may share an id (made in the same millisecond on two streams): settle them
    /// with [`settle_entry`](Self::settle_entry), or this settles the first. `Ack` earns an `XACK` (written within
    /// [`Config::ack_delay`]; at once after a slow handler when entries are handled one at a
    /// time); `Retry` leaves it pending; `DeadLetter` moves it to the dead-letter stream.
    /// `now` is the time of the settle (after the handler ran): it measures the handler and
    /// dates the commands it sends.
    ///
    /// Returns false, doing nothing, if no entry with this id is in hand (settled already,
    /// or given up by [`abandon`](Self::abandon)).
    pub fn settle(&mut self, id: &[u8], verdict: Verdict, now: Instant) -> bool {
        self.tick(now);
        let Some(i) = self.in_hand.iter().position(|h| self.held.id(h.id) == id) else { return false };
        self.settle_at(i, verdict, now)
    }

    /// [`settle`](Self::settle) for this entry (one this consumer handed out): by its stream
    /// and its id.
    pub fn settle_entry(&mut self, entry: &Entry, verdict: Verdict, now: Instant) -> bool {
        self.tick(now);
        let (s, id) = (entry.stream, entry.id());
        let Some(i) = self.in_hand.iter().position(|h| h.stream == s && self.held.id(h.id) == id) else {
            return false;
        };
        self.settle_at(i, verdict, now)
    }

    fn settle_at(&mut self, i: usize, verdict: Verdict, now: Instant) -> bool {
        let hand = self.in_hand.swap_remove(i);
        let stream = &mut self.streams[hand.stream as usize];
        stream.in_hand = stream.in_hand.saturating_sub(1);
        if let Some(key) = hand.key {
            self.keys_in_hand.remove(&key);
        }
        let took = now.saturating_duration_since(hand.handed_at);
        self.pace.record_handler(took);
        self.stats.handler_time.record(took);
        let s = hand.stream as usize;
        match verdict {
            Verdict::Ack => {
                // Unrenewed for `min_idle` (a handler that held up its driver) or renewed
                // too late: a peer's reclaim could have taken it.
                let exposed =
                    hand.read_at.map_or(true, |at| now.saturating_duration_since(at) >= self.config.min_idle);
                self.streams[s].acks.push_bulk(self.held.bulk(hand.id), exposed);
                self.ack_due.get_or_insert_with(|| now + self.config.ack_delay);
            }
            Verdict::Retry => {
                self.stats.retried += 1;
                let stream = &mut self.streams[s];
                stream.retried.note(self.held.to_bytes(hand.id));
                if self.dialect.release {
                    let (held, id) = (&self.held, hand.id);
                    let (bulk, owned) = (held.bulk(id), || held.to_bytes(id));
                    stream.releases.retry(&self.config, bulk, owned, hand.deliveries, hand.read_at, now);
                    self.releasing = true;
                }
            }
            Verdict::DeadLetter => {
                if self.config.dead_letter.is_none() {
                    let id = String::from_utf8_lossy(self.held.id(hand.id)).into_owned();
                    self.fail_after_acks(Error::NoDeadLetter { id });
                    self.pump(now);
                    return true;
                }
                let reason = DeadLetterReason::Verdict;
                let id = self.held.to_bytes(hand.id);
                self.streams[s].dead_letters.push(Job { id, deliveries: hand.deliveries, reason });
                self.moves_owed = true;
            }
            Verdict::Commit(writes) => {
                let id = self.held.to_bytes(hand.id);
                match writes.check(self.cluster.then_some(self.streams[s].slot)) {
                    Ok(()) => {
                        self.streams[s].commits.push(commit::Job { id, deliveries: hand.deliveries, writes });
                        self.ack_due.get_or_insert_with(|| now + self.config.ack_delay);
                    }
                    // Refused before it is sent; left pending, as a retry is.
                    Err(reason) => self.refuse_commit(s, id, reason),
                }
            }
        }
        self.held.tidy(self.in_hand.iter_mut().map(|h| &mut h.id));
        // One at a time, after a slow handler the next one is likely slow too, and its ack
        // would wait as long (a blocking driver writes nothing while a handler runs). With
        // many in hand the driver keeps driving: acks wait `ack_delay` to share an `XACK`.
        let slow = took >= self.config.ack_delay && self.config.concurrency == 1;
        if self.ack_due.is_some_and(|due| due <= now) || slow {
            self.flush_acks(now);
        }
        self.pump(now);
        true
    }

    /// Asks the consumer to stop. Honored between entries: nothing more is handed out, the
    /// entries in hand are settled first, earned acks (and dead-letter moves) are sent and
    /// confirmed, then [`Event::Stopped`] comes out. Entries read but not handed out are given
    /// back, for a peer's next reclaim (if connected: a stop does not wait for a connection
    /// for that). Then, holding nothing, it leaves the group
    /// ([`Config::leave_on_stop`]). Parked with nothing owed, it stops at once — or, to
    /// leave the group, drops the parked connection (which the server holds for up to a
    /// beat) and leaves on a new one: [`wants_connection`](Self::wants_connection) turns
    /// true; close the connection and connect again.
    pub fn stop(&mut self) {
        if self.stop == Stop::Running && self.is_live() {
            self.stop = Stop::Stopping;
            self.drop_buffer();
            if self.link != Link::Up {
                // Not worth waiting for a connection: the counts stay one higher.
                self.streams.iter_mut().for_each(|s| s.returns.clear());
            }
            match self.last_now {
                Some(now) => {
                    // Sent now, dated by the last call's time (maybe a long handler ago):
                    // their deadlines count from the next call's.
                    self.undated = Some(self.in_flight.len());
                    self.pump(now);
                }
                None => self.finish_stop_if_clear(),
            }
        }
    }

    /// Stops at once, without waiting on the server: for a stop that cannot wait, e.g. while
    /// the server is unreachable and [`stop`](Self::stop) would wait to confirm owed acks.
    /// The entries in hand, if any, are left unsettled (a later [`settle`](Self::settle) does
    /// nothing) and acks (and dead-letter moves) not yet confirmed are given up, counted in
    /// [`Stats::abandoned_acks`]: their entries stay pending on the server and come again, to
    /// this consumer's drain when it restarts or to a peer's reclaim. Nothing is lost; some
    /// entries may be handled twice. [`Event::Stopped`] comes out next.
    ///
    /// Where the connection is up and no read is parked on it, the entries read but not
    /// handed out are given back as a stop gives them back (a peer's next reclaim takes
    /// them): what [`poll_transmit`](Self::poll_transmit) then holds is a parting write, to
    /// write if it can be without waiting, before closing the connection. Its answer is not
    /// waited for (nor counted). The entries in hand are not given back: their handlers may
    /// still be working on them.
    pub fn abandon(&mut self) {
        if !self.is_live() {
            // Finished already (stopped, or failed with entries in hand): forget them.
            self.in_hand.clear();
            self.streams.iter_mut().for_each(|s| s.in_hand = 0);
            self.keys_in_hand.clear();
            self.held.clear();
            return;
        }
        // Behind a parked read a parting write would wait up to a beat on the server, and be
        // dropped with the connection: not worth it. The bytes not yet written stay ahead of
        // it (a command half written must be finished first).
        let parting = (self.ready() && !self.parked_read_in_flight())
            .then_some(self.last_now)
            .flatten()
            .map(|now| (now, std::mem::take(&mut self.out)));
        self.reset_link(); // acks in flight join the owed ones
        if let Some((now, out)) = parting {
            self.out = out;
            self.drop_buffer();
            self.give_back(now);
            self.in_flight.drain().for_each(drop); // no answer will be read
            self.tracked_upto = 0;
        }
        for stream in &mut self.streams {
            let owed = stream.acks.len() + stream.dead_letters.len() + stream.commits.len();
            self.stats.abandoned_acks += owed as u64;
            stream.acks.clear();
            stream.dead_letters.clear();
            stream.commits.clear();
            stream.returns.clear();
        }
        self.ack_due = None;
        self.buffer.clear();
        self.in_hand.clear();
        self.streams.iter_mut().for_each(|s| s.in_hand = 0);
        self.keys_in_hand.clear();
        self.held.clear();
        self.link = Link::Closed;
        self.stop = Stop::Stopped { reported: false };
        if let Some(error) = self.failing.take() {
            self.stats.errors += 1;
            self.failed = Some(error);
        }
    }

    // ---- output -------------------------------------------------------------------------

    /// Bytes to write to the connection, if any. Write them, then call
    /// [`advance_transmit`](Self::advance_transmit) with how many were written.
    #[must_use]
    pub fn poll_transmit(&self) -> Option<&[u8]> {
        (!self.out.is_empty()).then_some(&self.out[..])
    }

    /// `written` bytes of [`poll_transmit`](Self::poll_transmit) reached the socket.
    pub fn advance_transmit(&mut self, written: usize) {
        let n = written.min(self.out.len());
        let _ = self.out.split_to(n);
        self.tracked_upto = self.tracked_upto.saturating_sub(n);
    }

    /// The next event: a notice, an entry to handle (only while fewer than
    /// [`Config::concurrency`] are in hand, none of its key with [`Config::order_by`], and its
    /// lease fresh), or `Stopped`.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        if let Some(notice) = self.notices.pop_front() {
            return Some(Event::Notice(notice));
        }
        if self.failed.is_some() {
            return None;
        }
        if self.stop == (Stop::Stopped { reported: false }) {
            self.stop = Stop::Stopped { reported: true };
            return Some(Event::Stopped);
        }
        if self.stop != Stop::Running || !self.room() {
            return None;
        }
        if self.in_flight.leasing() {
            return None; // whether they are still ours is being asked
        }
        let now = self.last_now?;
        let i = self.next_handout()?;
        if now >= self.buffer[i].due {
            return None; // renewed first (the next pump or timeout)
        }
        let Buffered { mut entry, read_at, key, .. } =
            if i == 0 { self.buffer.pop_front()? } else { self.buffer.remove(i)? };
        match entry.source {
            Source::Pending => self.stats.drained += 1,
            Source::Claimed => self.stats.claimed += 1,
            Source::New => self.stats.new += 1,
        }
        if let Some(key) = key {
            self.keys_in_hand.insert(key);
        }
        entry.stream_key = self.streams[entry.stream as usize].key.clone();
        let (raw, id) = entry.id_parts();
        let id = self.held.hold(raw, id);
        self.streams[entry.stream as usize].in_hand += 1;
        self.in_hand.push(InHand {
            stream: entry.stream,
            id,
            key,
            deliveries: entry.deliveries,
            read_at: Some(read_at),
            handed_at: now,
        });
        if self.room() && self.starved() {
            // Slots are left and nothing to fill them: read on (with the entries now in hand,
            // a parked read blocks only briefly). Written by the driver's next transmit.
            self.pump(now);
        }
        Some(Event::Entry(entry))
    }

    /// Where in the buffer the next entry to hand out is: the first whose key is not in hand.
    #[inline]
    fn next_handout(&self) -> Option<usize> {
        if self.keys_in_hand.is_empty() && (self.in_hand.is_empty() || self.streams.len() == 1) {
            return (!self.buffer.is_empty()).then_some(0);
        }
        // With many streams, each its own `concurrency` in hand.
        let concurrency = self.config.concurrency;
        let room = |b: &Buffered| {
            self.streams.len() == 1 || self.streams[b.entry.stream as usize].in_hand < concurrency
        };
        self.buffer.iter().position(|b| b.key.map_or(true, |k| !self.keys_in_hand.contains(&k)) && room(b))
    }

    /// Whether another entry may be in hand: fewer than [`Config::concurrency`] are, of some
    /// stream.
    fn room(&self) -> bool {
        let concurrency = self.config.concurrency;
        match self.streams.len() {
            1 => self.in_hand.len() < concurrency as usize,
            _ => self.streams.iter().any(|s| s.active && s.in_hand < concurrency),
        }
    }

    /// Nothing buffered can be handed out, and what is buffered (entries whose keys are in
    /// hand) is less than a read: time to read more.
    fn starved(&self) -> bool {
        self.next_handout().is_none() && self.buffer.len() < self.pace.count().0 as usize
    }

    /// The next deadline: while connected, the earliest of a reply overdue, an ack to write
    /// and a lease to renew; while disconnected, when to connect again. `None`: no deadline
    /// (finished, or waiting on the application only).
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if !self.is_live() {
            return None;
        }
        match self.link {
            Link::Up => {
                let replies = self.in_flight.iter().map(|c| c.deadline).min();
                // Neither acks nor renewals go behind a parked read: they wait for its answer.
                let parked = self.parked_read_in_flight();
                let acks = self.ack_due.filter(|_| !parked);
                let leases = self.lease_due().filter(|_| !parked);
                let releases = match self.releasing && !parked {
                    true => self.streams.iter().filter_map(|s| s.releases.next_due()).min(),
                    false => None,
                };
                let twins = self.twins.again_at().filter(|_| self.checks_twins());
                [replies, acks, leases, releases, twins].into_iter().flatten().min()
            }
            Link::Down { retry_at } => Some(retry_at),
            Link::Fresh | Link::Closed => None,
        }
    }

    // ---- internals ----------------------------------------------------------------------

    /// The time a call brings. Commands a call without one sent (see `undated`) get their
    /// full wait from now: dated by a stale time, they would be overdue at once.
    fn tick(&mut self, now: Instant) {
        if let Some(skip) = self.undated.take() {
            self.in_flight.postpone(skip, now + self.config.read_grace);
        }
        self.last_now = Some(now);
    }

    /// Decides what to send next; called after anything that may change the answer.
    fn pump(&mut self, now: Instant) {
        if self.link == Link::Up && self.vetting {
            return; // nothing goes out before the node's role is known
        }
        if self.stop == Stop::Stopping {
            // Owed acks go out if the link is up; once the entries in hand are settled and
            // nothing is owed, the stop ends, link or not. Entries read meanwhile first get
            // their counts (whatever the input's split).
            if self.link == Link::Up && self.staged.is_none() && self.is_live() {
                self.flush_dead_letters(now);
                self.give_back(now);
                self.flush_acks(now);
                // Not worth waiting for at a stop: released now if still ours.
                for stream in &mut self.streams {
                    stream.releases.come_due(&self.config, now, true);
                }
                self.flush_releases(now);
                self.leave_group(now);
            }
            self.finish_stop_if_clear();
            return;
        }
        if self.link != Link::Up || !self.is_live() {
            return;
        }
        if std::mem::take(&mut self.moves_owed) {
            self.flush_dead_letters(now);
            self.give_back(now);
        }
        if self.releasing {
            for stream in &mut self.streams {
                stream.releases.come_due(&self.config, now, false);
            }
            self.flush_releases(now);
        }
        if self.stop != Stop::Running {
            return; // the entries in hand finish; nothing more is read
        }
        if let Some(at) = self.twins.again_at().filter(|_| self.checks_twins()) {
            // A twin seen at the start: look again when due, and read nothing till then.
            if now >= at {
                self.look_for_twins(now);
            }
            return;
        }
        self.ask_health(now);
        if self.checks_twins() && self.twins.due(now) && !self.in_flight.parked() {
            self.look_for_twins(now);
        }
        // Reads of new entries that answer at once may overlap; anything else that decides
        // what comes next is waited for.
        if self.in_flight.holding() || self.staged.is_some() {
            return;
        }
        let mut ahead = self.in_flight.reads_ahead();
        let free = self.room();
        // Leases run out are renewed before the next read: the next entry to hand out's,
        // those of the entries in hand, and — by the floor, which costs no walk — those
        // waiting behind an entry of their key in hand: a run of parked reads, each sent as
        // the last answers, would hold their renewals back until a reclaim took them (a
        // peer's, or this consumer's own read with `CLAIM`, out of their key's order).
        let lease = self.config.lease_threshold();
        let in_hand_due = self.in_hand.iter().any(|h| h.read_at.is_some_and(|at| now >= at + lease));
        let due = in_hand_due
            || (free && self.next_handout().is_some_and(|i| now >= self.buffer[i].due))
            || self.lease_floor.is_some_and(|at| now >= at + lease);
        if due {
            // A floor that lagged (its entry gone since) is brought up to date, renewing none.
            self.renew_leases(now);
            if self.in_flight.leasing() || in_hand_due {
                return;
            }
        }
        if ahead == 0 && free && self.starved() && (self.buffer.is_empty() || !self.drains_from_top()) {
            // Caught up with what was read: the next read, parked on `>` if it comes to that.
            self.flush_acks(now);
            if self.in_flight.holding() {
                return; // the commit script is loading: the commits owed go before any read
            }
            if let Some(read) = self.next_read(now, true, 0) {
                self.send(read, now);
            }
        } else if self.backlog && !self.drains_from_top() {
            // More is waiting on the server: read it now, while this batch is handed out, so
            // that the server works while the application does. Up to `most` reads ahead
            // (one unless handlers are quick, see `Pace::reads_ahead`), so that the server
            // has the next at hand as it answers one; what is buffered and on the way stays
            // within `most + 1` reads' worth (it waits its turn, and must not outlive its
            // lease). Only the first may be a drain page or a reclaim (each continues from
            // where the one before ends); never a drain from the top, which would read
            // again what is buffered or in hand.
            let (count, most) = (self.pace.count().0 as usize, self.pace.reads_ahead());
            while ahead < most
                && self.buffer.len() + ahead * count <= most * count
                && (ahead == 0 || self.next_reads_new(now))
            {
                self.flush_acks(now);
                if self.in_flight.holding() {
                    break; // the commit script is loading
                }
                let Some(read) = self.next_read(now, false, 0) else { break };
                let new = matches!(read, Sent::ReadNew { .. });
                self.send(read, now);
                if !new {
                    break; // a drain page or a reclaim is waited for
                }
                ahead += 1;
            }
        }
    }

    /// Tells [`Notice::Connected`] for this connection.
    fn announce(&mut self) {
        if self.leaving_link {
            return; // the connection a stop opened to leave the group: nothing to tell
        }
        let reconnect = self.announced_before;
        self.notices.push_back(Notice::Connected { reconnect, dialect: self.dialect });
        self.announced_before = true;
    }

    /// The server's `HELLO` answered (`None`: it did not): the verbs spoken from now on, and
    /// whether the node is a master.
    fn learn_hello(&mut self, hello: Option<Hello>, now: Instant) -> Result<(), Error> {
        let hello = hello.unwrap_or_default();
        let (dialect, server) = match &hello.server {
            Some((server, version)) => (
                Dialect::of(server, version),
                format!("{} {}", String::from_utf8_lossy(server), String::from_utf8_lossy(version)),
            ),
            None => (Dialect::CLASSIC, "a server that does not answer HELLO".to_string()),
        };
        self.dialect = if self.config.classic_verbs { Dialect::CLASSIC } else { dialect };
        let cluster = hello.mode.as_deref() == Some(b"cluster");
        self.cluster = cluster;
        self.server = server;
        if self.config.delete_acked.is_some() && !dialect.ack_delete {
            let (feature, needs) = ("deleting acked entries", "XACKDEL (Redis 8.2 or later)");
            return Err(Error::Unsupported { feature, needs, server: self.server.clone() });
        }
        let waits_aof = hello.server.as_ref().is_some_and(|(s, v)| crate::dialect::waits_aof(s, v));
        if matches!(self.config.ack_wait, Some(AckWait::Aof { .. })) && !waits_aof {
            let (feature, needs) =
                ("waiting for acks to reach append-only files", "WAITAOF (Redis 7.2 or later, or Valkey)");
            return Err(Error::Unsupported { feature, needs, server: self.server.clone() });
        }
        if hello.is_standalone_replica() {
            // Asked only to name its master (`ROLE` needs `@admin`; refused, it goes unnamed).
            crate::encode::command(&mut self.out, &[b"ROLE"]);
            self.track(Sent::Role, now);
            return Ok(());
        }
        self.open(now);
        Ok(())
    }

    /// A replica's `ROLE` (or its refusal): the connection is not one to read from. Told
    /// once for each master it names (a master already, it is read from after all).
    fn on_role(&mut self, role: Role, now: Instant) -> Result<(), Error> {
        if role == Role::Master {
            // Promoted between the two answers.
            self.open(now);
            return Ok(());
        }
        Err(Error::NotMaster { role: role.to_string() })
    }

    /// Whether acks delete their entries (`XACKDEL`) on this connection.
    fn deletes_acked(&self) -> bool {
        self.config.delete_acked.is_some() && self.dialect.ack_delete
    }

    /// Writes the releases owed in one `XNACK … FAIL` — never behind a parked read.
    fn flush_releases(&mut self, now: Instant) {
        if !self.ready() || self.parked_read_in_flight() {
            return;
        }
        for s in 0..self.streams.len() {
            if let Some(ids) = self.streams[s].releases.take() {
                self.send(Sent::Release { stream: s as u32, ids, silent: false }, now);
            }
        }
        self.releasing = self.streams.iter().any(|s| !s.releases.is_empty());
    }

    /// Asks after the group's health when it is due — never behind a parked read, which
    /// would hold the answers for up to a beat.
    fn ask_health(&mut self, now: Instant) {
        let Some(every) = self.config.health_every.filter(|_| !self.health_refused) else { return };
        if self.health.is_some() || self.in_flight.parked() || !self.read_answered {
            return;
        }
        // One stream at a time, the one longest due.
        let due = self
            .streams
            .iter()
            .enumerate()
            .filter(|(_, s)| s.active && s.health_at.map_or(true, |at| now >= at));
        let Some((s, _)) = due.min_by_key(|(_, s)| s.health_at) else { return };
        self.streams[s].health_at = Some(now + every);
        self.health = Some((s as u32, GroupHealth { pending: 0, lag: None, consumers: 0, oldest: None }));
        for part in [HealthPart::Groups, HealthPart::Oldest, HealthPart::Time] {
            commands::health(&mut self.out, &self.config, &self.streams[s].key, part);
            self.track(Sent::Health(s as u32, part), now);
        }
    }

    /// Whether this consumer looks for twins: it has a name to look for, and may not share it.
    fn checks_twins(&self) -> bool {
        !self.config.allow_twins && self.config.client_name.is_some() && !self.twins.refused()
    }

    /// `CLIENT ID` and `CLIENT LIST`: until vetted, no read goes out before the answer.
    fn look_for_twins(&mut self, now: Instant) {
        let Some(first) = self.twins.start(now, self.config.min_idle) else { return };
        commands::twins(&mut self.out);
        self.track(Sent::Twins { list: false, first }, now);
        self.track(Sent::Twins { list: true, first }, now);
    }

    /// The `CLIENT LIST` answer (see [`Twins::on_list`]).
    fn on_twins(&mut self, value: Value, first: bool, now: Instant) -> Result<(), Error> {
        let clients =
            reply::client_list(value).map_err(|e| Error::Shape { command: Command::Twins, detail: e.0 })?;
        let name = self.config.client_name.clone().unwrap_or_default();
        let live = self.config.beat * 2 + self.config.read_grace;
        match self.twins.on_list(clients, &name, live, first, now, self.config.min_idle)? {
            // Looked for again a little later (`pump`); nothing is read meanwhile.
            Outcome::Done | Outcome::LookAgain => {}
            Outcome::Tell(notices) => self.notices.extend(notices),
        }
        Ok(())
    }

    /// One of the three health replies; the last completes the notice. A reply of another
    /// shape drops this round (health is for watching, not worth a connection).
    fn on_health(&mut self, part: HealthPart, value: Value) {
        let Some((s, mut health)) = self.health.take() else { return };
        match part {
            HealthPart::Groups => match reply::group_info(value, &self.config.group) {
                Ok(Some((pending, lag, consumers))) => {
                    (health.pending, health.lag, health.consumers) = (pending, lag, consumers);
                }
                _ => return,
            },
            HealthPart::Oldest => match reply::oldest_pending(value) {
                Ok(oldest) => {
                    health.oldest = oldest.map(|(id, held, deliveries)| OldestPending {
                        id,
                        age: Duration::ZERO,
                        idle: held.as_ref().map(|(_, idle)| Duration::from_millis(*idle)),
                        deliveries,
                        owner: held.map(|(owner, _)| owner),
                    })
                }
                Err(_) => return,
            },
            HealthPart::Time => {
                let Ok(now_ms) = reply::time_ms(value) else { return };
                if let Some(oldest) = &mut health.oldest {
                    // An id's first part is the time it was added, in ms since the epoch.
                    let id_ms = oldest
                        .id
                        .split(|b| *b == b'-')
                        .next()
                        .and_then(|ms| std::str::from_utf8(ms).ok()?.parse::<u64>().ok());
                    oldest.age = Duration::from_millis(now_ms.saturating_sub(id_ms.unwrap_or(now_ms)));
                }
                self.streams[s as usize].last_health = Some(health.clone());
                self.notices.push_back(Notice::Health(health));
                return;
            }
        }
        self.health = Some((s, health));
    }

    /// True if the next read is one of new entries (no drain page or reclaim due).
    fn next_reads_new(&self, now: Instant) -> bool {
        self.streams
            .iter()
            .filter(|s| s.active)
            .all(|s| matches!(s.next, Next::Beat) && s.claim_at.is_some_and(|at| now < at))
    }

    /// How often each stream is swept with `XAUTOCLAIM`: every beat; where reads claim
    /// (Redis 8.4+) it only sweeps the pending entries whose messages were deleted (reads
    /// with `CLAIM` leave those in place), every `min_idle`. With many streams each is swept
    /// every `min_idle` (what a peer's entry waits anyway before it may be taken), and no
    /// more than [`SWEEPS_PER_BEAT`] a beat in all: one `XAUTOCLAIM` a beat per stream would
    /// keep the server busy while all are idle.
    fn claim_every(&self) -> Duration {
        let beat = self.config.beat;
        match (self.dialect.claim_in_read, self.streams.len()) {
            (false, 1) => beat,
            (false, n) => beat.max(self.config.min_idle).max(beat * n as u32 / SWEEPS_PER_BEAT),
            (true, n) => beat.max(self.config.min_idle).max(beat * n as u32 / SWEEPS_PER_BEAT_CLAIMING),
        }
    }

    /// Some stream's drain starts from the top: it would read again what is buffered or in
    /// hand, so it waits until the hand is empty.
    fn drains_from_top(&self) -> bool {
        self.streams.iter().any(|s| s.active && s.drains_from_top())
    }

    /// The read that comes next: a stream's drain page, a stream's reclaim if due, or new
    /// entries of every stream drained (parked with `BLOCK` only if `park`). `count` 0 is
    /// the paced count. `None`: no stream to read.
    fn next_read(&mut self, now: Instant, park: bool, count: u32) -> Option<Sent> {
        let count = if count == 0 { self.read_count() } else { count };
        let n = self.streams.len();
        let draining =
            (0..n).find(|&s| self.streams[s].active && matches!(self.streams[s].next, Next::Drain { .. }));
        let claiming = || {
            (0..n).map(|i| (self.turn + i) % n).find(|&s| {
                let stream = &self.streams[s];
                stream.active && stream.claim_at.map_or(true, |at| now >= at)
            })
        };
        if let Some(s) = draining {
            if std::mem::take(&mut self.streams[s].make_group) {
                self.send(Sent::CreateGroup(s as u32), now);
            }
            return Some(Sent::ReadPending { stream: s as u32, count });
        }
        if let Some(s) = claiming() {
            return Some(Sent::Claim { stream: s as u32, count });
        }
        if self.active.is_empty() {
            return None;
        }
        if !park && self.active.len() > 1 {
            // A read ahead: of the streams whose last read brought all it asked (more are
            // likely waiting there), not of every stream (each named costs the server).
            let full: Vec<u32> =
                self.active.iter().copied().filter(|&s| self.streams[s as usize].backlog).collect();
            if !full.is_empty() && full.len() < self.active.len() {
                return Some(Sent::ReadNew { count, block: None, streams: full.into(), turn: 0 });
            }
        }
        // Turned at each read where the server caps a reply, so that the cap leaves out
        // another stream each time.
        let turn = self.turn as u32;
        if self.dialect.read_size_cap {
            self.turn = (self.turn + 1) % self.active.len();
        }
        Some(Sent::ReadNew {
            count,
            block: park.then(|| self.park_for(now)),
            streams: self.active.clone(),
            turn,
        })
    }

    /// How long a parked read blocks: the beat, unless entries are in hand. Their acks and
    /// lease renewals would wait behind it, so it then blocks until the first of them is
    /// expected to be settled (by the handlers' pace); a handler not yet timed, or overdue,
    /// is given half the time it has run so far (so a long one is not polled every few ms).
    /// At least `ack_delay` (and 1 ms), at most [`PARK_IN_HAND`], the beat and a quarter of
    /// the lease.
    fn park_for(&self, now: Instant) -> Duration {
        let Some(first) = self.in_hand.iter().map(|h| h.handed_at).min() else { return self.config.beat };
        let expected = (first + self.pace.handler_time()).saturating_duration_since(now);
        let guess = match expected.is_zero() {
            true => now.saturating_duration_since(first) / 2,
            false => expected,
        };
        let least = self.config.ack_delay.max(Duration::from_millis(1));
        let most = PARK_IN_HAND.min(self.config.beat).min(self.config.lease_threshold() / 4).max(least);
        guess.clamp(least, most)
    }

    /// The count for the next read; a smaller count than before is a notice.
    fn read_count(&mut self) -> u32 {
        let (count, notice) = self.pace.next_count();
        if let Some(notice) = notice {
            self.stats.reads_shrunk += 1;
            self.notices.push_back(notice);
        }
        count
    }

    /// When the first lease comes due, unless renewals are already in flight.
    fn lease_due(&self) -> Option<Instant> {
        if self.in_flight.leasing() {
            return None;
        }
        self.lease_floor.map(|at| at + self.config.lease_threshold())
    }

    /// When the entries buffered or in hand were read or renewed, the oldest: worked out
    /// anew (the whole buffer) only when a renewal was due or answered.
    fn oldest_read(&self) -> Option<Instant> {
        self.buffer.iter().map(|b| b.read_at).chain(self.in_hand.iter().filter_map(|h| h.read_at)).min()
    }

    /// Renews every buffered or in-hand entry whose lease has run out, unless renewals are
    /// already in flight.
    fn renew_leases(&mut self, now: Instant) {
        // Never behind a parked read, which would hold the answer (`park_for` keeps it short).
        if !self.ready() || self.in_flight.leasing() || self.in_flight.parked() {
            return;
        }
        let lease = self.config.lease_threshold();
        let elapsed = |at: Instant| now.saturating_duration_since(at);
        let due: Vec<(u32, Duration, Bytes)> = self
            .buffer
            .iter()
            .filter(|b| elapsed(b.read_at) >= lease)
            .map(|b| (b.entry.stream, elapsed(b.read_at), b.entry.id_bytes()))
            .chain(
                self.in_hand
                    .iter()
                    .filter_map(|h| Some((h.stream, elapsed(h.read_at?), self.held.to_bytes(h.id)))),
            )
            .filter(|(_, e, _)| *e >= lease)
            .collect();
        if due.is_empty() {
            // Woken by a floor that an entry gone since had set: the floor as it is now.
            self.lease_floor = self.oldest_read();
        }
        self.send_renewals(due, now);
    }

    /// Owner-checked `XCLAIM … JUSTID`s for these entries (and how long each was held), a
    /// stream at a time.
    fn send_renewals(&mut self, mut due: Vec<(u32, Duration, Bytes)>, now: Instant) {
        due.sort_by_key(|(s, ..)| *s);
        let mut rest = &due[..];
        while let Some((s, ..)) = rest.first() {
            let n = rest.iter().take_while(|(t, ..)| t == s).count();
            let ids = rest[..n].iter().map(|(_, held, id)| (*held, id.clone())).collect();
            for renewal in lease::renewals(ids, self.config.min_idle) {
                commands::lease(
                    &mut self.out,
                    &self.config,
                    &self.streams[*s as usize].key,
                    renewal.min_idle_ms,
                    &renewal.ids,
                );
                self.track(Sent::Lease(*s, renewal.ids), now);
            }
            rest = &rest[n..];
        }
    }

    /// On a new connection, the leases of the entries in hand are renewed at once rather
    /// than when due: a server restarted from its append-only file has forgotten the
    /// delivery time the drain set (it never writes it), so an entry looks idle since an
    /// older delivery and a peer's reclaim could take it before the renewal came due.
    fn renew_in_hand(&mut self, now: Instant) {
        let due: Vec<(u32, Duration, Bytes)> = self
            .in_hand
            .iter()
            .filter_map(|h| {
                Some((h.stream, now.saturating_duration_since(h.read_at?), self.held.to_bytes(h.id)))
            })
            .collect();
        self.send_renewals(due, now);
    }

    fn parked_read_in_flight(&self) -> bool {
        self.in_flight.parked()
    }

    fn finish_stop_if_clear(&mut self) {
        if self.stop != Stop::Stopping || self.failed.is_some() || !self.in_hand.is_empty() {
            return; // (the hot path: called after every reply)
        }
        // Reads already answering at once are waited for too, so that what they bring has
        // its delivery count given back; a parked read is not (it may take a beat).
        // A stop on its way to a failure does not leave the group (see `leave_group`).
        let leaving =
            self.leave_due && self.failing.is_none() && (self.link == Link::Up || self.leaving_link);
        let owed = self.owes() || leaving;
        if self.stop == Stop::Stopping && self.failed.is_none() && self.in_hand.is_empty() && !owed {
            self.reset_link();
            self.link = Link::Closed;
            match self.failing.take() {
                Some(error) => {
                    self.stats.errors += 1;
                    self.failed = Some(error);
                }
                None => self.stop = Stop::Stopped { reported: false },
            }
        }
    }

    /// What a stop waits for before it ends (besides the entries in hand): acks and moves
    /// owed, and, while connected, give-backs, releases and the counts of entries read.
    fn owes(&self) -> bool {
        let up = self.link == Link::Up;
        self.streams
            .iter()
            .any(|s| s.owes_settles() || (up && (!s.returns.is_empty() || !s.releases.is_empty())))
            || (up && self.staged.is_some())
            || self.in_flight.iter().any(|c| c.sent.is_owed())
    }

    /// At the end of a clean stop, once nothing else is owed (its acks confirmed, so that
    /// what it holds is known): leaves the group if it holds nothing ([`crate::leave`]).
    fn leave_group(&mut self, now: Instant) {
        let clean = self.failed.is_none() && self.failing.is_none() && self.in_hand.is_empty();
        if self.leave_due && clean && self.ready() && !self.owes() {
            if self.parked_read_in_flight() {
                // Behind the blocked read the server would hold it for up to a beat: the
                // connection is dropped and the leave goes on a new one.
                self.reset_link();
                self.link = Link::Down { retry_at: now };
                self.leaving_link = true;
                return;
            }
            self.leave_due = false;
            for s in 0..self.streams.len() {
                crate::leave::encode(&mut self.out, &self.config, &self.streams[s].key);
                self.track(Sent::Leave(s as u32), now);
            }
        }
    }

    /// Once every stream's leave is answered: one notice for all of them (a refusal, if any
    /// was refused; that it left, holding so many, if any left).
    fn tell_left(&mut self) {
        if self.in_flight.iter().any(|c| matches!(c.sent, Sent::Leave(_))) {
            return;
        }
        let (holding, refused) = std::mem::take(&mut self.left);
        if let Some(reason) = refused {
            self.notices.push_back(Notice::Refused { feature: Notice::LEAVE, reason });
        }
        if let Some(holding) = holding {
            self.notices.push_back(Notice::Left { holding });
        }
    }

    /// Writes the earned acks in one `XACK` — never behind a parked read, which would hold
    /// it for up to a beat.
    fn flush_acks(&mut self, now: Instant) {
        if !self.ready() || self.parked_read_in_flight() {
            return;
        }
        self.flush_commits(now);
        let mut n = 0;
        for s in 0..self.streams.len() {
            if self.streams[s].acks.is_empty() {
                continue;
            }
            let acks = self.streams[s].acks.take(self.ack_pool.pop().unwrap_or_default());
            n += acks.len() as u64;
            self.send(Sent::Ack(s as u32, acks), now);
        }
        if n > 0 {
            self.ack_due = None;
            self.wait_for_replicas(n, now);
        }
    }

    /// Writes the commits owed, [`commit::BATCH`] entries to an `EVALSHA`, once the script
    /// is loaded on this connection (loading it first if need be).
    fn flush_commits(&mut self, now: Instant) {
        if self.streams.iter().all(|s| s.commits.is_empty()) {
            return;
        }
        let Some(sha) = self.script.clone() else {
            self.load_script(now);
            return;
        };
        let mut n = 0;
        for s in 0..self.streams.len() {
            n += self.streams[s].commits.len() as u64;
            let mut jobs = std::mem::take(&mut self.streams[s].commits);
            while !jobs.is_empty() {
                let rest = jobs.split_off(jobs.len().min(commit::BATCH));
                commit::encode(&mut self.out, &self.config, &self.streams[s].key, &sha, &jobs);
                self.track(Sent::Commit(s as u32, jobs), now);
                jobs = rest;
            }
        }
        self.ack_due = None;
        self.wait_for_replicas(n, now);
    }

    /// `SCRIPT LOAD` of the commit script, unless loaded or loading on this connection.
    /// Nothing is read before its answer: a drain would deliver the entries of the commits
    /// waiting for it again, and fence them off.
    fn load_script(&mut self, now: Instant) {
        if self.script.is_none() && !self.in_flight.iter().any(|c| matches!(c.sent, Sent::ScriptLoad)) {
            commit::encode_load(&mut self.out);
            self.track(Sent::ScriptLoad, now);
        }
    }

    /// A commit that cannot be made as it stands: nothing written, the entry left pending
    /// (it comes back as a retry does).
    fn refuse_commit(&mut self, s: usize, id: Bytes, reason: String) {
        self.stats.commits_refused += 1;
        self.streams[s].retried.note(id.clone());
        self.notices.push_back(Notice::CommitRefused { id, reason });
    }

    /// What the commit script answered for `jobs`.
    fn on_commits(
        &mut self,
        s: u32,
        jobs: Vec<commit::Job>,
        value: Value,
        now: Instant,
    ) -> Result<(), reply::ShapeError> {
        let outcomes = commit::outcomes(value, jobs.len())?;
        let mut delete = Acks::default();
        for (job, outcome) in jobs.into_iter().zip(outcomes) {
            let commit::Job { id, deliveries, .. } = job;
            match outcome {
                commit::Outcome::Committed => {
                    self.stats.committed += 1;
                    self.stats.acked += 1;
                    delete.push(&id);
                }
                commit::Outcome::Settled => {
                    self.stats.commits_fenced += 1;
                    self.notices.push_back(Notice::CommitFenced { id, deliveries, holder: None });
                }
                commit::Outcome::Held { owner, deliveries: now } => {
                    self.stats.commits_fenced += 1;
                    let holder = Some((owner, now));
                    self.notices.push_back(Notice::CommitFenced { id, deliveries, holder });
                }
                commit::Outcome::Refused(reason) => self.refuse_commit(s as usize, id, reason),
            }
        }
        if let Some(condition) =
            self.config.delete_acked.filter(|_| self.deletes_acked() && !delete.is_empty())
        {
            // The script acks; the entries go as acks delete them, by the same rule (`XDELEX`,
            // Redis 8.2 as `XACKDEL`). Best effort: one left is trimmed later.
            delete.encode_ids(&mut self.out, &[b"XDELEX", &self.streams[s as usize].key, condition.token()]);
            self.track(Sent::Discard(Command::AckDelete), now);
        }
        Ok(())
    }

    /// `WAIT` (or `WAITAOF`) behind `acks` acks or dead-letter moves just written, where
    /// [`Config::ack_wait`] asks for it.
    fn wait_for_replicas(&mut self, acks: u64, now: Instant) {
        let Some(wait) = self.config.ack_wait else { return };
        let timeout = if self.replicas_behind { REPLICAS_BEHIND_WAIT } else { wait.timeout() };
        let timeout = Decimal::new(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX));
        let replicas = Decimal::new(wait.replicas().into());
        match wait {
            AckWait::Replicas { .. } => {
                crate::encode::command(&mut self.out, &[b"WAIT", replicas.as_bytes(), timeout.as_bytes()])
            }
            AckWait::Aof { local, .. } => {
                let local: &[u8] = if local { b"1" } else { b"0" };
                crate::encode::command(
                    &mut self.out,
                    &[b"WAITAOF", local, replicas.as_bytes(), timeout.as_bytes()],
                )
            }
        }
        self.track(Sent::Wait { acks }, now);
    }

    /// A `WAIT`/`WAITAOF` answered: the acks behind it that did not get where they were to
    /// go are counted, and told when that starts.
    fn on_wait(&mut self, acks: u64, value: Value) -> Result<(), reply::ShapeError> {
        let Some(wait) = self.config.ack_wait else { return Ok(()) };
        let (local, replicas) = match wait {
            AckWait::Replicas { .. } => (true, reply::count(value)?),
            AckWait::Aof { local, .. } => {
                let (on_disk, replicas) = reply::wait_aof(value)?;
                (!local || on_disk > 0, replicas)
            }
        };
        let wanted = wait.replicas();
        if local && replicas >= u64::from(wanted) {
            self.replicas_behind = false;
            return Ok(());
        }
        self.stats.acks_unreplicated += acks;
        if !std::mem::replace(&mut self.replicas_behind, true) {
            self.notices.push_back(Notice::AcksUnreplicated { acks, replicas, wanted });
        }
        Ok(())
    }

    /// Drops the entries read but not handed out (they stay pending), keeping them to give
    /// their delivery counts back: they were counted by the read, not handled.
    fn drop_buffer(&mut self) {
        self.staged = None;
        for b in self.buffer.drain(..) {
            self.streams[b.entry.stream as usize].returns.push(b);
            self.moves_owed = true;
        }
    }

    /// `XCLAIM key group self <ms> id… JUSTID RETRYCOUNT <n> IDLE <ms>` for the entries
    /// dropped unhandled: their delivery counts go back to what they were before the read,
    /// so that a restart's drain, which counts them again, does not count them twice (and
    /// `max_deliveries` counts handlings, not reads), and their idle times are set to
    /// `min_idle` at least, so that a peer's next reclaim takes them at once rather than
    /// `min_idle` later (a stopped consumer's read-ahead is another's without a wait; this
    /// one's drain, after a lost connection, reads them again first). Owner-checked like a
    /// lease renewal: one a peer took since is skipped. Best effort.
    fn give_back(&mut self, now: Instant) {
        for s in 0..self.streams.len() {
            if !self.streams[s].returns.is_empty() {
                self.give_back_of(s, now);
            }
        }
    }

    fn give_back_of(&mut self, s: usize, now: Instant) {
        let mut returns = std::mem::take(&mut self.streams[s].returns);
        if self.dialect.release {
            // Released (`XNACK … SILENT`: the read's count taken back) where surely still
            // ours: the next read of any consumer takes them at once. The rest are given back
            // owner-checked, and wait for `min_idle`.
            let mut released = Acks::default();
            returns.retain(|b| {
                let ours = release::surely_ours(&self.config, now.saturating_duration_since(b.read_at));
                if ours {
                    released.push(b.entry.id());
                }
                !ours
            });
            if !released.is_empty() {
                self.send(Sent::Release { stream: s as u32, ids: released, silent: true }, now);
            }
        }
        let lease = self.config.lease_threshold();
        let mut i = 0;
        while i < returns.len() {
            let Buffered { entry, read_at, .. } = &returns[i];
            let read_at = *read_at;
            let group = returns[i..]
                .iter()
                .take_while(|b| b.read_at == read_at && b.entry.deliveries == entry.deliveries)
                .count();
            let ids: Vec<Bytes> = returns[i..i + group].iter().map(|b| b.entry.id_bytes()).collect();
            let elapsed = now.saturating_duration_since(read_at);
            let min_idle_ms = lease::owned_since(elapsed, lease, self.config.min_idle);
            let idle_ms = u64::try_from(elapsed.max(self.config.min_idle).as_millis()).unwrap_or(u64::MAX);
            let count = entry.deliveries.saturating_sub(1);
            let key = &self.streams[s].key;
            commands::give_back(&mut self.out, &self.config, key, min_idle_ms, &ids, count, idle_ms);
            self.track(Sent::GiveBack, now);
            i += group;
        }
    }

    fn flush_dead_letters(&mut self, now: Instant) {
        let mut n = 0;
        for s in 0..self.streams.len() {
            let jobs = std::mem::take(&mut self.streams[s].dead_letters);
            n += jobs.len() as u64;
            for job in jobs {
                self.send(Sent::DeadLetter(s as u32, job), now);
            }
        }
        if n > 0 {
            self.wait_for_replicas(n, now);
        }
    }

    fn restart_drain(&mut self) {
        for stream in &mut self.streams {
            stream.restart_drain();
            stream.claim_at = None;
        }
    }

    /// Forgets the connection's state, keeping acks and dead-letter moves owed.
    fn reset_link(&mut self) {
        for c in self.in_flight.drain() {
            match c.sent {
                Sent::Ack(s, mut acks) => self.streams[s as usize].acks.append(&mut acks),
                Sent::DeadLetter(s, job) => {
                    self.streams[s as usize].dead_letters.push(job);
                    self.moves_owed = true;
                }
                Sent::Commit(s, mut jobs) => self.streams[s as usize].commits.append(&mut jobs),
                _ => {}
            }
        }
        self.script = None;
        self.staged = None;
        self.health = None;
        self.twins.lost();
        self.out.clear();
        self.tracked_upto = 0;
        self.decoder.reset();
    }

    fn lose_link(&mut self, now: Instant, reason: Lost) {
        if self.stop == Stop::Stopping {
            self.leave_due = false; // not worth waiting for a connection
        }
        // A connection the server never answered on counts as a failed connect.
        let was_up = self.ready() && self.heard;
        self.reset_link();
        self.drop_buffer();
        let retry_in = self.backoff.next_delay();
        self.link = Link::Down { retry_at: now + retry_in };
        self.finish_stop_if_clear();
        if !self.is_live() {
            return;
        }
        let notice = match reason {
            Lost::NotMaster(role) => {
                // Told once, not at every attempt: it stays a replica until a failover.
                if self.told_not_master.as_ref() == Some(&role) {
                    return;
                }
                self.told_not_master = Some(role.clone());
                Notice::NotMaster { role, retry_in }
            }
            Lost::Because(reason) if was_up => Notice::ConnectionLost { reason, retry_in },
            Lost::Because(reason) => Notice::ConnectFailed { reason, retry_in },
        };
        self.notices.push_back(notice);
    }

    /// Records an error; returns it for the caller to pass on.
    fn fail(&mut self, now: Instant, error: Error) -> Error {
        self.stats.errors += 1;
        if error.is_fatal() {
            self.failed = Some(error.clone());
            self.reset_link();
            self.buffer.clear();
            self.link = Link::Closed;
        } else {
            let reason = match &error {
                Error::NotMaster { role } => Lost::NotMaster(role.clone()),
                _ => Lost::Because(error.to_string()),
            };
            self.lose_link(now, reason);
        }
        error
    }

    /// A fatal error that leaves the link working: stop as for [`stop`](Self::stop) —
    /// earned acks and moves confirmed, the buffer given back — then fail with it.
    fn fail_after_acks(&mut self, error: Error) {
        if self.stop == Stop::Running {
            self.stop = Stop::Stopping;
            self.drop_buffer();
        }
        self.failing.get_or_insert(error);
    }

    /// How large the reply at the front may grow: reads asking for several entries are held
    /// to `read_bytes` (and skipped past it), a single entry to `max_frame`.
    fn budget(&self) -> Budget {
        let max_frame = self.config.limits.max_frame;
        // Depth of the entry list: `[[key, entries]]` in RESP2, `{key: entries}` in RESP3;
        // `[cursor, entries, …]` for XAUTOCLAIM.
        let depth = match self.config.protocol {
            Protocol::Resp2 => 2,
            Protocol::Resp3 => 1,
        };
        let (many, depth) = match self.in_flight.front().map(|c| &c.sent) {
            Some(Sent::ReadPending { count, .. }) => (*count > 1, depth),
            Some(Sent::ReadNew { count, streams, .. }) => (*count > 1 || streams.len() > 1, depth),
            Some(Sent::Claim { count, .. }) => (*count > 1, 1),
            _ => return Budget { bytes: max_frame, skip: None, raw: false },
        };
        let bytes = if many { self.config.read_bytes } else { max_frame };
        Budget { bytes, skip: Some(depth), raw: true }
    }

    fn on_reply(&mut self, sent: Sent, value: Value, now: Instant) -> Result<(), Error> {
        let command = sent.command();
        if let Sent::Discard(_) = sent {
            return Ok(());
        }
        if let Value::Error(message) = &value {
            return self.on_error_reply(sent, message, now);
        }
        if self.stop != Stop::Running && matches!(sent, Sent::FindTooLarge(_)) {
            return Ok(());
        }
        let shape = |e: reply::ShapeError| Error::Shape { command, detail: e.0 };
        match sent {
            Sent::Handshake(Command::Hello | Command::ServerInfo) if self.vetting => {
                // A map without a server and version (a proxy's?): the classic verbs.
                self.learn_hello(crate::dialect::hello_fields(value), now)?;
            }
            Sent::Role => return self.on_role(reply::role(value).map_err(shape)?, now),
            Sent::Wait { acks } => self.on_wait(acks, value).map_err(shape)?,
            Sent::Handshake(_) => reply::ok(value).map_err(shape)?,
            Sent::CreateGroup(s) => {
                reply::ok(value).map_err(shape)?;
                // Created, not found there (`BUSYGROUP`): after a first time, it was gone (a
                // parked read's `UNBLOCKED … no longer exists` leads here on Redis 7.0).
                let stream = &mut self.streams[s as usize];
                if stream.group_made {
                    self.stats.group_recreated += 1;
                    let start = self.config.create_group.clone().unwrap_or_default();
                    let last_read = stream.last_read.clone();
                    self.notices.push_back(Notice::GroupRecreated { start, last_read });
                }
                stream.group_made = true;
            }
            Sent::Discard(_) => {}
            Sent::Release { .. } => self.stats.released += reply::count(value).map_err(shape)?,
            Sent::Ack(_, mut acks) => {
                let n = match self.deletes_acked() {
                    true => reply::acked_deleted(value),
                    false => reply::count(value),
                }
                .map_err(shape)?;
                self.stats.acked += n;
                // 0 for an id means it was no longer pending: a peer reclaimed and acked it
                // first if one could have, else the server forgot it. A signal, not an error.
                let uncounted = (acks.len() as u64).saturating_sub(n);
                let to_peer = uncounted.min(acks.exposed() as u64);
                self.stats.lost_to_peer += to_peer;
                self.stats.acks_unmatched += uncounted - to_peer;
                if self.ack_pool.len() < 4 {
                    acks.clear();
                    self.ack_pool.push(acks);
                }
            }
            Sent::ReadPending { .. } | Sent::Claim { .. } | Sent::ReadNew { .. } => {
                return Err(shape(reply::ShapeError("a read answered with neither entries nor an error")));
            }
            Sent::Counts { count, .. } => {
                let counts = reply::pending_counts(value).map_err(shape)?;
                self.join_counts(counts, count, now);
            }
            Sent::Lease(s, ids) => {
                let kept = reply::ids(value).map_err(shape)?;
                self.on_lease(s, ids, kept, now);
            }
            Sent::GiveBack => {}
            Sent::Health(_, part) => self.on_health(part, value),
            Sent::Twins { list: false, .. } => self.twins.own_id(reply::int(value).map_err(shape)?),
            Sent::Twins { list: true, first } => return self.on_twins(value, first, now),
            Sent::DeadLetterCheck | Sent::CommitCheck => {
                reply::int(value).map_err(shape)?;
            }
            Sent::ScriptLoad => {
                self.script = Some(reply::string(value).map_err(shape)?);
                self.flush_acks(now);
            }
            Sent::Commit(s, jobs) => self.on_commits(s, jobs, value, now).map_err(shape)?,
            Sent::Leave(_) => {
                let holding = u64::try_from(reply::int(value).map_err(shape)?).unwrap_or(0);
                *self.left.0.get_or_insert(0) += holding;
                self.tell_left();
            }
            Sent::DeadLetter(_, job) => match reply::int(value).map_err(shape)? {
                1 => {
                    self.stats.dead_lettered += 1;
                    let Job { id, deliveries, reason } = job;
                    self.notices.push_back(Notice::DeadLettered { id, deliveries, reason });
                }
                -1 => self.stats.deleted_seen += 1,
                _ => self.lost(job.id, false),
            },
            Sent::FindTooLarge(_) => {
                let pending = reply::pending_counts(value).map_err(shape)?;
                if let Some((id, _)) = pending.into_iter().next() {
                    let id = String::from_utf8_lossy(&id).into_owned();
                    self.fail_after_acks(Error::EntryTooLarge { id, limit: self.config.limits.max_frame });
                }
                // Gone meanwhile: the drain goes on.
            }
        }
        Ok(())
    }

    /// A read or claim reply, parsed in one pass straight into entries.
    ///
    /// The entries' idle time on the server began when it ran the read: for a parked read,
    /// when it answered (now, give or take the trip); for any other, soon after it was sent —
    /// which is what their leases count from, even if the reply is read much later (a read
    /// ahead, answered while a handler ran).
    fn on_entries(
        &mut self,
        sent: Sent,
        sent_at: Instant,
        frame: Bytes,
        spans: &[Span],
        len: usize,
        now: Instant,
    ) -> Result<(), Error> {
        let read_at = match sent {
            Sent::ReadNew { block: Some(_), .. } => now,
            _ => sent_at,
        };
        let command = sent.command();
        let shape = |e: reply::ShapeError| Error::Shape { command, detail: e.0 };
        let protocol = self.config.protocol;
        self.backoff.reset();
        self.read_answered = true;
        match sent {
            Sent::ReadPending { stream: s, count } => {
                let (mut live, mut last) = (Vec::new(), None);
                let n = stream_reply::read(&frame, spans, protocol, Source::Pending, |_, item| {
                    last = Some(match &item {
                        Item::Entry(e) => e.id_bytes(),
                        Item::Deleted(id) => id.clone(),
                    });
                    live.extend(self.live(s, item, now));
                })
                .map_err(shape)?;
                self.pace.record_read(len, n);
                self.backlog = n >= count as usize;
                // The drain pages forward by the last id, so an entry left pending by a
                // failing handler cannot spin it; an empty page ends it.
                let (claim_every, streams) = (self.claim_every(), self.streams.len());
                let stream = &mut self.streams[s as usize];
                stream.next = match last {
                    Some(after) => Next::Drain { after },
                    None => {
                        if claim_every > self.config.beat && stream.claim_at.is_none() {
                            // Reads claim, or many streams share the sweeps: the first waits
                            // its turn, spread over the sweep's period.
                            let early = claim_every.mul_f64(f64::from(s) / streams as f64);
                            stream.claim_at = Some(now + (claim_every - early));
                        }
                        Next::Beat
                    }
                };
                // Their counts come with the `XPENDING` pipelined behind the read.
                self.stage(s, live, read_at, false);
            }
            Sent::Claim { stream: s, count } => {
                let mut live = Vec::new();
                let claim = stream_reply::autoclaim(&frame, spans, protocol, |item| {
                    live.extend(self.live(s, item, now))
                })
                .map_err(shape)?;
                let claimed = live.len() + claim.bare_nils as usize;
                self.tell_reclaimed(s, &live);
                self.pace.record_read(len, claimed);
                self.backlog = claimed >= count as usize;
                self.stats.deleted_seen += claim.deleted.len() as u64;
                let sweeping = (!live.is_empty() || claim.bare_nils > 0) && &claim.cursor[..] != CURSOR_START;
                // Carry the cursor across beats; `0-0` starts the next sweep from the top.
                let claim_at = if sweeping { None } else { Some(now + self.claim_every()) };
                let stream = &mut self.streams[s as usize];
                stream.cursor = claim.cursor;
                stream.claim_at = claim_at;
                if claim.bare_nils > 0 {
                    // Redis 6.2 moved deleted entries' ids into our pending list without
                    // naming them: drain it to see them as `[id, nil]` and ack them away.
                    stream.restart_drain();
                }
                if let (Some(first), Some(last)) = (live.first(), live.last()) {
                    let (first, last, n) = (first.id_bytes(), last.id_bytes(), live.len() as u32);
                    self.stage(s, live, read_at, true);
                    self.send_counts(s, &first, &last, n, now);
                }
            }
            Sent::ReadNew { count, streams, .. } => {
                let due = read_at + self.config.lease_threshold();
                let n_streams = streams.len();
                let (each, most) = self.per_stream(count, n_streams);
                // The hot path: each entry goes straight to the buffer, moved as little as can be.
                let (mut claimed, mut released) = (0, 0);
                // The stream whose entries are being read, how many so far, its last new one.
                let mut at: Option<(u32, u32, Option<Bytes>)> = None;
                let mut ended = Vec::new();
                let only = (n_streams == 1).then(|| streams[0]);
                let n = stream_reply::read(&frame, spans, protocol, Source::New, |key, item| {
                    let s = match &at {
                        Some((s, ..)) if only.is_some() || self.streams[*s as usize].key == key => *s,
                        _ => {
                            // A read of one stream needs no lookup (nor a server that echoes
                            // the key exactly as asked).
                            let Some(s) = only.or_else(|| self.index.get(key).copied()) else { return };
                            ended.extend(at.replace((s, 0, None)));
                            s
                        }
                    };
                    if let Some((_, n, last)) = &mut at {
                        *n += 1;
                        if let Item::Entry(e) = &item {
                            if e.source == Source::New {
                                *last = Some(e.id_bytes());
                            }
                        }
                    }
                    // A read ahead of this one was skipped for its size: the drain due reads
                    // its entries again, then these, in the order read. Until then these are
                    // left to it, their delivery counts given back as for any entry dropped
                    // unhandled. So are a removed stream's.
                    let stream = &self.streams[s as usize];
                    let behind_skipped = stream.drains_from_top() || !stream.active;
                    match item {
                        Item::Entry(mut entry) if behind_skipped => {
                            entry.deliveries = entry.deliveries.max(1);
                            entry.stream = s;
                            self.moves_owed = true;
                            self.streams[s as usize].returns.push(Buffered {
                                entry,
                                read_at,
                                due,
                                key: None,
                            });
                        }
                        // Taken from its owner by the read's `CLAIM` (Redis 8.4+): as a reclaim.
                        Item::Entry(entry) if entry.source == Source::Claimed => {
                            let Some(mut entry) = self.live(s, Item::Entry(entry), now) else { return };
                            entry.stream = s;
                            if !self.streams[s as usize].retried.take(entry.id()) {
                                *if entry.released { &mut released } else { &mut claimed } += 1;
                            }
                            if self.config.max_deliveries.is_some_and(|max| entry.deliveries > max) {
                                let (id, deliveries) = (entry.id_bytes(), entry.deliveries);
                                let reason = DeadLetterReason::MaxDeliveries;
                                self.streams[s as usize].dead_letters.push(Job { id, deliveries, reason });
                                self.moves_owed = true;
                            } else {
                                self.keep(Buffered { entry, read_at, due, key: None });
                            }
                        }
                        Item::Entry(mut entry) if !self.holds(s, entry.id()) => {
                            entry.deliveries = 1;
                            entry.stream = s;
                            self.keep(Buffered { entry, read_at, due, key: None });
                        }
                        other => {
                            self.live(s, other, now);
                        }
                    }
                })
                .map_err(shape)?;
                ended.extend(at);
                if claimed + released > 0 {
                    self.notices.push_back(Notice::Reclaimed { count: claimed, released });
                }
                let mut full = false;
                for (s, got, last) in ended {
                    let stream = &mut self.streams[s as usize];
                    stream.in_reply = true;
                    stream.full = if got >= each { stream.full.saturating_add(1) } else { 0 };
                    // With many streams a share of one full may as well be all there was.
                    stream.backlog = stream.full >= 2 || (stream.full >= 1 && (each > 1 || n_streams == 1));
                    full |= stream.backlog;
                    if self.config.create_group.is_some() {
                        // Copied: a slice would keep the whole reply alive.
                        if let Some(last) = last.filter(|id| stream.last_read.as_ref() != Some(id)) {
                            stream.last_read = Some(Bytes::copy_from_slice(&last));
                        }
                    }
                }
                // Those read that brought nothing have nothing waiting.
                for &s in streams.iter() {
                    let stream = &mut self.streams[s as usize];
                    if !std::mem::take(&mut stream.in_reply) {
                        (stream.full, stream.backlog) = (0, false);
                    }
                }
                self.pace.record_read(len, n);
                // A read the server cut at `MAXCOUNT` or `MAXSIZE` leaves more behind.
                let capped = most.is_some_and(|most| n >= most as usize)
                    || self.read_cap(count.saturating_mul(n_streams as u32)).is_some_and(|cap| len >= cap);
                self.backlog = full || capped;
            }
            other => {
                let detail = "a reply other than a read came as entries";
                return Err(Error::Shape { command: other.command(), detail });
            }
        }
        Ok(())
    }

    /// How many entries a read of new entries over `streams` streams asks of each (`COUNT`),
    /// and of all (`MAXCOUNT`, where the server has it), for a read of `count` in all: each
    /// stream's share, at least 1; with `MAXCOUNT` any stream may bring them all.
    fn per_stream(&self, count: u32, streams: usize) -> (u32, Option<u32>) {
        if streams <= 1 {
            return (count, None);
        }
        match self.dialect.read_size_cap {
            true => (count, Some(count)),
            false => ((count / streams as u32).max(1), None),
        }
    }

    /// A read reply outgrew its budget and was skipped; the server delivered (or claimed) it
    /// all the same, so those entries are now in this consumer's pending list.
    fn on_oversized(&mut self, sent: Sent, completed: u64, now: Instant) -> Result<(), Error> {
        if self.stop != Stop::Running {
            return Ok(());
        }
        if !matches!(sent, Sent::ReadPending { .. } | Sent::Claim { .. } | Sent::ReadNew { .. }) {
            let detail = "a reply other than a read was skipped";
            return Err(Error::Shape { command: sent.command(), detail });
        }
        self.pace.record_oversized(completed);
        match sent {
            Sent::ReadPending { stream: s, count } => {
                self.in_flight.discard_counts();
                if count == 1 {
                    // This one entry alone is too large: find its id for the error.
                    let start = match &self.streams[s as usize].next {
                        Next::Drain { after } if &after[..] != DRAIN_START => commands::after(&after[..]),
                        _ => b"-".to_vec(),
                    };
                    commands::counts(
                        &mut self.out,
                        &self.config,
                        &self.streams[s as usize].key,
                        &start,
                        b"+",
                        1,
                    );
                    self.track(Sent::FindTooLarge(s), now);
                }
                // Otherwise the same page is asked again, smaller.
            }
            // Delivered or claimed to us: the drain reads them again, smaller.
            Sent::Claim { stream: s, .. } => self.streams[s as usize].restart_drain(),
            Sent::ReadNew { streams, .. } => {
                streams.iter().for_each(|&s| self.streams[s as usize].restart_drain())
            }
            _ => {}
        }
        Ok(())
    }

    fn on_error_reply(&mut self, sent: Sent, message: &Bytes, now: Instant) -> Result<(), Error> {
        let command = sent.command();
        let text = || String::from_utf8_lossy(message).into_owned();
        if let Some(redirect) = cluster::parse_redirect(message) {
            self.keep_owed(sent);
            return Err(self.redirected(command, redirect, message));
        }
        if cluster::classify(message) == Some(cluster::ClusterError::CrossSlot) {
            return Err(Error::CrossSlot { command, message: text() });
        }
        if let (Sent::CreateGroup(s), true) = (&sent, message.starts_with(b"BUSYGROUP")) {
            self.streams[*s as usize].group_made = true;
            return Ok(());
        }
        if let Sent::GiveBack | Sent::Release { .. } = sent {
            // Best effort: the counts stay one higher; entries not released are reclaimed
            // after `min_idle`.
            return Ok(());
        }
        if let (Sent::Handshake(Command::ServerInfo), true) = (&sent, self.vetting) {
            // A server (or proxy) that does not answer `HELLO`: the classic verbs, and a
            // role it does not tell (its writes' `READONLY`, if a replica, would).
            return self.learn_hello(None, now);
        }
        if let Sent::Role = sent {
            return Err(Error::NotMaster { role: "a replica".to_string() });
        }
        if let Sent::Health(..) = sent {
            // No such key or group yet: nothing to tell this round. Not allowed (an ACL
            // without these commands): said once, and not asked again.
            if message.starts_with(b"NOPERM") && self.health.is_some() {
                self.health_refused = true;
                self.notices.push_back(Notice::Refused { feature: Notice::HEALTH, reason: text() });
            }
            self.health = None;
            return Ok(());
        }
        if let Sent::Twins { list, .. } = sent {
            self.notices.extend(self.twins.on_refused(list, text()));
            return Ok(());
        }
        if let Sent::Leave(_) = sent {
            // Not allowed (an ACL without `EVAL`), or the group gone: the consumer stays.
            self.left.1.get_or_insert_with(text);
            self.tell_left();
            return Ok(());
        }
        if let Sent::Commit(..) = sent {
            if message.starts_with(b"NOSCRIPT") {
                // The server forgot the script (`SCRIPT FLUSH`, a restart): load it again
                // and send these once it is.
                self.keep_owed(sent);
                self.script = None;
                self.load_script(now);
                return Ok(());
            }
            if message.windows(7).any(|w| w == b"NOGROUP") {
                // The group is gone, and its pending entries with it: nothing to commit.
                return Ok(());
            }
        }
        if let Sent::DeadLetter(..) = sent {
            // The script's own errors name the failing call after the code (6.2: `ERR Error
            // running script … NOGROUP …`): a missing group leaves nothing to move.
            if message.windows(7).any(|w| w == b"NOGROUP") {
                return Ok(());
            }
        }
        if sent.reads_group() && is_group_gone(message) {
            if let Sent::ReadPending { .. } = sent {
                self.in_flight.discard_counts();
            }
            // The stream it names (a read of many streams fails for one): the others go on.
            let named = match &sent {
                Sent::ReadNew { streams, .. } => match self.named_in(message) {
                    Some(s) => vec![s],
                    None => streams.to_vec(),
                },
                other => other.stream().into_iter().collect(),
            };
            self.buffer.retain(|b| !named.contains(&b.entry.stream));
            if self.staged.as_ref().is_some_and(|staged| named.contains(&staged.stream)) {
                self.staged = None;
            }
            return match self.config.on_group_gone {
                GroupGone::Fail => Err(Error::GroupGone { command, message: text() }),
                GroupGone::Recreate => {
                    for s in named {
                        // It was there (it was read): its creation is counted as a re-creation.
                        let stream = &mut self.streams[s as usize];
                        stream.group_made = true;
                        stream.cursor = Bytes::from_static(CURSOR_START);
                        stream.restart_drain();
                        stream.claim_at = None;
                        self.send(Sent::CreateGroup(s), now);
                    }
                    Ok(())
                }
            };
        }
        if is_transient(message) {
            self.keep_owed(sent);
            return Err(Error::Unavailable { command, message: text() });
        }
        Err(Error::Server { command, message: text() })
    }

    /// Acks and dead-letter moves a node refused for now (a redirect, a failover, a
    /// transient state) are owed still: sent again on the next connection, before its drain
    /// (which would otherwise hand their entries out again).
    fn keep_owed(&mut self, sent: Sent) {
        match sent {
            Sent::Ack(s, mut acks) => self.streams[s as usize].acks.append(&mut acks),
            Sent::DeadLetter(s, job) => {
                self.streams[s as usize].dead_letters.push(job);
                self.moves_owed = true;
            }
            Sent::Commit(s, mut jobs) => self.streams[s as usize].commits.append(&mut jobs),
            _ => {}
        }
    }

    /// The stream a `NOGROUP` error names (`No such key 'k' or consumer group 'g' …`).
    fn named_in(&self, message: &[u8]) -> Option<u32> {
        let text = message.strip_prefix(b"NOGROUP No such key '")?;
        // Keys may hold quotes: the longest known key that the message goes on from.
        let group = [&b"' or consumer group '"[..], &self.config.group].concat();
        (1..=text.len())
            .rev()
            .filter(|&end| text[end..].starts_with(&group))
            .find_map(|end| self.index.get(&text[..end]).copied())
    }

    /// A cluster redirect. `MOVED` for the stream's slot: reconnect to the node named (and
    /// drain there). `MOVED` for another slot: a command touched another key (the
    /// dead-letter stream), which must share the stream's slot. `ASK`: the slot is migrating
    /// and the key is already on the node named: reconnect there and send each command
    /// after `ASKING` (once the move is done, that node owns the slot and `ASKING` is moot).
    fn redirected(&mut self, command: Command, redirect: cluster::Redirect, message: &[u8]) -> Error {
        let text = String::from_utf8_lossy(message).into_owned();
        if !self.streams.iter().any(|s| s.slot == redirect.slot) {
            return Error::CrossSlot { command, message: text };
        }
        match redirect.kind {
            // `?`: the cluster announces host names it does not know; the configured address
            // is asked again after the backoff.
            cluster::RedirectKind::Moved if redirect.host == "?" => {
                Error::Unavailable { command, message: text }
            }
            cluster::RedirectKind::Moved => {
                self.stats.moved += 1;
                self.asking = false;
                self.redirect = Some((redirect.host.clone(), redirect.port));
                Error::Moved { command, host: redirect.host, port: redirect.port }
            }
            cluster::RedirectKind::Ask if redirect.host == "?" => {
                Error::Unavailable { command, message: text }
            }
            cluster::RedirectKind::Ask => {
                self.asking = true;
                self.redirect = Some((redirect.host, redirect.port));
                Error::Unavailable { command, message: text }
            }
        }
    }

    /// What a read's item leaves to hand out: a deleted entry (`[id, nil]`) cannot be
    /// processed, so it is acked away and counted, never handed out; one in hand (read
    /// again by a drain) is left to its handler, one buffered keeps its place, and one
    /// settled whose ack or move is not yet confirmed (settled after the drain or reclaim
    /// went out, which entries in hand do not hold back) to that ack or move.
    fn live(&mut self, s: u32, item: Item, now: Instant) -> Option<Entry> {
        let id = match &item {
            Item::Entry(e) => e.id(),
            Item::Deleted(id) => &id[..],
        };
        if let Some(h) = self.in_hand.iter_mut().find(|h| h.stream == s && self.held.id(h.id) == id) {
            // Delivered to us again (a drain, a reclaim): the server reset its idle time, so
            // its lease runs from this reply, or the next renewal would find it too young
            // and take it for a peer's. It counted a delivery too: a commit's fencing token.
            h.read_at = Some(now);
            h.deliveries += 1;
            return None;
        }
        if let Some(b) = self.buffer.iter_mut().find(|b| b.entry.stream == s && b.entry.id() == id) {
            // Buffered and delivered to us again (a read's `CLAIM` once its lease ran out
            // while its key was in hand): the copy buffered keeps its place, its lease
            // renewed by this reply. A second copy behind later entries of its key would be
            // handed out after them once the next renewal, finding the idle time just reset,
            // took the first copy for a peer's and dropped it.
            b.read_at = now;
            b.due = now + self.config.lease_threshold();
            b.entry.deliveries += 1;
            return None;
        }
        if self.settling(s, id) {
            return None;
        }
        match item {
            Item::Entry(mut entry) => {
                entry.stream = s;
                Some(entry)
            }
            Item::Deleted(id) => {
                self.stats.deleted_seen += 1;
                self.streams[s as usize].acks.push(&id);
                self.ack_due.get_or_insert_with(|| now + self.config.ack_delay);
                None
            }
        }
    }

    /// Tells what `XAUTOCLAIM` took from other owners: not this consumer's own retries.
    fn tell_reclaimed(&mut self, s: u32, live: &[Entry]) {
        let retried = &mut self.streams[s as usize].retried;
        let count = live.iter().filter(|e| !retried.take(e.id())).count() as u64;
        if count > 0 {
            self.notices.push_back(Notice::Reclaimed { count, released: 0 });
        }
    }

    /// True if `id` is an entry in hand.
    #[inline]
    fn holds(&self, s: u32, id: &[u8]) -> bool {
        !self.in_hand.is_empty() && self.in_hand.iter().any(|h| h.stream == s && self.held.id(h.id) == id)
    }

    /// True if `id` of stream `s` was settled and its ack (dead-letter move, commit) is owed
    /// or in flight.
    fn settling(&self, s: u32, id: &[u8]) -> bool {
        self.streams[s as usize].settling(id)
            || self.in_flight.iter().any(|c| match &c.sent {
                Sent::Ack(t, acks) => *t == s && acks.contains(id),
                Sent::DeadLetter(t, job) => *t == s && job.id == id,
                Sent::Commit(t, jobs) => *t == s && jobs.iter().any(|job| job.id == id),
                _ => false,
            })
    }

    /// Buffers an entry for the application (with its key, when ordered); after a stop,
    /// keeps it to give its delivery count back instead (entries read after a stop stay
    /// pending, not handed out).
    #[inline]
    fn keep(&mut self, mut entry: Buffered) {
        if let Some(order) = &self.config.order_by {
            entry.key = order.key(&entry.entry).map(|k| key_hash(&k));
        }
        if self.stop == Stop::Running {
            self.lease_floor = Some(self.lease_floor.map_or(entry.read_at, |at| at.min(entry.read_at)));
            self.buffer.push_back(entry);
        } else {
            self.streams[entry.entry.stream as usize].returns.push(entry);
            self.moves_owed = true;
        }
    }

    fn stage(&mut self, stream: u32, entries: Vec<Entry>, read_at: Instant, paged: bool) {
        self.staged = (!entries.is_empty()).then_some(Staged { stream, entries, read_at, paged });
    }

    /// `XPENDING key group <start> <end> n consumer` for staged entries.
    fn send_counts(&mut self, s: u32, start: &[u8], end: &[u8], n: u32, now: Instant) {
        commands::counts(&mut self.out, &self.config, &self.streams[s as usize].key, start, end, n);
        self.track(Sent::Counts { stream: s, count: n }, now);
    }

    /// Gives staged entries their delivery counts; once all are known (or known not to be
    /// ours), buffers them, or moves those past the cap to the dead-letter stream.
    fn join_counts(&mut self, counts: Vec<(Bytes, u64)>, asked: u32, now: Instant) {
        let Some(staged) = self.staged.as_mut() else { return };
        // Both lists are in id order: walk them together.
        let mut from = 0;
        for (id, n) in &counts {
            if let Some(i) = staged.entries[from..].iter().position(|e| e.id() == &id[..]) {
                staged.entries[from + i].deliveries = (*n).max(1);
                from += i + 1;
            }
        }
        let missing = staged.entries.iter().any(|e| e.deliveries == 0);
        if staged.paged && missing && counts.len() as u64 >= u64::from(asked) {
            // A full page that did not reach them all: our other pending entries share the
            // range. Ask for the next page.
            if let (Some((last, _)), Some(end)) = (counts.last(), staged.entries.last()) {
                let (start, end) = (commands::after(last), end.id_bytes());
                let n = staged.entries.iter().filter(|e| e.deliveries == 0).count() as u32;
                let s = staged.stream;
                self.send_counts(s, &start, &end, n, now);
                return;
            }
        }
        let Some(Staged { stream: s, entries, read_at, .. }) = self.staged.take() else { return };
        let due = read_at + self.config.lease_threshold();
        for entry in entries {
            if entry.deliveries == 0 {
                // No longer ours (acked or taken since the read): not handed out.
                self.lost(entry.id_bytes(), false);
            } else if self.config.max_deliveries.is_some_and(|max| entry.deliveries > max) {
                let reason = DeadLetterReason::MaxDeliveries;
                let job = Job { id: entry.id_bytes(), deliveries: entry.deliveries, reason };
                self.streams[s as usize].dead_letters.push(job);
                self.moves_owed = true;
            } else {
                self.keep(Buffered { entry, read_at, due, key: None });
            }
        }
    }

    /// A lease renewal answered: `kept` are still ours (their idle time now reset); the rest
    /// of `asked` were taken by a peer (or deleted).
    fn on_lease(&mut self, s: u32, asked: Vec<Bytes>, kept: Vec<Bytes>, now: Instant) {
        let mut kept = kept.into_iter().peekable();
        let held = &self.held;
        for id in asked {
            let is = |b: &Buffered| b.entry.stream == s && b.entry.id() == &id[..];
            let holds = |h: &&mut InHand| h.stream == s && held.id(h.id) == &id[..];
            if kept.next_if_eq(&id).is_some() {
                self.stats.leases_renewed += 1;
                if let Some(b) = self.buffer.iter_mut().find(|b| is(b)) {
                    b.read_at = now;
                    b.due = now + self.config.lease_threshold();
                } else if let Some(h) = self.in_hand.iter_mut().find(holds) {
                    h.read_at = Some(now);
                }
                continue;
            }
            if let Some(i) = self.buffer.iter().position(is) {
                self.buffer.remove(i);
                self.stats.leases_lost += 1;
                self.notices.push_back(Notice::LeaseLost { id, in_hand: false });
            } else if let Some(h) = self.in_hand.iter_mut().find(holds) {
                h.read_at = None;
                self.stats.leases_lost += 1;
                self.notices.push_back(Notice::LeaseLost { id, in_hand: true });
            }
        }
        self.lease_floor = self.oldest_read();
    }

    fn lost(&mut self, id: Bytes, in_hand: bool) {
        self.stats.leases_lost += 1;
        self.notices.push_back(Notice::LeaseLost { id, in_hand });
    }

    /// Encodes a command and tracks it. A drain page goes out with the `XPENDING` that
    /// gives its delivery counts, pipelined behind it.
    fn send(&mut self, sent: Sent, now: Instant) {
        let cap = match &sent {
            Sent::ReadPending { count, .. } => self.read_cap(*count),
            Sent::ReadNew { count, streams, .. } => self.read_cap(count.saturating_mul(streams.len() as u32)),
            _ => None,
        };
        let shares = match &sent {
            Sent::ReadNew { count, streams, .. } => self.per_stream(*count, streams.len()),
            _ => (0, None),
        };
        let c = &self.config;
        let out = &mut self.out;
        let key = |s: &u32| &self.streams[*s as usize].key;
        match &sent {
            // Encoded where they are decided, with what they need.
            Sent::Handshake(_)
            | Sent::Counts { .. }
            | Sent::Lease(..)
            | Sent::GiveBack
            | Sent::FindTooLarge(_)
            | Sent::Health(..)
            | Sent::Twins { .. }
            | Sent::DeadLetterCheck
            | Sent::CommitCheck
            | Sent::ScriptLoad
            | Sent::Commit(..)
            | Sent::Role
            | Sent::Wait { .. }
            | Sent::Leave(_)
            | Sent::Discard(_) => {}
            Sent::CreateGroup(s) => commands::create_group(out, c, key(s)),
            Sent::Ack(s, acks) => match c.delete_acked.filter(|_| self.dialect.ack_delete) {
                Some(condition) => acks.encode_ids(out, &[b"XACKDEL", key(s), &c.group, condition.token()]),
                None => acks.encode(out, key(s), &c.group),
            },
            Sent::Release { stream, ids, silent } => {
                let mode: &[u8] = if *silent { b"SILENT" } else { b"FAIL" };
                ids.encode_ids(out, &[b"XNACK", key(stream), &c.group, mode]);
            }
            Sent::ReadPending { stream, count } => {
                let after = match &self.streams[*stream as usize].next {
                    Next::Drain { after } => after.clone(),
                    Next::Beat => Bytes::from_static(DRAIN_START),
                };
                commands::read_pending(out, c, key(stream), *count, &after, cap);
                let start = if &after[..] == DRAIN_START { b"-".to_vec() } else { commands::after(&after) };
                let (s, count) = (*stream, *count);
                self.track(sent, now);
                commands::counts(
                    &mut self.out,
                    &self.config,
                    &self.streams[s as usize].key,
                    &start,
                    b"+",
                    count,
                );
                self.track(Sent::Counts { stream: s, count }, now);
                return;
            }
            Sent::Claim { stream, count } => {
                commands::claim(out, c, key(stream), *count, &self.streams[*stream as usize].cursor)
            }
            Sent::ReadNew { block, streams, turn, .. } => {
                let (count, most) = shares;
                let claim = self.dialect.claim_in_read.then_some(c.min_idle);
                let read = commands::ReadNew { count, most, block: *block, claim, cap };
                if Arc::ptr_eq(streams, &self.active) {
                    // The keys as encoded when the streams last changed, from `turn` on.
                    let at = self.reading.get(*turn as usize).copied().unwrap_or(0);
                    let keys = [&self.keys_wire[at..], &self.keys_wire[..at]];
                    commands::read_new(out, c, read, streams.len(), keys);
                } else {
                    let mut keys = Vec::new();
                    streams.iter().for_each(|s| crate::encode::bulk_vec(&mut keys, key(s)));
                    commands::read_new(out, c, read, streams.len(), [&keys, &[]]);
                }
            }
            Sent::DeadLetter(s, job) => {
                if let Some(dead_letter) = &c.dead_letter {
                    let dead_letter = crate::config::key_for(dead_letter, key(s));
                    dead_letter::encode(out, c, key(s), &dead_letter, job);
                }
            }
        }
        self.track(sent, now);
    }

    /// `MAXSIZE` for a read of `count` entries where the server caps reads by size (Redis
    /// 8.10+): half of `read_bytes`, since the reply stops only after the entry that crosses
    /// it, so that an entry up to as large again still fits in `read_bytes`.
    fn read_cap(&self, count: u32) -> Option<usize> {
        (self.dialect.read_size_cap && count > 1).then(|| self.pace_read_bytes() / 2)
    }

    fn pace_read_bytes(&self) -> usize {
        self.config.read_bytes.min(self.config.limits.max_frame)
    }

    fn track(&mut self, sent: Sent, now: Instant) {
        if self.asking && !matches!(sent, Sent::Handshake(_)) {
            // The command just encoded is the tail of `out`: `ASKING` goes in front of it,
            // and its `+OK` is awaited (and ignored) in its place.
            let command = self.out.split_off(self.tracked_upto);
            crate::encode::command(&mut self.out, &[b"ASKING"]);
            self.out.unsplit(command);
            let deadline = now + self.config.read_grace;
            self.in_flight.push(InFlight { sent: Sent::Discard(Command::Asking), sent_at: now, deadline });
        }
        self.tracked_upto = self.out.len();
        // A parked read answers after up to `beat`; anything else at once.
        let wait = match sent {
            Sent::ReadNew { block: Some(block), .. } => block + self.config.read_grace,
            Sent::Wait { .. } => {
                self.config.ack_wait.map_or(Duration::ZERO, |w| w.timeout()) + self.config.read_grace
            }
            _ => self.config.read_grace,
        };
        self.in_flight.push(InFlight { sent, sent_at: now, deadline: now + wait });
    }
}

/// The first line of what a server said (at most 60 bytes), escaped, for a message.
fn first_line(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|b| *b == b'\r' || *b == b'\n').unwrap_or(bytes.len()).min(60);
    bytes[..end].escape_ascii().to_string()
}
