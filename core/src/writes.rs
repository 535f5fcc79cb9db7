//! What a [`Verdict::Commit`](crate::Verdict::Commit) writes with its entry's ack: the
//! handler's [`Writes`], built and checked here, where an [`Entry`](crate::Entry)'s verdict
//! can name them; how they are made in one fenced step is [`commit`](crate::commit)'s.

use std::time::Duration;

use bytes::Bytes;

use crate::cluster::key_slot;

/// The most field/value pairs one write may carry: the script passes them on with Lua's
/// `unpack`, which fails past about 8,000 values — after the entry's other writes.
pub const MAX_FIELDS_PER_WRITE: usize = 1000;

/// The writes a [`Verdict::Commit`](crate::Verdict::Commit) makes with its entry's ack, in
/// order. Built with the methods below; an empty one is a fenced ack (acked only if the
/// entry is still this consumer's, with the same delivery).
///
/// In a Redis Cluster every key must hash to the consumed stream's slot (share its hash tag:
/// `{orders}` and `{orders}:totals`): a commit with a key elsewhere is refused, never
/// written separately.
///
/// ```
/// use pelican::{Trim, Verdict, Writes};
/// let verdict = Verdict::Commit(
///     Writes::new()
///         .add_trimmed("{orders}:priced", [("order", "17"), ("total", "9.90")], Trim::MaxLen(100_000))
///         .incr_by("{orders}:count", 1),
/// );
/// # let _ = verdict;
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Writes {
    writes: Vec<Write>,
}

/// One write of a [`Writes`]. A small set, chosen for what a stage writes: entries for the
/// next stage (`XADD`), a view of the latest state (`HSET`, `SET`), counts (`INCRBY`, and
/// per-key counts in one hash: `HINCRBY`), and clearing (`DEL`). Each can be checked to
/// succeed before anything is written.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Write {
    /// `XADD key [MAXLEN|MINID ~ n] * field value …`: an entry (its id chosen by the
    /// server) in a stream.
    Add {
        /// The stream.
        key: Bytes,
        /// The entry's fields, at least one.
        fields: Vec<(Bytes, Bytes)>,
        /// Trimming as it is added.
        trim: Option<Trim>,
    },
    /// `HSET key field value …`.
    HashSet {
        /// The hash.
        key: Bytes,
        /// Fields to set, at least one.
        fields: Vec<(Bytes, Bytes)>,
    },
    /// `INCRBY key by`: the key must hold an integer (or nothing: 0).
    IncrBy {
        /// The counter.
        key: Bytes,
        /// How much to add (may be negative).
        by: i64,
    },
    /// `HINCRBY key field by`: the key must hold a hash (or nothing: made), the field an
    /// integer (or nothing: 0).
    HashIncrBy {
        /// The hash.
        key: Bytes,
        /// The counter's field.
        field: Bytes,
        /// How much to add (may be negative).
        by: i64,
    },
    /// `SET key value [PX ms]`.
    Set {
        /// The key.
        key: Bytes,
        /// Its value.
        value: Bytes,
        /// Expiring after this long (at least 1 ms), or never.
        ttl: Option<Duration>,
    },
    /// `DEL key`.
    Delete {
        /// The key.
        key: Bytes,
    },
}

/// How an [`Write::Add`] trims its stream: approximately (`~`), as `XADD` does cheaply.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Trim {
    /// `MAXLEN ~ n`: keep about the newest `n` entries.
    MaxLen(u64),
    /// `MINID ~ id`: drop entries older than `id` (`ms` or `ms-seq`).
    MinId(Bytes),
}

fn pairs<K: AsRef<[u8]>, V: AsRef<[u8]>>(fields: impl IntoIterator<Item = (K, V)>) -> Vec<(Bytes, Bytes)> {
    fields
        .into_iter()
        .map(|(k, v)| (Bytes::copy_from_slice(k.as_ref()), Bytes::copy_from_slice(v.as_ref())))
        .collect()
}

fn key(key: impl AsRef<[u8]>) -> Bytes {
    Bytes::copy_from_slice(key.as_ref())
}

impl Writes {
    /// No writes (a fenced ack, until some are added).
    pub fn new() -> Writes {
        Writes::default()
    }

