//! What a consumer is told before it starts, and the checks that refuse a bad setup early.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;

/// The wire protocol spoken on the connection, fixed at the handshake.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Protocol {
    /// RESP2: `AUTH`, `SELECT` and `CLIENT SETNAME` as separate commands.
    #[default]
    Resp2,
    /// RESP3: the handshake is `HELLO 3 [AUTH user pass] [SETNAME name]`.
    Resp3,
}

/// What to do when the server says the group (or the whole key) is gone: a `NOGROUP` reply,
/// or `UNBLOCKED … no longer exists` while parked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum GroupGone {
    /// Fail with [`Error::GroupGone`](crate::Error::GroupGone) (fatal).
    #[default]
    Fail,
    /// Create the group again (`XGROUP CREATE … MKSTREAM` at [`Config::create_group`]) and
    /// restart from the drain. Requires `create_group`.
    Recreate,
}

/// Credentials sent at the handshake.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Auth {
    /// ACL user name; `None` means the `default` user.
    pub user: Option<Bytes>,
    /// The password.
    pub password: Bytes,
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Auth").field("user", &self.user).field("password", &"…").finish()
    }
}

/// Bounds on what the decoder accepts from the server, so that bad or hostile bytes cost
/// bounded memory and stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Largest reply frame in bytes (default 512 MiB, the server's own bulk limit). A reply
    /// that declares or reaches more is an error at once, not a wait for bytes that never come.
    pub max_frame: usize,
    /// Deepest nesting of aggregates (default 32; stream replies need 5).
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_frame: 512 << 20, max_depth: 32 }
    }
}

impl Limits {
    /// Sets [`Limits::max_frame`].
    #[must_use]
    pub fn max_frame(mut self, bytes: usize) -> Limits {
        self.max_frame = bytes;
        self
    }

    /// Sets [`Limits::max_depth`].
    #[must_use]
    pub fn max_depth(mut self, depth: usize) -> Limits {
        self.max_depth = depth;
        self
    }
}

