//! `pelican produce`: pipelined `XADD`s of test entries; with `--idempotent`, `XADD … IDMP`
//! (Redis 8.6+), so that the entries whose replies a lost connection took are sent again
//! without being added twice.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pelican::cluster::RedirectKind;
use pelican::oneshot::{Hello, IdmpWindow, Request, StreamInfo};
use pelican::HostPort;
use pelican_mio::Session;

use crate::failure::Failure;
use crate::help::TEMPLATE;
use crate::name::show;
use crate::number::whole;
use crate::server::{Server, ServerArgs};

mod xadd;

use xadd::{Shape, Xadd};

const USAGE: &str = "\
pelican produce --stream KEY --count N [--size BYTES] [--field NAME=VALUE…] [--keys N]
       pelican produce --stream KEY --from FILE
                      [--url URL]
                      [--idempotent [--producer-id ID]]
                      [--wait-replicas N [--wait-timeout-ms MS]]
                      [--tls-ca FILE] [--tls-cert FILE --tls-key FILE]";

const ABOUT: &str = "\
Appends N entries to the stream KEY (XADD KEY * p <value>), pipelined up to 1000 at a time
(fewer when values are big), each with one field `p` whose value is BYTES bytes (a run of
`x`), then prints how many were added and the rate. In a Redis/Valkey Cluster, any node's
URL will do: the entries go to the node serving KEY (MOVED and ASK are followed).

--field NAME=VALUE (repeated) puts more fields before `p`, {n} in a value standing for the
entry's number in the run; --keys N adds a field `key`, k0 … k<N-1> in turn, for trying
consume --order-by key. --from FILE takes the entries from JSON lines instead, one object
per line, its members the fields in order: realistic and poison entries alike, e.g.
  {\"order\": \"o-17\", \"amount\": 12.5}
  {\"order\": \"o-18\", \"amount\": \"not a number\"}

With redis+sentinel://, the entries go to the master the sentinels name, asked again every
second and after a lost connection: a failover during the run is told (a master the failover
left keeps taking writes until it is made a replica, then drops them; a killed one takes
along what it had not passed on: the entries added around it may be lost), the run goes on
with the new master, and pelican exits 1 at the end.

--wait-replicas N counts an entry as added only once N replicas have it too: a WAIT N MS
follows each pipeline. Replicas short of N (WAIT runs out after --wait-timeout-ms) hold the
run: with Sentinel, the sentinels are asked whether the master moved, and if it did, the
entries not confirmed are sent again to the new master (those a replica had copied before
it was promoted are then there twice; --idempotent prevents that); else WAIT is asked
again, for 30 s at most, before the run fails. After a failover the run waits for the new
master's first replica: the sentinels attach the old master about 10 s later (a killed one,
once restarted). So a failover loses no entry counted as added, and pelican exits 0. Give N
as the number of the master's replicas: with fewer, a replica still attached to a master
the failover left could confirm writes that it then drops as well.

A connection lost mid-run is made again (a few tries over some seconds) and the entries
whose replies were not read are sent again. Without --idempotent, those the server had
added before the loss are then in the stream twice (told on stderr). With --idempotent,
each XADD carries IDMP <producer-id> <its number in the run> (Redis 8.6+): the server
answers a repeat with the first id and adds nothing, so each entry is added once.

--idempotent on a server without IDMP (Redis before 8.6, Valkey) fails before anything is
added. The server remembers, per stream and producer, the last IDMP-MAXSIZE numbers (100 by
default, at most 10000) for IDMP-DURATION seconds (100 by default, at most 86400; both read
with XINFO STREAM). So pipelines hold at most IDMP-MAXSIZE entries (fewer than 1000 by
default: slower), and an entry is sent again only within 80% of IDMP-DURATION of its first
sending: an outage longer than that fails the run, telling how many entries are in doubt.
A long run needs no bigger window: only the entries in flight are ever sent again. To
pipeline deeper, raise it beforehand (XCFGSET KEY IDMP-MAXSIZE 1000); changing it makes the
stream forget what it remembered of every producer.";

const AFTER: &str = "\
Exit status: 0 all added, 1 the server failed, refused (--idempotent without IDMP
included) or could not be reached (a host that does not resolve), the connection could not
be made again, the replicas did not confirm (--wait-replicas), a failover may have lost
entries (Sentinel, without --wait-replicas), or TLS failed, 2 bad usage (a bad URL).

