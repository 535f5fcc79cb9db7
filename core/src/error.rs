//! Everything that can go wrong on a connection, typed, with the command that caused it.

use std::fmt;

/// A command the consumer sends; errors name the one that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Command {
    /// `HELLO 3 …` (RESP3 handshake).
    Hello,
    /// `AUTH …` (RESP2 handshake).
    Auth,
    /// `SELECT db`.
    Select,
    /// `CLIENT SETNAME name`.
    SetName,
    /// `XGROUP CREATE key group start MKSTREAM` (the group door).
    CreateGroup,
    /// `XACK key group id…`.
    Ack,
    /// `XREADGROUP … STREAMS key <id>`: a page of this consumer's own pending entries.
    ReadPending,
    /// `XAUTOCLAIM …`: reclaiming idle entries.
    Claim,
    /// `XREADGROUP … BLOCK beat … >`: parked for new entries.
    ReadNew,
    /// `XPENDING key group start end count consumer`: delivery counts of drained or
    /// reclaimed entries.
    Counts,
    /// `XCLAIM key group consumer ms id… JUSTID`: renewing the lease on entries read.
    Lease,
    /// `EVAL …`: moving an entry to the dead-letter stream.
    DeadLetter,
    /// `ASKING`: the next command is for a slot migrating to this node.
    Asking,
    /// `XINFO GROUPS`, `XPENDING key group - + 1`, `TIME`: the group's health, when asked
    /// for ([`Config::health_every`](crate::Config::health_every)).
    Health,
    /// `EVAL …`: retiring idle consumers ([`Retirement`](crate::retire::Retirement)).
    Retire,
    /// `CLIENT ID` and `CLIENT LIST TYPE normal`: looking for a twin, another live connection
    /// under this consumer's name ([`Config::allow_twins`](crate::Config::allow_twins)).
    Twins,
    /// `EVAL …` at each connect: the check that dead letters can be moved (the keys share a
    /// cluster slot, the user may run what the move needs).
    DeadLetterCheck,
    /// `CLIENT LIST TYPE normal`: the live connections, so that a retirement keeps the
    /// consumers still connected ([`Retirement`](crate::retire::Retirement)).
    Connections,
    /// `HELLO` without arguments (RESP2): the server's name and version, for its
    /// [`Dialect`](crate::Dialect).
    ServerInfo,
    /// `XNACK key group FAIL|SILENT IDS n id…`: releasing entries (Redis 8.8+).
    Release,
    /// `XACKDEL key group <condition> IDS n id…`: acks that delete (Redis 8.2+).
    AckDelete,
    /// `ROLE`: what a node that is not a master is (a replica, and of which master).
    Role,
    /// `WAIT` or `WAITAOF`: acks waiting to reach replicas or append-only files
    /// ([`Config::ack_wait`](crate::Config::ack_wait)).
    Wait,
    /// `EVAL …` at a clean stop: leaving the group if holding nothing
    /// ([`Config::leave_on_stop`](crate::Config::leave_on_stop)).
    Leave,
    /// `EVALSHA …`: committing entries' writes with their acks
    /// ([`Verdict::Commit`](crate::Verdict::Commit)).
    Commit,
    /// `SCRIPT LOAD …`: loading the commit script on a connection.
    ScriptLoad,
    /// `EVAL …` at each connect: the check that commits can be made
    /// ([`Config::commit_to`](crate::Config::commit_to)).
    CommitCheck,
    /// `EVAL …`: replaying a dead letter to its origin stream
    /// ([`replay_command`](crate::dead_letter::replay_command)).
    Replay,
    /// `CLIENT UNBLOCK id`: at a stop, ending on the server the read parked on the connection
    /// the stop cut, before looking for what that read brought.
    Unblock,
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Command::Hello => "HELLO",
            Command::Auth => "AUTH",
            Command::Select => "SELECT",
            Command::SetName => "CLIENT SETNAME",
            Command::CreateGroup => "XGROUP CREATE",
            Command::Ack => "XACK",
            Command::ReadPending => "XREADGROUP (pending)",
            Command::Claim => "XAUTOCLAIM",
            Command::ReadNew => "XREADGROUP (new)",
            Command::Counts => "XPENDING",
            Command::Lease => "XCLAIM (lease)",
            Command::DeadLetter => "EVAL (dead letter)",
            Command::Asking => "ASKING",
            Command::Health => "XINFO GROUPS (health)",
            Command::Retire => "EVAL (retire)",
            Command::Twins => "CLIENT LIST (twins)",
            Command::DeadLetterCheck => "EVAL (the check that dead letters can be moved)",
            Command::Connections => "CLIENT LIST (retire)",
            Command::ServerInfo => "HELLO (server info)",
            Command::Release => "XNACK",
            Command::AckDelete => "XACKDEL",
            Command::Role => "ROLE",
            Command::Wait => "WAIT",
            Command::Leave => "EVAL (leaving the group)",
            Command::Commit => "EVALSHA (commit)",
            Command::ScriptLoad => "SCRIPT LOAD (the commit script)",
            Command::CommitCheck => "EVAL (the check that commits can be made)",
            Command::Replay => "EVAL (replay of a dead letter)",
            Command::Unblock => "CLIENT UNBLOCK (the read a stop cut)",
        })
    }
}

