//! What the consumer owes the server, per stream: acks, commits, dead-letter moves,
//! give-backs and releases, each flushed never behind a parked read; and the leave at a stop.

use super::*;

impl Consumer {
    /// Whether acks delete their entries (`XACKDEL`) on this connection.
    pub(super) fn deletes_acked(&self) -> bool {
        self.config.delete_acked.is_some() && self.dialect.ack_delete
    }

    /// Writes the releases owed in one `XNACK … FAIL` — never behind a parked read.
    pub(super) fn flush_releases(&mut self, now: Instant) {
        if !self.ready() || self.parked_read_in_flight() {
            return;
        }
        for s in 0..self.streams.len() {
            if let Some(ids) = self.streams[s].releases.take() {
                self.send(Sent::Release { stream: s as u32, ids, silent: false }, now);
            }
        }
        self.releasing = self.streams.iter().any(|s| !s.releases.is_empty());
    }

    /// Writes the parks owed (retries that wait, [`crate::delay`]) — never behind a parked
    /// read.
    pub(super) fn flush_parks(&mut self, now: Instant) {
        if !self.ready() || self.parked_read_in_flight() {
            return;
        }
        for s in 0..self.streams.len() {
            for mut park in self.streams[s].delays.take_owed() {
                delay::encode(&mut self.out, &self.config, &self.streams[s].key, &mut park, now);
                self.track(Sent::Park(s as u32, park), now);
            }
        }
        self.parking = self.streams.iter().any(|s| !s.delays.is_empty());
    }

    /// Parked entries due at `now`: parked again (a wait longer than `min_idle`), or, where
    /// reads do not claim, swept for from the smallest id due, now rather than at the next
    /// beat (the sweep's cursor goes back to it, if it was past it).
    pub(super) fn parks_come_due(&mut self, now: Instant) {
        for stream in &mut self.streams {
            if let Some(from) = stream.delays.come_due(&self.config, now) {
                stream.claim_at = Some(now);
                if delay::id_before(&from, &stream.cursor) {
                    stream.cursor = from;
                }
            }
        }
    }

    /// When the next park is owed, or a parked entry is due: `now` for parks owed.
    pub(super) fn parks_due(&self) -> Option<Instant> {
        if !self.parking {
            return None;
        }
        let owed = self.streams.iter().any(|s| s.delays.owes()).then_some(self.last_now).flatten();
        let watched = self.streams.iter().filter_map(|s| s.delays.next_due(&self.config)).min();
        owed.into_iter().chain(watched).min()
    }

    /// A park answered: the ids the server moved to the parking consumer.
    pub(super) fn on_park(
        &mut self,
        s: u32,
        park: delay::Park,
        value: Value,
        now: Instant,
    ) -> Result<(), reply::ShapeError> {
        let moved = reply::ids(value)?;
        let parked = moved.contains(&park.id);
        let watch_last = !self.dialect.claim_in_read;
        self.streams[s as usize].delays.on_parked(park, parked, watch_last, now);
        self.parking = self.streams.iter().any(|s| !s.delays.is_empty());
        Ok(())
    }

    /// What a stop waits for before it ends (besides the entries in hand): acks and moves
    /// owed, and, while connected, give-backs, releases and the counts of entries read.
    pub(super) fn owes(&self) -> bool {
        let up = self.link == Link::Up;
        self.streams.iter().any(|s| {
            s.owes_settles() || (up && (!s.returns.is_empty() || !s.releases.is_empty() || s.delays.owes()))
        }) || (up && self.staged.is_some())
            || self.in_flight.iter().any(|c| c.sent.is_owed())
    }

