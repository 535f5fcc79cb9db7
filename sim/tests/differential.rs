//! Differential test: seeded random command sequences run against the simulator and against
//! each real server (Redis 6.2, Redis 7.0, Valkey 8.1, Redis 8.10), in RESP2 and RESP3; every
//! reply must match byte for byte after normalisation. On Redis 8.10 about a third of the mix
//! is its new verbs (`XREADGROUP … CLAIM/MAXSIZE/MAXCOUNT`, `XNACK`, `XACKDEL`, `XADD …
//! IDMP/IDMPAUTO/KEEPREF/DELREF/ACKED`, `XCFGSET`); the older servers get a few of them too,
//! to compare how they refuse them.
//!
//! Normalisations (applied to both sides):
//! - the idle field of extended `XPENDING` rows is replaced by 0 (wall-clock timing), unless
//!   it is -1 (an entry released by `XNACK`);
//! - so is the idle field of `XREADGROUP … CLAIM` entries;
//! - `XADD … *` ids on the idempotent-append key (`s3`) are numbered by first appearance on
//!   each side (they come from each side's clock);
//! - in `XINFO GROUPS` replies (Redis 7.0 and Valkey), the values of `entries-read` and
//!   `lag` are replaced by a placeholder: the simulator's are approximations (see the crate
//!   docs). Names, consumers, pending and last-delivered-id are compared exactly.
//!
//! Timing is kept out of the comparison by construction: `XAUTOCLAIM`, `XCLAIM` and `CLAIM`
//!   use min-idle 0 or 3600000 only, `XPENDING … IDLE` and `XCLAIM … IDLE` 0 or 3600000 only, and the only `BLOCK`
//!   is `BLOCK 10` (a parked simulator is advanced to its deadline, the server answers after
//!   its own timeout); `WAIT 1 1` parks the same way (no replica: 0 after the timeout). The
//!   `HELLO 3` reply is not compared (it names the server). `ROLE` is compared byte for byte
//!   on 6.2 and 7.0 (a server that never had a replica answers `[master, 0, []]`), and but
//!   for its offset on Valkey 8.1 and Redis 8.10, which move it by 1 when a `WAIT` asks for
//!   replicas they do not have (the sim keeps 0).
//!
//! Ids are explicit and increasing (`<n>-<seq>`), so both sides assign the same ones.

mod common;

use common::{encode, sim_options, zero_pending_idle, Remote};
use pelican_sim::Sim;
use pelican_tests::server::{Flavor, Server};

/// Seeds per server and protocol; `PELICAN_SIM_DIFF_SEEDS` overrides it.
const SEEDS: u64 = 40;

