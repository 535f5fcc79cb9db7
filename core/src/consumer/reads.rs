//! Reading: which read comes next (a stream's drain page, a sweep, or one read of every
//! stream), and what a read's reply leaves to hand out.

use super::*;

impl Consumer {
    /// The streams read now, and their keys encoded once for every read (after a change).
    pub(super) fn rebuild_active(&mut self) {
        let active: Vec<u32> =
            (0..self.streams.len() as u32).filter(|&s| self.streams[s as usize].active).collect();
        self.keys_wire.clear();
        self.reading.clear();
        for &s in &active {
            self.reading.push(self.keys_wire.len());
            crate::encode::bulk_vec(&mut self.keys_wire, &self.streams[s as usize].key);
        }
        self.active = active.into();
        self.turn = 0;
    }

    /// True if the next read is one of new entries (no drain page or reclaim due).
    pub(super) fn next_reads_new(&self, now: Instant) -> bool {
        self.streams
            .iter()
            .filter(|s| s.active)
            .all(|s| matches!(s.next, Next::Beat) && s.claim_at.is_some_and(|at| now < at))
    }

    /// How often each stream is swept with `XAUTOCLAIM`: every beat; where reads claim
    /// (Redis 8.4+) it only sweeps the pending entries whose messages were deleted (reads
    /// with `CLAIM` leave those in place), every `min_idle`. With many streams each is swept
    /// every `min_idle` (what a peer's entry waits anyway before it may be taken), and no
    /// more than [`SWEEPS_PER_BEAT`] a beat in all: one `XAUTOCLAIM` a beat per stream would
    /// keep the server busy while all are idle.
    pub(super) fn claim_every(&self) -> Duration {
        let beat = self.config.beat;
        match (self.dialect.claim_in_read, self.streams.len()) {
            (false, 1) => beat,
            (false, n) => beat.max(self.config.min_idle).max(beat * n as u32 / SWEEPS_PER_BEAT),
            (true, n) => beat.max(self.config.min_idle).max(beat * n as u32 / SWEEPS_PER_BEAT_CLAIMING),
        }
    }

    /// Some stream's drain starts from the top: it would read again what is buffered or in
    /// hand, so it waits until the hand is empty.
    pub(super) fn drains_from_top(&self) -> bool {
        self.streams.iter().any(|s| s.active && s.drains_from_top())
    }

    /// The read that comes next: a stream's drain page, a stream's reclaim if due, or new
    /// entries of every stream drained (parked with `BLOCK` only if `park`). `count` 0 is
    /// the paced count. `None`: no stream to read.
    pub(super) fn next_read(&mut self, now: Instant, park: bool, count: u32) -> Option<Sent> {
        let count = if count == 0 { self.read_count() } else { count };
        let n = self.streams.len();
        let draining =
            (0..n).find(|&s| self.streams[s].active && matches!(self.streams[s].next, Next::Drain { .. }));
        let claiming = || {
            (0..n).map(|i| (self.turn + i) % n).find(|&s| {
                let stream = &self.streams[s];
                stream.active && stream.claim_at.map_or(true, |at| now >= at)
            })
        };
        if let Some(s) = draining {
            if std::mem::take(&mut self.streams[s].make_group) {
                self.send(Sent::CreateGroup(s as u32), now);
            }
            return Some(Sent::ReadPending { stream: s as u32, count });
        }
        if let Some(s) = claiming() {
            return Some(Sent::Claim { stream: s as u32, count });
        }
        if self.active.is_empty() {
            return None;
        }
        if !park && self.active.len() > 1 {
            // A read ahead: of the streams whose last read brought all it asked (more are
            // likely waiting there), not of every stream (each named costs the server).
            let full: Vec<u32> =
                self.active.iter().copied().filter(|&s| self.streams[s as usize].backlog).collect();
            if !full.is_empty() && full.len() < self.active.len() {
                return Some(Sent::ReadNew { count, block: None, streams: full.into(), turn: 0 });
            }
        }
        // Turned at each read where the server caps a reply, so that the cap leaves out
        // another stream each time.
        let turn = self.turn as u32;
        if self.dialect.read_size_cap {
            self.turn = (self.turn + 1) % self.active.len();
        }
        Some(Sent::ReadNew {
            count,
            block: park.then(|| self.park_for(now)),
            streams: self.active.clone(),
            turn,
        })
    }

