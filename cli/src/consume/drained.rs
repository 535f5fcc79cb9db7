//! `--exit-when-drained[=MS]`: a batch job's end. Once every lane is caught up — its consumer
//! parked with nothing in hand or buffered, its own pending entries drained, its sweep of
//! idle ones done, its last read short (`Snapshot::caught_up`) — and stays so, handing out
//! nothing, for MS, the run stops as on a signal: the acks confirmed, exit 0.
//!
//! Read from each lane's latest snapshot (as `--metrics` reads them), on a thread of its own;
//! an entry handed out between two looks is seen in the counters, and starts the wait again.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::handler::Shared;
use super::published::Published;

/// How often the lanes are looked at, at most.
const LOOK_EVERY: Duration = Duration::from_millis(20);

/// Watches `lanes` until they have been caught up for `quiet`, then stops the run (told
/// unless `--quiet`). Ends at any stop.
pub fn watch(lanes: Vec<Published>, shared: Arc<Shared>, quiet: Duration) -> std::io::Result<()> {
    thread::Builder::new().name("pelican-drained".into()).spawn(move || {
        let mut since: Option<(Instant, u64)> = None;
        let every = (quiet / 4).clamp(Duration::from_millis(1), LOOK_EVERY);
        while !shared.stop.is_requested() {
            thread::sleep(every);
            let snapshots: Vec<_> = lanes.iter().map(Published::read).collect();
            let caught_up = snapshots.iter().all(|s| s.caught_up);
            // Entries handed out so far: one more between two looks is activity.
            let seen: u64 =
                snapshots.iter().map(|s| s.stats.drained + s.stats.claimed + s.stats.new).sum();
            since = match since {
                Some((at, before)) if caught_up && before == seen => Some((at, before)),
                _ if caught_up => Some((Instant::now(), seen)),
                _ => None,
            };
            if since.is_some_and(|(at, _)| at.elapsed() >= quiet) {
                if !shared.quiet {
                    shared.screen.tell(format_args!(
                        "pelican: drained: nothing pending, nothing new for {} ms (--exit-when-drained); stopping",
                        quiet.as_millis()
                    ));
                }
                shared.stop.stop();
                return;
            }
        }
    })?;
    Ok(())
}
