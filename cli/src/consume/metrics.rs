//! `--metrics ADDR`: each lane's consumer as Prometheus metrics at `/metrics`, whether
//! pelican is alive at `/livez` and whether it is consuming at `/readyz` (and `/healthz`),
//! served by `pelican-metrics` on a thread of its own.
//!
//! Alive: the event loop (mio's poll, smol's executor) turns — it beats [`LOOP`] at every
//! turn, and turns at least every [`TURN`] — and no entry is in hand past `--overdue-ms`.
//! Ready: alive, every lane connected to a master, no stop asked, the `--pipe` handler up.
//!
//! The server reads each lane's latest snapshot from a [`Published`] slot. A smol lane's
//! runner publishes its own (its `StatsHandle`); a mio lane is driven here, by the CLI, so
//! it publishes through a [`Publisher`] after each drive that changed something — one short
//! lock then, as the transports' stats handles do. The snapshots are published without
//! `--metrics` too: the overdue watch (`super::overdue`) reads them.
//! Served until pelican exits: through a graceful stop, the counters keep their last values
//! and `/healthz` answers 503 `stopping`.
//!
//! [`Published`]: super::published::Published
//! [`Publisher`]: super::published::Publisher

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use pelican_metrics::{Heartbeat, Labels, Metrics, Serving};

use super::lane::Lane;
use super::stop::StopAll;
use crate::failure::Failure;

/// The event loop's heartbeat: beaten at each turn of mio's poll loop, and by a task on
/// smol's executor. One per process, as there is one loop.
pub static LOOP: LazyLock<Heartbeat> = LazyLock::new(Heartbeat::new);

/// The longest the event loop waits with nothing to do before it turns anyway (and beats).
pub const TURN: Duration = Duration::from_secs(1);

/// How long the loop may go without a turn before pelican is not alive. Far above [`TURN`]:
/// the loop may wait out a host name's lookup (on mio it blocks the loop: a resolver that
/// does not answer takes its timeout, 5 s per try and name server by default), which a
/// restart would not mend either.
const STALL: Duration = Duration::from_secs(60);

/// Starts serving the lanes' metrics on `addr`: every lane must have its [`Published`]
/// slot. Alive while the event loop turns and no entry has been in hand longer than
/// `overdue`; ready while alive, no stop is asked, every lane is connected and the `--pipe`
/// handler is up. A port that cannot be listened on is bad usage (exit 2), told before any
/// connection.
///
/// [`Published`]: super::published::Published
pub fn serve(addr: &str, lanes: &[Lane], stop: &Arc<StopAll>, overdue: Duration) -> Result<Serving, Failure> {
    let mut metrics = Metrics::new();
    for lane in lanes {
        let published = lane.published.clone();
        let shared = &lane.handlers.first().shared;
        let labels = Labels::new(lane.name(), shared.group.clone(), shared.consumer.clone());
        metrics = metrics.stream(labels, move || published.read());
    }
    let stop = stop.clone();
    let metrics = metrics.overdue_after(overdue).heartbeat("the event loop", &LOOP, STALL);
    let mut metrics = metrics.check(move || match stop.is_requested() {
        true => Err("stopping: finishing the entries in hand and confirming their acks".into()),
        false => Ok(()),
    });
    if let Some(pipe) = lanes.first().and_then(|lane| lane.handlers.pipe().cloned()) {
        let help = "Times the --pipe handler was started again after it exited or died.";
        let restarts = pipe.clone();
        metrics = metrics
            .check(move || pipe.health())
            .counter("pelican_handler_restarts", help, move || restarts.restarts());
    }
    metrics.serve(addr).map_err(|e| Failure::Bad(format!("--metrics {addr}: cannot listen there: {e}")))
}
