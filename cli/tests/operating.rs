//! Operating `pelican` on real servers: what it says on stderr when the server is down,
//! silent, not a Redis server, or dies; `--quiet`; the group's health on the progress line;
//! named connections; `retire`, alone, racing a consumer, beside parked consumers and in a
//! cluster.

mod support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::thread;
use std::time::{Duration, Instant};

use pelican_tests::admin::Admin;
use pelican_tests::cluster::Cluster;
use pelican_tests::server::{Flavor, Server};
use support::{run, wait_until, Json, Pelican, Scratch};

fn url(server: &Server) -> String {
    format!("redis://{}", server.addr())
}

fn consume<'a>(url: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["consume", "--url", url, "--stream", "s", "--group", "g", "--consumer", "c"];
    args.extend_from_slice(extra);
    args
}

/// Lines of `pelican`'s stderr that contain `what`.
fn lines_with(p: &Pelican, what: &str) -> usize {
    p.stderr().lines().filter(|l| l.contains(what)).count()
}

/// A port that accepts and then, per connection, answers `answer` (nothing, if empty) and
/// keeps it open; served until the test ends.
fn fake_port(answer: &'static [u8]) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            thread::spawn(move || {
                let mut buf = [0u8; 1024];
                let _ = conn.read(&mut buf);
                if !answer.is_empty() {
                    let _ = conn.write_all(answer);
                }
                thread::sleep(Duration::from_secs(30));
            });
        }
    });
    port
}

#[test]
fn a_server_down_at_start_is_told_once_and_quiet_silences_it() {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("redis://127.0.0.1:{port}");
    let mut p = Pelican::spawn(&consume(&url, &[]));
    wait_until("the failed connect told", || lines_with(&p, "cannot connect: ") > 0);
    let first = p.stderr().lines().find(|l| l.contains("cannot connect")).unwrap().to_string();
    assert!(
        first.starts_with(&format!("pelican: cannot connect: 127.0.0.1:{port}: Connection refused"))
            && first.contains("; retrying in "),
        "{first}"
    );
    // Retries go on (backoff up to 5 s) but the same failure is not told again at once:
    // once after a few seconds, saying what it waits for, then every 30 s.
    thread::sleep(Duration::from_secs(2));
    assert_eq!(lines_with(&p, "cannot connect"), 1, "{}", p.stderr());
    wait_until("the wait told", || lines_with(&p, "still waiting for a first connection (") == 1);
    let waiting = p.stderr().lines().find(|l| l.contains("still waiting")).unwrap().to_string();
    assert!(
        waiting.contains(&format!("): cannot connect: 127.0.0.1:{port}: Connection refused")),
        "{waiting}"
    );
    thread::sleep(Duration::from_secs(3));
    assert_eq!(lines_with(&p, "cannot connect"), 2, "{}", p.stderr());
    p.stop();

    let mut quiet = Pelican::spawn(&consume(&url, &["--quiet"]));
    thread::sleep(Duration::from_millis(1500));
    quiet.stop();
    assert!(!quiet.stderr().contains("cannot connect"), "{}", quiet.stderr());
}

#[test]
fn a_silent_port_and_an_http_port_are_never_called_connected() {
    let silent = format!("redis://127.0.0.1:{}", fake_port(b""));
    let mut p = Pelican::spawn(&consume(&silent, &[]));
    // The handshake (CLIENT SETNAME) gets no reply within the read grace (2 s).
    wait_until("the silent port told", || lines_with(&p, "no reply to CLIENT SETNAME in time") > 0);
    p.stop();
    assert_eq!(lines_with(&p, "connected"), 0, "{}", p.stderr());

    // A port that answers, but not in RESP, is a wrong address, not an outage: told, exit 1.
    let port = fake_port(b"HTTP/1.1 400 Bad Request\r\n\r\n");
    let mut p = Pelican::spawn(&consume(&format!("redis://127.0.0.1:{port}"), &[]));
    assert_eq!(p.wait().code(), Some(1), "{}", p.stderr());
    let want = format!(
        "pelican: stream s: 127.0.0.1:{port} did not answer as a Redis server (it said \"HTTP/1.1 400 Bad \
         Request\"): is that the address of a Redis or Valkey server?"
    );
    assert!(p.stderr().lines().any(|l| l == want), "{}", p.stderr());
    assert_eq!(lines_with(&p, "connected"), 0, "{}", p.stderr());
}

