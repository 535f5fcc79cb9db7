//! The simulated replica: what it copies and when, `WAIT`/`WAITAOF` on the virtual clock,
//! `ROLE`, connections to the replica, and the failover (what is lost, what becomes of the
//! old master's clients). The replies are the real servers' (`core/tests/fixtures`, and
//! those observed on a master and replica of each server: see `tests/fixtures.rs`).

mod common;

use common::{cmd, cmd_s};
use pelican_sim::{OldMaster, Sim, SimOptions};

const READONLY: &str = "-READONLY You can't write against a read only replica.\r\n";
const UNBLOCKED: &str =
    "-UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)\r\n";

fn with_replica(lag_ms: u64) -> (Sim, pelican_sim::ConnId) {
    let mut sim = Sim::new(SimOptions::redis70().with_replica(lag_ms));
    let c = sim.connect();
    assert_eq!(cmd(&mut sim, c, "XGROUP CREATE s g 0 MKSTREAM"), b"+OK\r\n");
    (sim, c)
}

fn ids(sim: &Sim) -> Vec<String> {
    sim.stream_ids(b"s").iter().map(|id| id.to_string()).collect()
}

#[test]
fn the_replica_copies_every_lag_and_a_failover_loses_what_it_had_not() {
    let (mut sim, c) = with_replica(100);
    cmd(&mut sim, c, "XADD s 1-0 f v");
    sim.advance_to(99);
    assert_eq!(sim.replica_synced_at(), Some(0), "not yet: 100 ms since it last copied");
    sim.advance_to(100);
    assert_eq!(sim.replica_synced_at(), Some(100));
    assert_eq!(sim.replica_offset(), Some(sim.repl_offset()), "it has everything");
    cmd(&mut sim, c, "XADD s 2-0 f v");
    cmd(&mut sim, c, "XREADGROUP GROUP g A STREAMS s >");
    assert!(sim.replica_offset() < Some(sim.repl_offset()), "the master is ahead");
    sim.advance_to(150);
    assert!(sim.failover());
    assert!(sim.is_closed(c), "the old master's client was cut off");
    assert_eq!(ids(&sim), ["1-0"], "2-0 was never copied");
    assert_eq!(sim.pending(b"s", b"g").unwrap(), [], "nor the delivery");
    assert_eq!(sim.repl_offset(), sim.replica_offset().unwrap(), "the new master goes on from the copy");
    assert_eq!(sim.replica_synced_at(), Some(150), "its new replica starts from its data");
    let c = sim.connect();
    assert_eq!(cmd(&mut sim, c, "XADD s 2-0 f w"), b"$3\r\n2-0\r\n", "the id is free again");
}

#[test]
fn the_offset_moves_with_writes_that_succeed() {
    let (mut sim, c) = with_replica(100);
    let start = sim.repl_offset();
    assert!(start > 0, "XGROUP CREATE is a write");
    cmd(&mut sim, c, "XLEN s");
    cmd(&mut sim, c, "XPENDING s g");
    cmd(&mut sim, c, "XACK nosuch g 1-0");
    // *4 $4 XACK $6 nosuch $1 g $3 1-0, as RESP: 42 bytes.
    assert_eq!(sim.repl_offset(), start + 42, "reads move nothing; an XACK does, even of nothing");
    cmd(&mut sim, c, "XADD s 0-0 f v");
    assert_eq!(sim.repl_offset(), start + 42, "a refused write is not sent");
    // ROLE tells it, and the replica's: [master, offset, [[host, port, offset]]].
    sim.advance_to(100);
    let offset = sim.repl_offset();
    let want = format!(
        "*3\r\n$6\r\nmaster\r\n:{offset}\r\n*1\r\n*3\r\n$9\r\n127.0.0.1\r\n$4\r\n6380\r\n${}\r\n{offset}\r\n",
        offset.to_string().len()
    );
    assert_eq!(cmd_s(&mut sim, c, "ROLE"), want);

    // Without a replica the offset stays 0 and none is listed, as on the servers.
    let mut sim = Sim::new(SimOptions::valkey81());
    let c = sim.connect();
    cmd(&mut sim, c, "XADD s 1-0 f v");
    assert_eq!(sim.repl_offset(), 0);
    assert_eq!(sim.replica_offset(), None);
    assert_eq!(cmd(&mut sim, c, "ROLE"), b"*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n");
}

