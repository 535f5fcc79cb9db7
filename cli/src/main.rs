//! `pelican`: the command line for pelican consumers. A small dispatcher over subcommand
//! modules; each has its `USAGE` and a `main(Args)`.

mod args;
mod client;
mod consume;
mod demo;
mod json;
mod pending;
mod produce;
mod server;
mod url;

use std::process::ExitCode;

use args::{Args, Failure};

const USAGE: &str = "\
pelican: a worker for Redis/Valkey Streams consumer groups

Usage:
  pelican consume --stream KEY [--stream KEY…] --group G --consumer NAME [options]
                      consume the group on each stream: run a command per entry, or print
                      entries as JSON
  pelican pending --stream KEY [--stream KEY…] --group G [--url URL] [--json]
                      the group's pending entries at a glance
  pelican produce --stream KEY --count N [--size BYTES] [--url URL]
                      append test entries, pipelined
  pelican demo [--url URL]
                      the recovery tour, on the embedded simulator or a server
  pelican <command> --help

The server is given as --url redis://[user[:password]@]host[:port][/db], or by
$PELICAN_URL; the default is redis://127.0.0.1:6379. rediss://… is the same over TLS,
with --tls-ca FILE (else the system's root certificates are trusted), and --tls-cert FILE
--tls-key FILE for servers that require a client certificate. For a Redis/Valkey Cluster,
any node's URL will do: every command follows the cluster's redirects.

Exit status: 0 done, 1 failed, 2 bad usage, 130 interrupted twice.";

fn main() -> ExitCode {
    let mut argv = Vec::new();
    for arg in std::env::args_os().skip(1) {
        match arg.into_string() {
            Ok(arg) => argv.push(arg),
            Err(arg) => return report(Failure::Usage(format!("argument {arg:?} is not UTF-8"), USAGE)),
        }
    }
    match dispatch(argv) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => report(failure),
    }
}

fn dispatch(mut argv: Vec<String>) -> Result<(), Failure> {
    if argv.is_empty() {
        return Err(Failure::Usage("a command is required".into(), USAGE));
    }
    let command = argv.remove(0);
    match command.as_str() {
        "consume" => consume::main(Args::new(argv, consume::USAGE)),
        "pending" => pending::main(Args::new(argv, pending::USAGE)),
        "produce" => produce::main(Args::new(argv, produce::USAGE)),
        "demo" => demo::main(Args::new(argv, demo::USAGE)),
        "-h" | "--help" | "help" => Err(Failure::Help(USAGE)),
        other => Err(Failure::Usage(format!("unknown command `{other}`"), USAGE)),
    }
}

fn report(failure: Failure) -> ExitCode {
    match failure {
        Failure::Help(usage) => {
            println!("{usage}");
            ExitCode::SUCCESS
        }
        Failure::Usage(message, usage) => {
            eprintln!("pelican: {message}\n\n{usage}");
            ExitCode::from(2)
        }
        Failure::Bad(message) => {
            eprintln!("pelican: {message}");
            ExitCode::from(2)
        }
        Failure::Failed(message) => {
            eprintln!("pelican: {message}");
            ExitCode::from(1)
        }
    }
}