Example: pelican produce --url redis+sentinel://s1,s2,s3/mymaster --stream orders
             --count 100000 --wait-replicas 1";

/// The most entries one run adds.
const MAX_COUNT: u64 = 1_000_000_000;

/// The longest one `WAIT` may wait: a minute.
const MAX_WAIT_MS: u64 = 60_000;

/// How long replicas short of `--wait-replicas` may hold the run before it fails: after a
/// `SENTINEL FAILOVER`, the new master's first replica (the old master) is attached by the
/// sentinels about 10 s later.
const HOLD: Duration = Duration::from_secs(30);

/// The largest value: 512 MiB, the most a server takes in one string by default
/// (`proto-max-bulk-len`).
const MAX_SIZE: u64 = 512 << 20;

/// `pelican produce`'s flags.
#[derive(clap::Args, Debug)]
#[command(override_usage = USAGE, before_help = ABOUT, after_help = AFTER, help_template = TEMPLATE)]
pub struct Args {
    /// the stream key (required)
    #[arg(long, value_name = "KEY")]
    stream: OsString,
    /// how many entries (required, but with --from)
    #[arg(long, value_name = "N", required_unless_present = "from", conflicts_with = "from", value_parser = whole::<u64, 1, MAX_COUNT>, allow_negative_numbers = true)]
    count: Option<u64>,
    /// size of each value, at most 536870912 (512 MiB, a server's default
    /// proto-max-bulk-len)
    #[arg(long, value_name = "BYTES", default_value_t = 16, value_parser = whole::<u64, 0, MAX_SIZE>, allow_negative_numbers = true, verbatim_doc_comment)]
    size: u64,
    /// a field NAME with VALUE in every entry (before p); {n} in VALUE is
    /// the entry's number in the run; repeat it for more fields
    #[arg(long = "field", value_name = "NAME=VALUE", value_parser = xadd::field, conflicts_with = "from", verbatim_doc_comment)]
    fields: Vec<(Vec<u8>, Vec<u8>)>,
    /// a field `key` in every entry, k0 … k<N-1> in turn (for consume
    /// --order-by key)
    #[arg(long, value_name = "N", conflicts_with = "from", value_parser = whole::<u64, 1, MAX_COUNT>, allow_negative_numbers = true, verbatim_doc_comment)]
    keys: Option<u64>,
    /// the entries from FILE (- for stdin): one JSON object per line, its
    /// members the entry's fields in order (strings as they are; numbers,
    /// booleans, arrays and objects as JSON text)
    #[arg(long, value_name = "FILE", conflicts_with = "size", verbatim_doc_comment)]
    from: Option<std::path::PathBuf>,
    /// add each entry once, even when its reply is lost and it is sent
    /// again: XADD KEY IDMP <producer-id> <n> * … (Redis 8.6+; see above)
    #[arg(long, verbatim_doc_comment)]
    idempotent: bool,
    /// with --idempotent: the producer id; default pelican:<host>:<pid>:<start
    /// ms>, new each run. Give each run its own: the stream drops as repeats a
    /// run's entries whose numbers it still remembers under that id
    #[arg(long, value_name = "ID", requires = "idempotent", verbatim_doc_comment)]
    producer_id: Option<OsString>,
    /// count an entry as added once N replicas have it too (WAIT N MS after
    /// each pipeline): a failover then loses none of them (see above)
    #[arg(long, value_name = "N", value_parser = whole::<u32, 1, { u32::MAX as u64 }>, allow_negative_numbers = true, verbatim_doc_comment)]
    wait_replicas: Option<u32>,
    /// with --wait-replicas: how long one WAIT waits for the replicas
    #[arg(long, value_name = "MS", default_value_t = 1000, requires = "wait_replicas", value_parser = whole::<u64, 1, MAX_WAIT_MS>, allow_negative_numbers = true)]
    wait_timeout_ms: u64,
    #[command(flatten)]
    pub(crate) server: ServerArgs,
}

