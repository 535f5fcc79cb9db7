//! `pelican produce`: pipelined `XADD`s of test entries.

use std::time::Instant;

use crate::args::{Args, Failure};
use crate::client::{self, Client, Redirect, Reply};
use crate::server::ServerArgs;

/// `pelican produce --help`.
pub const USAGE: &str = "\
Usage: pelican produce --stream KEY --count N [--size BYTES] [--url URL]
                      [--tls-ca FILE] [--tls-cert FILE --tls-key FILE]

Appends N entries to the stream KEY (XADD KEY * p <value>), pipelined 1000 at a time, each
with one field `p` whose value is BYTES bytes (a run of `x`), then prints how many were
added and the rate. In a Redis/Valkey Cluster, any node's URL will do: the entries go to the
node serving KEY (MOVED and ASK are followed).

Options:
  --stream KEY    the stream key (required)
  --count N       how many entries (required, at least 1)
  --size BYTES    size of each value [16]
  --url URL       redis://[user[:password]@]host[:port][/db], or rediss://… for TLS;
                  for a cluster, any node's URL
                  [default: $PELICAN_URL, else redis://127.0.0.1:6379]
  --tls-ca FILE   rediss://: trust the CA certificates in FILE (PEM) instead of the
                  system's root certificates
  --tls-cert FILE, --tls-key FILE
                  rediss://: present this client certificate and key (PEM; both or neither)
  -h, --help

Exit status: 0 all added, 1 the server failed or refused, or TLS failed, 2 bad usage.";

/// Commands per pipelined write.
const CHUNK: u64 = 1000;

/// Runs `produce`: the `XADD`s, then the count and rate.
pub fn main(mut args: Args) -> Result<(), Failure> {
    let (mut stream, mut count, mut size, mut server_args) = (None, None, 16usize, ServerArgs::default());
    while let Some(flag) = args.next_flag()? {
        match flag.as_str() {
            "--stream" => stream = Some(args.value()?),
            "--count" => count = Some(args.number(1u64)?),
            "--size" => size = args.number(0usize)?,
            _ if server_args.take(&flag, &mut args)? => {}
            _ => return Err(args.unknown(&flag)),
        }
    }
    let stream = args.required(stream, "--stream")?;
    let count = count.ok_or_else(|| args.error("--count is required"))?;
    let server = server_args.into_server(&args)?;
    let mut client = Client::connect(&server).map_err(Failure::Failed)?;
    let value = vec![b'x'; size];
    let start = Instant::now();
    let mut out = Vec::new();
    let mut done = 0u64;
    while done < count {
        let n = CHUNK.min(count - done);
        out.clear();
        for _ in 0..n {
            client::encode(&mut out, &[b"XADD", stream.as_bytes(), b"*", b"p", &value]);
        }
        client.write(&out).map_err(Failure::Failed)?;
        let (mut refused, mut moved, mut asked) = (None, 0, 0);
        for _ in 0..n {
            // Read every reply, so the count printed on failure is exact.
            let reply = client.read().map_err(Failure::Failed)?;
            match (client::redirect(&reply), reply) {
                (Some(Redirect::Moved { .. }), _) => moved += 1,
                (Some(Redirect::Ask { .. }), _) => asked += 1,
                (None, Reply::Error(e)) => refused = refused.or(Some(e)),
                (None, _) => done += 1,
            }
        }
        if let Some(e) = refused {
            return Err(Failure::Failed(format!("XADD {stream} refused after {done} entries: {e}")));
        }
        // A cluster node that does not serve the stream. After a MOVED, one XADD through
        // `call` follows it, and the next pipelines go to the new node. Entries refused with
        // ASK (the slot is being migrated) go one by one through `call`, to the node asked.
        for _ in 0..asked + moved.min(1) {
            client
                .call(&[b"XADD", stream.as_bytes(), b"*", b"p", &value])
                .map_err(|e| Failure::Failed(format!("XADD {stream} refused after {done} entries: {e}")))?;
            done += 1;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "produced {done} entries to {stream} ({size}-byte values) in {secs:.3} s: {:.0} entries/s",
        done as f64 / secs.max(1e-9)
    );
    Ok(())
}