    /// Adds an entry to the stream `stream`.
    #[must_use]
    pub fn add<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        self,
        stream: impl AsRef<[u8]>,
        fields: impl IntoIterator<Item = (K, V)>,
    ) -> Writes {
        self.with(Write::Add { key: key(stream), fields: pairs(fields), trim: None })
    }

    /// Adds an entry to the stream `stream`, trimming it.
    #[must_use]
    pub fn add_trimmed<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        self,
        stream: impl AsRef<[u8]>,
        fields: impl IntoIterator<Item = (K, V)>,
        trim: Trim,
    ) -> Writes {
        self.with(Write::Add { key: key(stream), fields: pairs(fields), trim: Some(trim) })
    }

    /// Sets fields of the hash `hash`.
    #[must_use]
    pub fn hset<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        self,
        hash: impl AsRef<[u8]>,
        fields: impl IntoIterator<Item = (K, V)>,
    ) -> Writes {
        self.with(Write::HashSet { key: key(hash), fields: pairs(fields) })
    }

    /// Adds `by` to the integer at `counter`.
    #[must_use]
    pub fn incr_by(self, counter: impl AsRef<[u8]>, by: i64) -> Writes {
        self.with(Write::IncrBy { key: key(counter), by })
    }

    /// Adds `by` to the integer in `field` of the hash `hash` (a count per key in one hash:
    /// `hincr_by("{orders}:per-customer", customer, 1)`).
    #[must_use]
    pub fn hincr_by(self, hash: impl AsRef<[u8]>, field: impl AsRef<[u8]>, by: i64) -> Writes {
        self.with(Write::HashIncrBy { key: key(hash), field: key(field), by })
    }

    /// Sets `name` to `value`.
    #[must_use]
    pub fn set(self, name: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Writes {
        self.with(Write::Set { key: key(name), value: key(value), ttl: None })
    }

    /// Sets `name` to `value`, expiring after `ttl`.
    #[must_use]
    pub fn set_expiring(self, name: impl AsRef<[u8]>, value: impl AsRef<[u8]>, ttl: Duration) -> Writes {
        self.with(Write::Set { key: key(name), value: key(value), ttl: Some(ttl) })
    }

    /// Deletes `name`.
    #[must_use]
    pub fn delete(self, name: impl AsRef<[u8]>) -> Writes {
        self.with(Write::Delete { key: key(name) })
    }

    /// Adds a write.
    #[must_use]
    pub fn with(mut self, write: Write) -> Writes {
        self.writes.push(write);
        self
    }

    /// Adds a write, in place.
    pub fn push(&mut self, write: Write) {
        self.writes.push(write);
    }

    /// The writes, in order.
    pub fn iter(&self) -> std::slice::Iter<'_, Write> {
        self.writes.iter()
    }

    /// How many writes.
    pub fn len(&self) -> usize {
        self.writes.len()
    }

    /// True if there are none.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    /// Why these writes cannot be committed as they are, if they cannot: a write without
    /// fields (or with more than [`MAX_FIELDS_PER_WRITE`]), a `MINID` that is not an id, a
    /// zero `ttl`, an empty key, or (`slot`: the consumed stream's, in a cluster) a key in
    /// another hash slot.
    pub fn check(&self, slot: Option<u16>) -> Result<(), String> {
        for write in &self.writes {
            let key = write.key();
            if key.is_empty() {
                return Err(format!("{} with an empty key", write.command()));
            }
            if let Some(slot) = slot.filter(|s| key_slot(key) != *s) {
                return Err(format!(
                    "{} {}: the key hashes to slot {}, not the consumed stream's slot {slot} \
                     (give it the stream's hash tag, e.g. {{tag}}:out)",
                    write.command(),
                    key.escape_ascii(),
                    key_slot(key),
                ));
            }
            match write {
                Write::Add { fields, .. } | Write::HashSet { fields, .. } if fields.is_empty() => {
                    return Err(format!("{} {}: no fields", write.command(), key.escape_ascii()));
                }
                Write::Add { fields, .. } | Write::HashSet { fields, .. }
                    if fields.len() > MAX_FIELDS_PER_WRITE =>
                {
                    return Err(format!(
                        "{} {}: {} fields, more than {MAX_FIELDS_PER_WRITE}",
                        write.command(),
                        key.escape_ascii(),
                        fields.len()
                    ));
                }
                Write::Add { trim: Some(Trim::MinId(id)), .. } if !is_id(id) => {
                    return Err(format!(
                        "XADD {} MINID {}: not a stream id",
                        key.escape_ascii(),
                        id.escape_ascii()
                    ));
                }
                Write::Set { ttl: Some(ttl), .. } if ttl.as_millis() == 0 => {
                    return Err(format!("SET {}: an expiry under 1 ms", key.escape_ascii()));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

impl<'a> IntoIterator for &'a Writes {
    type Item = &'a Write;
    type IntoIter = std::slice::Iter<'a, Write>;
    fn into_iter(self) -> Self::IntoIter {
        self.writes.iter()
    }
}

impl Write {
    /// The key written.
    pub fn key(&self) -> &Bytes {
        match self {
            Write::Add { key, .. }
            | Write::HashSet { key, .. }
            | Write::IncrBy { key, .. }
            | Write::HashIncrBy { key, .. }
            | Write::Set { key, .. }
            | Write::Delete { key } => key,
        }
    }

    /// The whole command, as a client sends it on its own, outside a commit (nothing checked
    /// first): `XADD key [MAXLEN|MINID ~ n] * field value …`, `HSET key field value …`,
    /// `INCRBY key by`, `HINCRBY key field by`, `SET key value [PX ms]`, `DEL key`. For
    /// what a commit is not: a test's model of a handler that writes its output itself.
    pub fn args(&self) -> Vec<Bytes> {
        let word = Bytes::from_static;
        let number = |n: i64| Bytes::from(n.to_string());
        let mut args = vec![word(self.command().as_bytes()), self.key().clone()];
        let pairs = |args: &mut Vec<Bytes>, fields: &[(Bytes, Bytes)]| {
            for (f, v) in fields {
                args.extend([f.clone(), v.clone()]);
            }
        };
        match self {
            Write::Add { fields, trim, .. } => {
                match trim {
                    Some(Trim::MaxLen(n)) => {
                        args.extend([word(b"MAXLEN"), word(b"~"), Bytes::from(n.to_string())])
                    }
                    Some(Trim::MinId(id)) => args.extend([word(b"MINID"), word(b"~"), id.clone()]),
                    None => {}
                }
                args.push(word(b"*"));
                pairs(&mut args, fields);
            }
            Write::HashSet { fields, .. } => pairs(&mut args, fields),
            Write::IncrBy { by, .. } => args.push(number(*by)),
            Write::HashIncrBy { field, by, .. } => args.extend([field.clone(), number(*by)]),
            Write::Set { value, ttl, .. } => {
                args.push(value.clone());
                if let Some(ttl) = ttl {
                    let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
                    args.extend([word(b"PX"), Bytes::from(ms.to_string())]);
                }
            }
            Write::Delete { .. } => {}
        }
        args
    }

    /// The command it becomes: `XADD`, `HSET`, `INCRBY`, `HINCRBY`, `SET` or `DEL`.
    pub fn command(&self) -> &'static str {
        match self {
            Write::Add { .. } => "XADD",
            Write::HashSet { .. } => "HSET",
            Write::IncrBy { .. } => "INCRBY",
            Write::HashIncrBy { .. } => "HINCRBY",
            Write::Set { .. } => "SET",
            Write::Delete { .. } => "DEL",
        }
    }
}

/// `ms` or `ms-seq`, both decimal.
fn is_id(id: &[u8]) -> bool {
    let digits = |s: &[u8]| !s.is_empty() && s.len() <= 20 && s.iter().all(u8::is_ascii_digit);
    match id.iter().position(|b| *b == b'-') {
        Some(dash) => digits(&id[..dash]) && digits(&id[dash + 1..]),
        None => digits(id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_checked_before_they_are_sent() {
        let ok = Writes::new()
            .add("{s}:out", [("k", "v")])
            .incr_by("{s}:n", -3)
            .hincr_by("{s}:per", "k", 2)
            .delete("{s}:x");
        assert_eq!(ok.len(), 4);
        assert_eq!(ok.iter().map(Write::command).collect::<Vec<_>>(), ["XADD", "INCRBY", "HINCRBY", "DEL"]);
        assert_eq!(ok.check(None), Ok(()));
        let slot = key_slot(b"{s}");
        assert_eq!(ok.check(Some(slot)), Ok(()));
        let far = Writes::new().set("elsewhere", "1");
        assert!(far.check(None).is_ok());
        assert!(far.check(Some(slot)).unwrap_err().contains("not the consumed stream's slot"));
        let none: [(&str, &str); 0] = [];
        assert!(Writes::new().add("o", none).check(None).unwrap_err().contains("no fields"));
        let bad = Writes::new().add_trimmed("o", [("k", "v")], Trim::MinId(Bytes::from_static(b"12-x")));
        assert!(bad.check(None).unwrap_err().contains("not a stream id"));
        let fine = Writes::new().add_trimmed("o", [("k", "v")], Trim::MinId(Bytes::from_static(b"12-3")));
        assert!(fine.check(None).is_ok());
        assert!(Writes::new().set_expiring("k", "v", Duration::from_micros(10)).check(None).is_err());
        assert!(Writes::new().delete("").check(None).is_err());
        assert!(Writes::new().hincr_by("", "f", 1).check(None).is_err());
        assert!(Writes::new().hincr_by("far", "f", 1).check(Some(slot)).is_err());
    }

    #[test]
    fn each_write_is_a_command_of_its_own() {
        let shown =
            |w: &Write| w.args().iter().map(|a| String::from_utf8_lossy(a).into_owned()).collect::<Vec<_>>();
        let writes = Writes::new()
            .add_trimmed("o", [("k", "v")], Trim::MaxLen(10))
            .add_trimmed("o", [("k", "v")], Trim::MinId(Bytes::from_static(b"5-0")))
            .add("o", [("a", "1"), ("b", "2")])
            .hset("h", [("f", "v")])
            .incr_by("n", -2)
            .hincr_by("h", "f", 3)
            .set("k", "v")
            .set_expiring("k", "v", Duration::from_secs(2))
            .delete("k");
        let all: Vec<Vec<String>> = writes.iter().map(shown).collect();
        let expected: [&[&str]; 9] = [
            &["XADD", "o", "MAXLEN", "~", "10", "*", "k", "v"],
            &["XADD", "o", "MINID", "~", "5-0", "*", "k", "v"],
            &["XADD", "o", "*", "a", "1", "b", "2"],
            &["HSET", "h", "f", "v"],
            &["INCRBY", "n", "-2"],
            &["HINCRBY", "h", "f", "3"],
            &["SET", "k", "v"],
            &["SET", "k", "v", "PX", "2000"],
            &["DEL", "k"],
        ];
        assert_eq!(all, expected.map(|c| c.iter().map(|a| a.to_string()).collect::<Vec<_>>()));
    }
}
