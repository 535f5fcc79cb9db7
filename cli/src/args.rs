//! The command line, parsed by clap: `pelican <command> [flags]`, each command's flags with
//! its module (`consume::Args`…). It stands above the commands it gathers: what they share
//! is below them (how one ends other than in success: `failure`; its help's layout: `help`).

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::{consume, dead_letters, demo, pending, produce, retire};

const USAGE: &str = "\
pelican consume --stream KEY [--stream KEY…] --group G --consumer NAME [options]
       pelican pending --stream KEY [--stream KEY…] --group G [--url URL] [--json]
       pelican produce --stream KEY --count N [--size BYTES] [--url URL] [--idempotent]
                       [--wait-replicas N]
       pelican retire --stream KEY [--stream KEY…] --group G --idle-ms N [--dry-run]
       pelican dead-letters list|replay|drop --dead-letter KEY [options]
       pelican demo [--url URL]
       pelican <command> --help";

const AFTER: &str = "\
The server is given as --url redis://[user[:password]@]host[:port][/db], or by
$PELICAN_URL; the default is redis://127.0.0.1:6379. rediss://… is the same over TLS,
with --tls-ca FILE (else the system's root certificates are trusted), and --tls-cert FILE
--tls-key FILE for servers that require a client certificate. For a Redis/Valkey Cluster,
any node's URL will do: every command follows the cluster's redirects. With Sentinel,
redis+sentinel://[user[:password]@]host[:port][,host[:port]…]/SERVICE[/db] (port 26379 by
default; rediss+sentinel:// for TLS): every command uses the master the sentinels name
(their own password: ?sentinel_password=P in the URL, or --sentinel-password P, or
$PELICAN_SENTINEL_PASSWORD). $PELICAN_GROUP and $PELICAN_CONSUMER stand for --group and
--consumer when those are not given.

Exit status: 0 done, 1 failed (a host that does not resolve included: hosts are looked
up at every connect), 2 bad usage (a bad URL included), 75 a consume stop that ran out of
time (--stop-timeout-ms), 130 interrupted twice. Each stderr line starts with the time (RFC
3339, UTC) unless --log-time none.";

/// `pelican`: a command and its flags.
#[derive(Parser, Debug)]
#[command(
    name = "pelican",
    version,
    about = "pelican: a worker for Redis/Valkey Streams consumer groups",
    override_usage = USAGE,
    after_help = AFTER,
    subcommand_required = true,
    // A missing command is told as such, not with the whole help.
    arg_required_else_help = false,
    help_template = "{about}\n\n{usage-heading} {usage}\n\nCommands:\n{subcommands}\n\nOptions:\n{options}{after-help}"
)]
pub struct Cli {
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
    /// start each stderr line with the time, RFC 3339 in UTC to the
    /// millisecond (utc), or not (none: for journald, which adds its own)
    #[arg(
        long,
        global = true,
        value_name = "WHEN",
        env = "PELICAN_LOG_TIME",
        default_value = "utc",
        verbatim_doc_comment
    )]
    pub log_time: crate::stamp::LogTime,
}

/// The commands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// consume the group on each stream: run a command per entry, or print entries as JSON
    // Boxed: its flags outweigh the other commands' (clippy::large_enum_variant).
    Consume(Box<consume::Args>),
    /// the group's pending entries at a glance
    Pending(pending::Args),
    /// append test entries, pipelined
    Produce(produce::Args),
    /// remove consumers gone for good: idle at least N ms with nothing pending
    Retire(retire::Args),
    /// list, replay or drop the entries of a dead-letter stream
    DeadLetters(dead_letters::Args),
    /// the recovery tour, on the embedded simulator or a server
    Demo(demo::Args),
}

/// Parses the command line. Help, `--version` and clap's errors are told here: `Err` is
/// the exit status then.
pub fn parse() -> Result<Cli, ExitCode> {
    let matches = Cli::command().try_get_matches().map_err(exit)?;
    let mut cli = Cli::from_arg_matches(&matches).map_err(exit)?;
    // A bad URL is told as $PELICAN_URL's when it came from there.
    if let Some((_, command)) = matches.subcommand() {
        let server = match &mut cli.command {
            Command::Consume(args) => &mut args.server,
            Command::Pending(args) => &mut args.server,
            Command::Produce(args) => &mut args.server,
            Command::Demo(args) => &mut args.server,
            Command::Retire(args) => &mut args.server,
            Command::DeadLetters(args) => &mut args.server,
        };
        server.url_from_env = command.value_source("url") == Some(ValueSource::EnvVariable);
    }
    Ok(cli)
}

/// Tells a clap error and gives the exit status: help and version on stdout, 0; errors on
/// stderr, 2, led by `pelican: ` as every other message is.
pub fn exit(err: clap::Error) -> ExitCode {
    if !err.use_stderr() {
        let _ = err.print();
        return ExitCode::SUCCESS;
    }
    let text = err.render().to_string();
    match text.strip_prefix("error: ") {
        Some(message) => say_raw!("{}pelican: {message}", crate::stamp::now()),
        None => say_raw!("{}{text}", crate::stamp::now()),
    }
    ExitCode::from(2)
}

/// A usage error of `pelican <command>`: `message`, then that command's usage.
pub fn usage_error(command: &str, message: &str) -> clap::Error {
    let mut cli = Cli::command();
    cli.build();
    match cli.find_subcommand_mut(command) {
        Some(command) => command.error(ErrorKind::ArgumentConflict, message),
        None => cli.error(ErrorKind::ArgumentConflict, message),
    }
}
