//! Stopping: cleanly (the entries in hand settled, what they earned confirmed, the rest given
//! back, the groups left), or at once (`abandon`), and a fatal error that stops as a stop does.

use super::*;

impl Consumer {
    /// Asks the consumer to stop. Honored between entries: nothing more is handed out, the
    /// entries in hand are settled first, earned acks (and dead-letter moves) are sent and
    /// confirmed, then [`Event::Stopped`] comes out. Entries read but not handed out are given
    /// back, for a peer's next reclaim (if connected: a stop does not wait for a connection
    /// for that). Then, holding nothing, it leaves the group
    /// ([`Config::leave_on_stop`]).
    ///
    /// Parked with nothing owed, it cuts the parked read short rather than wait up to a beat
    /// for it: [`wants_connection`](Self::wants_connection) turns true — close the
    /// connection and connect again. The server may have answered that read already, its
    /// entries delivered to this consumer and lost with the connection; so on the new one
    /// the consumer asks what it holds (`XPENDING … consumer`) and gives back what was
    /// delivered after that read went out — released on Redis 8.8+, elsewhere its delivery
    /// count taken back and its idle time set to `min_idle`, for any consumer's next reclaim
    /// to take at once — then leaves. Nothing the server handed to it waits for `min_idle`
    /// under its name. (With [`Config::allow_twins`] the name's recent deliveries may be a
    /// twin's in hand: the stop ends at once, as before.)
    pub fn stop(&mut self) {
        if self.stop == Stop::Running && self.is_live() {
            self.stop = Stop::Stopping;
            self.drop_buffer();
            if self.link != Link::Up {
                // Not worth waiting for a connection: the counts stay one higher.
                self.streams.iter_mut().for_each(|s| s.returns.clear());
            }
            match self.last_now {
                Some(now) => {
                    // Sent now, dated by the last call's time (maybe a long handler ago):
                    // their deadlines count from the next call's.
                    self.undated = Some(self.in_flight.len());
                    self.pump(now);
                }
                None => self.finish_stop_if_clear(),
            }
        }
    }

    /// Stops at once, without waiting on the server: for a stop that cannot wait, e.g. while
    /// the server is unreachable and [`stop`](Self::stop) would wait to confirm owed acks.
    /// The entries in hand, if any, are left unsettled (a later [`settle`](Self::settle) does
    /// nothing) and acks (and dead-letter moves) not yet confirmed are given up, counted in
    /// [`Stats::abandoned_acks`]: their entries stay pending on the server and come again, to
    /// this consumer's drain when it restarts or to a peer's reclaim. Nothing is lost; some
    /// entries may be handled twice. [`Event::Stopped`] comes out next.
    ///
    /// Where the connection is up and no read is parked on it, the entries read but not
    /// handed out are given back as a stop gives them back (a peer's next reclaim takes
    /// them): what [`poll_transmit`](Self::poll_transmit) then holds is a parting write, to
    /// write if it can be without waiting, before closing the connection. Its answer is not
    /// waited for (nor counted). The entries in hand are not given back: their handlers may
    /// still be working on them.
    pub fn abandon(&mut self) {
        if !self.is_live() {
            // Finished already (stopped, or failed with entries in hand): forget them.
            self.in_hand.clear();
            self.streams.iter_mut().for_each(|s| s.in_hand = 0);
            self.keys_in_hand.clear();
            self.held.clear();
            return;
        }
        // Behind a parked read a parting write would wait up to a beat on the server, and be
        // dropped with the connection: not worth it. The bytes not yet written stay ahead of
        // it (a command half written must be finished first).
        let parting = (self.ready() && !self.parked_read_in_flight())
            .then_some(self.last_now)
            .flatten()
            .map(|now| (now, std::mem::take(&mut self.out)));
        self.reset_link(); // acks in flight join the owed ones
        if let Some((now, out)) = parting {
            self.out = out;
            self.drop_buffer();
            self.give_back(now);
            self.in_flight.drain().for_each(drop); // no answer will be read
            self.tracked_upto = 0;
        }
        for stream in &mut self.streams {
            let owed = stream.acks.len() + stream.dead_letters.len() + stream.commits.len();
            self.stats.abandoned_acks += owed as u64;
            stream.acks.clear();
            stream.dead_letters.clear();
            stream.commits.clear();
            stream.returns.clear();
            stream.delays.clear();
        }
        self.ack_due = None;
        self.buffer.clear();
        self.in_hand.clear();
        self.streams.iter_mut().for_each(|s| s.in_hand = 0);
        self.keys_in_hand.clear();
        self.held.clear();
        self.link = Link::Closed;
        self.stop = Stop::Stopped { reported: false };
        if let Some(error) = self.failing.take() {
            self.stats.errors += 1;
            self.failed = Some(error);
        }
    }

    pub(super) fn finish_stop_if_clear(&mut self) {
        if self.stop != Stop::Stopping || self.failed.is_some() || !self.in_hand.is_empty() {
            return; // (the hot path: called after every reply)
        }
        // Reads already answering at once are waited for too, so that what they bring has
        // its delivery count given back; a parked read is not (it may take a beat).
        // A stop on its way to a failure does not leave the group (see `part`).
        let parting = (self.leave_due || self.cut.is_some())
            && self.failing.is_none()
            && (self.link == Link::Up || self.leaving_link);
        let owed = self.owes() || parting;
        if self.stop == Stop::Stopping && self.failed.is_none() && self.in_hand.is_empty() && !owed {
            self.reset_link();
            self.link = Link::Closed;
            match self.failing.take() {
                Some(error) => {
                    self.stats.errors += 1;
                    self.failed = Some(error);
                }
                None => self.stop = Stop::Stopped { reported: false },
            }
        }
    }

    /// A fatal error that leaves the link working: stop as for [`stop`](Self::stop) —
    /// earned acks and moves confirmed, the buffer given back — then fail with it.
    pub(super) fn fail_after_acks(&mut self, error: Error) {
        if self.stop == Stop::Running {
            self.stop = Stop::Stopping;
            self.drop_buffer();
        }
        self.failing.get_or_insert(error);
    }
}