fn seeds() -> u64 {
    std::env::var("PELICAN_SIM_DIFF_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(SEEDS)
}
const COMMANDS: usize = 150;

/// A small deterministic generator (SplitMix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

const KEYS: [&str; 2] = ["s1", "s2"];
const GROUPS: [&str; 2] = ["g1", "g2"];
const CONSUMERS: [&str; 3] = ["A", "B", "C"];

/// Generator state: the next entry number per key, the last XAUTOCLAIM cursors seen.
struct Gen {
    rng: Rng,
    top: [u64; 2],
    cursors: Vec<String>,
    /// Whether the server speaks the Redis 8 verbs (Redis 8.10): they then make up a good
    /// part of the mix; the older servers get a few, to compare their refusals.
    redis8: bool,
}

/// The key that only idempotent appends (`XADD … *`) write: its ids come from each side's
/// clock, so they are compared by order of first appearance, and no explicit id touches it.
const IDMP_KEY: &str = "s3";

impl Gen {
    fn key(&mut self) -> (usize, &'static str) {
        let k = self.rng.below(2) as usize;
        (k, KEYS[k])
    }

    /// An id near the stream's range: existing, deleted or never-used.
    fn some_id(&mut self, k: usize) -> String {
        let n = 1 + self.rng.below(self.top[k] + 2);
        format!("{n}-{}", self.rng.below(2))
    }

    fn command(&mut self) -> Vec<String> {
        let (k, key) = self.key();
        let group = self.rng.pick(&GROUPS);
        let consumer = self.rng.pick(&CONSUMERS);
        let w = |s: &str| s.to_string();
        let mut cmd: Vec<String>;
        if self.rng.chance(if self.redis8 { 35 } else { 3 }) {
            return self.redis8_command(k, key, group, consumer);
        }
        match self.rng.below(112) {
            0..=19 => {
                cmd = vec![w("XADD"), w(key)];
                if self.rng.chance(10) {
                    cmd.extend([w("MAXLEN"), w("="), (3 + self.rng.below(8)).to_string()]);
                }
                if self.rng.chance(4) && self.top[k] > 1 {
                    cmd.push(format!("{}-0", self.top[k] - 1)); // too small (or a new key)
                } else {
                    self.top[k] += 1 + self.rng.below(2);
                    cmd.push(format!("{}-{}", self.top[k], self.rng.below(2)));
                }
                for i in 0..1 + self.rng.below(2) {
                    cmd.extend([format!("f{i}"), format!("v{}", self.rng.below(100))]);
                }
            }
            20..=24 => {
                cmd = vec![w("XGROUP"), w("CREATE"), w(key), w(group), w(self.rng.pick(&["0", "$", "0-0"]))];
                if self.rng.chance(70) {
                    cmd.push(w("MKSTREAM"));
                }
            }
            25..=38 => {
                cmd = vec![w("XREADGROUP"), w("GROUP"), w(group), w(consumer)];
                if self.rng.chance(70) {
                    cmd.extend([w("COUNT"), self.rng.below(5).to_string()]);
                }
                if self.rng.chance(12) {
                    cmd.extend([w("BLOCK"), w("10")]);
                }
                if self.rng.chance(5) {
                    cmd.push(w("NOACK"));
                }
                cmd.extend([w("STREAMS"), w(key), w(">")]);
            }
            39..=50 => {
                cmd = vec![w("XREADGROUP"), w("GROUP"), w(group), w(consumer)];
                if self.rng.chance(70) {
                    cmd.extend([w("COUNT"), self.rng.below(4).to_string()]);
                }
                let id = if self.rng.chance(50) { w("0") } else { self.some_id(k) };
                cmd.extend([w("STREAMS"), w(key), id]);
            }
            51..=61 => {
                let idle = self.rng.pick(&["0", "3600000"]);
                let start = match self.rng.below(3) {
                    0 => w("0-0"),
                    1 if !self.cursors.is_empty() => {
                        self.cursors[self.rng.below(self.cursors.len() as u64) as usize].clone()
                    }
                    _ => self.some_id(k),
                };
                cmd = vec![w("XAUTOCLAIM"), w(key), w(group), w(consumer), w(idle), start];
                if self.rng.chance(60) {
                    cmd.extend([w("COUNT"), self.rng.pick(&["0", "1", "2", "3", "100"]).to_string()]);
                }
                if self.rng.chance(20) {
                    cmd.push(w("JUSTID"));
                }
            }
            62..=69 => {
                cmd = vec![w("XACK"), w(key), w(group)];
                for _ in 0..1 + self.rng.below(3) {
                    let id = self.some_id(k);
                    cmd.push(id);
                }
            }
            70..=74 => {
                cmd = vec![w("XDEL"), w(key)];
                for _ in 0..1 + self.rng.below(2) {
                    let id = self.some_id(k);
                    cmd.push(id);
                }
            }
            75..=77 => {
                cmd = vec![w("XTRIM"), w(key), w("MAXLEN")];
                if self.rng.chance(50) {
                    cmd.push(w("="));
                }
                cmd.push(self.rng.below(8).to_string());
            }
            78..=82 => cmd = vec![w("XPENDING"), w(key), w(group)],
            83..=88 => {
                cmd = vec![w("XPENDING"), w(key), w(group)];
                if self.rng.chance(40) {
                    cmd.extend([w("IDLE"), w(self.rng.pick(&["0", "3600000"]))]);
                }
                let start = if self.rng.chance(60) { w("-") } else { self.some_id(k) };
                cmd.extend([start, w("+"), self.rng.below(6).to_string()]);
                if self.rng.chance(40) {
                    cmd.push(w(consumer));
                }
            }
            89..=91 => cmd = vec![w("XGROUP"), w("DELCONSUMER"), w(key), w(group), w(consumer)],
            92 => cmd = vec![w("XGROUP"), w("DESTROY"), w(key), w(group)],
            93 => cmd = vec![w("DEL"), w(key)],
            94 => cmd = vec![w("XLEN"), w(key)],
            // No replica: WAIT 1 answers 0 after its 1 ms (the sim parks, and is advanced),
            // WAIT 0 at once; ROLE names no replica, at offset 0 (no backlog, none ever).
            95 => {
                cmd = match self.rng.below(3) {
                    0 => vec![w("WAIT"), w("1"), w("1")],
                    1 => vec![w("WAIT"), w("0"), w("1")],
                    _ => vec![w("ROLE")],
                }
            }
            96..=99 => cmd = vec![w("XINFO"), w("GROUPS"), w(key)],
            100..=107 => {
                cmd = vec![w("XCLAIM"), w(key), w(group), w(consumer), w(self.rng.pick(&["0", "3600000"]))];
                for _ in 0..1 + self.rng.below(3) {
                    let id = self.some_id(k);
                    cmd.push(id);
                }
                if self.rng.chance(30) {
                    cmd.extend([w("IDLE"), w(self.rng.pick(&["0", "3600000"]))]);
                }
                if self.rng.chance(30) {
                    cmd.extend([w("RETRYCOUNT"), self.rng.below(5).to_string()]);
                }
                if self.rng.chance(50) {
                    cmd.push(w("JUSTID"));
                }
            }
            _ => {
                let start = if self.rng.chance(50) { w("-") } else { self.some_id(k) };
                cmd = vec![w("XRANGE"), w(key), start, w("+")];
                if self.rng.chance(40) {
                    cmd.extend([w("COUNT"), self.rng.below(4).to_string()]);
                }
            }
        }
        cmd
    }

    /// One of the Redis 8 verbs or options.
    fn redis8_command(&mut self, k: usize, key: &str, group: &str, consumer: &str) -> Vec<String> {
        let w = |s: &str| s.to_string();
        let mut cmd: Vec<String>;
        match self.rng.below(100) {
            0..=34 => {
                cmd = vec![w("XREADGROUP"), w("GROUP"), w(group), w(consumer)];
                if self.rng.chance(70) {
                    cmd.extend([w("COUNT"), self.rng.below(5).to_string()]);
                }
                if self.rng.chance(85) {
                    // 0 takes every pending entry; 3600000 only released ones and those an
                    // `XCLAIM … IDLE 3600000` aged.
                    cmd.extend([w("CLAIM"), w(self.rng.pick(&["0", "3600000", "3600000", "-1"]))]);
                }
                if self.rng.chance(15) {
                    cmd.extend([w("BLOCK"), w("10")]);
                }
                if self.rng.chance(30) {
                    cmd.extend([w("MAXSIZE"), w(self.rng.pick(&["1", "40", "70", "120", "0"]))]);
                }
                if self.rng.chance(20) {
                    cmd.extend([w("MAXCOUNT"), w(self.rng.pick(&["1", "2", "5"]))]);
                }
                if self.rng.chance(5) {
                    cmd.push(w("NOACK"));
                }
                let id = if self.rng.chance(85) { w(">") } else { w("0") };
                cmd.extend([w("STREAMS"), w(key), id]);
            }
            35..=54 => {
                cmd = vec![
                    w("XNACK"),
                    w(key),
                    w(group),
                    w(self.rng.pick(&["SILENT", "FAIL", "FATAL", "FAIL", "LOUD"])),
                ];
                let n = 1 + self.rng.below(3);
                cmd.extend([w("IDS"), n.to_string()]);
                for _ in 0..n {
                    let id = self.some_id(k);
                    cmd.push(id);
                }
                if self.rng.chance(20) {
                    cmd.extend([w("RETRYCOUNT"), self.rng.below(4).to_string()]);
                }
                if self.rng.chance(20) {
                    cmd.push(w("FORCE"));
                }
            }
            55..=66 => {
                cmd = vec![w("XACKDEL"), w(key), w(group)];
                if self.rng.chance(70) {
                    cmd.push(w(self.rng.pick(&["KEEPREF", "DELREF", "ACKED"])));
                }
                let n = 1 + self.rng.below(3);
                cmd.extend([w("IDS"), n.to_string()]);
                for _ in 0..n {
                    let id = self.some_id(k);
                    cmd.push(id);
                }
            }
            67..=84 => {
                cmd = vec![w("XADD"), w(IDMP_KEY)];
                let pid = w(self.rng.pick(&["p1", "p2"]));
                if self.rng.chance(60) {
                    cmd.extend([w("IDMP"), pid, format!("i{}", self.rng.below(4))]);
                } else if self.rng.chance(80) {
                    cmd.extend([w("IDMPAUTO"), pid]);
                }
                cmd.extend([w("*"), w("f"), format!("v{}", self.rng.below(3))]);
            }
            85..=87 => {
                cmd = vec![w("XCFGSET"), w(IDMP_KEY)];
                if self.rng.chance(60) {
                    cmd.extend([w("IDMP-MAXSIZE"), w(self.rng.pick(&["1", "2", "100", "0"]))]);
                }
                if self.rng.chance(40) {
                    cmd.extend([w("IDMP-DURATION"), w(self.rng.pick(&["100", "50"]))]);
                }
            }
            88..=89 => cmd = vec![w("XLEN"), w(IDMP_KEY)],
            90..=91 => {
                // IDMP with an explicit id is refused.
                cmd = vec![w("XADD"), w(key), w("IDMP"), w("p1"), w("i1")];
                self.top[k] += 1;
                cmd.extend([format!("{}-0", self.top[k]), w("f"), w("v")]);
            }
            _ => {
                cmd = vec![w("XTRIM"), w(key), w("MAXLEN")];
                cmd.push(self.rng.below(8).to_string());
                cmd.push(w(self.rng.pick(&["KEEPREF", "DELREF", "ACKED"])));
            }
        }
        cmd
    }

    /// Remembers the cursor of an XAUTOCLAIM reply.
    fn saw_reply(&mut self, cmd: &[String], reply: &[u8]) {
        if cmd[0] != "XAUTOCLAIM" || reply.first() != Some(&b'*') {
            return;
        }
        let text = String::from_utf8_lossy(reply);
        if let Some(cursor) = text.split("\r\n").nth(2) {
            if cursor != "0-0" && !self.cursors.iter().any(|c| c == cursor) {
                self.cursors.push(cursor.to_string());
            }
        }
    }
}

/// Replaces the idle field of `XREADGROUP … CLAIM` entries (`*4 $id *2n fields… :idle
/// :count`) by `:0`.
fn zero_claim_idle(reply: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(reply).into_owned();
    let mut parts: Vec<String> = text.split("\r\n").map(str::to_string).collect();
    let mut i = 0;
    while i + 3 < parts.len() {
        let fields = parts[i + 3].strip_prefix('*').and_then(|n| n.parse::<usize>().ok());
        match fields {
            Some(n) if parts[i] == "*4" && parts[i + 1].starts_with('$') => {
                let idle = i + 4 + 2 * n;
                if parts.get(idle).is_some_and(|p| p.starts_with(':')) {
                    parts[idle] = ":0".into();
                }
                i = idle + 2;
            }
            _ => i += 1,
        }
    }
    parts.join("\r\n").into_bytes()
}

/// Replaces the entry id in an `XADD` reply on [`IDMP_KEY`] by its order of first
/// appearance on this side (`ids` remembers them).
fn number_id(reply: &[u8], ids: &mut Vec<Vec<u8>>) -> Vec<u8> {
    if reply.first() != Some(&b'$') || reply.starts_with(b"$-1") {
        return reply.to_vec();
    }
    let n = ids.iter().position(|id| id == reply).unwrap_or_else(|| {
        ids.push(reply.to_vec());
        ids.len() - 1
    });
    format!("<id #{n}>").into_bytes()
}

fn normalise(cmd: &[String], reply: &[u8]) -> Vec<u8> {
    if cmd[0] == "XREADGROUP" && cmd.iter().any(|a| a == "CLAIM") {
        zero_claim_idle(reply)
    } else if cmd[0] == "XPENDING" && cmd.len() > 3 {
        zero_pending_idle(reply)
    } else if cmd[0] == "XINFO" {
        let text = String::from_utf8_lossy(reply).into_owned();
        let mut parts: Vec<&str> = text.split("\r\n").collect();
        for i in 1..parts.len() {
            if parts[i - 1] == "entries-read" || parts[i - 1] == "lag" {
                parts[i] = "<approximate>";
            }
        }
        parts.join("\r\n").into_bytes()
    } else {
        reply.to_vec()
    }
}

/// A `ROLE` reply of a master with its offset blanked.
fn blank_offset(reply: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(reply).into_owned();
    let mut parts: Vec<&str> = text.split("\r\n").collect();
    if parts.len() > 3 && parts[3].starts_with(':') {
        parts[3] = ":<offset>";
    }
    parts.join("\r\n").into_bytes()
}

fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).replace("\r\n", " ")
}

