//! The command line's usage defects, each fixed and checked as a user meets it: the built
//! `pelican` run as a process, against real servers (or, for a port that is no Redis server,
//! a listener of the test's own on loopback).

mod support;

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use pelican_tests::server::{Flavor, Options, Server};
use support::{run, run_env, wait_until, Json, Pelican, Scratch, BIN, WAIT};
use unicode_width::UnicodeWidthStr;

fn url(server: &Server) -> String {
    format!("redis://{}", server.addr())
}

/// `stderr` as the one line it must be, led by `pelican: ` (after any lines `consume` told
/// of its connection on the way).
fn one_line(stderr: &str) -> &str {
    // `connected`, or on Redis 8 `connected (speaking …)`.
    let told = ["pelican: connected", "pelican: reconnected"];
    let mut rest = stderr;
    while told.iter().any(|t| rest.starts_with(t)) && rest.contains('\n') {
        rest = rest.split_once('\n').map_or("", |(_, after)| after);
    }
    let line = rest.strip_suffix('\n').unwrap_or(rest);
    assert!(line.starts_with("pelican: ") && !line.contains('\n'), "one line: {stderr:?}");
    line
}

/// Runs `pelican args…` and asserts exit status 2 with a message holding `want`; nothing on
/// stdout.
fn refused(args: &[&str], want: &str) -> String {
    let (status, stdout, stderr) = run(args);
    assert_eq!(status.code(), Some(2), "{args:?}: {stderr}");
    assert!(stderr.starts_with("pelican: ") && stderr.contains(want), "{args:?}: want {want:?} in {stderr}");
    assert!(stdout.is_empty(), "{args:?}: {stdout}");
    stderr
}

/// A loopback port that is no Redis server: it answers each connection with `reply` and
/// closes it, or (`None`) accepts and says nothing. Closed on drop.
struct FakePort {
    port: u16,
    stop: Arc<AtomicBool>,
}

