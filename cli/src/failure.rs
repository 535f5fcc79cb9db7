//! How a command ends other than in success, shared by every command and by `main`, which
//! turns it into a message and an exit status. It imports no command: commands import it.

/// How a command ends other than in success; `main` turns it into a message and exit code.
#[derive(Debug)]
pub enum Failure {
    /// Flags that do not go together: the message and the command's usage on stderr, exit 2.
    Usage(String),
    /// A bad setting found past parsing (a URL, a host, a value the consumer refuses, a file
    /// that cannot be written): the message on stderr, exit 2.
    Bad(String),
    /// The work failed (connection, server, handler I/O): the message on stderr, exit 1.
    Failed(String),
    /// A stop ran out of time (`consume --stop-timeout-ms`): the message on stderr, exit
    /// [`STOP_TIMED_OUT`].
    StopTimedOut(String),
}

/// The exit status of a stop that ran out of time (sysexits' `EX_TEMPFAIL`: what the
/// handler held was given back, to be handled again).
pub const STOP_TIMED_OUT: u8 = 75;
