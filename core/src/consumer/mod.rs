//! The consumer-group loop as a state machine: drain own pending list, reclaim idle entries,
//! park for new ones, settle each by the application's verdict.
//!
//! Here: the consumer's state (its connection's, its hand's; each stream's is a [`Stream`])
//! and the loop's turn (`pump`). Its public methods are in a file per group of [`Consumer`]'s
//! docs: `make`, `status` (what it can be asked), `streams`, `connection`, `input`, `settle`
//! and `stop` (the application's), `output`. What the loop works through is in the others:
//! what to read and what a read brings in `reads`, what is owed the server in `owed`, leases
//! in `leases`, the other replies in `replies`, the commands onto the wire in `wire`.

// Declared in the order rustdoc lists their methods in.
mod make;
mod status;
mod streams;

mod connection;
mod input;

mod settle;
mod stop;

mod output;

// What the loop works through.
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
use crate::commands::{self, HealthPart};
use crate::commit;
use crate::config::{AckWait, Config, ConfigError, GroupGone, OnRetry, Protocol, MAX_STREAMS};
use crate::dead_letter::{self, Job};
use crate::decimal::Decimal;
use crate::decode::{Budget, DecodeError, Decoder, Frame, Value};
use crate::delay;
use crate::dialect::Dialect;
use crate::entry::{Entry, Source, Verdict};
use crate::error::{is_group_gone, is_transient, Command, Error};
use crate::held::{key_hash, HeldId, HeldIds, KeyHasher};
use crate::in_flight::{InFlight, Pipeline, Sent};
use crate::lease;
use crate::notice::{DeadLetterReason, GroupHealth, Notice, OldestPending};
use crate::pace::Pace;
use crate::release;
use crate::reply::{self, Hello, Role};
use crate::span::Span;
use crate::stats::{OldestInHand, Snapshot, Stats};
use crate::stream::{Buffered, Next, Stream, CURSOR_START, DRAIN_START};
use crate::stream_reply::{self, Item};
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
    /// By when, at the latest, the server was done with the last command answered: when its
    /// reply was read, or sooner, the most it could have run after it could begin
    /// ([`Consumer::longest_run`]). The server begins the command behind it by then, or when
    /// it is sent, whichever is later: what a read's entries count their lease from.
    done_by: Option<Instant>,
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
    /// back before it leaves — after the read there is ended on the server (`CLIENT UNBLOCK`,
    /// the connection's id known): until the server has seen the socket go, it may still
    /// deliver an entry there, after the give-back had looked.
    cut: Option<(Instant, Option<u64>)>,
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
    /// By when the server was done with the last `WAIT` (or `WAITAOF`) of acks (its
    /// [`done_by`](Self::done_by)): a read pipelined behind it ran on the server when it
    /// returned, not when it was sent (its entries' leases count from then).
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

/// How much later than it could begin the server may run a command that does not block: it
/// serves one command at a time, another client's among them (a slow script, a big key
/// deleted). Over it, a lease is counted from too early and a renewal may take the entry for
/// lost (it comes back after `min_idle`); under it, a process that stood still may count one
/// from too late, by at most this for each command ahead (a tenth of `min_idle` at most).
const BUSY: Duration = Duration::from_secs(1);
/// With many streams, how many `XAUTOCLAIM` sweeps a beat may bring at most: 1,000 idle
/// streams then cost the server about 8 commands a second beside the parked read, and a dead
/// peer's entries on a server without reads that claim (before Redis 8.4) wait up to
/// `beat × streams / 16` (125 s for 1,000 streams and a 2 s beat) rather than `min_idle`.
const SWEEPS_PER_BEAT: u32 = 16;
/// The same where reads claim idle entries themselves (Redis 8.4+): the sweeps only clear
/// the pending entries whose messages were deleted, which nothing waits for.
const SWEEPS_PER_BEAT_CLAIMING: u32 = 4;

impl Consumer {
    // ---- the loop's turn ----------------------------------------------------------------

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
}
