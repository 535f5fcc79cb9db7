//! Settling: the application's verdict on an entry in hand, turned into what is owed the
//! server (an ack, a release, a dead-letter move, a commit, a give-back).

use super::*;

impl Consumer {
    /// The application's verdict on the entry in hand with this `id` (from an
    /// [`Event::Entry`]), in any order. With many streams ([`Config::streams`]) two entries
    /// in hand may share an id (made in the same millisecond on two streams): settle them
    /// with [`settle_entry`](Self::settle_entry), or this settles the first. `Ack` earns an `XACK` (written within
    /// [`Config::ack_delay`]; at once after a slow handler when entries are handled one at a
    /// time); `Retry` leaves it pending; `DeadLetter` moves it to the dead-letter stream.
    /// `now` is the time of the settle (after the handler ran): it measures the handler and
    /// dates the commands it sends.
    ///
    /// Returns false, doing nothing, if no entry with this id is in hand (settled already,
    /// or given up by [`abandon`](Self::abandon)).
    pub fn settle(&mut self, id: &[u8], verdict: Verdict, now: Instant) -> bool {
        self.tick(now);
        let Some(i) = self.in_hand.iter().position(|h| self.held.id(h.id) == id) else { return false };
        self.settle_at(i, verdict, now)
    }

    /// [`settle`](Self::settle) for this entry (one this consumer handed out): by its stream
    /// and its id.
    pub fn settle_entry(&mut self, entry: &Entry, verdict: Verdict, now: Instant) -> bool {
        self.tick(now);
        let (s, id) = (entry.stream, entry.id());
        let Some(i) = self.in_hand.iter().position(|h| h.stream == s && self.held.id(h.id) == id) else {
            return false;
        };
        self.settle_at(i, verdict, now)
    }

    pub(super) fn settle_at(&mut self, i: usize, verdict: Verdict, now: Instant) -> bool {
        let hand = self.in_hand.swap_remove(i);
        let stream = &mut self.streams[hand.stream as usize];
        stream.in_hand = stream.in_hand.saturating_sub(1);
        if let Some(key) = hand.key {
            self.keys_in_hand.remove(&key);
        }
        let took = now.saturating_duration_since(hand.handed_at);
        self.pace.record_handler(took);
        self.stats.handler_time.record(took);
        let s = hand.stream as usize;
        match verdict {
            Verdict::Ack => {
                // Unrenewed for `min_idle` (a handler that held up its driver) or renewed
                // too late: a peer's reclaim could have taken it.
                let exposed =
                    hand.read_at.map_or(true, |at| now.saturating_duration_since(at) >= self.config.min_idle);
                self.streams[s].acks.push_bulk(self.held.bulk(hand.id), exposed);
                self.ack_due.get_or_insert_with(|| now + self.config.ack_delay);
            }
            Verdict::RetryAfter(delay) => self.retry_after(s, &hand, delay, now),
            Verdict::Retry => match self.config.on_retry {
                OnRetry::Backoff(backoff) => {
                    let random = self.draw();
                    let delay = backoff.delay(hand.deliveries, self.config.min_idle, random);
                    self.retry_after(s, &hand, delay, now);
                }
                _ => {
                    self.stats.retried += 1;
                    self.streams[s].stats.retried += 1;
                    let stream = &mut self.streams[s];
                    stream.retried.note(self.held.to_bytes(hand.id));
                    if self.dialect.release {
                        let (held, id) = (&self.held, hand.id);
                        let (bulk, owned) = (held.bulk(id), || held.to_bytes(id));
                        stream.releases.retry(&self.config, bulk, owned, hand.deliveries, hand.read_at, now);
                        self.releasing = true;
                    }
                }
            },
            Verdict::DeadLetter => {
                if self.config.dead_letter.is_none() {
                    let id = String::from_utf8_lossy(self.held.id(hand.id)).into_owned();
                    self.fail_after_acks(Error::NoDeadLetter { id });
                    self.pump(now);
                    return true;
                }
                let reason = DeadLetterReason::Verdict;
                let id = self.held.to_bytes(hand.id);
                self.streams[s].dead_letters.push(Job {
                    id,
                    deliveries: hand.deliveries,
                    reason,
                    error: None,
                });
                self.moves_owed = true;
            }
            Verdict::Commit(writes) => {
                let id = self.held.to_bytes(hand.id);
                match writes.check(self.cluster.then_some(self.streams[s].slot)) {
                    Ok(()) => {
                        self.streams[s].commits.push(commit::Job { id, deliveries: hand.deliveries, writes });
                        self.ack_due.get_or_insert_with(|| now + self.config.ack_delay);
                    }
                    // Refused before it is sent.
                    Err(reason) => self.refuse_commit(s, id, hand.deliveries, reason),
                }
            }
            Verdict::GiveBack => self.give_back_in_hand(s, hand.id, hand.deliveries, hand.read_at, now),
        }
        self.held.tidy(self.in_hand.iter_mut().map(|h| &mut h.id));
        // One at a time, after a slow handler the next one is likely slow too, and its ack
        // would wait as long (a blocking driver writes nothing while a handler runs). With
        // many in hand the driver keeps driving: acks wait `ack_delay` to share an `XACK`.
        let slow = took >= self.config.ack_delay && self.config.concurrency == 1;
        if self.ack_due.is_some_and(|due| due <= now) || slow {
            self.flush_acks(now);
        }
        self.pump(now);
        true
    }

    /// An entry in hand given a retry that waits `delay`: parked with the group once its park
    /// goes out ([`crate::delay`]).
    fn retry_after(&mut self, s: usize, hand: &InHand, delay: Duration, now: Instant) {
        self.stats.retried += 1;
        self.stats.retries_delayed += 1;
        let id = self.held.to_bytes(hand.id);
        let stream = &mut self.streams[s];
        stream.stats.retried += 1;
        stream.stats.retries_delayed += 1;
        stream.retried.note(id.clone());
        stream.delays.retry(id, hand.deliveries, hand.read_at, delay, now);
        self.parking = true;
    }

    /// A number for the jitter of a retry's backoff (splitmix64).
    fn draw(&mut self) -> u64 {
        self.jitter = self.jitter.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.jitter;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}
