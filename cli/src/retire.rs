//! `pelican retire`: removes a group's consumers that are gone for good — idle longer than
//! a bound, nothing pending, no live connection under their name — each check and removal in
//! one server-side script, after a `CLIENT LIST` on the node serving the stream.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use pelican::retire::{ConsumerState, Decision};
use pelican::MAX_DURATION;
use unicode_width::UnicodeWidthStr as _;

use crate::failure::Failure;
use crate::help::TEMPLATE;
use crate::name::show;
use crate::number::whole;
use crate::server::ServerArgs;

/// The longest idle bound: the longest duration the core takes.
const MAX_IDLE_MS: u64 = MAX_DURATION.as_millis() as u64;

const USAGE: &str = "\
pelican retire --stream KEY [--stream KEY…] --group G --idle-ms N [--dry-run] [--url URL]
                      [--tls-ca FILE] [--tls-cert FILE --tls-key FILE]";

const ABOUT: &str = "\
Removes the consumers of group G on each stream KEY that have been idle (the server's
XINFO CONSUMERS `idle`: since it last read, claimed or acked) for at least N ms AND hold
no pending entry AND have no live connection under their name (pelican:<stream>:<group>:<consumer>,
as pelican names a consumer's connection; CLIENT LIST): on Redis 7.0 a consumer parked on
reads that find nothing looks idle however long it waits. XGROUP DELCONSUMER drops a
consumer's pending entries with it, where no reclaim can reach them: so a consumer that
holds any is kept, however long idle, and the check and the removal run as one server-side
script, so that a consumer handed an entry meanwhile is never removed. Lists every consumer
with what was decided, and why it was kept.

In a Redis/Valkey Cluster, any node's URL will do: each stream is retired on the node
serving it, where its connections are listed too (MOVED and ASK are followed).";

const AFTER: &str = "\
Exit status: 0 done (whether or not any consumer was removed), 1 the server failed or
refused (no such key or group: the other streams are still done) or TLS failed, 2 bad usage.";

/// `pelican retire`'s flags.
#[derive(clap::Args, Debug)]
#[command(override_usage = USAGE, before_help = ABOUT, after_help = AFTER, help_template = TEMPLATE)]
pub struct Args {
    /// a stream key (required); repeat it for several streams
    #[arg(long = "stream", value_name = "KEY", required = true)]
    streams: Vec<OsString>,
    /// the consumer group (required)
    #[arg(long, value_name = "G", env = "PELICAN_GROUP", hide_env_values = true)]
    group: OsString,
    /// remove consumers idle at least this long (and holding nothing)
    #[arg(long, value_name = "N", value_parser = whole::<u64, 0, MAX_IDLE_MS>, allow_negative_numbers = true)]
    idle_ms: u64,
    /// only tell which would be removed
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    pub(crate) server: ServerArgs,
}

/// Runs `retire`: each stream in turn, a table of its group's consumers.
pub fn main(args: Args) -> Result<(), Failure> {
    let server = args.server.to_server()?;
    let mut session = server.connect(pelican::retire::CLIENT_NAME).map_err(Failure::Failed)?;
    let group = args.group.as_bytes();
    let min_idle = Duration::from_millis(args.idle_ms);
    let mut failed = Vec::new();
    for stream in &args.streams {
        let stream = stream.as_bytes();
        // The connections listed and the script run on the node serving the stream (the
        // session follows the stream there, both steps together).
        let outcome = session.retire(stream, group, min_idle, args.dry_run).map_err(|e| server.said(e));
        let (stream, group) = (show(stream), show(group));
        match outcome {
            Ok(consumers) => {
                println!("{stream} / {group}:");
                print!("{}", table(&consumers, args.dry_run));
            }
            Err(e) if e.contains("NOGROUP") => {
                failed.push(format!("{stream}: there is no group {group} on stream {stream}"));
            }
            // XINFO CONSUMERS, or the script's, on a stream that does not exist.
            Err(e) if e.to_ascii_lowercase().contains("no such key") => {
                failed.push(format!("{stream}: there is no stream {stream}"));
            }
            Err(e) if e.contains("NOPERM") => failed.push(format!(
                "{stream}: {e} (retire lists the connections, CLIENT LIST, so as not to remove a \
                 consumer still connected)"
            )),
            Err(e) => failed.push(format!("{stream}: {e}")),
        }
    }
    match failed.is_empty() {
        true => Ok(()),
        false => Err(Failure::Failed(failed.join("; "))),
    }
}

/// The consumers, a line each: name, pending, idle, what was decided (and why a consumer
/// was kept); the names' column as wide as the widest (by display width).
fn table(consumers: &[ConsumerState], dry_run: bool) -> String {
    if consumers.is_empty() {
        return "  no consumers\n".into();
    }
    let names: Vec<String> = consumers.iter().map(|c| show(&c.name).into_owned()).collect();
    let width = names.iter().map(|n| n.width()).max().unwrap_or(0).max("consumer".len());
    let mut out = format!("  {:width$}  {:>9}  {:>12}  decision\n", "consumer", "pending", "idle");
    for (c, name) in consumers.iter().zip(&names) {
        let idle = format!("{:.1} s", c.idle.as_secs_f64());
        let decision = match (c.decision, dry_run) {
            (Decision::Retired, true) => "would be removed".to_string(),
            (Decision::Retired, false) => "removed".to_string(),
            (Decision::Pending, _) => format!("kept: holds {} pending", c.pending),
            (Decision::Connected, _) => "kept: connected".to_string(),
            (Decision::Recent, _) => format!("kept: idle only {idle}"),
            (other, _) => format!("kept ({other:?})"),
        };
        let pad = width - name.width();
        out += &format!("  {name}{:pad$}  {:>9}  {:>12}  {decision}\n", "", c.pending, idle);
    }
    let removed = consumers.iter().filter(|c| c.retired()).count();
    let verb = if dry_run { "would be removed" } else { "removed" };
    out += &format!("  {removed} of {} {verb}\n", consumers.len());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_lines_up_and_says_why() {
        let row = |name: &str, pending, idle_ms, decision| ConsumerState {
            name: name.as_bytes().to_vec().into(),
            pending,
            idle: Duration::from_millis(idle_ms),
            connected: decision == Decision::Connected,
            decision,
        };
        let rows = [
            row("w1", 0, 600_000, Decision::Retired),
            row("長い名前", 3, 700_000, Decision::Pending),
            row("w3", 0, 1_250, Decision::Recent),
            row("w4", 0, 900_000, Decision::Connected),
        ];
        let text = table(&rows, false);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "  consumer    pending          idle  decision");
        assert_eq!(lines[1], "  w1                0       600.0 s  removed");
        assert_eq!(lines[2], "  長い名前          3       700.0 s  kept: holds 3 pending");
        assert_eq!(lines[3], "  w3                0         1.2 s  kept: idle only 1.2 s");
        assert_eq!(lines[4], "  w4                0       900.0 s  kept: connected");
        assert_eq!(lines[5], "  1 of 4 removed");
        assert!(table(&rows, true).contains("would be removed"));
        assert_eq!(table(&[], true), "  no consumers\n");
    }
}