/// Why a connection was given up, or the consumer stopped for good.
///
/// Every error costs the connection: the transport closes it. If [`Error::is_fatal`] is false,
/// the consumer has already scheduled a reconnect ([`Consumer::poll_timeout`]
/// says when); if it is true, the consumer is finished and returns the same error from then on.
///
/// [`Consumer::poll_timeout`]: crate::Consumer::poll_timeout
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The server refused a command for a reason a reconnect will not fix (bad credentials,
    /// wrong key type, a command it does not know…). Fatal.
    Server {
        /// The command refused.
        command: Command,
        /// The server's error text, e.g. `WRONGPASS invalid username-password pair…`.
        message: String,
    },
    /// The server cannot serve right now (`LOADING`, `READONLY`, `MASTERDOWN`, `TRYAGAIN`,
    /// `BUSY`, `CLUSTERDOWN`, or `UNBLOCKED` for a reason other than a deleted key).
    /// Reconnect after the backoff.
    Unavailable {
        /// The command refused.
        command: Command,
        /// The server's error text.
        message: String,
    },
    /// The group or its key is gone (`NOGROUP …`, `UNBLOCKED … no longer exists`) and the
    /// configuration says to fail rather than recreate it. Fatal.
    GroupGone {
        /// The command that found out.
        command: Command,
        /// The server's error text.
        message: String,
    },
    /// The bytes from the server are not RESP, or a reply came for no command. Reconnect.
    Protocol {
        /// What was wrong.
        detail: String,
    },
    /// The first words on a connection were not RESP, and no server has ever answered this
    /// consumer in RESP: the address is not a Redis server's (an HTTP port, a typo). Fatal.
    NotRedis {
        /// The start of what it said (its first line, escaped).
        said: String,
    },
    /// A reply had a shape this consumer does not know (a server it was not built for). Fatal.
    Shape {
        /// The command whose reply it was.
        command: Command,
        /// What was wrong.
        detail: &'static str,
    },
    /// A reply frame exceeded [`Limits::max_frame`](crate::Limits::max_frame). Fatal (a
    /// reconnect would read the same entry again): raise the limit.
    FrameTooLarge {
        /// The limit in force.
        limit: usize,
    },
    /// One entry alone is larger than [`Limits::max_frame`](crate::Limits::max_frame): it
    /// cannot be read. Fatal; the entry stays pending. Raise the limit (or remove the entry).
    EntryTooLarge {
        /// The entry's id.
        id: String,
        /// The limit in force.
        limit: usize,
    },
    /// The handler said [`Verdict::DeadLetter`](crate::Verdict::DeadLetter) but no
    /// [`Config::dead_letter`](crate::Config::dead_letter) is set. Fatal; the entry stays
    /// pending.
    NoDeadLetter {
        /// The entry's id.
        id: String,
    },
    /// A [`Verdict::Commit`](crate::Verdict::Commit)'s writes could not be made as they stood
    /// (a key of another type, a value that is not an integer, another cluster slot…), and no
    /// [`Config::dead_letter`](crate::Config::dead_letter) is set to put the entry aside: it
    /// would be refused at every delivery, its handler run again each time. Fatal (after the
    /// acks earned are confirmed); nothing of the commit was written, the entry stays pending.
    CommitRefused {
        /// The entry's id.
        id: String,
        /// Why, e.g. `WRONGTYPE out holds a hash, not a stream`.
        reason: String,
    },
    /// The consumer dropped this connection itself: a stop cut a parked read short rather
    /// than wait up to a beat for it, and goes on on a new connection
    /// ([`Consumer::stop`](crate::Consumer::stop)). Close the socket and connect again now
    /// ([`Consumer::wants_connection`](crate::Consumer::wants_connection) is true). Returned
    /// once, by the first `handle_input` or `handle_timeout` after the drop, for a driver that
    /// did not look at `wants_connection` before reading again. Not fatal.
    Dropped,
    /// A reply nested deeper than [`Limits::max_depth`](crate::Limits::max_depth). Fatal.
    TooDeep {
        /// The limit in force.
        limit: usize,
    },
    /// No reply within its deadline (`read_grace`, plus the beat for a parked read). Reconnect.
    Timeout {
        /// The oldest command still unanswered.
        command: Command,
    },
    /// A cluster node does not serve the stream's slot (`MOVED`: it migrated, a failover
    /// moved it, or this node never had it). Reconnect to the node named, which
    /// [`Consumer::redirect`](crate::Consumer::redirect) gives; the consumer drains its
    /// pending list there (the list moves with the key).
    Moved {
        /// The command refused.
        command: Command,
        /// The node now serving the slot: its host as the server names it (empty: the host
        /// connected to) and port.
        host: String,
        /// The node's port.
        port: u16,
    },
    /// The node is not a master (its `HELLO` said `role replica`): nothing is read from it,
    /// nor written. Reconnect after the backoff — with Sentinel, to the master the sentinels
    /// name then; with a host name, to wherever it points then.
    NotMaster {
        /// What it is: `a replica of 127.0.0.1:6380 (link connected)`, or `a replica` when
        /// it would not say (`ROLE` needs `@admin`).
        role: String,
    },
    /// The server is a sentinel (its `HELLO` said `mode sentinel`), not a data node: nothing
    /// is sent to it as to one. Fatal: name it among [`Sentinels`](crate::Sentinels), with
    /// the name of the service it watches, to be led to that service's master.
    IsSentinel,
    /// Keys of one command hash to different cluster slots: the dead-letter stream must share
    /// the stream's slot for the atomic move. Give both a common hash tag, e.g. `{orders}`
    /// and `{orders}:dead`. Fatal.
    CrossSlot {
        /// The command refused.
        command: Command,
        /// The server's error text.
        message: String,
    },
    /// At the first connect, another live connection already consumes under this consumer's
    /// name (a *twin*: an overlapping restart, a copied unit). Two processes under one name
    /// share one pending list and handle each other's entries twice, so this one refuses to
    /// start. Fatal: stop the other process, give this one another name, or set
    /// [`Config::allow_twins`](crate::Config::allow_twins).
    Twin {
        /// The connection name both use.
        name: String,
        /// The other connection's address, as the server sees it.
        addr: String,
        /// How long the other connection has been idle (it spoke this recently).
        idle: std::time::Duration,
    },
    /// The configuration asks for something the server cannot do (e.g.
    /// [`Config::delete_acked`](crate::Config::delete_acked) on a server without `XACKDEL`).
    /// Fatal.
    Unsupported {
        /// What was asked for.
        feature: &'static str,
        /// What it needs.
        needs: &'static str,
        /// The server, as `HELLO` named it (`redis 7.0.15`).
        server: String,
    },
}