    /// At the end of a clean stop, once nothing else is owed (its acks confirmed, so that
    /// what it holds is known), in this order:
    ///
    /// 1. a parked read is cut short: behind it the server would hold anything else for up
    ///    to a beat, so its connection is dropped and the rest goes on a new one. The server
    ///    may have answered it already, delivering entries that will never arrive;
    /// 2. on the new connection, what this consumer holds that was delivered since that read
    ///    was written is given back (`Sent::Held`);
    /// 3. it leaves the group if it holds nothing ([`crate::leave`]).
    ///
    /// With twins allowed, a parked read is dropped without step 2 (the name's pending
    /// list is shared: what was delivered lately may be the twin's, in its hand).
    pub(super) fn part(&mut self, now: Instant) {
        let clean = self.failed.is_none() && self.failing.is_none() && self.in_hand.is_empty();
        if !clean || !self.ready() || self.owes() {
            return;
        }
        if let Some(since) = self.in_flight.parked_since() {
            if !self.leave_due && self.config.allow_twins {
                return; // the stop ends now, the read's connection with it
            }
            self.cut = Some((since, self.twins.id())).filter(|_| !self.config.allow_twins);
            self.reset_link();
            self.link = Link::Down { retry_at: now };
            self.leaving_link = true;
            self.dropped = Some(false);
            return;
        }
        if let Some((since, cut_id)) = self.cut.take() {
            if let Some(id) = cut_id {
                // Refused (an ACL without `CLIENT UNBLOCK`) or gone already: ignored.
                commands::unblock_client(&mut self.out, id);
                self.track(Sent::Discard(Command::Unblock), now);
            }
            for s in 0..self.streams.len() {
                if self.streams[s].active {
                    self.ask_held(s as u32, b"-", since, now);
                }
            }
            return;
        }
        if self.leave_due {
            self.leave_due = false;
            for s in 0..self.streams.len() {
                crate::leave::encode(&mut self.out, &self.config, &self.streams[s].key);
                self.track(Sent::Leave(s as u32), now);
            }
        }
    }

    /// A page of what this consumer holds of stream `s`, from `start` on (see [`Self::part`]).
    fn ask_held(&mut self, s: u32, start: &[u8], since: Instant, now: Instant) {
        const PAGE: u32 = 1000;
        commands::counts(&mut self.out, &self.config, &self.streams[s as usize].key, start, b"+", PAGE);
        self.track(Sent::Held { stream: s, count: PAGE, since }, now);
    }

    /// What this consumer holds of stream `s` (a page, see [`Self::part`]): the entries
    /// delivered since the read cut short was written are given back — released on Redis
    /// 8.8+ (`XNACK … SILENT`: the count that delivery raised taken back), elsewhere their
    /// count taken back and their idle time set to `min_idle`, so that any consumer's next
    /// reclaim takes them at once. The rest (entries given `Retry`, or given back already)
    /// stay as they are. The next page is asked for if this one was full.
    pub(super) fn on_held(
        &mut self,
        s: u32,
        asked: u32,
        since: Instant,
        rows: Vec<reply::Pending>,
        now: Instant,
    ) {
        // The server dates a delivery after the read was written; its clock counts whole
        // milliseconds, hence the one more.
        let window = u64::try_from(now.saturating_duration_since(since).as_millis()).unwrap_or(u64::MAX) + 1;
        if let Some(last) = rows.last().filter(|_| rows.len() as u64 >= u64::from(asked)) {
            self.ask_held(s, &commands::after(&last.id), since, now);
        }
        // Delivered within the window, and not an entry this consumer handed out and left
        // pending (given `Retry` just before the read went out).
        let retried = &self.streams[s as usize].retried;
        let mut cut: Vec<reply::Pending> =
            rows.into_iter().filter(|p| p.idle_ms <= window && !retried.contains(&p.id)).collect();
        if cut.is_empty() {
            return;
        }
        if self.dialect.release {
            let mut released = Acks::default();
            cut.retain(|p| {
                let ours = release::surely_ours(&self.config, Duration::from_millis(p.idle_ms));
                if ours {
                    released.push(&p.id);
                }
                !ours
            });
            if !released.is_empty() {
                self.send(Sent::Release { stream: s, ids: released, silent: true }, now);
            }
        }
        let lease = self.config.lease_threshold();
        let idle = u64::try_from(self.config.min_idle.as_millis()).unwrap_or(u64::MAX);
        cut.sort_by_key(|p| p.deliveries);
        for group in cut.chunk_by(|a, b| a.deliveries == b.deliveries) {
            let ids: Vec<Bytes> = group.iter().map(|p| p.id.clone()).collect();
            let least = group.iter().map(|p| p.idle_ms).min().unwrap_or(0);
            let owned = lease::owned_since(Duration::from_millis(least), lease, self.config.min_idle);
            let count = group[0].deliveries.saturating_sub(1);
            let key = &self.streams[s as usize].key;
            commands::give_back(&mut self.out, &self.config, key, owned, &ids, count, idle.max(least));
            self.track(Sent::GiveBack, now);
        }
    }

