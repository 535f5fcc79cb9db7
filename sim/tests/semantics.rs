//! Command semantics on the model, one test per behaviour (the item numbers of the repository's
//! `PROTOCOL.md` in the names where one applies: `p3_…` pins item 3).

mod common;

use common::{cmd, cmd_s, encode, words};
use pelican_sim::{ClaimShape, ConnId, EntryId, Sim, SimOptions};

fn setup(options: SimOptions) -> (Sim, ConnId) {
    let mut sim = Sim::new(options);
    let c = sim.connect();
    assert_eq!(cmd_s(&mut sim, c, "XGROUP CREATE s g 0 MKSTREAM"), "+OK\r\n");
    for n in 1..=3 {
        assert_eq!(cmd_s(&mut sim, c, &format!("XADD s {n}-0 f v{n}")), format!("$3\r\n{n}-0\r\n"));
    }
    (sim, c)
}

fn entry(n: u64) -> String {
    format!("*2\r\n$3\r\n{n}-0\r\n*2\r\n$1\r\nf\r\n$2\r\nv{n}\r\n")
}

fn page(entries: &[u64]) -> String {
    let body: String = entries.iter().map(|&n| entry(n)).collect();
    format!("*1\r\n*2\r\n$1\r\ns\r\n*{}\r\n{body}", entries.len())
}

fn counts(sim: &Sim) -> Vec<(u64, String, u64, u64)> {
    sim.pending(b"s", b"g")
        .unwrap()
        .into_iter()
        .map(|p| (p.id.ms, String::from_utf8(p.consumer).unwrap(), p.delivered_at, p.delivery_count))
        .collect()
}

#[test]
fn p1_pel_reads_repeat_and_page_by_exclusive_id() {
    let (mut sim, c) = setup(SimOptions::default());
    assert_eq!(cmd_s(&mut sim, c, "XREADGROUP GROUP g A COUNT 10 STREAMS s >"), page(&[1, 2, 3]));
    let first = cmd_s(&mut sim, c, "XREADGROUP GROUP g A COUNT 2 STREAMS s 0");
    assert_eq!(first, page(&[1, 2]));
    assert_eq!(cmd_s(&mut sim, c, "XREADGROUP GROUP g A COUNT 2 STREAMS s 0"), first);
    assert_eq!(cmd_s(&mut sim, c, "XREADGROUP GROUP g A COUNT 2 STREAMS s 2-0"), page(&[3]));
    assert_eq!(
        cmd_s(&mut sim, c, "XREADGROUP GROUP g A COUNT 2 STREAMS s 3-0"),
        "*1\r\n*2\r\n$1\r\ns\r\n*0\r\n"
    );
    // Another consumer's PEL is its own: B has nothing (and is created).
    assert_eq!(cmd_s(&mut sim, c, "XREADGROUP GROUP g B STREAMS s 0"), "*1\r\n*2\r\n$1\r\ns\r\n*0\r\n");
    assert_eq!(sim.consumers(b"s", b"g"), vec![b"A".to_vec(), b"B".to_vec()]);
}

#[test]
fn p2_rereads_raise_count_and_reset_idle() {
    let (mut sim, c) = setup(SimOptions::default());
    sim.advance_to(100);
    let _ = cmd(&mut sim, c, "XREADGROUP GROUP g A STREAMS s >");
    assert_eq!(counts(&sim)[0], (1, "A".into(), 100, 1));
    sim.advance_to(250);
    let _ = cmd(&mut sim, c, "XREADGROUP GROUP g A COUNT 1 STREAMS s 0");
    assert_eq!(counts(&sim)[0], (1, "A".into(), 250, 2));
    assert_eq!(counts(&sim)[1], (2, "A".into(), 100, 1));
    let got = cmd_s(&mut sim, c, "XPENDING s g - + 10");
    assert!(got.contains("$3\r\n1-0\r\n$1\r\nA\r\n:0\r\n:2\r\n"), "{got}");
    assert!(got.contains("$3\r\n2-0\r\n$1\r\nA\r\n:150\r\n:1\r\n"), "{got}");
}

#[test]
fn p3_deleted_pending_entry_reads_as_nil_and_keeps_its_count() {
    for proto3 in [false, true] {
        let (mut sim, c) = setup(SimOptions::default());
        if proto3 {
            let _ = cmd(&mut sim, c, "HELLO 3");
        }
        let _ = cmd(&mut sim, c, "XREADGROUP GROUP g A STREAMS s >");
        assert_eq!(cmd_s(&mut sim, c, "XDEL s 2-0"), ":1\r\n");
        let nil = if proto3 { "_\r\n" } else { "*-1\r\n" };
        let head = if proto3 { "%1\r\n$1\r\ns\r\n*3\r\n" } else { "*1\r\n*2\r\n$1\r\ns\r\n*3\r\n" };
        let want = format!("{head}{}*2\r\n$3\r\n2-0\r\n{nil}{}", entry(1), entry(3));
        for _ in 0..3 {
            assert_eq!(cmd_s(&mut sim, c, "XREADGROUP GROUP g A STREAMS s 0"), want);
        }
        assert_eq!(counts(&sim)[1].3, 1, "the dead entry's count does not grow");
        assert_eq!(counts(&sim)[0].3, 4);
        // XTRIM leaves the same kind of hole.
        assert_eq!(cmd_s(&mut sim, c, "XTRIM s MAXLEN 1"), ":1\r\n");
        assert_eq!(sim.stream_ids(b"s"), vec![EntryId::new(3, 0)]);
        let got = cmd_s(&mut sim, c, "XREADGROUP GROUP g A COUNT 1 STREAMS s 0");
        assert!(got.ends_with(&format!("*2\r\n$3\r\n1-0\r\n{nil}")), "{got}");
        assert_eq!(cmd_s(&mut sim, c, "XACK s g 1-0 2-0"), ":2\r\n");
    }
}

