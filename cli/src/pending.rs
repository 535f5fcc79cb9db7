//! `pelican pending`: a group's pending entries list at a glance.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;

use serde::Serialize;

use crate::client::{array, bytes, field, int, Client, Reply};
use crate::failure::Failure;
use crate::help::TEMPLATE;
use crate::json::{self, Bytes};
use crate::name::show;
use crate::server::ServerArgs;
use unicode_width::UnicodeWidthStr as _;

const USAGE: &str = "\
pelican pending --stream KEY [--stream KEY…] --group G [--url URL] [--json]
                      [--tls-ca FILE] [--tls-cert FILE --tls-key FILE]";

const ABOUT: &str = "\
Shows group G's pending entries list (entries delivered but not yet acknowledged) on each
stream KEY:
  - the total, the id range, and how many are released (Redis 8.8+: XNACK gave them
    back to the group, owned by no consumer, for the next claim to take);
  - per consumer: its pending count, the idle time of its oldest pending entry, and how
    long ago the server last heard from it (XINFO CONSUMERS `idle`);
  - the 10 oldest pending entries, with owner, idle time and delivery count (a released
    entry's owner shows as `(released)`, its idle time as `-`);
  - the group's lag (entries not yet delivered), where the server reports it (XINFO GROUPS,
    Redis 7+/Valkey; unknown on Redis 6.2, after some deletions, and where the server's
    count is wrong: a lag above 0 with no entry past the group's last-delivered id, as
    Redis 7.0 can keep after a failover).
Names that are not UTF-8 are shown escaped (\\xNN) in the text, and in base64 in JSON;
either way, the bytes can be given back as KEY or G.

In a Redis/Valkey Cluster, any node's URL will do (a replica too): each stream is asked
of the node serving it (MOVED and ASK are followed).";

const AFTER: &str = "\
Exit status: 0 shown, 1 the server failed, refused or could not be reached (no such key or
group: the other streams are still shown; a host that does not resolve) or TLS failed (an
untrusted, expired or misnamed certificate, a client certificate required, a TLS file that
cannot be read, the wrong port for the scheme), 2 bad usage (a bad URL).";

/// `pelican pending`'s flags.
#[derive(clap::Args, Debug)]
#[command(override_usage = USAGE, before_help = ABOUT, after_help = AFTER, help_template = TEMPLATE)]
pub struct Args {
    /// a stream key (required); repeat it for several streams, shown in turn
    #[arg(long = "stream", value_name = "KEY", required = true)]
    streams: Vec<OsString>,
    /// the consumer group (required)
    #[arg(long, value_name = "G", env = "PELICAN_GROUP", hide_env_values = true)]
    group: OsString,
    #[command(flatten)]
    pub(crate) server: ServerArgs,
    /// one JSON object per stream (a line each) instead of text:
    /// {"stream","group","pending","released","min_id","max_id","lag",
    ///  "consumers":[{"name","pending","oldest_id","oldest_idle_ms","seen_ms"}],
    ///  "oldest":[{"id","consumer","idle_ms","deliveries","released"}]}
    /// names are strings, or {"base64":"…"} when not UTF-8; unknown numbers are null;
    /// a released entry has "released":true, "consumer":null, "idle_ms":null
    #[arg(long, verbatim_doc_comment)]
    json: bool,
}

/// How many of the oldest entries are listed.
const OLDEST: usize = 10;

#[derive(Serialize)]
struct Consumer {
    #[serde(serialize_with = "json::bytes")]
    name: Vec<u8>,
    pending: i64,
    /// The oldest pending entry's id and idle time.
    #[serde(serialize_with = "json::opt_bytes")]
    oldest_id: Option<Vec<u8>>,
    oldest_idle_ms: Option<i64>,
    /// XINFO CONSUMERS `idle`: since the server last heard from it.
    seen_ms: Option<i64>,
}

#[derive(Serialize)]
struct PendingEntry {
    #[serde(serialize_with = "json::bytes")]
    id: Vec<u8>,
    /// `None` when released.
    #[serde(serialize_with = "json::opt_bytes")]
    consumer: Option<Vec<u8>>,
    /// `None` when released.
    idle_ms: Option<i64>,
    deliveries: i64,
    /// Given back to the group by `XNACK` (Redis 8.8+), owned by no consumer.
    released: bool,
}

/// A stream's report; its JSON members in the documented order.
#[derive(Serialize)]
struct Report {
    #[serde(rename = "pending")]
    total: i64,
    /// Of those, released ones (`XNACK`, Redis 8.8+): counted in the total, by no consumer.
    released: i64,
    #[serde(serialize_with = "json::opt_bytes")]
    min_id: Option<Vec<u8>>,
    #[serde(serialize_with = "json::opt_bytes")]
    max_id: Option<Vec<u8>>,
    lag: Option<i64>,
    consumers: Vec<Consumer>,
    oldest: Vec<PendingEntry>,
}