/// A consumer's configuration. Start from [`Config::new`] and adjust with the builder methods
/// or the public fields; [`Consumer::new`](crate::Consumer::new) validates it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Config {
    /// The stream key (the first, where [`Config::streams`] names more).
    pub stream: Bytes,
    /// The streams read besides [`Config::stream`], on the same connection by the same
    /// consumer (see [`Config::streams`]). Empty by default.
    pub more_streams: Vec<Bytes>,
    /// The consumer group.
    pub group: Bytes,
    /// This consumer's name in the group. A restart under the same name drains its backlog.
    pub consumer: Bytes,
    /// Entries per read (`COUNT`) and per reclaim; at least 1. Default 100.
    pub count: u32,
    /// The beat: how long a parked read blocks (`BLOCK`), and how often dead peers' entries
    /// are reclaimed. Default 2 s; at least 1 ms.
    pub beat: Duration,
    /// How long an entry must sit idle (by the server's clock) before `XAUTOCLAIM` takes it
    /// from its owner, this consumer included (that is how a `Retry` verdict comes back).
    /// Default 30 s; more than zero.
    pub min_idle: Duration,
    /// Start id for `XGROUP CREATE key group <id> MKSTREAM` at every handshake (`BUSYGROUP`
    /// counts as success); `None` sends no `XGROUP CREATE`.
    pub create_group: Option<Bytes>,
    /// With [`create_group`](Self::create_group): the start id of a group made on a stream
    /// added while the consumer runs ([`Consumer::add_stream`](crate::Consumer::add_stream),
    /// a transport's `StreamSet::add`, `consume --stream-pattern`'s later finds). `None`, the
    /// default, is `0`: the whole stream, so that entries written to it before it was added
    /// (or found) are not skipped — `$` would start after them, without a word.
    pub create_added_group: Option<Bytes>,
    /// What to do when the group disappears.
    pub on_group_gone: GroupGone,
    /// RESP2 or RESP3.
    pub protocol: Protocol,
    /// Credentials, if the server wants them.
    pub auth: Option<Auth>,
    /// The connection's name (`CLIENT SETNAME`, or `HELLO … SETNAME`), shown by
    /// `CLIENT LIST`; printable ASCII without spaces. Default `pelican:<stream>:<group>:<consumer>`
    /// (any byte that a name cannot hold shown as `?`); `None` sends no name.
    pub client_name: Option<Bytes>,
    /// Database index (`SELECT`); 0 sends nothing.
    pub db: u32,
    /// How long past its expected time a reply may be late before the connection is deemed
    /// dead: non-blocking commands get `read_grace`, a parked read `beat + read_grace`.
    /// At least 1 s (servers answer `BLOCK` up to ~100 ms late). Default 2 s.
    pub read_grace: Duration,
    /// First reconnect delay; it doubles per failed attempt up to `backoff_max`, with jitter.
    /// Default 100 ms.
    pub backoff_min: Duration,
    /// Longest reconnect delay. Default 5 s.
    pub backoff_max: Duration,
    /// Seed for the reconnect jitter (the core has no randomness of its own). `None`, the
    /// default: the driver's — the transports give each consumer a seed of its own process
    /// ([`Consumer::reseed`](crate::Consumer::reseed)), so that a fleet restarted at once
    /// does not reconnect in step; a driver that gives none gets a fixed one. `Some`: this
    /// one, whatever the driver (for runs that must repeat).
    pub seed: Option<u64>,
    /// Decoder bounds.
    pub limits: Limits,
    /// How long an earned ack may wait to share its `XACK` with the next ones (default 5 ms).
    /// Fast handlers thus get one `XACK` per batch or per `ack_delay`; after a handler that
    /// took `ack_delay` or longer, the ack goes out at once, before the next entry is handed
    /// out. Zero sends every ack at its settle. With entries in hand and nothing new on the
    /// stream, an ack may also wait for the parked read to answer (50 ms at most: such reads
    /// block only that long then).
    pub ack_delay: Duration,
    /// How long after the read that delivered it (or the last renewal) an entry's ownership
    /// is renewed, so that no peer's `XAUTOCLAIM` takes it while it waits in the buffer or is
    /// being handled. `None` (the default) is `min_idle / 2`; a value must lie between
    /// `min_idle / 5` and `3/4 × min_idle`. See [`Consumer`](crate::Consumer), *Leases*.
    pub lease: Option<Duration>,
    /// The most deliveries an entry may have and still be handed out; one delivered more
    /// often is moved to [`dead_letter`](Self::dead_letter) instead (which this requires).
    /// `None` (the default): no cap.
    pub max_deliveries: Option<u64>,
    /// The dead-letter stream: where entries past [`max_deliveries`](Self::max_deliveries),
    /// and those given [`Verdict::DeadLetter`](crate::Verdict::DeadLetter), are moved. In a
    /// cluster it must share the stream's hash slot (e.g. `{orders}` and `{orders}:dead`).
    /// `%s` in it stands for the stream's key, `%%` for `%` ([`key_for`]): with
    /// [`Config::streams`], `%s:dead` gives each stream its own.
    pub dead_letter: Option<Bytes>,
    /// The keys [`Verdict::Commit`](crate::Verdict::Commit)s will write, where known in
    /// advance (`Some`, maybe empty: commits will be made). Checked at every connect, before
    /// anything is read, as the dead-letter stream is: that the user may run scripts and,
    /// on 7.0+, the commands a commit runs on these keys; in a cluster, that they share the
    /// stream's hash slot. The commit script is loaded then too. `None` (the default):
    /// commits are still allowed, and a refusal comes at the first one. `%s` stands for the
    /// stream's key as in [`Config::dead_letter`] (checked for the first stream).
    pub commit_to: Option<Vec<Bytes>>,
    /// Roughly how many bytes one read may bring (default 16 MiB; [`Limits::max_frame`] if
    /// that is lower): reads ask for fewer entries when entries are big, and a reply
    /// that outgrows this with more than one entry is skipped and asked again, smaller.
    /// A single entry may still be as large as `max_frame`.
    pub read_bytes: usize,
    /// How often to ask after the group's health — pending count, oldest pending entry,
    /// lag ([`Notice::Health`](crate::Notice::Health)) — with three commands pipelined
    /// between reads (`XINFO GROUPS`, `XPENDING key group - + 1`, `TIME`). `None` (the
    /// default): never. With [`Config::streams`], one stream a round, the longest unasked
    /// (the notice does not say which).
    pub health_every: Option<Duration>,
    /// How many entries may be in hand at once (handed out and not yet settled), each settled
    /// by its id in any order. Default 1: one entry at a time. At most [`MAX_CONCURRENCY`].
    /// With [`Config::streams`], per stream: a slow stream holds up no other.
    pub concurrency: u32,
    /// With [`Config::streams`], the most entries in hand at once over all of them (each
    /// still within [`Config::concurrency`]): what bounds the threads or processes a driver
    /// runs handlers on. `None` (the default): no bound but the streams' own.
    pub most_in_hand: Option<u32>,
    /// How many entries a read asks for until a handler has been timed (after that, reads ask
    /// for what the handlers get through well within the lease, up to `count`). `None` (the
    /// default): [`concurrency`](Self::concurrency), so that a consumer starting beside idle
    /// peers takes no more than it can work on, and a crash before the first settle counts a
    /// delivery against as few entries as possible.
    pub start_count: Option<u32>,
    /// Hands out entries of one key one at a time, in the order they were read (see
    /// [`OrderBy`]). `None` (the default): any entries at once, up to `concurrency`.
    pub order_by: Option<OrderBy>,
    /// Whether to start beside a live connection under this consumer's name (a *twin*: two
    /// processes sharing one name share one pending list and handle each other's entries
    /// twice). `false` (the default): the first connect refuses with
    /// [`Error::Twin`](crate::Error::Twin), and a twin seen later (by the look every
    /// `min_idle`) is told as [`Notice::Twin`](crate::Notice::Twin). Needs a client name.
    pub allow_twins: bool,
    /// Whether a clean stop deletes the consumer from the group when it holds no pending
    /// entry (`XGROUP DELCONSUMER`, checked and done in one script: never one that holds
    /// entries), so that consumers named after short-lived processes do not pile up.
    /// `true` by default; never with [`allow_twins`](Self::allow_twins) (a twin may still
    /// be at work under the name). A stop without a connection, an abandon and a crash
    /// leave the consumer in the group (`pelican retire` removes such ones).
    pub leave_on_stop: bool,
    /// What a [`Verdict::Retry`](crate::Verdict::Retry) does. Default
    /// [`OnRetry::Backoff`] with [`RetryBackoff::default`]: a wait that grows with the
    /// entry's deliveries, on every server.
    pub on_retry: OnRetry,
    /// Delete each acked entry from the stream in the same step (`XACKDEL`, Redis 8.2+),
    /// for streams used as work queues: the condition says what happens to an entry other
    /// groups have not acked yet. `None` (the default): acks leave the stream as it is. On a
    /// server without `XACKDEL` the first connect fails with [`Error::Unsupported`](crate::Error::Unsupported).
    /// Entries settled by a [`Verdict::Commit`](crate::Verdict::Commit) are deleted by the
    /// same condition right after their commit (`XDELEX`), best effort.
    pub delete_acked: Option<DeleteAcked>,
    /// Speak only the classic stream verbs (Redis 6.2's) whatever the server offers (see
    /// [`Dialect`](crate::Dialect)). Default `false`: the newer verbs where the server has them.
    pub classic_verbs: bool,
    /// Wait for each batch of acks (and each dead-letter move) to reach replicas, or the
    /// append-only file, before going on (see [`AckWait`]). `None` (the default): acks are
    /// confirmed by the master alone, and a failover may lose the last of them (their entries
    /// are then delivered again, never lost).
    pub ack_wait: Option<AckWait>,
}

/// [`Config::ack_wait`]: what an ack batch waits for before the consumer goes on.
///
/// Replication is asynchronous: a failover promotes a replica that may not have the last
/// writes of its master, and an ack lost that way brings its entry back (delivered again,
/// to this consumer's drain or a peer's reclaim). Waiting makes that rarer, at the cost of a
/// round trip to the replicas for every batch (reads wait behind it). It does not make the
/// ack synchronous: a replica that does not answer in time leaves the ack where it is, and
/// the consumer goes on — it counts such acks ([`Stats::acks_unreplicated`](crate::Stats::acks_unreplicated))
/// and says so ([`Notice::AcksUnreplicated`](crate::Notice::AcksUnreplicated)). Once a wait
/// has run out, the next batches wait only 1 ms each until one reaches the replicas again: a
/// replica that is down (or a master left without one after a failover) costs one timeout,
/// not one per batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AckWait {
    /// `WAIT replicas timeout` after each batch: until that many replicas have it.
    Replicas {
        /// Replicas that must have the acks (1 or more).
        replicas: u32,
        /// The longest a batch waits for them.
        timeout: Duration,
    },
    /// `WAITAOF local replicas timeout` after each batch (Redis 7.2+, Valkey): until the
    /// master's append-only file (`local`) and that many replicas' have it written and
    /// fsynced. On an older server the first connect fails with
    /// [`Error::Unsupported`](crate::Error::Unsupported).
    Aof {
        /// The master's own append-only file too (it must have `appendonly yes`).
        local: bool,
        /// Replicas whose append-only files must have the acks.
        replicas: u32,
        /// The longest a batch waits.
        timeout: Duration,
    },
}

