//! `pelican retire`: removes a group's consumers that are gone for good — idle longer than
//! a bound with nothing pending — each check and removal in one server-side script.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use clap::value_parser;
use pelican::retire::Retirement;
use pelican::MAX_DURATION;
use redis_protocol::resp2::encode::encode;
use redis_protocol::resp2::types::Resp2Frame as _;
use unicode_width::UnicodeWidthStr as _;

use crate::args::{Failure, TEMPLATE};
use crate::client::Client;
use crate::name::show;
use crate::server::ServerArgs;

const USAGE: &str = "\
pelican retire --stream KEY [--stream KEY…] --group G --idle-ms N [--dry-run] [--url URL]
                      [--tls-ca FILE] [--tls-cert FILE --tls-key FILE]";

const ABOUT: &str = "\
Removes the consumers of group G on each stream KEY that have been idle (the server's
XINFO CONSUMERS `idle`: since it last read, claimed or acked) for at least N ms AND hold
no pending entry. XGROUP DELCONSUMER drops a consumer's pending entries with it, where no
reclaim can reach them: so a consumer that holds any is kept, however long idle, and the
check and the removal run as one server-side script, so that a consumer handed an entry
meanwhile is never removed. A live consumer removed while it held nothing comes back at
its next read. Lists every consumer with what was decided.

In a Redis/Valkey Cluster, any node's URL will do: each stream is retired on the node
serving it (MOVED and ASK are followed).";

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
    #[arg(long, value_name = "N", value_parser = value_parser!(u64).range(0..=MAX_DURATION.as_millis() as u64))]
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
    let mut client = Client::connect(&server, "pelican:retire").map_err(Failure::Failed)?;
    let group = args.group.as_bytes();
    let min_idle = Duration::from_millis(args.idle_ms);
    let mut failed = Vec::new();
    for stream in &args.streams {
        let stream = stream.as_bytes();
        let mut retirement = Retirement::script(stream, group, min_idle, args.dry_run);
        let command: Vec<&[u8]> = retirement.args().collect();
        let outcome = client.call(&command).and_then(|reply| {
            // The reply is read by the core, from its RESP2 bytes.
            let mut bytes = vec![0; reply.encode_len(false)];
            encode(&mut bytes, &reply, false).map_err(|e| e.to_string())?;
            match retirement.read(&bytes) {
                Ok(Some(consumers)) => Ok(consumers),
                Ok(None) => Err("the reply was cut short".into()),
                Err(e) => Err(e.to_string()),
            }
        });
        let (stream, group) = (show(stream), show(group));
        match outcome {
            Ok(consumers) => {
                println!("{stream} / {group}:");
                print!("{}", table(&consumers, args.dry_run));
            }
            Err(e) if e.contains("NOGROUP") => {
                failed.push(format!("{stream}: there is no group {group} on stream {stream}"));
            }
            Err(e) => failed.push(format!("{stream}: {e}")),
        }
    }
    match failed.is_empty() {
        true => Ok(()),
        false => Err(Failure::Failed(failed.join("; "))),
    }
}

/// The consumers, a line each: name, pending, idle, what was decided; the names' column
/// as wide as the widest (by display width).
fn table(consumers: &[pelican::retire::ConsumerState], dry_run: bool) -> String {
    if consumers.is_empty() {
        return "  no consumers\n".into();
    }
    let names: Vec<String> = consumers.iter().map(|c| show(&c.name).into_owned()).collect();
    let width = names.iter().map(|n| n.width()).max().unwrap_or(0).max("consumer".len());
    let mut out = format!("  {:width$}  {:>9}  {:>12}  decision\n", "consumer", "pending", "idle");
    for (c, name) in consumers.iter().zip(&names) {
        let decision = match (c.retired, dry_run, c.pending) {
            (true, true, _) => "would be removed".to_string(),
            (true, false, _) => "removed".to_string(),
            (false, _, 0) => "kept: active".to_string(),
            (false, _, n) => format!("kept: holds {n} pending"),
        };
        let pad = width - name.width();
        let idle = format!("{:.1} s", c.idle.as_secs_f64());
        out += &format!("  {name}{:pad$}  {:>9}  {:>12}  {decision}\n", "", c.pending, idle);
    }
    let removed = consumers.iter().filter(|c| c.retired).count();
    let verb = if dry_run { "would be removed" } else { "removed" };
    out += &format!("  {removed} of {} {verb}\n", consumers.len());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pelican::retire::ConsumerState;

    #[test]
    fn the_table_lines_up_and_says_why() {
        let row = |name: &str, pending, idle_ms, retired| ConsumerState {
            name: name.as_bytes().to_vec().into(),
            pending,
            idle: Duration::from_millis(idle_ms),
            retired,
        };
        let rows = [row("w1", 0, 600_000, true), row("長い名前", 3, 700_000, false), row("w3", 0, 10, false)];
        let text = table(&rows, false);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "  consumer    pending          idle  decision");
        assert_eq!(lines[1], "  w1                0       600.0 s  removed");
        assert_eq!(lines[2], "  長い名前          3       700.0 s  kept: holds 3 pending");
        assert_eq!(lines[3], "  w3                0         0.0 s  kept: active");
        assert_eq!(lines[4], "  1 of 3 removed");
        assert!(table(&rows, true).contains("would be removed"));
        assert_eq!(table(&[], true), "  no consumers\n");
    }
}
