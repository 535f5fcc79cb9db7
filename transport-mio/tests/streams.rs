//! `Streams`: several streams in one call, on real servers and a real cluster. Every wait is
//! bounded.

use std::collections::BTreeMap;
use std::sync::{mpsc, Mutex};
use std::thread;
use std::time::Duration;

use bytes::Bytes;
use pelican::{Config, Entry, Verdict};
use pelican_mio::{RunError, StatsHandle, StreamStats, Streams};
use pelican_tests::admin::Admin;
use pelican_tests::cluster::Cluster;
use pelican_tests::conformance::wait_until;
use pelican_tests::server::{Flavor, Server};

/// The longest any test waits for anything.
const PATIENCE: Duration = Duration::from_secs(30);

const STREAMS: [&str; 3] = ["orders", "refunds", "invoices"];

/// `n` entries added to `stream` (its group made first, if not yet), each naming its stream
/// in field `from`; their ids.
fn fill(admin: &mut Admin, stream: &str, n: usize) -> Vec<String> {
    admin.cmd(&["XGROUP", "CREATE", stream, "g", "0", "MKSTREAM"]);
    let commands: Vec<Vec<String>> = (0..n)
        .map(|i| ["XADD", stream, "*", "from", stream, "i", &i.to_string()].map(String::from).to_vec())
        .collect();
    admin.pipeline(&commands).into_iter().map(|r| r.as_text().expect("an id")).collect()
}

/// One consumer name for every stream: not twins, as the connection names hold the stream.
fn config(stream: &str) -> Config {
    Config::new(stream, "g", "c1")
        .beat(Duration::from_millis(200))
        .backoff(Duration::from_millis(20), Duration::from_millis(200))
        .count(50)
}

/// Every handling: the stream the handler was told, the entry's `from` field, its id.
#[derive(Default)]
struct Seen(Mutex<Vec<(String, String, String)>>);

impl Seen {
    fn record(&self, stream: &Bytes, entry: &Entry) {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let from = text(entry.field(b"from").unwrap_or_default());
        self.0.lock().unwrap().push((text(stream), from, text(entry.id())));
    }

    /// The ids handled per stream, checking that each entry was told its own stream.
    fn by_stream(&self) -> BTreeMap<String, Vec<String>> {
        let mut by = BTreeMap::<String, Vec<String>>::new();
        for (stream, from, id) in self.0.lock().unwrap().iter() {
            assert_eq!(stream, from, "entry {id} handed with the wrong stream");
            by.entry(stream.clone()).or_default().push(id.clone());
        }
        by
    }
}

/// Runs `streams` on a thread of its own, inline or pooled, recording into `seen`.
fn spawn(streams: Streams, pool: bool, seen: &'static Seen) -> mpsc::Receiver<Result<StreamStats, RunError>> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let handler = |stream: &Bytes, entry: &Entry| {
            seen.record(stream, entry);
            Verdict::Ack
        };
        let _ = tx.send(if pool { streams.run_pool(handler) } else { streams.run(handler) });
    });
    rx
}

fn all_acked(handles: &[StatsHandle], n: u64) -> bool {
    handles.iter().all(|h| h.get().stats.acked == n)
}

/// Three streams on one server, one handler: every entry handled once, told its own
/// stream; one stop ends them all, with each stream's counters. Inline and pooled (four in
/// hand per stream), on every server.
#[test]
fn three_streams_on_one_server_each_entry_once_with_its_stream() {
    for flavor in Flavor::ALL {
        for pool in [false, true] {
            let server = Server::start(flavor);
            let mut admin = server.admin();
            let ids: Vec<Vec<String>> = STREAMS.iter().map(|s| fill(&mut admin, s, 300)).collect();
            let configs = STREAMS.map(|s| config(s).concurrency(4));
            let streams = Streams::new(server.addr(), configs).unwrap();
            let (stop, handles) = (streams.stop_handle(), streams.stats_handles());
            let seen: &'static Seen = Box::leak(Box::default());
            let outcome = spawn(streams, pool, seen);
            assert!(wait_until(PATIENCE, || all_acked(&handles, 300)), "{flavor} pool {pool}: all acked");
            // More, while parked on every stream.
            let more: Vec<Vec<String>> = STREAMS.iter().map(|s| fill(&mut admin, s, 20)).collect();
            assert!(wait_until(PATIENCE, || all_acked(&handles, 320)), "{flavor} pool {pool}: the rest");
            stop.stop();
            let stats = outcome.recv_timeout(PATIENCE).expect("returned").expect("a clean stop");
            let by = seen.by_stream();
            for (i, stream) in STREAMS.iter().enumerate() {
                let mut want: Vec<String> = [&ids[i][..], &more[i][..]].concat();
                let mut got = by[*stream].clone();
                if pool {
                    // Four at once finish in any order.
                    got.sort();
                    want.sort();
                }
                assert_eq!(got, want, "{flavor} pool {pool} {stream}: each once");
                assert_eq!(&stats[i].0[..], stream.as_bytes(), "stats in the order of the configs");
                assert_eq!(
                    (stats[i].1.new, stats[i].1.acked),
                    (320, 320),
                    "{flavor} {stream}: {:?}",
                    stats[i].1
                );
                assert_eq!(handles[i].get().stats, stats[i].1);
                assert_eq!(admin.xpending_count(stream, "g"), 0, "{flavor} {stream}");
            }
        }
    }
}

