//! `pelican consume`: a consumer of a group over every `--stream` (and `--stream-pattern`'s
//! finds), handing each entry to a shell command or printing it, until SIGINT/SIGTERM.
//!
//! A lane is one consumer on one connection, reading its streams with one parked read: one
//! lane for all of them, or in a cluster one per hash slot they fall in; each stream keeps a
//! handler of its own. `mio_lanes` runs the lanes on one `mio::Poll`, `smol_lanes` as tasks on
//! one executor. A lane that fails for good stops the others.

mod deadline;
mod discover;
mod drained;
mod emit;
mod found;
mod handler;
mod lane;
mod metrics;
mod mio_lanes;
mod others;
mod overdue;
mod pipe;
mod published;
mod report;
mod screen;
mod signals;
mod smol_lanes;
mod stop;

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::builder::{OsStringValueParser, TypedValueParser as _};
use pelican::{AckWait, Config, DeleteAcked, GroupGone, OnRetry, Protocol, RetryBackoff};

use crate::failure::Failure;
use crate::help::TEMPLATE;
use crate::name::show;
use crate::number::whole;
use crate::server::{login_refused, sentinel_named_as_node, Server, ServerArgs};
use crate::url::Target;
use handler::{Handler, Shared};
use lane::{Handlers, Lane, LaneFailure, Net, Outcome, Rescan};
use pipe::Pipe;
use report::{LaneCounts, Progress};
use screen::Screen;
use stop::StopAll;

const USAGE: &str =
    "pelican consume (--stream KEY [--stream KEY…] | --stream-pattern GLOB) --group G --consumer NAME [options]";

const ABOUT: &str = "\
Consumes the stream KEY as consumer NAME of group G. First its own pending entries (a
restart under the same name gets its backlog back at once), then, once per beat, entries
of dead peers idle longer than --min-idle-ms (XAUTOCLAIM), then new entries. Entries are
handled one at a time, or up to N at once with --exec and --concurrency N; each is
acknowledged (XACK) only if handled successfully, else it stays pending and comes back
later: at-least-once, so handlers must be idempotent.

With several --stream flags, or --stream-pattern, one consumer NAME of group G reads them
all on one connection, parked on all of them at once (in a cluster, one connection per
hash slot they fall in: give them a hash tag, {tenants}:a, to share one). Each stream has
its own entries in hand (up to --concurrency) and its own pending list, drained at every
(re)connect; a slow command on one stream holds up no other. --stream-pattern GLOB finds
the streams whose keys match (SCAN, on each master of a cluster), waits for a first one if
none does, and finds those created later every --rescan-ms: a stream found joins at the
next read, within a beat.

A Redis/Valkey Cluster needs nothing more: --url may name any node (a replica too), and
each connection follows the cluster's redirects (MOVED) to the node serving its streams.

Names (KEY, G, NAME) may be any bytes, UTF-8 or not.";

