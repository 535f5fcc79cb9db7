//! Hand-rolled argument parsing: `--flag value`, `--flag=value`, switches, numbers, and the
//! ways a command line can end a run early (help, bad usage, failure).

use std::fmt::Display;
use std::str::FromStr;

/// How a command ends other than in success; `main` turns it into a message and exit code.
#[derive(Debug)]
pub enum Failure {
    /// `--help`: print this usage on stdout, exit 0.
    Help(&'static str),
    /// Bad command line: the message and this usage on stderr, exit 2.
    Usage(String, &'static str),
    /// A bad setting found past parsing (a URL, a host, a value the consumer refuses): the
    /// message on stderr, exit 2.
    Bad(String),
    /// The work failed (connection, server, handler I/O): the message on stderr, exit 1.
    Failed(String),
}

/// The arguments after the subcommand, consumed flag by flag.
pub struct Args {
    items: Vec<String>,
    pos: usize,
    usage: &'static str,
    /// The value of the last `--flag=value`, until taken.
    inline: Option<String>,
    flag: String,
}

impl Args {
    /// `items`, the arguments after the subcommand whose usage is `usage`.
    pub fn new(items: Vec<String>, usage: &'static str) -> Args {
        Args { items, pos: 0, usage, inline: None, flag: String::new() }
    }

    /// A usage error for this subcommand.
    pub fn error(&self, message: impl Display) -> Failure {
        Failure::Usage(message.to_string(), self.usage)
    }

    /// The next flag (`--name`; `-h` and `--help` end with [`Failure::Help`]), or `None`
    /// at the end.
    pub fn next_flag(&mut self) -> Result<Option<String>, Failure> {
        if self.inline.is_some() {
            return Err(self.error(format_args!("{} takes no value", self.flag)));
        }
        let Some(item) = self.items.get(self.pos).cloned() else { return Ok(None) };
        self.pos += 1;
        if item == "-h" || item == "--help" {
            return Err(Failure::Help(self.usage));
        }
        if !item.starts_with("--") || item.len() == 2 {
            return Err(self.error(format_args!("unexpected argument `{item}`")));
        }
        let flag = match item.split_once('=') {
            Some((flag, value)) => {
                self.inline = Some(value.to_string());
                flag.to_string()
            }
            None => item,
        };
        self.flag.clone_from(&flag);
        Ok(Some(flag))
    }

    /// The value of the current flag: its `=value`, or the next argument (which must not
    /// look like a flag; write `--flag=--value` for that).
    pub fn value(&mut self) -> Result<String, Failure> {
        if let Some(value) = self.inline.take() {
            return Ok(value);
        }
        match self.items.get(self.pos) {
            Some(next) if !next.starts_with("--") => {
                self.pos += 1;
                Ok(next.clone())
            }
            _ => Err(self.error(format_args!("{} needs a value", self.flag))),
        }
    }

    /// The current flag's value if one follows (`=value`, or a next argument that is not a
    /// flag), else `None`.
    pub fn optional_value(&mut self) -> Option<String> {
        if let Some(value) = self.inline.take() {
            return Some(value);
        }
        let next = self.items.get(self.pos).filter(|next| !next.starts_with('-'))?.clone();
        self.pos += 1;
        Some(next)
    }

    /// The current flag's value as a number of type `T`, at least `min`.
    pub fn number<T: FromStr + PartialOrd + Display>(&mut self, min: T) -> Result<T, Failure> {
        let text = self.value()?;
        match text.parse::<T>() {
            Ok(n) if n >= min => Ok(n),
            Ok(_) => Err(self.error(format_args!("{}: {text} is below the minimum, {min}", self.flag))),
            Err(_) => Err(self.error(format_args!("{}: `{text}` is not a whole number", self.flag))),
        }
    }

    /// The error for a flag this subcommand does not know.
    pub fn unknown(&self, flag: &str) -> Failure {
        self.error(format_args!("unknown option {flag}"))
    }

    /// `value`, or the error for a missing required flag.
    pub fn required(&self, value: Option<String>, flag: &str) -> Result<String, Failure> {
        value.ok_or_else(|| self.error(format_args!("{flag} is required")))
    }
}

/// The `--url` default: `$PELICAN_URL`, else the local server.
pub fn default_url() -> String {
    std::env::var("PELICAN_URL").ok().filter(|u| !u.is_empty()).unwrap_or_else(|| crate::url::DEFAULT.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(items: &[&str]) -> Args {
        Args::new(items.iter().map(|s| s.to_string()).collect(), "usage")
    }

    fn message(f: Failure) -> String {
        match f {
            Failure::Usage(m, _) => m,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn flags_values_and_numbers() {
        let mut a = args(&["--stream", "s", "--count=5", "--create-group", "--resp3"]);
        assert_eq!(a.next_flag().unwrap().as_deref(), Some("--stream"));
        assert_eq!(a.value().unwrap(), "s");
        assert_eq!(a.next_flag().unwrap().as_deref(), Some("--count"));
        assert_eq!(a.number(1u32).unwrap(), 5);
        assert_eq!(a.next_flag().unwrap().as_deref(), Some("--create-group"));
        assert_eq!(a.optional_value(), None);
        assert_eq!(a.next_flag().unwrap().as_deref(), Some("--resp3"));
        assert!(a.next_flag().unwrap().is_none());
    }

    #[test]
    fn errors_are_clear() {
        let mut a = args(&["--count", "x"]);
        a.next_flag().unwrap();
        assert_eq!(message(a.number(1u32).unwrap_err()), "--count: `x` is not a whole number");
        let mut a = args(&["--count", "0"]);
        a.next_flag().unwrap();
        assert_eq!(message(a.number(1u32).unwrap_err()), "--count: 0 is below the minimum, 1");
        let mut a = args(&["--stream"]);
        a.next_flag().unwrap();
        assert_eq!(message(a.value().unwrap_err()), "--stream needs a value");
        let mut a = args(&["--stream", "--group"]);
        a.next_flag().unwrap();
        assert_eq!(message(a.value().unwrap_err()), "--stream needs a value");
        let mut a = args(&["--resp3=yes", "--x"]);
        a.next_flag().unwrap();
        assert_eq!(message(a.next_flag().unwrap_err()), "--resp3 takes no value");
        assert_eq!(message(args(&["stray"]).next_flag().unwrap_err()), "unexpected argument `stray`");
        assert!(matches!(args(&["-h"]).next_flag(), Err(Failure::Help(_))));
    }
}