impl AckWait {
    /// How long a batch may wait.
    pub fn timeout(&self) -> Duration {
        match *self {
            AckWait::Replicas { timeout, .. } | AckWait::Aof { timeout, .. } => timeout,
        }
    }

    /// How many replicas must have each batch.
    pub fn replicas(&self) -> u32 {
        match *self {
            AckWait::Replicas { replicas, .. } | AckWait::Aof { replicas, .. } => replicas,
        }
    }
}

/// What a [`Verdict::Retry`](crate::Verdict::Retry) does with its entry.
///
/// [`OnRetry::Backoff`], the default, works the same on every server: the entry waits a
/// time that grows with its deliveries, kept by the server (see [`RetryBackoff`]). The
/// others are the earlier behaviours: on servers without `XNACK` (before Redis 8.8, Valkey)
/// each of them is [`OnRetry::StayPending`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnRetry {
    /// Released at once (`XNACK … FAIL`: its delivery count kept): the next read of any
    /// consumer of the group — a peer, or this one — takes it again, without waiting
    /// `min_idle`. An entry that keeps failing is released after a growing wait, so that it
    /// is not retried in a hot loop: at its 2nd delivery 10 ms, then ×4 each time (40 ms,
    /// 160 ms, 640 ms…); once that would pass the lease, it stays pending as on older
    /// servers (back after `min_idle`). The waits are kept in this process only: a crash
    /// leaves the entry pending with it.
    Release,
    /// Released this long after the verdict, at most [`Config::lease_threshold`] (a longer
    /// wait is what [`OnRetry::StayPending`] gives): a retry that waits a little, e.g. for a
    /// flaky downstream. Kept in this process only, like [`OnRetry::Release`]'s waits.
    ReleaseAfter(Duration),
    /// Stays pending with this consumer until a reclaim takes it, after `min_idle` (or a
    /// restart's drain): the classic behaviour.
    StayPending,
    /// Every `Retry` is a [`Verdict::RetryAfter`](crate::Verdict::RetryAfter) of a wait
    /// that grows with the entry's deliveries, jittered ([`RetryBackoff`]), on every server:
    /// the entry is handed out again — to this consumer or a peer — no earlier than that,
    /// and soon after, whatever happens to this process meanwhile. The default, with
    /// [`RetryBackoff::default`]: 1 s, doubling with each delivery, at most `min_idle`.
    Backoff(RetryBackoff),
}

impl Default for OnRetry {
    fn default() -> OnRetry {
        OnRetry::Backoff(RetryBackoff::default())
    }
}

/// [`OnRetry::Backoff`]: how long an entry given [`Verdict::Retry`](crate::Verdict::Retry)
/// waits before it is handed out again, by its delivery count `n`: between half and all of
/// `first × factor^(n − 1)`, at most `max` ("equal jitter": a burst of failures — a
/// downstream that went away — comes back spread out, not in step, and never sooner than
/// half the ceiling).
///
/// The default, 1 s doubling up to `min_idle` (30 s by default): a lock or a failover that
/// clears within a second or two is retried after it clears, a downstream that is down is
/// asked about once per its ceiling rather than every few milliseconds (what an immediate
/// release does on Redis 8.8+), and no entry waits longer than it did before on servers
/// without `XNACK` (`min_idle`) — so the wait always fits in one server-side park, which
/// survives any crash of this process (see [`Verdict::RetryAfter`](crate::Verdict::RetryAfter)).
/// With `max_deliveries` 5, a poison entry reaches the dead-letter stream after about
/// 8–15 s of waits instead of four `min_idle`s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryBackoff {
    /// The ceiling of the first wait (after the first delivery). Default 1 s.
    pub first: Duration,
    /// How much the ceiling grows with each further delivery (at least 1). Default 2.
    pub factor: u32,
    /// The longest ceiling. `None`, the default: [`Config::min_idle`].
    pub max: Option<Duration>,
}

impl Default for RetryBackoff {
    fn default() -> RetryBackoff {
        RetryBackoff { first: Duration::from_secs(1), factor: 2, max: None }
    }
}

impl RetryBackoff {
    /// A backoff starting at `first`, doubling, at most `min_idle`.
    pub fn new(first: Duration) -> RetryBackoff {
        RetryBackoff { first, ..RetryBackoff::default() }
    }

    /// Sets [`RetryBackoff::factor`].
    #[must_use]
    pub fn factor(mut self, factor: u32) -> RetryBackoff {
        self.factor = factor;
        self
    }

    /// Sets [`RetryBackoff::max`].
    #[must_use]
    pub fn max(mut self, max: Duration) -> RetryBackoff {
        self.max = Some(max);
        self
    }

    /// The ceiling of the wait after an entry's `deliveries`-th delivery: `first ×
    /// factor^(deliveries − 1)`, at most `max` (or `min_idle` when `max` is `None`).
    pub fn ceiling(&self, deliveries: u64, min_idle: Duration) -> Duration {
        let most = self.max.unwrap_or(min_idle).min(MAX_DURATION);
        let times = u32::try_from(deliveries.saturating_sub(1)).unwrap_or(u32::MAX).min(64);
        let mut ceiling = self.first;
        for _ in 0..times {
            if ceiling >= most {
                break;
            }
            ceiling = ceiling.saturating_mul(self.factor.max(1));
            if self.factor <= 1 {
                break;
            }
        }
        ceiling.min(most)
    }

    /// The wait after an entry's `deliveries`-th delivery: between half and all of its
    /// [`ceiling`](Self::ceiling), by `random` (any number: the consumer draws one from its
    /// seed).
    pub fn delay(&self, deliveries: u64, min_idle: Duration, random: u64) -> Duration {
        let ceiling = self.ceiling(deliveries, min_idle);
        let half = ceiling / 2;
        let span = u64::try_from((ceiling - half).as_nanos()).unwrap_or(u64::MAX);
        half + Duration::from_nanos(if span == 0 { 0 } else { random % (span + 1) })
    }
}

/// [`Config::delete_acked`]: what `XACKDEL` does with an acked entry that other groups of the
/// stream still reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeleteAcked {
    /// Delete it; the other groups keep their references (`KEEPREF`): they read it as a
    /// deleted entry.
    KeepRef,
    /// Delete it and the other groups' references to it (`DELREF`).
    DelRef,
    /// Delete it only once every group has acked it (`ACKED`).
    Acked,
}