/// Commands per pipelined write, at most.
const CHUNK: u64 = 1000;

/// Bytes of values per pipelined write, roughly: small values go 1000 at a time, big ones
/// fewer, the biggest alone. Values are not copied into the pipeline.
const CHUNK_BYTES: usize = 4 << 20;

/// The tries to connect again after a lost connection, each after the backoff's wait (100 ms
/// doubling to 3.2 s, jittered): 3 to 6 s in all, well inside the default IDMP window of 100 s.
const RECONNECT_TRIES: usize = 6;
const RECONNECT_MIN: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_millis(3200);

/// Lost connections in a row, with no reply read between them, before the run gives up.
const MAX_LOST_IN_A_ROW: u32 = 5;

/// The share of the stream's IDMP-DURATION within which an entry may be sent again: the
/// rest is left for the resend to reach the server.
const RESEND_WITHIN: f64 = 0.8;

/// Runs `produce`: the `XADD`s, then the count and rate.
pub fn main(args: Args) -> Result<(), Failure> {
    let stream = args.stream.as_bytes();
    let size =
        usize::try_from(args.size).map_err(|_| Failure::Bad("--size is too big for this machine".into()))?;
    let shape = match &args.from {
        Some(path) => Shape::Lines(read_from(path)?),
        None => Shape::Made { fields: args.fields.clone(), keys: args.keys, size },
    };
    let producer = match (args.idempotent, args.producer_id) {
        (false, _) => None,
        (true, Some(id)) if id.is_empty() => {
            return Err(Failure::Usage("--producer-id must not be empty".into()));
        }
        (true, Some(id)) => Some(id.into_vec()),
        (true, None) => Some(default_producer_id()),
    };
    let server = args.server.to_server()?;
    let session = server.connect(NAME).map_err(Failure::Failed)?;
    let xadd = Xadd::new(stream, producer.as_deref(), shape);
    let count = xadd.lines().or(args.count).unwrap_or(1);
    let mut run = Run {
        server,
        session,
        xadd,
        done: 0,
        window: None,
        lost: 0,
        lost_in_a_row: 0,
        resent: 0,
        checked: (Instant::now(), 0),
        in_doubt: 0,
        wait: args.wait_replicas.map(|n| (n, Duration::from_millis(args.wait_timeout_ms))),
        failovers: 0,
    };
    let start = Instant::now();
    run.produce(count)?;
    let secs = start.elapsed().as_secs_f64();
    let mut how = match (&args.from, args.fields.len(), args.keys) {
        (Some(path), ..) if path.as_os_str() == "-" => "from stdin".into(),
        (Some(path), ..) => format!("from {}", path.display()),
        (None, 0, None) => format!("{size}-byte values"),
        (None, _, keys) => {
            let mut names: Vec<String> =
                args.fields.iter().map(|(name, _)| show(name).into_owned()).collect();
            if let Some(keys) = keys {
                names.push(format!("key (k0…k{})", keys - 1));
            }
            format!("{size}-byte values, with {}", names.join(", "))
        }
    };
    if let Some(id) = &producer {
        how += &format!(", idempotent as producer {}", show(id));
    }
    if let Some((replicas, _)) = run.wait {
        how += &format!(", each confirmed by {}", plural(replicas, "replica"));
    }
    let mut line = format!(
        "produced {} to {} ({how}) in {secs:.3} s: {:.0} entries/s",
        if run.done == 1 { "1 entry".to_string() } else { format!("{} entries", run.done) },
        show(stream),
        run.done as f64 / secs.max(1e-9)
    );
    if run.lost > 0 || run.failovers > 0 {
        let (lost, failovers) = (plural(run.lost, "connection"), plural(run.failovers, "failover"));
        let what = match (run.lost, run.failovers) {
            (_, 0) => format!("{lost} lost"),
            (0, _) => failovers,
            _ => format!("{lost} lost, {failovers}"),
        };
        line += &format!("; {what}, {} entries sent again", run.resent);
    }
    println!("{line}");
    if run.in_doubt > 0 {
        return Err(Failure::Failed(format!(
            "a failover during the run: entries added to the old master around it may be lost ({} since the \
             check before it, and any its replica had not copied yet); XLEN on the new master tells what is \
             there (--wait-replicas counts only the entries a replica has)",
            run.in_doubt
        )));
    }
    Ok(())
}