/// Runs `pending`: each stream's report, in turn.
pub fn main(args: Args) -> Result<(), Failure> {
    let group = args.group.as_bytes();
    let server = args.server.to_server()?;
    // One connection for every stream: in a cluster it follows each stream to its node.
    let mut client = Client::connect(&server, "pelican:pending").map_err(Failure::Failed)?;
    let mut failures = Vec::new();
    for (i, stream) in args.streams.iter().map(|s| s.as_bytes()).enumerate() {
        match fetch(&mut client, stream, group) {
            Ok(report) if args.json => println!("{}", to_json(&report, stream, group)),
            Ok(report) => print!("{}{}", if i > 0 { "\n" } else { "" }, to_text(&report, stream, group)),
            // The other streams are still worth showing: the failures are told at the end.
            Err(e) if e.starts_with("NOGROUP") => failures.push(format!(
                "stream {}: {}",
                show(stream),
                crate::consume::no_group(&show(group), &e, "pelican consume --create-group")
            )),
            Err(e) => failures.push(format!("{} {}: {e}", show(stream), show(group))),
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
                oldest_id: None,
                oldest_idle_ms: None,
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
            None => consumers.push(Consumer {
                name: name.to_vec(),
                pending: 0,
                oldest_id: None,
                oldest_idle_ms: None,
                seen_ms,
            }),
        }
    }
    for c in consumers.iter_mut().filter(|c| c.pending > 0) {
        let rows = client.call(&[b"XPENDING", stream, group, b"-", b"+", b"1", &c.name])?;
        if let Some(e) = pending_rows(&rows)?.into_iter().next() {
            (c.oldest_id, c.oldest_idle_ms) = (Some(e.id), e.idle_ms);
        }
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
    let row = array(&groups)
        .unwrap_or_default()
        .iter()
        .filter_map(|g| array(g))
        .find(|g| field(g, "name").and_then(bytes) == Some(group));
    let mut lag = row.and_then(|g| field(g, "lag")).and_then(int);
    if let (Some(1..), Some(last)) = (lag, row.and_then(|g| field(g, "last-delivered-id")).and_then(bytes)) {
        // A count gone wrong (Redis 7.0 after a failover) says entries are left with none
        // past the group's last-delivered id: unknown, rather than wrong.
        let after = [b"(", last].concat();
        let beyond = client.call(&[b"XRANGE", stream, &after, b"+", b"COUNT", b"1"])?;
        if array(&beyond).is_some_and(<[Reply]>::is_empty) {
            lag = None;
        }
    }
    // Released entries are in the total but in no consumer's count.
    let owned: i64 = consumers.iter().map(|c| c.pending).sum();
    Ok(Report {
        total,
        released: (total - owned).max(0),
        min_id: bytes(&summary[1]).map(<[u8]>::to_vec),
        max_id: bytes(&summary[2]).map(<[u8]>::to_vec),
        lag,
        consumers,
        oldest,
    })
}

/// Rows of the extended `XPENDING`: `[id, consumer, idle_ms, deliveries]`. A released
/// entry (Redis 8.8+, `XNACK`) has consumer `""` and idle `-1`.
fn pending_rows(reply: &Reply) -> Result<Vec<PendingEntry>, String> {
    let rows = array(reply).ok_or_else(|| shape("XPENDING (extended)"))?;
    rows.iter()
        .map(|row| match array(row) {
            Some([id, consumer, idle, count]) => {
                let (consumer, idle) = (bytes(consumer)?, int(idle)?);
                let released = consumer.is_empty() && idle < 0;
                Some(PendingEntry {
                    id: bytes(id)?.to_vec(),
                    consumer: (!released).then(|| consumer.to_vec()),
                    idle_ms: (!released).then_some(idle),
                    deliveries: int(count)?,
                    released,
                })
            }
            _ => None,
        })
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| shape("XPENDING (extended)"))
}

fn to_json(r: &Report, stream: &[u8], group: &[u8]) -> String {
    #[derive(Serialize)]
    struct Line<'a> {
        stream: Bytes<'a>,
        group: Bytes<'a>,
        #[serde(flatten)]
        report: &'a Report,
    }
    json::to_string(&Line { stream: Bytes(stream), group: Bytes(group), report: r })
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

/// A released entry's owner in the text (`(…)`: no consumer name is shown so).
const RELEASED: &str = "(released)";

