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

    /// What a stop waits for before it ends (besides the entries in hand): acks and moves
    /// owed, and, while connected, give-backs, releases and the counts of entries read.
    pub(super) fn owes(&self) -> bool {
        let up = self.link == Link::Up;
        self.streams
            .iter()
            .any(|s| s.owes_settles() || (up && (!s.returns.is_empty() || !s.releases.is_empty())))
            || (up && self.staged.is_some())
            || self.in_flight.iter().any(|c| c.sent.is_owed())
    }

    /// At the end of a clean stop, once nothing else is owed (its acks confirmed, so that
    /// what it holds is known): leaves the group if it holds nothing ([`crate::leave`]).
    pub(super) fn leave_group(&mut self, now: Instant) {
        let clean = self.failed.is_none() && self.failing.is_none() && self.in_hand.is_empty();
        if self.leave_due && clean && self.ready() && !self.owes() {
            if self.parked_read_in_flight() {
                // Behind the blocked read the server would hold it for up to a beat: the
                // connection is dropped and the leave goes on a new one.
                self.reset_link();
                self.link = Link::Down { retry_at: now };
                self.leaving_link = true;
                return;
            }
            self.leave_due = false;
            for s in 0..self.streams.len() {
                crate::leave::encode(&mut self.out, &self.config, &self.streams[s].key);
                self.track(Sent::Leave(s as u32), now);
            }
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
    pub(super) fn refuse_commit(&mut self, s: usize, id: Bytes, reason: String) {
        self.stats.commits_refused += 1;
        self.streams[s].retried.note(id.clone());
        self.notices.push_back(Notice::CommitRefused { id, reason });
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
                commit::Outcome::Refused(reason) => self.refuse_commit(s as usize, id, reason),
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
            _ => {}
        }
    }

    /// True if `id` of stream `s` was settled and its ack (dead-letter move, commit) is owed
    /// or in flight.
    pub(super) fn settling(&self, s: u32, id: &[u8]) -> bool {
        self.streams[s as usize].settling(id)
            || self.in_flight.iter().any(|c| match &c.sent {
                Sent::Ack(t, acks) => *t == s && acks.contains(id),
                Sent::DeadLetter(t, job) => *t == s && job.id == id,
                Sent::Commit(t, jobs) => *t == s && jobs.iter().any(|job| job.id == id),
                _ => false,
            })
    }
}