/// `--from`'s entries: the file's lines, or stdin's for `-`.
fn read_from(path: &std::path::Path) -> Result<Vec<xadd::Pairs>, Failure> {
    let lines = match path.as_os_str().as_bytes() {
        b"-" => xadd::read_lines(std::io::stdin().lock(), "stdin"),
        _ => {
            let file = std::fs::File::open(path)
                .map_err(|e| Failure::Failed(format!("--from {}: {e}", path.display())))?;
            xadd::read_lines(std::io::BufReader::new(file), &path.display().to_string())
        }
    };
    lines.map_err(|e| Failure::Bad(format!("--from {e}")))
}

/// `n thing` or `n things`.
fn plural(n: u32, thing: &str) -> String {
    format!("{n} {thing}{}", if n == 1 { "" } else { "s" })
}

/// How often, with Sentinel, the sentinels are asked whether the master moved.
const CHECK_MASTER_EVERY: Duration = Duration::from_secs(1);

/// The connections' name in `CLIENT LIST`.
const NAME: &str = "pelican:produce";

/// `pelican:<host>:<pid>:<start ms>`: one run's, the same across its reconnects.
fn default_producer_id() -> Vec<u8> {
    let host = rustix::system::uname();
    let host = String::from_utf8_lossy(host.nodename().to_bytes()).into_owned();
    let ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
    format!("pelican:{host}:{}:{ms}", std::process::id()).into_bytes()
}

/// A run: the connection, what is confirmed added, and the lost connections.
struct Run {
    server: Server,
    session: Session,
    xadd: Xadd,
    /// Entries added, as the server confirmed; the next entry's number is `done + 1`.
    done: u64,
    /// The stream's IDMP window (what it remembers of a producer's XADD IDMP: XINFO STREAM),
    /// once known (`--idempotent` only).
    window: Option<IdmpWindow>,
    /// Connections lost, in all and in a row (no reply read since the last).
    lost: u32,
    lost_in_a_row: u32,
    /// Entries sent again after a lost connection.
    resent: u64,
    /// With Sentinel: when the master was last found where it was, and `done` then.
    checked: (Instant, u64),
    /// With Sentinel: entries added to a master that a failover had already left (confirmed
    /// by it, but lost when it became a replica) — as far as the checks tell.
    in_doubt: u64,
    /// `--wait-replicas`: how many replicas must confirm each pipeline, and how long one
    /// `WAIT` waits.
    wait: Option<(u32, Duration)>,
    /// Failovers that moved the run, with `--wait-replicas`, its unconfirmed entries sent
    /// again to the new master.
    failovers: u32,
}

/// How a pipeline went.
enum Sent {
    /// Every reply read: `added` entries added (the first of the pipeline: a stream's node
    /// either adds an entry or redirects it and all after it), then redirects, and the
    /// first error.
    Replied { added: u64, moved: u64, asked: u64, error: Option<String> },
    /// The connection failed after `added` replies of entries added were read.
    Lost { added: u64, why: String },
}