    /// How long a parked read blocks: the beat, unless entries are in hand. Their acks and
    /// lease renewals would wait behind it, so it then blocks until the first of them is
    /// expected to be settled (by the handlers' pace); a handler not yet timed, or overdue,
    /// is given half the time it has run so far (so a long one is not polled every few ms).
    /// At least `ack_delay` (and 1 ms), at most [`PARK_IN_HAND`], the beat and a quarter of
    /// the lease.
    pub(super) fn park_for(&self, now: Instant) -> Duration {
        let Some(first) = self.in_hand.iter().map(|h| h.handed_at).min() else {
            return self.until_parks_due(now, self.config.beat);
        };
        let expected = (first + self.pace.handler_time()).saturating_duration_since(now);
        let guess = match expected.is_zero() {
            true => now.saturating_duration_since(first) / 2,
            false => expected,
        };
        let least = self.config.ack_delay.max(Duration::from_millis(1));
        let most = PARK_IN_HAND.min(self.config.beat).min(self.config.lease_threshold() / 4).max(least);
        self.until_parks_due(now, guess.clamp(least, most))
    }

    /// `block`, or less: until the next parked entry is due to be parked again or swept for
    /// (at least 1 ms), which cannot go out behind a parked read.
    fn until_parks_due(&self, now: Instant, block: Duration) -> Duration {
        match self.parks_due() {
            Some(due) => block.min(due.saturating_duration_since(now).max(Duration::from_millis(1))),
            None => block,
        }
    }

    /// The count for the next read; a smaller count than before is a notice.
    pub(super) fn read_count(&mut self) -> u32 {
        let (count, notice) = self.pace.next_count();
        if let Some(notice) = notice {
            self.stats.reads_shrunk += 1;
            self.notices.push_back(notice);
        }
        count
    }