impl Error {
    /// True if the consumer is finished; false if it reconnects after a backoff.
    pub fn is_fatal(&self) -> bool {
        !matches!(
            self,
            Error::Unavailable { .. }
                | Error::Protocol { .. }
                | Error::Dropped
                | Error::Timeout { .. }
                | Error::Moved { .. }
                | Error::NotMaster { .. }
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Server { command, message } => write!(f, "{command} refused: {message}"),
            Error::Unavailable { command, message } => {
                write!(f, "server unavailable during {command}: {message}")
            }
            Error::GroupGone { command, message } => {
                write!(f, "the consumer group is gone ({command}: {message})")
            }
            Error::Protocol { detail } => write!(f, "protocol error: {detail}"),
            Error::NotRedis { said } => write!(f, "did not answer as a Redis server (it said \"{said}\")"),
            Error::Shape { command, detail } => write!(f, "unexpected reply to {command}: {detail}"),
            Error::FrameTooLarge { limit } => write!(f, "a reply exceeded the frame limit of {limit} bytes"),
            Error::EntryTooLarge { id, limit } => write!(
                f,
                "entry {id} alone is larger than the frame limit of {limit} bytes; raise Limits::max_frame"
            ),
            Error::Twin { name, addr, idle } => write!(
                f,
                "another live connection ({addr}, idle {}) already consumes as {name}: two processes \
                 under one consumer name handle each other's entries twice; stop the other, give \
                 this one another consumer name, or allow twins",
                crate::notice::Secs(*idle)
            ),
            Error::Unsupported { feature, needs, server } => {
                write!(f, "{feature} needs {needs}, and the server is {server}")
            }
            Error::NoDeadLetter { id } => {
                write!(f, "entry {id} was given Verdict::DeadLetter, but no dead-letter stream is configured")
            }
            Error::CommitRefused { id, reason } => write!(
                f,
                "the commit of entry {id} was refused, nothing written: {reason}; it would be refused \
                 at every delivery, and no dead-letter stream is configured to set it aside"
            ),
            Error::Dropped => f.write_str(
                "the consumer dropped this connection (a stop cut its parked read short): connect again",
            ),
            Error::TooDeep { limit } => write!(f, "a reply nested deeper than the limit of {limit}"),
            Error::Timeout { command } => write!(f, "no reply to {command} in time"),
            Error::Moved { command, host, port } => {
                write!(f, "{command}: the slot is served by {host}:{port}")
            }
            Error::NotMaster { role } => {
                write!(f, "connected to {role}, not a master: nothing is read from it")
            }
            Error::IsSentinel => f.write_str(
                "the server is a sentinel, not a data node: name it among the Sentinels, with the name \
                 of the service it watches, to be led to that service's master",
            ),
            Error::CrossSlot { command, message } => write!(
                f,
                "{command} refused: {message}; in a cluster the stream and its dead-letter stream must \
                 share a slot: give them a common hash tag, e.g. {{orders}} and {{orders}}:dead"
            ),
        }
    }
}