#[test]
fn a_server_that_dies_and_returns_is_told_and_counted() {
    let mut server = Server::start(Flavor::Redis70);
    let url = url(&server);
    let mut p = Pelican::spawn(&consume(&url, &["--create-group", "0", "--progress"]));
    wait_until("connected", || lines_with(&p, "pelican: connected") == 1);
    // The connection is named for the group and consumer.
    let mut admin = server.admin();
    let list = admin.call(&["CLIENT", "LIST"]).as_text().unwrap();
    assert!(list.contains(" name=pelican:s:g:c "), "{list}");
    server.kill9();
    wait_until("the loss told", || lines_with(&p, "pelican: connection lost: ") == 1);
    wait_until("the outage on the progress line", || lines_with(&p, "| waiting for the server") > 0);
    server.restart();
    wait_until("reconnected", || lines_with(&p, "pelican: reconnected") == 1);
    p.stop();
    let summary = p.stderr().lines().last().unwrap().to_string();
    assert!(summary.contains(" reconnect"), "{summary}");
}

#[test]
fn the_progress_line_shows_the_group_health() {
    for flavor in [Flavor::Redis62, Flavor::Valkey81] {
        let server = Server::start(flavor);
        let url = url(&server);
        let mut admin = server.admin();
        admin.xadd_n("s", 3, 10);
        // One entry fails for good: it stays pending, the group's oldest.
        let script = "read f; test \"$PELICAN_ID\" != \"$(cat first)\"";
        let scratch = Scratch::new("health");
        let first = admin.xrange("s")[0].0.clone();
        std::fs::write(scratch.file("first"), &first).unwrap();
        let exec = format!("cd {} && {script}", scratch.path().display());
        // `keep`: it stays with c (the default backoff parks it with the group meanwhile).
        let extra = ["--create-group", "0", "--progress", "--exec", &exec, "--on-retry", "keep"];
        let mut p = Pelican::spawn(&consume(&url, &extra));
        let want = "| group: 1 pending, oldest ".to_string();
        wait_until("health on the progress line", || lines_with(&p, &want) > 0);
        p.stop();
        let stderr = p.stderr();
        let line = stderr.lines().find(|l| l.contains(&want)).unwrap();
        assert!(line.contains(&format!("({first} held by c)")), "{flavor:?}: {line}");
        match flavor {
            Flavor::Redis62 => assert!(!line.contains("lag"), "no lag before 7.0: {line}"),
            _ => assert!(line.contains(", lag 0, 1 consumer"), "{flavor:?}: {line}"),
        }
    }
}

#[test]
fn retire_removes_only_the_idle_and_empty() {
    let server = Server::start(Flavor::Redis70);
    let url = url(&server);
    let mut admin = server.admin();
    admin.call(&["XGROUP", "CREATE", "s", "g", "0", "MKSTREAM"]);
    admin.xadd_n("s", 2, 10);
    admin.call(&["XREADGROUP", "GROUP", "g", "holder", "COUNT", "1", "STREAMS", "s", ">"]);
    admin.call(&["XREADGROUP", "GROUP", "g", "empty", "COUNT", "1", "STREAMS", "s", ">"]);
    let emptied = admin.xpending_consumer("s", "g", "empty")[0].0.clone();
    admin.call(&["XACK", "s", "g", &emptied]);
    thread::sleep(Duration::from_millis(300));
    let retire = |extra: &[&str]| {
        let mut args = vec!["retire", "--url", &url, "--stream", "s", "--group", "g", "--idle-ms", "200"];
        args.extend_from_slice(extra);
        run(&args)
    };
    let (status, out, err) = retire(&["--dry-run"]);
    assert!(status.success(), "{err}");
    assert!(out.contains("empty") && out.contains("would be removed"), "{out}");
    assert!(out.contains("kept: holds 1 pending") && out.contains("1 of 2 would be removed"), "{out}");
    assert_eq!(admin.call(&["XINFO", "CONSUMERS", "s", "g"]).as_array().unwrap().len(), 2);
    let (status, out, err) = retire(&[]);
    assert!(status.success(), "{err}");
    assert!(out.contains("1 of 2 removed"), "{out}");
    let left = admin.call(&["XINFO", "CONSUMERS", "s", "g"]).as_array().unwrap().len();
    assert_eq!(left, 1, "only the holder is left");
    assert_eq!(admin.xpending_consumer("s", "g", "holder").len(), 1, "its entry still pending");
    // A group that does not exist: said so, exit 1.
    let (status, _, err) =
        run(&["retire", "--url", &url, "--stream", "s", "--group", "nope", "--idle-ms", "0"]);
    assert_eq!(status.code(), Some(1));
    assert!(err.contains("there is no group nope on stream s"), "{err}");
    // A stream that does not exist: said so in words, not the script's error.
    let (status, _, err) =
        run(&["retire", "--url", &url, "--stream", "nosuch", "--group", "g", "--idle-ms", "0"]);
    assert_eq!(status.code(), Some(1));
    assert_eq!(err, "pelican: nosuch: there is no stream nosuch\n");
}

