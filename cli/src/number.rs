//! Whole-number flags, their limits told in words: clap's ranges print a type's limits
//! (`100..=9223372036854775807`), and a negative number would otherwise be taken for a flag
//! (`unexpected argument '-5'`). Used with `allow_negative_numbers = true`, so that `-5` is
//! the flag's value, refused by name.

/// A whole number in `MIN..=MAX`, as `T`. `MAX` at the type's (or the server's) limit is
/// not told: past it is "too large".
pub fn whole<T: TryFrom<u64>, const MIN: u64, const MAX: u64>(text: &str) -> Result<T, String> {
    let n: u64 = match text.trim().parse() {
        Ok(n) => n,
        Err(_) if text.trim().starts_with('-') && text.trim()[1..].chars().all(|c| c.is_ascii_digit()) => {
            return Err(at_least(MIN));
        }
        Err(e) if *e.kind() == std::num::IntErrorKind::PosOverflow => return Err(too_large(MAX)),
        Err(_) => return Err("not a whole number".into()),
    };
    if n < MIN {
        return Err(at_least(MIN));
    }
    if n > MAX {
        return Err(too_large(MAX));
    }
    T::try_from(n).map_err(|_| too_large(MAX))
}

fn at_least(min: u64) -> String {
    match min {
        0 => "must not be negative".into(),
        min => format!("must be at least {min}"),
    }
}

/// Past `max`: told as a number where it is one a person would set.
fn too_large(max: u64) -> String {
    match max >= i64::MAX as u64 || max == u64::from(u32::MAX) {
        true => "too large".into(),
        false => format!("must be at most {max}"),
    }
}

#[cfg(test)]
mod tests {
    use super::whole;

    #[test]
    fn limits_are_told_in_words() {
        assert_eq!(whole::<u32, 1, 4096>("16"), Ok(16));
        assert_eq!(whole::<u32, 1, 4096>("-5"), Err("must be at least 1".into()));
        assert_eq!(whole::<u32, 1, 4096>("0"), Err("must be at least 1".into()));
        assert_eq!(whole::<u32, 1, 4096>("5000"), Err("must be at most 4096".into()));
        assert_eq!(whole::<u32, 1, 4096>("1.5"), Err("not a whole number".into()));
        let max = i64::MAX as u64;
        assert_eq!(whole::<u64, 100, { i64::MAX as u64 }>("5"), Err("must be at least 100".into()));
        assert_eq!(whole::<u64, 100, { i64::MAX as u64 }>(&u64::MAX.to_string()), Err("too large".into()));
        assert_eq!(
            whole::<u64, 100, { i64::MAX as u64 }>("99999999999999999999999"),
            Err("too large".into())
        );
        assert_eq!(whole::<u64, 100, { i64::MAX as u64 }>(&max.to_string()), Ok(max));
        assert_eq!(whole::<u32, 1, { u32::MAX as u64 }>("4294967296"), Err("too large".into()));
        assert_eq!(whole::<u64, 0, 10>("-1"), Err("must not be negative".into()));
    }
}
