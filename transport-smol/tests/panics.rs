//! A handler that panics over `pelican-smol`, on Redis 6.2, Redis 7.0 and Valkey 8.1: the
//! run stops as for a stop, loses no earned ack, and names the entry, which stays pending.
//!
//! The panics these tests provoke are printed by the panic hook, as any would be.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

use pelican::{Config, Verdict};
use pelican_smol::{RunError, Runner};
use pelican_tests::server::{Flavor, Server};
use smol::{future, Timer};

/// The longest a run may take before the test fails.
const LIMIT: Duration = Duration::from_secs(30);

fn config(concurrency: u32) -> Config {
    Config::new("s", "g", "c1")
        .concurrency(concurrency)
        .beat(Duration::from_millis(200))
        .min_idle(Duration::from_secs(3600))
        .backoff(Duration::from_millis(20), Duration::from_millis(200))
        .client_name("pelican-c1")
}

fn server_with_group(flavor: Flavor) -> Server {
    let server = Server::start(flavor);
    server.admin().call(&["XGROUP", "CREATE", "s", "g", "0", "MKSTREAM"]);
    server
}

/// Runs `scenario` on every server at once, each on its own thread.
fn on_every_server(scenario: fn(Flavor)) {
    let threads: Vec<_> =
        Flavor::ALL.into_iter().map(|flavor| thread::spawn(move || scenario(flavor))).collect();
    for (flavor, thread) in Flavor::ALL.into_iter().zip(threads) {
        if thread.join().is_err() {
            panic!("failed on {}", flavor.name());
        }
    }
}

/// `run` on this thread, bounded by [`LIMIT`]: past it the run is dropped and the test fails.
fn bounded<T>(run: impl Future<Output = T>) -> T {
    smol::block_on(future::or(async { Some(run.await) }, async {
        Timer::after(LIMIT).await;
        None
    }))
    .unwrap_or_else(|| panic!("the run did not end within {LIMIT:?}"))
}

fn pending(server: &Server) -> Vec<String> {
    server.admin().xpending_all("s", "g").into_iter().map(|p| p.0).collect()
}

/// Issue 22.1: one at a time, a handler acks entries 1 to 2,999 and panics on the 3,000th.
/// `run` returns `HandlerPanicked` naming it, and it alone stays pending: every earned ack
/// went out and was confirmed before `run` returned (none is left to be handled again).
#[test]
fn a_panic_on_the_last_of_3000_loses_no_earned_ack() {
    on_every_server(panic_on_the_last);
}

fn panic_on_the_last(flavor: Flavor) {
    let server = server_with_group(flavor);
    let ids = server.admin().xadd_n("s", 3000, 8);
    let runner = Runner::new(server.addr(), config(1)).unwrap();
    let last = ids[2999].as_bytes();
    let calls = AtomicUsize::new(0);
    let calls_ref = &calls;
    let outcome = bounded(runner.run(|entry| async move {
        calls_ref.fetch_add(1, SeqCst);
        if entry.id() == last {
            panic!("poison entry (this panic is the test's)");
        }
        Verdict::Ack
    }));
    match outcome {
        Err(RunError::HandlerPanicked { id, message }) => {
            assert_eq!(id, ids[2999], "{flavor:?}: the entry named");
            assert_eq!(message, "poison entry (this panic is the test's)", "{flavor:?}");
        }
        other => panic!("{flavor:?}: expected HandlerPanicked, got {other:?}"),
    }
    assert_eq!(calls.load(SeqCst), 3000, "{flavor:?}: each entry handed out once");
    assert_eq!(pending(&server), [ids[2999].clone()], "{flavor:?}: only the panicked entry stays pending");
}

/// With 8 in hand, a handler panics in its future on one entry and, in the other run, when
/// called (with a payload that is not a string). Nothing more is handed out; the others in
/// hand finish and their acks are confirmed; `run` names the entry, which stays pending
/// with every entry read but not handed out, and no handled entry does.
#[test]
fn a_panic_among_eight_in_hand_stops_as_a_stop() {
    on_every_server(|flavor| {
        panic_among_eight(flavor, Where::InTheFuture);
        panic_among_eight(flavor, Where::Calling);
    });
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Where {
    InTheFuture,
    Calling,
}

fn panic_among_eight(flavor: Flavor, at: Where) {
    let server = server_with_group(flavor);
    let ids = server.admin().xadd_n("s", 400, 8);
    let runner = Runner::new(server.addr(), config(8).count(50)).unwrap();
    let poison = ids[200].as_bytes();
    let calls = AtomicUsize::new(0);
    let acked = Mutex::new(Vec::new());
    let (calls_ref, acked_ref) = (&calls, &acked);
    let outcome = bounded(runner.run(|entry| {
        calls_ref.fetch_add(1, SeqCst);
        if at == Where::Calling && entry.id() == poison {
            std::panic::panic_any(22_u32);
        }
        async move {
            Timer::after(Duration::from_millis(5)).await;
            if entry.id() == poison {
                panic!("poison entry (this panic is the test's)");
            }
            acked_ref.lock().unwrap().push(String::from_utf8_lossy(entry.id()).into_owned());
            Verdict::Ack
        }
    }));
    match outcome {
        Err(RunError::HandlerPanicked { id, message }) => {
            assert_eq!(id, ids[200], "{flavor:?} {at:?}: the entry named");
            let want = match at {
                Where::InTheFuture => "poison entry (this panic is the test's)",
                Where::Calling => "a non-string panic",
            };
            assert_eq!(message, want, "{flavor:?} {at:?}");
        }
        other => panic!("{flavor:?} {at:?}: expected HandlerPanicked, got {other:?}"),
    }
    let calls = calls.load(SeqCst);
    let acked: BTreeSet<String> = acked.into_inner().unwrap().into_iter().collect();
    let pending: BTreeSet<String> = pending(&server).into_iter().collect();
    // Handed out in id order: the poison is the 201st; a panic when called stops at once.
    match at {
        Where::Calling => assert_eq!(calls, 201, "{flavor:?} {at:?}: nothing handed out after the panic"),
        Where::InTheFuture => assert!((201..=208).contains(&calls), "{flavor:?} {at:?}: {calls} handed out"),
    }
    assert_eq!(acked.len(), calls - 1, "{flavor:?} {at:?}: every other entry in hand finished");
    assert!(pending.contains(&ids[200]), "{flavor:?} {at:?}: the panicked entry stays pending");
    assert!(pending.is_disjoint(&acked), "{flavor:?} {at:?}: every earned ack was confirmed");
    let handed: BTreeSet<&String> = ids[..calls].iter().collect();
    assert!(
        pending.iter().all(|id| id == &ids[200] || !handed.contains(id)),
        "{flavor:?} {at:?}: the rest pending were never handed out"
    );
}
