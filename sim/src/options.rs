//! Which server the simulator imitates where the real servers differ.

/// The shape of `XAUTOCLAIM` replies, and what it does with deleted pending entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClaimShape {
    /// Redis 6.2: `[cursor, claimed]`; a deleted pending entry is claimed like any other
    /// (count +1, moved to the claimer's PEL) and answered as a bare nil (`$-1`), or as its
    /// id under `JUSTID`.
    Redis62,
    /// Redis 7.0+ and Valkey: `[cursor, claimed, deleted_ids]`; deleted pending entries met
    /// by the scan are dropped from the PEL (whatever their idle time) and listed last.
    Redis7,
}

/// What a client parked on `XREADGROUP … BLOCK … >` gets when its stream key is deleted
/// (`DEL`, `FLUSHALL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyDeletedWhileParked {
    /// Redis 6.2: nothing; it stays parked until its timeout (then nil), unless the key is
    /// recreated and written to first.
    StayBlocked,
    /// Redis 7.0: `-UNBLOCKED the stream key no longer exists`.
    Unblocked,
    /// Valkey 8.1 (and Redis 7.2): `-NOGROUP No such key 'k' or consumer group 'g' in
    /// XREADGROUP with GROUP option`.
    NoGroup,
}

/// What a parked client gets when its group is destroyed (`XGROUP DESTROY`), or when its key
/// is recreated without the group and written to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GroupGoneWhileParked {
    /// Redis 6.2 and 7.0: `-NOGROUP the consumer group this client was blocked on no longer
    /// exists`.
    BlockedOnGroup,
    /// Valkey 8.1: `-NOGROUP No such key 'k' or consumer group 'g' in XREADGROUP with GROUP
    /// option`.
    NoSuchKey,
}

/// The Redis 8 stream verbs a simulated server speaks, each as Redis 8.10.2 does it (see the
/// crate docs' command list). All off ([`Redis8Verbs::NONE`]) for the older servers, which
/// answer them as unknown commands (`XNACK`, `XACKDEL`, `XCFGSET`) or syntax errors (the new
/// options of `XREADGROUP`, `XADD` and `XTRIM`); all on ([`Redis8Verbs::REDIS_8_10`]) in
/// [`SimOptions::redis810`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Redis8Verbs {
    /// `XACKDEL`, and the `KEEPREF|DELREF|ACKED` options of `XADD` and `XTRIM`.
    pub ackdel: bool,
    /// `XREADGROUP … CLAIM <min-idle-ms> … >`: idle pending entries of any owner first.
    pub claim: bool,
    /// `XNACK`: releases pending entries to the group.
    pub nack: bool,
    /// `XADD … IDMP <pid> <iid>` / `IDMPAUTO <pid>` (idempotent appends) and `XCFGSET`.
    pub idmp: bool,
    /// `XREADGROUP … MAXCOUNT <n> MAXSIZE <bytes>`.
    pub read_limits: bool,
}

impl Redis8Verbs {
    /// None of them: Redis 6.2, Redis 7.0, Valkey 8.1.
    pub const NONE: Redis8Verbs =
        Redis8Verbs { ackdel: false, claim: false, nack: false, idmp: false, read_limits: false };
    /// All of them, as Redis 8.10 speaks them.
    pub const REDIS_8_10: Redis8Verbs =
        Redis8Verbs { ackdel: true, claim: true, nack: true, idmp: true, read_limits: true };
}