impl Run {
    fn produce(&mut self, count: u64) -> Result<(), Failure> {
        let fits = (CHUNK_BYTES / self.xadd.len()).clamp(1, CHUNK as usize) as u64;
        while self.done < count {
            // With --idempotent, the first XADD goes alone: it tells whether the server has
            // IDMP before any more is sent, and the stream's window is read after it.
            let per_write = match (self.xadd.idempotent(), self.window) {
                (false, _) => fits,
                (true, None) => 1,
                (true, Some(window)) => fits.min(window.maxsize.max(1)),
            };
            let n = per_write.min(count - self.done);
            let sent_at = Instant::now();
            match self.send(n) {
                Sent::Lost { added, why } => {
                    // With --wait-replicas an entry counts once its replicas confirmed it:
                    // none of these was.
                    let added = if self.wait.is_some() { 0 } else { added };
                    self.done += added;
                    if added > 0 {
                        self.lost_in_a_row = 0;
                    }
                    self.recover(n - added, &why, sent_at)?;
                }
                Sent::Replied { added, moved, asked, error } => {
                    self.lost_in_a_row = 0;
                    if let Some(e) = error {
                        self.done += added;
                        if self.xadd.idempotent() && self.done == 0 {
                            return Err(self.without_idmp(e));
                        }
                        return Err(self.refused(e));
                    }
                    if added > 0 && !self.replicated(added, sent_at)? {
                        continue; // sent again, on a new connection
                    }
                    self.done += added;
                    // A cluster node that does not serve the stream. After a MOVED, one
                    // XADD through `call` follows it, and the next pipelines go to the new
                    // node. Entries refused with ASK (the slot is being migrated) go one by
                    // one through `call`, to the node asked.
                    for _ in 0..asked + moved.min(1) {
                        if let Err(e) = self.session.call(&self.xadd.request(self.done + 1)) {
                            let e = self.server.said(e);
                            return Err(match self.xadd.idempotent() && self.done == 0 {
                                true => self.without_idmp(e),
                                false => self.refused(e),
                            });
                        }
                        if !self.replicated(1, sent_at)? {
                            break;
                        }
                        self.done += 1;
                    }
                }
            }
            if self.xadd.idempotent() && self.window.is_none() && self.done > 0 {
                self.window = Some(self.read_window()?.unwrap_or(IdmpWindow::DEFAULT));
            }
            if self.checked.0.elapsed() >= CHECK_MASTER_EVERY {
                self.check_master(0)?;
            }
        }
        self.check_master(0).map(drop)
    }

    /// With --wait-replicas: whether the replicas confirmed the `n` entries just added
    /// (`WAIT`); `false` if they are to be sent again. Replicas short of the number asked
    /// hold the run: with Sentinel, a master that a failover left is told and left for the
    /// new one (its replicas' confirmations are what the new master has: the `n` are sent
    /// again there); else `WAIT` is asked again, for [`HOLD`] at most, then the run fails.
    /// A connection lost meanwhile is made again, the `n` sent again.
    fn replicated(&mut self, n: u64, sent_at: Instant) -> Result<bool, Failure> {
        let Some((replicas, timeout)) = self.wait else { return Ok(true) };
        let hold = Instant::now() + HOLD;
        let mut told = false;
        loop {
            let got = match self.session.wait(replicas, timeout) {
                Ok(got) if got >= u64::from(replicas) => return Ok(true),
                Ok(got) => got,
                Err(refused) if !refused.is_link() => {
                    return Err(Failure::Failed(format!(
                        "--wait-replicas: WAIT refused after {} entries: {refused}",
                        self.done
                    )))
                }
                Err(e) => {
                    let why = self.server.said(e);
                    self.recover(n, &why, sent_at)?;
                    return Ok(false);
                }
            };
            if self.check_master(n)? {
                return Ok(false);
            }
            let short = format!(
                "{got} of the {} asked for confirmed the last {n} entries within {} ms",
                plural(replicas, "replica"),
                timeout.as_millis()
            );
            if Instant::now() >= hold {
                return Err(Failure::Failed(format!(
                    "--wait-replicas: {short}, again and again for {} s: {} entries added and confirmed, \
                     the {n} after them are on the master only (INFO replication on it tells its replicas)",
                    HOLD.as_secs(),
                    self.done
                )));
            }
            if !told {
                say!(
                    "{}pelican: {short}: waiting for them ({} s at most)",
                    crate::stamp::now(),
                    HOLD.as_secs()
                );
                told = true;
            }
        }
    }