#[test]
fn p4_block_with_an_explicit_id_never_blocks() {
    let (mut sim, c) = setup(SimOptions::default());
    let got = cmd_s(&mut sim, c, "XREADGROUP GROUP g A BLOCK 1000 STREAMS s 0");
    assert_eq!(got, "*1\r\n*2\r\n$1\r\ns\r\n*0\r\n");
    assert!(!sim.is_blocked(c));
}

fn claim_setup(options: SimOptions) -> (Sim, ConnId) {
    let (mut sim, c) = setup(options);
    let _ = cmd(&mut sim, c, "XREADGROUP GROUP g A STREAMS s >");
    let _ = cmd(&mut sim, c, "XDEL s 2-0");
    sim.advance_to(50);
    (sim, c)
}

#[test]
fn p5_p6_autoclaim_shapes_and_deleted_entries() {
    let (mut sim, c) = claim_setup(SimOptions::redis62());
    let got = cmd_s(&mut sim, c, "XAUTOCLAIM s g B 10 0-0");
    assert_eq!(got, format!("*2\r\n$3\r\n0-0\r\n*3\r\n{}$-1\r\n{}", entry(1), entry(3)));
    assert_eq!(counts(&sim), vec![(1, "B".into(), 50, 2), (2, "B".into(), 50, 2), (3, "B".into(), 50, 2)]);
    let got = cmd_s(&mut sim, c, "XREADGROUP GROUP g B STREAMS s 0");
    assert!(got.contains("*2\r\n$3\r\n2-0\r\n*-1\r\n"), "{got}");

    let (mut sim, c) = claim_setup(SimOptions::redis70());
    let got = cmd_s(&mut sim, c, "XAUTOCLAIM s g B 10 0-0");
    assert_eq!(got, format!("*3\r\n$3\r\n0-0\r\n*2\r\n{}{}*1\r\n$3\r\n2-0\r\n", entry(1), entry(3)));
    assert_eq!(counts(&sim).len(), 2);

    // Deleted ids alone can fill a page (Valkey counts them against COUNT).
    let (mut sim, c) = setup(SimOptions::valkey81());
    let _ = cmd(&mut sim, c, "XREADGROUP GROUP g A STREAMS s >");
    let _ = cmd(&mut sim, c, "XDEL s 1-0");
    let got = cmd_s(&mut sim, c, "XAUTOCLAIM s g B 3600000 0-0 COUNT 1");
    assert_eq!(got, "*3\r\n$3\r\n2-0\r\n*0\r\n*1\r\n$3\r\n1-0\r\n");
}

#[test]
fn p7_autoclaim_scans_count_times_ten() {
    let mut sim = Sim::new(SimOptions::redis70());
    let c = sim.connect();
    let _ = cmd(&mut sim, c, "XGROUP CREATE s g 0 MKSTREAM");
    for n in 1..=30 {
        let _ = cmd(&mut sim, c, &format!("XADD s {n}-0 f v"));
    }
    let _ = cmd(&mut sim, c, "XREADGROUP GROUP g A STREAMS s >");
    assert_eq!(
        cmd_s(&mut sim, c, "XAUTOCLAIM s g B 3600000 0-0 COUNT 1"),
        "*3\r\n$4\r\n11-0\r\n*0\r\n*0\r\n"
    );
    assert_eq!(
        cmd_s(&mut sim, c, "XAUTOCLAIM s g B 3600000 11-0 COUNT 1"),
        "*3\r\n$4\r\n21-0\r\n*0\r\n*0\r\n"
    );
    assert_eq!(
        cmd_s(&mut sim, c, "XAUTOCLAIM s g B 3600000 21-0 COUNT 1"),
        "*3\r\n$3\r\n0-0\r\n*0\r\n*0\r\n"
    );
    // Once idle long enough, COUNT limits the claims and the cursor points past them.
    sim.advance_to(3_600_000);
    let got = cmd_s(&mut sim, c, "XAUTOCLAIM s g B 3600000 0-0 COUNT 2 JUSTID");
    assert_eq!(got, "*3\r\n$3\r\n3-0\r\n*2\r\n$3\r\n1-0\r\n$3\r\n2-0\r\n*0\r\n");
}

