//! Commands onto the wire, each tracked (with its deadline) for the reply that answers it.

use super::*;

impl Consumer {
    /// Encodes a command and tracks it. A drain page goes out with the `XPENDING` that
    /// gives its delivery counts, pipelined behind it.
    pub(super) fn send(&mut self, sent: Sent, now: Instant) {
        let cap = match &sent {
            Sent::ReadPending { count, .. } => self.read_cap(*count),
            Sent::ReadNew { count, streams, .. } => self.read_cap(count.saturating_mul(streams.len() as u32)),
            _ => None,
        };
        let shares = match &sent {
            Sent::ReadNew { count, streams, .. } => self.per_stream(*count, streams.len()),
            _ => (0, None),
        };
        let c = &self.config;
        let out = &mut self.out;
        let key = |s: &u32| &self.streams[*s as usize].key;
        match &sent {
            // Encoded where they are decided, with what they need.
            Sent::Handshake(_)
            | Sent::Counts { .. }
            | Sent::Lease(..)
            | Sent::GiveBack
            | Sent::Park(..)
            | Sent::FindTooLarge(_)
            | Sent::Health(..)
            | Sent::Twins { .. }
            | Sent::DeadLetterCheck
            | Sent::CommitCheck
            | Sent::ScriptLoad
            | Sent::Commit(..)
            | Sent::Role
            | Sent::Wait { .. }
            | Sent::Replicas
            | Sent::Leave(_)
            | Sent::Held { .. }
            | Sent::Discard(_) => {}
            Sent::CreateGroup(s) => commands::create_group(out, c, key(s), self.streams[*s as usize].added),
            Sent::Ack(s, acks) => match c.delete_acked.filter(|_| self.dialect.ack_delete) {
                Some(condition) => acks.encode_ids(out, &[b"XACKDEL", key(s), &c.group, condition.token()]),
                None => acks.encode(out, key(s), &c.group),
            },
            Sent::Release { stream, ids, silent } => {
                let mode: &[u8] = if *silent { b"SILENT" } else { b"FAIL" };
                ids.encode_ids(out, &[b"XNACK", key(stream), &c.group, mode]);
            }
            Sent::ReadPending { stream, count } => {
                let after = match &self.streams[*stream as usize].next {
                    Next::Drain { after } => after.clone(),
                    Next::Beat => Bytes::from_static(DRAIN_START),
                };
                commands::read_pending(out, c, key(stream), *count, &after, cap);
                let start = self.streams[*stream as usize].counts_from();
                let (s, count) = (*stream, *count);
                self.track(sent, now);
                self.send_counts(s, &start, b"+", count, now);
                return;
            }
            Sent::Claim { stream, count } => {
                commands::claim(out, c, key(stream), *count, &self.streams[*stream as usize].cursor)
            }
            Sent::ReadNew { block, streams, turn, .. } => {
                let (count, most) = shares;
                let claim = self.dialect.claim_in_read.then_some(c.min_idle);
                let read = commands::ReadNew { count, most, block: *block, claim, cap };
                if Arc::ptr_eq(streams, &self.active) {
                    // The keys as encoded when the streams last changed, from `turn` on.
                    let at = self.reading.get(*turn as usize).copied().unwrap_or(0);
                    let keys = [&self.keys_wire[at..], &self.keys_wire[..at]];
                    commands::read_new(out, c, read, streams.len(), keys);
                } else {
                    let mut keys = Vec::new();
                    streams.iter().for_each(|s| crate::encode::bulk_vec(&mut keys, key(s)));
                    commands::read_new(out, c, read, streams.len(), [&keys, &[]]);
                }
            }
            Sent::DeadLetter(s, job) => {
                if let Some(dead_letter) = &c.dead_letter {
                    let dead_letter = crate::config::key_for(dead_letter, key(s));
                    dead_letter::encode(out, c, key(s), &dead_letter, job);
                }
            }
        }
        self.track(sent, now);
    }

    pub(super) fn track(&mut self, sent: Sent, now: Instant) {
        if self.asking && !matches!(sent, Sent::Handshake(_)) {
            // The command just encoded is the tail of `out`: `ASKING` goes in front of it,
            // and its `+OK` is awaited (and ignored) in its place.
            let command = self.out.split_off(self.tracked_upto);
            crate::encode::command(&mut self.out, &[b"ASKING"]);
            self.out.unsplit(command);
            let deadline = now + self.config.read_grace;
            self.in_flight.push(InFlight { sent: Sent::Discard(Command::Asking), sent_at: now, deadline });
        }
        self.tracked_upto = self.out.len();
        let wait = self.held_for(&sent) + self.config.read_grace;
        self.in_flight.push(InFlight { sent, sent_at: now, deadline: now + wait });
    }

    /// How long the server may hold `sent` before it answers: a parked read its block, a
    /// `WAIT` its timeout; anything else answers at once.
    fn held_for(&self, sent: &Sent) -> Duration {
        match sent {
            Sent::ReadNew { block: Some(block), .. } => *block,
            Sent::Wait { .. } => self.config.ack_wait.map_or(Duration::ZERO, |w| w.timeout()),
            _ => Duration::ZERO,
        }
    }

    /// The longest the server may take over `sent` once it can begin it: how long it may
    /// hold it ([`held_for`](Self::held_for)) and a moment more ([`BUSY`], at most a tenth of
    /// `min_idle`: a busy server, another client's script). A late reply is bounded by it,
    /// not taken for a fresh one.
    pub(super) fn longest_run(&self, sent: &Sent) -> Duration {
        self.held_for(sent) + BUSY.min(self.config.min_idle / 10)
    }
}
