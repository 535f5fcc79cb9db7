//! Helpers for the process-level tests: the `pelican` binary as a guarded child process,
//! bounded waits, scratch directories and a tiny JSON reader.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// The longest any test waits for anything.
pub const WAIT: Duration = Duration::from_secs(20);

pub const BIN: &str = env!("CARGO_BIN_EXE_pelican");

/// Polls `done` every 10 ms until it holds; panics naming `what` after [`WAIT`].
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !done() {
        assert!(Instant::now() < deadline, "timed out after {WAIT:?} waiting for {what}");
        thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `pelican args…` to completion (bounded), returning (status, stdout, stderr).
pub fn run(args: &[&str]) -> (ExitStatus, String, String) {
    run_env(args, &[])
}

/// [`run`] with these environment variables set.
pub fn run_env(args: &[&str], env: &[(&str, &str)]) -> (ExitStatus, String, String) {
    let mut p = Pelican::spawn_env(args, env);
    let status = p.wait();
    // Its last words may still be on their way on a loaded machine: wait for the reader to
    // see the end (bounded: a child it left may hold stderr open).
    let deadline = Instant::now() + Duration::from_secs(2);
    while !p.stderr_reader.is_finished() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(5));
    }
    let rx = p.lines.take().expect("stdout is read");
    // The reader sees end-of-file now: collect until it hangs up.
    let stdout = std::iter::from_fn(|| rx.recv_timeout(WAIT).ok()).collect::<Vec<_>>().join("\n");
    (status, stdout, p.stderr())
}

/// Whether `line` starts with the time `--log-time utc` puts there:
/// `2026-12-06T13:47:42.123Z `.
pub fn is_stamped(line: &str) -> bool {
    let b = line.as_bytes();
    let digits = |r: std::ops::Range<usize>| r.into_iter().all(|i| b.get(i).is_some_and(u8::is_ascii_digit));
    b.len() >= 25
        && [(4, b'-'), (7, b'-'), (10, b'T'), (13, b':'), (16, b':'), (19, b'.'), (23, b'Z'), (24, b' ')]
            .iter()
            .all(|&(i, c)| b[i] == c)
        && [0..4, 5..7, 8..10, 11..13, 14..16, 17..19, 20..23].into_iter().all(digits)
}

/// `text` with each line's leading time left out: at the start of a line, or of a line
/// written over the progress line on a terminal (after its `\r\x1b[K`).
pub fn unstamped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        if is_stamped(rest) {
            rest = &rest[25..];
        }
        let Some(end) = rest.find(['\n', '\x1b']) else { break };
        let cut = if rest[end..].starts_with("\x1b[K") { end + 3 } else { end + 1 };
        out.push_str(&rest[..cut]);
        rest = &rest[cut..];
    }
    out.push_str(rest);
    out
}

/// A running `pelican`, killed (SIGKILL) and reaped on drop if still running, so a failing
/// test leaves no process behind.
pub struct Pelican {
    child: Child,
    lines: Option<Receiver<String>>,
    stderr: Arc<Mutex<String>>,
    /// The thread reading stderr: done once every process holding it has exited.
    stderr_reader: thread::JoinHandle<()>,
}

impl Pelican {
    /// Starts `pelican args…` with stdout lines sent to [`Pelican::line`] and stderr kept
    /// for [`Pelican::stderr`]. `PELICAN_URL` is cleared.
    pub fn spawn(args: &[&str]) -> Pelican {
        Pelican::spawn_env(args, &[])
    }

    /// [`Pelican::spawn`] with these environment variables set (`PELICAN_URL` among them,
    /// if wanted).
    pub fn spawn_env(args: &[&str], env: &[(&str, &str)]) -> Pelican {
        let mut child = Command::new(BIN)
            .args(args)
            .env_remove("PELICAN_URL")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn pelican");
        let (tx, rx) = mpsc::channel();
        let stdout = child.stdout.take().expect("piped stdout");
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let (mut pipe, sink) = (child.stderr.take().expect("piped stderr"), stderr.clone());
        let stderr_reader = thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = pipe.read(&mut buf) {
                sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Pelican { child, lines: Some(rx), stderr, stderr_reader }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next stdout line, within [`WAIT`].
    pub fn line(&mut self) -> String {
        let rx = self.lines.as_ref().expect("stdout is read");
        rx.recv_timeout(WAIT)
            .unwrap_or_else(|e| panic!("no stdout line within {WAIT:?} ({e}); stderr:\n{}", self.stderr()))
    }

    /// The next stdout line if one came already.
    pub fn try_line(&mut self) -> Option<String> {
        self.lines.as_ref().expect("stdout is read").try_recv().ok()
    }

    /// What it wrote on stderr so far, each line's leading time (`--log-time`, on by
    /// default) left out: the tests read what is told.
    pub fn stderr(&self) -> String {
        unstamped(&self.stderr.lock().unwrap())
    }

    /// What it wrote on stderr so far, as written.
    pub fn raw_stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Sends SIGTERM with `kill` (no libc in tests).
    pub fn term(&self) {
        let status =
            Command::new("kill").args(["-TERM", &self.pid().to_string()]).status().expect("run kill");
        assert!(status.success(), "kill -TERM {} failed", self.pid());
    }

    /// SIGKILL, and reap.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Its exit code if it has exited (-1 for a signal), without waiting.
    pub fn try_exited(&mut self) -> Option<i32> {
        let status = self.child.try_wait().expect("try_wait")?;
        // Let the stderr reader catch up with the last words.
        thread::sleep(Duration::from_millis(20));
        Some(status.code().unwrap_or(-1))
    }

    /// Waits (bounded) for it to exit.
    pub fn wait(&mut self) -> ExitStatus {
        self.wait_within(WAIT)
    }

    /// Waits for it to exit, `limit` at most: for a run known to take longer than [`WAIT`].
    pub fn wait_within(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                // Let the stderr reader catch up with the last words.
                thread::sleep(Duration::from_millis(20));
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "pelican did not exit within {limit:?}; stderr:\n{}",
                self.stderr()
            );
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGTERM, then asserts a clean exit (status 0).
    pub fn stop(&mut self) {
        self.term();
        let status = self.wait();
        assert_eq!(status.code(), Some(0), "exit status after SIGTERM; stderr:\n{}", self.stderr());
    }
}

impl Drop for Pelican {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.kill9();
        }
    }
}