#[test]
fn p8_autoclaim_takes_own_idle_entries_and_justid_keeps_the_count() {
    let (mut sim, c) = setup(SimOptions::default());
    let _ = cmd(&mut sim, c, "XREADGROUP GROUP g A STREAMS s >");
    sim.advance_to(1000);
    let got = cmd_s(&mut sim, c, "XAUTOCLAIM s g A 500 0-0 COUNT 1");
    assert_eq!(got, format!("*3\r\n$3\r\n2-0\r\n*1\r\n{}*0\r\n", entry(1)));
    assert_eq!(counts(&sim)[0], (1, "A".into(), 1000, 2));
    let got = cmd_s(&mut sim, c, "XAUTOCLAIM s g B 500 0-0 JUSTID");
    assert_eq!(got, "*3\r\n$3\r\n0-0\r\n*2\r\n$3\r\n2-0\r\n$3\r\n3-0\r\n*0\r\n");
    assert_eq!(counts(&sim)[1], (2, "B".into(), 1000, 1));
    let got = cmd_s(&mut sim, c, "XPENDING s g IDLE 1 - + 10");
    assert_eq!(got, "*0\r\n");
    let got = cmd_s(&mut sim, c, "XPENDING s g - + 10 B");
    assert_eq!(
        got,
        "*2\r\n*4\r\n$3\r\n2-0\r\n$1\r\nB\r\n:0\r\n:1\r\n*4\r\n$3\r\n3-0\r\n$1\r\nB\r\n:0\r\n:1\r\n"
    );
}

#[test]
fn p9_nothing_new_is_nil_and_block_times_out_on_the_virtual_clock() {
    let (mut sim, c) = setup(SimOptions::default());
    let _ = cmd(&mut sim, c, "XREADGROUP GROUP g A STREAMS s >");
    assert_eq!(cmd_s(&mut sim, c, "XREADGROUP GROUP g A STREAMS s >"), "*-1\r\n");
    assert_eq!(cmd_s(&mut sim, c, "XREADGROUP GROUP g A BLOCK 100 STREAMS s >"), "");
    assert!(sim.is_blocked(c));
    assert_eq!(sim.next_wakeup(), Some(100));
    sim.advance_to(99);
    assert!(sim.is_blocked(c));
    sim.advance_to(100);
    assert_eq!(sim.output(c), b"*-1\r\n");
    let _ = cmd(&mut sim, c, "HELLO 3");
    assert_eq!(cmd_s(&mut sim, c, "XREADGROUP GROUP g A STREAMS s >"), "_\r\n");
}

#[test]
fn parked_read_wakes_on_xadd_and_records_the_delivery() {
    let (mut sim, c) = setup(SimOptions::default());
    let _ = cmd(&mut sim, c, "XREADGROUP GROUP g A STREAMS s >");
    let c2 = sim.connect();
    assert_eq!(cmd_s(&mut sim, c, "XREADGROUP GROUP g B COUNT 5 BLOCK 0 STREAMS s >"), "");
    assert_eq!(sim.next_wakeup(), None, "BLOCK 0 has no deadline");
    sim.advance_to(70);
    assert_eq!(cmd_s(&mut sim, c2, "XADD s * f v"), "$4\r\n70-0\r\n");
    let got = String::from_utf8(sim.output(c)).unwrap();
    assert_eq!(got, "*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$4\r\n70-0\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n");
    assert_eq!(counts(&sim)[3], (70, "B".into(), 70, 1));
    // `*` never goes backwards: the same ms gets the next sequence.
    assert_eq!(cmd_s(&mut sim, c2, "XADD s * f v"), "$4\r\n70-1\r\n");
}

#[test]
fn p11_commands_behind_a_parked_read_wait_for_it() {
    let (mut sim, c) = setup(SimOptions::default());
    let _ = cmd(&mut sim, c, "XREADGROUP GROUP g A STREAMS s >");
    let mut pipeline = encode(&words("XREADGROUP GROUP g A BLOCK 800 STREAMS s >"));
    pipeline.extend(encode(&words("XACK s g 1-0")));
    pipeline.extend(encode(&words("PING")));
    sim.input(c, &pipeline);
    assert_eq!(sim.output(c), b"");
    sim.advance_to(799);
    assert_eq!(sim.output(c), b"");
    assert_eq!(counts(&sim).len(), 3, "the XACK has not run");
    sim.advance_to(800);
    assert_eq!(sim.output(c), b"*-1\r\n:1\r\n+PONG\r\n");
}

fn park(options: SimOptions) -> (Sim, ConnId, ConnId) {
    let mut sim = Sim::new(options);
    let (c1, c2) = (sim.connect(), sim.connect());
    let _ = cmd(&mut sim, c1, "XGROUP CREATE s3 g3 $ MKSTREAM");
    assert_eq!(cmd_s(&mut sim, c1, "XREADGROUP GROUP g3 A COUNT 10 BLOCK 600 STREAMS s3 >"), "");
    sim.advance_to(100);
    (sim, c1, c2)
}

