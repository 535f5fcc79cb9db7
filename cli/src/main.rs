//! `pelican`: the command line for pelican consumers. A small dispatcher over subcommand
//! modules; each has its flags (`Args`, parsed by clap) and a `main(Args)`.

/// `eprintln!` that never panics: a line for stderr, lost if nobody reads it any more
/// (`pelican … 2>&1 | head`, a log shipper gone). `eprintln!` panics on a closed pipe, and
/// the thread that told something (the signal thread among them) would die with it.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// `say!` without the newline (`eprint!` that never panics).
macro_rules! say_raw {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), $($arg)*);
    }};
}

mod args;
mod consume;
mod dead_letters;
mod demo;
mod failure;
mod help;
mod json;
mod name;
mod number;
mod pending;
mod produce;
mod retire;
mod seed;
mod server;
mod stamp;
mod url;

use std::process::ExitCode;

use args::Command;
use failure::Failure;

fn main() -> ExitCode {
    // clap's own errors are told before its answer is known.
    stamp::preset(std::env::args_os(), std::env::var_os("PELICAN_LOG_TIME"));
    let cli = match args::parse() {
        Ok(cli) => cli,
        Err(status) => return status,
    };
    stamp::set(cli.log_time);
    let (command, result) = match cli.command {
        Command::Consume(args) => ("consume", consume::main(*args)),
        Command::Pending(args) => ("pending", pending::main(args)),
        Command::Produce(args) => ("produce", produce::main(args)),
        Command::Demo(args) => ("demo", demo::main(args)),
        Command::Retire(args) => ("retire", retire::main(args)),
        Command::DeadLetters(args) => ("dead-letters", dead_letters::main(args)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(message)) => args::exit(args::usage_error(command, &message)),
        Err(Failure::Bad(message)) => {
            say!("{}pelican: {message}", stamp::now());
            ExitCode::from(2)
        }
        Err(Failure::Failed(message)) => {
            say!("{}pelican: {message}", stamp::now());
            ExitCode::from(1)
        }
        Err(Failure::StopTimedOut(message)) => {
            say!("{}pelican: {message}", stamp::now());
            ExitCode::from(failure::STOP_TIMED_OUT)
        }
    }
}