impl DeleteAcked {
    /// The condition's token.
    pub(crate) fn token(self) -> &'static [u8] {
        match self {
            DeleteAcked::KeepRef => b"KEEPREF",
            DeleteAcked::DelRef => b"DELREF",
            DeleteAcked::Acked => b"ACKED",
        }
    }
}

/// What makes two entries *the same key* for [`Config::order_by`]: such entries are handed
/// out one after another in the order this consumer read them (the next only once the one
/// before is settled); entries of different keys run in parallel. An entry without a key (the
/// field missing, the function answering `None`) is a key of its own.
///
/// # What order is promised
///
/// Per consumer, never across consumers: a group spreads one key's entries over all its
/// consumers, so order by key holds for what *this* consumer reads.
///
/// - Two entries of one key are never in hand at once, and are handed out in the order they
///   were read: by id within a read, and reads follow the stream.
/// - A restart (or reconnect) drains the consumer's own pending entries first, in id order,
///   before any new entry: a key's pending entries come back in order, ahead of its new ones.
/// - `Retry` leaves an entry pending and frees its key at once: later entries of the key
///   may be handed out before it comes back (reclaimed after `min_idle`, or at a restart's
///   drain). `DeadLetter` (or `max_deliveries`) moves it away: the key goes on without it.
/// - An entry a peer reclaims (a lease lost, a consumer that died) is handled by that peer,
///   in its own order, possibly beside this consumer's later entries of the same key.
#[derive(Clone)]
#[non_exhaustive]
pub enum OrderBy {
    /// The value of this field is the key.
    Field(Bytes),
    /// A function of the entry gives the key.
    Key(KeyFn),
}

/// The same field, or the same function (not merely an equal one).
impl PartialEq for OrderBy {
    fn eq(&self, other: &OrderBy) -> bool {
        match (self, other) {
            (OrderBy::Field(a), OrderBy::Field(b)) => a == b,
            (OrderBy::Key(a), OrderBy::Key(b)) => std::sync::Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// A function giving an entry's key, for [`OrderBy::Key`].
pub type KeyFn = std::sync::Arc<dyn Fn(&crate::Entry) -> Option<Bytes> + Send + Sync>;

impl fmt::Debug for OrderBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OrderBy::Field(name) => f.debug_tuple("Field").field(name).finish(),
            OrderBy::Key(_) => f.write_str("Key(..)"),
        }
    }
}

impl OrderBy {
    /// The entry's key, if it has one.
    pub fn key(&self, entry: &crate::Entry) -> Option<Bytes> {
        match self {
            OrderBy::Field(name) => entry.field(name).map(Bytes::copy_from_slice),
            OrderBy::Key(key) => key(entry),
        }
    }
}

/// The most entries [`Config::concurrency`] allows in hand at once.
pub const MAX_CONCURRENCY: u32 = 4096;

/// The most streams one consumer reads: each read names every stream (and a parked read
/// cannot share its connection), so a command stays under about 100 KiB with keys of
/// ordinary length. More streams take more consumers (connections).
pub const MAX_STREAMS: usize = 4096;

fn bytes(b: impl AsRef<[u8]>) -> Bytes {
    Bytes::copy_from_slice(b.as_ref())
}

/// The shortest accepted [`Config::read_grace`].
pub const MIN_READ_GRACE: Duration = Duration::from_secs(1);

/// The longest duration any setting accepts: 365 days.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// `pelican:<stream>:<group>:<consumer>` (the three that make one pending list: two
/// connections under one name are twins), each byte a connection name cannot hold (a space, a control
/// or a non-ASCII byte) shown as `?`.
pub(crate) fn default_client_name(stream: &[u8], group: &[u8], consumer: &[u8]) -> Bytes {
    let name = [&b"pelican:"[..], stream, b":", group, b":", consumer].concat();
    name.into_iter().map(|b| if b.is_ascii_graphic() { b } else { b'?' }).collect::<Vec<u8>>().into()
}

/// A group's start id as `XGROUP CREATE` takes it: `$`, or `<ms>` or `<ms>-<seq>`.
fn is_start_id(id: &[u8]) -> bool {
    let number = |n: &[u8]| {
        n.iter().all(u8::is_ascii_digit) && std::str::from_utf8(n).is_ok_and(|n| n.parse::<u64>().is_ok())
    };
    match id.iter().position(|b| *b == b'-') {
        _ if id == b"$" => true,
        Some(dash) => number(&id[..dash]) && number(&id[dash + 1..]),
        None => number(id),
    }
}

/// A key given for every stream ([`Config::dead_letter`], [`Config::commit_to`]) as it is
/// for `stream`: each `%s` is the stream's key, `%%` is `%`; any other `%` stays as it is.
/// Not `{stream}`: braces are the cluster's hash tags.
pub fn key_for(template: &[u8], stream: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(template.len() + stream.len());
    let mut rest = template;
    while let Some(at) = rest.iter().position(|b| *b == b'%') {
        key.extend_from_slice(&rest[..at]);
        rest = &rest[at..];
        if let Some(after) = rest.strip_prefix(b"%s") {
            key.extend_from_slice(stream);
            rest = after;
        } else if let Some(after) = rest.strip_prefix(b"%%") {
            key.push(b'%');
            rest = after;
        } else {
            key.push(b'%');
            rest = &rest[1..];
        }
    }
    key.extend_from_slice(rest);
    key
}

/// The shortest accepted [`Config::min_idle`]: below it, a peer could reclaim an entry during
/// the round trip that delivers or renews it.
pub const MIN_MIN_IDLE: Duration = Duration::from_millis(100);

impl Config {
    /// A configuration with the defaults for everything but the names.
    pub fn new(stream: impl AsRef<[u8]>, group: impl AsRef<[u8]>, consumer: impl AsRef<[u8]>) -> Config {
        let name = default_client_name(stream.as_ref(), group.as_ref(), consumer.as_ref());
        Config {
            stream: bytes(stream),
            more_streams: Vec::new(),
            group: bytes(group),
            consumer: bytes(consumer),
            count: 100,
            beat: Duration::from_secs(2),
            min_idle: Duration::from_secs(30),
            create_group: None,
            create_added_group: None,
            on_group_gone: GroupGone::Fail,
            protocol: Protocol::Resp2,
            auth: None,
            client_name: Some(name),
            db: 0,
            read_grace: Duration::from_secs(2),
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
            seed: None,
            limits: Limits::default(),
            ack_delay: Duration::from_millis(5),
            lease: None,
            max_deliveries: None,
            dead_letter: None,
            commit_to: None,
            read_bytes: 16 << 20,
            health_every: None,
            concurrency: 1,
            most_in_hand: None,
            start_count: None,
            order_by: None,
            allow_twins: false,
            leave_on_stop: true,
            on_retry: OnRetry::default(),
            delete_acked: None,
            classic_verbs: false,
            ack_wait: None,
        }
    }