#[test]
fn p12_key_deleted_or_group_destroyed_while_parked() {
    let nogroup = "-NOGROUP No such key 's3' or consumer group 'g3' in XREADGROUP with GROUP option\r\n";
    let (mut sim, c1, c2) = park(SimOptions::redis62());
    assert_eq!(cmd_s(&mut sim, c2, "DEL s3"), ":1\r\n");
    assert!(sim.is_blocked(c1));
    sim.advance_to(600);
    assert_eq!(sim.output(c1), b"*-1\r\n");
    assert_eq!(cmd_s(&mut sim, c1, "PING"), "+PONG\r\n");

    let (mut sim, c1, c2) = park(SimOptions::redis70());
    let _ = cmd(&mut sim, c2, "DEL s3");
    assert_eq!(sim.output(c1), b"-UNBLOCKED the stream key no longer exists\r\n");

    let (mut sim, c1, c2) = park(SimOptions::valkey81());
    let _ = cmd(&mut sim, c2, "FLUSHALL");
    assert_eq!(String::from_utf8(sim.output(c1)).unwrap(), nogroup);

    let gone = "-NOGROUP the consumer group this client was blocked on no longer exists\r\n";
    for (options, want) in
        [(SimOptions::redis62(), gone), (SimOptions::redis70(), gone), (SimOptions::valkey81(), nogroup)]
    {
        let (mut sim, c1, c2) = park(options);
        assert_eq!(cmd_s(&mut sim, c2, "XGROUP DESTROY s3 g3"), ":1\r\n");
        assert_eq!(String::from_utf8(sim.output(c1)).unwrap(), want);
        assert!(!sim.is_blocked(c1));
        assert_eq!(cmd_s(&mut sim, c1, "PING"), "+PONG\r\n");
    }

    // 6.2: the key recreated without the group and written to ends the wait.
    let (mut sim, c1, c2) = park(SimOptions::redis62());
    let _ = cmd(&mut sim, c2, "DEL s3");
    let _ = cmd(&mut sim, c2, "XADD s3 1-0 f v");
    assert_eq!(String::from_utf8(sim.output(c1)).unwrap(), gone);
}

#[test]
fn p13_delconsumer_while_parked_does_not_wake_and_drops_pending() {
    let (mut sim, c) = setup(SimOptions::default());
    let _ = cmd(&mut sim, c, "XREADGROUP GROUP g A COUNT 2 STREAMS s >");
    let c2 = sim.connect();
    assert_eq!(
        cmd_s(&mut sim, c, "XREADGROUP GROUP g A BLOCK 500 STREAMS s2 >"),
        "-NOGROUP No such key 's2' or consumer group 'g' in XREADGROUP with GROUP option\r\n"
    );
    let _ = cmd(&mut sim, c, "XREADGROUP GROUP g A COUNT 1 STREAMS s >");
    assert_eq!(cmd_s(&mut sim, c, "XREADGROUP GROUP g A BLOCK 500 STREAMS s >"), "");
    assert_eq!(cmd_s(&mut sim, c2, "XGROUP DELCONSUMER s g A"), ":3\r\n");
    assert!(sim.is_blocked(c));
    assert_eq!(sim.pending(b"s", b"g"), Some(Vec::new()));
    assert_eq!(cmd_s(&mut sim, c2, "XGROUP DELCONSUMER s g A"), ":0\r\n");
    // Its entries are never redelivered; new ones still reach the parked reader.
    let _ = cmd(&mut sim, c2, "XADD s 4-0 f v4");
    assert_eq!(String::from_utf8(sim.output(c)).unwrap(), page(&[4]));
    assert_eq!(counts(&sim), vec![(4, "A".into(), 0, 1)]);
}

#[test]
fn disconnect_forgets_a_parked_read() {
    let (mut sim, c) = setup(SimOptions::default());
    let _ = cmd(&mut sim, c, "XREADGROUP GROUP g A STREAMS s >");
    let _ = cmd(&mut sim, c, "XREADGROUP GROUP g A BLOCK 0 STREAMS s >");
    sim.disconnect(c);
    let c2 = sim.connect();
    let _ = cmd(&mut sim, c2, "XADD s 4-0 f v");
    assert_eq!(counts(&sim).len(), 3, "nothing delivered to the gone reader");
    assert!(!sim.is_blocked(c));
}

#[test]
fn p15_xack_counts_what_it_removed() {
    let (mut sim, c) = setup(SimOptions::default());
    let _ = cmd(&mut sim, c, "XREADGROUP GROUP g A STREAMS s >");
    assert_eq!(cmd_s(&mut sim, c, "XACK s g 1-0"), ":1\r\n");
    assert_eq!(cmd_s(&mut sim, c, "XACK s g 1-0"), ":0\r\n");
    assert_eq!(cmd_s(&mut sim, c, "XACK s g 3-0 9-0 3-0"), ":1\r\n");
    assert_eq!(cmd_s(&mut sim, c, "XACK nokey g 1-0"), ":0\r\n");
    assert_eq!(cmd_s(&mut sim, c, "XACK s nogroup 1-0"), ":0\r\n");
    let bad = "-ERR Invalid stream ID specified as stream command argument\r\n";
    assert_eq!(cmd_s(&mut sim, c, "XACK s g 2-0 nonsense"), bad);
    assert_eq!(counts(&sim).len(), 1, "one malformed id fails the whole call");
    // An entry a peer reclaimed can still be acked by anyone.
    let _ = cmd(&mut sim, c, "XAUTOCLAIM s g B 0 0-0");
    assert_eq!(cmd_s(&mut sim, c, "XACK s g 2-0"), ":1\r\n");
}

#[test]
fn p16_group_door() {
    let mut sim = Sim::new(SimOptions::default());
    let c = sim.connect();
    let missing = "-ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want \
                   to use the MKSTREAM option to create an empty stream automatically.\r\n";
    assert_eq!(cmd_s(&mut sim, c, "XGROUP CREATE s g $"), missing);
    assert_eq!(cmd_s(&mut sim, c, "XGROUP CREATE s g $ MKSTREAM"), "+OK\r\n");
    assert_eq!(
        cmd_s(&mut sim, c, "XGROUP CREATE s g $ MKSTREAM"),
        "-BUSYGROUP Consumer Group name already exists\r\n"
    );
    assert!(sim.group_exists(b"s", b"g"));
    assert_eq!(cmd_s(&mut sim, c, "XLEN s"), ":0\r\n");
    assert_eq!(cmd_s(&mut sim, c, "XGROUP DESTROY s g"), ":1\r\n");
    assert_eq!(cmd_s(&mut sim, c, "XGROUP DESTROY s g"), ":0\r\n");
    assert!(!sim.group_exists(b"s", b"g"));
    assert_eq!(cmd_s(&mut sim, c, "DEL s nokey"), ":1\r\n");
    assert_eq!(cmd_s(&mut sim, c, "XGROUP DESTROY s g"), missing);
}

