//! The core alone, no sockets: decode a captured 1,000-entry `XREADGROUP` reply, hand out
//! every entry, settle each with `Ack`, encode the `XACK` and the next read — over and over.
//! Prints ns and allocations per entry (a counting allocator), with the reply fed whole and
//! in 4 KiB pieces (decoding must stay linear under any split).
//!
//! ```text
//! cargo run --release -p pelican-bench --bin core [-- --entries 1000 --batches 200 --runs 15]
//! ```

#[path = "../raw.rs"]
#[allow(dead_code)]
mod raw;

use std::alloc::System;
use std::hint::black_box;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use clap::Parser;
use pelican::{Config, Consumer, Event, Verdict};
use pelican_tests::server::{Flavor, Server};
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Per-entry cost of the sans-IO core on a captured reply.
#[derive(Parser, Debug)]
#[command(about)]
struct Args {
    /// Entries per reply (COUNT).
    #[arg(long, default_value_t = 1000)]
    entries: usize,
    /// Replies handled per measurement.
    #[arg(long, default_value_t = 200)]
    batches: usize,
    /// Bytes of the one field of each entry.
    #[arg(long, default_value_t = 16)]
    field_size: usize,
    /// Measurements of each kind (whole, pieces), interleaved.
    #[arg(long, default_value_t = 15)]
    runs: usize,
}

fn main() {
    let args = Args::parse();
    let reply = capture(args.entries, args.field_size);
    println!(
        "core: a {}-entry reply of {} bytes (Redis 7.0, RESP2), {} replies per run, {} runs; min / median",
        args.entries,
        reply.len(),
        args.batches,
        args.runs
    );
    // Interleaved, so that a noisy stretch of the machine hits both alike.
    let (mut whole, mut pieces) = (Vec::new(), Vec::new());
    let mut allocs = (0.0f64, 0.0f64);
    for _ in 0..args.runs {
        let (ns, a) = run(&reply, reply.len(), args.entries, args.batches);
        whole.push(ns);
        allocs.0 = allocs.0.max(a);
        let (ns, a) = run(&reply, 4096, args.entries, args.batches);
        pieces.push(ns);
        allocs.1 = allocs.1.max(a);
    }
    let (w, p) = (min_median(&mut whole), min_median(&mut pieces));
    println!("  fed whole         {:>6.1} / {:>6.1} ns/entry  {:.3} allocations/entry", w.0, w.1, allocs.0);
    println!("  fed 4 KiB pieces  {:>6.1} / {:>6.1} ns/entry  {:.3} allocations/entry", p.0, p.1, allocs.1);
    println!("  pieces / whole    {:.2}× (min)  {:.2}× (median)", p.0 / w.0, p.1 / w.1);
}

fn min_median(v: &mut [f64]) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[0], v[v.len() / 2])
}

/// A real reply to `XREADGROUP … COUNT n STREAMS s >`, captured from Redis 7.0.
fn capture(n: usize, field_size: usize) -> Vec<u8> {
    let server = Server::start(Flavor::Redis70);
    let mut admin = server.admin();
    admin.call(&["XGROUP", "CREATE", "s", "g", "0", "MKSTREAM"]);
    admin.xadd_n("s", n, field_size);
    let mut sock = TcpStream::connect(server.addr()).expect("connect");
    let count = n.to_string();
    let args = ["XREADGROUP", "GROUP", "g", "c", "COUNT", &count, "STREAMS", "s", ">"];
    let mut cmd = format!("*{}\r\n", args.len());
    for a in args {
        cmd += &format!("${}\r\n{a}\r\n", a.len());
    }
    sock.write_all(cmd.as_bytes()).expect("write");
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 1 << 16];
    loop {
        let got = sock.read(&mut chunk).expect("read");
        assert!(got > 0, "the server closed the connection");
        buf.extend_from_slice(&chunk[..got]);
        if raw::frame_end(&buf, 0).is_some_and(|end| end == buf.len()) {
            return buf;
        }
    }
}

/// Runs `batches` replies through a consumer, answering what it writes as a server would:
/// each `XREADGROUP` with the captured reply (fed in `piece`-byte reads), each `XACK` with
/// its count. Returns ns and allocations per entry handed out.
fn run(reply: &[u8], piece: usize, entries: usize, batches: usize) -> (f64, f64) {
    // No connection name: the scripted opening answers the drain and the sweep only.
    // The full count from the first read: the scripted server answers every read with the
    // whole captured reply.
    let count = entries as u32;
    let config = Config::new("s", "g", "c").count(count).start_count(count).no_client_name();
    let mut c = Consumer::new(config).expect("a valid config");
    // Virtual time: it never moves, so no timer fires (the beat, leases, ack delays).
    let now = Instant::now();
    c.on_connected(now);
    // `HELLO`'s answer (a Redis 7.0: the classic verbs), an empty page and its XPENDING.
    let drain_page = b"*4\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n\
                       *1\r\n*2\r\n$1\r\ns\r\n*0\r\n*0\r\n";
    let swept = b"*3\r\n$3\r\n0-0\r\n*0\r\n*0\r\n";
    for input in [&drain_page[..], swept] {
        take_output(&mut c, &mut Vec::new());
        c.handle_input(input, now).expect("the opening");
    }
    // The end of every read for new entries, parked or not.
    let read = b"$7\r\nSTREAMS\r\n$1\r\ns\r\n$1\r\n>\r\n";
    let (mut written, mut handed, mut replies) = (Vec::new(), 0usize, 0usize);
    let region = Region::new(GLOBAL);
    let started = Instant::now();
    while replies < batches {
        take_output(&mut c, &mut written);
        // What a batch writes: the acks earned (`*<n>\r\n$4\r\nXACK…`, n - 3 ids), then the
        // next read. Told apart by their first bytes, so that the bench does not scan them.
        if let Some(ids) = acked_ids(&written) {
            c.handle_input(format!(":{ids}\r\n").as_bytes(), now).expect("the XACK reply");
        }
        if written.ends_with(read) {
            replies += 1;
            for part in reply.chunks(piece) {
                c.handle_input(part, now).expect("the reply");
            }
        }
        written.clear();
        while let Some(event) = c.poll_event() {
            let Event::Entry(entry) = event else { continue };
            black_box(&entry);
            handed += 1;
            c.settle(entry.id(), Verdict::Ack, now);
        }
    }
    let took = started.elapsed();
    let allocs = region.change().allocations;
    // The acks of the last batches wait for the reads ahead to be answered.
    assert!(c.stats().acked as usize >= handed.saturating_sub(3 * entries), "{:?}", c.stats());
    (took.as_nanos() as f64 / handed as f64, allocs as f64 / handed as f64)
}

/// How many ids the `XACK` at the front of `written` acks, if one is there.
fn acked_ids(written: &[u8]) -> Option<usize> {
    let header = written.iter().position(|b| *b == b'\r')?;
    if !written[header..].starts_with(b"\r\n$4\r\nXACK\r\n") {
        return None;
    }
    let n: usize = std::str::from_utf8(&written[1..header]).ok()?.parse().ok()?;
    Some(n - 3)
}

/// What a transport does with the output: writes it all (here, keeps it to answer).
fn take_output(c: &mut Consumer, written: &mut Vec<u8>) {
    if let Some(bytes) = c.poll_transmit() {
        written.extend_from_slice(bytes);
        let n = bytes.len();
        c.advance_transmit(n);
    }
}
