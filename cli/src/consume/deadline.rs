//! `--stop-timeout-ms`: a stop, once asked (a signal, a lane that failed, a closed stdout),
//! ends the process within a bounded time, however silent the handler. Past the deadline
//! the handler is ended (the commands running and the `--pipe` process: SIGTERM, SIGKILL
//! [`GRACE`] later), the entries it held are given back unhandled (`Verdict::GiveBack`: not
//! acked, free for a peer at once, their delivery counted), and pelican exits
//! [`EXIT_STATUS`] — from `main` once the lanes have stopped, or from here if they have
//! not within [`FINISH_WAIT`] (an entry whose line waits on a stdout nobody reads, a server
//! that does not answer).

use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use super::lane::Handlers;
use super::screen::Screen;
use super::signals::{end_commands, in_hand, running_groups, GRACE};
use super::stop::{StopAll, OVERRAN};

/// The exit status of a stop that ran out of time.
pub const EXIT_STATUS: u8 = crate::failure::STOP_TIMED_OUT;

/// How long the lanes have, once the handler is ended, to give back the entries it held,
/// confirm their acks and stop, before the process exits without them.
const FINISH_WAIT: Duration = Duration::from_secs(2);

/// Watches for the first stop (on a thread of its own) and ends it `limit` after it was
/// asked, if the process is still there.
pub fn watch(
    stop: Arc<StopAll>,
    every: Handlers,
    screen: Arc<Screen>,
    limit: Duration,
) -> std::io::Result<()> {
    thread::Builder::new().name("pelican-stop-deadline".into()).spawn(move || {
        stop.wait();
        thread::sleep(limit);
        // Still running: the stop did not finish in time.
        OVERRAN.store(true, SeqCst);
        let handlers = every.list();
        let ms = limit.as_millis();
        let what = match in_hand(&handlers) {
            (_, None) => "no entry is in hand".to_string(),
            (1, Some(held)) => format!("{held} is given back unhandled (not acked; a peer takes it at once)"),
            (_, Some(held)) => {
                format!("{held} are given back unhandled (not acked; a peer takes them at once)")
            }
        };
        let groups = running_groups(&handlers, every.pipe());
        let ending = match groups.is_empty() {
            true => String::new(),
            false => format!(
                "; the handler is ended (SIGTERM, and SIGKILL if still running {} s later)",
                GRACE.as_secs()
            ),
        };
        screen.tell_now(format_args!(
            "pelican: the stop did not finish within {ms} ms (--stop-timeout-ms): {what}{ending}"
        ));
        end_commands(&groups, &handlers);
        thread::sleep(FINISH_WAIT);
        screen.tell_now(format_args!(
            "pelican: exiting (status {EXIT_STATUS}): what is still in hand, and the acks not yet confirmed, \
             stay pending, to be delivered again"
        ));
        std::process::exit(i32::from(EXIT_STATUS));
    })?;
    Ok(())
}
