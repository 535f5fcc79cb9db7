//! `pelican consume`: consumers of a group, one lane per `--stream`, handing each entry to a
//! shell command or printing it, until SIGINT/SIGTERM.
//!
//! Each lane is one consumer on its own connection; all share the group, the consumer name,
//! the command and the signals. `mio_lanes` runs them on one `mio::Poll`, `smol_lanes` as
//! tasks on one executor. A lane that fails for good stops the others.

mod handler;
mod lane;
mod mio_lanes;
mod report;
mod screen;
mod signals;
mod smol_lanes;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pelican::{Config, Consumer, GroupGone, Protocol};

use crate::args::{Args, Failure};
use crate::server::{Server, ServerArgs};
use crate::url::Target;
use handler::{Handler, Shared, StopAll};
use lane::{Lane, LaneFailure, Net, Outcome};
use report::{LaneCounts, Progress};
use screen::Screen;

/// `pelican consume --help`.
pub const USAGE: &str = "\
Usage: pelican consume --stream KEY [--stream KEY…] --group G --consumer NAME [options]

Consumes the stream KEY as consumer NAME of group G. First its own pending entries (a
restart under the same name gets its backlog back at once), then, once per beat, entries
of dead peers idle longer than --min-idle-ms (XAUTOCLAIM), then new entries. Entries are
handled one at a time; each is acknowledged (XACK) only if handled successfully, else it
stays pending and comes back later: at-least-once, so handlers must be idempotent.

With several --stream flags, each stream gets its own lane: a consumer NAME of group G on
that stream, with its own connection and one entry in hand at a time, all lanes in this
one process, sharing the options below. A slow command on one stream holds up no other.

A Redis/Valkey Cluster needs nothing more: --url may name any node (a replica too), and
each stream's lane follows the cluster's redirects (MOVED) to the node serving it.

