//! Names (streams, groups, consumers) are bytes: the command line gives them as OS strings,
//! any bytes at all, and they are shown escaped where they are not plain text.

use std::borrow::Cow;
use std::fmt::Write as _;

/// `name` for a terminal or a message: as it is when it is UTF-8 without control
/// characters; else escaped: a byte that is not UTF-8 as `\xNN`, a control character as
/// Rust escapes it (`\n`, `\u{1b}`), `\` as `\\`.
pub fn show(name: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(name) {
        Ok(text) if !text.chars().any(char::is_control) => Cow::Borrowed(text),
        _ => {
            let mut out = String::with_capacity(name.len() + 8);
            for chunk in name.utf8_chunks() {
                for c in chunk.valid().chars() {
                    if c.is_control() || c == '\\' {
                        out.extend(c.escape_default());
                    } else {
                        out.push(c);
                    }
                }
                for byte in chunk.invalid() {
                    let _ = write!(out, "\\x{byte:02x}");
                }
            }
            Cow::Owned(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_show_as_they_are_or_escaped() {
        for (name, shown) in
            [(&b"orders"[..], "orders"), ("café {ü}".as_bytes(), "café {ü}"), (br"a\b", r"a\b")]
        {
            assert_eq!(show(name), shown);
        }
        assert_eq!(show(b"a\\b\xfe\xc3\xa9\x80"), r"a\\b\xfeé\x80");
        assert_eq!(show(b"a\n\x1b[31m"), r"a\n\u{1b}[31m");
    }
}