    /// Once every stream's leave is answered: one notice for all of them (a refusal, if any
    /// was refused; that it left, holding so many, if any left).
    pub(super) fn tell_left(&mut self) {
        if self.in_flight.iter().any(|c| matches!(c.sent, Sent::Leave(_))) {
            return;
        }
        let (holding, refused) = std::mem::take(&mut self.left);
        if let Some(reason) = refused {
            self.notices.push_back(Notice::Refused { feature: Notice::LEAVE, reason });
        }
        if let Some(holding) = holding {
            self.notices.push_back(Notice::Left { holding });
        }
    }

    /// Writes the earned acks in one `XACK` — never behind a parked read, which would hold
    /// it for up to a beat.
    pub(super) fn flush_acks(&mut self, now: Instant) {
        if !self.ready() || self.parked_read_in_flight() {
            return;
        }
        self.flush_commits(now);
        let mut n = 0;
        for s in 0..self.streams.len() {
            if self.streams[s].acks.is_empty() {
                continue;
            }
            let acks = self.streams[s].acks.take(self.ack_pool.pop().unwrap_or_default());
            n += acks.len() as u64;
            self.send(Sent::Ack(s as u32, acks), now);
        }
        if n > 0 {
            self.ack_due = None;
            self.wait_for_replicas(n, now);
        }
    }

    /// Writes the commits owed, [`commit::BATCH`] entries to an `EVALSHA`, once the script
    /// is loaded on this connection (loading it first if need be).
    pub(super) fn flush_commits(&mut self, now: Instant) {
        if self.streams.iter().all(|s| s.commits.is_empty()) {
            return;
        }
        let Some(sha) = self.script.clone() else {
            self.load_script(now);
            return;
        };
        let mut n = 0;
        for s in 0..self.streams.len() {
            n += self.streams[s].commits.len() as u64;
            let mut jobs = std::mem::take(&mut self.streams[s].commits);
            while !jobs.is_empty() {
                let rest = jobs.split_off(jobs.len().min(commit::BATCH));
                commit::encode(&mut self.out, &self.config, &self.streams[s].key, &sha, &jobs);
                self.track(Sent::Commit(s as u32, jobs), now);
                jobs = rest;
            }
        }
        self.ack_due = None;
        self.wait_for_replicas(n, now);
    }

    /// `SCRIPT LOAD` of the commit script, unless loaded or loading on this connection.
    /// Nothing is read before its answer: a drain would deliver the entries of the commits
    /// waiting for it again, and fence them off.
    pub(super) fn load_script(&mut self, now: Instant) {
        if self.script.is_none() && !self.in_flight.iter().any(|c| matches!(c.sent, Sent::ScriptLoad)) {
            commit::encode_load(&mut self.out);
            self.track(Sent::ScriptLoad, now);
        }
    }

    /// A commit that cannot be made as it stands: nothing written, the entry left pending
    /// (it comes back as a retry does).
    /// A commit refused as it stood (before it was sent, or by the script): nothing written,
    /// a failed delivery. The entry stays pending, to come again, until its last allowed
    /// delivery (at once without a cap), at which it is moved to the dead-letter stream with
    /// the refusal's text; without a dead-letter stream the consumer stops (after the acks
    /// earned), since it would be refused every time.
    pub(super) fn refuse_commit(&mut self, s: usize, id: Bytes, deliveries: u64, reason: String) {
        self.stats.commits_refused += 1;
        self.notices.push_back(Notice::CommitRefused { id: id.clone(), reason: reason.clone() });
        match (&self.config.dead_letter, self.config.max_deliveries) {
            (None, _) => {
                let id = String::from_utf8_lossy(&id).into_owned();
                self.fail_after_acks(Error::CommitRefused { id, reason });
            }
            // No cap to wait for: set aside at once.
            (Some(_), max) if max.map_or(true, |max| deliveries >= max) => {
                let (reason, error) = (DeadLetterReason::CommitRefused, Some(Bytes::from(reason)));
                self.streams[s].dead_letters.push(Job { id, deliveries, reason, error });
                self.moves_owed = true;
            }
            (Some(_), _) => self.streams[s].retried.note(id),
        }
    }

