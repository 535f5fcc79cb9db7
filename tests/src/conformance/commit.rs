//! Exactly-once stages ([`Verdict::Commit`]): a stage reads `s` and writes `out` (and a
//! counter) with each entry's ack in one fenced step. The stories: a crash mid-stream and a
//! restart; a consumer paused past `min_idle` (a zombie) whose entry a peer took and
//! committed; a connection cut after the commit went through and before its answer; writes
//! that would fail (nothing written); counts per key in a hash (`HINCRBY`) across a crash, and
//! its refusals; an ACL without scripting (refused at the start); a
//! cluster with hash-tagged keys and a key in another slot. Part of the conformance suite
//! (see the parent module). Each checks the server's own view: every input in `out` once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use pelican::{Config, Entry, Protocol, Verdict, Writes};

use super::cluster::on_every_cluster;
use super::kit::{
    create_group, wait_until, Handler, SharedHandler, Target, Transport, GROUP, SETTLE, STREAM,
};
use crate::admin::Admin;
use crate::proxy::CutProxy;
use crate::server::{Endpoint, Options};

/// The output stream.
const OUT: &str = "out";
/// The counter every commit adds 1 to.
const COUNT: &str = "n";

/// The commit of one stage step: the input's id into `out`, and 1 onto `n`.
fn stage(e: &Entry, out: &str, count: &str) -> Verdict {
    Verdict::Commit(Writes::new().add(out, [(&b"input"[..], e.id())]).incr_by(count, 1))
}

/// A handler that commits each entry and counts the calls.
fn committing(calls: &Arc<AtomicUsize>) -> Handler {
    let calls = calls.clone();
    Box::new(move |e: &Entry| {
        calls.fetch_add(1, Ordering::SeqCst);
        stage(e, OUT, COUNT)
    })
}

/// Each of `ids` in `out` exactly once, `n` counting them, nothing pending.
fn each_once(admin: &mut Admin, ids: &[String]) {
    let got = admin.count_by_field(OUT, "input");
    let twice: Vec<_> = got.iter().filter(|(_, n)| **n > 1).collect();
    let missing: Vec<_> = ids.iter().filter(|id| !got.contains_key(*id)).collect();
    assert!(twice.is_empty() && missing.is_empty(), "written twice {twice:?}, never {missing:?}");
    assert_eq!(got.len(), ids.len(), "only the inputs");
    assert_eq!(admin.call(&["GET", COUNT]).as_text(), Some(ids.len().to_string()));
    assert_eq!(admin.xpending_count(STREAM, GROUP), 0);
}

/// A crash (the connection cut, the run abandoned with an entry in hand and commits owed)
/// in the middle of 300 entries, then two consumers (the crashed one's second life drains
/// what it held, four entries in hand at once): every input written once.
pub fn commit_crash_restart<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    create_group(&mut admin);
    let ids = admin.xadd_n(STREAM, 300, 8);
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let slow = Box::new(move |e: &Entry| {
        counted.fetch_add(1, Ordering::SeqCst);
        thread::sleep(Duration::from_millis(2)); // so that the crash comes mid-stream
        stage(e, OUT, COUNT)
    });
    let first = T::spawn(server.endpoint(), t.config("c1").count(10), slow);
    assert!(wait_until(SETTLE, || calls.load(Ordering::SeqCst) >= 100), "handled {calls:?}");
    first.crash(&mut admin, "c1");
    let _ = first.join(SETTLE);
    let before = admin.xlen(OUT);
    assert!(before < 300, "the crash came after the end: {before}");
    // The second life keeps four in hand at once (mio's pool, smol's futures).
    let counted = calls.clone();
    let shared: SharedHandler = Arc::new(move |e: &Entry| {
        counted.fetch_add(1, Ordering::SeqCst);
        stage(e, OUT, COUNT)
    });
    let again = T::spawn_concurrent(server.endpoint(), t.config("c1").count(10).concurrency(4), shared);
    let peer = T::spawn(server.endpoint(), t.config("c2").count(10), committing(&calls));
    assert!(
        wait_until(SETTLE * 2, || admin.xlen(OUT) >= 300 && admin.xpending_count(STREAM, GROUP) == 0),
        "{} outputs",
        admin.xlen(OUT)
    );
    let (a, b) = (again.finish(), peer.finish());
    each_once(&mut admin, &ids);
    assert!(a.committed + b.committed <= 300, "{a:?} {b:?}");
}