    /// With Sentinel: asks the sentinels whether the master is still the one written to, and
    /// says whether it moved. A master a failover left keeps taking writes until it is made a
    /// replica (seconds later), then drops them: without --wait-replicas, the entries added
    /// since the last check are in doubt; with it, only the `unconfirmed` just written, sent
    /// again. Told, and the run goes on with the new master.
    fn check_master(&mut self, unconfirmed: u64) -> Result<bool, Failure> {
        let Some(from) = self.session.master().cloned() else { return Ok(false) };
        // Not answered: asked again at the next check.
        let Ok(Some(to)) = self.session.master_moved() else {
            self.checked = (Instant::now(), self.done);
            return Ok(false);
        };
        self.failed_over(&from, &to, unconfirmed);
        self.resent += unconfirmed;
        self.reconnect().map_err(|e| Failure::Failed(format!("connecting to the new master {to}: {e}")))?;
        Ok(true)
    }

    /// Tells that a failover moved the run from `from` to `to`, `unconfirmed` entries just
    /// written to be sent again there. Without --wait-replicas, the entries added since the
    /// last check are in doubt: `from` may not have passed them on before it was left.
    fn failed_over(&mut self, from: &HostPort, to: &HostPort, unconfirmed: u64) {
        if self.wait.is_some() {
            self.failovers += 1;
            say!(
                "{}pelican: a failover moved the master from {from} to {to}: the entries counted so far were \
                 confirmed by its replicas; going on with {to}, sending the {unconfirmed} not confirmed again", crate::stamp::now()
            );
        } else {
            let since = self.done - self.checked.1;
            self.in_doubt += since;
            say!(
                "{}pelican: a failover moved the master from {from} to {to}: the entries added to {from} \
                 around it may be lost ({since} since the check {:.1} s before, and any its replica had \
                 not copied yet): a master left drops them when it becomes a replica, a dead one with \
                 itself (--wait-replicas prevents that); going on with {to}",
                crate::stamp::now(),
                self.checked.0.elapsed().as_secs_f64()
            );
        }
        self.checked = (Instant::now(), self.done);
    }

    /// Writes entries `done + 1 ..= done + n` in one pipeline and reads their replies.
    fn send(&mut self, n: u64) -> Sent {
        let starts: Vec<Vec<u8>> = (self.done + 1..=self.done + n).map(|i| self.xadd.start(i)).collect();
        let parts: Vec<&[u8]> = match self.xadd.value() {
            // `p`'s value, written from the one copy.
            Some(value) => starts.iter().flat_map(|start| [&start[..], value, b"\r\n"]).collect(),
            None => starts.iter().map(|start| &start[..]).collect(),
        };
        if let Err(e) = self.session.send(&parts) {
            return Sent::Lost { added: 0, why: self.server.said(e) };
        }
        let (mut added, mut moved, mut asked, mut error) = (0, 0, 0, None);
        for _ in 0..n {
            // Read every reply, so the count printed on failure is exact.
            let reply = match self.session.receive() {
                Ok(reply) => reply,
                Err(e) => return Sent::Lost { added, why: self.server.said(e) },
            };
            match (reply.redirect().map(|r| r.kind), reply.error()) {
                (Some(RedirectKind::Moved), _) => moved += 1,
                (Some(RedirectKind::Ask), _) => asked += 1,
                (None, Some(e)) => error = error.or(Some(e.into_owned())),
                (None, None) => added += 1,
            }
        }
        Sent::Replied { added, moved, asked, error }
    }

