//! Streams added to and removed from a running consumer by someone else — another thread, a
//! task, an admin page — and made at the consumer's next turn ([`StreamChanges`]). What the
//! transports' `StreamSet` keeps under its lock.

use std::collections::HashSet;

use bytes::Bytes;

use crate::config::MAX_STREAMS;
use crate::consumer::Consumer;
use crate::stream::StreamChange;

/// Changes asked of a consumer's streams, not yet made, each answered at once: checked
/// against what the consumer will read once every change asked before it is made (its
/// streams at the last [`apply`](Self::apply), with the changes asked since), and refused as
/// the consumer would refuse it. A driver keeps one beside its consumer (behind a lock if
/// others ask from other threads) and applies it at each turn.
#[derive(Debug)]
pub struct StreamChanges {
    asked: Vec<StreamChange>,
    /// The streams read once every change asked is made.
    reading: HashSet<Bytes>,
    /// False once the consumer refused an add it had room for: it is stopping, or failed.
    open: bool,
}

impl StreamChanges {
    /// Nothing asked; `consumer`'s streams read.
    pub fn new(consumer: &Consumer) -> StreamChanges {
        StreamChanges { asked: Vec::new(), reading: consumer.streams().cloned().collect(), open: true }
    }

    /// Asks `key` added: true if the consumer will read it from its next turn on; false,
    /// changing nothing, if it is read already (or asked to be), [`MAX_STREAMS`] are read
    /// (counting those asked), or the consumer refused an add before (it is stopping, or
    /// failed).
    pub fn add(&mut self, key: impl Into<Bytes>) -> bool {
        let key = key.into();
        if !self.open || self.reading.len() >= MAX_STREAMS || !self.reading.insert(key.clone()) {
            return false;
        }
        self.asked.push(StreamChange::Add(key));
        true
    }

    /// Asks `key` removed: true if it was read (or asked to be), and is read no more from
    /// the consumer's next turn.
    pub fn remove(&mut self, key: impl Into<Bytes>) -> bool {
        let key = key.into();
        if !self.reading.remove(&key) {
            return false;
        }
        self.asked.push(StreamChange::Remove(key));
        true
    }

    /// True if nothing is asked.
    pub fn is_empty(&self) -> bool {
        self.asked.is_empty()
    }

    /// Makes the changes asked on `consumer` ([`Consumer::add_stream`],
    /// [`Consumer::remove_stream`]), and takes what it reads as the ground for the next asks.
    pub fn apply(&mut self, consumer: &mut Consumer) {
        for change in std::mem::take(&mut self.asked) {
            match change {
                // Checked when asked: a refusal now means the consumer is stopping, or failed.
                StreamChange::Add(key) => self.open &= consumer.add_stream(key),
                StreamChange::Remove(key) => drop(consumer.remove_stream(&key)),
            }
        }
        self.reading.clear();
        self.reading.extend(consumer.streams().cloned());
    }
}