#[test]
fn p17_errors() {
    let (mut sim, c) = setup(SimOptions::default());
    assert_eq!(
        cmd_s(&mut sim, c, "XREADGROUP GROUP nog A STREAMS s 0"),
        "-NOGROUP No such key 's' or consumer group 'nog' in XREADGROUP with GROUP option\r\n"
    );
    assert_eq!(
        cmd_s(&mut sim, c, "XAUTOCLAIM s nog A 10 0-0"),
        "-NOGROUP No such key 's' or consumer group 'nog'\r\n"
    );
    assert_eq!(cmd_s(&mut sim, c, "XAUTOCLAIM s g A 10 0-0 COUNT 0"), "-ERR COUNT must be > 0\r\n");
    assert_eq!(cmd_s(&mut sim, c, "XPENDING s nog"), "-NOGROUP No such key 's' or consumer group 'nog'\r\n");
    // COUNT 0 on XREADGROUP means no limit.
    let _ = cmd(&mut sim, c, "XREADGROUP GROUP g A STREAMS s >");
    assert_eq!(cmd_s(&mut sim, c, "XREADGROUP GROUP g A COUNT 0 STREAMS s 0"), page(&[1, 2, 3]));
    assert_eq!(
        cmd_s(&mut sim, c, "XADD s 2-0 f v"),
        "-ERR The ID specified in XADD is equal or smaller than the target stream top item\r\n"
    );
    assert_eq!(cmd_s(&mut sim, c, "XADD s 3-* f v"), "$3\r\n3-1\r\n");
    assert_eq!(
        cmd_s(&mut sim, c, "XADD s 1-x f v"),
        "-ERR Invalid stream ID specified as stream command argument\r\n"
    );
    assert_eq!(cmd_s(&mut sim, c, "XADD s 9-0 f"), "-ERR wrong number of arguments for 'xadd' command\r\n");
    assert!(cmd_s(&mut sim, c, "NOSUCH a b")
        .starts_with("-ERR unknown command 'NOSUCH', with args beginning with: 'a' 'b'"));
    assert_eq!(cmd_s(&mut sim, c, "XLEN"), "-ERR wrong number of arguments for 'xlen' command\r\n");
    assert_eq!(
        cmd_s(&mut sim, c, "XREADGROUP GROUP g A STREAMS s $"),
        cmd_s(&mut sim, c, "XREADGROUP GROUP g A STREAMS s $")
    );
    assert!(
        cmd_s(&mut sim, c, "XREADGROUP GROUP g A STREAMS s $").starts_with("-ERR The $ ID is meaningless")
    );
}

#[test]
fn p19_resp3_shapes() {
    let (mut sim, c) = claim_setup(SimOptions::redis62());
    let got = cmd_s(&mut sim, c, "HELLO 3");
    assert!(
        got.starts_with(
            "%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n6.2.14\r\n$5\r\nproto\r\n:3\r\n"
        ),
        "{got}"
    );
    let got = cmd_s(&mut sim, c, "XAUTOCLAIM s g B 10 0-0");
    assert_eq!(got, format!("*2\r\n$3\r\n0-0\r\n*3\r\n{}_\r\n{}", entry(1), entry(3)));
    assert_eq!(cmd_s(&mut sim, c, "XINFO GROUPS s"), "*1\r\n%4\r\n$4\r\nname\r\n$1\r\ng\r\n$9\r\nconsumers\r\n:2\r\n$7\r\npending\r\n:3\r\n$17\r\nlast-delivered-id\r\n$3\r\n3-0\r\n");
    assert_eq!(
        cmd_s(&mut sim, c, "XPENDING s g"),
        "*4\r\n:3\r\n$3\r\n1-0\r\n$3\r\n3-0\r\n*1\r\n*2\r\n$1\r\nB\r\n$1\r\n3\r\n"
    );
    let _ = cmd(&mut sim, c, "XACK s g 1-0 2-0 3-0");
    assert_eq!(cmd_s(&mut sim, c, "XPENDING s g"), "*4\r\n:0\r\n_\r\n_\r\n_\r\n");
    let _ = cmd(&mut sim, c, "HELLO 2");
    assert_eq!(cmd_s(&mut sim, c, "XPENDING s g"), "*4\r\n:0\r\n$-1\r\n$-1\r\n*-1\r\n");
}

#[test]
fn xinfo_lag_on_redis7() {
    let (mut sim, c) = setup(SimOptions::redis70());
    let _ = cmd(&mut sim, c, "XREADGROUP GROUP g A COUNT 1 STREAMS s >");
    let got = cmd_s(&mut sim, c, "XINFO GROUPS s");
    assert!(got.ends_with("$12\r\nentries-read\r\n:1\r\n$3\r\nlag\r\n:2\r\n"), "{got}");
    assert_eq!(cmd_s(&mut sim, c, "XINFO GROUPS nokey"), "-ERR no such key\r\n");
}

