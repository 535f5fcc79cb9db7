//! Properties of the consumer, against a small scripted server whose reply bytes have the
//! shapes captured from the real servers (see `tests/fixtures`).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use pelican::{Config, Consumer, Event, Notice, Protocol, Verdict};
use proptest::prelude::*;
use support::{fixture, origin, parse_commands, FLAVORS, PROTOCOLS};

/// One stream `s`, one group, one consumer: entries `1-0 ..= n-0`, the first `pending` already
/// delivered to (and held by) this consumer, some of those deleted.
struct Server {
    protocol: Protocol,
    total: u64,
    delivered: u64,
    pel: BTreeSet<u64>,
    deleted: BTreeSet<u64>,
    acked: Vec<u64>,
    /// Delivery counts of pending entries.
    deliveries: BTreeMap<u64, u64>,
    /// When each pending entry's idle time was last reset (delivered, re-read, renewed).
    touched: BTreeMap<u64, Instant>,
    /// What the last `>` read delivered.
    last_new: Vec<u64>,
    now: Instant,
}

fn bulk(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(format!("${}\r\n", s.len()).as_bytes());
    out.extend_from_slice(s);
    out.extend_from_slice(b"\r\n");
}

impl Server {
    fn id(n: u64) -> String {
        format!("{n}-0")
    }
    fn parse(id: &str) -> u64 {
        id.strip_suffix("-0").and_then(|n| n.parse().ok()).unwrap_or(0)
    }
    fn nil(&self) -> &'static [u8] {
        match self.protocol {
            Protocol::Resp2 => b"*-1\r\n",
            _ => b"_\r\n",
        }
    }
    /// `[[s, entries]]` (RESP2) or `{s: entries}` (RESP3), like `read_pending_deleted.resp`.
    fn entries(&self, ns: &[u64]) -> Vec<u8> {
        let mut out = match self.protocol {
            Protocol::Resp2 => b"*1\r\n*2\r\n$1\r\ns\r\n".to_vec(),
            _ => b"%1\r\n$1\r\ns\r\n".to_vec(),
        };
        out.extend_from_slice(format!("*{}\r\n", ns.len()).as_bytes());
        for &n in ns {
            out.extend_from_slice(b"*2\r\n");
            bulk(&mut out, Self::id(n).as_bytes());
            if self.deleted.contains(&n) {
                out.extend_from_slice(self.nil());
            } else {
                out.extend_from_slice(b"*2\r\n$1\r\nf\r\n");
                bulk(&mut out, format!("v{n}").as_bytes());
            }
        }
        out
    }

    fn answer(&mut self, cmd: &[String]) -> Vec<u8> {
        let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
        match args.as_slice() {
            ["HELLO"] => fixture("valkey-8.1", self.protocol, "hello_info"),
            ["HELLO", ..] => fixture("valkey-8.1", Protocol::Resp3, "hello"),
            // New entries: parked (`BLOCK`), or read ahead (answered at once).
            ["XREADGROUP", "GROUP", _, _, "COUNT", count, rest @ ..] if rest.last() == Some(&">") => {
                let count: u64 = count.parse().unwrap();
                let ns: Vec<u64> = (self.delivered + 1..=self.total).take(count as usize).collect();
                if ns.is_empty() {
                    if rest[0] == "STREAMS" {
                        return self.nil().to_vec();
                    }
                    // Blocks: no answer until the story stops the consumer.
                    return Vec::new();
                }
                self.delivered += ns.len() as u64;
                self.pel.extend(&ns);
                self.deliveries.extend(ns.iter().map(|n| (*n, 1)));
                self.touched.extend(ns.iter().map(|n| (*n, self.now)));
                self.last_new = ns.clone();
                self.entries(&ns)
            }
            ["XREADGROUP", "GROUP", _, _, "COUNT", count, "STREAMS", _, after] => {
                let after = Self::parse(after);
                let ns: Vec<u64> =
                    self.pel.range(after + 1..).take(count.parse().unwrap()).copied().collect();
                // A re-read counts as a delivery, except of a deleted entry.
                for n in ns.iter().filter(|n| !self.deleted.contains(n)) {
                    *self.deliveries.entry(*n).or_insert(0) += 1;
                    self.touched.insert(*n, self.now);
                }
                self.entries(&ns)
            }
            // Delivery counts: `XPENDING s g <- or (id> + n c`, like `pending_counts_page.resp`.
            ["XPENDING", _, _, start, "+", count, _] => {
                let from = start.strip_prefix('(').map_or(0, |id| Self::parse(id) + 1);
                let ns: Vec<u64> = self.pel.range(from..).take(count.parse().unwrap()).copied().collect();
                let mut out = format!("*{}\r\n", ns.len()).into_bytes();
                for n in ns {
                    out.extend_from_slice(b"*4\r\n");
                    bulk(&mut out, Self::id(n).as_bytes());
                    let idle = self
                        .touched
                        .get(&n)
                        .map_or(0, |at| self.now.saturating_duration_since(*at).as_millis());
                    out.extend_from_slice(
                        format!("$1\r\nc\r\n:{idle}\r\n:{}\r\n", self.deliveries[&n]).as_bytes(),
                    );
                }
                out
            }
            // A lease renewal (`… JUSTID`) or a give-back (`… JUSTID RETRYCOUNT n IDLE ms`):
            // nobody else takes entries here, so every pending one is kept (the shape of
            // `lease_all.resp`).
            ["XCLAIM", _, _, _, _, rest @ ..] => {
                let justid = rest.iter().position(|a| *a == "JUSTID").expect("JUSTID");
                let (ids, options) = rest.split_at(justid);
                let kept: Vec<&&str> = ids.iter().filter(|id| self.pel.contains(&Self::parse(id))).collect();
                for id in &kept {
                    match options {
                        ["JUSTID"] => {
                            self.touched.insert(Self::parse(id), self.now);
                        }
                        ["JUSTID", "RETRYCOUNT", n, "IDLE", idle] => {
                            self.deliveries.insert(Self::parse(id), n.parse().unwrap());
                            let idle = Duration::from_millis(idle.parse().unwrap());
                            if let Some(at) = self.now.checked_sub(idle) {
                                self.touched.insert(Self::parse(id), at);
                            }
                        }
                        other => panic!("XCLAIM options {other:?}"),
                    }
                }
                let mut out = format!("*{}\r\n", kept.len()).into_bytes();
                for id in kept {
                    bulk(&mut out, id.as_bytes());
                }
                out
            }
            // Nothing is idle in these runs: the 7+ shape of an empty sweep.
            ["XAUTOCLAIM", ..] => fixture("valkey-8.1", self.protocol, "autoclaim_done"),
            ["XACK", _, _, ids @ ..] => {
                let mut n = 0;
                for id in ids {
                    let id = Self::parse(id);
                    self.acked.push(id);
                    n += u64::from(self.pel.remove(&id));
                }
                format!(":{n}\r\n").into_bytes()
            }
            // Leaving the group at a clean stop: this consumer holds the whole pending list.
            ["EVAL", script, "1", "s", _, _] if *script == pelican::LEAVE_SCRIPT => {
                format!(":{}\r\n", self.pel.len()).into_bytes()
            }
            other => panic!("unexpected command {other:?}"),
        }
    }
}