#[test]
fn retire_racing_a_consumer_orphans_nothing() {
    let server = Server::start(Flavor::Valkey81);
    let url = url(&server);
    let mut admin = server.admin();
    let total = 1_000;
    admin.call(&["XGROUP", "CREATE", "s", "g", "0", "MKSTREAM"]);
    admin.xadd_n("s", total, 10);
    let scratch = Scratch::new("race");
    let stats = scratch.file("stats.json");
    // A command per entry keeps the consumer busy; each read hands it 10 entries.
    let mut p = Pelican::spawn(&consume(
        &url,
        &["--create-group", "0", "--count", "10", "--exec", "cat > /dev/null", "--stats-json", &stats],
    ));
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut rounds = 0;
    loop {
        // No idle bound: the consumer goes whenever it holds nothing, never while it holds.
        let (status, out, err) =
            run(&["retire", "--url", &url, "--stream", "s", "--group", "g", "--idle-ms", "0"]);
        assert!(status.success(), "{err}");
        for removed in out.lines().filter(|l| l.ends_with("  removed")) {
            let pending = removed.split_whitespace().nth(1);
            assert_eq!(pending, Some("0"), "removed while holding entries: {out}");
        }
        rounds += 1;
        if admin.xpending_all("s", "g").is_empty() && handled_all(&mut admin, total) {
            break;
        }
        assert!(Instant::now() < deadline, "the consumer did not finish");
    }
    p.stop();
    let json = Json::parse(&std::fs::read_to_string(&stats).unwrap());
    // Every ack counted by the server: none of the consumer's entries left the pending list
    // under it, and nothing is pending now.
    assert_eq!(json.get("acked").num() as usize, total, "after {rounds} retirements");
    assert_eq!(json.get("lost_to_peer").num(), 0.0);
    assert!(admin.xpending_all("s", "g").is_empty());
}

/// Whether a connection named `name` is open on the server `admin` speaks to.
fn connected(admin: &mut Admin, name: &str) -> bool {
    let list = admin.call(&["CLIENT", "LIST"]).as_text().unwrap_or_default();
    list.lines().any(|l| l.split(' ').any(|kv| kv == format!("name={name}")))
}

/// The line of `retire`'s table about `consumer`.
fn row<'a>(out: &'a str, consumer: &str) -> &'a str {
    let line = out.lines().find(|l| l.split_whitespace().next() == Some(consumer));
    line.unwrap_or_else(|| panic!("no line for {consumer} in\n{out}"))
}

/// Issue 22: on Redis 7.0 consumers parked with `--beat-ms 1000` were shown idle 23 s and
/// removed (a read that finds nothing does not move 7.0's `idle`). Two consumers parked with
/// a short beat and nothing pending are kept as connected, even with `--idle-ms 0`; a third
/// that has stopped (with `--keep-consumer`, as a crashed one stays) is removed.
#[test]
fn retire_keeps_parked_consumers_connected_and_removes_a_stopped_one() {
    for flavor in Flavor::ALL {
        let server = Server::start(flavor);
        let url = url(&server);
        let mut admin = server.admin();
        admin.call(&["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"]);
        let consume = |name: &str, extra: &[&str]| {
            let mut args = vec![
                "consume",
                "--url",
                &url,
                "--stream",
                "s",
                "--group",
                "g",
                "--consumer",
                name,
                "--beat-ms",
                "100",
            ];
            args.extend_from_slice(extra);
            Pelican::spawn(&args)
        };
        let mut gone = consume("gone", &["--keep-consumer"]);
        wait_until("gone to join", || admin.consumer_names("s", "g").contains(&"gone".into()));
        gone.stop();
        wait_until("gone's connection to close", || !connected(&mut admin, "pelican:s:g:gone"));
        let mut parked = [consume("p1", &[]), consume("p2", &[])];
        wait_until("p1 and p2 to join", || admin.consumer_names("s", "g").len() == 3);
        thread::sleep(Duration::from_millis(300));
        let retire = |extra: &[&str]| {
            let mut args = vec!["retire", "--url", &url, "--stream", "s", "--group", "g", "--idle-ms", "0"];
            args.extend_from_slice(extra);
            let (status, out, err) = run(&args);
            assert!(status.success(), "{flavor}: {err}");
            out
        };
        let out = retire(&["--dry-run"]);
        assert!(row(&out, "gone").ends_with("  would be removed"), "{flavor}: {out}");
        let out = retire(&[]);
        for name in ["p1", "p2"] {
            assert!(row(&out, name).ends_with("  kept: connected"), "{flavor}: {out}");
        }
        assert!(row(&out, "gone").ends_with("  removed"), "{flavor}: {out}");
        assert!(out.contains("1 of 3 removed"), "{flavor}: {out}");
        assert_eq!(admin.consumer_names("s", "g"), ["p1", "p2"], "{flavor}");
        for p in &mut parked {
            p.stop();
            assert!(!p.stderr().contains("twin"), "{flavor}: {}", p.stderr());
            assert!(p.stderr().contains("left the group (holding nothing)"), "{flavor}: {}", p.stderr());
        }
        // Stopped cleanly, holding nothing: they left (from a parked read, on a new connection).
        assert_eq!(admin.consumer_names("s", "g"), Vec::<String>::new(), "{flavor}");
    }
}

