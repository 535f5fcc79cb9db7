//! Leases: the entries buffered and in hand renewed (owner-checked `XCLAIM … JUSTID`) before
//! a peer's reclaim may take them.

use super::*;

impl Consumer {
    /// When the first lease comes due, unless renewals are already in flight.
    pub(super) fn lease_due(&self) -> Option<Instant> {
        if self.in_flight.leasing() {
            return None;
        }
        self.lease_floor.map(|at| at + self.config.lease_threshold())
    }

    /// When the entries buffered or in hand were read or renewed, the oldest: worked out
    /// anew (the whole buffer) only when a renewal was due or answered.
    pub(super) fn oldest_read(&self) -> Option<Instant> {
        self.buffer.iter().map(|b| b.read_at).chain(self.in_hand.iter().filter_map(|h| h.read_at)).min()
    }

    /// Renews every buffered or in-hand entry whose lease has run out, unless renewals are
    /// already in flight.
    pub(super) fn renew_leases(&mut self, now: Instant) {
        // Never behind a parked read, which would hold the answer (`park_for` keeps it short).
        if !self.ready() || self.in_flight.leasing() || self.in_flight.parked() {
            return;
        }
        let lease = self.config.lease_threshold();
        let elapsed = |at: Instant| now.saturating_duration_since(at);
        let due: Vec<(u32, Duration, Bytes)> = self
            .buffer
            .iter()
            .filter(|b| elapsed(b.read_at) >= lease)
            .map(|b| (b.entry.stream, elapsed(b.read_at), b.entry.id_bytes()))
            .chain(
                self.in_hand
                    .iter()
                    .filter_map(|h| Some((h.stream, elapsed(h.read_at?), self.held.to_bytes(h.id)))),
            )
            .filter(|(_, e, _)| *e >= lease)
            .collect();
        if due.is_empty() {
            // Woken by a floor that an entry gone since had set: the floor as it is now.
            self.lease_floor = self.oldest_read();
        }
        self.send_renewals(due, now);
    }

    /// Owner-checked `XCLAIM … JUSTID`s for these entries (and how long each was held), a
    /// stream at a time.
    pub(super) fn send_renewals(&mut self, mut due: Vec<(u32, Duration, Bytes)>, now: Instant) {
        due.sort_by_key(|(s, ..)| *s);
        let mut rest = &due[..];
        while let Some((s, ..)) = rest.first() {
            let n = rest.iter().take_while(|(t, ..)| t == s).count();
            let ids = rest[..n].iter().map(|(_, held, id)| (*held, id.clone())).collect();
            for renewal in lease::renewals(ids, self.config.min_idle) {
                commands::lease(
                    &mut self.out,
                    &self.config,
                    &self.streams[*s as usize].key,
                    renewal.min_idle_ms,
                    &renewal.ids,
                );
                self.track(Sent::Lease(*s, renewal.ids), now);
            }
            rest = &rest[n..];
        }
    }

    /// On a new connection, the leases of the entries in hand are renewed at once rather
    /// than when due: a server restarted from its append-only file has forgotten the
    /// delivery time the drain set (it never writes it), so an entry looks idle since an
    /// older delivery and a peer's reclaim could take it before the renewal came due.
    pub(super) fn renew_in_hand(&mut self, now: Instant) {
        let due: Vec<(u32, Duration, Bytes)> = self
            .in_hand
            .iter()
            .filter_map(|h| {
                Some((h.stream, now.saturating_duration_since(h.read_at?), self.held.to_bytes(h.id)))
            })
            .collect();
        self.send_renewals(due, now);
    }

    /// A lease renewal answered: `kept` are still ours (their idle time now reset); the rest
    /// of `asked` were taken by a peer (or deleted).
    pub(super) fn on_lease(&mut self, s: u32, asked: Vec<Bytes>, kept: Vec<Bytes>, now: Instant) {
        let mut kept = kept.into_iter().peekable();
        let held = &self.held;
        for id in asked {
            let is = |b: &Buffered| b.entry.stream == s && b.entry.id() == &id[..];
            let holds = |h: &&mut InHand| h.stream == s && held.id(h.id) == &id[..];
            if kept.next_if_eq(&id).is_some() {
                self.stats.leases_renewed += 1;
                if let Some(b) = self.buffer.iter_mut().find(|b| is(b)) {
                    b.read_at = now;
                    b.due = now + self.config.lease_threshold();
                } else if let Some(h) = self.in_hand.iter_mut().find(holds) {
                    h.read_at = Some(now);
                }
                continue;
            }
            if let Some(i) = self.buffer.iter().position(is) {
                self.buffer.remove(i);
                self.stats.leases_lost += 1;
                self.streams[s as usize].stats.leases_lost += 1;
                self.notices.push_back(Notice::LeaseLost { id, in_hand: false });
            } else if let Some(h) = self.in_hand.iter_mut().find(holds) {
                h.read_at = None;
                self.stats.leases_lost += 1;
                self.streams[s as usize].stats.leases_lost += 1;
                self.notices.push_back(Notice::LeaseLost { id, in_hand: true });
            }
        }
        self.lease_floor = self.oldest_read();
    }

    pub(super) fn lost(&mut self, s: u32, id: Bytes, in_hand: bool) {
        self.stats.leases_lost += 1;
        self.streams[s as usize].stats.leases_lost += 1;
        self.notices.push_back(Notice::LeaseLost { id, in_hand });
    }
}