#[derive(Clone, Debug)]
struct Story {
    protocol: Protocol,
    pending: u64,
    new: u64,
    deleted: BTreeSet<u64>,
    /// Verdict per handed-out entry, cycled: true is Ack.
    verdicts: Vec<bool>,
    /// Stop while the k-th handed-out entry is in hand.
    stop_at: Option<usize>,
    /// Stop right after settling that entry instead of while it is in hand.
    stop_after_settle: bool,
    count: u32,
    /// How long each handler takes (the clock advances by it at each settle): slow ones
    /// bring timely acks, lease renewals and smaller reads into play.
    handler_ms: u64,
}

#[derive(Debug, PartialEq)]
enum Step {
    Sent(Vec<String>),
    Reconnected,
    Entry(String),
    Notice(String),
    StopAsked,
    Stopped,
}

/// Takes what the consumer wrote, records it, and queues the server's answers.
fn exchange(
    consumer: &mut Consumer,
    server: &mut Server,
    inbox: &mut Vec<u8>,
    trace: &mut Vec<Step>,
    now: Instant,
) {
    server.now = now;
    if let Some(bytes) = consumer.poll_transmit() {
        let bytes = bytes.to_vec();
        consumer.advance_transmit(bytes.len());
        for cmd in parse_commands(&bytes) {
            inbox.extend(server.answer(&cmd));
            trace.push(Step::Sent(cmd));
        }
    }
}

struct Outcome {
    trace: Vec<Step>,
    server: Server,
    verdicts: BTreeMap<u64, bool>,
}