/// A stream that fails for good (its group does not exist) stops the others: they stop
/// cleanly (their acks confirmed) and the run names the stream that failed.
#[test]
fn a_stream_that_fails_stops_the_others() {
    let server = Server::start(Flavor::Valkey81);
    let mut admin = server.admin();
    fill(&mut admin, "orders", 50);
    admin.call(&["XADD", "refunds", "*", "from", "refunds"]); // no group
    let streams = Streams::new(server.addr(), [config("orders"), config("refunds")]).unwrap();
    let seen: &'static Seen = Box::leak(Box::default());
    let outcome = spawn(streams, false, seen);
    let err = outcome.recv_timeout(PATIENCE).expect("returned").unwrap_err();
    let RunError::Stream { stream, error } = &err else { panic!("{err}") };
    assert_eq!(stream, "refunds");
    assert!(matches!(**error, RunError::Consumer(_)), "{err}");
    assert!(err.to_string().starts_with("stream refunds: consumer failed"), "{err}");
    // Stopped as for a stop: what orders handled was acked (what it had read and not handed
    // out stays pending, to come again).
    let handled = seen.by_stream().remove("orders").unwrap_or_default();
    let pending: Vec<String> = admin.xpending_all("orders", "g").into_iter().map(|p| p.0).collect();
    assert!(handled.iter().all(|id| !pending.contains(id)), "handled {handled:?}, pending {pending:?}");
}

/// A handler's panic on one stream stops every stream as a stop: the entry stays pending,
/// the acks earned before on every stream are confirmed, and the run names the stream.
#[test]
fn a_panic_on_one_stream_stops_them_all() {
    for pool in [false, true] {
        let server = Server::start(Flavor::Redis70);
        let mut admin = server.admin();
        let ids: Vec<Vec<String>> = STREAMS.iter().map(|s| fill(&mut admin, s, 100)).collect();
        let poison = ids[1][10].clone();
        let streams = Streams::new(server.addr(), STREAMS.map(config)).unwrap();
        let (tx, rx) = mpsc::channel();
        let watched = poison.clone();
        thread::spawn(move || {
            // Ids repeat across streams (added in the same millisecond): the stream counts.
            let handler = |stream: &Bytes, entry: &Entry| {
                assert!(!(&stream[..] == b"refunds" && entry.id() == watched.as_bytes()), "poisoned");
                Verdict::Ack
            };
            let _ = tx.send(if pool { streams.run_pool(handler) } else { streams.run(handler) });
        });
        let err = rx.recv_timeout(PATIENCE).expect("returned").unwrap_err();
        let RunError::Stream { stream, error } = &err else { panic!("{err}") };
        assert_eq!(stream, "refunds", "pool {pool}");
        let RunError::HandlerPanicked { id, message } = &**error else { panic!("{err}") };
        assert_eq!((id, message.as_str()), (&poison, "poisoned"), "pool {pool}");
        let pending: Vec<String> = admin.xpending_all("refunds", "g").into_iter().map(|p| p.0).collect();
        assert!(pending.contains(&poison), "pool {pool}: the poison stays pending: {pending:?}");
        assert!(!pending.contains(&ids[1][9]), "pool {pool}: the entry before it was acked");
    }
}

/// Two streams on each master of a 3-master cluster, all given the address of a replica
/// (which serves nothing): each stream is led to its master at once (no `MOVED`), every
/// entry is handled once with its stream, and one stop ends them all. Pooled, on Valkey
/// 8.1 and Redis 7.0.
#[test]
fn streams_on_a_cluster_start_at_their_masters() {
    let threads: Vec<_> = [Flavor::Valkey81, Flavor::Redis70]
        .into_iter()
        .map(|flavor| {
            thread::spawn(move || {
                let cluster = Cluster::start(flavor);
                let mut names = Vec::new();
                for master in cluster.masters() {
                    let mine =
                        (0..).map(|i| format!("s{i}")).filter(|s| cluster.owner_of(s) == master).take(2);
                    names.extend(mine);
                }
                let ids: Vec<Vec<String>> =
                    names.iter().map(|s| fill(&mut cluster.admin_for(s), s, 100)).collect();
                let configs: Vec<Config> = names.iter().map(|s| config(s).concurrency(2)).collect();
                let streams = Streams::new(cluster.replicas()[0], configs).unwrap();
                let (stop, handles) = (streams.stop_handle(), streams.stats_handles());
                let seen: &'static Seen = Box::leak(Box::default());
                let outcome = spawn(streams, true, seen);
                assert!(wait_until(PATIENCE, || all_acked(&handles, 100)), "{flavor}: all acked");
                stop.stop();
                let stats = outcome.recv_timeout(PATIENCE).expect("returned").expect("a clean stop");
                let by = seen.by_stream();
                for (i, name) in names.iter().enumerate() {
                    let (mut got, mut want) = (by[name].clone(), ids[i].clone());
                    got.sort();
                    want.sort();
                    assert_eq!(got, want, "{flavor} {name}: each once");
                    assert_eq!(
                        stats[i].1.moved, 0,
                        "{flavor} {name}: started at its master: {:?}",
                        stats[i].1
                    );
                    assert_eq!(cluster.admin_for(name).xpending_count(name, "g"), 0, "{flavor} {name}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("every cluster");
    }
}