    /// After a lost connection with `unconfirmed` entries of the pipeline sent at `sent_at`
    /// not confirmed: connects again, and lets them be sent again if that adds none twice
    /// with --idempotent (they are still in the stream's window), or says they may be added
    /// twice without it.
    fn recover(&mut self, unconfirmed: u64, why: &str, sent_at: Instant) -> Result<(), Failure> {
        self.lost += 1;
        self.lost_in_a_row += 1;
        let stream = show(self.xadd.stream()).into_owned();
        let in_doubt = |done: u64| {
            format!("{done} entries added to {stream}; the {unconfirmed} sent after them may or may not be")
        };
        if self.lost_in_a_row >= MAX_LOST_IN_A_ROW {
            return Err(Failure::Failed(format!(
                "the connection was lost {MAX_LOST_IN_A_ROW} times in a row without a reply ({why}): {}",
                in_doubt(self.done)
            )));
        }
        let from = self.session.master().cloned();
        self.reconnect().map_err(|e| {
            Failure::Failed(format!(
                "the connection was lost ({why}) and could not be made again ({e}): {}",
                in_doubt(self.done)
            ))
        })?;
        if self.xadd.idempotent() {
            // Known after the first entry; before it, only the first XADD was sent, and a
            // stream that is not there now holds nothing of this run.
            let window = match self.window {
                Some(window) => Some(window),
                None => self.read_window()?,
            };
            if let Some(window) = window {
                let within = window.duration.mul_f64(RESEND_WITHIN);
                if sent_at.elapsed() > within {
                    return Err(Failure::Failed(format!(
                        "the connection was lost ({why}) for longer than {stream}'s IDMP window allows \
                         (entries are remembered {} s; sent again only within {:.0} s): {}",
                        window.duration.as_secs(),
                        within.as_secs_f64(),
                        in_doubt(self.done)
                    )));
                }
            }
        }
        let twice = if self.xadd.idempotent() {
            ""
        } else {
            " (those the server added before the loss are now in the stream twice; --idempotent \
             prevents that on Redis 8.6+)"
        };
        say!(
            "{}pelican: connection lost after {} entries confirmed ({why}); connected again, sending \
             the {unconfirmed} unconfirmed again{twice}",
            crate::stamp::now(),
            self.done
        );
        // With Sentinel, the sentinels may name another master now (the one lost was killed).
        if let (Some(from), Some(to)) = (from, self.session.master().cloned()) {
            if from != to {
                self.failed_over(&from, &to, unconfirmed);
            }
        }
        self.resent += unconfirmed;
        Ok(())
    }

    /// A new connection to the server, tried a few times with growing waits (the core's
    /// backoff, jittered).
    fn reconnect(&mut self) -> Result<(), String> {
        let mut last = String::new();
        let mut backoff = crate::seed::backoff(RECONNECT_MIN, RECONNECT_MAX);
        for _ in 0..RECONNECT_TRIES {
            thread::sleep(backoff.next_delay());
            match self.session.reconnect() {
                Ok(()) => return Ok(()),
                Err(e) => last = self.server.said(e),
            }
        }
        Err(last)
    }

    /// The stream's IDMP window from XINFO STREAM; `None` if there is no such stream yet, or
    /// the server tells none (it has no IDMP: the first XADD will say so).
    fn read_window(&mut self) -> Result<Option<IdmpWindow>, Failure> {
        let stream = self.xadd.stream().to_vec();
        let info = match self.session.call(&Request::xinfo_stream(&stream)) {
            Ok(info) => info,
            // The stream is not made yet (PROTOCOL.md 46).
            Err(e) if e.server_text().is_some_and(|t| t.contains("no such key")) => return Ok(None),
            Err(e) => {
                return Err(Failure::Failed(format!(
                    "--idempotent reads {}'s IDMP window with XINFO STREAM, which was refused: {}",
                    show(&stream),
                    self.server.said(e)
                )))
            }
        };
        Ok(StreamInfo::read(&info).ok().and_then(|info| info.idmp))
    }

    /// The first XADD … IDMP was refused: on a server without IDMP (as HELLO tells), that is
    /// said with what --idempotent needs; else it is the server's refusal.
    fn without_idmp(&mut self, error: String) -> Failure {
        let hello = self.session.call(&Request::hello());
        // Neither HELLO (before Redis 6) nor the XADD answered as a server: the link failed.
        if hello.is_err() && !error.starts_with("ERR") {
            return self.refused(error);
        }
        let hello = hello.ok().and_then(|reply| Hello::read(&reply).ok()).unwrap_or_default();
        if hello.has_idmp() {
            return self.refused(error);
        }
        let who = match (hello.server, hello.version) {
            (Some(server), Some(version)) => format!("this server ({server} {version})"),
            _ => "this server".to_string(),
        };
        Failure::Failed(format!(
            "--idempotent needs XADD … IDMP, which Redis has from 8.6 on; {who} refused it ({error}); \
             nothing was added: leave --idempotent out to produce without it"
        ))
    }

    fn refused(&self, e: String) -> Failure {
        Failure::Failed(format!("XADD {} refused after {} entries: {e}", show(self.xadd.stream()), self.done))
    }
}