/// Runs a story; `chunks` (cycled) splits the server's bytes into reads of those sizes.
fn run(story: &Story, chunks: &[usize]) -> Outcome {
    let mut server = Server {
        protocol: story.protocol,
        total: story.pending + story.new,
        delivered: story.pending,
        pel: (1..=story.pending).collect(),
        deleted: story.deleted.iter().copied().filter(|n| *n <= story.pending).collect(),
        acked: Vec::new(),
        deliveries: (1..=story.pending).map(|n| (n, 1)).collect(),
        touched: BTreeMap::new(),
        last_new: Vec::new(),
        now: origin(),
    };
    let config = Config::new("s", "g", "c")
        .no_client_name()
        .count(story.count)
        .protocol(story.protocol)
        .min_idle(Duration::from_secs(3));
    let mut consumer = Consumer::new(config).unwrap();
    let mut now = server.now;
    let mut trace = Vec::new();
    let mut verdicts = BTreeMap::new();
    let mut inbox: Vec<u8> = Vec::new();
    let mut handed = 0usize;
    let mut chunk_i = 0usize;
    consumer.on_connected(now);
    for _round in 0..100_000 {
        if consumer.connect_due(now) {
            // A stop dropped the parked connection to leave the group on a new one: what
            // the old one still had to say is gone with it.
            inbox.clear();
            trace.push(Step::Reconnected);
            consumer.on_connected(now);
        }
        exchange(&mut consumer, &mut server, &mut inbox, &mut trace, now);
        let mut stopped = false;
        while let Some(event) = consumer.poll_event() {
            match event {
                Event::Entry(e) => {
                    // One at a time: nothing else comes out while an entry is in hand.
                    assert_eq!(consumer.poll_event(), None);
                    let n = Server::parse(std::str::from_utf8(e.id()).unwrap());
                    assert!(!server.deleted.contains(&n), "a deleted entry was handed out");
                    assert_eq!(e.deliveries, server.deliveries[&n], "delivery count of {n}");
                    // Never handed out on a lease that has run out (half of min_idle here).
                    assert!(now - server.touched[&n] < Duration::from_millis(1500), "stale {n}");
                    trace.push(Step::Entry(String::from_utf8(e.id().to_vec()).unwrap()));
                    let stop_here = story.stop_at == Some(handed);
                    if stop_here && !story.stop_after_settle {
                        trace.push(Step::StopAsked);
                        consumer.stop();
                        assert_eq!(consumer.poll_event(), None, "stop cut an entry short");
                    }
                    let ack = story.verdicts[handed % story.verdicts.len()];
                    handed += 1;
                    verdicts.insert(n, ack);
                    now += Duration::from_millis(story.handler_ms);
                    consumer.settle(e.id(), if ack { Verdict::Ack } else { Verdict::Retry }, now);
                    // What the settle wrote (acks, a read ahead) goes out before the next step.
                    exchange(&mut consumer, &mut server, &mut inbox, &mut trace, now);
                    if stop_here && story.stop_after_settle {
                        trace.push(Step::StopAsked);
                        consumer.stop();
                    }
                }
                Event::Stopped => {
                    trace.push(Step::Stopped);
                    stopped = true;
                }
                // When the first reply is read depends on the split; the rest does not.
                Event::Notice(Notice::Connected { .. }) => {}
                Event::Notice(notice) => trace.push(Step::Notice(notice.to_string())),
                _ => unreachable!(),
            }
        }
        if stopped {
            return Outcome { trace, server, verdicts };
        }
        if consumer.poll_transmit().is_some() {
            continue;
        }
        if inbox.is_empty() {
            // Parked with the stream exhausted: the story ends.
            assert!(server.delivered == server.total, "the consumer went quiet with work left");
            trace.push(Step::StopAsked);
            consumer.stop();
            continue;
        }
        let size = chunks[chunk_i % chunks.len()].clamp(1, inbox.len());
        chunk_i += 1;
        let part: Vec<u8> = inbox.drain(..size).collect();
        consumer.handle_input(&part, now).expect("a well-formed conversation");
    }
    panic!("no progress: livelock");
}

