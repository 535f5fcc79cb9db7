//! The streams read, changed while running: added (drained, their groups made) and removed
//! (their buffered entries given back).

use super::*;

impl Consumer {
    /// The keys of the streams read, in the order they were added ([`Config::stream`] first).
    pub fn streams(&self) -> impl Iterator<Item = &Bytes> + '_ {
        self.streams.iter().filter(|s| s.active).map(|s| &s.key)
    }

    /// Makes these changes in order ([`add_stream`](Self::add_stream),
    /// [`remove_stream`](Self::remove_stream)).
    pub fn change_streams(&mut self, changes: impl IntoIterator<Item = crate::StreamChange>) {
        for change in changes {
            match change {
                crate::StreamChange::Add(key) => self.add_stream(key),
                crate::StreamChange::Remove(key) => self.remove_stream(&key),
            };
        }
    }

    /// `key`'s part of the counts ([`Stats`] are the totals), if it is (or was) read.
    pub fn stream_stats(&self, key: &[u8]) -> Option<&crate::stats::StreamStats> {
        self.index.get(key).map(|&s| &self.streams[s as usize].stats)
    }

    /// Reads `key` too, on the same connection: from the next read on (at once if parked:
    /// the parked read is not cut short, the stream joins within a beat), after draining its
    /// own pending entries, with its group created first where [`Config::create_group`] says
    /// so. Returns false, doing nothing, if it is read already, the consumer has
    /// [`MAX_STREAMS`] streams, or it is stopping. In a cluster every stream must hash to one
    /// slot (give them a hash tag: `{tenants}:a`); one that does not fails the consumer with
    /// [`Error::CrossSlot`] at its first read.
    pub fn add_stream(&mut self, key: impl Into<Bytes>) -> bool {
        let key = key.into();
        if self.stop != Stop::Running || !self.is_live() {
            return false;
        }
        let s = match self.index.get(&key[..]) {
            Some(&s) if self.streams[s as usize].active => return false,
            Some(&s) => s as usize,
            None if self.streams.iter().filter(|s| s.active).count() >= MAX_STREAMS => return false,
            None => {
                self.streams.push(Stream::new(key.clone()));
                self.index.insert(key, (self.streams.len() - 1) as u32);
                self.streams.len() - 1
            }
        };
        self.streams[s].active = true;
        self.rebuild_active();
        let stream = &mut self.streams[s];
        stream.restart_drain();
        stream.claim_at = None;
        stream.added = true;
        // Made before its drain, which goes out once no read is parked (the answer to a
        // command sent now could wait a beat behind one).
        stream.make_group = self.config.create_group.is_some();
        if let (true, Some(now)) = (self.ready(), self.last_now) {
            self.pump(now);
        }
        true
    }

    /// Stops reading `key`: its entries buffered are given back (as at a stop), those in hand
    /// are settled as usual and what they earn is sent. Returns false if it is not read.
    /// Removing every stream leaves the consumer connected and idle, reading nothing.
    pub fn remove_stream(&mut self, key: &[u8]) -> bool {
        let Some(&s) = self.index.get(key) else { return false };
        let stream = &mut self.streams[s as usize];
        if !stream.active {
            return false;
        }
        stream.active = false;
        let (kept, dropped): (VecDeque<Buffered>, VecDeque<Buffered>) =
            self.buffer.drain(..).partition(|b| b.entry.stream != s);
        self.buffer = kept;
        stream.returns.extend(dropped);
        self.moves_owed = true;
        self.rebuild_active();
        if let Some(now) = self.last_now {
            self.pump(now);
        }
        true
    }
}
