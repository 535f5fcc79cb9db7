//! The terminal that the progress line shares with everything else written there.
//!
//! On a terminal the progress line is rewritten in place (`\r`) and left without a newline,
//! so anything written after it would run on from its end. Whatever pelican writes while
//! the line is shown (an entry, a notice, a stop message) therefore clears it first, and a
//! command's output starts on a clean line too: the line is cleared before each command
//! starts. The next tick draws it again. Drawing, clearing and pelican's own lines take one
//! lock, so none of them lands in the middle of another.

use std::fmt;
use std::io::{IsTerminal, Write};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Back to the line's start, and erase to its end.
pub const CLEAR: &str = "\r\x1b[K";

/// Whether the progress line is on the screen (pure: what to write, not the writing).
#[derive(Debug, Default)]
pub struct Line {
    shown: bool,
}

impl Line {
    /// What draws `text` as the progress line, in place of the one shown if any.
    pub fn draw(&mut self, text: &str) -> String {
        self.shown = true;
        format!("{CLEAR}{text}")
    }

    /// What clears the line before other output: nothing if it is not shown, so that
    /// output in a row (an entry per line) costs no escape after the first.
    pub fn clear(&mut self) -> &'static str {
        if std::mem::take(&mut self.shown) {
            CLEAR
        } else {
            ""
        }
    }
}

/// Pelican's stderr (and stdout, when it is the same terminal), shared with the progress
/// line.
#[derive(Debug)]
pub struct Screen {
    /// Stderr is a terminal: the line is rewritten in place.
    tty: bool,
    /// Stdout is a terminal too: entries printed there must not run into the line either.
    stdout_tty: bool,
    line: Mutex<Line>,
}

/// Holds the screen, the progress line cleared, while something is written.
pub type Hold<'a> = MutexGuard<'a, Line>;

impl Screen {
    /// The screen of this process: whether stderr and stdout are terminals.
    pub fn new() -> Screen {
        Screen {
            tty: std::io::stderr().is_terminal(),
            stdout_tty: std::io::stdout().is_terminal(),
            line: Mutex::default(),
        }
    }

    /// Whether stderr is a terminal (the progress line is then rewritten in place).
    pub fn is_tty(&self) -> bool {
        self.tty
    }

    fn lock(&self) -> Hold<'_> {
        // A thread that panicked while writing left nothing to repair.
        self.line.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Draws the progress line: in place on a terminal, else as a line of its own.
    pub fn draw(&self, text: &str) {
        let mut line = self.lock();
        if self.tty {
            let bytes = line.draw(text);
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(bytes.as_bytes()).and_then(|()| err.flush());
        } else {
            say!("{}{text}", crate::stamp::now());
        }
    }

    /// Clears the progress line if it is shown, and holds the screen until the guard is
    /// dropped: write meanwhile, and nothing is drawn over it.
    pub fn clear(&self) -> Hold<'_> {
        let mut line = self.lock();
        let clear = line.clear();
        if !clear.is_empty() {
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(clear.as_bytes()).and_then(|()| err.flush());
        }
        line
    }

    /// Clears the line before a write to stdout. Held while writing only when stdout is the
    /// terminal too: held on a pipe, a reader that stops reading would stall the progress
    /// line and the signal messages behind the entry.
    pub fn clear_for_stdout(&self) -> Option<Hold<'_>> {
        let hold = self.clear();
        self.stdout_tty.then_some(hold)
    }

    /// Writes `message` as a line on stderr, the progress line cleared first.
    pub fn tell(&self, message: fmt::Arguments<'_>) {
        let _hold = self.clear();
        say!("{}{message}", crate::stamp::now());
    }

    /// [`tell`](Self::tell) without waiting on the screen: for the exit on a second signal,
    /// which must not hang behind a writer stuck on a full terminal.
    pub fn tell_now(&self, message: fmt::Arguments<'_>) {
        match self.line.try_lock() {
            Ok(mut line) => {
                say!("{}{}{message}", line.clear(), crate::stamp::now());
            }
            Err(_) => say!("{}{}{message}", if self.tty { CLEAR } else { "" }, crate::stamp::now()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes a run of draws and other output puts on the terminal.
    fn screen(steps: &[(&str, &str)]) -> String {
        let mut line = Line::default();
        let mut out = String::new();
        for (what, text) in steps {
            match *what {
                "draw" => out.push_str(&line.draw(text)),
                _ => {
                    out.push_str(line.clear());
                    out.push_str(text);
                    out.push('\n');
                }
            }
        }
        out
    }

    #[test]
    fn output_after_the_line_starts_on_a_clean_line() {
        let out = screen(&[
            ("draw", "5 entries/s"),
            ("print", "{\"id\":\"1-0\"}"),
            ("print", "{\"id\":\"2-0\"}"),
            ("draw", "7 entries/s"),
            ("draw", "8 entries/s"),
            ("print", "pelican: stopping"),
        ]);
        assert_eq!(
            out,
            "\r\x1b[K5 entries/s\r\x1b[K{\"id\":\"1-0\"}\n{\"id\":\"2-0\"}\n\
             \r\x1b[K7 entries/s\r\x1b[K8 entries/s\r\x1b[Kpelican: stopping\n"
        );
    }

    #[test]
    fn nothing_to_clear_before_the_first_draw() {
        assert_eq!(screen(&[("print", "a"), ("print", "b")]), "a\nb\n");
    }
}