fn story() -> impl Strategy<Value = Story> {
    (
        prop::sample::select(PROTOCOLS.to_vec()),
        0u64..25,
        0u64..40,
        prop::collection::btree_set(1u64..25, 0..6),
        prop::collection::vec(any::<bool>(), 1..8),
        prop::option::of(0usize..60),
        any::<bool>(),
        1u32..8,
        prop::sample::select(vec![0u64, 1, 40, 900]),
    )
        .prop_map(
            |(protocol, pending, new, deleted, verdicts, stop_at, stop_after_settle, count, handler_ms)| {
                Story {
                    protocol,
                    pending,
                    new,
                    deleted,
                    verdicts,
                    stop_at,
                    stop_after_settle,
                    count,
                    handler_ms,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any split of the input bytes hands out the same entries, in the same order, and
    /// leaves the server in the same state. (When reads go out may differ: with two reads
    /// ahead in flight, the next one waits for what has arrived and been handed out.)
    #[test]
    fn any_split_gives_the_same_outcome(story in story(), chunks in prop::collection::vec(1usize..40, 1..16)) {
        let whole = run(&story, &[usize::MAX]);
        let split = run(&story, &chunks);
        let handed = |out: &Outcome| -> Vec<String> {
            out.trace.iter().filter_map(|s| match s { Step::Entry(id) => Some(id.clone()), _ => None }).collect()
        };
        prop_assert_eq!(handed(&whole), handed(&split));
        // What became of each entry handed out; how many more were read ahead and left
        // pending at the stop may differ.
        let fate = |out: &Outcome| -> Vec<(u64, bool, u64)> {
            out.verdicts.keys().map(|n| (*n, out.server.pel.contains(n), out.server.deliveries[n])).collect()
        };
        prop_assert_eq!(fate(&whole), fate(&split));
    }

    /// With one read in flight at a time (a second read ahead waits for handlers known to be
    /// quick, here none: 900 ms each), any split gives exactly the same commands and events.
    #[test]
    fn any_split_gives_the_same_conversation_one_read_at_a_time(
        mut story in story(),
        chunks in prop::collection::vec(1usize..40, 1..16),
    ) {
        story.handler_ms = 900;
        let whole = run(&story, &[usize::MAX]);
        let split = run(&story, &chunks);
        prop_assert_eq!(whole.trace, split.trace);
    }

    /// No XACK for an entry unless its verdict was Ack (deleted entries aside, which never
    /// reach the application); every Ack is confirmed by the time the consumer stops; what
    /// was not acked stays pending: nothing is lost.
    #[test]
    fn acks_follow_verdicts_and_nothing_is_lost(story in story()) {
        let out = run(&story, &[usize::MAX]);
        for id in &out.server.acked {
            let by_verdict = out.verdicts.get(id) == Some(&true);
            prop_assert!(by_verdict || out.server.deleted.contains(id), "XACK {} without an Ack verdict", id);
        }
        for (id, ack) in &out.verdicts {
            prop_assert_eq!(out.server.pel.contains(id), !ack, "entry {} after verdict ack={}", id, ack);
        }
        for id in (1..=out.server.delivered).filter(|id| !out.verdicts.contains_key(id)) {
            if !out.server.deleted.contains(&id) {
                prop_assert!(out.server.pel.contains(&id), "entry {} never handed out, yet not pending", id);
            } else if story.stop_at.is_none() {
                prop_assert!(!out.server.pel.contains(&id), "deleted entry {} not acked away", id);
            }
        }
        prop_assert_eq!(out.trace.last(), Some(&Step::Stopped));
        // Every clean stop asks to leave the group, once, after its last ack: holding
        // nothing, it leaves.
        let leaves: Vec<usize> = out.trace.iter().enumerate()
            .filter(|(_, s)| matches!(s, Step::Sent(c) if c[0] == "EVAL")).map(|(i, _)| i).collect();
        prop_assert_eq!(leaves.len(), 1, "{:?}", out.trace);
        let last_ack = out.trace.iter().rposition(|s| matches!(s, Step::Sent(c) if c[0] == "XACK"));
        prop_assert!(last_ack.is_none_or(|a| a < leaves[0]), "the leave before the last ack");
        let told = out.trace.iter().any(|s| matches!(s, Step::Notice(n) if n.starts_with("left the group")
            || n.starts_with("stays in the group")));
        prop_assert!(told, "{:?}", out.trace);
        // Delivery counts count handlings, not reads: entries read but dropped at the stop
        // had their counts given back.
        for (&n, &count) in &out.server.deliveries {
            if !out.server.pel.contains(&n) || out.server.deleted.contains(&n) {
                continue;
            }
            let before = u64::from(n <= story.pending);
            let id = Server::id(n);
            let handed = out.trace.iter().filter(|s| **s == Step::Entry(id.clone())).count() as u64;
            // A parked read in flight at the stop is not waited for: what it delivered keeps
            // its count.
            let parked = u64::from(out.server.last_new.contains(&n));
            prop_assert!(
                count == before + handed || count == before + handed + parked,
                "delivery count {} of pending {}, handed out {} times", count, id, handed
            );
        }
    }

    /// Entries are handed out in order, each once per delivery; a stop lets the entry in hand
    /// finish and hands out nothing after it. Slow handlers' batches are renewed (with
    /// `XCLAIM … JUSTID`) before their lease runs out, and never a read goes out while
    /// entries wait.
    #[test]
    fn stop_is_honored_between_entries(story in story()) {
        let out = run(&story, &[usize::MAX]);
        let handed: Vec<&String> = out.trace.iter().filter_map(|s| match s { Step::Entry(id) => Some(id), _ => None }).collect();
        if let Some(k) = story.stop_at {
            prop_assert!(handed.len() <= k + 1, "entries handed out after the stop");
        }
        // After the stop is asked, no entry is handed out, and no read is sent: only the
        // XACK of earned acks, the give-back of counts (XPENDING for them, XCLAIM), and the
        // leave (EVAL), on a new connection (its handshake) if the stop found it parked.
        let sent = |s: &Step| matches!(s, Step::Sent(c) if c[0] == "XCLAIM" && c.last().unwrap() == "JUSTID");
        if story.handler_ms < 900 {
            prop_assert!(!out.trace.iter().any(sent), "a renewal with handlers well within the lease");
        }
        let asked = out.trace.iter().position(|s| *s == Step::StopAsked).expect("every story stops");
        for step in &out.trace[asked + 1..] {
            match step {
                Step::Sent(cmd) => prop_assert!(
                    ["XACK", "XCLAIM", "XPENDING", "EVAL", "HELLO"].contains(&cmd[0].as_str()),
                    "{:?}",
                    cmd
                ),
                Step::Entry(id) => prop_assert!(false, "entry {} handed out after the stop", id),
                _ => {}
            }
        }
    }

    /// Random bytes, whole or split, never panic the consumer, whatever state it is in.
    #[test]
    fn garbage_never_panics(
        protocol in prop::sample::select(PROTOCOLS.to_vec()),
        bytes in prop::collection::vec(any::<u8>(), 0..512),
        chunks in prop::collection::vec(1usize..64, 1..8),
        settle_ack in any::<bool>(),
    ) {
        let mut c = Consumer::new(Config::new("s", "g", "c").protocol(protocol).no_client_name()).unwrap();
        let mut now = origin();
        c.on_connected(now);
        let mut rest = &bytes[..];
        let mut i = 0;
        while !rest.is_empty() {
            let n = chunks[i % chunks.len()].min(rest.len());
            i += 1;
            let _ = c.handle_input(&rest[..n], now);
            rest = &rest[n..];
            while let Some(Event::Entry(e)) = c.poll_event() {
                c.settle(e.id(), if settle_ack { Verdict::Ack } else { Verdict::Retry }, now);
            }
            if let Some(b) = c.poll_transmit() { let n = b.len(); c.advance_transmit(n); }
            now += Duration::from_millis(700);
            let _ = c.handle_timeout(now);
            if c.wants_connection() { c.on_connected(now); }
        }
    }

    /// Captured replies with bytes flipped, dropped or cut never panic either.
    #[test]
    fn mutated_real_replies_never_panic(
        flavor in prop::sample::select(FLAVORS.to_vec()),
        protocol in prop::sample::select(PROTOCOLS.to_vec()),
        name in prop::sample::select(vec!["read_new", "read_pending_deleted", "autoclaim", "read_pending_after_claim", "autoclaim_scan_cursor"]),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut bytes = fixture(flavor, protocol, name);
        for (at, b) in flips { let i = at.index(bytes.len()); bytes[i] = b; }
        bytes.truncate(cut.index(bytes.len() + 1));
        let now = origin();
        for prefix in [&b""[..], b"*2\r\n$3\r\n0-0\r\n*0\r\n"] {
            let mut c = Consumer::new(Config::new("s", "g", "c").protocol(protocol).no_client_name()).unwrap();
            c.on_connected(now);
            let _ = c.handle_input(prefix, now);
            let _ = c.handle_input(&bytes, now);
            while let Some(Event::Entry(e)) = c.poll_event() { c.settle(e.id(), Verdict::Ack, now); }
        }
    }
}