    /// Sets [`Config::ack_wait`] to [`AckWait::Replicas`]: each ack batch waits until
    /// `replicas` replicas have it, at most `timeout`.
    #[must_use]
    pub fn ack_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.ack_wait = Some(AckWait::Replicas { replicas, timeout });
        self
    }

    /// Sets [`Config::ack_wait`].
    #[must_use]
    pub fn ack_wait(mut self, wait: AckWait) -> Self {
        self.ack_wait = Some(wait);
        self
    }

    /// Sets [`Config::on_retry`].
    #[must_use]
    pub fn on_retry(mut self, on_retry: OnRetry) -> Self {
        self.on_retry = on_retry;
        self
    }

    /// Sets [`Config::on_retry`] to [`OnRetry::Backoff`] with this backoff.
    #[must_use]
    pub fn retry_backoff(mut self, backoff: RetryBackoff) -> Self {
        self.on_retry = OnRetry::Backoff(backoff);
        self
    }

    /// Sets [`Config::delete_acked`]: acks delete their entries (`XACKDEL`, Redis 8.2+).
    #[must_use]
    pub fn delete_acked(mut self, condition: DeleteAcked) -> Self {
        self.delete_acked = Some(condition);
        self
    }

    /// Sets [`Config::classic_verbs`]: only the classic stream verbs, whatever the server.
    #[must_use]
    pub fn classic_verbs(mut self) -> Self {
        self.classic_verbs = true;
        self
    }

    /// Sets [`Config::concurrency`]: up to `n` entries in hand at once.
    #[must_use]
    pub fn concurrency(mut self, n: u32) -> Self {
        self.concurrency = n;
        self
    }

    /// Sets [`Config::most_in_hand`]: at most `n` entries in hand over all the streams.
    #[must_use]
    pub fn most_in_hand(mut self, n: u32) -> Self {
        self.most_in_hand = Some(n);
        self
    }

    /// Sets [`Config::start_count`].
    #[must_use]
    pub fn start_count(mut self, n: u32) -> Self {
        self.start_count = Some(n);
        self
    }

    /// Orders entries by the value of `field` ([`Config::order_by`], [`OrderBy::Field`]).
    #[must_use]
    pub fn order_by(mut self, field: impl AsRef<[u8]>) -> Self {
        self.order_by = Some(OrderBy::Field(bytes(field)));
        self
    }

    /// Orders entries by the key `key` gives ([`Config::order_by`], [`OrderBy::Key`]).
    #[must_use]
    pub fn order_by_key(
        mut self,
        key: impl Fn(&crate::Entry) -> Option<Bytes> + Send + Sync + 'static,
    ) -> Self {
        self.order_by = Some(OrderBy::Key(std::sync::Arc::new(key)));
        self
    }

    /// Sets [`Config::allow_twins`]: start and run beside another live connection under this
    /// consumer's name.
    #[must_use]
    pub fn allow_twins(mut self) -> Self {
        self.allow_twins = true;
        self
    }

    /// Sets [`Config::leave_on_stop`]: `false` keeps the consumer in the group after a stop
    /// (for a fixed name, e.g. a StatefulSet's pod, that comes back to its own entries).
    #[must_use]
    pub fn leave_on_stop(mut self, leave: bool) -> Self {
        self.leave_on_stop = leave;
        self
    }

    /// The count reads ask for until a handler is timed ([`Config::start_count`]).
    pub fn start_count_in_force(&self) -> u32 {
        self.start_count.unwrap_or(self.concurrency).clamp(1, self.count)
    }

    /// Sets [`Config::health_every`].
    #[must_use]
    pub fn health_every(mut self, interval: Duration) -> Self {
        self.health_every = Some(interval);
        self
    }

    /// Sets [`Config::count`].
    #[must_use]
    pub fn count(mut self, count: u32) -> Self {
        self.count = count;
        self
    }
    /// Sets [`Config::beat`].
    #[must_use]
    pub fn beat(mut self, beat: Duration) -> Self {
        self.beat = beat;
        self
    }
    /// Sets [`Config::min_idle`].
    #[must_use]
    pub fn min_idle(mut self, min_idle: Duration) -> Self {
        self.min_idle = min_idle;
        self
    }
    /// Sets [`Config::create_group`] to `Some(start)` (`"$"` for new entries only, `"0"` for
    /// the whole stream).
    #[must_use]
    pub fn create_group(mut self, start: impl AsRef<[u8]>) -> Self {
        self.create_group = Some(bytes(start));
        self
    }
    /// Sets [`Config::create_added_group`]: where a group made on a stream added while running
    /// starts (`"0"` by default; `"$"` for new entries only).
    #[must_use]
    pub fn create_added_group(mut self, start: impl AsRef<[u8]>) -> Self {
        self.create_added_group = Some(bytes(start));
        self
    }
    /// Sets [`Config::on_group_gone`].
    #[must_use]
    pub fn on_group_gone(mut self, policy: GroupGone) -> Self {
        self.on_group_gone = policy;
        self
    }
    /// Sets [`Config::protocol`].
    #[must_use]
    pub fn protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = protocol;
        self
    }
    /// Sets [`Config::auth`].
    #[must_use]
    pub fn auth(mut self, user: Option<impl AsRef<[u8]>>, password: impl AsRef<[u8]>) -> Self {
        self.auth = Some(Auth { user: user.map(bytes), password: bytes(password) });
        self
    }
    /// Sets [`Config::client_name`].
    #[must_use]
    pub fn client_name(mut self, name: impl AsRef<[u8]>) -> Self {
        self.client_name = Some(bytes(name));
        self
    }

    /// Sends no connection name (see [`Config::client_name`]).
    #[must_use]
    pub fn no_client_name(mut self) -> Self {
        self.client_name = None;
        self
    }
    /// Reads these streams (the first becomes [`Config::stream`], the others
    /// [`Config::more_streams`]; repeats are dropped): one consumer, one connection, one
    /// parked read over all of them. Each stream's own pending entries are drained at every
    /// (re)connect, each is swept for dead peers' entries about once per `min_idle`, and an
    /// entry's stream is [`Entry::stream`](crate::Entry::stream). The group and the consumer
    /// name are the same on each. In a cluster the streams must share a hash slot (a hash
    /// tag: `{tenants}:a`, `{tenants}:b`). An empty list changes nothing.
    #[must_use]
    pub fn streams<K: AsRef<[u8]>>(mut self, streams: impl IntoIterator<Item = K>) -> Self {
        let mut keys: Vec<Bytes> = Vec::new();
        for key in streams {
            let key = bytes(key);
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        if keys.is_empty() {
            return self;
        }
        let first = keys.remove(0);
        if self.client_name == Some(default_client_name(&self.stream, &self.group, &self.consumer)) {
            self.client_name = Some(default_client_name(&first, &self.group, &self.consumer));
        }
        self.stream = first;
        self.more_streams = keys;
        self
    }

    /// Sets [`Config::db`].
    #[must_use]
    pub fn db(mut self, db: u32) -> Self {
        self.db = db;
        self
    }
    /// Sets [`Config::read_grace`].
    #[must_use]
    pub fn read_grace(mut self, grace: Duration) -> Self {
        self.read_grace = grace;
        self
    }
    /// Sets [`Config::backoff_min`] and [`Config::backoff_max`].
    #[must_use]
    pub fn backoff(mut self, min: Duration, max: Duration) -> Self {
        self.backoff_min = min;
        self.backoff_max = max;
        self
    }
    /// Sets [`Config::seed`]: this jitter whatever the driver.
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }
    /// Sets [`Config::limits`].
    #[must_use]
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets [`Config::ack_delay`].
    #[must_use]
    pub fn ack_delay(mut self, delay: Duration) -> Self {
        self.ack_delay = delay;
        self
    }
    /// Sets [`Config::lease`].
    #[must_use]
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }
    /// Sets [`Config::max_deliveries`] and [`Config::dead_letter`]: an entry delivered more
    /// than `max` times is moved to the stream `key`.
    #[must_use]
    pub fn dead_letter_after(mut self, max: u64, key: impl AsRef<[u8]>) -> Self {
        self.max_deliveries = Some(max);
        self.dead_letter = Some(bytes(key));
        self
    }
    /// Sets [`Config::dead_letter`] (for [`Verdict::DeadLetter`](crate::Verdict::DeadLetter)
    /// alone, without a cap on deliveries).
    #[must_use]
    pub fn dead_letter(mut self, key: impl AsRef<[u8]>) -> Self {
        self.dead_letter = Some(bytes(key));
        self
    }
    /// Sets [`Config::commit_to`]: commits will be made, writing these keys (and maybe
    /// others not known in advance).
    #[must_use]
    pub fn commit_to<K: AsRef<[u8]>>(mut self, keys: impl IntoIterator<Item = K>) -> Self {
        self.commit_to = Some(keys.into_iter().map(bytes).collect());
        self
    }
    /// Sets [`Config::read_bytes`].
    #[must_use]
    pub fn read_bytes(mut self, bytes: usize) -> Self {
        self.read_bytes = bytes;
        self
    }

    /// The lease in force: [`Config::lease`], or `min_idle / 2`.
    pub fn lease_threshold(&self) -> Duration {
        self.lease.unwrap_or(self.min_idle / 2)
    }

    /// Checks the configuration; [`Consumer::new`](crate::Consumer::new) calls this.
    pub fn validate(&self) -> Result<(), ConfigError> {
        use ConfigError::*;
        for (what, name) in [("stream", &self.stream), ("group", &self.group), ("consumer", &self.consumer)] {
            if name.is_empty() {
                return Err(EmptyName(what));
            }
        }
        if self.more_streams.iter().any(|s| s.is_empty()) {
            return Err(EmptyName("stream"));
        }
        if 1 + self.more_streams.len() > MAX_STREAMS {
            return Err(TooManyStreams(1 + self.more_streams.len()));
        }
        if self.count == 0 || self.start_count == Some(0) {
            return Err(ZeroCount);
        }
        if self.concurrency == 0 || self.concurrency > MAX_CONCURRENCY {
            return Err(BadConcurrency(self.concurrency));
        }
        if let Some(most) = self.most_in_hand.filter(|most| *most == 0 || *most > MAX_CONCURRENCY) {
            return Err(BadConcurrency(most));
        }
        if matches!(&self.order_by, Some(OrderBy::Field(name)) if name.is_empty()) {
            return Err(EmptyName("order_by field"));
        }
        if self.beat < Duration::from_millis(1) {
            return Err(BeatTooShort);
        }
        if self.beat > Duration::from_secs(24 * 3600) {
            return Err(BeatTooLong);
        }
        for (what, d) in [
            ("min_idle", Some(self.min_idle)),
            ("read_grace", Some(self.read_grace)),
            ("backoff_max", Some(self.backoff_max)),
            ("ack_delay", Some(self.ack_delay)),
            ("health_every", self.health_every),
            ("ack_wait timeout", self.ack_wait.map(|w| w.timeout())),
        ] {
            // Past this, deadlines would overflow the clock; no sane setting comes near it.
            if d.is_some_and(|d| d > MAX_DURATION) {
                return Err(DurationTooLong(what));
            }
        }
        if self.health_every.is_some_and(|d| d.is_zero()) {
            return Err(DurationTooShort("health_every"));
        }
        match self.ack_wait {
            Some(AckWait::Replicas { replicas: 0, .. } | AckWait::Aof { local: false, replicas: 0, .. }) => {
                return Err(NothingToWaitFor);
            }
            // WAIT 0 / WAITAOF … 0 would block for good when nothing answers.
            Some(wait) if wait.timeout() < Duration::from_millis(1) => {
                return Err(DurationTooShort("ack_wait timeout"));
            }
            _ => {}
        }
        if self.min_idle < MIN_MIN_IDLE {
            return Err(MinIdleTooShort { given: self.min_idle, min: MIN_MIN_IDLE });
        }
        if let Some(lease) = self.lease {
            if lease < self.min_idle / 5 || lease > self.min_idle * 3 / 4 {
                return Err(BadLease { given: lease, min_idle: self.min_idle });
            }
        }
        match (&self.max_deliveries, &self.dead_letter) {
            (Some(0), _) => return Err(ZeroMaxDeliveries),
            (Some(_), None) => return Err(MaxDeliveriesWithoutDeadLetter),
            (_, Some(key)) if key.is_empty() => return Err(EmptyName("dead-letter stream")),
            (_, Some(key)) if *key == self.stream => return Err(DeadLetterIsTheStream),
            _ => {}
        }
        if self.commit_to.iter().flatten().any(|k| k.is_empty()) {
            return Err(EmptyName("commit key"));
        }
        if self.read_bytes < 1024 {
            return Err(BadReadBytes);
        }
        if self.read_grace < MIN_READ_GRACE {
            return Err(ReadGraceTooShort { given: self.read_grace, min: MIN_READ_GRACE });
        }
        if self.on_group_gone == GroupGone::Recreate && self.create_group.is_none() {
            return Err(RecreateWithoutStart);
        }
        if matches!(&self.create_group, Some(start) if start.is_empty()) {
            return Err(EmptyName("create_group start id"));
        }
        if matches!(&self.create_added_group, Some(start) if start.is_empty()) {
            return Err(EmptyName("create_added_group start id"));
        }
        if matches!(&self.create_group, Some(start) if !is_start_id(start)) {
            return Err(BadStartId);
        }
        if let Some(name) = &self.client_name {
            if name.is_empty() || name.iter().any(|b| *b <= b' ' || *b == 0x7f) {
                return Err(BadClientName);
            }
        }
        if self.backoff_min.is_zero() || self.backoff_max < self.backoff_min {
            return Err(BadBackoff);
        }
        if self.limits.max_depth < 8 {
            return Err(LimitTooLow("max_depth (at least 8)"));
        }
        if self.limits.max_frame < 1024 {
            return Err(LimitTooLow("max_frame (at least 1024 bytes)"));
        }
        if self.delete_acked.is_some() && self.classic_verbs {
            return Err(DeleteAckedNeedsXackdel);
        }
        match self.on_retry {
            OnRetry::ReleaseAfter(delay) if delay > self.lease_threshold() => {
                return Err(RetryDelayTooLong { given: delay, most: self.lease_threshold() });
            }
            OnRetry::Backoff(b) if b.factor == 0 => return Err(BadRetryBackoff),
            OnRetry::Backoff(b) if b.first > MAX_DURATION || b.max.is_some_and(|m| m > MAX_DURATION) => {
                return Err(DurationTooLong("retry backoff"));
            }
            _ => {}
        }
        Ok(())
    }
}

