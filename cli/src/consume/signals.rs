//! SIGINT and SIGTERM: the first stops gracefully, a second exits with 130 once every
//! command pelican started has ended.

use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rustix::process::{kill_process_group, test_kill_process_group, Pid, Signal};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::exfiltrator::WithOrigin;
use signal_hook::iterator::SignalsInfo;

use super::handler::Handler;
use super::lane::Handlers;
use super::pipe::Pipe;
use super::screen::Screen;
use super::stop::{StopAll, EXITING};
use crate::failure::Failure;

/// How long a repeat of the first signal by the same process is taken for the same stop
/// request (see [`Request::repeats`]).
const REPEAT_WINDOW: Duration = Duration::from_secs(1);

/// How long the running commands get to end after SIGTERM, on a second signal, before
/// SIGKILL.
pub const GRACE: Duration = Duration::from_secs(3);

/// How long to wait for the commands killed to be gone. A process that survives SIGKILL this
/// long is stuck in the kernel, or a zombie its new parent does not reap; waiting longer
/// would not help.
const REAP_WAIT: Duration = Duration::from_secs(2);

/// One signal received: which, from which process (if a process sent it), when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    signal: i32,
    sender: Option<i32>,
    at: Instant,
}

impl Request {
    /// `signal` sent by process `sender` (`None`: by the kernel, e.g. a Ctrl-C on the
    /// terminal), received `at`.
    pub fn new(signal: i32, sender: Option<i32>, at: Instant) -> Request {
        Request { signal, sender, at }
    }

    /// Whether `self` is `first` delivered again rather than a second request: the same
    /// signal from the same process within [`REPEAT_WINDOW`]. `timeout -s INT 2 pelican`
    /// signals pelican, then its whole process group, pelican again among it: two
    /// deliveries of one request, from one process, microseconds apart. The sender tells
    /// them from a user's two `kill`s (two processes) however close; the window keeps a
    /// sender's deliberate second signal (the same script, a second later) a second
    /// request. The terminal's Ctrl-C comes from the kernel, never twice per key press:
    /// each counts.
    pub fn repeats(&self, first: &Request) -> bool {
        self.signal == first.signal
            && self.sender.is_some()
            && self.sender == first.sender
            && self.at.saturating_duration_since(first.at) < REPEAT_WINDOW
    }
}

/// The first SIGINT/SIGTERM stops every lane gracefully; a second ends the running commands
/// (see [`end_commands`]) and exits with 130. A repeat of the first is ignored
/// ([`Request::repeats`]). The messages count the entries in hand.
pub fn on_signals(stop: Arc<StopAll>, every: Handlers, screen: Arc<Screen>) -> Result<(), Failure> {
    let mut signals = SignalsInfo::<WithOrigin>::new([SIGINT, SIGTERM])
        .map_err(|e| Failure::Failed(format!("cannot catch signals: {e}")))?;
    thread::Builder::new()
        .name("pelican-signals".into())
        .spawn(move || {
            let mut first = None;
            for origin in signals.forever() {
                // Read anew at each signal: streams join as they are found.
                let handlers = every.list();
                let request = Request::new(origin.signal, origin.process.map(|p| p.pid), Instant::now());
                match &first {
                    None => {
                        first = Some(request);
                        let what = match in_hand(&handlers) {
                            (_, None) => "stopping: no entry in hand".to_string(),
                            (_, Some(held)) => format!("stopping after {held}"),
                        };
                        screen.tell(format_args!("pelican: {what} (signal again to exit at once)"));
                        stop.stop();
                    }
                    Some(first) if request.repeats(first) => {}
                    Some(_) => break,
                }
            }
            EXITING.store(true, SeqCst);
            let handlers = every.list();
            let groups = running_groups(&handlers, every.pipe());
            if groups.is_empty() {
                let left = match in_hand(&handlers) {
                    (_, None) => String::new(),
                    (1, Some(held)) => format!("; {held} stays pending"),
                    (_, Some(held)) => format!("; {held} stay pending"),
                };
                screen.tell_now(format_args!("pelican: exiting at once{left}"));
            } else {
                screen.tell_now(format_args!(
                    "pelican: exiting: the running commands get SIGTERM, and SIGKILL if still running \
                     in {} s; the entries in hand stay pending",
                    GRACE.as_secs()
                ));
                end_commands(&groups, &handlers);
            }
            std::process::exit(130);
        })
        .map_err(|e| Failure::Failed(format!("cannot start the signal thread: {e}")))?;
    Ok(())
}

