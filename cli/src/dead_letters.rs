//! `pelican dead-letters list|replay|drop`: what an operator does with a dead-letter stream.
//! A replay is the core's script (`pelican::dead_letter`): each dead letter added back to its
//! origin stream and deleted from the dead-letter stream in one server-side step.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use pelican::dead_letter::{replay_command, DeadLetter, Replayed};
use pelican::oneshot::{read_count, read_entries, read_time, Request};
use pelican::{Entry, Source};
use pelican_mio::{Session, SessionError};

use crate::failure::Failure;
use crate::help::TEMPLATE;
use crate::json::{self, Bytes, Object};
use crate::name::show;
use crate::number::whole;
use crate::server::ServerArgs;

const USAGE: &str = "\
pelican dead-letters list --dead-letter KEY [--count N] [--json] [--url URL]
       pelican dead-letters replay --dead-letter KEY (--id ID… | --all) [--reason R] [--dry-run]
       pelican dead-letters drop --dead-letter KEY (--id ID… | --older-than DURATION)";

const ABOUT: &str = "\
The entries of a dead-letter stream KEY (where consume --dead-letter moves what failed
--max-deliveries times, or was given the dead-letter verdict), each with its fields and
its origin (pelican-stream, -group, -consumer, -id, -deliveries, -reason).

  list    the oldest N (--count, 100): id, origin stream and id, group, consumer,
          deliveries, reason, age (by the server's clock), and the entry's own fields.
  replay  each one named (--id, repeated) or every one there at the start (--all; with
          --reason R only those moved for reason R) back to its origin stream as a new
          entry: its own fields plus pelican-replay-of (the id it had there), added and
          deleted from KEY in one server-side script. A crash or a lost connection never
          duplicates nor loses one, and replaying one again does nothing. --dry-run only
          tells what would move where. Prints each move: dead letter → stream new id.
  drop    deletes those named (--id), or every one moved longer ago than DURATION
          (--older-than: 500ms, 30s, 15m, 12h, 7d; by the server's clock, XTRIM MINID).

In a Redis/Valkey Cluster, any node's URL will do. A replay is atomic where the dead-letter
stream and the origin stream share a slot — which moving an entry there already required
(a hash tag: {orders} and {orders}:dead), so every dead letter pelican moved qualifies. One
whose origin is in another slot is refused by the cluster (CROSSSLOT), told, and left in
place: it is never copied and deleted in two steps.";

const AFTER: &str = "\
Exit status: 0 done, 1 the server failed or refused (a dead letter not replayed: the others
still are; an --id not found), 2 bad usage.";

/// What to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Action {
    List,
    Replay,
    Drop,
}

/// `pelican dead-letters`' flags.
#[derive(clap::Args, Debug)]
#[command(override_usage = USAGE, before_help = ABOUT, after_help = AFTER, help_template = TEMPLATE)]
pub struct Args {
    /// list, replay or drop
    #[arg(value_enum)]
    action: Action,
    /// the dead-letter stream (required)
    #[arg(long, value_name = "KEY")]
    dead_letter: OsString,
    /// list: how many, oldest first
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = whole::<usize, 1, 1_000_000>)]
    count: usize,
    /// list: one JSON object per dead letter (a line each) instead of text:
    /// {"id","stream","origin_id","group","consumer","deliveries","reason",
    ///  "error","age_ms","fields":{…}} (names that are not UTF-8 as
    /// {"base64":"…"}, fields then as [name, value] pairs; unknown: null)
    #[arg(long, verbatim_doc_comment)]
    json: bool,
    /// replay, drop: this dead letter (its id in KEY); repeat it for several
    #[arg(long = "id", value_name = "ID")]
    ids: Vec<OsString>,
    /// replay: every dead letter in KEY when it starts
    #[arg(long, conflicts_with = "ids")]
    all: bool,
    /// replay: only those moved for this reason (max-deliveries, verdict…)
    #[arg(long, value_name = "R")]
    reason: Option<OsString>,
    /// replay: only tell what would move where
    #[arg(long)]
    dry_run: bool,
    /// drop: every dead letter moved longer ago than this (500ms, 30s, 15m, 12h, 7d)
    #[arg(long, value_name = "DURATION", value_parser = duration, conflicts_with = "ids")]
    older_than: Option<Duration>,
    #[command(flatten)]
    pub(crate) server: ServerArgs,
}

