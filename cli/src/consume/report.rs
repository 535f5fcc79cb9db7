//! What `consume` tells of its work: the progress line and summary on stderr, and the
//! `--stats-json` file. Both give the total over the lanes and each stream's part.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use pelican::{GroupHealth, Stats};

use super::handler::{Counters, Watch};
use super::lane::Handlers;
use super::screen::Screen;
use crate::json::Object;

/// A named counter: its name in the JSON, and how to read it.
type Named<T> = (&'static str, fn(&T) -> u64);

/// Every [`Stats`] counter, by its name in the JSON.
const STATS: [Named<Stats>; 23] = [
    ("drained", |s| s.drained),
    ("claimed", |s| s.claimed),
    ("new", |s| s.new),
    ("acked", |s| s.acked),
    ("retried", |s| s.retried),
    ("released", |s| s.released),
    ("retries_delayed", |s| s.retries_delayed),
    ("deleted_seen", |s| s.deleted_seen),
    ("lost_to_peer", |s| s.lost_to_peer),
    ("acks_unmatched", |s| s.acks_unmatched),
    ("acks_unreplicated", |s| s.acks_unreplicated),
    ("reconnects", |s| s.reconnects),
    ("moved", |s| s.moved),
    ("errors", |s| s.errors),
    ("group_recreated", |s| s.group_recreated),
    ("abandoned_acks", |s| s.abandoned_acks),
    ("leases_renewed", |s| s.leases_renewed),
    ("leases_lost", |s| s.leases_lost),
    ("dead_lettered", |s| s.dead_lettered),
    ("reads_shrunk", |s| s.reads_shrunk),
    ("committed", |s| s.committed),
    ("commits_fenced", |s| s.commits_fenced),
    ("commits_refused", |s| s.commits_refused),
];

/// The handler's counts, by their name in the JSON.
const COUNTS: [Named<Counters>; 2] =
    [("handled", |c| c.handled.load(Relaxed)), ("failed", |c| c.failed.load(Relaxed))];

/// A lane's counts as the report reads them: its stream, the handler's counts, and the
/// consumer's counters once it stopped.
pub struct LaneCounts<'a> {
    /// The lane's stream.
    pub stream: &'a str,
    /// Its handler's counts.
    pub counters: &'a Counters,
    /// Its lane's consumer's counters (`None`: it failed).
    pub stats: Option<&'a Stats>,
    /// The only stream of its lane: the consumer's counters are this stream's alone.
    pub alone: bool,
    /// Its lane's first stream: the consumer's counters are summed once, with it.
    pub first: bool,
}