const AFTER: &str = "\
With --pipe, CMD starts once, before anything is read, and is kept (a handler in any
language that loads its model or opens its pool once). Each entry goes to its stdin as one JSON line, as printed below plus
\"deliveries\" (the server's count) and \"source\" (pending, claimed or new):
  {\"stream\":\"orders\",\"id\":\"1700000000000-0\",\"fields\":{…},\"deliveries\":1,\"source\":\"new\"}
It answers each on its stdout with one JSON line, in any order:
  {\"id\":\"1700000000000-0\",\"verdict\":\"ack\"}     (or \"retry\", or \"dead-letter\")
A \"retry\" may ask a wait: {\"id\":\"…\",\"verdict\":\"retry\",\"retry_after_ms\":2000} hands the
entry out again (to this consumer or a peer) no earlier than 2 s later, and soon after, the
wait kept by the server: a crash of pelican does not lose it (a wait over --min-idle-ms is
renewed by this process every lease: a crash ends it early, --min-idle-ms after the last
renewal).
adding \"stream\" (as the entry's line gives it) when several streams are consumed (it may
always be given). It must flush its stdout after each answer: into a pipe, Python's print
buffers, and an answer not flushed never comes (print(json.dumps(answer), flush=True));
logs go to stderr. An \"ack\" may carry writes, made with the acknowledgement in one step
(below, exactly-once stages):
  {\"id\":\"…\",\"verdict\":\"ack\",\"emit\":[{\"stream\":\"out\",\"fields\":{\"k\":\"v\"},\"maxlen\":1000}],
   \"writes\":[{\"hset\":\"h\",\"fields\":{\"f\":\"v\"}},{\"incrby\":\"n\",\"by\":1},
              {\"set\":\"k\",\"value\":\"v\",\"ttl_ms\":60000},{\"del\":\"k\"}]}
(\"minid\" trims by id instead of \"maxlen\"; both approximately).
Batches: pelican offers them in the handler's environment (PELICAN_PIPE_PROTOCOL=batch); a
handler whose first line, written before it reads anything, is {\"protocol\":\"batch\"}
gets many entries per line and may answer a batch with one line, a verdict per entry in
order (an object for an ack with writes; null for an entry it answers on its own line):
  {\"batch\":7,\"entries\":[{\"stream\":\"orders\",\"id\":\"1700000000000-0\",…},…]}
  {\"batch\":7,\"verdicts\":[\"ack\",\"retry\",…]}
One parse and one write per batch rather than per entry: the fast way for a handler in
Python (examples/pipe/pelican_pipe.py runs that loop; pelican-pipe.js for Node). Such a
handler has up to twice --count entries (200) per stream at once unless --concurrency says
otherwise; one that answers a line per entry has one at a time by default. Keys and field values are
strings; an answer whose writes are malformed (a number for a string, no fields, an unknown
write) is told on stderr and fails its entry, nothing of it written. Up to --concurrency N entries
per stream are outstanding at once. A line that is not such an answer (not JSON, no \"id\",
longer than 64 KiB) fails an entry, told with the line: the outstanding one whose id the
line holds, else the only one, else the oldest written to that handler; an unknown
verdict fails the entry it names. An answer for no outstanding entry is told and ignored.
At most 5 such lines per 10 s are told (then how many more were); its stderr is pelican's. If it exits within 0.5 s of its start, pelican
exits 1 before reading anything. If it exits or dies later, it is started again after a
backoff (100 ms, doubling to 5 s) and its outstanding entries are held meanwhile (their
leases renewed; no delivery is counted against them) and written to the next one; an entry
outstanding at 3 deaths fails (it stays pending). If it dies before answering anything 5
times in a row, or cannot be started at all (126, 127), pelican stops with exit 1. While it
is down, or failing (its last one died without an answer and this one has not answered
yet), /healthz answers 503 saying so; pelican_handler_restarts_total counts its restarts. A
stop writes no more entries, waits for the outstanding answers, closes its stdin, gives it
3 s to exit, then SIGTERM, then after 3 s SIGKILL, and confirms the acks.

An entry in hand longer than --overdue-ms (30000: a command still running, a --pipe answer
not come, a line stdout does not take) is told on stderr once, with what to check, and
/healthz answers 503 naming it; it stays in hand. --handler-timeout fails such an entry
instead (no default: the silence is most often the handler's fault, not the entry's).

Exactly-once stages (--pipe's \"emit\"/\"writes\", --exec with --emit-to KEY): the writes and
the acknowledgement are made in one server-side step (a script), and only if the entry is
still this consumer's with the delivery count it was handed out with; a peer that took it
meanwhile (this process paused past --min-idle-ms) fences the late commit off, and nothing
is written (told on stderr). Every write is checked before any is made: one that would fail
(a key holding another type) writes nothing and leaves the entry pending (told). So every
write made this way is applied once per entry, in the history that survives: a commit not
yet replicated when its master fails over is lost whole and its entry delivered again.
Effects outside Redis (what CMD itself does) stay at least once. With --emit-to, CMD's stdout
is read, not shown: each line a JSON object of strings becomes one entry of KEY (blank
lines are skipped; any other line fails the entry, nothing written). In a cluster every
key written must share the stream's hash slot ({orders} and {orders}:out); --emit-to's key
is checked at each connect, with the user's permissions.

Without --exec or --pipe, each entry is printed on stdout as one JSON line, then acknowledged:
  {\"stream\":\"orders\",\"id\":\"1700000000000-0\",\"fields\":{\"name\":\"value\",…}}

With --exec, CMD runs for each entry with the entry's fields as one JSON object (and a
newline) on its stdin, its stdout and stderr going to pelican's, and in its environment:
  PELICAN_ID        the entry id
  PELICAN_STREAM    the stream it came from (escaped, \\xNN, if it is not UTF-8)
  PELICAN_GROUP, PELICAN_CONSUMER
  PELICAN_SOURCE    pending (this consumer's own backlog), claimed (reclaimed from an idle
                    owner) or new
  PELICAN_DELIVERIES how many times the group has delivered it, this time included (the
                    server's count: approximate after reconnects and restarts)
Exit status 0 acknowledges the entry; 65 (EX_DATAERR: it can never be processed) moves it
to the --dead-letter stream at once (without --dead-letter it is a failure); anything else
is a failure (it comes back after --on-retry's wait: by default 0.5–1 s, doubling with each
delivery up to --min-idle-ms), and so is death by a signal, which is told on stderr (the entry, the
signal), even with --quiet. A status of 126 or 127 (the command cannot be run, or is not
found) stops pelican with exit 1 and the entry left pending, rather than failing every
entry in turn; and before anything is read, CMD is checked with `sh -n` and its first word
looked for (`command -v`), so that a typo fails at the start. CMD runs in its own process group, so a Ctrl-C on the terminal reaches
only pelican, which lets CMD finish. An empty CMD is refused: it would acknowledge every
entry unhandled.

On stderr, one line each (naming the stream when there are several; none with --quiet):
connected, a connect that failed or a connection lost (with the reason and when the next
attempt is; a connect failing again for the same reason is told again every 30 s, with the
count of attempts), entries reclaimed from idle owners, an entry moved to the dead-letter
stream, an entry a peer took while this consumer held it (a lease lost), reads made smaller
(slow handlers, big entries), a stop waiting for the server to confirm acknowledgements.
The progress line (--progress, or a terminal) shows the entries in hand (their commands
running) and, on mio, those read and waiting (buffered); and the group's health every 5 s —
its pending count, its oldest pending entry's age and owner, its lag (Redis 7+/Valkey) —
and `waiting for the server` while it cannot be reached. Every connection is named
pelican:<stream>:<group>:<consumer> in CLIENT LIST.

JSON: a field name or value that is valid UTF-8 is a JSON string; one that is not is
{\"base64\":\"…\"} (standard alphabet, padded), and so is a stream name. Fields keep stream
order, and a repeated name is kept each time, in order (JSON allows repeated keys, but many
parsers keep only the last). A name that is not UTF-8 cannot be an object key: then
`fields` is an array of [name, value] pairs instead, each element written by the same rule.

Signals: SIGINT or SIGTERM stops gracefully: the entries in hand (their commands) finish,
the acknowledgements earned are confirmed by the server, entries read ahead are handed back
for a peer's next reclaim, the consumer leaves the group if it holds nothing (unless
--keep-consumer), then pelican exits 0; if the server cannot be reached meanwhile, a line on
stderr says what pelican waits for. A stop takes at most --stop-timeout-ms (20000, under
Kubernetes' default 30 s grace): past it the handler is ended (SIGTERM, SIGKILL 3 s later),
the entries it held are given back unhandled (not acknowledged: released on Redis 8.8+,
else idle --min-idle-ms for a peer's next reclaim; their delivery counted), and pelican
exits 75. A second signal
exits with status 130 once nothing pelican started is left: the running commands' process
groups get SIGTERM, then SIGKILL if still running 3 s later; the entries in hand, and those
whose acknowledgements the server has not confirmed, stay pending. The same signal sent
twice within a second by one process counts once (`timeout -s INT` sends it to pelican and
then to its process group).

Failover: with redis+sentinel://, each stream's consumer keeps a sentinel's connection
open, subscribed to +switch-master: a failover moves it to the new master at once (told:
connection lost: a failover moved the master from A to B). With any URL, a node that answers
as a replica is never read from: told once, retried, and /healthz answers 503 meanwhile.
--ack-replicas N makes each batch of acknowledgements wait until N replicas have it (WAIT N
MS, MS from --ack-timeout-ms; --ack-aof: WAITAOF 1 N, until the master's and N replicas'
append-only files have it, Redis 7.2+/Valkey), so that a failover is less likely to deliver
acknowledged entries again; acks that ran out of time are counted (acks_unreplicated in
--stats-json and /metrics) and told once, the next batches then waiting 1 ms each until the
replicas are back (so a master with fewer than N replicas counts every ack: give N no more
than it has).

Metrics (--metrics ADDR): GET /metrics answers in the Prometheus text format, each series
labelled stream, group and consumer: the consumer's counters of --stats-json (all but handled
and failed) as pelican_<name>_total, drained, claimed and new as
pelican_entries_total{source=\"pending\"|\"claimed\"|\"new\"};
the gauges pelican_in_hand, pelican_in_hand_oldest_age_seconds, pelican_buffered,
pelican_connected and, from the group's health
asked every 5 s, pelican_group_pending, pelican_group_lag, pelican_group_consumers and
pelican_group_oldest_pending_age_seconds, the histogram pelican_handler_duration_seconds, and
with --pipe pelican_handler_restarts_total (no labels). GET /livez (a liveness probe)
answers 200 `ok` while the event loop turns and no entry is in hand past --overdue-ms
(a handler gone silent), whether or not the server can be reached; GET /readyz (and
/healthz: a readiness probe) while alive, every stream is connected to a master, no stop is
asked and the --pipe handler is up; else 503 and why, in one line. Both are served until pelican exits: through a stop, the counters
keep their final values (those --stats-json writes).

Exit status: 0 stopped by a signal, 1 failed (the server refused, the group is gone, stdout
closed, CMD cannot be run, an entry is over the frame limit, the dead-letter stream is in
another cluster slot; TLS failed: an untrusted, expired or misnamed certificate, a client
certificate required, a TLS file that cannot be read, a plaintext port behind rediss:// or
a TLS port behind redis://), 2 bad usage (a flag, a value the consumer refuses, a bad URL,
a --stats-json FILE that cannot be written, a --metrics ADDR that cannot be listened on),
75 a stop past --stop-timeout-ms, 130 a second signal. A server that cannot be reached (refused, down, a host that does not
resolve: hosts are looked up at every connect) is retried, and told every 30 s. A stream that fails stops the others (each
finishes its entries in hand and confirms its acks); the message names it.";

/// The largest millisecond count a server takes (a signed 64-bit integer).
const MAX_MS: u64 = i64::MAX as u64;
/// The longest beat the consumer takes.
const DAY_MS: u64 = 24 * 3600 * 1000;
/// The shortest `min_idle` the consumer takes.
const MIN_IDLE_MS: u64 = pelican::MIN_MIN_IDLE.as_millis() as u64;
/// The most entries a lane may have in hand at once.
const MAX_CONCURRENCY: u64 = pelican::MAX_CONCURRENCY as u64;

/// `pelican consume`'s flags.
#[derive(clap::Args, Debug)]
#[command(override_usage = USAGE, before_help = ABOUT, after_help = AFTER, help_template = TEMPLATE)]
pub struct Args {
    /// a stream key; repeat it for several streams (all on one connection)
    #[arg(long = "stream", value_name = "KEY", required_unless_present = "stream_pattern")]
    streams: Vec<OsString>,
    /// every stream whose key matches GLOB too (SCAN … MATCH GLOB TYPE stream, on each master
    /// of a cluster), and those created later, found every --rescan-ms
    #[arg(long, value_name = "GLOB", value_parser = OsStringValueParser::new().try_map(pattern))]
    stream_pattern: Option<OsString>,
    /// how often --stream-pattern looks for new streams
    #[arg(long, value_name = "MS", default_value_t = 5000, requires = "stream_pattern", value_parser = whole::<u64, 100, DAY_MS>, allow_negative_numbers = true)]
    rescan_ms: u64,
    /// the group (required; the same on every stream)
    #[arg(long, value_name = "G", env = "PELICAN_GROUP", hide_env_values = true)]
    group: OsString,
    /// this consumer's name in the group (required)
    #[arg(long, value_name = "NAME", env = "PELICAN_CONSUMER", hide_env_values = true)]
    consumer: OsString,
    #[command(flatten)]
    pub(crate) server: ServerArgs,
    /// entries per read and per reclaim
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = whole::<u32, 1, { u32::MAX as u64 }>, allow_negative_numbers = true)]
    count: u32,
    /// how long a read blocks, and how often peers' entries are reclaimed
    #[arg(long, value_name = "MS", default_value_t = 2000, value_parser = whole::<u64, 1, DAY_MS>, allow_negative_numbers = true)]
    beat_ms: u64,
    /// reclaim entries idle longer than this (this consumer's own failed
    /// entries included: that is how they are retried)
    #[arg(long, value_name = "MS", default_value_t = 30_000, value_parser = whole::<u64, MIN_IDLE_MS, MAX_MS>, allow_negative_numbers = true, verbatim_doc_comment)]
    min_idle_ms: u64,
    /// create the group at ID if it is missing (XGROUP CREATE … MKSTREAM):
    /// $ (new entries only), 0 (the whole stream), <ms>[-<seq>]. Without
    /// ID: $ on each --stream; 0 on the streams --stream-pattern finds (at
    /// the start or later), so that what was written to a stream before it
    /// was found is not skipped
    #[arg(long, value_name = "ID", num_args = 0..=1, verbatim_doc_comment)]
    create_group: Option<Option<String>>,
    /// if the group or the key is deleted while running, create it again
    /// at the --create-group ID (default: stop with an error, exit 1)
    #[arg(long, verbatim_doc_comment)]
    recreate_group: bool,
    /// the dead-letter stream: where entries past --max-deliveries, and
    /// those whose command exits 65, are moved (with their fields and
    /// pelican-stream/-group/-consumer/-id/-deliveries/-reason). %s in KEY
    /// stands for the stream's name (%% for a %): '%s:dead' gives each
    /// stream its own. In a cluster it must share its stream's hash slot:
    /// name the stream {orders} and its dead letters {orders}:dead
    #[arg(long, value_name = "KEY", verbatim_doc_comment)]
    dead_letter: Option<OsString>,
    /// move an entry delivered more than N times to the --dead-letter
    /// stream instead of handing it out again (needs --dead-letter)
    #[arg(long, value_name = "N", value_parser = whole::<u64, 1, { u64::MAX }>, allow_negative_numbers = true, verbatim_doc_comment)]
    max_deliveries: Option<u64>,
    /// speak RESP3 (HELLO 3) instead of RESP2
    #[arg(long)]
    resp3: bool,
    /// mio (every lane on one event loop) or smol
    #[arg(long, value_name = "T", value_enum, default_value_t = Transport::Mio, hide_possible_values = true)]
    transport: Transport,
    /// run `sh -c CMD` for each entry (below); without it, print entries
    #[arg(long, value_name = "CMD", value_parser = command, conflicts_with = "pipe")]
    exec: Option<String>,
    /// start `sh -c CMD` once and keep it: each entry goes to its stdin as one
    /// JSON line, and it answers each on its stdout, in any order (below)
    #[arg(long, value_name = "CMD", value_parser = command)]
    pipe: Option<String>,
    /// with --exec: each line CMD prints that is a JSON object of strings
    /// becomes an entry of the stream KEY, added with the entry's
    /// acknowledgement in one step when CMD exits 0 (below: exactly-once
    /// stages). %s in KEY stands for the stream's name, as for --dead-letter
    #[arg(long, value_name = "KEY", requires = "exec", verbatim_doc_comment)]
    emit_to: Option<OsString>,
    /// with --exec or --pipe: an entry not settled within MS milliseconds is
    /// a failure (its command's process group is killed; a --pipe answer
    /// that comes later is ignored)
    #[arg(long, value_name = "MS", value_parser = whole::<u64, 1, MAX_MS>, allow_negative_numbers = true, verbatim_doc_comment)]
    handler_timeout: Option<u64>,
    /// an entry in hand longer than MS (its command running, its --pipe
    /// answer not come, its line not taken by stdout) is told on stderr and
    /// makes /healthz answer 503 naming it; it stays in hand. Above the
    /// longest a handler may rightly take
    #[arg(long, value_name = "MS", default_value_t = 30_000, value_parser = whole::<u64, 1, MAX_MS>, allow_negative_numbers = true, verbatim_doc_comment)]
    overdue_ms: u64,
    /// how long a stop (SIGINT, SIGTERM) may wait for the entries in hand
    /// and the acks owed; past it the handler is ended, what it held is
    /// given back unhandled (not acked, free for a peer at once), and
    /// pelican exits 75 (below)
    #[arg(long, value_name = "MS", default_value_t = 20_000, value_parser = whole::<u64, 1, MAX_MS>, allow_negative_numbers = true, verbatim_doc_comment)]
    stop_timeout_ms: u64,
    /// with --exec or --pipe: up to N entries at once per stream, each entry
    /// acknowledged as its own command succeeds, in any order (default 1:
    /// one at a time; for a --pipe handler that takes batches, twice
    /// --count: the batch it works on and the next). Printed entries are
    /// written one at a time, in order, whatever N
    #[arg(long, value_name = "N", value_parser = whole::<u32, 1, MAX_CONCURRENCY>, allow_negative_numbers = true, verbatim_doc_comment)]
    concurrency: Option<u32>,
    /// with --exec or --pipe over several streams: at most N entries at once
    /// in all (each stream still within --concurrency): the commands (and
    /// threads) running at once
    #[arg(long, value_name = "N", default_value_t = 256, value_parser = whole::<u32, 1, MAX_CONCURRENCY>, allow_negative_numbers = true, verbatim_doc_comment)]
    most_in_hand: u32,
    /// entries with the same value of the field FIELD are handled one at a
    /// time, in stream order; other values (and entries without FIELD, each
    /// on its own) in parallel, up to --concurrency. Per consumer: other
    /// consumers of G handle their entries in their own order. A failed
    /// entry stays pending and comes back later, after the key's later
    /// entries
    #[arg(long, value_name = "FIELD", value_parser = OsStringValueParser::new().try_map(field), verbatim_doc_comment)]
    order_by: Option<OsString>,
    /// start and run beside another live process consuming under the same
    /// name (stream, group and consumer): by default pelican refuses to start
    /// then, since two processes under one name handle each other's entries
    /// twice, and tells a twin that appears later
    #[arg(long, verbatim_doc_comment)]
    allow_twins: bool,
    /// stay in the group after a clean stop (by default a consumer that holds
    /// no pending entry when it stops deletes itself from the group, so that
    /// names that change with each deploy do not pile up): for a fixed name
    /// that comes back to its own entries
    #[arg(long, verbatim_doc_comment)]
    keep_consumer: bool,
    /// delete each acknowledged entry from the stream in the same step
    /// (XACKDEL, Redis 8.2+), for streams used as work queues. WHEN says what
    /// happens to an entry other groups of the stream have not acknowledged:
    /// acked (the default: it is deleted only once every group has
    /// acknowledged it), keepref (delete it: the other groups never see it),
    /// delref (delete it and their references). keepref and delref are
    /// refused when the stream has other groups at the start, unless
    /// --force-delete. On an older server pelican refuses to start
    #[arg(long, value_name = "WHEN", value_enum, num_args = 0..=1, default_missing_value = "acked", verbatim_doc_comment)]
    delete_acked: Option<DeleteWhen>,
    /// with --delete-acked keepref or delref: start even if the stream has
    /// other groups, whose unread entries will be deleted
    #[arg(long, verbatim_doc_comment)]
    force_delete: bool,
    /// what a failed entry (exit other than 0 and 65) does. backoff (the
    /// default, on every server): it waits as --retry-backoff says, 1000 if
    /// not given — 0.5–1 s, then 1–2 s, 2–4 s… up to --min-idle-ms — so that
    /// a downstream that is down is not asked in a hot loop, and no retry
    /// waits longer than --min-idle-ms. On Redis 8.8+, which can release an
    /// entry (XNACK): release (any consumer of the group, this one too, takes
    /// it again at once, its delivery counted), keep (it stays pending with
    /// this consumer until a reclaim takes it after --min-idle-ms, as on
    /// older servers, where release and a number are keep too), or a number:
    /// released that many milliseconds later (at most half of --min-idle-ms)
    #[arg(long, value_name = "WHAT", default_value = "backoff", value_parser = on_retry, verbatim_doc_comment)]
    on_retry: OnRetry,
    /// a failed entry waits before it is handed out again (to this consumer
    /// or a peer), on every server, the wait kept by the server (parked with
    /// the group: a crash of pelican does not lose it): between half and all
    /// of FIRST_MS × 2^(deliveries − 1), at most MAX_MS (by default
    /// --min-idle-ms, the longest wait a crash cannot shorten). E.g. 1000 (1 s,
    /// 2 s, 4 s… the library's default) or 500,10000. Counted as
    /// retries_delayed
    #[arg(long, value_name = "FIRST_MS[,MAX_MS]", value_parser = retry_backoff, conflicts_with = "on_retry", verbatim_doc_comment)]
    retry_backoff: Option<RetryBackoff>,
    /// after each batch of acks, wait until N replicas have them (WAIT N), so
    /// that a failover is less likely to deliver their entries again; at most
    /// --ack-timeout-ms per batch (a batch that runs out is counted as
    /// acks_unreplicated and told; the next batches then wait 1 ms each until
    /// the replicas are back)
    #[arg(long, value_name = "N", value_parser = whole::<u32, 1, { u32::MAX as u64 }>, allow_negative_numbers = true, verbatim_doc_comment)]
    ack_replicas: Option<u32>,
    /// with --ack-replicas: how long a batch of acks waits for the replicas
    #[arg(long, value_name = "MS", default_value_t = 1000, requires = "ack_replicas", value_parser = whole::<u64, 1, MAX_MS>, allow_negative_numbers = true)]
    ack_timeout_ms: u64,
    /// with --ack-replicas: wait for the acks to be written to the append-only
    /// files of the master and of N replicas (WAITAOF 1 N; Redis 7.2+, Valkey)
    #[arg(long, requires = "ack_replicas", verbatim_doc_comment)]
    ack_aof: bool,
    /// speak only the classic stream commands (those of Redis 6.2), whatever
    /// the server offers: no XREADGROUP … CLAIM, XNACK, XACKDEL or MAXSIZE
    #[arg(long, verbatim_doc_comment)]
    classic_verbs: bool,
    /// progress on stderr every second even when stderr is not a terminal
    /// (on a terminal it is always shown, and cleared before other output and
    /// before each command starts), with the group's health every 5 s
    #[arg(long, verbatim_doc_comment)]
    progress: bool,
    /// no line on stderr for what happens along the way (connections, reclaims,
    /// dead letters, leases lost, smaller reads); failures and the summary still are
    #[arg(long, short, verbatim_doc_comment)]
    quiet: bool,
    /// on a clean stop, write the final counters to FILE as one JSON object:
    /// the totals, and each stream's under "streams"
    #[arg(long, value_name = "FILE", verbatim_doc_comment)]
    stats_json: Option<PathBuf>,
    /// serve Prometheus metrics at http://ADDR/metrics, whether pelican is alive
    /// at /livez and ready to consume at /readyz (and /healthz): 200, or 503 with
    /// why; until pelican exits; ADDR is HOST:PORT, e.g. 127.0.0.1:9464 (below)
    #[arg(long, value_name = "ADDR", verbatim_doc_comment)]
    metrics: Option<String>,
    /// exit 0 once every stream is drained — this consumer's own pending
    /// entries handled, the idle ones of its peers reclaimed, the last read
    /// short — and nothing new has come for MS milliseconds (1000 if MS is
    /// not given; 0: at once): a stop as on SIGTERM, for batch jobs and
    /// benchmarks
    #[arg(long, value_name = "MS", num_args = 0..=1, default_missing_value = "1000", value_parser = whole::<u64, 0, DAY_MS>, allow_negative_numbers = true, verbatim_doc_comment)]
    exit_when_drained: Option<u64>,
}

/// `--exec`'s command, refused if blank: `sh -c ''` exits 0, which would acknowledge every
/// entry without handling it (the command was likely an unset variable).
fn command(text: &str) -> Result<String, String> {
    match text.trim().is_empty() {
        true => Err("the command is empty: it would acknowledge every entry without handling it \
                     (an unset variable?); to print entries instead, leave --exec out"
            .into()),
        false => Ok(text.to_string()),
    }
}

/// `--order-by`'s field: any bytes but none (an entry can have an empty field name, but an
/// empty FIELD is more likely an unset variable).
fn field(text: OsString) -> Result<OsString, String> {
    match text.is_empty() {
        true => Err("the field name is empty (an unset variable?)".into()),
        false => Ok(text),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Transport {
    Mio,
    Smol,
}

/// What the flags make: the server, a handler per stream, what the handlers share.
type Checked = (Server, Vec<Arc<Handler>>, Arc<Shared>, Option<Arc<Pipe>>);

/// The flags checked against each other, the consumer's settings by the consumer's own
/// rules, `--stats-json` for being writable: bad usage is told before any connection.
fn check(a: &Args) -> Result<Checked, Failure> {
    for (i, stream) in a.streams.iter().enumerate() {
        // Lanes are told apart by the name shown; two lanes of one consumer on one stream
        // would take each other's entries.
        if a.streams[..i].iter().any(|s| show(s.as_bytes()) == show(stream.as_bytes())) {
            return Err(Failure::Usage(format!("--stream {} is given twice", show(stream.as_bytes()))));
        }
    }
    if a.recreate_group && a.create_group.is_none() {
        return Err(Failure::Usage("--recreate-group needs --create-group (the ID to create it at)".into()));
    }
    if a.handler_timeout.is_some() && a.exec.is_none() && a.pipe.is_none() {
        return Err(Failure::Usage(
            "--handler-timeout goes with --exec or --pipe (a printed entry has no handler to time)".into(),
        ));
    }
    if a.force_delete && !matches!(a.delete_acked, Some(DeleteWhen::Keepref | DeleteWhen::Delref)) {
        return Err(Failure::Usage("--force-delete goes with --delete-acked keepref or delref".into()));
    }
    if a.max_deliveries.is_some() && a.dead_letter.is_none() {
        return Err(Failure::Usage(
            "--max-deliveries needs --dead-letter (the stream to move entries to)".into(),
        ));
    }
    let server = a.server.to_server()?;
    let stop = Arc::new(StopAll::default());
    let shared = shared(a, &stop, Arc::new(Screen::new()));
    let handlers = handlers(a, &server.target, &shared)?;
    let pipe = a.pipe.clone().map(|command| Arc::new(Pipe::new(command)));
    if let Some(path) = &a.stats_json {
        // Opened for appending, not truncated: the last run's counters stay until replaced.
        let existed = path.exists();
        let opened = OpenOptions::new().append(true).create(true).open(path);
        opened.map_err(|e| Failure::Bad(format!("--stats-json: cannot write {}: {e}", path.display())))?;
        if !existed {
            let _ = std::fs::remove_file(path);
        }
    }
    Ok((server, handlers, shared, pipe))
}

/// `--dead-letter`'s (and `--emit-to`'s) key for `stream` ([`pelican::key_for`]).
fn dead_letter_key(template: &[u8], stream: &[u8]) -> Vec<u8> {
    pelican::key_for(template, stream)
}

/// `--delete-acked`'s condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum DeleteWhen {
    Keepref,
    Delref,
    Acked,
}

/// `--on-retry`: `release`, `keep`, `backoff` or a delay in milliseconds.
fn on_retry(s: &str) -> Result<OnRetry, String> {
    match s {
        "release" => Ok(OnRetry::Release),
        "keep" => Ok(OnRetry::StayPending),
        "backoff" => Ok(OnRetry::Backoff(RetryBackoff::default())),
        ms => ms
            .parse::<u64>()
            .map(|ms| OnRetry::ReleaseAfter(Duration::from_millis(ms)))
            .map_err(|_| format!("{ms:?}: release, keep, backoff, or a number of milliseconds")),
    }
}

/// `--retry-backoff FIRST_MS[,MAX_MS]`: doubling from FIRST_MS, at most MAX_MS (else
/// `--min-idle-ms`).
fn retry_backoff(s: &str) -> Result<RetryBackoff, String> {
    let (first, max) = match s.split_once(',') {
        Some((first, max)) => (first, Some(max)),
        None => (s, None),
    };
    let ms = |text: &str, what: &str| {
        whole::<u64, 1, MAX_MS>(text).map_err(|why| format!("{what} {text:?}: {why}"))
    };
    let mut backoff = RetryBackoff::new(Duration::from_millis(ms(first, "FIRST_MS")?));
    if let Some(max) = max {
        backoff = backoff.max(Duration::from_millis(ms(max, "MAX_MS")?));
    }
    Ok(backoff)
}

/// The consumer settings of `stream`'s lane. Names go on as the bytes given: one that
/// `pending --json` printed in base64 can be given back as it is.
/// How often the group's health is asked for (the progress line's, `--metrics`' gauges).
const HEALTH_EVERY: Duration = Duration::from_secs(5);

fn config(a: &Args, target: &Target, stream: &[u8], health: bool) -> Config {
    let mut config = target
        .apply(Config::new(stream, a.group.as_bytes(), a.consumer.as_bytes()))
        .count(a.count)
        .beat(Duration::from_millis(a.beat_ms))
        .min_idle(Duration::from_millis(a.min_idle_ms))
        // Each process its own jitter: workers restarted together reconnect spread out.
        .seed(crate::seed::seed());
    match &a.create_group {
        None => {}
        Some(Some(start)) => config = config.create_group(start).create_added_group(start),
        // Streams a pattern finds may have been written to before: none of it is skipped.
        Some(None) if a.stream_pattern.is_some() => config = config.create_group("0"),
        Some(None) => config = config.create_group("$"),
    }
    if let Some(field) = &a.order_by {
        config = config.order_by(field.as_bytes());
    }
    if a.recreate_group {
        config = config.on_group_gone(GroupGone::Recreate);
    }
    if a.allow_twins {
        config = config.allow_twins();
    }
    config = config.leave_on_stop(!a.keep_consumer);
    if let Some(when) = a.delete_acked {
        config = config.delete_acked(match when {
            DeleteWhen::Keepref => DeleteAcked::KeepRef,
            DeleteWhen::Delref => DeleteAcked::DelRef,
            DeleteWhen::Acked => DeleteAcked::Acked,
        });
    }
    config = match a.retry_backoff {
        Some(backoff) => config.retry_backoff(backoff),
        None => config.on_retry(a.on_retry),
    };
    if let Some(replicas) = a.ack_replicas {
        let timeout = Duration::from_millis(a.ack_timeout_ms);
        config = config.ack_wait(match a.ack_aof {
            true => AckWait::Aof { local: true, replicas, timeout },
            false => AckWait::Replicas { replicas, timeout },
        });
    }
    if a.classic_verbs {
        config = config.classic_verbs();
    }
    if a.resp3 {
        config = config.protocol(Protocol::Resp3);
    }
    if let Some(template) = &a.dead_letter {
        // `%s` is each stream's key (the consumer makes it so).
        config = config.dead_letter(template.as_bytes());
        config.max_deliveries = a.max_deliveries;
    }
    if let Some(template) = &a.emit_to {
        // Checked at every connect: scripting allowed, the key writable, in the stream's slot.
        config = config.commit_to([template.as_bytes()]);
    }
    if health {
        config = config.health_every(HEALTH_EVERY);
    }
    config.concurrency(concurrency(a)).most_in_hand(a.most_in_hand.max(concurrency(a)))
}

/// The entries a lane has in hand at once: `--concurrency` with `--exec`. Printing has
/// nothing to wait on, and entries printed one at a time keep their order on stdout.
fn concurrency(a: &Args) -> u32 {
    if a.exec.is_some() || a.pipe.is_some() {
        a.concurrency.unwrap_or(1)
    } else {
        1
    }
}

/// `--concurrency`'s default for a `--pipe` handler that takes batches: two reads' worth, so
/// that the next batch waits in its stdin while it works on one, and the one after is read
/// meanwhile. One at a time would leave the handler waiting for pelican at every batch.
fn batch_concurrency(a: &Args) -> u32 {
    a.count.saturating_mul(2).clamp(1, pelican::MAX_CONCURRENCY)
}

/// What the lanes share.
fn shared(a: &Args, stop: &Arc<StopAll>, screen: Arc<Screen>) -> Arc<Shared> {
    Arc::new(Shared {
        exec: a.exec.clone(),
        piped: a.pipe.is_some(),
        handler_timeout: a.handler_timeout.map(Duration::from_millis),
        overdue: Duration::from_millis(a.overdue_ms),
        group: show(a.group.as_bytes()).into_owned(),
        consumer: show(a.consumer.as_bytes()).into_owned(),
        dead_letter: a.dead_letter.is_some(),
        stdout_closed: AtomicBool::new(false),
        unrunnable: AtomicI32::new(0),
        gave_up: std::sync::OnceLock::new(),
        stop: stop.clone(),
        screen,
        quiet: a.quiet,
        several: a.streams.len() > 1 || a.stream_pattern.is_some(),
        total: Default::default(),
    })
}

/// A handler per stream, the settings checked (a refused setting is bad usage, exit 2).
fn handlers(a: &Args, target: &Target, shared: &Arc<Shared>) -> Result<Vec<Arc<Handler>>, Failure> {
    let streams: Vec<&[u8]> = a.streams.iter().map(|s| s.as_bytes()).collect();
    // Checked with a stand-in when only a pattern names the streams.
    let all = config(a, target, streams.first().copied().unwrap_or(b"s"), false).streams(&streams);
    all.validate().map_err(|e| Failure::Usage(format!("invalid settings: {e}")))?;
    Ok(streams.iter().map(|stream| handler(a, shared, stream)).collect())
}

/// The handler of `stream`.
fn handler(a: &Args, shared: &Arc<Shared>, stream: &[u8]) -> Arc<Handler> {
    let emit_to = a.emit_to.as_ref().map(|template| dead_letter_key(template.as_bytes(), stream));
    Arc::new(Handler::new(stream, emit_to, shared.clone()))
}

/// `--stream-pattern`'s glob: not empty (an unset variable?).
fn pattern(text: OsString) -> Result<OsString, String> {
    match text.is_empty() {
        true => Err("the pattern is empty (an unset variable?); * matches every stream".into()),
        false => Ok(text),
    }
}

/// The lanes: every stream in one (one consumer, one connection), but in a cluster, where a
/// read's streams must share a hash slot, one per slot they fall in; at most
/// [`pelican::MAX_STREAMS`] streams a lane.
fn lanes(
    a: &Args,
    target: &Target,
    handlers: &[Arc<Handler>],
    pipe: Option<&Arc<Pipe>>,
    net: &Net,
) -> Vec<Lane> {
    let mut groups: Vec<Vec<Arc<Handler>>> = Vec::new();
    for handler in handlers {
        let slot = (!net.homes.is_empty()).then(|| pelican::cluster::key_slot(handler.stream_bytes()));
        let fits = |g: &Vec<Arc<Handler>>| {
            g.len() < pelican::MAX_STREAMS
                && slot.is_none_or(|slot| pelican::cluster::key_slot(g[0].stream_bytes()) == slot)
        };
        match groups.iter_mut().find(|g| fits(g)) {
            Some(group) => group.push(handler.clone()),
            None => groups.push(vec![handler.clone()]),
        }
    }
    let health = a.progress || handlers[0].shared.screen.is_tty() || a.metrics.is_some();
    groups
        .into_iter()
        .map(|group| {
            // Asked only of a lane of one stream: the health a consumer tells names no stream.
            let streams = group.iter().map(|h| h.stream_bytes());
            let config =
                config(a, target, group[0].stream_bytes(), health && group.len() == 1).streams(streams);
            let handlers = Handlers::new(group, pipe.cloned());
            Lane { config, handlers, published: published::Published::default() }
        })
        .collect()
}

/// Runs `consume`: every `--stream` (in one lane, or one per cluster slot) until a signal or
/// a failure.
pub fn main(mut args: Args) -> Result<(), Failure> {
    let (server, mut handlers, shared, pipe) = check(&args)?;
    let stop = shared.stop.clone();
    let mut net = Net {
        endpoint: server.endpoint().clone(),
        tls: server.tls_for(),
        homes: Vec::new(),
        masters: Vec::new(),
    };
    let screen = shared.screen.clone();
    // Before anything that may take a while (asking the cluster where the streams are): a
    // signal meanwhile is a stop, not death by the signal's default action.
    let every = Handlers::new(handlers.clone(), pipe.clone());
    signals::on_signals(stop.clone(), every.clone(), screen.clone())?;
    let limit = Duration::from_millis(args.stop_timeout_ms);
    deadline::watch(stop.clone(), every.clone(), screen.clone(), limit)
        .map_err(|e| Failure::Failed(format!("cannot start the stop's deadline thread: {e}")))?;
    if let Some(command) = &args.exec {
        // A typo fails here, not at the first entry.
        found::check("--exec", command).map_err(Failure::Failed)?;
    }
    if let Some(pipe) = &pipe {
        // A handler that cannot start fails here, before it can fail an entry.
        pipe.start(&shared).map_err(Failure::Failed)?;
        if pipe.speaks_batches() && args.concurrency.is_none() {
            args.concurrency = Some(batch_concurrency(&args));
        }
    }
    let mut rescan = None;
    if let Some(pattern) = &args.stream_pattern {
        // A cluster's keys are spread over its masters: each is scanned.
        net = net.locate(&[]);
        let look = Looking {
            server: server.clone(),
            masters: net.masters.clone(),
            pattern: pattern.as_bytes().to_vec(),
            emit_to: args.emit_to.clone(),
            shared: shared.clone(),
            every: every.clone(),
            failing: false,
        };
        let Some(look) = first_matches(look, &args, &mut handlers)? else { return Ok(()) };
        let cluster = !net.masters.is_empty();
        let every = Duration::from_millis(args.rescan_ms);
        rescan = Some(Rescan { look: Box::new(look.again()), every, cluster });
    }
    let streams: Vec<&[u8]> = handlers.iter().map(|h| h.stream_bytes()).collect();
    if matches!(args.delete_acked, Some(DeleteWhen::Keepref | DeleteWhen::Delref)) && !args.force_delete {
        let when = if args.delete_acked == Some(DeleteWhen::Keepref) { "keepref" } else { "delref" };
        others::refuse_other_groups(&server, &streams, args.group.as_bytes(), when)?;
    }
    let net = net.locate(&streams);
    let lanes = lanes(&args, &server.target, &handlers, pipe.as_ref(), &net);
    let lane_handlers: Vec<Handlers> = lanes.iter().map(|lane| lane.handlers.clone()).collect();
    // Served until this returns; a port that cannot be listened on is told before the
    // consumers connect.
    let overdue = shared.overdue;
    let _serving =
        args.metrics.as_deref().map(|addr| metrics::serve(addr, &lanes, &stop, overdue)).transpose()?;
    let watched = lanes.iter().map(|lane| (lane.published.clone(), lane.handlers.clone())).collect();
    overdue::watch(watched, shared.clone())
        .map_err(|e| Failure::Failed(format!("cannot start the overdue watch's thread: {e}")))?;
    if let Some(ms) = args.exit_when_drained {
        let published = lanes.iter().map(|lane| lane.published.clone()).collect();
        drained::watch(published, shared.clone(), Duration::from_millis(ms))
            .map_err(|e| Failure::Failed(format!("cannot start the drain's watch thread: {e}")))?;
    }
    let start = Instant::now();
    // Dropped on an early return, which ends the line.
    let progress = (args.progress || screen.is_tty()).then(|| Progress::spawn(&every, &screen));
    let outcomes = match args.transport {
        Transport::Mio => mio_lanes::run(lanes, &net, &stop, rescan)?,
        Transport::Smol => smol_lanes::run(lanes, &net, &stop, concurrency(&args), rescan)?,
    };
    // Read after the run: streams found meanwhile joined their lanes.
    let by_lane: Vec<Vec<Arc<Handler>>> = lane_handlers.iter().map(Handlers::list).collect();
    let counts = lane_counts(&by_lane, &outcomes);
    if let Some(progress) = progress {
        progress.finish(&counts, &shared.total, start.elapsed());
    }
    if let Some(pipe) = &pipe {
        // Every entry is settled: the handler may go.
        pipe.finish();
    }
    failed(&args, &server, &by_lane, &outcomes)?;
    if let Some(path) = &args.stats_json {
        let json = report::stats_json(&counts, &shared.total, start.elapsed());
        std::fs::write(path, json + "\n")
            .map_err(|e| Failure::Failed(format!("cannot write {}: {e}", path.display())))?;
    }
    stopped_early(&args, &shared)
}

/// `--stream-pattern`'s search: the streams matching it, each new one with its handler.
struct Looking {
    server: Server,
    /// A cluster's masters (none: the URL's node, or the sentinels' master).
    masters: Vec<pelican::HostPort>,
    pattern: Vec<u8>,
    emit_to: Option<OsString>,
    shared: Arc<Shared>,
    /// Every stream's handler: those found are added.
    every: Handlers,
    /// The last search failed (told once until one works).
    failing: bool,
}

impl Looking {
    /// The streams matching, not seen before, with their handlers (added to every stream's).
    fn find(&mut self) -> Result<Vec<Arc<Handler>>, String> {
        let found = discover::scan(&self.server, &self.masters, &self.pattern)?;
        let mut new = Vec::new();
        for key in found.iter().filter(|key| !self.every.has(key)) {
            let emit_to = self.emit_to.as_ref().map(|template| dead_letter_key(template.as_bytes(), key));
            let handler = Arc::new(Handler::new(key, emit_to, self.shared.clone()));
            self.every.add(handler.clone());
            new.push(handler);
        }
        Ok(new)
    }

    /// A later search (`--rescan-ms`): a failure is told once, until one works again.
    fn again(mut self) -> impl FnMut() -> Vec<Arc<Handler>> + Send {
        move || match self.find() {
            Ok(new) => {
                self.failing = false;
                new
            }
            Err(e) => {
                if !std::mem::replace(&mut self.failing, true) {
                    self.shared.screen.tell(format_args!(
                        "pelican: --stream-pattern: cannot look for new streams ({e}); trying again"
                    ));
                }
                Vec::new()
            }
        }
    }
}

/// The first search: streams matching, added to `handlers`; while none match, looks again
/// every `--rescan-ms` (told once). `None`: stopped meanwhile.
fn first_matches(
    mut look: Looking,
    a: &Args,
    handlers: &mut Vec<Arc<Handler>>,
) -> Result<Option<Looking>, Failure> {
    let mut told = false;
    loop {
        let found = look.find().map_err(|e| Failure::Failed(format!("--stream-pattern: {e}")))?;
        handlers.extend(found);
        if !handlers.is_empty() {
            return Ok(Some(look));
        }
        if !std::mem::replace(&mut told, true) {
            look.shared.screen.tell(format_args!(
                "pelican: no stream matches {} yet; looking again every {} ms",
                show(&look.pattern),
                a.rescan_ms
            ));
        }
        let until = Instant::now() + Duration::from_millis(a.rescan_ms);
        while Instant::now() < until {
            if look.shared.stop.is_requested() {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Each stream's counts, for the report: its handler's, and its lane's consumer's if it
/// stopped (given with the lane's first stream: a consumer counts for all its streams).
fn lane_counts<'a>(lanes: &'a [Vec<Arc<Handler>>], outcomes: &'a [Outcome]) -> Vec<LaneCounts<'a>> {
    let mut counts = Vec::new();
    for (handlers, outcome) in lanes.iter().zip(outcomes) {
        for (i, h) in handlers.iter().enumerate() {
            counts.push(LaneCounts {
                stream: &h.stream,
                counters: &h.counters,
                stats: outcome.as_ref().ok(),
                alone: handlers.len() == 1,
                first: i == 0,
            });
        }
    }
    counts
}

/// The lanes that failed, one line each naming its stream (lanes failing alike share a
/// line), with what fixes it where the flags can.
fn failed(
    a: &Args,
    server: &Server,
    lanes: &[Vec<Arc<Handler>>],
    outcomes: &[Outcome],
) -> Result<(), Failure> {
    let mut lines: Vec<(Vec<&str>, String)> = Vec::new();
    for (handlers, outcome) in lanes.iter().zip(outcomes) {
        let Err(failure) = outcome else { continue };
        let text = explain(a, server, &handlers[0], failure);
        let names = handlers.iter().map(|h| &h.stream[..]);
        match lines.iter_mut().find(|(_, t)| *t == text) {
            Some((streams, _)) => streams.extend(names),
            None => lines.push((names.collect(), text)),
        }
    }
    if lines.is_empty() {
        return Ok(());
    }
    let lines: Vec<String> = lines
        .into_iter()
        .map(|(streams, text)| {
            let which = if streams.len() == 1 { "stream" } else { "streams" };
            let named = match streams.len() {
                ..=5 => streams.join(", "),
                n => format!("{} and {} more", streams[..3].join(", "), n - 3),
            };
            format!("{which} {named}: {text}")
        })
        .collect();
    Err(Failure::Failed(lines.join("\npelican: ")))
}

/// A group that does not exist (the server said `message`, a `NOGROUP`), and how to create
/// it: `create` names the flag (`--create-group`, or from another command, `pelican
/// consume --create-group`).
pub(crate) fn no_group(group: &str, message: &str, create: &str) -> String {
    format!(
        "there is no group {group} ({message}); {create} creates it (and the stream if missing): \
         --create-group for new entries only, --create-group 0 for all"
    )
}

/// A lane's failure in words, with what fixes it where the flags can.
fn explain(a: &Args, server: &Server, handler: &Handler, failure: &LaneFailure) -> String {
    let group = show(a.group.as_bytes());
    match &failure.error {
        Some(pelican::Error::GroupGone { command, message }) => {
            // A lane that handled nothing and fails its first read (the drain of its own
            // pending list) never had the group; one that was reading had it deleted.
            let first = *command == pelican::Command::ReadPending && handler.counters.handled.load(Relaxed) == 0;
            let fix = match (&a.create_group, first) {
                (Some(_), _) => "--recreate-group creates it again",
                (None, false) => "--create-group ID --recreate-group creates it again",
                (None, true) => return no_group(&group, message, "--create-group"),
            };
            format!("the group {group} was deleted ({message}); {fix}")
        }
        Some(pelican::Error::Server { message, .. }) => {
            login_refused("the server", message).unwrap_or_else(|| failure.message.clone())
        }
        Some(e @ pelican::Error::NotRedis { .. }) => server.host_failed(format!(
            "{} {e}: is that the address of a Redis or Valkey server?",
            server.endpoint()
        )),
        Some(pelican::Error::Twin { .. }) => format!("{} (--allow-twins)", failure.message),
        Some(pelican::Error::CommitRefused { .. }) => {
            format!("{} (--dead-letter KEY sets such entries aside)", failure.message)
        }
        Some(pelican::Error::IsSentinel) => {
            let services = server.session("pelican:hint").sentinel_services();
            let addr = server.endpoint().to_string();
            server.host_failed(sentinel_named_as_node(&addr, server.tls.is_some(), services.as_deref()))
        }
        Some(pelican::Error::CrossSlot { .. }) => format!(
            "{} (--dead-letter '%s:dead' gives each stream its own: {{orders}}:dead for the stream {{orders}})",
            failure.message
        ),
        _ => failure.message.clone(),
    }
}

/// Exit 1 if the lanes stopped because stdout closed or the command cannot run.
fn stopped_early(o: &Args, shared: &Shared) -> Result<(), Failure> {
    if shared.stdout_closed.load(Relaxed) {
        return Err(Failure::Failed("stopped: stdout is closed (the entry in hand stays pending)".into()));
    }
    if let Some(why) = shared.gave_up.get() {
        return Err(Failure::Failed(why.clone()));
    }
    let code = shared.unrunnable.load(Relaxed);
    if code != 0 {
        let why = if code == 127 { "not found" } else { "not executable" };
        let (flag, command) = match (&o.exec, &o.pipe) {
            (Some(command), _) => ("--exec", command.as_str()),
            (None, command) => ("--pipe", command.as_deref().unwrap_or_default()),
        };
        let entries = if concurrency(o) > 1 { "the entries it ran for stay" } else { "the entry stays" };
        return Err(Failure::Failed(format!(
            "stopped: the {flag} command `{command}` cannot be run (exit {code}: {why}); {entries} pending"
        )));
    }
    if stop::OVERRAN.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(Failure::StopTimedOut(format!(
            "stopped after --stop-timeout-ms ({} ms): what the handler held was given back unhandled",
            o.stop_timeout_ms
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dead_letter_keys_per_stream() {
        let key = |template: &str, stream: &[u8]| dead_letter_key(template.as_bytes(), stream);
        assert_eq!(key("%s:dead", b"{orders}"), b"{orders}:dead");
        assert_eq!(key("dead", b"s"), b"dead");
        assert_eq!(key("%s-%s", b"a"), b"a-a");
        assert_eq!(key("100%%:%s", b"a"), b"100%:a");
        assert_eq!(key("50% off %x%", b"a"), b"50% off %x%");
        assert_eq!(key("é%s", "ü".as_bytes()), "éü".as_bytes());
        assert_eq!(key("%s:dead", b"\xff"), b"\xff:dead");
    }
}