#[test]
fn wait_without_a_replica_answers_0_after_its_timeout() {
    let mut sim = Sim::new(SimOptions::redis70());
    let c = sim.connect();
    sim.advance_to(1_000);
    sim.input(c, b"*3\r\n$4\r\nWAIT\r\n$1\r\n1\r\n$2\r\n10\r\n*1\r\n$4\r\nPING\r\n");
    assert!(sim.is_blocked(c), "WAIT 1 10 parks");
    assert_eq!(sim.output(c), b"", "PING waits behind it");
    assert_eq!(sim.next_wakeup(), Some(1_010));
    sim.advance_to(1_009);
    assert!(sim.is_blocked(c));
    sim.advance_to(1_010);
    assert_eq!(sim.output(c), b":0\r\n+PONG\r\n");
    assert_eq!(cmd(&mut sim, c, "WAIT 0 10"), b":0\r\n", "none asked for: at once");
    assert_eq!(cmd(&mut sim, c, "WAIT 1 -1"), b"-ERR timeout is negative\r\n");
    assert!(
        cmd_s(&mut sim, c, "WAITAOF 0 1 10").starts_with("-ERR unknown command 'WAITAOF'"),
        "7.0 has none"
    );
    // A timeout of 0 waits for ever.
    sim.input(c, b"*3\r\n$4\r\nWAIT\r\n$1\r\n1\r\n$1\r\n0\r\n");
    assert!(sim.is_blocked(c));
    assert_eq!(sim.next_wakeup(), None);
    sim.advance_to(1_000_000);
    assert!(sim.is_blocked(c));
    assert!(!sim.failover(), "no replica to promote");
    assert!(!sim.set_replica_link(false));
}

#[test]
fn wait_counts_the_replica_once_it_has_the_connections_writes() {
    let (mut sim, c) = with_replica(1_000);
    cmd(&mut sim, c, "XADD s 1-0 f v");
    assert!(sim.replica_offset() < Some(sim.repl_offset()));
    assert_eq!(cmd(&mut sim, c, "WAIT 1 100"), b":1\r\n", "a replica whose link is up catches up at once");
    assert_eq!(sim.replica_offset(), Some(sim.repl_offset()));
    assert_eq!(sim.replica_synced_at(), Some(0), "at this instant");

    // Cut off, it has nothing more: WAIT waits for its timeout…
    assert!(sim.set_replica_link(false));
    assert_eq!(sim.replica_link_up(), Some(false));
    cmd(&mut sim, c, "XADD s 2-0 f v");
    sim.input(c, b"*3\r\n$4\r\nWAIT\r\n$1\r\n1\r\n$2\r\n50\r\n");
    assert!(sim.is_blocked(c));
    sim.advance_to(50);
    assert_eq!(sim.output(c), b":0\r\n");
    sim.advance_to(5_000);
    assert!(sim.replica_offset() < Some(sim.repl_offset()), "no copy while cut off, lag or not");
    // …or for its link, which brings it up to date at once.
    sim.input(c, b"*3\r\n$4\r\nWAIT\r\n$1\r\n1\r\n$4\r\n1000\r\n");
    assert!(sim.is_blocked(c));
    let other = sim.connect();
    assert_eq!(cmd(&mut sim, other, "WAIT 1 10"), b":1\r\n", "it has everything this one wrote: nothing");
    sim.advance_to(5_100);
    assert!(sim.set_replica_link(true));
    assert_eq!(sim.output(c), b":1\r\n");
    assert_eq!(sim.replica_synced_at(), Some(5_100));
    // More replicas than there are: the timeout, then the one there is.
    sim.input(c, b"*3\r\n$4\r\nWAIT\r\n$1\r\n2\r\n$2\r\n20\r\n");
    assert!(sim.is_blocked(c));
    sim.advance_to(5_120);
    assert_eq!(sim.output(c), b":1\r\n");

    // WAITAOF where the server has it: [local, replicas], the local file always written.
    let mut sim = Sim::new(SimOptions::valkey81().with_replica(50));
    let c = sim.connect();
    cmd(&mut sim, c, "XADD s 1-0 f v");
    assert_eq!(cmd(&mut sim, c, "WAITAOF 1 1 10"), b"*2\r\n:1\r\n:1\r\n");
    sim.set_replica_link(false);
    cmd(&mut sim, c, "XADD s 2-0 f v");
    sim.input(c, b"*4\r\n$7\r\nWAITAOF\r\n$1\r\n1\r\n$1\r\n1\r\n$2\r\n10\r\n");
    sim.advance_to(10);
    assert_eq!(sim.output(c), b"*2\r\n:1\r\n:0\r\n");
}