/// A consumer paused past `min_idle` in its handler (a zombie: nothing renews its entry) while
/// a peer reclaims the entry and commits it; then it wakes and commits too. Its commit is
/// fenced off: one output, not two, and the peer's ack stands.
pub fn commit_zombie_fenced<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    create_group(&mut admin);
    let min_idle = Duration::from_millis(400);
    let ids = admin.xadd_n(STREAM, 1, 8);
    let (started, woke) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (s, w) = (started.clone(), woke.clone());
    let zombie = T::spawn(
        server.endpoint(),
        t.config("zombie").min_idle(min_idle),
        Box::new(move |e: &Entry| {
            s.fetch_add(1, Ordering::SeqCst);
            thread::sleep(min_idle * 4);
            w.fetch_add(1, Ordering::SeqCst);
            stage(e, OUT, COUNT)
        }),
    );
    assert!(wait_until(SETTLE, || started.load(Ordering::SeqCst) == 1));
    let calls = Arc::new(AtomicUsize::new(0));
    let peer = T::spawn(server.endpoint(), t.config("peer").min_idle(min_idle), committing(&calls));
    assert!(wait_until(SETTLE, || admin.xlen(OUT) == 1), "the peer never committed");
    assert_eq!(woke.load(Ordering::SeqCst), 0, "the zombie woke before the peer took over: too slow a peer");
    assert!(wait_until(SETTLE, || woke.load(Ordering::SeqCst) == 1));
    let zombie = zombie.finish();
    let peer = peer.finish();
    assert_eq!((zombie.committed, zombie.commits_fenced), (0, 1), "{zombie:?}");
    assert_eq!(peer.committed, 1, "{peer:?}");
    each_once(&mut admin, &ids);
}

/// The connection is cut after the commit reached the server (and ran) and before its
/// answer came back. The consumer cannot tell; it sends the commit again on the next
/// connection, which finds the entry settled and writes nothing twice.
pub fn commit_cut_after_write<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    create_group(&mut admin);
    let proxy = CutProxy::start(server.addr());
    proxy.cut_after("EVALSHA");
    let calls = Arc::new(AtomicUsize::new(0));
    let run = T::spawn(Endpoint::new(proxy.addr()), t.config("c1"), committing(&calls));
    let mut ids = admin.xadd_n(STREAM, 1, 8);
    assert!(wait_until(SETTLE, || proxy.cuts() == 1), "never cut");
    assert!(wait_until(SETTLE, || admin.xpending_count(STREAM, GROUP) == 0));
    // And on: the next entry commits as any does.
    ids.extend(admin.xadd_n(STREAM, 1, 8));
    assert!(wait_until(SETTLE, || admin.xlen(OUT) == 2 && admin.xpending_count(STREAM, GROUP) == 0));
    let stats = run.finish();
    assert_eq!(calls.load(Ordering::SeqCst), 2, "each handled once");
    assert_eq!((stats.committed, stats.commits_fenced, stats.reconnects), (1, 1, 1), "{stats:?}");
    each_once(&mut admin, &ids);
}