    /// What the commit script answered for `jobs`.
    pub(super) fn on_commits(
        &mut self,
        s: u32,
        jobs: Vec<commit::Job>,
        value: Value,
        now: Instant,
    ) -> Result<(), reply::ShapeError> {
        let outcomes = commit::outcomes(value, jobs.len())?;
        let mut delete = Acks::default();
        for (job, outcome) in jobs.into_iter().zip(outcomes) {
            let commit::Job { id, deliveries, .. } = job;
            match outcome {
                commit::Outcome::Committed => {
                    self.stats.committed += 1;
                    self.stats.acked += 1;
                    let stream = &mut self.streams[s as usize].stats;
                    (stream.committed, stream.acked) = (stream.committed + 1, stream.acked + 1);
                    delete.push(&id);
                }
                commit::Outcome::Settled => {
                    self.stats.commits_fenced += 1;
                    self.notices.push_back(Notice::CommitFenced { id, deliveries, holder: None });
                }
                commit::Outcome::Held { owner, deliveries: now } => {
                    self.stats.commits_fenced += 1;
                    let holder = Some((owner, now));
                    self.notices.push_back(Notice::CommitFenced { id, deliveries, holder });
                }
                commit::Outcome::Refused(reason) => self.refuse_commit(s as usize, id, deliveries, reason),
            }
        }
        if let Some(condition) =
            self.config.delete_acked.filter(|_| self.deletes_acked() && !delete.is_empty())
        {
            // The script acks; the entries go as acks delete them, by the same rule (`XDELEX`,
            // Redis 8.2 as `XACKDEL`). Best effort: one left is trimmed later.
            delete.encode_ids(&mut self.out, &[b"XDELEX", &self.streams[s as usize].key, condition.token()]);
            self.track(Sent::Discard(Command::AckDelete), now);
        }
        Ok(())
    }