impl FakePort {
    fn new(reply: Option<&'static [u8]>) -> FakePort {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let (port, stop) = (listener.local_addr().unwrap().port(), Arc::new(AtomicBool::new(false)));
        let done = stop.clone();
        thread::spawn(move || {
            let (deadline, mut held) = (Instant::now() + WAIT, Vec::new());
            while !done.load(Ordering::Relaxed) && Instant::now() < deadline {
                match (listener.accept(), reply) {
                    (Ok((mut conn, _)), Some(reply)) => {
                        let _ = conn.set_nonblocking(false);
                        let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
                        let _ = conn.read(&mut [0; 256]);
                        let _ = conn.write_all(reply);
                    }
                    (Ok((conn, _)), None) => held.push(conn),
                    (Err(_), _) => thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        FakePort { port, stop }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for FakePort {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A `pelican` started with OS-string arguments (any bytes), killed on drop if still
/// running; its stdout lines come through `lines`.
struct OsPelican {
    child: Child,
    lines: Receiver<Vec<u8>>,
}

impl OsPelican {
    fn spawn(args: &[&OsStr]) -> OsPelican {
        let mut child = Command::new(BIN)
            .args(args)
            .env_remove("PELICAN_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn pelican");
        let (tx, lines) = mpsc::channel();
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        thread::spawn(move || {
            for line in stdout.split(b'\n') {
                if line.map(|line| tx.send(line)).is_err() {
                    break;
                }
            }
        });
        OsPelican { child, lines }
    }

    /// Runs to the end (bounded): status, stdout, stderr.
    fn run(args: &[&OsStr]) -> (ExitStatus, Vec<Vec<u8>>, String) {
        let mut p = OsPelican::spawn(args);
        let status = p.wait();
        let lines = std::iter::from_fn(|| p.lines.recv_timeout(WAIT).ok()).collect();
        (status, lines, p.stderr())
    }

    fn line(&self) -> Vec<u8> {
        self.lines.recv_timeout(WAIT).expect("a stdout line in time")
    }

    fn wait(&mut self) -> ExitStatus {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "pelican did not exit in time");
            thread::sleep(Duration::from_millis(10));
        }
    }

    fn stderr(&mut self) -> String {
        let mut text = String::new();
        let _ = self.child.stderr.take().expect("piped stderr").read_to_string(&mut text);
        support::unstamped(&text)
    }

    fn stop(&mut self) -> ExitStatus {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().expect("kill").success());
        self.wait()
    }
}

impl Drop for OsPelican {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---- 1. --exec '' -----------------------------------------------------------------------------

/// An empty or blank `--exec` (an unset `$HANDLER`) would ack every entry unhandled: refused,
/// before anything is read.
#[test]
fn an_empty_exec_is_refused_before_anything_is_read() {
    let server = Server::start(Flavor::Valkey81);
    let mut admin = server.admin();
    admin.xadd_n("s", 3, 4);
    admin.call(&["XGROUP", "CREATE", "s", "g", "0"]);
    let url = url(&server);
    for command in ["", "   ", "\t\n"] {
        let args =
            ["consume", "--url", &url, "--stream", "s", "--group", "g", "--consumer", "c", "--exec", command];
        let stderr =
            refused(&args, "the command is empty: it would acknowledge every entry without handling it");
        assert!(stderr.contains("leave --exec out"), "{stderr}");
    }
    // Nothing was read, let alone acked: every entry is still there for the group.
    let mut p =
        Pelican::spawn(&["consume", "--url", &url, "--stream", "s", "--group", "g", "--consumer", "c"]);
    let lines: Vec<String> = (0..3).map(|_| p.line()).collect();
    p.stop();
    assert!(lines.iter().all(|line| line.starts_with(r#"{"stream":"s","id":""#)), "{lines:?}");
}

// ---- 2. produce --size ------------------------------------------------------------------------

/// `--size` and `--count` are bounded (exit 2, the range said); big values are written
/// without a count × size buffer, and arrive whole.
#[test]
fn produce_bounds_its_sizes_and_writes_big_values_whole() {
    let args = |count: &'static str, size: &'static str| {
        ["produce", "--stream", "s", "--count", count, "--size", size]
    };
    refused(&args("1", "99999999999999"), "'99999999999999' for '--size <BYTES>': must be at most 536870912");
    refused(&args("1", "536870913"), "must be at most 536870912");
    refused(&args("1", "-1"), "invalid value '-1' for '--size <BYTES>': must not be negative");
    refused(&args("0", "16"), "invalid value '0' for '--count <N>': must be at least 1");
    refused(&args("99999999999999", "16"), "must be at most 1000000000");
    let produce = ["produce", "--stream", "s", "--count", "1"];
    let with = |extra: &[&'static str]| -> Vec<&str> { produce.iter().chain(extra).copied().collect() };
    refused(&with(&["--wait-replicas", "0"]), "must be at least 1");
    refused(&with(&["--wait-timeout-ms", "100"]), "--wait-replicas <N>");
    refused(&with(&["--wait-replicas", "1", "--wait-timeout-ms", "60001"]), "must be at most 60000");

    let server = Server::start(Flavor::Valkey81);
    let mut admin = server.admin();
    let url = url(&server);
    let size = 6 << 20; // over the pipeline's 4 MiB: each value goes alone
    let (status, stdout, stderr) =
        run(&["produce", "--url", &url, "--stream", "big", "--count", "3", "--size", &size.to_string()]);
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(stdout.starts_with("produced 3 entries to big (6291456-byte values)"), "{stdout}");
    let entries = admin.xrange("big");
    assert_eq!(entries.len(), 3);
    for (_, fields) in entries {
        assert_eq!(fields.len(), 1);
        assert!(fields[0].0 == "p" && fields[0].1.len() == size && fields[0].1.iter().all(|b| *b == b'x'));
    }
    // Small values, several pipelines, the last one short.
    let (status, _, stderr) =
        run(&["produce", "--url", &url, "--stream", "small", "--count", "2500", "--size", "0"]);
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert_eq!(admin.xlen("small"), 2500);
}

// ---- 3. messages ------------------------------------------------------------------------------

/// A port that answers, but not as Redis does (here: HTTP), is named as such.
#[test]
fn a_port_that_is_no_redis_server_is_named() {
    let http = FakePort::new(Some(b"HTTP/1.1 400 Bad Request\r\n\r\n"));
    let url = http.url();
    for args in [
        &["pending", "--url", &url, "--stream", "s", "--group", "g"][..],
        &["produce", "--url", &url, "--stream", "s", "--count", "1"],
        &["retire", "--url", &url, "--stream", "s", "--group", "g", "--idle-ms", "0"],
        &["demo", "--url", &url],
    ] {
        let (status, _, stderr) = run(args);
        assert_eq!(status.code(), Some(1), "{args:?}: {stderr}");
        let want = format!(
            "pelican: 127.0.0.1:{} did not answer as a Redis server (it said \"HTTP/1.1 400 Bad Request\")",
            http.port
        );
        assert_eq!(one_line(&stderr), want, "{args:?}");
    }
}

/// A port that accepts and says nothing is named, after 5 s.
#[test]
fn a_silent_port_is_named_after_5_s() {
    let silent = FakePort::new(None);
    let url = silent.url();
    let start = Instant::now();
    let mut runs = [
        Pelican::spawn(&["pending", "--url", &url, "--stream", "s", "--group", "g"]),
        Pelican::spawn(&["produce", "--url", &url, "--stream", "s", "--count", "1"]),
    ];
    for p in &mut runs {
        let status = p.wait();
        assert_eq!(status.code(), Some(1), "{}", p.stderr());
        let want = format!("pelican: 127.0.0.1:{} did not answer within 5 s", silent.port);
        assert_eq!(one_line(&p.stderr()), want);
    }
    assert!(start.elapsed() >= Duration::from_secs(5));
}

/// `demo --url` on a replica (its workers' writes would be refused) says so at once, in words,
/// naming its master.
#[test]
fn demo_on_a_replica_says_writes_are_refused() {
    let (master, replica) = (Server::start(Flavor::Valkey81), Server::start(Flavor::Valkey81));
    let port = master.port().to_string();
    replica.admin().call(&["REPLICAOF", "127.0.0.1", &port]);
    let start = Instant::now();
    let (status, _, stderr) = run(&["demo", "--url", &url(&replica)]);
    assert_eq!(status.code(), Some(1), "{stderr}");
    let line = one_line(&stderr);
    let want = format!("pelican: {} is a replica (of {}), not a master", replica.addr(), master.addr());
    assert!(line.starts_with(&want), "{line}");
    assert!(start.elapsed() < Duration::from_secs(5), "not after a step's 15 s");
}

/// A server that wants a password, or refuses the one given, says how to give it: in every
/// command, one line.
#[test]
fn logins_refused_say_how_to_give_the_password() {
    let server = Server::start_with(Flavor::Redis70, Options::default().with_requirepass("sekret"));
    let addr = server.addr();
    for (url, want) in [
        (format!("redis://{addr}"), format!("{addr} wants a password (NOAUTH")),
        (format!("redis://:wrong@{addr}"), format!("{addr} refused the login (WRONGPASS")),
        (format!("redis://alice:wrong@{addr}"), format!("{addr} refused the login (WRONGPASS")),
    ] {
        for args in [
            &["pending", "--url", &url, "--stream", "s", "--group", "g"][..],
            &["produce", "--url", &url, "--stream", "s", "--count", "1"],
            &["retire", "--url", &url, "--stream", "s", "--group", "g", "--idle-ms", "0"],
            &["demo", "--url", &url],
            &["consume", "--url", &url, "--stream", "s", "--group", "g", "--consumer", "c", "--create-group"],
        ] {
            let (status, _, stderr) = run(args);
            assert_eq!(status.code(), Some(1), "{args:?}: {stderr}");
            let line = one_line(&stderr);
            // `consume` names the stream, and says "the server": its lanes may have moved.
            let want = if args[0] == "consume" {
                want.replace(&addr.to_string(), "stream s: the server")
            } else {
                want.clone()
            };
            assert!(line.starts_with(&format!("pelican: {want}")), "{args:?}: {line}");
            assert!(
                line.contains("redis://:PASSWORD@host:port") && line.contains("USER:PASSWORD@"),
                "{line}"
            );
        }
    }
    // The password in the URL is the fix.
    let (status, _, stderr) =
        run(&["produce", "--url", &format!("redis://:sekret@{addr}"), "--stream", "s", "--count", "1"]);
    assert_eq!(status.code(), Some(0), "{stderr}");
}

/// A group deleted under a running consumer is "deleted", with `--recreate-group` as the fix;
/// a group that never existed is not: there is none, and `--create-group` creates it.
#[test]
fn a_deleted_group_and_a_missing_one_are_told_apart() {
    let server = Server::start(Flavor::Redis70);
    let mut admin = server.admin();
    let url = url(&server);
    for create in [&[][..], &["--create-group", "0"]] {
        admin.cmd(&["DEL", "s"]);
        admin.call(&["XGROUP", "CREATE", "s", "g", "0", "MKSTREAM"]);
        admin.xadd_n("s", 1, 4);
        let mut args = vec!["consume", "--url", &url, "--stream", "s", "--group", "g", "--consumer", "c"];
        args.extend_from_slice(create);
        let mut p = Pelican::spawn(&args);
        p.line(); // running: it read and printed the entry
        admin.call(&["XGROUP", "DESTROY", "s", "g"]);
        let status = p.wait();
        assert_eq!(status.code(), Some(1), "{}", p.stderr());
        let stderr = p.stderr();
        let line = one_line(&stderr);
        assert!(line.starts_with("pelican: stream s: the group g was deleted (NOGROUP"), "{line}");
        let fix = if create.is_empty() {
            "--create-group ID --recreate-group creates it again"
        } else {
            "; --recreate-group creates it again"
        };
        assert!(line.ends_with(fix), "{line}");
    }
    admin.xadd_n("nogroup", 1, 4);
    for stream in ["nogroup", "nokey"] {
        let (status, _, stderr) =
            run(&["consume", "--url", &url, "--stream", stream, "--group", "g", "--consumer", "c"]);
        assert_eq!(status.code(), Some(1), "{stderr}");
        let line = one_line(&stderr);
        assert!(
            line.starts_with(&format!("pelican: stream {stream}: there is no group g (NOGROUP")),
            "{line}"
        );
        assert!(
            line.contains("--create-group creates it") && !line.contains("gone") && !line.contains("deleted"),
            "{line}"
        );
    }
}

/// A bad `$PELICAN_URL` is named as coming from there (a bad `--url` is not); one that works
/// is used.
#[test]
fn a_bad_pelican_url_is_named() {
    let args = ["pending", "--stream", "s", "--group", "g"];
    for (env, want) in [
        ("http://127.0.0.1", "pelican: bad URL in $PELICAN_URL: it must start with redis://"),
        ("redis://127.0.0.1:99999", "pelican: bad URL in $PELICAN_URL: the port is not 1-65535"),
    ] {
        let (status, _, stderr) = run_env(&args, &[("PELICAN_URL", env)]);
        assert_eq!(status.code(), Some(2), "{env}: {stderr}");
        assert!(one_line(&stderr).contains(want), "{env}: {stderr}");
    }
    // Looked up at connect (a failed connect, 1), where the message still says whence it came.
    let (status, _, stderr) = run_env(&args, &[("PELICAN_URL", "redis://no-such-host.invalid")]);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(one_line(&stderr).ends_with("(the host in $PELICAN_URL)"), "{stderr}");
    let stderr = refused(
        &["pending", "--stream", "s", "--group", "g", "--url", "http://127.0.0.1"],
        "pelican: bad URL: it",
    );
    assert!(!stderr.contains("PELICAN_URL"), "{stderr}");

    let server = Server::start(Flavor::Valkey81);
    server.admin().call(&["XGROUP", "CREATE", "s", "g", "0", "MKSTREAM"]);
    let (status, stdout, stderr) = run_env(&args, &[("PELICAN_URL", &url(&server))]);
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(stdout.starts_with("stream s, group g: 0 pending"), "{stdout}");
}

// ---- 4. exit statuses -------------------------------------------------------------------------

/// A host is looked up at connect, not when the URL is read: one that does not resolve is a
/// failed connect. The one-shot commands fail (1) naming it; `consume`, on either transport,
/// tells it and keeps trying (a name may appear once its server is up), and stops cleanly.
#[test]
fn an_unresolvable_host_is_a_failed_connect() {
    let url = "redis://no-such-host.invalid:6379";
    for args in [
        &["pending", "--url", url, "--stream", "s", "--group", "g"][..],
        &["produce", "--url", url, "--stream", "s", "--count", "1"],
        &["retire", "--url", url, "--stream", "s", "--group", "g", "--idle-ms", "0"],
        &["demo", "--url", url],
    ] {
        let (status, _, stderr) = run(args);
        assert_eq!(status.code(), Some(1), "{args:?}: {stderr}");
        assert!(one_line(&stderr).starts_with("pelican: cannot resolve no-such-host.invalid"), "{stderr}");
    }
    for transport in ["mio", "smol"] {
        let args = ["consume", "--url", url, "--stream", "s", "--group", "g", "--consumer", "c"];
        let mut consumer = Pelican::spawn(&[&args[..], &["--transport", transport]].concat());
        wait_until("the failed connect told", || {
            consumer.stderr().contains("cannot connect: cannot resolve no-such-host.invalid")
        });
        consumer.stop();
    }
}

/// Settings the consumer (or the server) would refuse later are refused up front, exit 2,
/// before anything reaches the server; `--ack-timeout-ms` and `--ack-aof` only with
/// `--ack-replicas`.
#[test]
fn consumer_settings_are_checked_before_connecting() {
    let server = Server::start(Flavor::Valkey81);
    let url = url(&server);
    for (extra, want) in [
        (
            &["--min-idle-ms", "18446744073709551615"][..],
            "'18446744073709551615' for '--min-idle-ms <MS>': too large",
        ),
        (&["--min-idle-ms", "50"], "'50' for '--min-idle-ms <MS>': must be at least 100"),
        (&["--beat-ms", "86400001"], "'86400001' for '--beat-ms <MS>': must be at most 86400000"),
        (
            &["--create-group", "notanid"],
            "a group start id is $ (new entries only), 0 (the whole stream), <ms> or <ms>-<seq>",
        ),
        (&["--create-group", "1-x"], "a group start id is"),
        (&["--dead-letter", "s"], "invalid settings: the dead-letter stream must not be the consumed stream"),
        (&["--consumer", ""], "invalid settings: the consumer must not be empty"),
        (&["--ack-replicas", "0"], "'0' for '--ack-replicas <N>': must be at least 1"),
        (&["--ack-replicas", "two"], "invalid value 'two' for '--ack-replicas <N>'"),
        (&["--ack-timeout-ms", "500"], "the following required arguments were not provided"),
        (&["--ack-aof"], "--ack-replicas <N>"),
        (
            &["--ack-replicas", "1", "--ack-timeout-ms", "0"],
            "'0' for '--ack-timeout-ms <MS>': must be at least 1",
        ),
    ] {
        let mut args = vec!["consume", "--url", &url, "--stream", "s", "--group", "g", "--create-group", "0"];
        if extra[0] == "--create-group" {
            args.truncate(args.len() - 2);
        }
        if extra[0] != "--consumer" {
            args.extend(["--consumer", "c"]);
        }
        args.extend_from_slice(extra);
        refused(&args, want);
    }
    // Nothing reached the server: no key, no group.
    assert_eq!(server.admin().call(&["EXISTS", "s"]).as_int(), Some(0));
}

/// `--stats-json` is checked before the run (a path that cannot be written: exit 2, nothing
/// read); a file the check created is not left behind by a run that fails; a clean stop
/// writes it.
#[test]
fn stats_json_is_checked_up_front() {
    let server = Server::start(Flavor::Valkey81);
    let mut admin = server.admin();
    admin.xadd_n("s", 2, 4);
    admin.call(&["XGROUP", "CREATE", "s", "g", "0"]);
    let url = url(&server);
    let base = ["consume", "--url", &url, "--stream", "s", "--group", "g", "--consumer", "c", "--stats-json"];
    let with = |path: &str| -> Vec<String> {
        base.iter().map(|s| s.to_string()).chain([path.to_string()]).collect()
    };
    let dir = Scratch::new("stats");
    for path in ["/no/such/dir/x.json".to_string(), dir.path().display().to_string()] {
        let args = with(&path);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let stderr = refused(&args, &format!("pelican: --stats-json: cannot write {path}: "));
        one_line(&stderr);
    }
    assert_eq!(admin.xpending_count("s", "g"), 0, "nothing was read");

    let failing = dir.file("failed.json");
    let (status, _, stderr) = run(&[
        "consume",
        "--url",
        &url,
        "--stream",
        "s",
        "--group",
        "nope",
        "--consumer",
        "c",
        "--stats-json",
        &failing,
    ]);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(!std::path::Path::new(&failing).exists(), "no empty file left by a failed run");

    let stats = dir.file("stats.json");
    let args = with(&stats);
    let mut p = Pelican::spawn(&args.iter().map(String::as_str).collect::<Vec<_>>());
    p.line();
    p.line();
    p.stop();
    let json = Json::parse(&std::fs::read_to_string(&stats).expect("written at the stop"));
    assert_eq!(json.get("handled").num(), 2.0);
}

// ---- 5, 6. ranges, repeated flags, typos, --version ---------------------------------------------

/// A number out of its type's range is told as such, with the range.
#[test]
fn numbers_out_of_range_give_the_range() {
    let base = ["consume", "--stream", "s", "--group", "g", "--consumer", "c"];
    let with =
        |extra: &[&'static str]| -> Vec<&str> { base.iter().copied().chain(extra.iter().copied()).collect() };
    let stderr =
        refused(&with(&["--count", "4294967296"]), "invalid value '4294967296' for '--count <N>': too large");
    assert!(!stderr.contains("whole number"), "{stderr}");
    refused(
        &with(&["--max-deliveries", "0", "--dead-letter", "d"]),
        "'0' for '--max-deliveries <N>': must be at least 1",
    );
    // A negative number is the flag's value, refused by name (not "unexpected argument").
    refused(&with(&["--beat-ms", "-5"]), "invalid value '-5' for '--beat-ms <MS>': must be at least 1");
    refused(
        &with(&["--min-idle-ms", "5"]),
        "invalid value '5' for '--min-idle-ms <MS>': must be at least 100",
    );
    refused(&with(&["--count", "1.5"]), "invalid value '1.5' for '--count <N>': not a whole number");
    refused(
        &with(&["--handler-timeout", "100"]),
        "--handler-timeout goes with --exec or --pipe (a printed entry has no handler to time)",
    );
}

/// A single-value flag given twice is refused (a stream twice too); `--stream` repeats;
/// typos get a suggestion; `--version` and `--help` exit 0; $PELICAN_GROUP stands for --group.
#[test]
fn repeated_flags_typos_version_and_env() {
    let consume = ["consume", "--stream", "s", "--consumer", "c"];
    let with = |extra: &[&'static str]| -> Vec<&str> {
        consume.iter().copied().chain(extra.iter().copied()).collect()
    };
    refused(
        &with(&["--group", "a", "--group", "b"]),
        "the argument '--group <G>' cannot be used multiple times",
    );
    refused(
        &with(&["--group", "g", "--count", "1", "--count", "2"]),
        "'--count <N>' cannot be used multiple times",
    );
    refused(&with(&["--group", "g", "--stream", "s"]), "pelican: --stream s is given twice");
    let stderr = refused(&with(&["--grup", "g"]), "unexpected argument '--grup' found");
    assert!(stderr.contains("a similar argument exists: '--group'"), "{stderr}");
    let stderr = refused(&["pendig"], "unrecognized subcommand 'pendig'");
    assert!(stderr.contains("a similar subcommand exists: 'pending'"), "{stderr}");

    let (status, stdout, _) = run(&["--version"]);
    assert_eq!(status.code(), Some(0));
    assert_eq!(stdout, format!("pelican {}", env!("CARGO_PKG_VERSION")));
    for args in [&["--help"][..], &["consume", "--help"], &["pending", "-h"], &["help", "produce"]] {
        let (status, stdout, _) = run(args);
        assert_eq!(status.code(), Some(0), "{args:?}");
        assert!(stdout.contains("Usage: pelican"), "{args:?}: {stdout}");
    }

    let server = Server::start(Flavor::Valkey81);
    let mut admin = server.admin();
    for stream in ["a", "b"] {
        admin.call(&["XGROUP", "CREATE", stream, "g", "0", "MKSTREAM"]);
    }
    let env = [("PELICAN_URL", url(&server)), ("PELICAN_GROUP", "g".to_string())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (status, stdout, stderr) = run_env(&["pending", "--stream", "a", "--stream", "b"], &env);
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(
        stdout.starts_with("stream a, group g: 0 pending")
            && stdout.contains("\nstream b, group g: 0 pending"),
        "{stdout}"
    );
    // The flag wins over the environment.
    let (status, _, stderr) = run_env(&["pending", "--stream", "a", "--group", "nope"], &env);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.starts_with("pelican: stream a: there is no group nope (NOGROUP"), "{stderr}");
}

// ---- 7. the pending table -----------------------------------------------------------------------

/// Long and wide (CJK) names are neither cut nor let to push the columns out of line; names
/// that are not UTF-8 are shown escaped.
#[test]
fn pending_tables_line_up_by_display_width() {
    let server = Server::start(Flavor::Valkey81);
    let mut admin = server.admin();
    admin.xadd_n("s", 4, 4);
    admin.call(&["XGROUP", "CREATE", "s", "g", "0"]);
    let long = "a-consumer-name-far-longer-than-the-24-column-field";
    for name in [&b"w1"[..], "注文ワーカー".as_bytes(), long.as_bytes(), b"\xffbin"] {
        admin.call(&[&b"XREADGROUP"[..], b"GROUP", b"g", name, b"COUNT", b"1", b"STREAMS", b"s", b">"]);
    }
    let (status, text, stderr) = run(&["pending", "--url", &url(&server), "--stream", "s", "--group", "g"]);
    assert_eq!(status.code(), Some(0), "{stderr}");
    let lines: Vec<&str> = text.lines().collect();
    let names = ["w1", "注文ワーカー", long, r"\xffbin"];
    let name_of =
        |row: &str| *names.iter().find(|n| row.contains(&format!("{n} "))).unwrap_or_else(|| panic!("{row}"));
    let (consumers, oldest) = (&lines[2..7], &lines[9..]);
    assert_eq!((consumers.len(), oldest.len()), (5, 5), "{text}");
    // The right-aligned columns (pending, oldest idle, seen) end where their headers do.
    let header = cells(consumers[0], &["consumer", "pending", "oldest idle", "seen"]);
    for row in &consumers[1..] {
        let name = name_of(row);
        assert!(row.starts_with(&format!("{name} ")), "the whole name, escaped if need be: {row}");
        let rest: Vec<&str> = row[name.len()..].split_whitespace().collect();
        let mut want = vec![name];
        want.extend_from_slice(&rest[..4]); // pending, idle, seen, "ago"
        let row = cells(row, &want);
        assert_eq!(
            [row[1].1, row[2].1, row[4].1],
            [header[1].1, header[2].1, header[3].1],
            "in line:\n{text}"
        );
    }
    // The consumer column starts where its header does, the idle column ends where its does.
    let header = cells(oldest[0], &["id", "consumer", "idle"]);
    for row in &oldest[1..] {
        let rest: Vec<&str> = row.split_whitespace().collect();
        let row = cells(row, &[rest[0], name_of(row), rest[rest.len() - 2]]);
        assert_eq!([row[1].0, row[2].1], [header[1].0, header[2].1], "in line:\n{text}");
    }
}

/// Where each of `cells`, found in turn in `line`, starts and ends on screen (display
/// columns).
fn cells(line: &str, cells: &[&str]) -> Vec<(usize, usize)> {
    let mut from = 0;
    cells
        .iter()
        .map(|cell| {
            let at = from + line[from..].find(cell).unwrap_or_else(|| panic!("{cell:?} in {line:?}"));
            from = at + cell.len();
            (line[..at].width(), line[..from].width())
        })
        .collect()
}

// ---- 8. names that are not UTF-8 ----------------------------------------------------------------

/// A stream, group and consumer named with bytes that are not UTF-8 work end to end:
/// produced to, consumed (entry lines name the stream in base64), shown by `pending`
/// (escaped; base64 in JSON), whose base64 decodes to bytes that can be given back.
#[test]
fn names_that_are_not_utf8_work_end_to_end() {
    let server = Server::start(Flavor::Valkey81);
    let mut admin = server.admin();
    let url = OsString::from(url(&server));
    let (stream, group, consumer) =
        (OsStr::from_bytes(b"\xffs"), OsStr::from_bytes(b"g\xfe"), OsStr::from_bytes(b"c\xfd"));
    let os = |s: &'static str| OsStr::new(s);

    let (status, lines, stderr) =
        OsPelican::run(&[os("produce"), os("--url"), &url, os("--stream"), stream, os("--count"), os("3")]);
    assert_eq!(status.code(), Some(0), "{stderr}");
    let said = String::from_utf8_lossy(&lines[0]);
    assert!(said.starts_with(r"produced 3 entries to \xffs (16-byte values)"), "{said}");
    assert_eq!(admin.call(&[&b"XLEN"[..], b"\xffs"]).as_int(), Some(3));

    let consume = [
        os("consume"),
        os("--url"),
        &url,
        os("--stream"),
        stream,
        os("--group"),
        group,
        os("--consumer"),
        consumer,
        os("--create-group"),
        os("0"),
    ];
    let mut p = OsPelican::spawn(&consume);
    let lines: Vec<Json> =
        (0..3).map(|_| Json::parse(std::str::from_utf8(&p.line()).expect("JSON is UTF-8"))).collect();
    for line in &lines {
        assert_eq!(line.get("stream").get("base64").str(), "/3M=", "the stream by its bytes");
        assert_eq!(line.get("fields").get("p").str(), "x".repeat(16));
    }
    let status = p.stop();
    assert_eq!(status.code(), Some(0), "{}", p.stderr());
    let acked = admin.call(&[&b"XPENDING"[..], b"\xffs", b"g\xfe"]);
    assert_eq!(acked.as_array().and_then(|r| r.first()).and_then(|n| n.as_int()), Some(0), "all acked");

    // Leave one pending with the consumer, for `pending` to show.
    admin.call(&[&b"XADD"[..], b"\xffs", b"*", b"k", b"v"]);
    admin.call(&[&b"XREADGROUP"[..], b"GROUP", b"g\xfe", b"c\xfd", b"STREAMS", b"\xffs", b">"]);
    let pending = [os("pending"), os("--url"), &url, os("--stream"), stream, os("--group"), group];
    let (status, text, stderr) = OsPelican::run(&pending);
    assert_eq!(status.code(), Some(0), "{stderr}");
    let text = String::from_utf8(text.concat()).expect("escaped text is UTF-8");
    assert!(text.starts_with(r"stream \xffs, group g\xfe: 1 pending"), "{text}");
    assert!(text.contains(r"c\xfd "), "{text}");

    let mut json = pending.to_vec();
    json.push(os("--json"));
    let (status, lines, stderr) = OsPelican::run(&json);
    assert_eq!(status.code(), Some(0), "{stderr}");
    let report = Json::parse(std::str::from_utf8(&lines[0]).expect("JSON is UTF-8"));
    let base64 = |j: &Json| j.get("base64").str().to_string();
    assert_eq!((base64(report.get("stream")), base64(report.get("group"))), ("/3M=".into(), "Z/4=".into()));
    let name = base64(report.get("consumers").arr()[0].get("name"));
    assert_eq!(name, "Y/0=");
    // The base64 decodes to the bytes, which work as a name given back.
    let decoded = OsString::from_vec(STANDARD.decode(&name).expect("base64"));
    assert_eq!(decoded, consumer);
    let mut p = OsPelican::spawn(&[
        os("consume"),
        os("--url"),
        &url,
        os("--stream"),
        stream,
        os("--group"),
        group,
        os("--consumer"),
        &decoded,
    ]);
    let line = Json::parse(std::str::from_utf8(&p.line()).expect("UTF-8"));
    assert_eq!(line.get("fields").get("k").str(), "v", "its own pending entry, back to it");
    assert_eq!(p.stop().code(), Some(0));
    wait_until("nothing pending", || {
        let reply = admin.call(&[&b"XPENDING"[..], b"\xffs", b"g\xfe"]);
        reply.as_array().and_then(|r| r.first()).and_then(|n| n.as_int()) == Some(0)
    });
}