/// Writes that would fail (`XADD` to a hash, `INCRBY` of a word) write nothing, and a
/// refused commit is a failed delivery: with a dead-letter stream (at most 2 deliveries) each
/// refused entry comes again once, then is moved there at its last delivery with the
/// refusal's text (`pelican-error`); without one the consumer stops with
/// [`pelican::Error::CommitRefused`] rather than run the handler again at every `min_idle`
/// forever, the entry left pending.
pub fn commit_refused_writes_nothing<T: Transport>(t: Target) {
    let server = t.start();
    let mut admin = server.admin();
    create_group(&mut admin);
    admin.call(&["HSET", "a-hash", "f", "v"]);
    admin.call(&["SET", "a-word", "seven"]);
    let ids = admin.xadd_n(STREAM, 3, 8);
    let handled = Arc::new(std::sync::Mutex::new(Vec::new()));
    let refusing = |ids: Vec<String>, handled: Arc<std::sync::Mutex<Vec<String>>>| -> Handler {
        Box::new(move |e: &Entry| {
            handled.lock().unwrap().push(String::from_utf8_lossy(e.id()).into_owned());
            match e.id() {
                id if id == ids[0].as_bytes() => {
                    Verdict::Commit(Writes::new().incr_by(COUNT, 1).add("a-hash", [("k", "v")]))
                }
                id if id == ids[1].as_bytes() => {
                    Verdict::Commit(Writes::new().add(OUT, [("k", "v")]).incr_by("a-word", 1))
                }
                _ => stage(e, OUT, COUNT),
            }
        })
    };
    let config = t.config("c1").min_idle(Duration::from_millis(500)).dead_letter_after(2, "dead");
    let run = T::spawn(server.endpoint(), config, refusing(ids.clone(), handled.clone()));
    assert!(wait_until(SETTLE, || admin.xlen("dead") == 2), "both set aside");
    let stats = run.finish();
    assert_eq!((stats.committed, stats.commits_refused, stats.dead_lettered), (1, 4, 2), "{stats:?}");
    let times = |id: &str| handled.lock().unwrap().iter().filter(|h| *h == id).count();
    assert_eq!((times(&ids[0]), times(&ids[1]), times(&ids[2])), (2, 2, 1), "each refused handled twice");
    let dead = admin.xrange("dead");
    let field = |entry: &crate::admin::StreamEntry, name: &str| {
        let value = entry.1.iter().find(|(f, _)| f == name).map(|(_, v)| v.clone()).unwrap_or_default();
        String::from_utf8_lossy(&value).into_owned()
    };
    for (id, why) in [(&ids[0], "WRONGTYPE"), (&ids[1], "not hold an integer")] {
        let entry = dead.iter().find(|e| field(e, "pelican-id") == *id).expect("dead-lettered");
        assert_eq!(field(entry, "pelican-reason"), "commit-refused");
        assert!(field(entry, "pelican-error").contains(why), "{}", field(entry, "pelican-error"));
    }
    assert_eq!(
        admin.call(&["GET", COUNT]).as_text().as_deref(),
        Some("1"),
        "the refused commit's counter unwritten"
    );
    assert_eq!(admin.call(&["GET", "a-word"]).as_text().as_deref(), Some("seven"));
    assert_eq!(admin.call(&["HLEN", "a-hash"]).as_int(), Some(1));
    assert_eq!(admin.xpending_count(STREAM, GROUP), 0);

    // Without a dead-letter stream: the first refusal stops the consumer, named.
    let more = admin.xadd_n(STREAM, 3, 8);
    handled.lock().unwrap().clear();
    let run = T::spawn(server.endpoint(), t.config("c2"), refusing(more.clone(), handled.clone()));
    let err = run.join(SETTLE).expect_err("stopped by the refusal");
    assert!(
        err.contains(&format!("the commit of entry {} was refused", more[0])) && err.contains("WRONGTYPE"),
        "{err}"
    );
    assert_eq!(times(&more[0]), 1, "not handled again");
    assert_eq!(admin.call(&["HLEN", "a-hash"]).as_int(), Some(1), "nothing written");
    let held: Vec<String> = admin.xpending_consumer(STREAM, GROUP, "c2").into_iter().map(|p| p.0).collect();
    assert!(held.contains(&more[0]), "the refused entry stays pending: {held:?}");
}