/// Why a [`Config`] was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// The stream, group, consumer name or start id is empty.
    EmptyName(&'static str),
    /// More streams than one consumer reads ([`MAX_STREAMS`]).
    TooManyStreams(usize),
    /// `count` is zero (the server answers `COUNT must be > 0`).
    ZeroCount,
    /// The beat is under 1 ms (`BLOCK 0` would block forever, which a deleted key makes fatal).
    BeatTooShort,
    /// The beat is over a day.
    BeatTooLong,
    /// `min_idle` is below [`MIN_MIN_IDLE`].
    MinIdleTooShort {
        /// The value given.
        given: Duration,
        /// The minimum.
        min: Duration,
    },
    /// The lease is outside `min_idle / 5 ..= 3/4 × min_idle`.
    BadLease {
        /// The lease given.
        given: Duration,
        /// The `min_idle` it must fit.
        min_idle: Duration,
    },
    /// `max_deliveries` is zero: nothing could ever be handed out.
    ZeroMaxDeliveries,
    /// [`Config::delete_acked`] with [`Config::classic_verbs`]: deleting on ack needs
    /// `XACKDEL`, which the classic verbs do not have.
    DeleteAckedNeedsXackdel,
    /// [`OnRetry::ReleaseAfter`] waits longer than the lease (past it, the entry is no longer
    /// surely this consumer's to release: [`OnRetry::StayPending`] is what such a wait gives).
    RetryDelayTooLong {
        /// The delay given.
        given: Duration,
        /// The longest accepted: [`Config::lease_threshold`].
        most: Duration,
    },
    /// `max_deliveries` is set without a dead-letter stream to move entries to.
    MaxDeliveriesWithoutDeadLetter,
    /// The dead-letter stream is the consumed stream itself.
    DeadLetterIsTheStream,
    /// `read_bytes` is under 1 KiB.
    BadReadBytes,
    /// `read_grace` is below the minimum a parked read needs.
    ReadGraceTooShort {
        /// The value given.
        given: Duration,
        /// The minimum.
        min: Duration,
    },
    /// `on_group_gone` is `Recreate` but there is no `create_group` start id.
    RecreateWithoutStart,
    /// The client name is empty or holds spaces or control bytes (the server refuses those).
    BadClientName,
    /// `backoff_min` is zero or above `backoff_max`.
    BadBackoff,
    /// A decoder limit is too low to read stream replies.
    LimitTooLow(&'static str),
    /// A duration is over [`MAX_DURATION`] (the setting is named).
    DurationTooLong(&'static str),
    /// A duration is zero where it must not be (the setting is named).
    DurationTooShort(&'static str),
    /// The `create_group` start id is not `$`, `<ms>` or `<ms>-<seq>`.
    BadStartId,
    /// `concurrency` is 0 or over [`MAX_CONCURRENCY`].
    BadConcurrency(u32),
    /// `ack_wait` waits for no replica and no append-only file.
    NothingToWaitFor,
    /// [`RetryBackoff::factor`] is 0 (the waits would not grow, nor even stay).
    BadRetryBackoff,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::EmptyName(what) => write!(f, "the {what} must not be empty"),
            ConfigError::TooManyStreams(n) => write!(
                f,
                "{n} streams: one consumer reads at most {} (use more consumers)",
                MAX_STREAMS
            ),
            ConfigError::ZeroCount => f.write_str("count (and start_count) must be at least 1"),
            ConfigError::BadConcurrency(n) => {
                write!(f, "concurrency {n} must lie between 1 and {MAX_CONCURRENCY}")
            }
            ConfigError::BeatTooShort => f.write_str("the beat must be at least 1 ms"),
            ConfigError::BeatTooLong => f.write_str("the beat must be at most 24 h"),
            ConfigError::MinIdleTooShort { given, min } => {
                write!(f, "min_idle {given:?} is shorter than the {min:?} a reclaim needs")
            }
            ConfigError::BadLease { given, min_idle } => write!(
                f,
                "the lease {given:?} must lie between a fifth and three quarters of min_idle {min_idle:?}"
            ),
            ConfigError::ZeroMaxDeliveries => f.write_str("max_deliveries must be at least 1"),
            ConfigError::DeleteAckedNeedsXackdel => {
                f.write_str("deleting acked entries needs XACKDEL, which the classic verbs do not have")
            }
            ConfigError::RetryDelayTooLong { given, most } => write!(
                f,
                "a retry released after {given:?} waits longer than the lease ({most:?}): keep it pending instead"
            ),
            ConfigError::MaxDeliveriesWithoutDeadLetter => {
                f.write_str("max_deliveries needs a dead-letter stream to move entries to")
            }
            ConfigError::DeadLetterIsTheStream => {
                f.write_str("the dead-letter stream must not be the consumed stream")
            }
            ConfigError::BadReadBytes => f.write_str("read_bytes must be at least 1024"),
            ConfigError::ReadGraceTooShort { given, min } => {
                write!(f, "read_grace {given:?} is shorter than the {min:?} a parked read needs")
            }
            ConfigError::RecreateWithoutStart => {
                f.write_str("on_group_gone = Recreate needs a create_group start id")
            }
            ConfigError::BadClientName => {
                f.write_str("the client name must be non-empty, without spaces or control bytes")
            }
            ConfigError::BadBackoff => f.write_str("backoff_min must be above zero and at most backoff_max"),
            ConfigError::LimitTooLow(what) => write!(f, "decoder limit too low: {what}"),
            ConfigError::DurationTooLong(what) => write!(f, "{what} must be at most 365 days"),
            ConfigError::DurationTooShort(what) => write!(f, "{what} must be more than zero"),
            ConfigError::NothingToWaitFor => {
                f.write_str("ack_wait must wait for at least one replica (or, with WAITAOF, the local file)")
            }
            ConfigError::BadRetryBackoff => f.write_str("the retry backoff's factor must be at least 1"),
            ConfigError::BadStartId => f.write_str(
                "a group start id is $ (new entries only), 0 (the whole stream), <ms> or <ms>-<seq>",
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Config {
        Config::new("s", "g", "c")
    }

    #[test]
    fn defaults_are_valid() {
        assert_eq!(base().validate(), Ok(()));
    }

    #[test]
    fn refuses_each_bad_setting() {
        let cases: Vec<(Config, ConfigError)> = vec![
            (Config::new("", "g", "c"), ConfigError::EmptyName("stream")),
            (Config::new("s", "", "c"), ConfigError::EmptyName("group")),
            (Config::new("s", "g", ""), ConfigError::EmptyName("consumer")),
            (base().count(0), ConfigError::ZeroCount),
            (base().ack_replicas(0, Duration::from_secs(1)), ConfigError::NothingToWaitFor),
            (
                base().ack_wait(AckWait::Aof { local: false, replicas: 0, timeout: Duration::from_secs(1) }),
                ConfigError::NothingToWaitFor,
            ),
            (base().ack_replicas(1, Duration::ZERO), ConfigError::DurationTooShort("ack_wait timeout")),
            (base().beat(Duration::ZERO), ConfigError::BeatTooShort),
            (base().beat(Duration::from_micros(999)), ConfigError::BeatTooShort),
            (base().beat(Duration::from_secs(90_000)), ConfigError::BeatTooLong),
            (
                base().min_idle(Duration::from_millis(99)),
                ConfigError::MinIdleTooShort { given: Duration::from_millis(99), min: MIN_MIN_IDLE },
            ),
            (
                base().lease(Duration::from_secs(23)),
                ConfigError::BadLease { given: Duration::from_secs(23), min_idle: Duration::from_secs(30) },
            ),
            (
                base().lease(Duration::from_secs(5)),
                ConfigError::BadLease { given: Duration::from_secs(5), min_idle: Duration::from_secs(30) },
            ),
            (base().dead_letter_after(0, "dl"), ConfigError::ZeroMaxDeliveries),
            (base().delete_acked(DeleteAcked::Acked).classic_verbs(), ConfigError::DeleteAckedNeedsXackdel),
            (
                base().on_retry(OnRetry::ReleaseAfter(Duration::from_secs(16))),
                ConfigError::RetryDelayTooLong {
                    given: Duration::from_secs(16),
                    most: Duration::from_secs(15),
                },
            ),
            (Config { max_deliveries: Some(3), ..base() }, ConfigError::MaxDeliveriesWithoutDeadLetter),
            (base().dead_letter(""), ConfigError::EmptyName("dead-letter stream")),
            (base().dead_letter("s"), ConfigError::DeadLetterIsTheStream),
            (base().read_bytes(100), ConfigError::BadReadBytes),
            (
                base().read_grace(Duration::from_millis(999)),
                ConfigError::ReadGraceTooShort { given: Duration::from_millis(999), min: MIN_READ_GRACE },
            ),
            (base().on_group_gone(GroupGone::Recreate), ConfigError::RecreateWithoutStart),
            (base().create_group(""), ConfigError::EmptyName("create_group start id")),
            (base().client_name("a b"), ConfigError::BadClientName),
            (base().create_group("notanid"), ConfigError::BadStartId),
            (base().create_group("1-"), ConfigError::BadStartId),
            (base().min_idle(Duration::from_millis(u64::MAX)), ConfigError::DurationTooLong("min_idle")),
            (base().health_every(Duration::ZERO), ConfigError::DurationTooShort("health_every")),
            (base().health_every(MAX_DURATION * 2), ConfigError::DurationTooLong("health_every")),
            (base().backoff(Duration::ZERO, Duration::from_secs(1)), ConfigError::BadBackoff),
            (base().backoff(Duration::from_secs(2), Duration::from_secs(1)), ConfigError::BadBackoff),
            (
                base().limits(Limits { max_frame: 1 << 20, max_depth: 4 }),
                ConfigError::LimitTooLow("max_depth (at least 8)"),
            ),
        ];
        for (config, want) in cases {
            assert_eq!(config.validate(), Err(want.clone()), "{config:?}");
            assert!(!want.to_string().is_empty());
        }
    }

    #[test]
    fn lease_defaults_to_half_min_idle() {
        assert_eq!(base().lease_threshold(), Duration::from_secs(15));
        assert_eq!(base().lease(Duration::from_secs(20)).lease_threshold(), Duration::from_secs(20));
        assert_eq!(base().dead_letter_after(5, "dl").validate(), Ok(()));
        assert_eq!(base().dead_letter("dl").validate(), Ok(()));
    }

    #[test]
    fn recreate_with_start_is_valid() {
        let config = base().create_group("0").on_group_gone(GroupGone::Recreate);
        assert_eq!(config.validate(), Ok(()));
    }

    #[test]
    fn start_ids_and_names() {
        for start in ["$", "0", "0-0", "1700000000000", "1700000000000-3"] {
            assert_eq!(base().create_group(start).validate(), Ok(()), "{start}");
        }
        for bad in ["notanid", "-", "1-", "-1", "+5", "1-2-3", "99999999999999999999", "$-1"] {
            assert_eq!(base().create_group(bad).validate(), Err(ConfigError::BadStartId), "{bad}");
        }
        assert_eq!(base().client_name.as_deref(), Some(&b"pelican:s:g:c"[..]));
        let odd = Config::new("s", "my group", b"caf\xc3\xa9");
        assert_eq!(odd.client_name.as_deref(), Some(&b"pelican:s:my?group:caf??"[..]));
        assert_eq!(odd.validate(), Ok(()));
        assert_eq!(base().no_client_name().client_name, None);
    }

    #[test]
    fn password_is_not_printed() {
        let config = base().auth(Some("u"), "secret words");
        assert!(!format!("{config:?}").contains("secret"));
    }
}