#[test]
fn auth_hello_and_connection_commands() {
    let mut sim = Sim::new(SimOptions::default().with_requirepass("secret"));
    let c = sim.connect();
    assert_eq!(cmd_s(&mut sim, c, "XLEN s"), "-NOAUTH Authentication required.\r\n");
    assert!(cmd_s(&mut sim, c, "HELLO 3").starts_with("-NOAUTH HELLO must be called"));
    let wrong = "-WRONGPASS invalid username-password pair or user is disabled.\r\n";
    assert_eq!(cmd_s(&mut sim, c, "AUTH nobody wrongpass"), wrong);
    assert_eq!(cmd_s(&mut sim, c, "HELLO 3 AUTH default nope"), wrong);
    let got = cmd_s(&mut sim, c, "HELLO 3 AUTH default secret SETNAME w1");
    assert!(got.starts_with("%7\r\n") && got.contains("$2\r\nid\r\n:1\r\n"), "{got}");
    assert_eq!(cmd_s(&mut sim, c, "CLIENT GETNAME"), "$2\r\nw1\r\n");
    assert_eq!(cmd_s(&mut sim, c, "CLIENT ID"), ":1\r\n");
    assert_eq!(cmd_s(&mut sim, c, "SELECT 0"), "+OK\r\n");
    assert_eq!(cmd_s(&mut sim, c, "SELECT 1"), "-ERR DB index is out of range\r\n");
    assert_eq!(cmd_s(&mut sim, c, "PING"), "+PONG\r\n");
    let c2 = sim.connect();
    assert_eq!(cmd_s(&mut sim, c2, "AUTH secret"), "+OK\r\n");
    assert_eq!(cmd_s(&mut sim, c2, "CLIENT SETNAME pelican-test"), "+OK\r\n");
    assert_eq!(cmd_s(&mut sim, c2, "HELLO 4"), "-NOPROTO unsupported protocol version\r\n");
    let mut open = Sim::new(SimOptions::default());
    let c3 = open.connect();
    assert!(cmd_s(&mut open, c3, "AUTH x").starts_with("-ERR AUTH <password> called without any password"));
    assert_eq!(cmd_s(&mut open, c3, "AUTH default anything"), "+OK\r\n");
}

#[test]
fn inline_commands_split_input_and_protocol_errors() {
    let mut sim = Sim::new(SimOptions::default());
    let c = sim.connect();
    sim.input(c, b"PING\r\nXADD s 1-0 \"a b\" v\r\n\r\n*1\r\n$4\r\nPI");
    assert_eq!(sim.output(c), b"+PONG\r\n$3\r\n1-0\r\n");
    sim.input(c, b"NG\r\n");
    assert_eq!(sim.output(c), b"+PONG\r\n");
    // Byte by byte gives the same replies.
    let mut all = Vec::new();
    for b in encode(&words("XLEN s")) {
        sim.input(c, &[b]);
        all.extend(sim.output(c));
    }
    assert_eq!(all, b":1\r\n");
    sim.input(c, b"*1\r\n+PING\r\nPING\r\n");
    assert_eq!(sim.output(c), b"-ERR Protocol error: expected '$', got '+'\r\n");
    assert!(sim.is_closed(c));
    sim.input(c, b"PING\r\n");
    assert_eq!(sim.output(c), b"");
}

#[test]
fn xadd_trim_options_and_xtrim() {
    let mut sim = Sim::new(SimOptions::default());
    let c = sim.connect();
    for n in 1..=5 {
        let _ = cmd(&mut sim, c, &format!("XADD s MAXLEN = 3 {n}-0 f v"));
    }
    assert_eq!(sim.stream_ids(b"s"), vec![EntryId::new(3, 0), EntryId::new(4, 0), EntryId::new(5, 0)]);
    assert_eq!(cmd_s(&mut sim, c, "XTRIM s MINID 5"), ":2\r\n");
    assert_eq!(cmd_s(&mut sim, c, "XTRIM s MAXLEN ~ 0"), ":1\r\n");
    assert_eq!(cmd_s(&mut sim, c, "XTRIM nokey MAXLEN 0"), ":0\r\n");
    assert_eq!(
        cmd_s(&mut sim, c, "XADD s 5-0 f v"),
        "-ERR The ID specified in XADD is equal or smaller than the target stream top item\r\n"
    );
    assert_eq!(cmd_s(&mut sim, c, "XADD nokey NOMKSTREAM * f v"), "$-1\r\n");
    assert_eq!(cmd_s(&mut sim, c, "XTRIM s FOO 3"), "-ERR syntax error\r\n");
    assert_eq!(cmd_s(&mut sim, c, "XDEL nokey 1-0"), ":0\r\n");
}

#[test]
fn claim_shape_is_an_option() {
    assert_eq!(SimOptions::redis62().claim_shape, ClaimShape::Redis62);
    assert_eq!(SimOptions::default().claim_shape, ClaimShape::Redis7);
}