/// `--older-than`: a whole number and a unit.
fn duration(text: &str) -> Result<Duration, String> {
    let digits = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (n, unit) = text.split_at(digits);
    let n: u64 = n.parse().map_err(|_| format!("{text:?}: a whole number and a unit (ms, s, m, h, d)"))?;
    let ms = match unit {
        "ms" => Some(n),
        "s" => n.checked_mul(1000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        "d" => n.checked_mul(86_400_000),
        _ => return Err(format!("{text:?}: a whole number and a unit (ms, s, m, h, d)")),
    };
    ms.map(Duration::from_millis).ok_or_else(|| format!("{text:?}: too long"))
}

/// Runs `dead-letters`.
pub fn main(args: Args) -> Result<(), Failure> {
    let only = |flag: &str, given: bool, actions: &[Action]| match given && !actions.contains(&args.action) {
        true => Err(Failure::Usage(format!("{flag} does not go with {:?}", args.action).to_lowercase())),
        false => Ok(()),
    };
    only("--json", args.json, &[Action::List])?;
    only("--id", !args.ids.is_empty(), &[Action::Replay, Action::Drop])?;
    only("--all", args.all, &[Action::Replay])?;
    only("--reason", args.reason.is_some(), &[Action::Replay])?;
    only("--dry-run", args.dry_run, &[Action::Replay])?;
    only("--older-than", args.older_than.is_some(), &[Action::Drop])?;
    let chosen = !args.ids.is_empty() || args.all || args.older_than.is_some();
    if args.action != Action::List && !chosen {
        let what = match args.action {
            Action::Replay => "--id ID or --all",
            _ => "--id ID or --older-than DURATION",
        };
        return Err(Failure::Usage(format!("which dead letters? give {what}")));
    }
    let server = args.server.to_server()?;
    let mut session = server.connect("pelican:dead-letters").map_err(Failure::Failed)?;
    let key = args.dead_letter.as_bytes();
    let failed = |e: String| Failure::Failed(format!("{}: {e}", show(key)));
    let said = |e: SessionError| server.said(e);
    match args.action {
        Action::List => list(&mut session, key, args.count, args.json).map_err(said).map_err(failed),
        Action::Replay => {
            let reason = args.reason.as_ref().map(|r| r.as_bytes());
            replay(&mut session, key, &args.ids, reason, args.dry_run, &said).map_err(failed)
        }
        Action::Drop => drop(&mut session, key, &args.ids, args.older_than, &said).map_err(failed),
    }
}

/// The server's clock, in ms since the epoch (`TIME`).
fn now_ms(session: &mut Session) -> Result<u64, SessionError> {
    let now = read_time(&session.call(&Request::time())?)?;
    Ok(u64::try_from(now.as_millis()).unwrap_or(u64::MAX))
}

/// `XRANGE key start end COUNT n` read as dead letters.
fn range(
    session: &mut Session,
    key: &[u8],
    start: &[u8],
    end: &[u8],
    count: usize,
) -> Result<Vec<DeadLetter>, SessionError> {
    let reply = session.call(&Request::xrange(key, start, end, count as u64))?;
    Ok(read_entries(&reply)?.into_iter().map(|(id, fields)| DeadLetter::parse(id, fields)).collect())
}

/// `list`: the oldest `count`, as text or JSON lines.
fn list(session: &mut Session, key: &[u8], count: usize, json: bool) -> Result<(), SessionError> {
    let now = now_ms(session)?;
    let letters = range(session, key, b"-", b"+", count)?;
    let total = read_count(&session.call(&Request::xlen(key))?)?;
    if json {
        for d in &letters {
            println!("{}", json_line(d, now));
        }
        return Ok(());
    }
    println!(
        "{}: {total} dead letters{}",
        show(key),
        if (total as usize) > letters.len() {
            format!(", the oldest {} shown", letters.len())
        } else {
            String::new()
        }
    );
    for d in &letters {
        let opt =
            |b: &Option<bytes::Bytes>| b.as_deref().map_or_else(|| "?".to_string(), |b| show(b).into_owned());
        let age = d.age(now).map_or_else(|| "?".to_string(), |a| format!("{:.1} s", a.as_secs_f64()));
        let deliveries = d.deliveries.map_or_else(|| "?".to_string(), |n| n.to_string());
        println!(
            "  {}  from {} {}  group {}  consumer {}  deliveries {deliveries}  reason {}  age {age}",
            show(&d.id),
            opt(&d.stream),
            opt(&d.origin_id),
            opt(&d.group),
            opt(&d.consumer),
            opt(&d.reason)
        );
        if let Some(error) = &d.error {
            println!("    error: {}", show(error));
        }
        let fields: Vec<String> = d.fields.iter().map(|(n, v)| format!("{}={}", show(n), show(v))).collect();
        println!("    {}", fields.join(" "));
    }
    Ok(())
}

/// A dead letter as one JSON object.
fn json_line(d: &DeadLetter, now: u64) -> String {
    let b =
        |v: &Option<bytes::Bytes>| v.as_deref().map_or("null".to_string(), |v| json::to_string(&Bytes(v)));
    let mut fields = String::new();
    json::push_fields(&mut fields, Entry::new(&d.id, d.fields.iter().cloned(), Source::New).fields());
    Object::new()
        .raw("id", &json::to_string(&Bytes(&d.id)))
        .raw("stream", &b(&d.stream))
        .raw("origin_id", &b(&d.origin_id))
        .raw("group", &b(&d.group))
        .raw("consumer", &b(&d.consumer))
        .raw("deliveries", &d.deliveries.map_or("null".into(), |n| n.to_string()))
        .raw("reason", &b(&d.reason))
        .raw("error", &b(&d.error))
        .raw("age_ms", &d.age(now).map_or("null".into(), |a| a.as_millis().to_string()))
        .raw("fields", &fields)
        .finish()
}

/// How many dead letters `--all` reads at a time.
const PAGE: usize = 100;

/// `replay`: the ids given, or every dead letter up to the last one there at the start.
fn replay(
    session: &mut Session,
    key: &[u8],
    ids: &[OsString],
    reason: Option<&[u8]>,
    dry_run: bool,
    said: &dyn Fn(SessionError) -> String,
) -> Result<(), String> {
    let mut tally = Tally::default();
    if ids.is_empty() {
        // Up to the last at the start: what is moved there meanwhile waits for the next run.
        let last = range_rev_last(session, key).map_err(said)?;
        let Some(last) = last else {
            println!("{}: no dead letters", show(key));
            return Ok(());
        };
        let mut start = b"-".to_vec();
        loop {
            let page = range(session, key, &start, &last, PAGE).map_err(said)?;
            for d in &page {
                replay_one(session, key, d, reason, dry_run, &mut tally, said);
            }
            match page.last() {
                Some(d) if page.len() == PAGE && d.id[..] != last[..] => start = [b"(", &d.id[..]].concat(),
                _ => break,
            }
        }
    } else {
        for id in ids {
            let id = id.as_bytes();
            match range(session, key, id, id, 1).map_err(said)?.pop() {
                Some(d) => replay_one(session, key, &d, reason, dry_run, &mut tally, said),
                None => {
                    tally.fail(format!("{}: not in {} (replayed or dropped already?)", show(id), show(key)))
                }
            }
        }
    }
    let verb = if dry_run { "would be moved" } else { "moved" };
    println!("{} {verb}, {} skipped, {} failed", tally.moved, tally.skipped, tally.failed.len());
    match tally.failed.is_empty() {
        true => Ok(()),
        false => Err(tally.failed.join("; ")),
    }
}

/// The id of the last entry of `key`, if any.
fn range_rev_last(session: &mut Session, key: &[u8]) -> Result<Option<Vec<u8>>, SessionError> {
    let entries = read_entries(&session.call(&Request::xrevrange_last(key, 1))?)?;
    Ok(entries.into_iter().next().map(|(id, _)| id.to_vec()))
}

/// What a replay did, counted.
#[derive(Default)]
struct Tally {
    moved: u64,
    skipped: u64,
    failed: Vec<String>,
}

impl Tally {
    fn fail(&mut self, why: String) {
        say!("{}pelican: {why}", crate::stamp::now());
        self.failed.push(why);
    }
}

/// One dead letter replayed (or, in a dry run, told), its outcome printed and counted.
fn replay_one(
    session: &mut Session,
    key: &[u8],
    d: &DeadLetter,
    reason: Option<&[u8]>,
    dry_run: bool,
    tally: &mut Tally,
    said: &dyn Fn(SessionError) -> String,
) {
    let id = show(&d.id).into_owned();
    let Some(origin) = d.stream.as_deref() else {
        tally.skipped += 1;
        println!("{id}: skipped: no pelican-stream field (not a dead letter pelican moved)");
        return;
    };
    if reason.is_some_and(|r| d.reason.as_deref() != Some(r)) {
        tally.skipped += 1;
        return;
    }
    let to = show(origin).into_owned();
    if dry_run {
        tally.moved += 1;
        println!("{id} → {to} (would be moved)");
        return;
    }
    let outcome = session
        .call(&Request::new(&replay_command(key, origin, &d.id, reason)))
        .map_err(said)
        .and_then(|reply| Replayed::from_reply(reply.as_bytes()).map_err(|e| e.to_string()));
    match outcome {
        Ok(Replayed::Moved(new)) => {
            tally.moved += 1;
            println!("{id} → {to} {}", show(&new));
        }
        Ok(Replayed::Gone) => {
            tally.fail(format!("{id}: gone from {} meanwhile (replayed or dropped)", show(key)))
        }
        Ok(Replayed::OtherReason) | Ok(Replayed::OtherOrigin) => {
            tally.skipped += 1;
            println!("{id}: skipped: its origin or reason is not as read");
        }
        Ok(other) => tally.fail(format!("{id}: {other:?}")),
        Err(e) if e.contains("CROSSSLOT") => tally.fail(format!(
            "{id}: not replayed: its origin {to} is in another cluster slot than {} (CROSSSLOT); a replay is \
             one script, which a cluster runs only on keys of one slot; left in place",
            show(key)
        )),
        Err(e) => tally.fail(format!("{id}: not replayed: {e}")),
    }
}

/// `drop`: the ids given (`XDEL`), or those older than `older` (`XTRIM MINID`).
fn drop(
    session: &mut Session,
    key: &[u8],
    ids: &[OsString],
    older: Option<Duration>,
    said: &dyn Fn(SessionError) -> String,
) -> Result<(), String> {
    if let Some(older) = older {
        let now = now_ms(session).map_err(said)?;
        let cutoff = now.saturating_sub(u64::try_from(older.as_millis()).unwrap_or(u64::MAX)).to_string();
        // Exact (no `~`): every entry with an id below the cutoff, none above.
        let reply = session.call(&Request::xtrim_minid(key, cutoff.as_bytes())).map_err(said)?;
        let dropped = read_count(&reply).map_err(|e| said(e.into()))?;
        println!("{dropped} dropped from {} (moved before {cutoff} ms)", show(key));
        return Ok(());
    }
    let ids: Vec<&[u8]> = ids.iter().map(|id| id.as_bytes()).collect();
    let reply = session.call(&Request::xdel_ids(key, &ids)).map_err(said)?;
    let dropped = read_count(&reply).map_err(|e| said(e.into()))?;
    println!("{dropped} dropped from {}", show(key));
    match dropped as usize == ids.len() {
        true => Ok(()),
        false => {
            Err(format!("{} of the {} ids given were not there", ids.len() - dropped as usize, ids.len()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_a_unit() {
        assert_eq!(duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(duration("15m"), Ok(Duration::from_secs(900)));
        assert!(duration("7").is_err() && duration("d").is_err() && duration("-1s").is_err());
        assert!(duration("99999999999999999999d").is_err());
    }

    #[test]
    fn a_json_line_names_everything() {
        let d = DeadLetter::parse(
            "1000-0",
            [("f", "v"), ("pelican-stream", "s"), ("pelican-id", "1-0"), ("pelican-deliveries", "5")],
        );
        let line = json_line(&d, 3500);
        assert_eq!(
            line,
            r#"{"id":"1000-0","stream":"s","origin_id":"1-0","group":null,"consumer":null,"deliveries":5,"reason":null,"error":null,"age_ms":2500,"fields":{"f":"v"}}"#
        );
    }
}