    /// `WAIT` (or `WAITAOF`) behind `acks` acks or dead-letter moves just written, where
    /// [`Config::ack_wait`] asks for it.
    pub(super) fn wait_for_replicas(&mut self, acks: u64, now: Instant) {
        let Some(wait) = self.config.ack_wait else { return };
        let timeout = if self.replicas_behind { REPLICAS_BEHIND_WAIT } else { wait.timeout() };
        let timeout = Decimal::new(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX));
        let replicas = Decimal::new(wait.replicas().into());
        match wait {
            AckWait::Replicas { .. } => {
                crate::encode::command(&mut self.out, &[b"WAIT", replicas.as_bytes(), timeout.as_bytes()])
            }
            AckWait::Aof { local, .. } => {
                let local: &[u8] = if local { b"1" } else { b"0" };
                crate::encode::command(
                    &mut self.out,
                    &[b"WAITAOF", local, replicas.as_bytes(), timeout.as_bytes()],
                )
            }
        }
        self.track(Sent::Wait { acks }, now);
    }

    /// A `WAIT`/`WAITAOF` answered: the acks behind it that did not get where they were to
    /// go are counted, and told when that starts.
    /// With [`Config::ack_wait`]: counts the master's replicas in sync at each connect, with
    /// the handshake: `WAIT 0 0` answers at once how many replicas acknowledged the
    /// connection's last write — before any write, every replica in sync (later it would
    /// count only those that caught up with this connection's writes). A node that refuses it
    /// (a replica, a server without `WAITAOF`) is told otherwise.
    pub(super) fn count_replicas(&mut self, now: Instant) {
        let Some(wait) = self.config.ack_wait.filter(|w| w.replicas() > 0) else { return };
        match wait {
            AckWait::Replicas { .. } => crate::encode::command(&mut self.out, &[b"WAIT", b"0", b"0"]),
            AckWait::Aof { .. } => crate::encode::command(&mut self.out, &[b"WAITAOF", b"0", b"0", b"0"]),
        }
        self.track(Sent::Replicas, now);
    }

    /// How many replicas the master has in sync: fewer than [`Config::ack_wait`] asks for
    /// is told (again when the count changes), and batches of acks then wait only
    /// [`REPLICAS_BEHIND_WAIT`] for what cannot come.
    pub(super) fn on_replicas(&mut self, value: Value) -> Result<(), reply::ShapeError> {
        let Some(wait) = self.config.ack_wait else { return Ok(()) };
        let have = match wait {
            AckWait::Replicas { .. } => reply::count(value)?,
            AckWait::Aof { .. } => reply::wait_aof(value)?.1,
        };
        let wanted = wait.replicas();
        let short = have < u64::from(wanted);
        // The first batch need not wait its whole timeout for what cannot come.
        self.replicas_behind |= short;
        if (short && self.replicas_told != Some(have)) || (!short && self.replicas_told.is_some()) {
            self.replicas_told = short.then_some(have);
            let timeout = wait.timeout();
            self.notices.push_back(Notice::Replicas { have, wanted, timeout });
        }
        Ok(())
    }

    pub(super) fn on_wait(&mut self, acks: u64, value: Value) -> Result<(), reply::ShapeError> {
        let Some(wait) = self.config.ack_wait else { return Ok(()) };
        let (local, replicas) = match wait {
            AckWait::Replicas { .. } => (true, reply::count(value)?),
            AckWait::Aof { local, .. } => {
                let (on_disk, replicas) = reply::wait_aof(value)?;
                (!local || on_disk > 0, replicas)
            }
        };
        let wanted = wait.replicas();
        if local && replicas >= u64::from(wanted) {
            self.replicas_behind = false;
            if self.replicas_told.take().is_some() {
                // Fewer were told: the count changed.
                self.notices.push_back(Notice::Replicas { have: replicas, wanted, timeout: wait.timeout() });
            }
            return Ok(());
        }
        self.stats.acks_unreplicated += acks;
        if !std::mem::replace(&mut self.replicas_behind, true) {
            self.notices.push_back(Notice::AcksUnreplicated { acks, replicas, wanted });
        }
        Ok(())
    }

    /// Drops the entries read but not handed out (they stay pending), keeping them to give
    /// their delivery counts back: they were counted by the read, not handled.
    pub(super) fn drop_buffer(&mut self) {
        self.staged = None;
        for b in self.buffer.drain(..) {
            self.streams[b.entry.stream as usize].returns.push(b);
            self.moves_owed = true;
        }
    }

    /// `XCLAIM key group self <ms> id… JUSTID RETRYCOUNT <n> IDLE <ms>` for the entries
    /// dropped unhandled: their delivery counts go back to what they were before the read,
    /// so that a restart's drain, which counts them again, does not count them twice (and
    /// `max_deliveries` counts handlings, not reads), and their idle times are set to
    /// `min_idle` at least, so that a peer's next reclaim takes them at once rather than
    /// `min_idle` later (a stopped consumer's read-ahead is another's without a wait; this
    /// one's drain, after a lost connection, reads them again first). Owner-checked like a
    /// lease renewal: one a peer took since is skipped. Best effort.
    pub(super) fn give_back(&mut self, now: Instant) {
        for s in 0..self.streams.len() {
            if !self.streams[s].returns.is_empty() {
                self.give_back_of(s, now);
            }
        }
    }

    pub(super) fn give_back_of(&mut self, s: usize, now: Instant) {
        let mut returns = std::mem::take(&mut self.streams[s].returns);
        if self.dialect.release {
            // Released (`XNACK … SILENT`: the read's count taken back) where surely still
            // ours: the next read of any consumer takes them at once. The rest are given back
            // owner-checked, and wait for `min_idle`.
            let mut released = Acks::default();
            returns.retain(|b| {
                let ours = release::surely_ours(&self.config, now.saturating_duration_since(b.read_at));
                if ours {
                    released.push(b.entry.id());
                }
                !ours
            });
            if !released.is_empty() {
                self.send(Sent::Release { stream: s as u32, ids: released, silent: true }, now);
            }
        }
        let lease = self.config.lease_threshold();
        let mut i = 0;
        while i < returns.len() {
            let Buffered { entry, read_at, .. } = &returns[i];
            let read_at = *read_at;
            let group = returns[i..]
                .iter()
                .take_while(|b| b.read_at == read_at && b.entry.deliveries == entry.deliveries)
                .count();
            let ids: Vec<Bytes> = returns[i..i + group].iter().map(|b| b.entry.id_bytes()).collect();
            let elapsed = now.saturating_duration_since(read_at);
            let min_idle_ms = lease::owned_since(elapsed, lease, self.config.min_idle);
            let idle_ms = u64::try_from(elapsed.max(self.config.min_idle).as_millis()).unwrap_or(u64::MAX);
            let count = entry.deliveries.saturating_sub(1);
            let key = &self.streams[s].key;
            commands::give_back(&mut self.out, &self.config, key, min_idle_ms, &ids, count, idle_ms);
            self.track(Sent::GiveBack, now);
            i += group;
        }
    }

    /// An entry in hand given [`Verdict::GiveBack`]: released where surely still ours (Redis
    /// 8.8+, `XNACK … FAIL`: its delivery counted), else given back as the read-ahead is, with
    /// its delivery kept (the handler had it). One a peer took (`read_at` gone) is not ours
    /// to give.
    pub(super) fn give_back_in_hand(
        &mut self,
        s: usize,
        id: HeldId,
        deliveries: u64,
        read_at: Option<Instant>,
        now: Instant,
    ) {
        let Some(read_at) = read_at else { return };
        if self.dialect.release && release::surely_ours(&self.config, now.saturating_duration_since(read_at))
        {
            self.streams[s].releases.now(self.held.bulk(id));
            self.releasing = true;
            return;
        }
        // `give_back_of` gives back one delivery (the read's, for entries never handed out):
        // one more than this entry's, so that its own stays counted.
        let no_fields: [(&[u8], &[u8]); 0] = [];
        let mut entry =
            Entry::new(self.held.id(id), no_fields, Source::Pending).with_deliveries(deliveries + 1);
        entry.stream = s as u32;
        let due = read_at;
        self.streams[s].returns.push(Buffered { entry, read_at, due, key: None });
        self.moves_owed = true;
    }

    pub(super) fn flush_dead_letters(&mut self, now: Instant) {
        let mut n = 0;
        for s in 0..self.streams.len() {
            let jobs = std::mem::take(&mut self.streams[s].dead_letters);
            n += jobs.len() as u64;
            for job in jobs {
                self.send(Sent::DeadLetter(s as u32, job), now);
            }
        }
        if n > 0 {
            self.wait_for_replicas(n, now);
        }
    }

    /// Acks and dead-letter moves a node refused for now (a redirect, a failover, a
    /// transient state) are owed still: sent again on the next connection, before its drain
    /// (which would otherwise hand their entries out again).
    pub(super) fn keep_owed(&mut self, sent: Sent) {
        match sent {
            Sent::Ack(s, mut acks) => self.streams[s as usize].acks.append(&mut acks),
            Sent::DeadLetter(s, job) => {
                self.streams[s as usize].dead_letters.push(job);
                self.moves_owed = true;
            }
            Sent::Commit(s, mut jobs) => self.streams[s as usize].commits.append(&mut jobs),
            Sent::Park(s, park) => {
                self.streams[s as usize].delays.keep(park);
                self.parking = true;
            }
            _ => {}
        }
    }

    /// True if `id` of stream `s` was settled and its ack (dead-letter move, commit) is owed
    /// or in flight.
    pub(super) fn settling(&self, s: u32, id: &[u8]) -> bool {
        self.streams[s as usize].settling(id)
            || self.streams[s as usize].delays.owes_park(id)
            || self.in_flight.iter().any(|c| match &c.sent {
                Sent::Park(t, park) => *t == s && park.id == id && park.deliveries.is_some(),
                Sent::Ack(t, acks) => *t == s && acks.contains(id),
                Sent::DeadLetter(t, job) => *t == s && job.id == id,
                Sent::Commit(t, jobs) => *t == s && jobs.iter().any(|job| job.id == id),
                _ => false,
            })
    }
}