/// What the Redis 8 part of the mix reached on the real server (so that a quiet mix cannot
/// pass for a match).
#[derive(Debug, Default)]
struct Reached {
    /// `CLAIM` reads that answered entries.
    claim_reads: usize,
    /// `XNACK`s that released something.
    released: usize,
    /// `XACKDEL` ids deleted (1) or kept as still referenced (2).
    ackdel: [usize; 2],
    /// Idempotent appends answered with an earlier id.
    deduplicated: usize,
    /// `MAXSIZE` reads that answered entries.
    maxsize_reads: usize,
    /// `ROLE`, `WAIT 0` and `WAIT 1` compared.
    role: usize,
    wait: [usize; 2],
}

impl Reached {
    fn saw(&mut self, cmd: &[String], reply: &str, ids_before: usize, ids_after: usize) {
        let has = |w: &str| cmd.iter().any(|a| a == w);
        match cmd[0].as_str() {
            "XREADGROUP" if reply.contains("\r\n*4\r\n") && has("CLAIM") => self.claim_reads += 1,
            "XREADGROUP" if has("MAXSIZE") && !reply.starts_with('-') && reply.len() > 20 => {
                self.maxsize_reads += 1
            }
            "XNACK" if reply.starts_with(':') && reply != ":0\r\n" => self.released += 1,
            "XACKDEL" => {
                self.ackdel[0] += reply.matches(":1\r\n").count();
                self.ackdel[1] += reply.matches(":2\r\n").count();
            }
            "XADD" if cmd[1] == IDMP_KEY && reply.starts_with('<') && ids_before == ids_after => {
                self.deduplicated += 1
            }
            "ROLE" => self.role += 1,
            "WAIT" => self.wait[usize::from(cmd[1] == "1")] += 1,
            _ => {}
        }
    }
}

