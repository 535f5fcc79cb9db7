//! `cli/README.md` documents every flag: each one `pelican <command> --help` lists is named
//! in that command's section of the README (`## \`consume\``…), or in its opening part
//! (before the first command's section: the server's flags every command shares).

mod support;

use support::run;

/// The long flags a `--help` lists (`--stream`, `--url`…), in order.
fn flags(help: &str) -> Vec<String> {
    let mut flags = Vec::new();
    for line in help.lines() {
        // An option's line, not a description's (indented deeper, and may start with a flag).
        let indent = line.len() - line.trim_start().len();
        if indent > 6 {
            continue;
        }
        let line = line.trim_start();
        let line = line.strip_prefix("-h, ").or_else(|| line.strip_prefix("-V, ")).unwrap_or(line);
        if let Some(rest) = line.strip_prefix("--") {
            let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
            flags.push(format!("--{name}"));
        }
    }
    flags
}

/// Whether `text` names `flag` as a whole (`--stream` is not named by `--stream-pattern`).
fn names(text: &str, flag: &str) -> bool {
    text.match_indices(flag).any(|(at, _)| {
        let next = text[at + flag.len()..].chars().next();
        !next.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
    })
}

#[test]
fn the_readme_lists_every_flag_of_every_command() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let opening = &readme[..readme.find("\n## `").expect("a command's section")];
    let (status, help, _) = run(&["--help"]);
    assert!(status.success());
    let commands: Vec<String> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect();
    assert_eq!(commands, ["consume", "pending", "produce", "retire", "dead-letters", "demo"]);
    let mut missing = Vec::new();
    for command in &commands {
        let heading = format!("\n## `{command}`");
        let start = readme.find(&heading).unwrap_or_else(|| panic!("no {heading:?} section"));
        let section = &readme[start + 1..];
        let section = &section[..section.find("\n## ").unwrap_or(section.len())];
        let (status, help, err) = run(&[command, "--help"]);
        assert!(status.success(), "{err}");
        let listed = flags(&help);
        assert!(listed.len() > 2, "{command}: {listed:?}");
        for flag in listed {
            if !names(section, &flag) && !names(opening, &flag) {
                missing.push(format!("{command} {flag}"));
            }
        }
    }
    assert!(missing.is_empty(), "flags --help lists that cli/README.md does not: {missing:?}");
}
