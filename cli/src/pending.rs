//! `pelican pending`: a group's pending entries list at a glance.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;

use std::time::Duration;

use pelican::oneshot::{self, ConsumerInfo, GroupInfo, PendingSummary, Request};
use pelican_mio::{Session, SessionError};
use serde::Serialize;

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
    let mut session = server.connect("pelican:pending").map_err(Failure::Failed)?;
    let mut failures = Vec::new();
    for (i, stream) in args.streams.iter().map(|s| s.as_bytes()).enumerate() {
        match fetch(&mut session, stream, group) {
            Ok(report) if args.json => println!("{}", to_json(&report, stream, group)),
            Ok(report) => print!("{}{}", if i > 0 { "\n" } else { "" }, to_text(&report, stream, group)),
            // The other streams are still worth showing: the failures are told at the end.
            Err(SessionError::Server(e)) if e.starts_with("NOGROUP") => failures.push(format!(
                "stream {}: {}",
                show(stream),
                crate::consume::no_group(&show(group), &e, "pelican consume --create-group")
            )),
            Err(e) => failures.push(format!("{} {}: {}", show(stream), show(group), server.said(e))),
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Failure::Failed(failures.join("\npelican: ")))
    }
}

/// A duration as whole milliseconds, as reports show them.
fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A count as reports show them.
fn n(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

fn fetch(session: &mut Session, stream: &[u8], group: &[u8]) -> Result<Report, SessionError> {
    let summary = PendingSummary::read(&session.call(&Request::xpending(stream, group))?)?;
    let mut consumers: Vec<Consumer> = summary
        .consumers
        .iter()
        .map(|(name, count)| Consumer {
            name: name.to_vec(),
            pending: n(*count),
            oldest_id: None,
            oldest_idle_ms: None,
            seen_ms: None,
        })
        .collect();
    // Consumers with nothing pending show up here too; `idle` is since last heard from.
    for info in ConsumerInfo::read_all(&session.call(&Request::xinfo_consumers(stream, group))?)? {
        let seen_ms = info.idle.map(ms);
        match consumers.iter_mut().find(|c| c.name == info.name) {
            Some(c) => c.seen_ms = seen_ms,
            None => consumers.push(Consumer {
                name: info.name.to_vec(),
                pending: 0,
                oldest_id: None,
                oldest_idle_ms: None,
                seen_ms,
            }),
        }
    }
    for c in consumers.iter_mut().filter(|c| c.pending > 0) {
        let rows = oldest(session, &Request::xpending_oldest(stream, group, 1, Some(&c.name)))?;
        if let Some(e) = rows.into_iter().next() {
            (c.oldest_id, c.oldest_idle_ms) = (Some(e.id), e.idle_ms);
        }
    }
    consumers.sort_by(|a, b| b.pending.cmp(&a.pending).then_with(|| a.name.cmp(&b.name)));
    let oldest = oldest(session, &Request::xpending_oldest(stream, group, OLDEST as u64, None))?;
    // Lag: Redis 7+ and Valkey report it (nil when the server cannot tell); 6.2 does not. A
    // count gone wrong (Redis 7.0 after a failover) is made unknown rather than told wrong.
    let info = GroupInfo::read_named(&session.call(&Request::xinfo_groups(stream))?, group)?;
    let mut lag = info.as_ref().and_then(|g| g.lag);
    if let Some((info, check)) = info.as_ref().and_then(|g| Some((g, g.lag_check(stream)?))) {
        lag = info.checked_lag(&session.call(&check)?)?;
    }
    // Released entries are in the total but in no consumer's count.
    let owned: i64 = consumers.iter().map(|c| c.pending).sum();
    let total = n(summary.count);
    Ok(Report {
        total,
        released: (total - owned).max(0),
        min_id: summary.first.map(|id| id.to_vec()),
        max_id: summary.last.map(|id| id.to_vec()),
        lag: lag.map(n),
        consumers,
        oldest,
    })
}

/// The oldest pending entries `request` asks for, as the report shows them.
fn oldest(session: &mut Session, request: &Request) -> Result<Vec<PendingEntry>, SessionError> {
    Ok(oneshot::PendingEntry::read_all(&session.call(request)?)?.into_iter().map(entry).collect())
}

/// A pending entry as the report shows it: a released one (Redis 8.8+, `XNACK`) with no
/// owner and no idle time.
fn entry(e: oneshot::PendingEntry) -> PendingEntry {
    PendingEntry {
        released: e.released(),
        id: e.id.to_vec(),
        consumer: e.consumer.map(|c| c.to_vec()),
        idle_ms: e.idle.map(ms),
        deliveries: n(e.deliveries),
    }
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
        let mut replies = oneshot::Replies::new();
        replies.extend(bytes);
        let reply = replies.next_reply().unwrap().unwrap();
        let rows: Vec<PendingEntry> =
            oneshot::PendingEntry::read_all(&reply).unwrap().into_iter().map(entry).collect();
        let seen: Vec<_> =
            rows.iter().map(|e| (&e.id[..], e.consumer.as_deref(), e.idle_ms, e.released)).collect();
        assert_eq!(seen[0], (&b"1-0"[..], None, None, true));
        assert_eq!(seen[1].1, Some(&b"B"[..]));
        assert!(!seen[1].3 && seen[1].2.is_some_and(|ms| ms >= 0));
        assert_eq!(rows.iter().map(|e| e.deliveries).collect::<Vec<_>>(), [2, 2, 1]);
    }
}
