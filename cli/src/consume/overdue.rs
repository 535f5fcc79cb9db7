//! `--overdue-ms`: an entry in hand longer than this is told on stderr, once, with what to
//! look at for its handler's kind, and makes `/healthz` 503 (`Metrics::overdue_after`).
//! Both read the consumer's own account of its entries in hand (each lane's snapshot, see
//! [`Published`]): a handler that never gives its verdict holds its entry for good while
//! the consumer renews its lease, so the group does not see the silence.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use pelican::OldestInHand;

use super::handler::Shared;
use super::lane::Handlers;
use super::published::Published;
use crate::name::show;

/// How often the lanes are looked at: often enough to tell within a second of the limit.
fn period(limit: Duration) -> Duration {
    (limit / 4).clamp(Duration::from_millis(50), Duration::from_secs(1))
}

/// Looks at each lane's oldest entry in hand, on a thread of its own, until the process
/// exits; tells each entry found past `shared.overdue` once.
pub fn watch(lanes: Vec<(Published, Handlers)>, shared: Arc<Shared>) -> std::io::Result<()> {
    let limit = shared.overdue;
    thread::Builder::new().name("pelican-overdue".into()).spawn(move || {
        let mut told: Vec<Option<OldestInHand>> = vec![None; lanes.len()];
        loop {
            thread::sleep(period(limit));
            let now = Instant::now();
            for ((published, handlers), told) in lanes.iter().zip(&mut told) {
                let Some(oldest) = published.read().oldest_in_hand else { continue };
                if oldest.age(now) > limit && told.as_ref() != Some(&oldest) {
                    tell(&shared, handlers, &oldest, now);
                    *told = Some(oldest);
                }
            }
        }
    })?;
    Ok(())
}

/// One line about `oldest`, worded for the handler that holds it.
fn tell(shared: &Shared, handlers: &Handlers, oldest: &OldestInHand, now: Instant) {
    let prefix = match shared.several || handlers.len() > 1 {
        true => format!("stream {}: ", show(&oldest.stream)),
        false => String::new(),
    };
    let (id, secs, ms) = (show(&oldest.id), oldest.age(now).as_secs(), shared.overdue.as_millis());
    let line = match (&shared.exec, shared.piped) {
        (Some(_), _) => format!(
            "{prefix}the command for {id} has run {secs} s (over --overdue-ms {ms}) and goes on; the entry \
             stays in hand, and /healthz says so"
        ),
        (None, true) => format!(
            "{prefix}no answer from the --pipe handler for {id} in {secs} s (over --overdue-ms {ms}); the entry \
             stays in hand, and /healthz says so. Does the handler flush its stdout after each answer? \
             (Python: print(…, flush=True); it is block-buffered into a pipe)"
        ),
        (None, false) => format!(
            "{prefix}the line of {id} has waited {secs} s for stdout to take it (over --overdue-ms {ms}): is \
             anything reading it? The entry stays in hand, and /healthz says so"
        ),
    };
    shared.screen.tell(format_args!("pelican: {line}"));
}
