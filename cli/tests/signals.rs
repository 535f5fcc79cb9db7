//! `pelican consume` and signals, the commands it starts, what it writes: the binary against
//! real servers, signalled as users signal it (`kill`, `timeout`), on a terminal (`script`).

mod support;

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use pelican_tests::server::{Flavor, Server};
use rustix::process::{kill_process, kill_process_group, Pid, Signal};
use support::{lines_of, run, wait_until, Json, Pelican, Scratch, BIN, WAIT};

fn url(server: &Server) -> String {
    format!("redis://{}", server.addr())
}

/// `consume` arguments for stream `s`, group `g`, consumer `c`, creating the group at 0.
fn consume<'a>(url: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    consume_as(url, "g", extra)
}

/// [`consume`] in group `group`.
fn consume_as<'a>(url: &'a str, group: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "consume",
        "--url",
        url,
        "--stream",
        "s",
        "--group",
        group,
        "--consumer",
        "c",
        "--create-group",
        "0",
    ];
    args.extend_from_slice(extra);
    args
}

/// Sends `signal` to `pid` from this test process: the same sender every time.
fn signal(pid: u32, signal: Signal) {
    let pid = Pid::from_raw(pid as i32).expect("a pid");
    kill_process(pid, signal).expect("signal pelican");
}