fn to_text(r: &Report, stream: &[u8], group: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let range = match (&r.min_id, &r.max_id) {
        (Some(min), Some(max)) => format!(" (ids {} … {})", show(min), show(max)),
        _ => String::new(),
    };
    let lag = match r.lag {
        Some(lag) => format!("lag {lag}"),
        None => "lag unknown".to_string(),
    };
    let released = if r.released > 0 { format!(", {} released", r.released) } else { String::new() };
    let _ = writeln!(
        out,
        "stream {}, group {}: {} pending{range}{released}; {lag}",
        show(stream),
        show(group),
        r.total
    );
    if !r.consumers.is_empty() {
        let mut rows = vec![["consumer", "pending", "oldest idle", "seen", "oldest id"].map(String::from)];
        for c in &r.consumers {
            let id = c.oldest_id.as_deref().map_or("-".into(), |id| show(id).into_owned());
            let idle = c.oldest_idle_ms.map_or("-".into(), duration);
            let seen = c.seen_ms.map_or("-".into(), |ms| format!("{} ago", duration(ms)));
            rows.push([show(&c.name).into_owned(), c.pending.to_string(), idle, seen, id]);
        }
        out.push('\n');
        table(&mut out, &rows, &[(24, false, " "), (9, true, "  "), (11, true, "  "), (9, true, "  ")]);
    }
    if !r.oldest.is_empty() {
        let mut rows = vec![["id", "consumer", "idle", "deliveries"].map(String::from)];
        for e in &r.oldest {
            let owner = e.consumer.as_deref().map_or(RELEASED.into(), |c| show(c).into_owned());
            rows.push([
                show(&e.id).into_owned(),
                owner,
                e.idle_ms.map_or("-".into(), duration),
                e.deliveries.to_string(),
            ]);
        }
        out.push_str("\noldest pending:\n");
        table(&mut out, &rows, &[(24, false, " "), (24, false, " "), (11, true, "  ")]);
    }
    out
}

/// `rows` as lines, each column but the last as wide as its widest cell on screen (names
/// are neither cut nor let to push the next columns out of line), at least `min`, then
/// `gap`; `right`: right-aligned.
fn table<const N: usize>(out: &mut String, rows: &[[String; N]], columns: &[(usize, bool, &str)]) {
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            let Some(&(min, right, gap)) = columns.get(i) else {
                line.push_str(cell);
                continue;
            };
            let width = rows.iter().map(|row| row[i].width()).max().unwrap_or(0).max(min);
            let pad = " ".repeat(width - cell.width());
            line.extend(if right { [pad.as_str(), cell, gap] } else { [cell.as_str(), &pad, gap] });
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
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
            total: 2,
            released: 1,
            min_id: Some(b"1-0".to_vec()),
            max_id: Some(b"2-0".to_vec()),
            lag: None,
            consumers: vec![Consumer {
                name: b"c".to_vec(),
                pending: 1,
                oldest_id: Some(b"2-0".to_vec()),
                oldest_idle_ms: Some(5),
                seen_ms: Some(7),
            }],
            oldest: vec![
                PendingEntry {
                    id: b"1-0".to_vec(),
                    consumer: None,
                    idle_ms: None,
                    deliveries: 1,
                    released: true,
                },
                PendingEntry {
                    id: b"2-0".to_vec(),
                    consumer: Some(b"c".to_vec()),
                    idle_ms: Some(5),
                    deliveries: 2,
                    released: false,
                },
            ],
        };
        assert_eq!(
            to_json(&report, b"s", b"\xffg"),
            r#"{"stream":"s","group":{"base64":"/2c="},"pending":2,"released":1,"min_id":"1-0","max_id":"2-0","lag":null,"consumers":[{"name":"c","pending":1,"oldest_id":"2-0","oldest_idle_ms":5,"seen_ms":7}],"oldest":[{"id":"1-0","consumer":null,"idle_ms":null,"deliveries":1,"released":true},{"id":"2-0","consumer":"c","idle_ms":5,"deliveries":2,"released":false}]}"#
        );
        let text = to_text(&report, b"s", b"g");
        assert!(
            text.starts_with("stream s, group g: 2 pending (ids 1-0 … 2-0), 1 released; lag unknown\n"),
            "{text}"
        );
        assert!(
            text.contains("\n1-0                      (released)                         -  1\n"),
            "{text}"
        );
    }

    /// Redis 8.10's reply after `XNACK s8 g8 FAIL IDS 1 1-0` (captured by
    /// scripts/capture-fixtures): 1-0 released, 2-0 and 3-0 B's.
    #[test]
    fn released_entries_from_the_captured_reply() {
        let bytes = include_bytes!("../../core/tests/fixtures/redis-8.10/resp2/pending_released.resp");
        let (reply, _) = redis_protocol::resp2::decode::decode(&bytes[..]).unwrap().unwrap();
        let rows = pending_rows(&reply).unwrap();
        let seen: Vec<_> =
            rows.iter().map(|e| (&e.id[..], e.consumer.as_deref(), e.idle_ms, e.released)).collect();
        assert_eq!(seen[0], (&b"1-0"[..], None, None, true));
        assert_eq!(seen[1].1, Some(&b"B"[..]));
        assert!(!seen[1].3 && seen[1].2.is_some_and(|ms| ms >= 0));
        assert_eq!(rows.iter().map(|e| e.deliveries).collect::<Vec<_>>(), [2, 2, 1]);
    }
}