/// A stage counting each input's customer in a hash (`HINCRBY`) with its output, crashed in
/// the middle of 200 entries and run again (four in hand): each customer counted exactly
/// once per input. Three inputs' commits would fail — their customer's field holds a word,
/// or 1 short of the 64-bit limit, or the count goes to a key of another type (a string) —
/// and are refused whole: no output, no count, set aside in the dead-letter stream with the
/// refusal's text.
pub fn commit_counts_per_key<T: Transport>(t: Target) {
    const PER: &str = "per-customer";
    let server = t.start();
    let mut admin = server.admin();
    create_group(&mut admin);
    admin.call(&["HSET", PER, "word", "seven", "full", "9223372036854775807"]);
    admin.call(&["SET", "a-word", "seven"]);
    let mut ids = Vec::new();
    for i in 0..200 {
        let customer = format!("c{}", i % 5);
        ids.push(admin.xadd(STREAM, &[("customer", customer.as_str())]));
        if i == 100 {
            for customer in ["word", "full", "elsewhere"] {
                admin.xadd(STREAM, &[("customer", customer)]);
            }
        }
    }
    let count = |e: &Entry| {
        let customer = e.field(b"customer").unwrap_or_default().to_vec();
        // `elsewhere` counts into a key that holds a string.
        let hash = if customer == b"elsewhere" { "a-word" } else { PER };
        Verdict::Commit(
            Writes::new().add(OUT, [(&b"input"[..], e.id())]).incr_by(COUNT, 1).hincr_by(hash, customer, 1),
        )
    };
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let slow = Box::new(move |e: &Entry| {
        counted.fetch_add(1, Ordering::SeqCst);
        thread::sleep(Duration::from_millis(2)); // so that the crash comes mid-stream
        count(e)
    });
    let config = || t.config("c1").count(10).dead_letter("dead");
    let first = T::spawn(server.endpoint(), config(), slow);
    assert!(wait_until(SETTLE, || calls.load(Ordering::SeqCst) >= 60), "handled {calls:?}");
    first.crash(&mut admin, "c1");
    let _ = first.join(SETTLE);
    assert!(admin.xlen(OUT) < 200, "the crash came after the end");
    let again = T::spawn_concurrent(server.endpoint(), config().concurrency(4), Arc::new(count));
    assert!(
        wait_until(SETTLE * 2, || admin.xlen(OUT) >= 200
            && admin.xlen("dead") >= 3
            && admin.xpending_count(STREAM, GROUP) == 0),
        "{} outputs, {} set aside",
        admin.xlen(OUT),
        admin.xlen("dead")
    );
    let stats = again.finish();
    each_once(&mut admin, &ids);
    for c in 0..5 {
        let got = admin.call(&["HGET", PER, &format!("c{c}")]).as_text();
        assert_eq!(got.as_deref(), Some("40"), "c{c}: {stats:?}");
    }
    assert_eq!(admin.call(&["HGET", PER, "word"]).as_text().as_deref(), Some("seven"));
    assert_eq!(admin.call(&["HGET", PER, "full"]).as_text().as_deref(), Some("9223372036854775807"));
    assert_eq!(admin.call(&["HLEN", PER]).as_int(), Some(7), "no field of a refused commit made");
    assert_eq!(admin.call(&["GET", "a-word"]).as_text().as_deref(), Some("seven"));
    let dead = admin.xrange("dead");
    let field = |entry: &crate::admin::StreamEntry, name: &str| {
        let value = entry.1.iter().find(|(f, _)| f == name).map(|(_, v)| v.clone()).unwrap_or_default();
        String::from_utf8_lossy(&value).into_owned()
    };
    let mut why: Vec<(String, String)> =
        dead.iter().map(|e| (field(e, "customer"), field(e, "pelican-error"))).collect();
    why.sort();
    assert_eq!(why.len(), 3, "{why:?}");
    assert!(
        why[0].0 == "elsewhere" && why[0].1.contains("WRONGTYPE a-word holds a string, not a hash"),
        "{why:?}"
    );
    assert!(why[1].0 == "full" && why[1].1.contains("HINCRBY per-customer full would overflow"), "{why:?}");
    assert!(
        why[2].0 == "word" && why[2].1.contains("per-customer field word does not hold an integer"),
        "{why:?}"
    );
    assert!(dead.iter().all(|e| field(e, "pelican-reason") == "commit-refused"));
}