impl std::error::Error for Error {}

/// The first word of an error reply, which names its kind (`NOGROUP`, `LOADING`…).
fn code(message: &[u8]) -> &[u8] {
    message.split(|b| *b == b' ').next().unwrap_or_default()
}

/// `NOGROUP …`: the group is gone. (`UNBLOCKED the stream key no longer exists`, which a
/// parked read gets when its key is deleted, is no proof: Redis 7.0 says the same when the
/// key's cluster slot migrates. It is transient: the next read says `NOGROUP` or `MOVED`.)
pub(crate) fn is_group_gone(message: &[u8]) -> bool {
    code(message) == b"NOGROUP"
}

/// Errors a later attempt can get past.
pub(crate) fn is_transient(message: &[u8]) -> bool {
    matches!(
        code(message),
        b"LOADING"
            | b"READONLY"
            | b"MASTERDOWN"
            | b"TRYAGAIN"
            | b"BUSY"
            | b"CLUSTERDOWN"
            | b"UNBLOCKED"
            | b"NOREPLICAS"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_gone_texts() {
        assert!(is_group_gone(
            b"NOGROUP No such key 's' or consumer group 'g' in XREADGROUP with GROUP option"
        ));
        assert!(is_group_gone(b"NOGROUP No such key 's' or consumer group 'g'"));
        assert!(!is_group_gone(b"UNBLOCKED the stream key no longer exists"));
        assert!(is_transient(b"UNBLOCKED the stream key no longer exists"));
        assert!(!is_group_gone(b"UNBLOCKED client unblocked via CLIENT UNBLOCK"));
        assert!(!is_group_gone(b"ERR NOGROUP"));
    }

    #[test]
    fn transient_texts() {
        assert!(is_transient(b"LOADING Redis is loading the dataset in memory"));
        assert!(is_transient(b"UNBLOCKED force unblock from blocking operation"));
        assert!(is_transient(b"READONLY You can't write against a read only replica."));
        assert!(!is_transient(b"WRONGPASS invalid username-password pair"));
        assert!(!is_transient(b"ERR COUNT must be > 0"));
    }

    #[test]
    fn fatality() {
        assert!(!Error::Timeout { command: Command::ReadNew }.is_fatal());
        assert!(!Error::Protocol { detail: "x".into() }.is_fatal());
        assert!(Error::Server { command: Command::Auth, message: "WRONGPASS".into() }.is_fatal());
        assert!(Error::FrameTooLarge { limit: 1 }.is_fatal());
        assert_eq!(Error::Timeout { command: Command::Claim }.to_string(), "no reply to XAUTOCLAIM in time");
    }
}