    /// A read or claim reply, parsed in one pass straight into entries.
    ///
    /// The entries' idle time on the server began when it ran the read. A parked read
    /// answers when an entry comes: now, give or take the trip, but no later than its block
    /// after the server began it (`began_by`: when it was done with the command ahead, at the
    /// latest, or got this one; see [`Consumer::longest_run`]), so a reply read long after
    /// that (the process stood still, with the replies ahead of it unread too) counts from
    /// then and is renewed before it is handed out. Any other read answers at once: soon
    /// after it was sent, which is what its entries' leases count from even if the reply is
    /// read much later (a read ahead, answered while a handler ran); or, sent behind a `WAIT`
    /// that blocked the connection, from when that `WAIT` returned (counted from the send,
    /// the lease's owner check would ask more idle time than the entries have, and find them
    /// lost).
    pub(super) fn on_entries(
        &mut self,
        (sent, sent_at, began_by): (Sent, Instant, Instant),
        frame: Bytes,
        spans: &[Span],
        len: usize,
        now: Instant,
    ) -> Result<(), Error> {
        let read_at = match sent {
            Sent::ReadNew { block: Some(block), .. } => now.min(began_by + block),
            _ => self.waited_at.map_or(sent_at, |waited| waited.max(sent_at)),
        };
        let command = sent.command();
        let shape = |e: reply::ShapeError| Error::Shape { command, detail: e.0 };
        let protocol = self.config.protocol;
        self.backoff.reset();
        self.read_answered = true;
        match sent {
            Sent::ReadPending { stream: s, count } => {
                let (mut live, mut last) = (Vec::new(), None);
                let n = stream_reply::read(&frame, spans, protocol, Source::Pending, |_, item| {
                    last = Some(match &item {
                        Item::Entry(e) => e.id_bytes(),
                        Item::Deleted(id) => id.clone(),
                    });
                    live.extend(self.live(s, item, now));
                })
                .map_err(shape)?;
                self.pace.record_read(len, n);
                self.backlog = n >= count as usize;
                // The drain pages forward by the last id, so an entry left pending by a
                // failing handler cannot spin it; an empty page ends it.
                let (claim_every, streams) = (self.claim_every(), self.streams.len());
                let stream = &mut self.streams[s as usize];
                stream.next = match last {
                    Some(after) => Next::Drain { after },
                    None => {
                        if claim_every > self.config.beat && stream.claim_at.is_none() {
                            // Reads claim, or many streams share the sweeps: the first waits
                            // its turn, spread over the sweep's period.
                            let early = claim_every.mul_f64(f64::from(s) / streams as f64);
                            stream.claim_at = Some(now + (claim_every - early));
                        }
                        Next::Beat
                    }
                };
                // Their counts come with the `XPENDING` pipelined behind the read.
                self.stage(s, live, read_at, false);
            }
            Sent::Claim { stream: s, count } => {
                let mut live = Vec::new();
                let claim = stream_reply::autoclaim(&frame, spans, protocol, |item| {
                    live.extend(self.live(s, item, now))
                })
                .map_err(shape)?;
                let claimed = live.len() + claim.bare_nils as usize;
                self.tell_reclaimed(s, &live);
                self.pace.record_read(len, claimed);
                self.backlog = claimed >= count as usize;
                self.stats.deleted_seen += claim.deleted.len() as u64;
                let sweeping = (!live.is_empty() || claim.bare_nils > 0) && &claim.cursor[..] != CURSOR_START;
                // Carry the cursor across beats; `0-0` starts the next sweep from the top.
                let claim_at = if sweeping { None } else { Some(now + self.claim_every()) };
                let stream = &mut self.streams[s as usize];
                stream.cursor = claim.cursor;
                stream.claim_at = claim_at;
                if claim.bare_nils > 0 {
                    // Redis 6.2 moved deleted entries' ids into our pending list without
                    // naming them: drain it to see them as `[id, nil]` and ack them away.
                    stream.restart_drain();
                }
                if let (Some(first), Some(last)) = (live.first(), live.last()) {
                    let (first, last, n) = (first.id_bytes(), last.id_bytes(), live.len() as u32);
                    self.stage(s, live, read_at, true);
                    self.send_counts(s, &first, &last, n, now);
                }
            }
            Sent::ReadNew { count, streams, .. } => {
                let due = read_at + self.config.lease_threshold();
                let n_streams = streams.len();
                let (each, most) = self.per_stream(count, n_streams);
                // The hot path: each entry goes straight to the buffer, moved as little as can be.
                let (mut claimed, mut released) = (0, 0);
                // The stream whose entries are being read, how many so far, its last new one.
                let mut at: Option<(u32, u32, Option<Bytes>)> = None;
                let mut ended = Vec::new();
                let only = (n_streams == 1).then(|| streams[0]);
                let n = stream_reply::read(&frame, spans, protocol, Source::New, |key, item| {
                    let s = match &at {
                        Some((s, ..)) if only.is_some() || self.streams[*s as usize].key == key => *s,
                        _ => {
                            // A read of one stream needs no lookup (nor a server that echoes
                            // the key exactly as asked).
                            let Some(s) = only.or_else(|| self.index.get(key).copied()) else { return };
                            ended.extend(at.replace((s, 0, None)));
                            s
                        }
                    };
                    if let Some((_, n, last)) = &mut at {
                        *n += 1;
                        if let Item::Entry(e) = &item {
                            if e.source == Source::New {
                                *last = Some(e.id_bytes());
                            }
                        }
                    }
                    // A read ahead of this one was skipped for its size: the drain due reads
                    // its entries again, then these, in the order read. Until then these are
                    // left to it, their delivery counts given back as for any entry dropped
                    // unhandled. So are a removed stream's.
                    let stream = &self.streams[s as usize];
                    let behind_skipped = stream.drains_from_top() || !stream.active;
                    match item {
                        Item::Entry(mut entry) if behind_skipped => {
                            entry.deliveries = entry.deliveries.max(1);
                            entry.stream = s;
                            self.moves_owed = true;
                            self.streams[s as usize].returns.push(Buffered {
                                entry,
                                read_at,
                                due,
                                key: None,
                            });
                        }
                        // Taken from its owner by the read's `CLAIM` (Redis 8.4+): as a reclaim.
                        Item::Entry(entry) if entry.source == Source::Claimed => {
                            let Some(mut entry) = self.live(s, Item::Entry(entry), now) else { return };
                            entry.stream = s;
                            if !self.streams[s as usize].retried.take(entry.id()) {
                                *if entry.released { &mut released } else { &mut claimed } += 1;
                            }
                            if self.config.max_deliveries.is_some_and(|max| entry.deliveries > max) {
                                let (id, deliveries) = (entry.id_bytes(), entry.deliveries);
                                let reason = DeadLetterReason::MaxDeliveries;
                                self.streams[s as usize].dead_letters.push(Job {
                                    id,
                                    deliveries,
                                    reason,
                                    error: None,
                                });
                                self.moves_owed = true;
                            } else {
                                self.keep(Buffered { entry, read_at, due, key: None });
                            }
                        }
                        Item::Entry(mut entry) if !self.holds(s, entry.id()) => {
                            entry.deliveries = 1;
                            entry.stream = s;
                            self.keep(Buffered { entry, read_at, due, key: None });
                        }
                        other => {
                            self.live(s, other, now);
                        }
                    }
                })
                .map_err(shape)?;
                ended.extend(at);
                if claimed + released > 0 {
                    self.notices.push_back(Notice::Reclaimed { count: claimed, released });
                }
                let mut full = false;
                for (s, got, last) in ended {
                    let stream = &mut self.streams[s as usize];
                    stream.in_reply = true;
                    stream.full = if got >= each { stream.full.saturating_add(1) } else { 0 };
                    // With many streams a share of one full may as well be all there was.
                    stream.backlog = stream.full >= 2 || (stream.full >= 1 && (each > 1 || n_streams == 1));
                    full |= stream.backlog;
                    if self.config.create_group.is_some() {
                        // Copied: a slice would keep the whole reply alive.
                        if let Some(last) = last.filter(|id| stream.last_read.as_ref() != Some(id)) {
                            stream.last_read = Some(Bytes::copy_from_slice(&last));
                        }
                    }
                }
                // Those read that brought nothing have nothing waiting.
                for &s in streams.iter() {
                    let stream = &mut self.streams[s as usize];
                    if !std::mem::take(&mut stream.in_reply) {
                        (stream.full, stream.backlog) = (0, false);
                    }
                }
                self.pace.record_read(len, n);
                // A read the server cut at `MAXCOUNT` or `MAXSIZE` leaves more behind.
                let capped = most.is_some_and(|most| n >= most as usize)
                    || self.read_cap(count.saturating_mul(n_streams as u32)).is_some_and(|cap| len >= cap);
                self.backlog = full || capped;
            }
            other => {
                let detail = "a reply other than a read came as entries";
                return Err(Error::Shape { command: other.command(), detail });
            }
        }
        Ok(())
    }