#[test]
fn a_replica_answers_as_one() {
    let (mut sim, c) = with_replica(100);
    cmd(&mut sim, c, "XADD s 1-0 f v");
    sim.advance_to(100);
    cmd(&mut sim, c, "XADD s 2-0 f v");
    let r = sim.connect_replica().expect("a replica");
    let hello = cmd_s(&mut sim, r, "HELLO");
    assert!(hello.starts_with("*14\r\n"), "a flat array in RESP2: {hello}");
    assert!(hello.contains("$4\r\nrole\r\n$7\r\nreplica\r\n"), "{hello}");
    let offset = sim.replica_offset().unwrap();
    assert_eq!(
        cmd_s(&mut sim, r, "ROLE"),
        format!("*5\r\n$5\r\nslave\r\n$9\r\n127.0.0.1\r\n:6379\r\n$9\r\nconnected\r\n:{offset}\r\n")
    );
    for write in [
        "XACK s g 1-0",
        "XADD s 3-0 f v",
        "XREADGROUP GROUP g A STREAMS s >",
        "XAUTOCLAIM s g A 0 0",
        "XCLAIM s g A 0 1-0",
        "XGROUP CREATECONSUMER s g x",
        "DEL s",
        "FLUSHALL",
    ] {
        assert_eq!(cmd_s(&mut sim, r, write), READONLY, "{write}");
    }
    assert_eq!(cmd(&mut sim, r, "XLEN s"), b":1\r\n", "reads see its copy, 100 ms behind");
    assert_eq!(cmd(&mut sim, c, "XLEN s"), b":2\r\n");
    assert!(cmd_s(&mut sim, r, "XPENDING s g").starts_with("*4\r\n:0\r\n"));
    assert_eq!(cmd(&mut sim, r, "PING"), b"+PONG\r\n");
    assert_eq!(
        cmd_s(&mut sim, r, "WAIT 1 10"),
        "-ERR WAIT cannot be used with replica instances. Please also note that since Redis 4.0 if a replica \
         is configured to be writable (which is not the default) writes to replicas are just local and are \
         not propagated.\r\n"
    );
    sim.set_replica_link(false);
    assert!(cmd_s(&mut sim, r, "ROLE").contains("$7\r\nconnect\r\n"), "cut off, it tries to connect");
    assert!(
        !cmd_s(&mut sim, r, "CLIENT LIST").contains(&format!("id={} ", c.client_id())),
        "its own clients"
    );

    // Valkey words them its own way; in RESP3 HELLO is a map.
    let mut sim = Sim::new(SimOptions::valkey81().with_replica(100));
    let r = sim.connect_replica().unwrap();
    assert!(cmd_s(&mut sim, r, "HELLO 3").starts_with("%7\r\n"));
    assert_eq!(
        cmd_s(&mut sim, r, "WAIT 1 10"),
        "-ERR WAIT cannot be used with replica instances. Please also note that if a replica is configured \
         to be writable (which is not the default) writes to replicas are just local and are not propagated.\r\n"
    );
    assert_eq!(
        cmd_s(&mut sim, r, "WAITAOF 0 1 10"),
        "-ERR WAITAOF cannot be used with replica instances. Please also note that writes to replicas are just \
         local and are not propagated.\r\n"
    );
    assert!(Sim::new(SimOptions::valkey81()).connect_replica().is_none());
}