#[test]
fn a_restart_forgets_what_reads_of_the_pending_list_did_and_keeps_the_rest() {
    let (mut sim, c) = setup(SimOptions::redis70());
    sim.advance_to(100);
    let _ = cmd(&mut sim, c, "XREADGROUP GROUP g A COUNT 2 STREAMS s >");
    sim.advance_to(200);
    // A drain raises 1-0 and 2-0 to two deliveries (not recorded)...
    let _ = cmd(&mut sim, c, "XREADGROUP GROUP g A STREAMS s 0");
    // ...then a claim raises 2-0 to three and a lease renewal moves 1-0's time: both are
    // recorded as they stand (the servers write an XCLAIM with the count then held).
    sim.advance_to(1_300);
    let _ = cmd(&mut sim, c, "XCLAIM s g B 1000 2-0");
    let _ = cmd(&mut sim, c, "XCLAIM s g A 0 1-0 JUSTID");
    let parked = sim.connect();
    sim.input(parked, &encode(&words("XREADGROUP GROUP g C BLOCK 0 STREAMS s >")));
    let _ = cmd(&mut sim, c, "XREADGROUP GROUP g C STREAMS s >");
    sim.advance_to(1_400);
    let _ = cmd(&mut sim, c, "XREADGROUP GROUP g C STREAMS s 0");
    assert_eq!(
        counts(&sim),
        [(1, "A".into(), 1_300, 2), (2, "B".into(), 1_300, 3), (3, "C".into(), 1_400, 2)]
    );
    sim.restart();
    assert!(sim.is_closed(c) && sim.is_closed(parked), "every connection is dropped");
    assert_eq!(sim.now(), 1_400, "the clock goes on");
    assert_eq!(
        counts(&sim),
        [(1, "A".into(), 1_300, 2), (2, "B".into(), 1_300, 3), (3, "C".into(), 1_300, 1)],
        "a drain's count and time since the last claim are forgotten, the rest is kept"
    );
    let c = sim.connect();
    assert_eq!(cmd_s(&mut sim, c, "XLEN s"), ":3\r\n");
    assert!(sim.group_exists(b"s", b"g"));
    assert_eq!(sim.consumers(b"s", b"g"), [b"A".to_vec(), b"B".to_vec(), b"C".to_vec()]);
    let entries = sim.entries(b"s");
    assert_eq!(entries.len(), 3);
    assert_eq!(entries[1], (EntryId::new(2, 0), vec![(b"f".to_vec(), b"v2".to_vec())]));
    assert!(sim.entries(b"missing").is_empty());
}

/// The simulator's record of how a pending entry reached its owner (for the kit's checks):
/// who read it as new and when; a claim by another consumer moves it, a consumer's claim of
/// its own (a lease renewal, a drain) does not; it survives a restart; an ack ends it.
#[test]
fn origin_tells_who_read_an_entry_as_new_and_whether_a_claim_moved_it() {
    let (mut sim, c) = setup(SimOptions::default());
    let id = |n: u64| EntryId { ms: n, seq: 0 };
    sim.advance_to(100);
    let _ = cmd(&mut sim, c, "XREADGROUP GROUP g A COUNT 2 STREAMS s >");
    sim.advance_to(200);
    let _ = cmd(&mut sim, c, "XREADGROUP GROUP g B COUNT 1 STREAMS s >");
    let origin = |sim: &Sim, n| {
        sim.origin(b"s", b"g", id(n)).map(|o| (String::from_utf8(o.read_by).unwrap(), o.read_at, o.moved))
    };
    assert_eq!(origin(&sim, 1), Some(("A".into(), 100, false)));
    assert_eq!(origin(&sim, 3), Some(("B".into(), 200, false)));
    // A's own claims and reads keep it A's own read.
    sim.advance_to(400);
    let _ = cmd(&mut sim, c, "XCLAIM s g A 0 1-0 JUSTID");
    let _ = cmd(&mut sim, c, "XREADGROUP GROUP g A STREAMS s 0");
    let _ = cmd(&mut sim, c, "XAUTOCLAIM s g A 0 0-0 COUNT 1");
    assert_eq!(origin(&sim, 1), Some(("A".into(), 100, false)));
    // B takes 2-0 from A, A takes 3-0 from B: both moved, and stay so.
    let _ = cmd(&mut sim, c, "XCLAIM s g B 0 2-0");
    let _ = cmd(&mut sim, c, "XAUTOCLAIM s g A 0 3-0 COUNT 1");
    assert_eq!(origin(&sim, 2), Some(("A".into(), 100, true)));
    assert_eq!(origin(&sim, 3), Some(("B".into(), 200, true)));
    sim.restart();
    assert_eq!(origin(&sim, 2), Some(("A".into(), 100, true)));
    let c = sim.connect();
    let _ = cmd(&mut sim, c, "XACK s g 1-0");
    assert_eq!(origin(&sim, 1), None, "acked: no longer pending");
    assert_eq!(sim.origin(b"s", b"nope", id(2)), None);
}