/// A process's state letter (`R`, `S`, `Z`…) and process group, from `/proc/<pid>/stat`;
/// `None` if there is no such process (not even a zombie).
fn proc_stat(pid: u32) -> Option<(char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid pgrp …`; comm may hold spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split(' ');
    let state = fields.next()?.chars().next()?;
    let pgrp = fields.nth(1)?.parse().ok()?;
    Some((state, pgrp))
}

/// The processes of process group `group` that are not zombies.
fn live_members(group: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| matches!(proc_stat(pid), Some((state, g)) if g == group && state != 'Z'))
        .collect()
}

/// A child process (not `pelican` itself, or not through [`Pelican`]) killed and reaped on
/// drop if still running, so a failing test leaves nothing behind: with `group`, its whole
/// process group (`timeout` makes one of its own, pelican in it).
struct Spawned {
    child: Child,
    group: bool,
}

impl Spawned {
    /// Waits (bounded) for it to exit.
    fn wait(&mut self, what: &str) -> ExitStatus {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "{what} did not exit within {WAIT:?}");
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            match Pid::from_raw(self.child.id() as i32) {
                Some(group) if self.group => drop(kill_process_group(group, Signal::KILL)),
                _ => drop(self.child.kill()),
            }
            let _ = self.child.wait();
        }
    }
}

/// What a pipe yielded so far, read in the background, and whether it has ended.
#[derive(Clone, Default)]
struct Collected(Arc<Mutex<(Vec<u8>, bool)>>);

impl Collected {
    fn from(mut pipe: impl Read + Send + 'static) -> Collected {
        let collected = Collected::default();
        let into = collected.clone();
        thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = pipe.read(&mut buf) {
                into.0.lock().unwrap().0.extend_from_slice(&buf[..n]);
            }
            into.0.lock().unwrap().1 = true;
        });
        collected
    }

    fn text(&self) -> String {
        support::unstamped(&String::from_utf8_lossy(&self.0.lock().unwrap().0))
    }

    /// Everything, once the writers have closed the pipe (bounded).
    fn all(&self) -> String {
        wait_until("the pipe's end", || self.0.lock().unwrap().1);
        self.text()
    }
}

#[test]
fn a_second_signal_leaves_no_command_running() {
    let server = Server::start(Flavor::Valkey81);
    let mut admin = server.admin();
    let url = url(&server);
    for transport in ["mio", "smol"] {
        let stream_ids = admin.xadd_n("s", 1, 4);
        let dir = Scratch::new("orphan");
        let pidfile = dir.file("pid");
        // Ignores SIGTERM, as a careless or stuck handler does; bounded, should the test fail.
        let command = format!("trap '' TERM; echo $$ > {pidfile}; sleep 30");
        let mut p = Pelican::spawn(&consume(&url, &["--exec", &command, "--transport", transport]));
        wait_until("the command to start", || lines_of(&pidfile).len() == 1);
        let pid: u32 = lines_of(&pidfile)[0].parse().expect("a pid");
        p.term();
        wait_until("the first signal to be seen", || p.stderr().contains("stopping after the entry in hand"));
        p.term();
        let status = p.wait();
        let stderr = p.stderr();
        assert_eq!(status.code(), Some(130), "{transport}; stderr:\n{stderr}");
        assert!(stderr.contains("SIGKILL if still running in 3 s"), "{transport}; stderr:\n{stderr}");
        // Reaped before pelican exited: not even a zombie left, nor anything in its group.
        assert_eq!(proc_stat(pid), None, "{transport}: the command {pid} outlived pelican");
        assert_eq!(live_members(pid), Vec::<u32>::new(), "{transport}: its process group outlived pelican");
        let pending: Vec<String> = admin.xpending_consumer("s", "g", "c").into_iter().map(|e| e.0).collect();
        assert_eq!(pending, stream_ids, "{transport}: the entry in hand stays pending");
        // The next round starts clean.
        admin.call(&["DEL", "s"]);
    }
}

#[test]
fn timeout_sigint_is_one_stop_request() {
    // `timeout` signals pelican, then its own process group, pelican among it: one request
    // delivered twice, which must stop gracefully (0), never as a second signal (130). The
    // kernel merges the two unless pelican takes the first before the second is sent: it
    // must be busy, running, for the race to be run at all.
    let server = Server::start(Flavor::Valkey81);
    let url = url(&server);
    let (status, _, stderr) = run(&["produce", "--url", &url, "--stream", "s", "--count", "200000"]);
    assert_eq!(status.code(), Some(0), "{stderr}");
    for round in 0..20 {
        let group = format!("g{round}");
        let transport = if round % 2 == 0 { "mio" } else { "smol" };
        let mut args = vec!["--preserve-status", "-s", "INT", "1", BIN];
        args.extend(consume_as(&url, &group, &["--transport", transport]));
        let child = Command::new("timeout")
            .args(&args)
            .env_remove("PELICAN_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run timeout");
        let mut child = Spawned { child, group: true };
        let stderr = Collected::from(child.child.stderr.take().expect("piped stderr"));
        let status = child.wait("timeout pelican");
        let stderr = stderr.all();
        assert_eq!(status.code(), Some(0), "round {round} ({transport}): stderr:\n{stderr}");
        assert!(
            stderr.contains("pelican: stopping") && stderr.contains("(signal again"),
            "round {round}: {stderr}"
        );
        assert!(!stderr.contains("exiting"), "round {round}: {stderr}");
    }
}

#[test]
fn two_deliberate_signals_from_one_process_exit_130() {
    let server = Server::start(Flavor::Valkey81);
    let mut admin = server.admin();
    admin.xadd_n("s", 1, 4);
    let dir = Scratch::new("deliberate");
    let log = dir.file("log");
    let command = format!("echo started >> {log}; sleep 20");
    let url = url(&server);
    let mut p = Pelican::spawn(&consume(&url, &["--exec", &command]));
    wait_until("the command to start", || lines_of(&log).len() == 1);
    signal(p.pid(), Signal::INT);
    wait_until("the first signal to be seen", || p.stderr().contains("stopping after the entry in hand"));
    // Past the window in which the same sender's signal is taken for the same request.
    thread::sleep(Duration::from_millis(1500));
    signal(p.pid(), Signal::INT);
    let status = p.wait();
    assert_eq!(status.code(), Some(130), "stderr:\n{}", p.stderr());
    assert!(p.stderr().contains("pelican: exiting"), "stderr:\n{}", p.stderr());
}

/// Checks the entry lines `pelican consume` printed against the stream: each entry once, in
/// stream order.
fn check_in_order(lines: &[String], ids: &[String]) {
    let got: Vec<String> = lines.iter().map(|l| Json::parse(l).get("id").str().to_string()).collect();
    assert_eq!(got.len(), ids.len(), "as many lines as entries");
    assert!(got == ids, "every entry once, in stream order");
}

/// Printed lines, on `transport`: into a pipe read as it comes (lines are written on the
/// transport's thread while it has room, by a worker or smol's blocking pool when it is
/// full), then into a file (always room: every line written on the transport's thread).
fn prints_every_entry_once_in_order(transport: &str) {
    let server = Server::start(Flavor::Valkey81);
    let mut admin = server.admin();
    let url = url(&server);
    let (status, _, stderr) = run(&["produce", "--url", &url, "--stream", "s", "--count", "20000"]);
    assert_eq!(status.code(), Some(0), "{stderr}");
    let ids: Vec<String> = admin.xrange("s").into_iter().map(|e| e.0).collect();
    assert_eq!(ids.len(), 20000);

    let mut p = Pelican::spawn(&consume(&url, &["--transport", transport]));
    let lines: Vec<String> = (0..ids.len()).map(|_| p.line()).collect();
    wait_until("XPENDING 0", || admin.xpending_count("s", "g") == 0);
    p.stop();
    check_in_order(&lines, &ids);

    let dir = Scratch::new("print-file");
    let out = dir.file("out");
    let child = Command::new(BIN)
        .args(consume_as(&url, "g2", &["--transport", transport]))
        .env_remove("PELICAN_URL")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).expect("create the output file"))
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn pelican");
    let mut child = Spawned { child, group: false };
    wait_until("XPENDING 0 and every entry read", || {
        lines_of(&out).len() == ids.len() && admin.xpending_count("s", "g2") == 0
    });
    signal(child.child.id(), Signal::TERM);
    let status = child.wait("pelican");
    assert_eq!(status.code(), Some(0));
    check_in_order(&lines_of(&out), &ids);
}

#[test]
fn mio_prints_every_entry_once_in_order() {
    prints_every_entry_once_in_order("mio");
}

#[test]
fn smol_prints_every_entry_once_in_order() {
    prints_every_entry_once_in_order("smol");
}

/// A stdout nobody reads (a stuck reader down the pipe): its line waits on a worker (mio)
/// or smol's blocking pool, never on the connection's thread, which goes on renewing the
/// leases of the entry in hand and of those read behind it. A peer reclaiming idle entries
/// every beat, running while the pipe stays full for three times `--min-idle-ms`, takes
/// none of them; once the pipe is read, every entry was printed once, by one or the other.
fn a_full_stdout_keeps_its_entries_leased(transport: &str) {
    let server = Server::start(Flavor::Redis70);
    let mut admin = server.admin();
    let ids = admin.xadd_n("s", 3000, 100); // lines of ~160 bytes: the pipe fills
    let url = url(&server);
    let timing = ["--min-idle-ms", "1000", "--beat-ms", "100", "--transport", transport];
    let child = Command::new(BIN)
        .args(consume(&url, &timing))
        .env_remove("PELICAN_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn pelican");
    let mut stuck = Spawned { child, group: false };
    let stuck_err = Collected::from(stuck.child.stderr.take().expect("piped stderr"));
    let stuck_out = stuck.child.stdout.take().expect("piped stdout");
    // A pipe holds 64 KiB: full but for less than a line.
    wait_until("the pipe to fill", || rustix::io::ioctl_fionread(&stuck_out).is_ok_and(|n| n > 60_000));
    let mut peer_args = consume(&url, &timing);
    peer_args[8] = "peer";
    let mut peer = Pelican::spawn(&peer_args);
    thread::sleep(Duration::from_millis(3000)); // 3 × --min-idle-ms, 30 of the peer's beats
    let out = Collected::from(stuck_out);
    let mut peer_lines = Vec::new();
    wait_until("every entry printed and acked", || {
        while let Some(line) = peer.try_line() {
            peer_lines.push(line);
        }
        out.text().lines().count() + peer_lines.len() >= ids.len() && admin.xpending_count("s", "g") == 0
    });
    peer.stop();
    signal(stuck.child.id(), Signal::TERM);
    assert_eq!(stuck.wait("pelican").code(), Some(0), "{}", stuck_err.all());
    let mut printed: Vec<String> = out
        .all()
        .lines()
        .chain(peer_lines.iter().map(String::as_str))
        .map(|l| Json::parse(l).get("id").str().to_string())
        .collect();
    printed.sort();
    let mut ids = ids;
    ids.sort();
    assert!(printed == ids, "{transport}: each entry once ({} lines for {})", printed.len(), ids.len());
    assert!(!peer.stderr().contains("reclaimed"), "{transport}: {}", peer.stderr());
    assert!(!stuck_err.text().contains("lease"), "{transport}: {}", stuck_err.text());
}

#[test]
fn a_full_stdout_keeps_its_entries_leased_on_mio() {
    a_full_stdout_keeps_its_entries_leased("mio");
}

#[test]
fn a_full_stdout_keeps_its_entries_leased_on_smol() {
    a_full_stdout_keeps_its_entries_leased("smol");
}

#[test]
fn a_stop_during_an_outage_says_what_it_waits_for() {
    for transport in ["mio", "smol"] {
        let mut server = Server::start(Flavor::Valkey81);
        let mut admin = server.admin();
        admin.xadd_n("s", 1, 4);
        let dir = Scratch::new("outage");
        let (log, go) = (dir.file("log"), dir.file("go"));
        // Finishes (exit 0: an ack earned) once `go` exists, after the server is gone.
        let command = format!(
            "cat >/dev/null; echo started >> {log}; i=0; \
             while [ ! -e {go} ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; echo done >> {log}"
        );
        let url = url(&server);
        let mut p = Pelican::spawn(&consume(&url, &["--exec", &command, "--transport", transport]));
        wait_until("the command to start", || lines_of(&log).len() == 1);
        server.kill9();
        std::fs::write(&go, "").expect("create the go file");
        wait_until("the command to finish", || lines_of(&log).len() == 2);
        p.term();
        // (The whole line: stderr may be read in the middle of it.)
        wait_until("the wait on the server to be told", || {
            p.stderr()
                .lines()
                .any(|l| l.contains("stopping: waiting for the server") && l.ends_with("exit now"))
        });
        let stderr = p.stderr();
        let told: Vec<&str> = stderr.lines().filter(|l| l.contains("waiting for the server")).collect();
        let want = match transport {
            "mio" => {
                "pelican: stopping: waiting for the server (unreachable) to confirm 1 acknowledgement; \
                      signal again to exit now"
            }
            _ => {
                "pelican: stopping: waiting for the server to confirm the acknowledgements earned; \
                  signal again to exit now"
            }
        };
        assert_eq!(told, [want], "{transport}: told once");
        p.term();
        let status = p.wait();
        assert_eq!(status.code(), Some(130), "{transport}; stderr:\n{}", p.stderr());
    }
}

#[test]
fn the_summary_counts_reconnects() {
    let server = Server::start(Flavor::Valkey81);
    let mut admin = server.admin();
    admin.xadd_n("s", 1, 4);
    let url = url(&server);
    let mut p = Pelican::spawn(&consume(&url, &["--progress"]));
    p.line();
    let clients = |admin: &mut pelican_tests::admin::Admin| {
        let list = admin.call(&["CLIENT", "LIST", "TYPE", "normal"]).as_text().unwrap_or_default();
        list.lines().count()
    };
    wait_until("pelican to be connected", || clients(&mut admin) == 2);
    // Every normal client but the admin's own connection (SKIPME yes): pelican's.
    assert_eq!(admin.call(&["CLIENT", "KILL", "TYPE", "normal"]).as_int(), Some(1));
    wait_until("pelican to reconnect", || clients(&mut admin) == 2);
    admin.xadd_n("s", 1, 4);
    p.line();
    wait_until("XPENDING 0", || admin.xpending_count("s", "g") == 0);
    p.stop();
    let stderr = p.stderr();
    let summary = stderr.lines().find(|l| l.contains(" handled in ")).unwrap_or_default();
    assert!(summary.contains(", 2 acked, 1 reconnect, "), "{stderr}");
}

/// The bytes just before each occurrence of `what` in `screen` end a line (or clear one).
fn starts_lines(screen: &str, what: &str) -> usize {
    let mut found = 0;
    for (at, _) in screen.match_indices(what) {
        let before = &screen[..at];
        assert!(
            before.is_empty() || before.ends_with('\n') || before.ends_with("\r\x1b[K"),
            "`{what}` runs on from {:?}",
            &before[before.len().saturating_sub(60)..]
        );
        found += 1;
    }
    found
}

#[test]
fn on_a_terminal_output_never_runs_into_the_progress_line() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: no `script` (util-linux) to give pelican a terminal");
        return;
    }
    let server = Server::start(Flavor::Valkey81);
    let mut admin = server.admin();
    let dir = Scratch::new("tty");
    let pidfile = dir.file("pid");
    let url = url(&server);
    let pelican = consume(&url, &[]).join(" ");
    // A terminal on stdout and stderr, as a user's; `exec` makes pelican the pid written.
    let child = Command::new("script")
        .args(["-qfec", &format!("echo $$ > {pidfile}; exec {BIN} {pelican}"), "/dev/null"])
        .env("SHELL", "/bin/sh")
        .env_remove("PELICAN_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run script");
    // Killed, script closes the terminal: pelican gets SIGHUP and dies.
    let mut child = Spawned { child, group: false };
    let screen = Collected::from(child.child.stdout.take().expect("piped stdout"));
    wait_until("the progress line to be drawn", || screen.text().contains("entries/s"));
    admin.xadd_n("s", 3, 4);
    wait_until("3 entries printed", || screen.text().matches("{\"stream\"").count() == 3);
    wait_until("the pid file", || lines_of(&pidfile).len() == 1);
    signal(lines_of(&pidfile)[0].parse().expect("a pid"), Signal::TERM);
    let status = child.wait("script pelican");
    assert_eq!(status.code(), Some(0));
    let screen = screen.all();
    let first_entry = screen.find("{\"stream\"").unwrap_or_default();
    assert!(screen[..first_entry].contains("entries/s"), "the line was shown before the entries: {screen:?}");
    assert_eq!(starts_lines(&screen, "{\"stream\""), 3, "{screen:?}");
    // Connected, the stop message, the leave and the summary.
    assert_eq!(starts_lines(&screen, "pelican: "), 4, "{screen:?}");
    assert!(screen.contains("pelican: left the group (holding nothing)"), "{screen:?}");
    assert!(screen.contains(" 3 handled in "), "{screen:?}");
}

/// The stop's first line counts what is in hand: nothing (parked, or never connected), or
/// each entry a handler runs.
#[test]
fn the_stop_says_how_many_entries_are_in_hand() {
    let server = Server::start(Flavor::Redis70);
    let url = url(&server);
    let mut p = Pelican::spawn(&consume(&url, &[]));
    wait_until("connected", || p.stderr().contains("pelican: connected"));
    p.term();
    assert_eq!(p.wait().code(), Some(0), "{}", p.stderr());
    assert!(
        p.stderr().contains("pelican: stopping: no entry in hand (signal again to exit at once)\n"),
        "{}",
        p.stderr()
    );

    server.admin().xadd_n("s", 3, 4);
    let dir = Scratch::new("counted");
    let log = dir.file("log");
    let command = format!("echo started >> {log}; sleep 1");
    let mut p = Pelican::spawn(&consume_as(&url, "g2", &["--exec", &command, "--concurrency", "3"]));
    wait_until("three commands running", || lines_of(&log).len() == 3);
    p.term();
    assert_eq!(p.wait().code(), Some(0), "{}", p.stderr());
    assert!(
        p.stderr().contains("pelican: stopping after the 3 entries in hand (signal again"),
        "{}",
        p.stderr()
    );
}
