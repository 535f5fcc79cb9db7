//! The replica and what replication needs: the replica's copy of the data and how far it
//! has got, its link to the master, the two nodes' addresses, which commands are writes (the
//! ones the master sends its replica and a replica refuses), and a parked `WAIT`.

use crate::model::Db;
use crate::reply::Reply;

/// The addresses the two nodes of a server with a replica give for each other (`ROLE`):
/// the first master is node 0, its replica node 1; a failover swaps their roles.
pub(crate) const NODES: [(&str, u16); 2] = [("127.0.0.1", 6379), ("127.0.0.1", 6380)];

/// What a replica answers to a write.
pub(crate) const READONLY: &str = "READONLY You can't write against a read only replica.";

/// What a parked client of a master that becomes a replica gets, before its connection
/// closes (every server does both).
pub(crate) const UNBLOCKED_DEMOTED: &str =
    "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)";

/// The replica's copy of the data: the master's as of `offset`, copied at `synced_at`.
#[derive(Debug)]
pub(crate) struct Replica {
    /// The data as the master sent it: what the master never sends (a read of a consumer's
    /// own pending list raising delivery counts and times) is not in it, as after a restart
    /// from the append-only file ([`Db::restart`]).
    pub(crate) db: Db,
    /// The master's replication offset it has everything up to.
    pub(crate) offset: u64,
    /// When it last copied (virtual ms).
    pub(crate) synced_at: u64,
    /// Whether it can reach the master: cut off, it copies nothing and `WAIT` waits.
    pub(crate) link_up: bool,
}

impl Replica {
    /// A replica that has copied `db` (at `offset`) at `now`.
    pub(crate) fn of(db: &Db, offset: u64, now: u64) -> Replica {
        let mut replica = Replica { db: Db::default(), offset: 0, synced_at: now, link_up: true };
        replica.copy(db, offset, now);
        replica
    }

    /// Catches up with the master's `db` at `offset`.
    pub(crate) fn copy(&mut self, db: &Db, offset: u64, now: u64) {
        self.db = db.clone();
        self.db.restart();
        self.offset = offset;
        self.synced_at = now;
    }
}

/// A connection parked on `WAIT` or `WAITAOF` until the replica has its writes.
#[derive(Clone, Debug)]
pub(crate) struct Waiting {
    /// How many replicas must have them.
    pub(crate) replicas: u64,
    /// `WAITAOF`'s `numlocal` (`None` for `WAIT`): the answer is then `[local, replicas]`.
    /// The offset the replica must reach is the connection's last write (nothing runs on
    /// it while it is parked).
    pub(crate) local: Option<u64>,
    /// Virtual ms at which it answers whatever the count; `None` for a timeout of 0.
    pub(crate) deadline: Option<u64>,
    /// Global order of parking (shared with parked reads).
    pub(crate) order: u64,
}

impl Waiting {
    /// Its answer when `have` replicas (0 or 1) have the writes.
    pub(crate) fn answer(&self, have: u64) -> Reply {
        wait_answer(self.local.is_some(), have)
    }
}

/// `WAIT`'s answer (how many replicas have the writes), or `WAITAOF`'s (`[local, replicas]`,
/// the local file always written).
pub(crate) fn wait_answer(aof: bool, have: u64) -> Reply {
    match aof {
        false => Reply::Int(have as i64),
        true => Reply::Array(vec![Reply::Int(1), Reply::Int(have as i64)]),
    }
}

/// Whether a command (lowercase name) is a write: what a replica refuses with
/// [`READONLY`], and what the master sends its replica (advancing its offset) when it
/// succeeds. `XREADGROUP`, `XAUTOCLAIM` and `XCLAIM` are writes (they change the pending
/// list), as the servers flag them; `EVAL` and `EVALSHA` count as
/// ones (pelican's scripts write).
pub(crate) fn is_write(name: &str) -> bool {
    matches!(
        name,
        "xadd"
            | "xtrim"
            | "xdel"
            | "xgroup"
            | "xreadgroup"
            | "xautoclaim"
            | "xclaim"
            | "xack"
            | "xnack"
            | "xackdel"
            | "xcfgset"
            | "del"
            | "flushall"
            | "flushdb"
            | "eval"
            | "evalsha"
            | "set"
            | "incrby"
            | "hset"
            | "hincrby"
    )
}

/// How far a parked read served later moves the offset: the servers send its deliveries
/// as `XCLAIM`s, whose length the model does not reckon (only that it moves).
pub(crate) const SERVED_READ_LEN: u64 = 64;

/// The length of a command as the master sends it to its replica (RESP): how far it moves
/// the replication offset.
pub(crate) fn command_len(args: &[Vec<u8>]) -> u64 {
    let digits = |n: usize| n.to_string().len() as u64;
    let head = 3 + digits(args.len());
    args.iter().map(|a| 5 + digits(a.len()) + a.len() as u64).sum::<u64>() + head
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_is_as_long_as_its_resp() {
        let args = vec![b"XACK".to_vec(), b"s".to_vec(), b"g".to_vec(), b"1-0".to_vec()];
        // *4\r\n $4\r\nXACK\r\n $1\r\ns\r\n $1\r\ng\r\n $3\r\n1-0\r\n
        assert_eq!(command_len(&args), 4 + 10 + 7 + 7 + 9);
    }
}
