//! `--exec CMD` checked before anything is read: `sh -n` for its syntax, and its first word
//! looked for as `sh` would (`command -v`), so that a typo fails at the start rather than at
//! the first entry, maybe days later. A command whose first word the shell computes
//! (quotes, variables, substitutions, redirections) is checked for its syntax only.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

/// `Err` saying what is wrong with `command`, if something surely is.
pub fn check(flag: &str, command: &str) -> Result<(), String> {
    let syntax = Command::new("sh").args(["-n", "-c", command]).stderr(Stdio::piped()).output();
    match syntax {
        Ok(out) if !out.status.success() => {
            let why = String::from_utf8_lossy(&out.stderr);
            return Err(format!("the {flag} command `{command}` is not valid sh: {}", why.trim()));
        }
        Ok(_) => {}
        Err(e) => return Err(format!("cannot run sh to check the {flag} command: {e}")),
    }
    let Some(word) = first_word(command) else { return Ok(()) };
    if word.contains('/') {
        // A path: `sh` would run the file itself (its `command -v` does not ask for `x`).
        return match std::fs::metadata(word) {
            Err(_) => Err(format!("the {flag} command `{command}` cannot be run: `{word}` is not found")),
            Ok(m) if !m.is_file() || m.permissions().mode() & 0o111 == 0 => {
                Err(format!("the {flag} command `{command}` cannot be run: `{word}` is not executable"))
            }
            Ok(_) => Ok(()),
        };
    }
    let found = Command::new("sh")
        .args(["-c", "command -v -- \"$1\"", "sh", word])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    match found {
        true => Ok(()),
        false => Err(format!("the {flag} command `{command}` cannot be run: `{word}` is not found")),
    }
}

/// The command word `sh` would run first, if it can be told without running anything:
/// leading assignments (`A=1`) and `exec` are skipped; a word the shell would compute is
/// not told.
fn first_word(command: &str) -> Option<&str> {
    let computed = |w: &str| w.contains(|c| "'\"$`\\(){};|&<>*?[]~#".contains(c));
    let mut words = command.split_whitespace();
    loop {
        let word = words.next()?;
        if computed(word) {
            return None;
        }
        let assignment = word.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty() && name.chars().all(|c| c == '_' || c.is_ascii_alphanumeric())
        });
        if !assignment && word != "exec" {
            return Some(word);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_word_is_what_sh_would_run() {
        assert_eq!(first_word("python3 handler.py"), Some("python3"));
        assert_eq!(first_word("exec /usr/bin/env python3"), Some("/usr/bin/env"));
        assert_eq!(first_word("A=1 B_2=x ./run.sh --flag"), Some("./run.sh"));
        assert_eq!(first_word("cd /app && ./run"), Some("cd"));
        assert_eq!(first_word("\"$HANDLER\" x"), None);
        assert_eq!(first_word("$(which x)"), None);
        assert_eq!(first_word("  "), None);
    }

    #[test]
    fn typos_and_bad_syntax_are_told() {
        assert_eq!(check("--exec", "cat > /dev/null"), Ok(()));
        assert_eq!(check("--exec", "cd / && true"), Ok(()));
        let err = check("--exec", "pythn3 handler.py").unwrap_err();
        assert_eq!(err, "the --exec command `pythn3 handler.py` cannot be run: `pythn3` is not found");
        let err = check("--exec", "/no/such/file x").unwrap_err();
        assert!(err.ends_with("`/no/such/file` is not found"), "{err}");
        let plain = std::env::temp_dir().join(format!("pelican-found-{}", std::process::id()));
        std::fs::write(&plain, "#!/bin/sh\n").unwrap();
        let plain = plain.display().to_string();
        let err = check("--exec", &plain).unwrap_err();
        let _ = std::fs::remove_file(&plain);
        assert!(err.ends_with(&format!("`{plain}` is not executable")), "{err}");
        assert_eq!(check("--exec", "/bin/sh -c true"), Ok(()));
        let err = check("--exec", "echo 'unclosed").unwrap_err();
        assert!(err.starts_with("the --exec command `echo 'unclosed` is not valid sh: "), "{err}");
        // Computed: not looked for.
        assert_eq!(check("--exec", "$NOSUCH_VARIABLE_HERE x"), Ok(()));
    }
}