    /// How many entries a read of new entries over `streams` streams asks of each (`COUNT`),
    /// and of all (`MAXCOUNT`, where the server has it), for a read of `count` in all: each
    /// stream's share, at least 1; with `MAXCOUNT` any stream may bring them all.
    pub(super) fn per_stream(&self, count: u32, streams: usize) -> (u32, Option<u32>) {
        if streams <= 1 {
            return (count, None);
        }
        match self.dialect.read_size_cap {
            true => (count, Some(count)),
            false => ((count / streams as u32).max(1), None),
        }
    }

    /// A read reply outgrew its budget and was skipped; the server delivered (or claimed) it
    /// all the same, so those entries are now in this consumer's pending list.
    pub(super) fn on_oversized(&mut self, sent: Sent, completed: u64, now: Instant) -> Result<(), Error> {
        if self.stop != Stop::Running {
            return Ok(());
        }
        if !matches!(sent, Sent::ReadPending { .. } | Sent::Claim { .. } | Sent::ReadNew { .. }) {
            let detail = "a reply other than a read was skipped";
            return Err(Error::Shape { command: sent.command(), detail });
        }
        self.pace.record_oversized(completed);
        match sent {
            Sent::ReadPending { stream: s, count } => {
                self.in_flight.discard_counts();
                if count == 1 {
                    // This one entry alone is too large: find its id for the error.
                    let start = self.streams[s as usize].counts_from();
                    commands::counts(
                        &mut self.out,
                        &self.config,
                        &self.streams[s as usize].key,
                        &start,
                        b"+",
                        1,
                    );
                    self.track(Sent::FindTooLarge(s), now);
                }
                // Otherwise the same page is asked again, smaller.
            }
            // Delivered or claimed to us: the drain reads them again, smaller.
            Sent::Claim { stream: s, .. } => self.streams[s as usize].restart_drain(),
            Sent::ReadNew { streams, .. } => {
                streams.iter().for_each(|&s| self.streams[s as usize].restart_drain())
            }
            _ => {}
        }
        Ok(())
    }