/// A user the ACL refuses `CLIENT LIST` cannot retire: exit 1, the server's refusal and why
/// the listing is needed said; nothing removed.
#[test]
fn retire_refused_client_list_says_why_and_removes_nothing() {
    let server = Server::start(Flavor::Redis70);
    let mut admin = server.admin();
    admin.call(&["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"]);
    admin.call(&["XGROUP", "CREATECONSUMER", "s", "g", "gone"]);
    admin.call(&["ACL", "SETUSER", "ops", "on", ">pw", "~*", "&*", "+@all", "-client|list"]);
    let url = format!("redis://ops:pw@{}", server.addr());
    let (status, _, err) = run(&["retire", "--url", &url, "--stream", "s", "--group", "g", "--idle-ms", "0"]);
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.starts_with("pelican: s: NOPERM") && err.contains("CLIENT LIST"), "{err}");
    assert_eq!(admin.consumer_names("s", "g"), ["gone"]);
}

/// In a cluster, the connections are listed on the node serving the stream (where its
/// consumers are connected), not on the node the URL names: a consumer parked there is kept
/// as connected through another master's URL, and while the stream's slot is migrating
/// (the script runs on the target after ASK, the connections of both nodes listed).
#[test]
fn retire_in_a_cluster_lists_the_connections_where_the_stream_is() {
    let cluster = Cluster::start(Flavor::Redis70);
    let stream = "{r}";
    let owner = cluster.owner_of(stream);
    let other = cluster.masters().into_iter().find(|&m| m != owner).expect("another master");
    let url = format!("redis://{other}");
    let mut admin = Admin::connect(owner);
    admin.call(&["XGROUP", "CREATE", stream, "g", "$", "MKSTREAM"]);
    admin.call(&["XGROUP", "CREATECONSUMER", stream, "g", "gone"]);
    let mut parked = Pelican::spawn(&[
        "consume",
        "--url",
        &url,
        "--stream",
        stream,
        "--group",
        "g",
        "--consumer",
        "p1",
        "--beat-ms",
        "100",
    ]);
    wait_until("p1 to join", || admin.consumer_names(stream, "g").contains(&"p1".into()));
    assert!(connected(&mut admin, &format!("pelican:{stream}:g:p1")), "p1 followed its stream to its master");
    let retire = |extra: &[&str]| {
        let mut args = vec!["retire", "--url", &url, "--stream", stream, "--group", "g", "--idle-ms", "0"];
        args.extend_from_slice(extra);
        let (status, out, err) = run(&args);
        assert!(status.success(), "{err}");
        out
    };
    let out = retire(&["--dry-run"]);
    assert!(row(&out, "p1").ends_with("  kept: connected"), "{out}");
    assert!(row(&out, "gone").ends_with("  would be removed"), "{out}");

    let migration = cluster.begin_migration(cluster.slot_of(stream), other);
    assert_eq!(migration.keys_moved(), 1);
    // p1 is told (UNBLOCKED, then ASK) and reconnects, to the target: between connections
    // it has none, and is not kept for one.
    let mut on_target = Admin::connect(other);
    wait_until("p1 to follow the slot", || connected(&mut on_target, &format!("pelican:{stream}:g:p1")));
    let out = retire(&[]);
    assert!(row(&out, "p1").ends_with("  kept: connected"), "during the migration: {out}");
    assert!(row(&out, "gone").ends_with("  removed"), "during the migration: {out}");
    migration.finish();
    assert_eq!(on_target.consumer_names(stream, "g"), ["p1"], "the retirement ran where the stream is");
    parked.stop();
}