/// Options of a [`Sim`](crate::Sim). Start from [`SimOptions::redis62`],
/// [`SimOptions::redis70`], [`SimOptions::valkey81`] (the [`Default`]) or
/// [`SimOptions::redis810`] and adjust.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SimOptions {
    /// `XAUTOCLAIM` reply shape and deleted-entry handling.
    pub claim_shape: ClaimShape,
    /// What a parked reader gets when its key is deleted.
    pub key_deleted_while_parked: KeyDeletedWhileParked,
    /// What a parked reader gets when its group is destroyed.
    pub group_gone_while_parked: GroupGoneWhileParked,
    /// Whether `XINFO GROUPS` reports `entries-read` and `lag` (7.0+).
    pub xinfo_lag: bool,
    /// Whether commands that deliver nothing still create their consumer: an
    /// `XREADGROUP … >` that finds nothing new (answers nil or parks), an `XAUTOCLAIM` or an
    /// `XCLAIM` that claims nothing. Valkey 8.1 creates it; Redis 6.2 and 7.0 create it only when they deliver
    /// or claim something (an explicit-id read always creates it).
    pub eager_consumer_creation: bool,
    /// Whether deleted entries dropped by `XAUTOCLAIM` (the [`ClaimShape::Redis7`] shape)
    /// use up its `COUNT`: Valkey 8.1 (Redis 7.2+) counts them, Redis 7.0 does not.
    pub autoclaim_deleted_use_count: bool,
    /// Which Redis 8 stream verbs it speaks.
    pub redis8: Redis8Verbs,
    /// The password of the `default` user. When set, connections must `AUTH` (or `HELLO …
    /// AUTH`) before other commands (`-NOAUTH Authentication required.`).
    pub requirepass: Option<String>,
    /// The `server` field of the `HELLO` reply (`redis` or `valkey`).
    pub server_name: String,
    /// The `version` field of the `HELLO` reply.
    pub server_version: String,
    /// A replica that copies the data asynchronously every this many ms of virtual time
    /// (see [`Sim`](crate::Sim)'s docs, and [`Sim::failover`](crate::Sim::failover)); `None`
    /// (the default): no replica.
    pub replica_lag_ms: Option<u64>,
}

impl SimOptions {
    /// Behaves like Redis 6.2.
    pub fn redis62() -> SimOptions {
        SimOptions {
            claim_shape: ClaimShape::Redis62,
            key_deleted_while_parked: KeyDeletedWhileParked::StayBlocked,
            group_gone_while_parked: GroupGoneWhileParked::BlockedOnGroup,
            xinfo_lag: false,
            eager_consumer_creation: false,
            autoclaim_deleted_use_count: false,
            redis8: Redis8Verbs::NONE,
            requirepass: None,
            server_name: "redis".into(),
            server_version: "6.2.14".into(),
            replica_lag_ms: None,
        }
    }

    /// Behaves like Redis 7.0.
    pub fn redis70() -> SimOptions {
        SimOptions {
            claim_shape: ClaimShape::Redis7,
            key_deleted_while_parked: KeyDeletedWhileParked::Unblocked,
            group_gone_while_parked: GroupGoneWhileParked::BlockedOnGroup,
            xinfo_lag: true,
            eager_consumer_creation: false,
            autoclaim_deleted_use_count: true,
            redis8: Redis8Verbs::NONE,
            requirepass: None,
            server_name: "redis".into(),
            server_version: "7.0.15".into(),
            replica_lag_ms: None,
        }
    }

    /// Behaves like Valkey 8.1.
    pub fn valkey81() -> SimOptions {
        SimOptions {
            claim_shape: ClaimShape::Redis7,
            key_deleted_while_parked: KeyDeletedWhileParked::NoGroup,
            group_gone_while_parked: GroupGoneWhileParked::NoSuchKey,
            xinfo_lag: true,
            eager_consumer_creation: true,
            autoclaim_deleted_use_count: true,
            redis8: Redis8Verbs::NONE,
            requirepass: None,
            server_name: "valkey".into(),
            server_version: "8.1.8".into(),
            replica_lag_ms: None,
        }
    }

    /// Behaves like Redis 8.10.2: the classic stream commands as Valkey 8.1 answers them,
    /// and the Redis 8 verbs ([`Redis8Verbs::REDIS_8_10`]).
    pub fn redis810() -> SimOptions {
        // Its classic commands answer as Valkey 8.1's do (the differential test holds it).
        SimOptions {
            redis8: Redis8Verbs::REDIS_8_10,
            server_name: "redis".into(),
            server_version: "8.10.2".into(),
            ..SimOptions::valkey81()
        }
    }

    /// Gives the server a replica `lag_ms` behind (see [`SimOptions::replica_lag_ms`]).
    #[must_use]
    pub fn with_replica(mut self, lag_ms: u64) -> SimOptions {
        self.replica_lag_ms = Some(lag_ms);
        self
    }

    /// Whether it knows `WAITAOF`: Redis 7.2+ and Valkey.
    pub fn waits_aof(&self) -> bool {
        let mut parts = self.server_version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        self.server_name == "valkey" || (major, minor) >= (7, 2)
    }

    /// Sets [`SimOptions::requirepass`].
    #[must_use]
    pub fn with_requirepass(mut self, pass: &str) -> SimOptions {
        self.requirepass = Some(pass.to_string());
        self
    }
}

impl Default for SimOptions {
    /// [`SimOptions::valkey81`].
    fn default() -> SimOptions {
        SimOptions::valkey81()
    }
}