/// The entries in hand over all lanes, and in words ("the entry in hand", "the 3 entries in
/// hand"; `None` for none).
pub(super) fn in_hand(handlers: &[Arc<Handler>]) -> (usize, Option<String>) {
    let n = handlers.iter().map(|h| h.in_hand()).sum();
    let words = match n {
        0 => None,
        1 => Some("the entry in hand".to_string()),
        n => Some(format!("the {n} entries in hand")),
    };
    (n, words)
}

/// The process groups of the commands running now (each leads its own: `process_group(0)`).
/// Called with [`EXITING`] set, so no other command starts (see [`Handler::children`]).
pub(super) fn running_groups(handlers: &[Arc<Handler>], pipe: Option<&Arc<Pipe>>) -> Vec<Pid> {
    let pipe = pipe.and_then(|pipe| pipe.pid());
    handlers
        .iter()
        .flat_map(|h| h.children().clone())
        .chain(pipe)
        .filter_map(|pid| Pid::from_raw(pid as i32))
        .collect()
}

/// SIGTERM to each group; SIGKILL to those with a process left after [`GRACE`]; then waits
/// (bounded) until the groups are empty and each command is reaped by its handler. A group
/// once found empty is not signalled again: its id may be reused.
pub(super) fn end_commands(groups: &[Pid], handlers: &[Arc<Handler>]) {
    for &group in groups {
        let _ = kill_process_group(group, Signal::TERM);
    }
    let mut left = groups.to_vec();
    let deadline = Instant::now() + GRACE;
    loop {
        left.retain(|&group| has_live_process(group));
        if left.is_empty() || Instant::now() >= deadline {
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    for &group in &left {
        let _ = kill_process_group(group, Signal::KILL);
    }
    // SIGKILL is sent, not yet acted on: wait for the groups' processes to die and every
    // command to be reaped by its handler.
    let deadline = Instant::now() + REAP_WAIT;
    loop {
        left.retain(|&group| has_live_process(group));
        let unreaped = handlers.iter().any(|h| !h.children().is_empty());
        if (left.is_empty() && !unreaped) || Instant::now() >= deadline {
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// Whether process group `group` has a process that is not a zombie. kill(2) counts
/// zombies, which are dead but wait to be reaped by their parent: for a command's orphans,
/// init, which may take its time. /proc tells them apart, where there is one.
fn has_live_process(group: Pid) -> bool {
    if test_kill_process_group(group).is_err() {
        return false;
    }
    let Ok(dir) = std::fs::read_dir("/proc") else { return true };
    let group = group.as_raw_pid();
    dir.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .any(|pid| matches!(proc_state(pid), Some((state, pgrp)) if pgrp == group && state != 'Z'))
}

/// A process's state letter (`R`, `S`, `Z`…) and process group, from `/proc/<pid>/stat`.
fn proc_state(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid pgrp …`; comm may hold spaces and parentheses.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let mut fields = rest.split(' ');
    let state = fields.next()?.chars().next()?;
    let pgrp = fields.nth(1)?.parse().ok()?;
    Some((state, pgrp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_state_and_group_from_proc() {
        let me = std::process::id() as i32;
        let Some((state, group)) = proc_state(me) else { return }; // no /proc here
        assert!(state == 'R' || state == 'S', "{state}");
        assert_eq!(Pid::from_raw(group), rustix::process::getpgid(None).ok());
        assert!(has_live_process(Pid::from_raw(group).expect("a group")));
    }

    #[test]
    fn one_request_delivered_twice_counts_once() {
        let t = Instant::now();
        let first = Request::new(SIGINT, Some(100), t);
        // `timeout`'s two deliveries.
        assert!(Request::new(SIGINT, Some(100), t + Duration::from_millis(1)).repeats(&first));
        // The same sender, deliberately, later.
        assert!(!Request::new(SIGINT, Some(100), t + Duration::from_millis(1500)).repeats(&first));
        // Another process (a second `kill`), at once.
        assert!(!Request::new(SIGINT, Some(101), t).repeats(&first));
        // Another signal.
        assert!(!Request::new(SIGTERM, Some(100), t).repeats(&first));
        // Ctrl-C twice: the kernel sends each.
        let key = Request::new(SIGINT, None, t);
        assert!(!Request::new(SIGINT, None, t + Duration::from_millis(1)).repeats(&key));
    }
}