#[test]
fn a_demoted_master_unblocks_its_parked_clients_and_answers_as_a_replica() {
    let (mut sim, c) = with_replica(100);
    let reader = sim.connect();
    let waiter = sim.connect();
    let idle = sim.connect();
    let r = sim.connect_replica().unwrap();
    sim.input(reader, b"*9\r\n$10\r\nXREADGROUP\r\n$5\r\nGROUP\r\n$1\r\ng\r\n$1\r\nB\r\n$5\r\nBLOCK\r\n$4\r\n5000\r\n$7\r\nSTREAMS\r\n$1\r\ns\r\n$1\r\n>\r\n*1\r\n$4\r\nPING\r\n");
    sim.set_replica_link(false);
    cmd(&mut sim, waiter, "XGROUP CREATECONSUMER s g w");
    sim.input(waiter, b"*3\r\n$4\r\nWAIT\r\n$1\r\n1\r\n$4\r\n5000\r\n*1\r\n$4\r\nPING\r\n");
    assert!(sim.is_blocked(reader) && sim.is_blocked(waiter));
    cmd(&mut sim, c, "XADD s 9-0 f v"); // served to the parked reader, never copied
    assert!(!sim.is_blocked(reader));
    let _ = sim.output(reader);
    sim.input(reader, b"*9\r\n$10\r\nXREADGROUP\r\n$5\r\nGROUP\r\n$1\r\ng\r\n$1\r\nB\r\n$5\r\nBLOCK\r\n$4\r\n5000\r\n$7\r\nSTREAMS\r\n$1\r\ns\r\n$1\r\n>\r\n*1\r\n$4\r\nPING\r\n");
    assert!(sim.is_blocked(reader));
    sim.advance_to(200);

    assert!(sim.failover_with(OldMaster::Demoted));
    for parked in [reader, waiter] {
        assert_eq!(String::from_utf8_lossy(&sim.output(parked)), UNBLOCKED, "and nothing behind it");
        assert!(sim.is_closed(parked), "then its connection closes");
    }
    assert_eq!(ids(&sim), Vec::<String>::new(), "9-0 was lost");
    // The others stay, talking to a replica now.
    assert!(!sim.is_closed(idle) && !sim.is_closed(c));
    assert!(cmd_s(&mut sim, idle, "HELLO").contains("$4\r\nrole\r\n$7\r\nreplica\r\n"));
    assert_eq!(cmd_s(&mut sim, idle, "XACK s g 9-0"), READONLY);
    assert!(cmd_s(&mut sim, idle, "ROLE").starts_with("*5\r\n$5\r\nslave\r\n$9\r\n127.0.0.1\r\n:6380\r\n"));
    assert_eq!(cmd(&mut sim, idle, "XLEN s"), b":0\r\n", "it dropped its last writes");
    // The replica's client is now the master's, and so is every new connection.
    assert!(cmd_s(&mut sim, r, "HELLO").contains("$4\r\nrole\r\n$6\r\nmaster\r\n"));
    assert_eq!(cmd(&mut sim, r, "XADD s 10-0 f v"), b"$4\r\n10-0\r\n");
    assert!(
        cmd_s(&mut sim, r, "ROLE").contains("$9\r\n127.0.0.1\r\n$4\r\n6379\r\n"),
        "its replica: the old master"
    );
    let n = sim.connect();
    assert!(cmd_s(&mut sim, n, "HELLO").contains("$6\r\nmaster"));
    assert_eq!(sim.replica_link_up(), Some(true));
    assert_eq!(cmd(&mut sim, n, "WAIT 1 10"), b":1\r\n", "the old master copies its new master");
    let old = sim.connect_replica().unwrap();
    assert_eq!(cmd(&mut sim, old, "XLEN s"), b":1\r\n");

    // Killed instead: every client of the old master is cut off, parked or not.
    let (mut sim, c) = with_replica(100);
    let r = sim.connect_replica().unwrap();
    sim.input(c, b"*3\r\n$4\r\nWAIT\r\n$1\r\n2\r\n$4\r\n5000\r\n");
    let idle = sim.connect();
    assert!(sim.failover_with(OldMaster::Killed));
    assert!(sim.is_closed(c) && sim.is_closed(idle));
    assert_eq!(sim.output(c), b"", "parked commands go unanswered");
    assert!(!sim.is_closed(r));
    assert!(cmd_s(&mut sim, r, "HELLO").contains("$6\r\nmaster"));
}

