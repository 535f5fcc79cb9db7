//! Random and mutated input never panics the simulator, and everything it writes is valid
//! RESP (checked with `redis-protocol`'s RESP3 decoder, which also accepts RESP2 frames).

mod common;

use common::encode;
use pelican_sim::{Sim, SimOptions};
use redis_protocol::resp3::decode::complete::decode;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const WORDS: &[&str] = &[
    "XADD",
    "XREADGROUP",
    "XAUTOCLAIM",
    "XACK",
    "XPENDING",
    "XGROUP",
    "CREATE",
    "DESTROY",
    "DELCONSUMER",
    "XDEL",
    "XTRIM",
    "XINFO",
    "GROUPS",
    "HELLO",
    "AUTH",
    "CLIENT",
    "SETNAME",
    "PING",
    "DEL",
    "FLUSHALL",
    "XLEN",
    "XNACK",
    "XACKDEL",
    "XCFGSET",
    "CLAIM",
    "MAXSIZE",
    "MAXCOUNT",
    "IDMP",
    "IDMPAUTO",
    "IDS",
    "FORCE",
    "RETRYCOUNT",
    "DELREF",
    "ACKED",
    "IDMP-MAXSIZE",
    "GROUP",
    "COUNT",
    "BLOCK",
    "STREAMS",
    "NOACK",
    "JUSTID",
    "IDLE",
    "MAXLEN",
    "MINID",
    "~",
    "=",
    "MKSTREAM",
    "s",
    "g",
    "A",
    "B",
    ">",
    "$",
    "*",
    "0",
    "-",
    "+",
    "(1-0",
    "1-0",
    "2-*",
    "3",
    "-5",
    "18446744073709551615-18446744073709551615",
    "99999999999999999999",
    "",
    "2",
    "10",
];

fn check_output(bytes: &[u8]) {
    let mut rest = bytes;
    while !rest.is_empty() {
        match decode(rest) {
            Ok(Some((_, n))) if n > 0 => rest = &rest[n..],
            other => panic!("invalid output {other:?}: {:?}", String::from_utf8_lossy(bytes)),
        }
    }
}

#[test]
fn random_bytes_and_random_commands() {
    for seed in 1..=300u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let options = match seed % 4 {
            0 => SimOptions::redis62(),
            1 => SimOptions::redis70(),
            2 => SimOptions::redis810(),
            _ => SimOptions::valkey81().with_requirepass("p"),
        };
        let mut sim = Sim::new(options);
        let conns = [sim.connect(), sim.connect()];
        for _ in 0..200 {
            let c = conns[rng.below(2) as usize];
            let bytes = match rng.below(4) {
                0 => (0..rng.below(40)).map(|_| rng.below(256) as u8).collect::<Vec<u8>>(),
                1 => {
                    let n = 1 + rng.below(9);
                    let words: Vec<&str> =
                        (0..n).map(|_| WORDS[rng.below(WORDS.len() as u64) as usize]).collect();
                    format!("{}\r\n", words.join(" ")).into_bytes()
                }
                _ => {
                    let n = 1 + rng.below(12);
                    let args: Vec<&[u8]> =
                        (0..n).map(|_| WORDS[rng.below(WORDS.len() as u64) as usize].as_bytes()).collect();
                    let mut bytes = encode(&args);
                    if rng.below(10) == 0 {
                        let at = rng.below(bytes.len() as u64) as usize;
                        bytes[at] = rng.below(256) as u8;
                    }
                    bytes
                }
            };
            sim.input(c, &bytes);
            if rng.below(5) == 0 {
                let to = sim.now() + rng.below(2000);
                sim.advance_to(to);
            }
            let out = sim.output(c);
            check_output(&out);
            if sim.is_closed(c) && rng.below(2) == 0 {
                sim.disconnect(c);
            }
        }
    }
}