/// Whether the group has been delivered every entry (lag 0 on Valkey).
fn handled_all(admin: &mut pelican_tests::admin::Admin, total: usize) -> bool {
    let groups = admin.call(&["XINFO", "GROUPS", "s"]);
    let Some(group) = groups.as_array().and_then(|g| g.first()) else { return false };
    let fields = group.as_array().unwrap_or(&[]);
    let read = fields.chunks(2).find(|kv| kv[0].as_text().as_deref() == Some("entries-read"));
    read.and_then(|kv| kv[1].as_int()) == Some(total as i64)
}

/// The server loses its data (here: `FLUSHALL` and the connections cut in one transaction, as
/// a restart without persistence does; one after the other, a read sent between the two finds
/// the group gone on a live connection, which without `--recreate-group` is a failure): the
/// group made again at the next connect is a warning that says where the consumer was.
#[test]
fn a_group_the_server_lost_is_told_when_made_again() {
    let server = Server::start(Flavor::Redis70);
    let url = url(&server);
    let mut admin = server.admin();
    let mut p = Pelican::spawn(&consume(&url, &["--create-group", "0"]));
    wait_until("connected", || lines_with(&p, "pelican: connected") == 1);
    let ids = admin.xadd_n("s", 3, 4);
    for _ in 0..3 {
        p.line();
    }
    let lost: Vec<Vec<&str>> = vec![
        vec!["MULTI"],
        vec!["FLUSHALL"],
        vec!["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"],
        vec!["EXEC"],
    ];
    admin.pipeline(&lost);
    let want = format!(
        "pelican: the group was gone (lost by the server, or deleted) and is created again at 0; this \
         consumer had read up to {}: entries after 0 are delivered again",
        ids[2]
    );
    wait_until("the re-creation told", || lines_with(&p, &want) == 1);
    p.stop();
}

/// Every line pelican writes on stderr starts with the time, RFC 3339 in UTC to the
/// millisecond, and in order — through connects, an outage, the progress lines, a stop and
/// a failed command's message; `--log-time none` (or `$PELICAN_LOG_TIME=none`, as under
/// journald) leaves it out.
#[test]
fn each_stderr_line_starts_with_the_time_unless_told_none() {
    let mut server =
        Server::start_with(Flavor::Redis70, pelican_tests::server::Options::default().with_aof());
    let url = url(&server);
    let mut p = Pelican::spawn(&consume(&url, &["--create-group", "--progress"]));
    wait_until("connected", || lines_with(&p, "connected") > 0);
    server.kill9();
    wait_until("the outage told", || lines_with(&p, "connection lost") > 0);
    server.restart();
    wait_until("reconnected", || lines_with(&p, "reconnected") > 0);
    p.stop();
    let raw = p.raw_stderr();
    let lines: Vec<&str> = raw.lines().collect();
    assert!(lines.len() >= 5, "{raw}");
    assert!(lines.iter().all(|l| support::is_stamped(l)), "every line stamped:\n{raw}");
    let times: Vec<&str> = lines.iter().map(|l| &l[..24]).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "in order:\n{raw}");
    let (status, _, err) = run(&["pending", "--url", "redis://127.0.0.1:1", "--stream", "s", "--group", "g"]);
    assert_eq!(status.code(), Some(1));
    assert!(err.starts_with("pelican: cannot connect"), "{err}");

    // Off: as written, no time (the `run` above reads stderr without its times).
    for none in [&["--log-time", "none"][..], &["--log-time=none"]] {
        let args =
            [&["pending", "--url", "redis://127.0.0.1:1", "--stream", "s", "--group", "g"], none].concat();
        let mut p = Pelican::spawn(&args);
        assert_eq!(p.wait().code(), Some(1));
        assert!(p.raw_stderr().starts_with("pelican: cannot connect"), "{args:?}: {}", p.raw_stderr());
    }
    let mut p = Pelican::spawn_env(&["consume", "--grup", "g"], &[("PELICAN_LOG_TIME", "none")]);
    assert_eq!(p.wait().code(), Some(2));
    assert!(p.raw_stderr().starts_with("pelican: unexpected argument '--grup'"), "{}", p.raw_stderr());
    let mut p = Pelican::spawn(&["consume", "--grup", "g"]);
    assert_eq!(p.wait().code(), Some(2));
    assert!(support::is_stamped(&p.raw_stderr()), "clap's errors too: {}", p.raw_stderr());
}
