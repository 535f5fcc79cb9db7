//! `pelican pending`: a group's pending entries list at a glance.

use crate::args::{Args, Failure};
use crate::client::{array, bytes, field, int, Client, Reply};
use crate::json::{self, Object};
use crate::server::ServerArgs;

/// `pelican pending --help`.
pub const USAGE: &str = "\
Usage: pelican pending --stream KEY [--stream KEY…] --group G [--url URL] [--json]
                      [--tls-ca FILE] [--tls-cert FILE --tls-key FILE]

Shows group G's pending entries list (entries delivered but not yet acknowledged) on each
stream KEY:
  - the total, and the id range;
  - per consumer: its pending count, the idle time of its oldest pending entry, and how
    long ago the server last heard from it (XINFO CONSUMERS `idle`);
  - the 10 oldest pending entries, with owner, idle time and delivery count;
  - the group's lag (entries not yet delivered), where the server reports it (XINFO GROUPS,
    Redis 7+/Valkey; unknown on Redis 6.2, and after some deletions).

In a Redis/Valkey Cluster, any node's URL will do (a replica too): each stream is asked
of the node serving it (MOVED and ASK are followed).

Options:
  --stream KEY   a stream key (required); repeat it for several streams, shown in turn
  --group G      the consumer group (required)
  --url URL      redis://[user[:password]@]host[:port][/db], or rediss://… for TLS;
                 for a cluster, any node's URL
                 [default: $PELICAN_URL, else redis://127.0.0.1:6379]
  --tls-ca FILE  rediss://: trust the CA certificates in FILE (PEM) instead of the
                 system's root certificates
  --tls-cert FILE, --tls-key FILE
                 rediss://: present this client certificate and key (PEM; both or neither)
  --json         one JSON object per stream (a line each) instead of text:
                 {\"stream\",\"group\",\"pending\",\"min_id\",\"max_id\",\"lag\",
                  \"consumers\":[{\"name\",\"pending\",\"oldest_id\",\"oldest_idle_ms\",\"seen_ms\"}],
                  \"oldest\":[{\"id\",\"consumer\",\"idle_ms\",\"deliveries\"}]}
                 names are strings, or {\"base64\":\"…\"} when not UTF-8; unknown numbers are null
  -h, --help

Exit status: 0 shown, 1 the server failed or refused (no such key or group: the other
streams are still shown) or TLS failed (an untrusted, expired or misnamed certificate, a
client certificate required, a TLS file that cannot be read, the wrong port for the scheme),
2 bad usage.";

/// How many of the oldest entries are listed.
const OLDEST: usize = 10;

struct Consumer {
    name: Vec<u8>,
    pending: i64,
    /// The oldest pending entry's id and idle time.
    oldest: Option<(Vec<u8>, i64)>,
    /// XINFO CONSUMERS `idle`: since the server last heard from it.
    seen_ms: Option<i64>,
}

struct PendingEntry {
    id: Vec<u8>,
    consumer: Vec<u8>,
    idle_ms: i64,
    deliveries: i64,
}

struct Report {
    total: i64,
    min_id: Option<Vec<u8>>,
    max_id: Option<Vec<u8>>,
    lag: Option<i64>,
    consumers: Vec<Consumer>,
    oldest: Vec<PendingEntry>,
}

/// Runs `pending`: each stream's report, in turn.
pub fn main(mut args: Args) -> Result<(), Failure> {
    let (mut streams, mut group, mut server_args, mut as_json) =
        (Vec::new(), None, ServerArgs::default(), false);
    while let Some(flag) = args.next_flag()? {
        match flag.as_str() {
            "--stream" => streams.push(args.value()?),
            "--group" => group = Some(args.value()?),
            "--json" => as_json = true,
            _ if server_args.take(&flag, &mut args)? => {}
            _ => return Err(args.unknown(&flag)),
        }
    }
    if streams.is_empty() {
        return Err(args.error("--stream is required"));
    }
    let group = args.required(group, "--group")?;
    let server = server_args.into_server(&args)?;
    // One connection for every stream: in a cluster it follows each stream to its node.
    let mut client = Client::connect(&server).map_err(Failure::Failed)?;
    let mut failures = Vec::new();
    for (i, stream) in streams.iter().enumerate() {
        match fetch(&mut client, stream.as_bytes(), group.as_bytes()) {
            Ok(report) if as_json => println!("{}", to_json(&report, stream, &group)),
            Ok(report) => print!("{}{}", if i > 0 { "\n" } else { "" }, to_text(&report, stream, &group)),
            // The other streams are still worth showing: the failures are told at the end.
            Err(e) => failures.push(format!("{stream} {group}: {e}")),
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Failure::Failed(failures.join("\npelican: ")))
    }
}

fn shape(what: &str) -> String {
    format!("unexpected reply to {what}")
}

fn fetch(client: &mut Client, stream: &[u8], group: &[u8]) -> Result<Report, String> {
    // Summary: [count, min, max, [[consumer, count]…]] (nils when nothing is pending).
    let summary = client.call(&[b"XPENDING", stream, group])?;
    let summary = array(&summary).filter(|s| s.len() == 4).ok_or_else(|| shape("XPENDING"))?;
    let total = int(&summary[0]).ok_or_else(|| shape("XPENDING"))?;
    let mut consumers: Vec<Consumer> = Vec::new();
    for row in array(&summary[3]).unwrap_or_default() {
        match array(row) {
            Some([name, count]) => consumers.push(Consumer {
                name: bytes(name).ok_or_else(|| shape("XPENDING"))?.to_vec(),
                pending: int(count).ok_or_else(|| shape("XPENDING"))?,
                oldest: None,
                seen_ms: None,
            }),
            _ => return Err(shape("XPENDING")),
        }
    }
    // Consumers with nothing pending show up here too; `idle` is since last heard from.
    let info = client.call(&[b"XINFO", b"CONSUMERS", stream, group])?;
    for row in array(&info).unwrap_or_default() {
        let row = array(row).unwrap_or_default();
        let Some(name) = field(row, "name").and_then(bytes) else { continue };
        let seen_ms = field(row, "idle").and_then(int);
        match consumers.iter_mut().find(|c| c.name == name) {
            Some(c) => c.seen_ms = seen_ms,
            None => consumers.push(Consumer { name: name.to_vec(), pending: 0, oldest: None, seen_ms }),
        }
    }
    for c in consumers.iter_mut().filter(|c| c.pending > 0) {
        let rows = client.call(&[b"XPENDING", stream, group, b"-", b"+", b"1", &c.name])?;
        c.oldest = pending_rows(&rows)?.into_iter().next().map(|e| (e.id, e.idle_ms));
    }
    consumers.sort_by(|a, b| b.pending.cmp(&a.pending).then_with(|| a.name.cmp(&b.name)));
    let oldest = pending_rows(&client.call(&[
        b"XPENDING",
        stream,
        group,
        b"-",
        b"+",
        OLDEST.to_string().as_bytes(),
    ])?)?;
    // Lag: Redis 7+ and Valkey report it (nil when the server cannot tell); 6.2 does not.
    let groups = client.call(&[b"XINFO", b"GROUPS", stream])?;
    let lag = array(&groups)
        .unwrap_or_default()
        .iter()
        .filter_map(|g| array(g))
        .find(|g| field(g, "name").and_then(bytes) == Some(group))
        .and_then(|g| field(g, "lag"))
        .and_then(int);
    Ok(Report {
        total,
        min_id: bytes(&summary[1]).map(<[u8]>::to_vec),
        max_id: bytes(&summary[2]).map(<[u8]>::to_vec),
        lag,
        consumers,
        oldest,
    })
}

/// Rows of the extended `XPENDING`: `[id, consumer, idle_ms, deliveries]`.
fn pending_rows(reply: &Reply) -> Result<Vec<PendingEntry>, String> {
    let rows = array(reply).ok_or_else(|| shape("XPENDING (extended)"))?;
    rows.iter()
        .map(|row| match array(row) {
            Some([id, consumer, idle, count]) => Some(PendingEntry {
                id: bytes(id)?.to_vec(),
                consumer: bytes(consumer)?.to_vec(),
                idle_ms: int(idle)?,
                deliveries: int(count)?,
            }),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| shape("XPENDING (extended)"))
}

fn to_json(r: &Report, stream: &str, group: &str) -> String {
    let consumers = r.consumers.iter().map(|c| {
        Object::new()
            .bytes("name", Some(&c.name))
            .num("pending", c.pending)
            .bytes("oldest_id", c.oldest.as_ref().map(|(id, _)| &id[..]))
            .opt_num("oldest_idle_ms", c.oldest.as_ref().map(|(_, idle)| *idle))
            .opt_num("seen_ms", c.seen_ms)
            .finish()
    });
    let oldest = r.oldest.iter().map(|e| {
        Object::new()
            .bytes("id", Some(&e.id))
            .bytes("consumer", Some(&e.consumer))
            .num("idle_ms", e.idle_ms)
            .num("deliveries", e.deliveries)
            .finish()
    });
    Object::new()
        .bytes("stream", Some(stream.as_bytes()))
        .bytes("group", Some(group.as_bytes()))
        .num("pending", r.total)
        .bytes("min_id", r.min_id.as_deref())
        .bytes("max_id", r.max_id.as_deref())
        .opt_num("lag", r.lag)
        .raw("consumers", &json::array(consumers))
        .raw("oldest", &json::array(oldest))
        .finish()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `850ms`, `31.2s`, `5m12s`, `3h04m`, `2d03h`.
pub fn duration(ms: i64) -> String {
    let s = ms / 1000;
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else if s < 86_400 {
        format!("{}h{:02}m", s / 3600, s / 60 % 60)
    } else {
        format!("{}d{:02}h", s / 86_400, s / 3600 % 24)
    }
}

fn to_text(r: &Report, stream: &str, group: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let range = match (&r.min_id, &r.max_id) {
        (Some(min), Some(max)) => format!(" (ids {} … {})", text(min), text(max)),
        _ => String::new(),
    };
    let lag = match r.lag {
        Some(lag) => format!("lag {lag}"),
        None => "lag unknown".to_string(),
    };
    let _ = writeln!(out, "stream {stream}, group {group}: {} pending{range}; {lag}", r.total);
    if !r.consumers.is_empty() {
        let _ = writeln!(
            out,
            "\n{:<24} {:>9}  {:>11}  {:>9}  oldest id",
            "consumer", "pending", "oldest idle", "seen"
        );
        for c in &r.consumers {
            let (id, idle) = match &c.oldest {
                Some((id, idle)) => (text(id), duration(*idle)),
                None => ("-".into(), "-".into()),
            };
            let seen = c.seen_ms.map_or("-".into(), |ms| format!("{} ago", duration(ms)));
            let _ = writeln!(out, "{:<24} {:>9}  {:>11}  {:>9}  {id}", text(&c.name), c.pending, idle, seen);
        }
    }
    if !r.oldest.is_empty() {
        let _ =
            writeln!(out, "\noldest pending:\n{:<24} {:<24} {:>11}  deliveries", "id", "consumer", "idle");
        for e in &r.oldest {
            let (id, consumer, idle) = (text(&e.id), text(&e.consumer), duration(e.idle_ms));
            let _ = writeln!(out, "{id:<24} {consumer:<24} {idle:>11}  {}", e.deliveries);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration(850), "850ms");
        assert_eq!(duration(31_240), "31.2s");
        assert_eq!(duration(312_000), "5m12s");
        assert_eq!(duration(3 * 3_600_000 + 4 * 60_000), "3h04m");
        assert_eq!(duration(2 * 86_400_000 + 3 * 3_600_000), "2d03h");
    }

    #[test]
    fn json_shape() {
        let report = Report {
            total: 1,
            min_id: Some(b"1-0".to_vec()),
            max_id: Some(b"1-0".to_vec()),
            lag: None,
            consumers: vec![Consumer {
                name: b"c".to_vec(),
                pending: 1,
                oldest: Some((b"1-0".to_vec(), 5)),
                seen_ms: Some(7),
            }],
            oldest: vec![PendingEntry {
                id: b"1-0".to_vec(),
                consumer: b"c".to_vec(),
                idle_ms: 5,
                deliveries: 2,
            }],
        };
        assert_eq!(
            to_json(&report, "s", "g"),
            r#"{"stream":"s","group":"g","pending":1,"min_id":"1-0","max_id":"1-0","lag":null,"consumers":[{"name":"c","pending":1,"oldest_id":"1-0","oldest_idle_ms":5,"seen_ms":7}],"oldest":[{"id":"1-0","consumer":"c","idle_ms":5,"deliveries":2}]}"#
        );
    }
}
