//! # pelican-sim
//!
//! An in-memory model of Redis/Valkey streams with consumer groups that speaks RESP bytes in
//! and out on a **virtual clock**, for deterministic tests of stream consumers (pelican's
//! own simulation tests, fuzzing, users' handler tests with the [`kit`], the demo). It is kept honest by a
//! differential test against Redis 6.2, Redis 7.0, Valkey 8.1 and Redis 8.10
//! (`tests/differential.rs`).
//! It is not a server for production use.
//!
//! ```
//! use pelican_sim::{Sim, SimOptions};
//!
//! let mut sim = Sim::new(SimOptions::redis70());
//! let c = sim.connect();
//! sim.input(c, b"XGROUP CREATE s g 0 MKSTREAM\r\nXADD s 1-0 f v\r\n");
//! sim.input(c, b"*7\r\n$10\r\nXREADGROUP\r\n$5\r\nGROUP\r\n$1\r\ng\r\n$1\r\nA\r\n$7\r\nSTREAMS\r\n$1\r\ns\r\n$1\r\n>\r\n");
//! assert_eq!(
//!     sim.output(c),
//!     b"+OK\r\n$3\r\n1-0\r\n*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n"
//! );
//! assert_eq!(sim.pending(b"s", b"g").unwrap()[0].delivery_count, 1);
//! ```
//!
//! ## The test kit
//!
//! [`kit`] runs your handler in a deterministic [`kit::World`]: consumers running pelican's
//! real core against this simulator, with crashes, restarts, dead peers, slow and failing
//! handlers, deleted entries, destroyed groups and server restarts on a schedule or drawn from
//! a seed; its [`kit::Report`] tells every handling and checks that nothing was lost and that
//! your invariant holds:
//!
//! ```
//! use pelican::Verdict;
//! use pelican_sim::kit::{FaultKind, World};
//!
//! // Count each entry once, whatever is redelivered (an idempotent handler).
//! let world = World::new(11).random_faults([FaultKind::Crash, FaultKind::Death]);
//! let report = world.run(std::collections::BTreeSet::new(), |seen, _ctx, entry| {
//!     seen.insert(entry.id().to_vec());
//!     Verdict::Ack
//! });
//! report
//!     .check_with(|seen| {
//!         let succeeded = report.entries.iter().filter(|e| e.succeeded()).count();
//!         if seen.len() == succeeded { Ok(()) } else { Err(format!("{} seen", seen.len())) }
//!     })
//!     .unwrap_or_else(|failure| panic!("{failure}")); // the seed, what failed, the replay
//! assert!(report.faults_applied().len() == 2, "{report}");
//! ```
//!
//! ## Commands
//!
//! `PING`, `QUIT`, `HELLO [2|3] [AUTH user pass] [SETNAME name]`, `AUTH [user] pass`,
//! `CLIENT ID|SETNAME|GETNAME|LIST [TYPE t]`, `SELECT 0`, `FLUSHALL`, `FLUSHDB`, `DEL`, `EXISTS`,
//! `TYPE`, `SET key value [PX ms|EX s]`, `GET`, `INCRBY`, `HSET`, `HGETALL` (what pelican's
//! commits write, and a stream command on such a key is `WRONGTYPE`), `XLEN`, `XADD`
//! (`NOMKSTREAM`, `MAXLEN`/`MINID`), `XTRIM`, `XDEL`, `XGROUP
//! CREATE|DESTROY|DELCONSUMER|CREATECONSUMER`, `XREADGROUP` (one stream), `XAUTOCLAIM`,
//! `XCLAIM` (`JUSTID`, `IDLE`, `RETRYCOUNT`), `XRANGE`, `XACK`, `XPENDING` (both forms), `XINFO GROUPS`,
//! `ROLE`, `WAIT`, `WAITAOF` (Redis 7.2+, Valkey; see [Replication](#replication)), and
//! with [`SimOptions::redis8`] (Redis 8.10, [`SimOptions::redis810`]) the Redis 8 stream verbs:
//!
//! - `XREADGROUP … CLAIM <min-idle-ms> … >`: pending entries of any owner idle at least that
//!   long come first, oldest delivery first (entries released by `XNACK` before all), each as
//!   `[id, fields, idle_ms, deliveries_before]`, then new entries as `[id, fields, 0, 0]`, up
//!   to `COUNT`; a pending entry whose message is gone is skipped and stays pending; a taken
//!   one moves to the reader with count +1. It answers at once when the oldest pending
//!   delivery still in the stream is idle enough, or when there are new entries; parked
//!   (`BLOCK`), it is woken by an `XADD`, an `XNACK`, or when that oldest delivery becomes
//!   idle enough (looked at again `min-idle` after parking when nothing is pending). With an
//!   explicit id (history) `CLAIM` is ignored.
//! - `XREADGROUP … MAXCOUNT n MAXSIZE bytes`: `MAXCOUNT` caps the entries (it must be ≥
//!   `COUNT`); the reply stops before the next entry once its bytes so far (the stream name
//!   and the entries; not the array lengths) reach `MAXSIZE`, after at least one entry.
//! - `XNACK key group SILENT|FAIL|FATAL IDS n id… [RETRYCOUNT c] [FORCE]`: releases pending
//!   entries (no owner: `XPENDING` shows consumer `""` and idle -1); the next claim by anyone
//!   (`XCLAIM`, `XAUTOCLAIM`, `CLAIM` read) takes them whatever its min-idle, a `CLAIM` read
//!   reporting their idle as the clock (their delivery time is 0). `SILENT` lowers the count
//!   by one, `FAIL` keeps it, `FATAL` sets it to 2⁶³−1; `FORCE` releases ids that were not
//!   pending (count 0). Answers how many were released.
//! - `XACKDEL key group [KEEPREF|DELREF|ACKED] IDS n id…`: per id 1 (acked and deleted, or
//!   already gone), 2 (`ACKED`: acked, kept since another group still needs it), -1 (not
//!   pending in the group; every id when the key or group is missing).
//! - `XADD … IDMP pid iid` / `IDMPAUTO pid` (with `*` only): a (pid, iid) seen within the
//!   stream's window answers the first append's id and appends nothing (the window keeps
//!   `IDMP-MAXSIZE` ids per producer, default 100, for `IDMP-DURATION` s, default 100, by
//!   the entries' times); `IDMPAUTO` derives the iid from the field/value pairs, whatever
//!   their order. `XCFGSET key [IDMP-DURATION s] [IDMP-MAXSIZE n]` sets the window (a
//!   changed setting forgets the ids).
//! - `XADD`/`XTRIM … KEEPREF|DELREF|ACKED`: trimmed entries stay pending (`KEEPREF`), leave
//!   every group's PEL (`DELREF`), or only entries no group still needs are trimmed (`ACKED`).
//!
//! Without them, the sim answers these as the older servers do: `ERR unknown command …`
//! (6.2's wording under a 6.x [`SimOptions::server_version`]) or `ERR syntax error` / `ERR
//! Invalid stream ID …` for the new options. And
//! `EVAL` of pelican's dead-letter script (`pelican::DEAD_LETTER_SCRIPT`, run natively), of its leave
//! script (`pelican::LEAVE_SCRIPT`, likewise), of its replay script
//! (`pelican::dead_letter::REPLAY_SCRIPT`, likewise) and of its
//! check (`pelican::DEAD_LETTER_CHECK_SCRIPT`); `SCRIPT LOAD|EXISTS|FLUSH` and `EVALSHA` (a
//! script not in the node's cache is `NOSCRIPT`), and pelican's commit script
//! (`pelican::COMMIT_SCRIPT`, run natively call for call as its Lua runs: fenced by owner and
//! delivery count, every write checked before any is made; each entry it commits recorded,
//! [`Sim::commits`]) with its check at connect (`pelican::COMMIT_CHECK_SCRIPT`, 1). The
//! script cache is the node's: it survives connections, a [restart](Sim::restart) empties
//! it, and a promoted replica has what was loaded on it (not its master's: Redis 7.0+ do not
//! propagate `SCRIPT LOAD`); an old master killed in a failover comes back empty, one
//! demoted in place keeps its own. `EVAL` caches the script it runs, as the servers do.
//! Requests are RESP arrays of bulk strings
//! or inline commands. Replies follow RESP2, or RESP3 after `HELLO 3`.
//!
//! ## Replication
//!
//! With [`SimOptions::with_replica`] the server is a master and its replica, which copies the
//! master's data asynchronously (see [`Sim`]'s docs for the model): every
//! [`replica_lag_ms`](SimOptions::replica_lag_ms) of virtual time, at once when a `WAIT`
//! asks, never while cut off ([`Sim::set_replica_link`]). [`Sim::failover`] promotes it: the
//! writes it had not copied are lost, and the old master's clients are cut off
//! ([`OldMaster::Killed`]) or find it a replica ([`OldMaster::Demoted`]).
//!
//! - `WAIT numreplicas timeout` answers how many replicas (0 or 1) have every write of the
//!   connection so far: at once when enough do (a replica whose link is up catches up
//!   first), else it parks like a `BLOCK` read — commands behind it wait — until the
//!   replica's link comes back or the timeout (exact on the virtual clock; 0: for ever),
//!   then answers the count. Without a replica: 0, after the timeout when one was asked
//!   for. `WAITAOF numlocal numreplicas timeout` (Redis 7.2+, Valkey; an unknown command
//!   before) likewise, answering `[local, replicas]` with the local file always written (the
//!   model's restarts are those of `appendfsync always`).
//! - `ROLE` on the master: `[master, offset, [[host, port, offset]]]` (the replica's address
//!   and offset as strings; `[master, 0, []]` without a replica, as a server that never had
//!   one answers); on the replica `[slave, host, port, connected|connect, offset]`. The
//!   nodes are `127.0.0.1:6379` (the first master) and `127.0.0.1:6380`.
//! - `HELLO`'s `role` is `master` or `replica`, in RESP2 a flat array like every map.
//! - On the replica ([`Sim::connect_replica`], or the old master demoted in place), writes
//!   — `XADD`, `XACK`, `XREADGROUP`, `XCLAIM`, `XAUTOCLAIM`, `XGROUP`, `XDEL`, `XTRIM`, `DEL`,
//!   `FLUSHALL`, `SET`, `INCRBY`, `HSET`, `EVAL`, `EVALSHA` (of a script it has), the Redis
//!   8 verbs — answer `-READONLY You can't write against a read only replica.`,
//!   `WAIT`/`WAITAOF` the servers' refusal, and reads see its copy.
//! - A failover with [`OldMaster::Demoted`] answers a parked read or `WAIT` on the old master
//!   `-UNBLOCKED force unblock from blocking operation, instance state changed (master ->
//!   replica?)` and closes its connection, as every server does.
//!
//! Where the servers differ, [`SimOptions`] picks a behaviour ([`SimOptions::redis62`],
//! [`SimOptions::redis70`], [`SimOptions::valkey81`], [`SimOptions::redis810`]).
//!
//! ## Known differences from the real servers
//!
//! - Streams, strings and hashes exist (no lists, sets or sorted sets); one database
//!   (`SELECT n` with n ≠ 0 answers `-ERR DB index is out of range`). A stream command on a
//!   string or a hash answers `WRONGTYPE` before its other arguments are looked at. Hashes
//!   keep their fields in the order first set (the servers' small hashes do; one past 128
//!   fields or with a value past 64 bytes is a hash table, in no order). Strings expire
//!   exactly on the virtual clock.
//! - Approximate trimming (`MAXLEN ~`, `MINID ~`, with `LIMIT`) removes whole nodes as the
//!   servers do, nodes of 100 entries (`stream-node-max-entries`); the servers' other limit,
//!   4096 bytes a node, is not modelled (big entries make their nodes smaller, so they trim
//!   more). With Redis 8's `ACKED`, it trims exactly.
//! - `XREADGROUP` reads one stream per call; several answer an error.
//! - `XADD 0-0` answers the 7.0 text (`must be greater than 0-0`) on every flavor.
//! - `XINFO GROUPS` `entries-read`/`lag` follow Redis 7's algorithm (a logical read counter
//!   that `XGROUP CREATE` leaves unknown unless `ENTRIESREAD` is given, re-estimated from
//!   the first entry when `XDEL` holes lie ahead of the group) but are approximate: they
//!   drift from the servers' values after some delete/trim/re-create sequences, so the
//!   differential test does not compare them.
//! - Timeouts are exact on the virtual clock (real servers add up to ~100 ms); so is the
//!   moment a parked `CLAIM` read looks again for idle entries (Redis 8.10 looks in its
//!   event loop, ≥ 1 ms after the entry is idle enough); with `CLAIM 0` and nothing pending
//!   it looks every virtual millisecond, as the server does every loop.
//! - The Redis 8 verbs: `XREAD`'s `MAXSIZE`/`MAXCOUNT`, `XDELEX`, `XIDMPRECORD` and `XINFO
//!   STREAM`'s idempotence figures are not modelled; idempotent ids expire exactly on the
//!   virtual clock (the server sweeps them in its cron); `XNACK` is recorded for
//!   [`Sim::restart`] as it happens.
//! - Error texts for argument errors are the 7.x wording where versions differ, and a few
//!   rare ones (arity of subcommands, unknown commands) are only approximately worded.
//! - The parser waits for a declared bulk length up to 512 MiB (it remembers where a partial
//!   request's scan stopped, so a request fed in tiny pieces costs time linear in its size).
//! - [`serve`] polls its sockets (about every millisecond when idle) on one thread.
//! - `EVAL` runs only pelican's dead-letter, leave and commit scripts (any text loads with
//!   `SCRIPT LOAD`; running another answers an error); a script's failing call answers `ERR
//!   Error running script: <the call's error>`, without the servers' line numbers; the
//!   commit script's ACL checks (7.0+) always allow; `XCLAIM` knows `JUSTID`, `IDLE` and
//!   `RETRYCOUNT` of its options (`TIME`, `FORCE`, `LASTID` answer an error).
//! - Replication is a model, not the protocol: at most one replica, which copies the whole
//!   data at once (a real one applies each write as it streams in); a `WAIT` it can answer is
//!   answered in no time (a real replica needs a round trip); the offset of a parked read
//!   served later moves by a nominal 64; the master lists its replica in `ROLE` even while
//!   cut off (the servers drop it after `repl-timeout`); `EVAL` on a replica answers the
//!   plain `READONLY` text (the servers add where in the script); without a replica the
//!   offset stays 0, where Redis 7.2+ and Valkey move it by 1 for each `WAIT` that asks
//!   replicas they lack for an ack (and, with `appendonly yes`, for each write);
//!   `WAITAOF`'s local count is 1 whatever `appendonly` would be.
//! - Not modelled: `XREVRANGE`, `XREAD`, `XSETID`, `XINFO STREAM|CONSUMERS`, `CLIENT UNBLOCK`,
//!   `MULTI`, other scripts, `REPLICAOF`, `FAILOVER`, `INFO`, ACL users other than `default`;
//!   persistence only as [`Sim::restart`] (an append-only file written on every command).
//!
//! # Features and minimum supported Rust version
//!
//! Rust 1.77 (`rust-version`), the core's. The `proptest` feature (the kit's strategies,
//! `kit::strategy`) needs 1.88, as its locked `proptest` 1.12 does. Raising either is a minor
//! release (see the changelog's semver policy).

#![cfg_attr(docsrs, feature(doc_cfg))]

mod command;
mod conn;
mod id;
pub mod kit;
mod kv;
mod model;
mod net;
mod options;
mod replication;
mod reply;
mod script;
mod sim;

pub use conn::ConnId;
pub use id::EntryId;
pub use model::{Commit, Origin, PendingEntry};
pub use net::{serve, ServerHandle};
pub use options::{ClaimShape, GroupGoneWhileParked, KeyDeletedWhileParked, Redis8Verbs, SimOptions};
pub use sim::{OldMaster, Sim, Stored, StreamEntry};
