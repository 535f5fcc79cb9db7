//! `pelican produce`: pipelined `XADD`s of test entries.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::time::Instant;

use clap::value_parser;

use crate::args::{Failure, TEMPLATE};
use crate::client::{self, Client, Redirect, Reply};
use crate::name::show;
use crate::server::ServerArgs;

const USAGE: &str = "\
pelican produce --stream KEY --count N [--size BYTES] [--url URL]
                      [--tls-ca FILE] [--tls-cert FILE --tls-key FILE]";

const ABOUT: &str = "\
Appends N entries to the stream KEY (XADD KEY * p <value>), pipelined up to 1000 at a time
(fewer when values are big), each with one field `p` whose value is BYTES bytes (a run of
`x`), then prints how many were added and the rate. In a Redis/Valkey Cluster, any node's
URL will do: the entries go to the node serving KEY (MOVED and ASK are followed).";

const AFTER: &str = "\
Exit status: 0 all added, 1 the server failed or refused, or TLS failed, 2 bad usage (a bad
URL, a host that does not resolve).";

/// The most entries one run adds.
const MAX_COUNT: u64 = 1_000_000_000;

/// The largest value: 512 MiB, the most a server takes in one string by default
/// (`proto-max-bulk-len`).
const MAX_SIZE: u64 = 512 << 20;

/// `pelican produce`'s flags.
#[derive(clap::Args, Debug)]
#[command(override_usage = USAGE, before_help = ABOUT, after_help = AFTER, help_template = TEMPLATE)]
pub struct Args {
    /// the stream key (required)
    #[arg(long, value_name = "KEY")]
    stream: OsString,
    /// how many entries (required)
    #[arg(long, value_name = "N", value_parser = value_parser!(u64).range(1..=MAX_COUNT))]
    count: u64,
    /// size of each value, at most 536870912 (512 MiB, a server's default
    /// proto-max-bulk-len)
    #[arg(long, value_name = "BYTES", default_value_t = 16, value_parser = value_parser!(u64).range(0..=MAX_SIZE), verbatim_doc_comment)]
    size: u64,
    #[command(flatten)]
    pub(crate) server: ServerArgs,
}

/// Commands per pipelined write, at most.
const CHUNK: u64 = 1000;

/// Bytes of values per pipelined write, roughly: small values go 1000 at a time, big ones
/// fewer, the biggest alone. Values are not copied into the pipeline.
const CHUNK_BYTES: usize = 4 << 20;

/// Runs `produce`: the `XADD`s, then the count and rate.
pub fn main(args: Args) -> Result<(), Failure> {
    let (stream, count) = (args.stream.as_bytes(), args.count);
    let size =
        usize::try_from(args.size).map_err(|_| Failure::Bad("--size is too big for this machine".into()))?;
    let server = args.server.to_server()?;
    let mut client = Client::connect(&server, "pelican:produce").map_err(Failure::Failed)?;
    let value = vec![b'x'; size];
    let head = xadd_head(stream, size);
    let per_write = (CHUNK_BYTES / (head.len() + size + 2)).clamp(1, CHUNK as usize) as u64;
    let refused = |done: u64, e: String| {
        Failure::Failed(format!("XADD {} refused after {done} entries: {e}", show(stream)))
    };
    let start = Instant::now();
    let mut done = 0u64;
    while done < count {
        let n = per_write.min(count - done);
        let parts: Vec<&[u8]> = (0..n).flat_map(|_| [&head[..], &value, b"\r\n"]).collect();
        client.write(&parts).map_err(Failure::Failed)?;
        let (mut error, mut moved, mut asked) = (None, 0, 0);
        for _ in 0..n {
            // Read every reply, so the count printed on failure is exact.
            let reply = client.read().map_err(Failure::Failed)?;
            match (client::redirect(&reply), reply) {
                (Some(Redirect::Moved { .. }), _) => moved += 1,
                (Some(Redirect::Ask { .. }), _) => asked += 1,
                (None, Reply::Error(e)) => error = error.or(Some(e)),
                (None, _) => done += 1,
            }
        }
        if let Some(e) = error {
            return Err(refused(done, e));
        }
        // A cluster node that does not serve the stream. After a MOVED, one XADD through
        // `call` follows it, and the next pipelines go to the new node. Entries refused with
        // ASK (the slot is being migrated) go one by one through `call`, to the node asked.
        for _ in 0..asked + moved.min(1) {
            client.call(&[b"XADD", stream, b"*", b"p", &value]).map_err(|e| refused(done, e))?;
            done += 1;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "produced {done} entries to {} ({size}-byte values) in {secs:.3} s: {:.0} entries/s",
        show(stream),
        done as f64 / secs.max(1e-9)
    );
    Ok(())
}

/// `XADD stream * p` and the length of a `size`-byte value: the value and a CRLF follow.
fn xadd_head(stream: &[u8], size: usize) -> Vec<u8> {
    let mut head = Vec::new();
    // Encoded with an empty value, whose `$0\r\n\r\n` gives way to the real length.
    client::encode(&mut head, &[b"XADD", stream, b"*", b"p", b""]);
    head.truncate(head.len() - b"$0\r\n\r\n".len());
    head.extend_from_slice(format!("${size}\r\n").as_bytes());
    head
}