#[test]
fn a_promoted_replica_has_the_delivery_counts_the_master_sent() {
    let (mut sim, c) = with_replica(100);
    cmd(&mut sim, c, "XADD s 1-0 f v");
    cmd(&mut sim, c, "XREADGROUP GROUP g A STREAMS s >");
    sim.advance_to(50);
    // A drain of A's own pending list raises the count; the master does not send it.
    cmd(&mut sim, c, "XREADGROUP GROUP g A STREAMS s 0");
    cmd(&mut sim, c, "XREADGROUP GROUP g A STREAMS s 0");
    assert_eq!(sim.pending(b"s", b"g").unwrap()[0].delivery_count, 3);
    sim.advance_to(100); // copied now, drains and all
    sim.advance_to(150);
    assert!(sim.failover());
    let pending = sim.pending(b"s", b"g").unwrap();
    assert_eq!((pending[0].delivery_count, pending[0].delivered_at), (1, 0), "as the XREADGROUP > sent them");
    // A claim is sent (as XCLAIM … TIME … RETRYCOUNT): it survives.
    let c = sim.connect();
    cmd(&mut sim, c, "XCLAIM s g B 0 1-0");
    assert_eq!(cmd(&mut sim, c, "WAIT 1 10"), b":1\r\n");
    assert!(sim.failover());
    let pending = sim.pending(b"s", b"g").unwrap();
    assert_eq!((pending[0].delivery_count, &pending[0].consumer[..]), (2, &b"B"[..]));
}

#[test]
fn a_failover_during_a_cut_loses_everything_since_the_cut_and_nothing_confirmed() {
    let (mut sim, c) = with_replica(100);
    for n in 1..=3 {
        cmd(&mut sim, c, &format!("XADD s {n}-0 f v"));
    }
    assert_eq!(cmd(&mut sim, c, "WAIT 1 10"), b":1\r\n", "1-0 to 3-0 confirmed");
    sim.set_replica_link(false);
    for (n, at) in (4..=9).zip((100..).step_by(300)) {
        sim.advance_to(at);
        cmd(&mut sim, c, &format!("XADD s {n}-0 f v"));
    }
    assert_eq!(sim.replica_synced_at(), Some(0), "two seconds without a copy");
    assert!(sim.failover());
    assert_eq!(ids(&sim), ["1-0", "2-0", "3-0"]);
    assert_eq!(sim.replica_link_up(), Some(true), "the new master's replica is linked");
    // Deterministic: the same steps give the same offsets.
    let again = {
        let (mut sim, c) = with_replica(100);
        for n in 1..=3 {
            cmd(&mut sim, c, &format!("XADD s {n}-0 f v"));
        }
        cmd(&mut sim, c, "WAIT 1 10");
        sim.repl_offset()
    };
    assert_eq!(sim.repl_offset(), again);
}
