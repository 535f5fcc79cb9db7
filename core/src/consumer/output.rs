//! Output: bytes to write, the next event (a notice, an entry handed out when there is room
//! for it, `Stopped`), and the next deadline.

use super::*;

impl Consumer {
    /// Bytes to write to the connection, if any. Write them, then call
    /// [`advance_transmit`](Self::advance_transmit) with how many were written.
    #[must_use]
    pub fn poll_transmit(&self) -> Option<&[u8]> {
        (!self.out.is_empty()).then_some(&self.out[..])
    }

    /// `written` bytes of [`poll_transmit`](Self::poll_transmit) reached the socket.
    pub fn advance_transmit(&mut self, written: usize) {
        let n = written.min(self.out.len());
        let _ = self.out.split_to(n);
        self.tracked_upto = self.tracked_upto.saturating_sub(n);
    }

    /// The next event: a notice, an entry to handle (only while fewer than
    /// [`Config::concurrency`] are in hand, none of its key with [`Config::order_by`], and its
    /// lease fresh), or `Stopped`.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        if let Some(notice) = self.notices.pop_front() {
            return Some(Event::Notice(notice));
        }
        if self.failed.is_some() {
            return None;
        }
        if self.stop == (Stop::Stopped { reported: false }) {
            self.stop = Stop::Stopped { reported: true };
            return Some(Event::Stopped);
        }
        if self.stop != Stop::Running || !self.room() {
            return None;
        }
        if self.in_flight.leasing() {
            return None; // whether they are still ours is being asked
        }
        let now = self.last_now?;
        let i = self.next_handout()?;
        if now >= self.buffer[i].due {
            return None; // renewed first (the next pump or timeout)
        }
        let Buffered { mut entry, read_at, key, .. } =
            if i == 0 { self.buffer.pop_front()? } else { self.buffer.remove(i)? };
        let stream = &mut self.streams[entry.stream as usize].stats;
        match entry.source {
            Source::Pending => {
                (self.stats.drained, stream.drained) = (self.stats.drained + 1, stream.drained + 1)
            }
            Source::Claimed => {
                (self.stats.claimed, stream.claimed) = (self.stats.claimed + 1, stream.claimed + 1)
            }
            Source::New => (self.stats.new, stream.new) = (self.stats.new + 1, stream.new + 1),
        }
        if let Some(key) = key {
            self.keys_in_hand.insert(key);
        }
        entry.stream_key = self.streams[entry.stream as usize].key.clone();
        let (raw, id) = entry.id_parts();
        let id = self.held.hold(raw, id);
        self.streams[entry.stream as usize].in_hand += 1;
        self.in_hand.push(InHand {
            stream: entry.stream,
            id,
            key,
            deliveries: entry.deliveries,
            read_at: Some(read_at),
            handed_at: now,
        });
        if self.room() && self.starved() {
            // Slots are left and nothing to fill them: read on (with the entries now in hand,
            // a parked read blocks only briefly). Written by the driver's next transmit.
            self.pump(now);
        }
        Some(Event::Entry(entry))
    }

    /// Where in the buffer the next entry to hand out is: the first whose key is not in hand.
    #[inline]
    pub(super) fn next_handout(&self) -> Option<usize> {
        if self.keys_in_hand.is_empty() && (self.in_hand.is_empty() || self.streams.len() == 1) {
            return (!self.buffer.is_empty()).then_some(0);
        }
        // With many streams, each its own `concurrency` in hand.
        let concurrency = self.config.concurrency;
        let room = |b: &Buffered| {
            self.streams.len() == 1 || self.streams[b.entry.stream as usize].in_hand < concurrency
        };
        self.buffer.iter().position(|b| b.key.map_or(true, |k| !self.keys_in_hand.contains(&k)) && room(b))
    }

    /// Whether another entry may be in hand: fewer than [`Config::concurrency`] are, of some
    /// stream.
    pub(super) fn room(&self) -> bool {
        let concurrency = self.config.concurrency;
        if self.config.most_in_hand.is_some_and(|most| self.in_hand.len() >= most as usize) {
            return false;
        }
        match self.streams.len() {
            1 => self.in_hand.len() < concurrency as usize,
            _ => self.streams.iter().any(|s| s.active && s.in_hand < concurrency),
        }
    }

    /// Nothing buffered can be handed out, and what is buffered (entries whose keys are in
    /// hand) is less than a read: time to read more.
    pub(super) fn starved(&self) -> bool {
        self.next_handout().is_none() && self.buffer.len() < self.pace.count().0 as usize
    }

    /// [`poll_timeout`](Self::poll_timeout) as a wait from `now`, at least 1 ms: what a
    /// blocking socket's read timeout takes (`set_read_timeout` refuses zero). A deadline
    /// already past — which `poll_timeout` often is, when a call brought work due at once —
    /// gives 1 ms: wait no longer, then call [`handle_timeout`](Self::handle_timeout) (or
    /// connect, if [`connect_due`](Self::connect_due)). `None`: no deadline; wait for input.
    #[must_use]
    pub fn timeout_from(&self, now: Instant) -> Option<Duration> {
        self.poll_timeout().map(|at| at.saturating_duration_since(now).max(Duration::from_millis(1)))
    }

    /// The next deadline: while connected, the earliest of a reply overdue, an ack to write
    /// and a lease to renew; while disconnected, when to connect again. `None`: no deadline
    /// (finished, or waiting on the application only). It may be in the past (work due at
    /// once): see [`timeout_from`](Self::timeout_from).
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if !self.is_live() {
            return None;
        }
        match self.link {
            Link::Up => {
                let replies = self.in_flight.iter().map(|c| c.deadline).min();
                // Neither acks nor renewals go behind a parked read: they wait for its answer.
                let parked = self.parked_read_in_flight();
                let acks = self.ack_due.filter(|_| !parked);
                let leases = self.lease_due().filter(|_| !parked);
                let releases = match self.releasing && !parked {
                    true => self.streams.iter().filter_map(|s| s.releases.next_due()).min(),
                    false => None,
                };
                let twins = self.twins.again_at().filter(|_| self.checks_twins());
                let parks = self.parks_due().filter(|_| !parked);
                [replies, acks, leases, releases, twins, parks].into_iter().flatten().min()
            }
            Link::Down { retry_at } => Some(retry_at),
            Link::Fresh | Link::Closed => None,
        }
    }
}