/// Redis 8 `CLAIM` reads parked in `BLOCK`: woken by an `XNACK` from another connection (the
/// released entry comes with idle = the clock and its count), and by the clock once a
/// pending entry is idle enough; a deleted pending entry is skipped and stays pending.
#[test]
fn redis8_parked_claim_reads_wake_on_xnack_and_on_idle() {
    let mut sim = Sim::new(SimOptions::redis810());
    let (a, b) = (sim.connect(), sim.connect());
    cmd(&mut sim, a, "XGROUP CREATE s g 0 MKSTREAM");
    cmd(&mut sim, a, "XADD s 1-0 f v");
    cmd(&mut sim, a, "XADD s 2-0 f w");
    sim.advance_to(1_000);
    cmd(&mut sim, a, "XREADGROUP GROUP g A STREAMS s >");
    sim.advance_to(2_000);
    // Nothing idle for 60 s yet, nothing new: B parks.
    assert_eq!(cmd(&mut sim, b, "XREADGROUP GROUP g B BLOCK 100000 CLAIM 60000 STREAMS s >"), b"");
    assert_eq!(cmd_s(&mut sim, a, "XNACK s g FAIL IDS 1 2-0"), ":1\r\n");
    assert_eq!(
        String::from_utf8_lossy(&sim.output(b)),
        "*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*4\r\n$3\r\n2-0\r\n*2\r\n$1\r\nf\r\n$1\r\nw\r\n:2000\r\n:1\r\n"
    );
    // 1-0 (A's, delivered at 1 000) becomes claimable at 61 000: the parked read wakes then.
    assert_eq!(cmd(&mut sim, b, "XREADGROUP GROUP g B BLOCK 100000 CLAIM 60000 STREAMS s >"), b"");
    assert_eq!(sim.next_wakeup(), Some(61_000));
    sim.advance_to(61_000);
    assert_eq!(
        String::from_utf8_lossy(&sim.output(b)),
        "*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*4\r\n$3\r\n1-0\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n:60000\r\n:1\r\n"
    );
    // 1-0's message deleted, the oldest live delivery is 2-0 (59 s idle): C parks, times out.
    cmd(&mut sim, a, "XDEL s 1-0");
    assert_eq!(cmd(&mut sim, a, "XREADGROUP GROUP g C BLOCK 50 CLAIM 60000 STREAMS s >"), b"");
    sim.advance_to(200_000);
    assert_eq!(sim.output(a), b"*-1\r\n");
    let pending = sim.pending(b"s", b"g").unwrap();
    assert_eq!(
        pending.iter().map(|p| (p.id.to_string(), p.consumer.clone())).collect::<Vec<_>>(),
        [("1-0".to_string(), b"B".to_vec()), ("2-0".to_string(), b"B".to_vec())]
    );
}

/// The Redis 8 verbs are refused as the older servers refuse them.
#[test]
fn redis8_verbs_are_unknown_to_older_flavors() {
    let mut sim = Sim::new(SimOptions::redis70());
    let c = sim.connect();
    cmd(&mut sim, c, "XGROUP CREATE s g 0 MKSTREAM");
    assert_eq!(
        cmd_s(&mut sim, c, "XNACK s g FAIL IDS 1 1-0"),
        "-ERR unknown command 'XNACK', with args beginning with: 's' 'g' 'FAIL' 'IDS' '1' '1-0' \r\n"
    );
    assert_eq!(cmd_s(&mut sim, c, "XREADGROUP GROUP g A CLAIM 0 STREAMS s >"), "-ERR syntax error\r\n");
    assert_eq!(
        cmd_s(&mut sim, c, "XADD s IDMP p i * f v"),
        "-ERR Invalid stream ID specified as stream command argument\r\n"
    );
}

#[test]
fn p44_a_park_sets_the_owner_the_count_and_an_idle_time_counted_back_from_now() {
    let (mut sim, c) = setup(SimOptions::default());
    sim.advance_to(100);
    let _ = cmd(&mut sim, c, "XREADGROUP GROUP g A STREAMS s >");
    // To a consumer that does not exist yet (made by the claim), the count set, idle 25 s
    // though the clock has run only 100 ms (a real server's counts from 1970).
    let got = cmd_s(&mut sim, c, "XCLAIM s g pelican:delayed 0 1-0 JUSTID RETRYCOUNT 1 IDLE 25000");
    assert_eq!(got, "*1\r\n$3\r\n1-0\r\n");
    assert_eq!(counts(&sim)[0], (1, "pelican:delayed".into(), 0, 1), "dated before 0: told as 0");
    let got = cmd_s(&mut sim, c, "XPENDING s g - + 1");
    assert_eq!(got, "*1\r\n*4\r\n$3\r\n1-0\r\n$15\r\npelican:delayed\r\n:25000\r\n:1\r\n");
    // A negative idle time is none; JUSTID without RETRYCOUNT keeps the count.
    let _ = cmd(&mut sim, c, "XCLAIM s g pelican:delayed 0 2-0 JUSTID IDLE -5000");
    assert_eq!(counts(&sim)[1], (2, "pelican:delayed".into(), 100, 1));
    // Claimable by anyone once idle enough: 5 s later, by a reclaim asking 30 s.
    sim.advance_to(4_999);
    assert_eq!(cmd_s(&mut sim, c, "XAUTOCLAIM s g B 30000 0-0 JUSTID"), "*3\r\n$3\r\n0-0\r\n*0\r\n*0\r\n");
    sim.advance_to(5_100);
    let got = cmd_s(&mut sim, c, "XAUTOCLAIM s g B 30000 0-0 COUNT 10");
    assert_eq!(got, format!("*3\r\n$3\r\n0-0\r\n*1\r\n{}*0\r\n", entry(1)));
    assert_eq!(counts(&sim)[0], (1, "B".into(), 5_100, 2), "the reclaim counts the next delivery");
    assert_eq!(sim.consumers(b"s", b"g"), vec![b"A".to_vec(), b"B".to_vec(), b"pelican:delayed".to_vec()]);
}
