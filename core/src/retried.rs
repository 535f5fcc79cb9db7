//! The ids this consumer lately left for another try (a `Retry` verdict): when a reclaim
//! brings one back, it is this consumer's own retry, not a peer's entry taken over, and is
//! not told as such. Bounded: past [`KEPT`] the oldest are forgotten (then told, harmlessly).

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;

/// How many ids are remembered.
const KEPT: usize = 1024;

/// Ids given `Retry`, oldest first, each with the number of its noting: an id taken and
/// noted again is not forgotten with its older place in the queue.
#[derive(Debug, Default)]
pub(crate) struct Retried {
    order: VecDeque<(u64, Bytes)>,
    ids: HashMap<Bytes, u64>,
    noted: u64,
}

impl Retried {
    /// Remembers `id`, forgetting the oldest past [`KEPT`].
    pub fn note(&mut self, id: Bytes) {
        if self.ids.contains_key(&id[..]) {
            return;
        }
        if self.order.len() == KEPT {
            if let Some((n, old)) = self.order.pop_front() {
                if self.ids.get(&old[..]) == Some(&n) {
                    self.ids.remove(&old[..]);
                }
            }
        }
        self.noted += 1;
        self.order.push_back((self.noted, id.clone()));
        self.ids.insert(id, self.noted);
    }

    /// Whether `id` was given `Retry` by this consumer lately (and is remembered still).
    pub fn contains(&self, id: &[u8]) -> bool {
        self.ids.contains_key(id)
    }

    /// Whether `id` was given `Retry` by this consumer (then forgotten: it is back).
    pub fn take(&mut self, id: &[u8]) -> bool {
        // Left in `order`: its place goes when its turn comes, a no-op then.
        self.ids.remove(id).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_a_bounded_number() {
        let mut r = Retried::default();
        r.note(Bytes::from("1-0"));
        r.note(Bytes::from("1-0"));
        assert!(r.take(b"1-0"));
        assert!(!r.take(b"1-0"), "taken once");
        for i in 0..=KEPT {
            r.note(Bytes::from(format!("{i}-0")));
        }
        assert!(!r.take(b"0-0"), "the oldest forgotten");
        assert!(r.take(b"1-0") && r.take(format!("{KEPT}-0").as_bytes()));
    }
}