/// Runs one seeded sequence; returns how many commands it compared.
fn run_seed(server: &Server, flavor: Flavor, resp3: bool, seed: u64, reached: &mut Reached) -> usize {
    let mut remote = Remote::connect(server);
    let mut sim = Sim::new(sim_options(flavor));
    let c = sim.connect();
    // The servers' clocks are far from 0: so is the sim's (an `XCLAIM … IDLE 3600000`
    // then dates a delivery before the others, as on the servers).
    sim.advance_to(1_000_000_000);
    let redis8 = flavor == Flavor::Redis810;
    let mut gen = Gen { rng: Rng(seed * 7919 + resp3 as u64), top: [0, 0], cursors: Vec::new(), redis8 };
    let (mut want_ids, mut got_ids) = (Vec::new(), Vec::new());
    let mut history: Vec<String> = Vec::new();
    let mut script: Vec<Vec<String>> = Vec::new();
    if resp3 {
        script.push(vec!["HELLO".into(), "3".into()]);
    }
    script.push(vec!["FLUSHALL".into()]);
    let mut compared = 0;
    for i in 0..COMMANDS + script.len() {
        let cmd = if i < script.len() { script[i].clone() } else { gen.command() };
        let args: Vec<&[u8]> = cmd.iter().map(|s| s.as_bytes()).collect();
        let bytes = encode(&args);
        let want = remote.call(&bytes);
        sim.input(c, &bytes);
        // A parked read times out, or looks again for idle entries (`CLAIM`) until then.
        while sim.is_blocked(c) {
            let Some(at) = sim.next_wakeup() else { break };
            sim.advance_to(at);
        }
        let (mut want, mut got) = (want, sim.output(c));
        let ids_before = want_ids.len();
        if cmd[0] == "XADD" && cmd[1] == IDMP_KEY {
            want = number_id(&want, &mut want_ids);
            got = number_id(&got, &mut got_ids);
        }
        reached.saw(&cmd, &String::from_utf8_lossy(&want), ids_before, want_ids.len());
        history.push(cmd.join(" "));
        if cmd[0] == "HELLO" {
            continue;
        }
        gen.saw_reply(&cmd, &got);
        let (mut want_n, mut got_n) = (normalise(&cmd, &want), normalise(&cmd, &got));
        if cmd[0] == "ROLE" && matches!(flavor, Flavor::Valkey81 | Flavor::Redis810) {
            // 7.2+ move the offset of a master without replicas by 1 when a WAIT asks them
            // for an ack (the sim keeps it at 0): its value is not compared there.
            want_n = blank_offset(&want_n);
            got_n = blank_offset(&got_n);
        }
        if want_n != got_n {
            let start = 0;
            panic!(
                "{flavor} {} seed {seed}: command #{i} `{}` differs\n  server: {}\n  sim:    {}\n\
                 previous commands:\n    {}",
                if resp3 { "RESP3" } else { "RESP2" },
                cmd.join(" "),
                show(&want),
                show(&got),
                history[start..history.len() - 1].join("\n    ")
            );
        }
        compared += 1;
    }
    compared
}

