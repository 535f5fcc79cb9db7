//! The consumer-group loop as a state machine: drain own pending list, reclaim idle entries,
//! park for new ones, settle each by the application's verdict.
//!
//! Here: the consumer's state (its connection's, its hand's; each stream's is a
//! [`Stream`](crate::stream::Stream)), its public methods and the loop's turn (`pump`). What
//! to read and what a read brings is in `reads`, what is owed the server in `owed`, leases in
//! `leases`, the other replies in `replies`, the commands onto the wire in `wire`.

mod leases;
mod owed;
mod reads;
mod replies;
mod wire;

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
use crate::config::{AckWait, Config, ConfigError, GroupGone, OnRetry, Protocol};
use crate::dead_letter::{self, Job};
use crate::decode::{Budget, DecodeError, Decoder, Frame, Value};
use crate::delay;
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
use crate::stats::{OldestInHand, Snapshot, Stats};
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
/// First, at every turn, the driver MUST ask [`wants_connection`](Self::wants_connection) —
/// also while its socket is open: a stop drops a parked connection to finish on a new one.
/// If it is true, close the socket, and connect once [`connect_due`](Self::connect_due). A
/// driver that reads on instead is told by its next `handle_input` or `handle_timeout`
/// ([`Error::Dropped`]). The crate docs' run loop does all of this, in order.
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
/// [`poll_timeout`](Self::poll_timeout) may be in the past (work due at once): wait no longer
/// ([`timeout_from`](Self::timeout_from) gives a read timeout of at least 1 ms). A driver
/// SHOULD seed the reconnect jitter from its own randomness ([`reseed`](Self::reseed)), as
/// the transports do. [`is_caught_up`](Self::is_caught_up) tells a batch job when everything
/// there was is handled.
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
    /// With [`Config::ack_wait`]: the replicas the master had when last counted, if fewer
    /// than it asks for were told (told again when the count changes).
    replicas_told: Option<u64>,
    /// The group's lag above zero is being checked (`Some(false)`), and `TIME` answered
    /// meanwhile (`Some(true)`): the health is told once the check answers.
    lag_checked: Option<bool>,
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
    /// The dead-letter stream's length was refused (`NOPERM`): health goes on without it.
    dead_letters_refused: bool,
    /// Whether a clean stop still has to leave the groups ([`Config::leave_on_stop`]): set
    /// once the leaves are sent.
    leave_due: bool,
    /// The stop dropped a parked connection to part on a new one (see `cut`).
    leaving_link: bool,
    /// A stop cut a parked read short, dropping its connection (the server may have answered
    /// it already, delivering entries that never arrive): when that read was written. On the
    /// stop's new connection, what this consumer holds that was delivered since is given
    /// back before it leaves.
    cut: Option<Instant>,
    /// The consumer dropped the connection (a stop's cut) and the driver has not connected
    /// again since: the next `handle_input` or `handle_timeout` says so ([`Error::Dropped`]:
    /// `Some(false)` until it has), and the driver's first report of that socket closing
    /// changes nothing.
    dropped: Option<bool>,
    /// Dead-letter moves or give-backs were queued since the last flush (a walk of every
    /// stream is then worth it; not at every turn).
    moves_owed: bool,
    /// Entries given `Retry` wait to be released, on some stream.
    releasing: bool,
    /// Retries that wait are owed a park or watched, on some stream ([`crate::delay`]).
    parking: bool,
    /// When the last `WAIT` (or `WAITAOF`) of acks was answered: a read pipelined behind it
    /// ran on the server when it returned, not when it was sent (its entries' leases count
    /// from then).
    waited_at: Option<Instant>,
    /// The state of the jitter drawn for retries that back off (splitmix64), seeded as the
    /// reconnects' is.
    jitter: u64,
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
/// The jitter's seed when neither [`Config::seed`] nor the driver ([`Consumer::reseed`])
/// gives one.
const FALLBACK_SEED: u64 = 0x5eed;
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
            cut: None,
            dropped: None,
            left: (None, None),
            moves_owed: false,
            releasing: false,
            parking: false,
            waited_at: None,
            jitter: !config.seed.unwrap_or(FALLBACK_SEED),
            decoder: Decoder::new(config.limits),
            backoff: Backoff::new(
                config.backoff_min,
                config.backoff_max,
                config.seed.unwrap_or(FALLBACK_SEED),
            ),
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
            dead_letters_refused: false,
            twins: Twins::default(),
            dialect: Dialect::CLASSIC,
            server: String::new(),
            vetting: false,
            told_not_master: None,
            replicas_behind: false,
            replicas_told: None,
            lag_checked: None,
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
            not_master: self.not_master().map(str::to_string),
            oldest_in_hand: self.oldest_in_hand(),
        }
    }

    /// While not connected because the node reached answers as a replica (a failover's
    /// old master, a URL naming a replica): what it is, e.g. `a replica of
    /// 10.0.0.1:6379`.
    fn not_master(&self) -> Option<&str> {
        self.told_not_master.as_deref().filter(|_| !self.ready())
    }

    /// The entry in hand the longest (handed out, not yet settled), with when it was handed
    /// out; `None` while nothing is in hand. Its [`age`](OldestInHand::age) at a time passed
    /// in tells a handler that has gone silent: the consumer renews its lease however long
    /// it takes, so the group no longer sees it. A walk of the entries in hand.
    pub fn oldest_in_hand(&self) -> Option<OldestInHand> {
        let h = self.in_hand.iter().min_by_key(|h| h.handed_at)?;
        let stream = self.streams[h.stream as usize].key.clone();
        Some(OldestInHand { stream, id: self.held.to_bytes(h.id), since: h.handed_at })
    }

    /// Brings `last` up to date; true if anything changed. For a driver that publishes
    /// snapshots only when they change (compared without copying the counters first).
    pub fn refresh_snapshot(&self, last: &mut Snapshot) -> bool {
        // The oldest entry in hand is not compared (a walk): it changes only with a hand-out
        // or a settle, which change the counters, or with the number in hand.
        let same = self.stats == last.stats
            && self.in_hand.len() == last.in_hand
            && self.buffered() == last.buffered
            && self.ready() == last.connected
            && self.streams[0].last_health == last.health
            && self.not_master() == last.not_master.as_deref();
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

    /// True while parked: connected, nothing in hand, buffered or owed, and a blocking read
    /// for new entries in flight. It says nothing of what waits on the server: a consumer
    /// parks between batches of a backlog too. [`is_caught_up`](Self::is_caught_up) says
    /// that there is nothing more to read.
    pub fn is_parked(&self) -> bool {
        self.link == Link::Up
            && self.in_hand.is_empty()
            && self.buffer.is_empty()
            && self.staged.is_none()
            && !self.streams.iter().any(Stream::owes_settles)
            && self.in_flight.len() == 1
            && self.in_flight.parked()
    }

    /// True when nothing is left to read as of the server's last answers: parked
    /// ([`is_parked`](Self::is_parked)), every stream's own pending list drained since this
    /// connection opened, its last sweep of idle entries (`XAUTOCLAIM`) finished, and its
    /// last read of new entries short of what it asked (the server had no more). A batch job
    /// that exits once caught up has handled everything that was there when it looked (what
    /// arrives later, or goes idle at a peer later, is the next run's); a driver that
    /// stopped at [`is_parked`](Self::is_parked) instead would leave a backlog behind.
    pub fn is_caught_up(&self) -> bool {
        self.is_parked()
            && self.streams.iter().filter(|s| s.active).all(|s| {
                matches!(s.next, Next::Beat)
                    && (self.dialect.claim_in_read || &s.cursor[..] == CURSOR_START)
                    && !s.backlog
            })
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

    /// The keys of the streams read, in the order they were added ([`Config::stream`] first).
    pub fn streams(&self) -> impl Iterator<Item = &Bytes> + '_ {
        self.streams.iter().filter(|s| s.active).map(|s| &s.key)
    }

    /// Makes these changes in order ([`add_stream`](Self::add_stream),
    /// [`remove_stream`](Self::remove_stream)).
    pub fn change_streams(&mut self, changes: impl IntoIterator<Item = crate::StreamChange>) {
        for change in changes {
            match change {
                crate::StreamChange::Add(key) => self.add_stream(key),
                crate::StreamChange::Remove(key) => self.remove_stream(&key),
            };
        }
    }

    /// `key`'s part of the counts ([`Stats`] are the totals), if it is (or was) read.
    pub fn stream_stats(&self, key: &[u8]) -> Option<&crate::stats::StreamStats> {
        self.index.get(key).map(|&s| &self.streams[s as usize].stats)
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
        stream.added = true;
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
        self.dropped = None;
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
        self.count_replicas(now);
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
        if self.dropped.take().is_some() && matches!(self.link, Link::Down { .. }) {
            return; // the socket the consumer dropped itself, closed: a new one is due now
        }
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
        if self.tell_dropped() {
            return Err(Error::Dropped);
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
        if self.tell_dropped() {
            return Err(Error::Dropped);
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
            Verdict::RetryAfter(delay) => self.retry_after(s, &hand, delay, now),
            Verdict::Retry => match self.config.on_retry {
                OnRetry::Backoff(backoff) => {
                    let random = self.draw();
                    let delay = backoff.delay(hand.deliveries, self.config.min_idle, random);
                    self.retry_after(s, &hand, delay, now);
                }
                _ => {
                    self.stats.retried += 1;
                    self.streams[s].stats.retried += 1;
                    let stream = &mut self.streams[s];
                    stream.retried.note(self.held.to_bytes(hand.id));
                    if self.dialect.release {
                        let (held, id) = (&self.held, hand.id);
                        let (bulk, owned) = (held.bulk(id), || held.to_bytes(id));
                        stream.releases.retry(&self.config, bulk, owned, hand.deliveries, hand.read_at, now);
                        self.releasing = true;
                    }
                }
            },
            Verdict::DeadLetter => {
                if self.config.dead_letter.is_none() {
                    let id = String::from_utf8_lossy(self.held.id(hand.id)).into_owned();
                    self.fail_after_acks(Error::NoDeadLetter { id });
                    self.pump(now);
                    return true;
                }
                let reason = DeadLetterReason::Verdict;
                let id = self.held.to_bytes(hand.id);
                self.streams[s].dead_letters.push(Job {
                    id,
                    deliveries: hand.deliveries,
                    reason,
                    error: None,
                });
                self.moves_owed = true;
            }
            Verdict::Commit(writes) => {
                let id = self.held.to_bytes(hand.id);
                match writes.check(self.cluster.then_some(self.streams[s].slot)) {
                    Ok(()) => {
                        self.streams[s].commits.push(commit::Job { id, deliveries: hand.deliveries, writes });
                        self.ack_due.get_or_insert_with(|| now + self.config.ack_delay);
                    }
                    // Refused before it is sent.
                    Err(reason) => self.refuse_commit(s, id, hand.deliveries, reason),
                }
            }
            Verdict::GiveBack => self.give_back_in_hand(s, hand.id, hand.deliveries, hand.read_at, now),
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

    /// An entry in hand given a retry that waits `delay`: parked with the group once its park
    /// goes out ([`crate::delay`]).
    fn retry_after(&mut self, s: usize, hand: &InHand, delay: Duration, now: Instant) {
        self.stats.retried += 1;
        self.stats.retries_delayed += 1;
        let id = self.held.to_bytes(hand.id);
        let stream = &mut self.streams[s];
        stream.stats.retried += 1;
        stream.stats.retries_delayed += 1;
        stream.retried.note(id.clone());
        stream.delays.retry(id, hand.deliveries, hand.read_at, delay, now);
        self.parking = true;
    }

    /// A number for the jitter of a retry's backoff (splitmix64).
    fn draw(&mut self) -> u64 {
        self.jitter = self.jitter.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.jitter;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Asks the consumer to stop. Honored between entries: nothing more is handed out, the
    /// entries in hand are settled first, earned acks (and dead-letter moves) are sent and
    /// confirmed, then [`Event::Stopped`] comes out. Entries read but not handed out are given
    /// back, for a peer's next reclaim (if connected: a stop does not wait for a connection
    /// for that). Then, holding nothing, it leaves the group
    /// ([`Config::leave_on_stop`]).
    ///
    /// Parked with nothing owed, it cuts the parked read short rather than wait up to a beat
    /// for it: [`wants_connection`](Self::wants_connection) turns true — close the
    /// connection and connect again. The server may have answered that read already, its
    /// entries delivered to this consumer and lost with the connection; so on the new one
    /// the consumer asks what it holds (`XPENDING … consumer`) and gives back what was
    /// delivered after that read went out — released on Redis 8.8+, elsewhere its delivery
    /// count taken back and its idle time set to `min_idle`, for any consumer's next reclaim
    /// to take at once — then leaves. Nothing the server handed to it waits for `min_idle`
    /// under its name. (With [`Config::allow_twins`] the name's recent deliveries may be a
    /// twin's in hand: the stop ends at once, as before.)
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
            stream.delays.clear();
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
        let stream = &mut self.streams[entry.stream as usize].stats;
        match entry.source {
            Source::Pending => {
                (self.stats.drained, stream.drained) = (self.stats.drained + 1, stream.drained + 1)
            }
            Source::Claimed => {
                (self.stats.claimed, stream.claimed) = (self.stats.claimed + 1, stream.claimed + 1)
            }
            Source::New => (self.stats.new, stream.new) = (self.stats.new + 1, stream.new + 1),
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
        if self.config.most_in_hand.is_some_and(|most| self.in_hand.len() >= most as usize) {
            return false;
        }
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

    /// [`poll_timeout`](Self::poll_timeout) as a wait from `now`, at least 1 ms: what a
    /// blocking socket's read timeout takes (`set_read_timeout` refuses zero). A deadline
    /// already past — which `poll_timeout` often is, when a call brought work due at once —
    /// gives 1 ms: wait no longer, then call [`handle_timeout`](Self::handle_timeout) (or
    /// connect, if [`connect_due`](Self::connect_due)). `None`: no deadline; wait for input.
    #[must_use]
    pub fn timeout_from(&self, now: Instant) -> Option<Duration> {
        self.poll_timeout().map(|at| at.saturating_duration_since(now).max(Duration::from_millis(1)))
    }

    /// The jitter of reconnects, seeded from the driver's randomness (the core has none):
    /// unless [`Config::seed`] names a seed, the transports call this with one of their own
    /// process, so that consumers restarted at once (a fleet, a deploy) do not reconnect in
    /// step. A driver of its own SHOULD too, right after [`new`](Self::new) — e.g. with
    /// `std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), 0)`;
    /// without it every process waits the same delays. Does nothing if `Config::seed` is set.
    pub fn reseed(&mut self, seed: u64) {
        if self.config.seed.is_none() {
            self.backoff = Backoff::new(self.config.backoff_min, self.config.backoff_max, seed);
            self.jitter = !seed;
        }
    }

    /// The next deadline: while connected, the earliest of a reply overdue, an ack to write
    /// and a lease to renew; while disconnected, when to connect again. `None`: no deadline
    /// (finished, or waiting on the application only). It may be in the past (work due at
    /// once): see [`timeout_from`](Self::timeout_from).
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
                let parks = self.parks_due().filter(|_| !parked);
                [replies, acks, leases, releases, twins, parks].into_iter().flatten().min()
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
                self.flush_parks(now);
                self.part(now);
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
        if self.parking {
            self.parks_come_due(now);
            self.flush_parks(now);
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

    fn parked_read_in_flight(&self) -> bool {
        self.in_flight.parked()
    }

    fn finish_stop_if_clear(&mut self) {
        if self.stop != Stop::Stopping || self.failed.is_some() || !self.in_hand.is_empty() {
            return; // (the hot path: called after every reply)
        }
        // Reads already answering at once are waited for too, so that what they bring has
        // its delivery count given back; a parked read is not (it may take a beat).
        // A stop on its way to a failure does not leave the group (see `part`).
        let parting = (self.leave_due || self.cut.is_some())
            && self.failing.is_none()
            && (self.link == Link::Up || self.leaving_link);
        let owed = self.owes() || parting;
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

    /// Whether the consumer dropped the connection and the driver is yet to hear of it
    /// (then it has).
    fn tell_dropped(&mut self) -> bool {
        let untold = self.dropped == Some(false) && matches!(self.link, Link::Down { .. });
        if untold {
            self.dropped = Some(true);
        }
        untold
    }

    fn restart_drain(&mut self) {
        for stream in &mut self.streams {
            stream.restart_drain();
            stream.claim_at = None;
        }
    }

    /// Forgets the connection's state, keeping acks and dead-letter moves owed.
    fn reset_link(&mut self) {
        let in_flight: Vec<Sent> = self.in_flight.drain().map(|c| c.sent).collect();
        in_flight.into_iter().for_each(|sent| self.keep_owed(sent));
        self.script = None;
        self.staged = None;
        self.health = None;
        self.lag_checked = None;
        self.twins.lost();
        self.out.clear();
        self.tracked_upto = 0;
        self.decoder.reset();
    }

    fn lose_link(&mut self, now: Instant, reason: Lost) {
        if self.stop == Stop::Stopping {
            // Not worth waiting for a connection: what a cut read brought waits for
            // `min_idle` (or this consumer's next drain).
            self.leave_due = false;
            self.cut = None;
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
}

/// The first line of what a server said (at most 60 bytes), escaped, for a message.
fn first_line(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|b| *b == b'\r' || *b == b'\n').unwrap_or(bytes.len()).min(60);
    bytes[..end].escape_ascii().to_string()
}