    /// What a read's item leaves to hand out: a deleted entry (`[id, nil]`) cannot be
    /// processed, so it is acked away and counted, never handed out; one in hand (read
    /// again by a drain) is left to its handler, one buffered keeps its place, and one
    /// settled whose ack or move is not yet confirmed (settled after the drain or reclaim
    /// went out, which entries in hand do not hold back) to that ack or move.
    pub(super) fn live(&mut self, s: u32, item: Item, now: Instant) -> Option<Entry> {
        let id = match &item {
            Item::Entry(e) => e.id(),
            Item::Deleted(id) => &id[..],
        };
        if let Some(h) = self.in_hand.iter_mut().find(|h| h.stream == s && self.held.id(h.id) == id) {
            // Delivered to us again (a drain, a reclaim): the server reset its idle time, so
            // its lease runs from this reply, or the next renewal would find it too young
            // and take it for a peer's. It counted a delivery too: a commit's fencing token.
            h.read_at = Some(now);
            h.deliveries += 1;
            return None;
        }
        if let Some(b) = self.buffer.iter_mut().find(|b| b.entry.stream == s && b.entry.id() == id) {
            // Buffered and delivered to us again (a read's `CLAIM` once its lease ran out
            // while its key was in hand): the copy buffered keeps its place, its lease
            // renewed by this reply. A second copy behind later entries of its key would be
            // handed out after them once the next renewal, finding the idle time just reset,
            // took the first copy for a peer's and dropped it.
            b.read_at = now;
            b.due = now + self.config.lease_threshold();
            b.entry.deliveries += 1;
            return None;
        }
        // A retry whose park is not yet made (read again by a drain after a lost
        // connection): its wait goes on, the park's owner check from this read.
        self.streams[s as usize].delays.reread(id, now);
        if self.settling(s, id) {
            return None;
        }
        match item {
            Item::Entry(mut entry) => {
                entry.stream = s;
                Some(entry)
            }
            Item::Deleted(id) => {
                self.stats.deleted_seen += 1;
                self.streams[s as usize].acks.push(&id);
                self.ack_due.get_or_insert_with(|| now + self.config.ack_delay);
                None
            }
        }
    }

    /// Tells what `XAUTOCLAIM` took from other owners: not this consumer's own retries.
    pub(super) fn tell_reclaimed(&mut self, s: u32, live: &[Entry]) {
        let retried = &mut self.streams[s as usize].retried;
        let count = live.iter().filter(|e| !retried.take(e.id())).count() as u64;
        if count > 0 {
            self.notices.push_back(Notice::Reclaimed { count, released: 0 });
        }
    }

    /// True if `id` is an entry in hand.
    #[inline]
    pub(super) fn holds(&self, s: u32, id: &[u8]) -> bool {
        !self.in_hand.is_empty() && self.in_hand.iter().any(|h| h.stream == s && self.held.id(h.id) == id)
    }