fn run_flavor(flavor: Flavor) -> usize {
    let server = Server::start(flavor);
    let mut total = 0;
    let mut reached = Reached::default();
    for resp3 in [false, true] {
        for seed in 0..seeds() {
            total += run_seed(&server, flavor, resp3, seed, &mut reached);
        }
    }
    eprintln!("differential: {flavor}: {total} commands compared (RESP2 + RESP3, {} seeds each)", seeds());
    let r = &reached;
    assert!(
        r.role > 0 && r.wait.iter().all(|&n| n > 0),
        "{flavor}: the mix missed ROLE or WAIT: {reached:?}"
    );
    if flavor == Flavor::Redis810 {
        eprintln!("differential: {flavor}: the Redis 8 verbs reached {reached:?}");
        let r = &reached;
        let all = [r.claim_reads, r.released, r.ackdel[0], r.ackdel[1], r.deduplicated, r.maxsize_reads];
        assert!(all.iter().all(|&n| n > 0), "{flavor}: the mix missed a Redis 8 case: {reached:?}");
    }
    total
}

#[test]
fn sim_matches_real_servers() {
    let handles: Vec<_> = Flavor::ALL
        .into_iter()
        .map(|flavor| {
            std::thread::Builder::new()
                .name(flavor.name().to_string())
                .spawn(move || run_flavor(flavor))
                .expect("spawn")
        })
        .collect();
    let mut failed = Vec::new();
    for (flavor, h) in Flavor::ALL.into_iter().zip(handles) {
        if h.join().is_err() {
            failed.push(flavor.name());
        }
    }
    assert!(failed.is_empty(), "the simulator differs from: {failed:?}");
}