/// A worker without scripting is refused at the start when it says it will commit
/// ([`Config::commit_to`]). One that may script but not `XADD`: 7.0+ refuse it at the start
/// too, naming the command; 6.2 cannot tell before the first commit, which fails whole
/// (`NOPERM`, fatal) and writes nothing.
pub fn commit_needs_scripting<T: Transport>(t: Target) {
    let server = t.start_with(
        Options::default()
            .with_acl_user("worker on >pw ~* &* +@stream +@connection")
            .with_acl_user("scripter on >pw ~* &* +@all -xadd"),
    );
    let mut admin = server.admin();
    create_group(&mut admin);
    admin.xadd_n(STREAM, 3, 8);
    let calls = Arc::new(AtomicUsize::new(0));
    let config = |user| t.config("c1").auth(Some(user), "pw").commit_to([OUT]);
    let err =
        T::spawn(server.endpoint(), config("worker"), committing(&calls)).join(SETTLE).expect_err("refused");
    assert!(err.contains("the check that commits can be made") && err.contains("NOPERM"), "{err}");
    let err = T::spawn(server.endpoint(), config("scripter"), committing(&calls))
        .join(SETTLE)
        .expect_err("refused");
    if t.flavor.name() == "redis-6.2" {
        assert!(err.contains("EVALSHA") && err.contains("can't run this command"), "{err}");
    } else {
        assert!(err.contains("may not run XADD on out"), "{err}");
        assert_eq!(calls.load(Ordering::SeqCst), 0, "nothing handled");
    }
    assert_eq!((admin.xlen(OUT), admin.call(&["EXISTS", COUNT]).as_int()), (0, Some(0)), "nothing written");
}

/// In a cluster: a stage whose keys share the stream's hash tag commits; a commit naming a
/// key in another slot is refused (nothing written, the entry set aside in the dead-letter
/// stream, which shares the tag), and a worker that declares such a key is refused at the
/// start.
pub fn cluster_commit_hash_tags<T: Transport>() {
    on_every_cluster("cluster_commit_hash_tags", |cluster, protocol| {
        let stream = "{stage}in";
        let (out, count) = ("{stage}out", "{stage}n");
        let mut admin = cluster.admin_for(stream);
        admin.cmd(&["XGROUP", "CREATE", stream, GROUP, "0", "MKSTREAM"]);
        let ids = admin.xadd_n(stream, 20, 8);
        let config = || {
            Config::new(stream, GROUP, "c1")
                .protocol(protocol)
                .beat(Duration::from_millis(200))
                .backoff(Duration::from_millis(20), Duration::from_millis(200))
        };
        let to = Endpoint::new(cluster.owner_of(stream));
        let refused =
            T::spawn(to.clone(), config().commit_to([out, "elsewhere"]), Box::new(|_: &Entry| Verdict::Ack));
        let err = refused.join(SETTLE).expect_err("a key in another slot");
        assert!(err.contains("CROSSSLOT") && err.contains("hash tag"), "{err}");
        let far = ids[0].clone();
        let run = T::spawn(
            to,
            config().commit_to([out, count]).dead_letter("{stage}dead"),
            Box::new(move |e: &Entry| match e.id() == far.as_bytes() {
                true => Verdict::Commit(Writes::new().add("elsewhere", [("k", "v")])),
                false => stage(e, out, count),
            }),
        );
        assert!(wait_until(SETTLE, || cluster.admin_for(stream).xlen(out) == 19));
        assert!(wait_until(SETTLE, || cluster.admin_for(stream).xlen("{stage}dead") == 1));
        let stats = run.finish();
        assert_eq!((stats.committed, stats.commits_refused, stats.dead_lettered), (19, 1, 1), "{stats:?}");
        let mut admin = cluster.admin_for(stream);
        let got = admin.count_by_field(out, "input");
        assert!(got.values().all(|n| *n == 1) && got.len() == 19 && !got.contains_key(&ids[0]), "{got:?}");
        assert_eq!(admin.call(&["GET", count]).as_text().as_deref(), Some("19"));
        assert_eq!(admin.xpending_count(stream, GROUP), 0);
    });
}

/// Runs `scenario` on every server and protocol without TLS (a story that watches the
/// bytes on the wire).
pub fn on_every_plain_target(name: &str, scenario: fn(Target)) {
    let targets: Vec<Target> = crate::server::Flavor::ALL
        .into_iter()
        .flat_map(|flavor| {
            [Protocol::Resp2, Protocol::Resp3].map(|protocol| Target { flavor, protocol, tls: None })
        })
        .collect();
    let threads: Vec<_> = targets
        .into_iter()
        .map(|t| {
            let label = format!("{name} on {} {:?}", t.flavor.name(), t.protocol);
            (label.clone(), thread::Builder::new().name(label).spawn(move || scenario(t)).unwrap())
        })
        .collect();
    let failed: Vec<String> =
        threads.into_iter().filter_map(|(label, th)| th.join().is_err().then_some(label)).collect();
    assert!(failed.is_empty(), "failed: {failed:?}");
}