/// A scratch directory, removed on drop.
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "pelican-cli-{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        Scratch(dir)
    }

    /// A path inside, as a string (for command lines).
    pub fn file(&self, name: &str) -> String {
        self.0.join(name).display().to_string()
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The lines of a file (none if it does not exist yet).
pub fn lines_of(path: &str) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(String::from).collect()
}

/// A parsed JSON value; objects keep their members in order, repeats included.
#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl Json {
    pub fn parse(text: &str) -> Json {
        let mut p = Parser { s: text.as_bytes(), i: 0 };
        let value = p.value();
        p.ws();
        assert_eq!(p.i, p.s.len(), "trailing bytes in JSON: {text}");
        value
    }

    /// The first member called `key`.
    pub fn get(&self, key: &str) -> &Json {
        match self {
            Json::Obj(members) => members
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v)
                .unwrap_or_else(|| panic!("no `{key}` in {self:?}")),
            other => panic!("not an object: {other:?}"),
        }
    }

    pub fn num(&self) -> f64 {
        match self {
            Json::Num(n) => *n,
            other => panic!("not a number: {other:?}"),
        }
    }

    pub fn str(&self) -> &str {
        match self {
            Json::Str(s) => s,
            other => panic!("not a string: {other:?}"),
        }
    }

    pub fn arr(&self) -> &[Json] {
        match self {
            Json::Arr(items) => items,
            other => panic!("not an array: {other:?}"),
        }
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.s.get(self.i).is_some_and(|b| b.is_ascii_whitespace()) {
            self.i += 1;
        }
    }

    fn eat(&mut self, b: u8) {
        self.ws();
        assert_eq!(self.s.get(self.i), Some(&b), "expected `{}` at byte {}", b as char, self.i);
        self.i += 1;
    }

    fn peek(&mut self) -> u8 {
        self.ws();
        *self.s.get(self.i).expect("unexpected end of JSON")
    }

    fn value(&mut self) -> Json {
        match self.peek() {
            b'{' => {
                self.eat(b'{');
                let mut members = Vec::new();
                while self.peek() != b'}' {
                    if !members.is_empty() {
                        self.eat(b',');
                    }
                    let key = self.string();
                    self.eat(b':');
                    members.push((key, self.value()));
                }
                self.eat(b'}');
                Json::Obj(members)
            }
            b'[' => {
                self.eat(b'[');
                let mut items = Vec::new();
                while self.peek() != b']' {
                    if !items.is_empty() {
                        self.eat(b',');
                    }
                    items.push(self.value());
                }
                self.eat(b']');
                Json::Arr(items)
            }
            b'"' => Json::Str(self.string()),
            _ => {
                let start = self.i;
                while self.s.get(self.i).is_some_and(|b| b"+-.eE0123456789truefalsn".contains(b)) {
                    self.i += 1;
                }
                match &self.s[start..self.i] {
                    b"null" => Json::Null,
                    b"true" => Json::Bool(true),
                    b"false" => Json::Bool(false),
                    n => Json::Num(std::str::from_utf8(n).unwrap().parse().expect("a JSON number")),
                }
            }
        }
    }

    fn string(&mut self) -> String {
        self.eat(b'"');
        let mut out = Vec::new();
        loop {
            let b = self.s[self.i];
            self.i += 1;
            match b {
                b'"' => return String::from_utf8(out).expect("UTF-8 string"),
                b'\\' => {
                    let e = self.s[self.i];
                    self.i += 1;
                    let c = match e {
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let hex = std::str::from_utf8(&self.s[self.i..self.i + 4]).unwrap();
                            self.i += 4;
                            char::from_u32(u32::from_str_radix(hex, 16).unwrap()).expect("BMP escape")
                        }
                        other => other as char,
                    };
                    out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                }
                b => out.push(b),
            }
        }
    }
}

/// `consume --url URL --stream s --group g --consumer c --create-group 0 --transport T`
/// and `extra`: the stories' usual consumer.
pub fn consume<'a>(url: &'a str, transport: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "consume",
        "--url",
        url,
        "--stream",
        "s",
        "--group",
        "g",
        "--consumer",
        "c",
        "--create-group",
        "0",
        "--transport",
        transport,
    ];
    args.extend_from_slice(extra);
    args
}