/// A consumer counter summed over the lanes (those that failed count nothing).
fn stat_total(lanes: &[LaneCounts<'_>], get: fn(&Stats) -> u64) -> u64 {
    lanes.iter().filter(|lane| lane.first).filter_map(|lane| lane.stats.map(get)).sum()
}

/// A handler count summed over the lanes.
fn count_total(lanes: &[LaneCounts<'_>], get: fn(&Counters) -> u64) -> u64 {
    lanes.iter().map(|lane| get(lane.counters)).sum()
}

/// The most entries in hand at once, by its name in the JSON.
const IN_HAND_MAX: Named<Counters> = ("in_hand_max", |c| c.in_hand_max.load(Relaxed) as u64);

/// The `--stats-json` object: every [`Stats`] counter and the handler's `handled` and
/// `failed`, summed over the lanes, the most entries in hand at once over all lanes
/// (`total`'s), the run time, and the same counters per stream under `streams` (one member
/// per `--stream`, in the order given).
pub fn stats_json(lanes: &[LaneCounts<'_>], total: &Counters, elapsed: Duration) -> String {
    let mut json = Object::new();
    for (name, get) in STATS {
        json = json.num(name, stat_total(lanes, get));
    }
    for (name, get) in COUNTS {
        json = json.num(name, count_total(lanes, get));
    }
    json = json.num(IN_HAND_MAX.0, IN_HAND_MAX.1(total));
    let mut streams = Object::new();
    for lane in lanes {
        streams = streams.raw(lane.stream, &lane_json(lane));
    }
    json.num("seconds", format_args!("{:.3}", elapsed.as_secs_f64()))
        .raw("streams", &streams.finish())
        .finish()
}

/// One lane's counters, as in the totals.
fn lane_json(lane: &LaneCounts<'_>) -> String {
    let mut json = Object::new();
    // A consumer of many streams counts for all of them: its counters are in the totals.
    for (name, get) in STATS.into_iter().filter(|_| lane.alone) {
        json = json.num(name, lane.stats.map_or(0, get));
    }
    for (name, get) in COUNTS.into_iter().chain([IN_HAND_MAX]) {
        json = json.num(name, get(lane.counters));
    }
    json.finish()
}

/// The progress line on stderr, once a second: the totals, then each stream's handled (and
/// failed) count when there are several. Dropping it ends the line.
pub struct Progress {
    done: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
    screen: Arc<Screen>,
}

impl Progress {
    /// Starts the line's thread, reading the lanes' counts; on a terminal the line is
    /// rewritten in place.
    pub fn spawn(handlers: &Handlers, screen: &Arc<Screen>) -> Progress {
        let handlers = handlers.clone();
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        let on = screen.clone();
        let thread = thread::spawn(move || {
            let mut last = (Instant::now(), 0);
            while !d.load(Relaxed) {
                thread::park_timeout(Duration::from_secs(1));
                if d.load(Relaxed) || last.0.elapsed() < Duration::from_millis(990) {
                    continue;
                }
                // Read anew: streams join as they are found.
                let lanes: Vec<(String, Arc<Counters>, Arc<Watch>)> = handlers
                    .list()
                    .iter()
                    .map(|h| (h.stream.clone(), h.counters.clone(), h.watch.clone()))
                    .collect();
                let handled = lanes.iter().map(|(_, c, _)| c.handled.load(Relaxed)).sum::<u64>();
                let rate = (handled - last.1) as f64 / last.0.elapsed().as_secs_f64();
                last = (Instant::now(), handled);
                on.draw(&progress_line(rate, &lanes));
            }
        });
        Progress { done, thread: Some(thread), screen: screen.clone() }
    }

    /// Stops the line's thread (clearing the line on a terminal); once.
    fn end(&mut self) {
        let Some(thread) = self.thread.take() else { return };
        self.done.store(true, Relaxed);
        thread.thread().unpark();
        let _ = thread.join();
        drop(self.screen.clear());
    }

    /// Ends the line and prints a summary: the totals (and the most entries in hand at once,
    /// over all lanes, if more than one), and a line per stream when there are several.
    pub fn finish(mut self, lanes: &[LaneCounts<'_>], total: &Counters, elapsed: Duration) {
        self.end();
        let c = |get: fn(&Counters) -> u64| count_total(lanes, get);
        // The consumers' totals are known only if every lane stopped.
        let stopped = lanes.iter().all(|l| l.stats.is_some());
        let s = |get: fn(&Stats) -> u64| stopped.then(|| stat_total(lanes, get));
        let (handled, secs) = (c(|c| c.handled.load(Relaxed)), elapsed.as_secs_f64());
        let most = match total.in_hand_max.load(Relaxed) {
            0 | 1 => String::new(),
            n => format!(", at most {n} in hand at once"),
        };
        say!(
            "{}pelican: {handled} handled in {secs:.1} s{}{}{most}",
            crate::stamp::now(),
            outcome_text(s),
            counts_text(c)
        );
        if lanes.len() > 1 {
            // The busiest streams only, past a few (all are in `--stats-json`).
            let mut shown: Vec<&LaneCounts<'_>> = lanes.iter().collect();
            if shown.len() > PARTS_SHOWN {
                shown.sort_by_key(|lane| std::cmp::Reverse(lane.counters.handled.load(Relaxed)));
                shown.truncate(PARTS_SHOWN - 1);
            }
            let more = lanes.len() - shown.len();
            for lane in shown {
                let c = |get: fn(&Counters) -> u64| get(lane.counters);
                let s = |get: fn(&Stats) -> u64| lane.stats.filter(|_| lane.alone).map(get);
                let handled = c(|c| c.handled.load(Relaxed));
                say!(
                    "{}pelican:   {}: {handled} handled{}{}",
                    crate::stamp::now(),
                    lane.stream,
                    outcome_text(s),
                    counts_text(c)
                );
            }
            if more > 0 {
                say!("{}pelican:   and {more} more streams (each in --stats-json)", crate::stamp::now());
            }
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.end();
    }
}

/// `N entries/s, H handled, F failed, C reclaimed, D drained, I in hand, B buffered` (the
/// entries whose command runs, and those read and waiting, when the transport tells), then
/// ` | a H, b H (F failed, I in hand, B buffered)` when there are several lanes (what is
/// not zero), then the group's health as last told (` | group: …`), and ` | waiting for the
/// server` while a lane cannot reach it.
fn progress_line(rate: f64, lanes: &[(String, Arc<Counters>, Arc<Watch>)]) -> String {
    let sum = |get: fn(&Counters) -> u64| lanes.iter().map(|(_, c, _)| get(c)).sum::<u64>();
    let mut line =
        format!("{rate:.0} entries/s, {} handled{}", sum(|c| c.handled.load(Relaxed)), counts_text(sum));
    let _ = write!(line, ", {} in hand", sum(|c| c.in_hand.load(Relaxed) as u64));
    let buffered: Vec<usize> = lanes.iter().filter_map(|(_, _, w)| w.buffered()).collect();
    if !buffered.is_empty() {
        let _ = write!(line, ", {} buffered", buffered.iter().sum::<usize>());
    }
    if lanes.len() > 1 {
        // The busiest streams only, past a few: a line, not a page.
        let mut shown: Vec<&(String, Arc<Counters>, Arc<Watch>)> = lanes.iter().collect();
        if shown.len() > PARTS_SHOWN {
            shown.sort_by_key(|(_, c, _)| std::cmp::Reverse(c.handled.load(Relaxed)));
            shown.truncate(PARTS_SHOWN - 1);
        }
        let mut parts: Vec<String> = shown
            .into_iter()
            .map(|(stream, c, w)| {
                let handled = c.handled.load(Relaxed);
                let notes: Vec<String> = [
                    (c.failed.load(Relaxed) as usize, "failed"),
                    (c.in_hand.load(Relaxed), "in hand"),
                    (w.buffered().unwrap_or(0), "buffered"),
                ]
                .into_iter()
                .filter(|(n, _)| *n > 0)
                .map(|(n, what)| format!("{n} {what}"))
                .collect();
                match &notes[..] {
                    [] => format!("{stream} {handled}"),
                    notes => format!("{stream} {handled} ({})", notes.join(", ")),
                }
            })
            .collect();
        if lanes.len() > parts.len() {
            parts.push(format!("{} more streams", lanes.len() - parts.len()));
        }
        let _ = write!(line, " | {}", parts.join(", "));
    }
    let healths: Vec<GroupHealth> = lanes
        .iter()
        .filter_map(|(_, _, w)| w.health.lock().unwrap_or_else(|e| e.into_inner()).clone())
        .collect();
    match &healths[..] {
        [] => {}
        [one] if lanes.len() == 1 => {
            let _ = write!(line, " | {one}");
        }
        several => {
            let pending: u64 = several.iter().map(|h| h.pending).sum();
            let _ = write!(line, " | groups: {pending} pending");
            let lags: Option<u64> = several.iter().map(|h| h.lag).sum();
            if let (Some(lag), true) = (lags, several.len() == lanes.len()) {
                let _ = write!(line, ", lag {lag}");
            }
        }
    }
    if lanes.iter().any(|(_, _, w)| w.down.load(Relaxed)) {
        line += " | waiting for the server";
    }
    line
}

/// How many streams the progress line names at most (the busiest, then how many more).
const PARTS_SHOWN: usize = 8;

/// `, F failed, C reclaimed, D drained`.
fn counts_text(count: impl Fn(fn(&Counters) -> u64) -> u64) -> String {
    format!(
        ", {} failed, {} reclaimed, {} drained",
        count(|c| c.failed.load(Relaxed)),
        count(|c| c.claimed.load(Relaxed)),
        count(|c| c.drained.load(Relaxed))
    )
}

/// `, A acked` and, when not zero, dead-lettered, taken by peers, cluster redirects
/// followed and reconnects (an outage is worth knowing of after the fact); nothing if the
/// consumer's counters are unknown (a lane failed).
fn outcome_text(stat: impl Fn(fn(&Stats) -> u64) -> Option<u64>) -> String {
    let Some(acked) = stat(|s| s.acked) else { return String::new() };
    let mut text = format!(", {acked} acked");
    for (get, what) in [
        ((|s| s.committed) as fn(&Stats) -> u64, "committed with their writes"),
        (|s| s.commits_fenced, "commits fenced off"),
        (|s| s.commits_refused, "commits refused"),
        (|s| s.dead_lettered, "dead-lettered"),
        (|s| s.leases_lost, "taken by peers"),
        (|s| s.moved, "cluster redirects followed"),
    ] {
        match stat(get) {
            Some(0) | None => {}
            Some(n) => {
                let _ = write!(text, ", {n} {what}");
            }
        }
    }
    match stat(|s| s.reconnects) {
        Some(0) | None => {}
        Some(1) => text.push_str(", 1 reconnect"),
        Some(n) => {
            let _ = write!(text, ", {n} reconnects");
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(handled: u64, failed: u64) -> Counters {
        let c = Counters::default();
        c.handled.store(handled, Relaxed);
        c.failed.store(failed, Relaxed);
        c
    }

    #[test]
    fn stats_json_sums_lanes_and_shows_each() {
        let (a, b) = (counters(3, 1), counters(2, 0));
        let mut sa = Stats::default();
        sa.acked = 2;
        sa.moved = 1;
        let mut sb = Stats::default();
        sb.acked = 2;
        let lanes = [
            LaneCounts { stream: "{a}", counters: &a, stats: Some(&sa), alone: true, first: true },
            LaneCounts { stream: "b", counters: &b, stats: Some(&sb), alone: true, first: true },
        ];
        a.in_hand_max.store(3, Relaxed);
        b.in_hand_max.store(2, Relaxed);
        let total = counters(0, 0);
        total.in_hand_max.store(4, Relaxed);
        let json = stats_json(&lanes, &total, Duration::from_millis(1500));
        assert!(json.starts_with(r#"{"drained":0,"claimed":0,"new":0,"acked":4,"#), "{json}");
        assert!(json.contains(r#""moved":1,"#), "{json}");
        assert!(
            json.contains(r#""handled":5,"failed":1,"in_hand_max":4,"seconds":1.500,"streams":{"{a}":{"#),
            "{json}"
        );
        assert!(json.contains(r#""handled":3,"failed":1,"in_hand_max":3},"b":"#), "{json}");
        assert!(json.ends_with(r#""handled":2,"failed":0,"in_hand_max":2}}}"#), "{json}");
    }

    #[test]
    fn the_summary_tells_reconnects_when_any() {
        let mut stats = Stats::default();
        stats.acked = 3;
        assert_eq!(outcome_text(|get| Some(get(&stats))), ", 3 acked");
        stats.reconnects = 1;
        assert_eq!(outcome_text(|get| Some(get(&stats))), ", 3 acked, 1 reconnect");
        stats.reconnects = 4;
        stats.moved = 2;
        assert_eq!(
            outcome_text(|get| Some(get(&stats))),
            ", 3 acked, 2 cluster redirects followed, 4 reconnects"
        );
        assert_eq!(outcome_text(|_| None), "");
    }

    #[test]
    fn progress_names_streams_when_several() {
        let lane = |name: &str, c| (name.to_string(), Arc::new(c), Arc::<Watch>::default());
        let lanes = vec![lane("a", counters(3, 1)), lane("b", counters(2, 0))];
        assert_eq!(
            progress_line(5.0, &lanes),
            "5 entries/s, 5 handled, 1 failed, 0 reclaimed, 0 drained, 0 in hand | a 3 (1 failed), b 2"
        );
        assert_eq!(
            progress_line(1.0, &lanes[1..]),
            "1 entries/s, 2 handled, 0 failed, 0 reclaimed, 0 drained, 0 in hand"
        );
    }

    #[test]
    fn progress_shows_entries_in_hand_and_buffered() {
        let lane = |name: &str, in_hand| {
            let c = counters(1, 0);
            c.in_hand.store(in_hand, Relaxed);
            (name.to_string(), Arc::new(c), Arc::<Watch>::default())
        };
        let lanes = vec![lane("a", 4), lane("b", 1)];
        // smol tells nothing of its buffer: nothing shown.
        assert_eq!(
            progress_line(2.0, &lanes),
            "2 entries/s, 2 handled, 0 failed, 0 reclaimed, 0 drained, 5 in hand | a 1 (4 in hand), b 1 (1 in hand)"
        );
        lanes[0].2.set_buffered(12);
        lanes[1].2.set_buffered(0);
        assert_eq!(
            progress_line(2.0, &lanes),
            "2 entries/s, 2 handled, 0 failed, 0 reclaimed, 0 drained, 5 in hand, 12 buffered \
             | a 1 (4 in hand, 12 buffered), b 1 (1 in hand)"
        );
    }

    #[test]
    fn progress_shows_the_group_and_an_outage() {
        let lane = |name: &str| (name.to_string(), Arc::new(counters(0, 0)), Arc::<Watch>::default());
        let lanes = vec![lane("a"), lane("b")];
        let health = |pending, lag| {
            let mut health = GroupHealth::default();
            (health.pending, health.lag, health.consumers) = (pending, lag, 2);
            health
        };
        *lanes[0].2.health.lock().unwrap() = Some(health(3, Some(10)));
        assert_eq!(
            progress_line(0.0, &lanes[..1]),
            "0 entries/s, 0 handled, 0 failed, 0 reclaimed, 0 drained, 0 in hand | group: 3 pending, lag 10, 2 consumers"
        );
        // Several: pending summed; lag only once every lane's is known.
        assert!(progress_line(0.0, &lanes).ends_with("| a 0, b 0 | groups: 3 pending"));
        *lanes[1].2.health.lock().unwrap() = Some(health(4, Some(1)));
        assert!(progress_line(0.0, &lanes).ends_with("| groups: 7 pending, lag 11"));
        *lanes[1].2.health.lock().unwrap() = Some(health(4, None));
        assert!(progress_line(0.0, &lanes).ends_with("| groups: 7 pending"), "no lag on 6.2");
        lanes[1].2.down.store(true, Relaxed);
        assert!(progress_line(0.0, &lanes).ends_with("| groups: 7 pending | waiting for the server"));
    }
}