Options:
  --stream KEY          a stream key (required); repeat it for several streams
  --group G             the consumer group (required; the same name on every stream)
  --consumer NAME       this consumer's name in the group (required)
  --url URL             redis://[user[:password]@]host[:port][/db], or rediss://… for TLS;
                        for a cluster, any node's URL
                        [default: $PELICAN_URL, else redis://127.0.0.1:6379]
                        `:password@` logs in as the default user; %XX escapes allowed
  --tls-ca FILE         rediss://: trust the CA certificates in FILE (PEM) instead of the
                        system's root certificates
  --tls-cert FILE       rediss://: present this client certificate (PEM), for servers that
                        require one (tls-auth-clients); needs --tls-key
  --tls-key FILE        the client certificate's private key (PEM); needs --tls-cert
  --count N             entries per read and per reclaim [100]
  --beat-ms MS          how long a read blocks, and how often peers' entries are
                        reclaimed [2000]
  --min-idle-ms MS      reclaim entries idle longer than this (this consumer's own failed
                        entries included: that is how they are retried) [30000]
  --create-group [ID]   create the group at ID (XGROUP CREATE … MKSTREAM) if it is missing
                        [$: new entries only; 0: the whole stream]
  --recreate-group      if the group or the key is deleted while running, create it again
                        at the --create-group ID (default: stop with an error, exit 1)
  --dead-letter KEY     the dead-letter stream: where entries past --max-deliveries, and
                        those whose command exits 65, are moved (with their fields and
                        pelican-stream/-group/-consumer/-id/-deliveries/-reason). %s in KEY
                        stands for the stream's name (%% for a %): '%s:dead' gives each
                        stream its own. In a cluster it must share its stream's hash slot:
                        name the stream {orders} and its dead letters {orders}:dead
  --max-deliveries N    move an entry delivered more than N times to the --dead-letter
                        stream instead of handing it out again (needs --dead-letter)
  --resp3               speak RESP3 (HELLO 3) instead of RESP2
  --transport T         mio (default: every lane on one event loop) or smol
  --exec CMD            run `sh -c CMD` for each entry (below); without it, print entries
  --progress            progress on stderr every second even when stderr is not a terminal
                        (on a terminal it is always shown)
  --stats-json FILE     on a clean stop, write the final counters to FILE as one JSON object:
                        the totals, and each stream's under \"streams\"
  -h, --help

Without --exec, each entry is printed on stdout as one JSON line, then acknowledged:
  {\"stream\":\"orders\",\"id\":\"1700000000000-0\",\"fields\":{\"name\":\"value\",…}}

With --exec, CMD runs for each entry with the entry's fields as one JSON object (and a
newline) on its stdin, its stdout and stderr going to pelican's, and in its environment:
  PELICAN_ID        the entry id
  PELICAN_STREAM    the stream it came from
  PELICAN_GROUP, PELICAN_CONSUMER
  PELICAN_SOURCE    pending (this consumer's own backlog), claimed (reclaimed from an idle
                    owner) or new
  PELICAN_DELIVERIES how many times the group has delivered it, this time included (the
                    server's count: approximate after reconnects and restarts)
Exit status 0 acknowledges the entry; 65 (EX_DATAERR: it can never be processed) moves it
to the --dead-letter stream at once (without --dead-letter it is a failure); anything else
(or death by a signal) leaves it pending. A status of 126 or 127 (the command cannot be run,
or is not found) stops pelican with exit 1 and the entry left pending, rather than failing
every entry in turn. CMD runs in its own process group, so a Ctrl-C on the terminal reaches
only pelican, which lets CMD finish.

On stderr, one line each (naming the stream when there are several): an entry moved to the
dead-letter stream, an entry a peer took while this consumer held it (a lease lost), reads
made smaller (slow handlers, big entries).

JSON: a field name or value that is valid UTF-8 is a JSON string; one that is not is
{\"base64\":\"…\"} (standard alphabet, padded). Fields keep stream order, and a repeated name
is kept each time, in order (JSON allows repeated keys, but many parsers keep only the
last). A name that is not UTF-8 cannot be an object key: then `fields` is an array of
[name, value] pairs instead, each element written by the same rule.

Signals: SIGINT or SIGTERM stops gracefully: the entry in hand (its command) finishes, the
acknowledgements earned are confirmed by the server, then pelican exits 0. A second signal
exits at once with status 130: the running commands' process groups get SIGTERM and the
entries in hand stay pending.

Exit status: 0 stopped by a signal, 1 failed (the server refused, the group is gone, stdout
closed, CMD cannot be run, an entry is over the frame limit, the dead-letter stream is in
another cluster slot; TLS failed: an untrusted, expired or misnamed certificate, a client
certificate required, a TLS file that cannot be read, a plaintext port behind rediss:// or
a TLS port behind redis://), 2 bad usage, 130 a second signal. A stream that fails stops
the others (each finishes its entry in hand and confirms its acks); the message names it.";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Transport {
    Mio,
    Smol,
}

struct Options {
    streams: Vec<String>,
    group: String,
    consumer: String,
    count: u32,
    beat_ms: u64,
    min_idle_ms: u64,
    create_group: Option<String>,
    recreate: bool,
    /// `--dead-letter` as given: `%s` stands for the stream (see [`dead_letter_key`]).
    dead_letter: Option<String>,
    max_deliveries: Option<u64>,
    resp3: bool,
    transport: Transport,
    exec: Option<String>,
    progress: bool,
    stats_json: Option<PathBuf>,
}

/// The options, and the server (`--url` and the `--tls-*` flags) checked against each other.
fn parse(mut args: Args) -> Result<(Options, Server), Failure> {
    let (mut group, mut consumer) = (None, None);
    let mut server_args = ServerArgs::default();
    let mut o = Options {
        streams: Vec::new(),
        group: String::new(),
        consumer: String::new(),
        count: 100,
        beat_ms: 2000,
        min_idle_ms: 30_000,
        create_group: None,
        recreate: false,
        dead_letter: None,
        max_deliveries: None,
        resp3: false,
        transport: Transport::Mio,
        exec: None,
        progress: false,
        stats_json: None,
    };
    while let Some(flag) = args.next_flag()? {
        match flag.as_str() {
            "--stream" => {
                let stream = args.value()?;
                if o.streams.contains(&stream) {
                    // Two lanes of one consumer on one stream would take each other's entries.
                    return Err(args.error(format_args!("--stream {stream} is given twice")));
                }
                o.streams.push(stream);
            }
            "--group" => group = Some(args.value()?),
            "--consumer" => consumer = Some(args.value()?),
            "--count" => o.count = args.number(1)?,
            "--beat-ms" => o.beat_ms = args.number(1)?,
            "--min-idle-ms" => o.min_idle_ms = args.number(1)?,
            "--create-group" => o.create_group = Some(args.optional_value().unwrap_or_else(|| "$".into())),
            "--recreate-group" => o.recreate = true,
            "--dead-letter" => o.dead_letter = Some(args.value()?),
            "--max-deliveries" => o.max_deliveries = Some(args.number(1)?),
            "--resp3" => o.resp3 = true,
            "--transport" => {
                o.transport = match args.value()?.as_str() {
                    "mio" => Transport::Mio,
                    "smol" => Transport::Smol,
                    other => {
                        return Err(args.error(format_args!("--transport: `{other}` is not mio or smol")))
                    }
                }
            }
            "--exec" => o.exec = Some(args.value()?),
            "--progress" => o.progress = true,
            "--stats-json" => o.stats_json = Some(args.value()?.into()),
            _ if server_args.take(&flag, &mut args)? => {}
            _ => return Err(args.unknown(&flag)),
        }
    }
    if o.streams.is_empty() {
        return Err(args.error("--stream is required"));
    }
    o.group = args.required(group, "--group")?;
    o.consumer = args.required(consumer, "--consumer")?;
    if o.recreate && o.create_group.is_none() {
        return Err(args.error("--recreate-group needs --create-group (the ID to create it at)"));
    }
    if o.max_deliveries.is_some() && o.dead_letter.is_none() {
        return Err(args.error("--max-deliveries needs --dead-letter (the stream to move entries to)"));
    }
    let server = server_args.into_server(&args)?;
    Ok((o, server))
}

/// `--dead-letter`'s key for `stream`: each `%s` is the stream's name, `%%` is `%`; any
/// other `%` stays as it is. Not `{stream}`: braces are the cluster's hash tags.
fn dead_letter_key(template: &str, stream: &str) -> String {
    let mut key = String::with_capacity(template.len() + stream.len());
    let mut rest = template;
    while let Some(at) = rest.find('%') {
        key.push_str(&rest[..at]);
        rest = &rest[at..];
        if let Some(after) = rest.strip_prefix("%s") {
            key.push_str(stream);
            rest = after;
        } else if let Some(after) = rest.strip_prefix("%%") {
            key.push('%');
            rest = after;
        } else {
            key.push('%');
            rest = &rest[1..];
        }
    }
    key.push_str(rest);
    key
}

/// The consumer settings of `stream`'s lane.
fn config(o: &Options, target: &Target, stream: &str) -> Config {
    let mut config = target
        .apply(Config::new(stream, &o.group, &o.consumer))
        .count(o.count)
        .beat(Duration::from_millis(o.beat_ms))
        .min_idle(Duration::from_millis(o.min_idle_ms));
    if let Some(start) = &o.create_group {
        config = config.create_group(start);
    }
    if o.recreate {
        config = config.on_group_gone(GroupGone::Recreate);
    }
    if o.resp3 {
        config = config.protocol(Protocol::Resp3);
    }
    if let Some(template) = &o.dead_letter {
        config = config.dead_letter(dead_letter_key(template, stream));
        config.max_deliveries = o.max_deliveries;
    }
    config
}

/// What the lanes share.
fn shared(o: &Options, stop: &Arc<StopAll>, screen: Arc<Screen>) -> Arc<Shared> {
    Arc::new(Shared {
        exec: o.exec.clone(),
        group: o.group.clone(),
        consumer: o.consumer.clone(),
        dead_letter: o.dead_letter.is_some(),
        stdout_closed: AtomicBool::new(false),
        unrunnable: AtomicI32::new(0),
        stop: stop.clone(),
        screen,
    })
}

/// One lane per stream, their settings checked (a refused setting is bad usage, exit 2).
fn lanes(o: &Options, target: &Target, shared: &Arc<Shared>) -> Result<Vec<Lane>, Failure> {
    o.streams
        .iter()
        .map(|stream| {
            let config = config(o, target, stream);
            Consumer::new(config.clone()).map_err(|e| Failure::Bad(format!("invalid settings: {e}")))?;
            Ok(Lane { config, handler: Arc::new(Handler::new(stream, shared.clone())) })
        })
        .collect()
}

/// Runs `consume`: one lane per `--stream` until a signal or a failure.
pub fn main(args: Args) -> Result<(), Failure> {
    let (o, server) = parse(args)?;
    let target = &server.target;
    let net = Net {
        addrs: target.resolve().map_err(Failure::Bad)?,
        tls: server.tls.clone().map(|tls| (tls, target.host.clone())),
        homes: Vec::new(),
    };
    let stop = Arc::new(StopAll::default());
    let screen = Arc::new(Screen::new());
    let shared = shared(&o, &stop, screen.clone());
    let lanes = lanes(&o, target, &shared)?;
    let handlers: Vec<Arc<Handler>> = lanes.iter().map(|lane| lane.handler.clone()).collect();
    // Before anything that may take a while (asking the cluster where the streams are): a
    // signal meanwhile is a stop, not death by the signal's default action.
    signals::on_signals(stop.clone(), handlers.clone(), screen.clone())?;
    let streams: Vec<&[u8]> = lanes.iter().map(|lane| &lane.config.stream[..]).collect();
    let net = net.locate(&streams);
    let start = Instant::now();
    // Dropped on an early return, which ends the line.
    let progress = (o.progress || screen.is_tty()).then(|| Progress::spawn(&handlers, &screen));
    let outcomes = match o.transport {
        Transport::Mio => mio_lanes::run(lanes, &net, &stop)?,
        Transport::Smol => smol_lanes::run(lanes, &net, &stop)?,
    };
    let counts = lane_counts(&handlers, &outcomes);
    if let Some(progress) = progress {
        progress.finish(&counts, start.elapsed());
    }
    failed(&o, &handlers, &outcomes)?;
    if let Some(path) = &o.stats_json {
        let json = report::stats_json(&counts, start.elapsed());
        std::fs::write(path, json + "\n")
            .map_err(|e| Failure::Failed(format!("cannot write {}: {e}", path.display())))?;
    }
    stopped_early(&o, &shared)
}

/// Each lane's counts, for the report: its handler's, and its consumer's if it stopped.
fn lane_counts<'a>(handlers: &'a [Arc<Handler>], outcomes: &'a [Outcome]) -> Vec<LaneCounts<'a>> {
    let lane = |(h, outcome): (&'a Arc<Handler>, &'a Outcome)| LaneCounts {
        stream: &h.stream,
        counters: &h.counters,
        stats: outcome.as_ref().ok(),
    };
    handlers.iter().zip(outcomes).map(lane).collect()
}

/// The lanes that failed, one line each naming its stream (lanes failing alike share a
/// line), with a hint where one helps.
fn failed(o: &Options, handlers: &[Arc<Handler>], outcomes: &[Outcome]) -> Result<(), Failure> {
    let mut lines: Vec<(Vec<&str>, String)> = Vec::new();
    for (handler, outcome) in handlers.iter().zip(outcomes) {
        let Err(failure) = outcome else { continue };
        let text = format!("{}{}", failure.message, hint(o, failure));
        match lines.iter_mut().find(|(_, t)| *t == text) {
            Some((streams, _)) => streams.push(&handler.stream),
            None => lines.push((vec![&handler.stream], text)),
        }
    }
    if lines.is_empty() {
        return Ok(());
    }
    let lines: Vec<String> = lines
        .into_iter()
        .map(|(streams, text)| {
            let which = if streams.len() == 1 { "stream" } else { "streams" };
            format!("{which} {}: {text}", streams.join(", "))
        })
        .collect();
    Err(Failure::Failed(lines.join("\npelican: ")))
}

/// What to do about a lane's failure, where the flags can fix it.
fn hint(o: &Options, failure: &LaneFailure) -> &'static str {
    match failure.error {
        Some(pelican::Error::GroupGone { .. }) if o.create_group.is_none() => {
            " (--create-group creates a missing group)"
        }
        Some(pelican::Error::CrossSlot { .. }) => {
            " (--dead-letter '%s:dead' gives each stream its own: {orders}:dead for the stream {orders})"
        }
        _ => "",
    }
}

/// Exit 1 if the lanes stopped because stdout closed or the command cannot run.
fn stopped_early(o: &Options, shared: &Shared) -> Result<(), Failure> {
    if shared.stdout_closed.load(Relaxed) {
        return Err(Failure::Failed("stopped: stdout is closed (the entry in hand stays pending)".into()));
    }
    let code = shared.unrunnable.load(Relaxed);
    if code != 0 {
        let why = if code == 127 { "not found" } else { "not executable" };
        let command = o.exec.as_deref().unwrap_or_default();
        return Err(Failure::Failed(format!(
            "stopped: the --exec command `{command}` cannot be run (exit {code}: {why}); the entry stays pending"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dead_letter_keys_per_stream() {
        assert_eq!(dead_letter_key("%s:dead", "{orders}"), "{orders}:dead");
        assert_eq!(dead_letter_key("dead", "s"), "dead");
        assert_eq!(dead_letter_key("%s-%s", "a"), "a-a");
        assert_eq!(dead_letter_key("100%%:%s", "a"), "100%:a");
        assert_eq!(dead_letter_key("50% off %x%", "a"), "50% off %x%");
        assert_eq!(dead_letter_key("é%s", "ü"), "éü");
    }

    fn parsed(items: &[&str]) -> Result<Options, Failure> {
        let args = Args::new(items.iter().map(|s| s.to_string()).collect(), "usage");
        parse(args).map(|(o, _)| o)
    }

    #[test]
    fn streams_repeat_but_not_twice_the_same() {
        let base = ["--group", "g", "--consumer", "c", "--url", "redis://h"];
        let mut items = vec!["--stream", "a", "--stream", "{b}"];
        items.extend(base);
        assert_eq!(parsed(&items).ok().map(|o| o.streams), Some(vec!["a".to_string(), "{b}".to_string()]));
        let mut items = vec!["--stream", "a", "--stream", "a"];
        items.extend(base);
        match parsed(&items) {
            Err(Failure::Usage(message, _)) => assert_eq!(message, "--stream a is given twice"),
            other => panic!("{:?}", other.map(|o| o.streams)),
        }
        match parsed(&base) {
            Err(Failure::Usage(message, _)) => assert_eq!(message, "--stream is required"),
            other => panic!("{:?}", other.map(|o| o.streams)),
        }
    }
}