    /// Buffers an entry for the application (with its key, when ordered); after a stop,
    /// keeps it to give its delivery count back instead (entries read after a stop stay
    /// pending, not handed out).
    #[inline]
    pub(super) fn keep(&mut self, mut entry: Buffered) {
        if let Some(order) = &self.config.order_by {
            entry.key = order.key(&entry.entry).map(|k| key_hash(&k));
        }
        if self.stop == Stop::Running {
            self.lease_floor = Some(self.lease_floor.map_or(entry.read_at, |at| at.min(entry.read_at)));
            self.buffer.push_back(entry);
        } else {
            self.streams[entry.entry.stream as usize].returns.push(entry);
            self.moves_owed = true;
        }
    }

    pub(super) fn stage(&mut self, stream: u32, entries: Vec<Entry>, read_at: Instant, paged: bool) {
        self.staged = (!entries.is_empty()).then_some(Staged { stream, entries, read_at, paged });
    }

    /// `XPENDING key group <start> <end> n consumer` for staged entries.
    pub(super) fn send_counts(&mut self, s: u32, start: &[u8], end: &[u8], n: u32, now: Instant) {
        commands::counts(&mut self.out, &self.config, &self.streams[s as usize].key, start, end, n);
        self.track(Sent::Counts { stream: s, count: n }, now);
    }

    /// Gives staged entries their delivery counts; once all are known (or known not to be
    /// ours), buffers them, or moves those past the cap to the dead-letter stream.
    pub(super) fn join_counts(&mut self, counts: Vec<(Bytes, u64)>, asked: u32, now: Instant) {
        let Some(staged) = self.staged.as_mut() else { return };
        // Both lists are in id order: walk them together.
        let mut from = 0;
        for (id, n) in &counts {
            if let Some(i) = staged.entries[from..].iter().position(|e| e.id() == &id[..]) {
                staged.entries[from + i].deliveries = (*n).max(1);
                from += i + 1;
            }
        }
        let missing = staged.entries.iter().any(|e| e.deliveries == 0);
        if staged.paged && missing && counts.len() as u64 >= u64::from(asked) {
            // A full page that did not reach them all: our other pending entries share the
            // range. Ask for the next page.
            if let (Some((last, _)), Some(end)) = (counts.last(), staged.entries.last()) {
                let (start, end) = (commands::after(last), end.id_bytes());
                let n = staged.entries.iter().filter(|e| e.deliveries == 0).count() as u32;
                let s = staged.stream;
                self.send_counts(s, &start, &end, n, now);
                return;
            }
        }
        let Some(Staged { stream: s, entries, read_at, .. }) = self.staged.take() else { return };
        let due = read_at + self.config.lease_threshold();
        for entry in entries {
            if entry.deliveries == 0 {
                // No longer ours (acked or taken since the read): not handed out.
                self.lost(s, entry.id_bytes(), false);
            } else if self.config.max_deliveries.is_some_and(|max| entry.deliveries > max) {
                let reason = DeadLetterReason::MaxDeliveries;
                let job = Job { id: entry.id_bytes(), deliveries: entry.deliveries, reason, error: None };
                self.streams[s as usize].dead_letters.push(job);
                self.moves_owed = true;
            } else {
                self.keep(Buffered { entry, read_at, due, key: None });
            }
        }
    }

    /// `MAXSIZE` for a read of `count` entries where the server caps reads by size (Redis
    /// 8.10+): half of `read_bytes`, since the reply stops only after the entry that crosses
    /// it, so that an entry up to as large again still fits in `read_bytes`.
    pub(super) fn read_cap(&self, count: u32) -> Option<usize> {
        (self.dialect.read_size_cap && count > 1).then(|| self.pace_read_bytes() / 2)
    }

    pub(super) fn pace_read_bytes(&self) -> usize {
        self.config.read_bytes.min(self.config.limits.max_frame)
    }
}
