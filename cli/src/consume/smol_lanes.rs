//! The lanes on `pelican-smol`: one `Runner` per lane, each a task on one executor on this
//! thread. Commands block, so each runs on smol's blocking pool while its runner goes on
//! working the connection; entries printed are written on the executor's thread when
//! stdout has room (see `Handler::handle_here`), which spares a hop per entry.

use std::sync::Arc;

use pelican_smol::{RunError, Runner, StopHandle};
use smol::LocalExecutor;

use super::handler::StopAll;
use super::lane::{teller, Lane, LaneFailure, Net, Outcome};
use crate::args::Failure;
use crate::server::tls_message;

/// Runs `lanes` until each has stopped or failed; a lane that fails stops the others.
/// Returns each lane's outcome, in order.
pub fn run(lanes: Vec<Lane>, net: &Net, stop: &Arc<StopAll>) -> Result<Vec<Outcome>, Failure> {
    let several = lanes.len() > 1;
    let mut runners = Vec::with_capacity(lanes.len());
    for lane in lanes {
        let runner = runner(&lane, net, several)?;
        runners.push((lane, runner));
    }
    let handles: Vec<StopHandle> = runners.iter().map(|(_, runner)| runner.stop_handle()).collect();
    stop.install(move || handles.iter().for_each(StopHandle::stop));
    if stop.is_requested() {
        stop.stop(); // asked before the handles were installed: pass it on
    }
    let executor = LocalExecutor::new();
    let tasks: Vec<_> = runners
        .into_iter()
        .map(|(lane, runner)| executor.spawn(run_lane(lane, runner, stop.clone())))
        .collect();
    let outcomes = smol::block_on(executor.run(async {
        let mut outcomes = Vec::with_capacity(tasks.len());
        for task in tasks {
            outcomes.push(task.await);
        }
        outcomes
    }));
    Ok(outcomes)
}

/// A lane's runner: its consumer, the URL's addresses, TLS, its notices told.
fn runner(lane: &Lane, net: &Net, several: bool) -> Result<Runner, Failure> {
    let runner =
        Runner::new(&net.addrs_for(&lane.config.stream)[..], lane.config.clone()).map_err(|e| match e {
            RunError::Config(e) => Failure::Bad(format!("invalid settings: {e}")),
            e => Failure::Failed(e.to_string()),
        })?;
    let screen = lane.handler.shared.screen.clone();
    let mut runner = runner.on_notice(teller(lane.stream(), several, screen));
    if let Some((tls, host)) = &net.tls {
        runner = runner.tls(tls.clone(), host);
    }
    Ok(runner)
}

/// Runs one lane to its end; a failure stops every other lane.
async fn run_lane(lane: Lane, runner: Runner, stop: Arc<StopAll>) -> Outcome {
    let handler = lane.handler;
    let result = runner
        .run(move |entry| {
            let handler = handler.clone();
            async move {
                match handler.handle_here(&entry) {
                    Some(verdict) => verdict,
                    None => smol::unblock(move || handler.handle(&entry)).await,
                }
            }
        })
        .await;
    result.map_err(|e| {
        stop.stop();
        failure(e)
    })
}

/// Why a runner gave up; a TLS failure names the flag that fixes it.
fn failure(e: RunError) -> LaneFailure {
    match e {
        RunError::Tls(e) => LaneFailure { message: tls_message(&e), error: None },
        RunError::Consumer(error) => {
            LaneFailure { message: RunError::Consumer(error.clone()).to_string(), error: Some(error) }
        }
        e => LaneFailure { message: e.to_string(), error: None },
    }
}
