//! The connection: up (the handshake, then what goes out once the node answers as a master),
//! lost (what is kept and what is forgotten, the reconnect scheduled), and an error that
//! ends it.

use super::*;

impl Consumer {
    /// A fresh connection is up. Queues the handshake, whose `HELLO` tells the server's
    /// version and the node's role. Only once the node answers as a master (a replica is
    /// never read from: [`Error::NotMaster`]) come the group door, acks and dead-letter moves
    /// still owed, and the drain of the own pending list from the start: whatever this
    /// consumer held before (a crash, a lost connection) is handed out again at once.
    pub fn on_connected(&mut self, now: Instant) {
        self.tick(now);
        if !self.is_live() {
            return;
        }
        self.reset_link();
        if self.connected_before && !self.leaving_link {
            self.stats.reconnects += 1;
        }
        self.heard = false;
        self.connected_before = true;
        self.dropped = None;
        self.link = Link::Up;
        for command in commands::handshake(&mut self.out, &self.config) {
            self.track(Sent::Handshake(command), now);
        }
        // HELLO 3 tells the server's version and the node's role; in RESP2 a `HELLO` without
        // arguments asks them (and switches nothing).
        if self.config.protocol == Protocol::Resp2 {
            crate::encode::command(&mut self.out, &[b"HELLO"]);
            self.track(Sent::Handshake(Command::ServerInfo), now);
        }
        self.count_replicas(now);
        self.vetting = true;
    }

    /// The node answered the handshake as a master (or as a server that does not say):
    /// what goes out before the first read, then the drain.
    pub(super) fn open(&mut self, now: Instant) {
        self.vetting = false;
        self.told_not_master = None;
        self.announce();
        if self.checks_twins() && !self.twins.vetted() {
            self.look_for_twins(now);
        }
        // Checked against the first stream: in a cluster all of them share its slot.
        let first = self.streams[0].key.clone();
        if let Some(key) = self.config.dead_letter.as_ref().filter(|_| self.stop == Stop::Running) {
            // Refused now (another cluster slot, an ACL) rather than at the first dead letter.
            let key = crate::config::key_for(key, &first);
            dead_letter::encode_check(&mut self.out, &self.config, &first, &key);
            self.track(Sent::DeadLetterCheck, now);
        }
        if let Some(keys) = self.config.commit_to.as_ref().filter(|_| self.stop == Stop::Running) {
            let keys: Vec<Bytes> = keys.iter().map(|k| crate::config::key_for(k, &first).into()).collect();
            commit::encode_check(&mut self.out, &self.config, &first, &keys);
            self.track(Sent::CommitCheck, now);
        }
        if self.config.commit_to.is_some() || self.streams.iter().any(|s| !s.commits.is_empty()) {
            self.load_script(now);
        }
        if self.config.create_group.is_some() && self.stop == Stop::Running {
            for s in 0..self.streams.len() {
                if self.streams[s].active {
                    self.streams[s].make_group = false;
                    self.send(Sent::CreateGroup(s as u32), now);
                }
            }
        }
        self.renew_in_hand(now);
        self.restart_drain();
        self.pump(now);
    }

    /// The connection was lost, or an attempt to connect failed. Commands in flight are
    /// forgotten (acks and dead-letter moves among them are kept and sent again: both are
    /// idempotent); entries read but not handed out stay pending on the server. A reconnect
    /// is scheduled, told as [`Notice::ConnectionLost`] or [`Notice::ConnectFailed`].
    ///
    /// After an `Err` from `handle_input`/`handle_timeout` the consumer has already done
    /// this; calling it again before the scheduled reconnect time changes nothing.
    pub fn on_disconnected(&mut self, now: Instant) {
        self.on_disconnected_because(now, "the connection closed");
    }

    /// [`on_disconnected`](Self::on_disconnected), saying why (an I/O error, a refused
    /// connect, a TLS failure…): the reason is carried by the notice it produces.
    pub fn on_disconnected_because(&mut self, now: Instant, reason: impl fmt::Display) {
        self.tick(now);
        if self.dropped.take().is_some() && matches!(self.link, Link::Down { .. }) {
            return; // the socket the consumer dropped itself, closed: a new one is due now
        }
        if self.link != Link::Up {
            // A connect failed: the node a redirect named may be gone (a failover).
            self.redirect = None;
            self.asking = false;
        }
        let scheduled = matches!(self.link, Link::Down { retry_at } if now < retry_at);
        if self.is_live() && !scheduled {
            self.lose_link(now, Lost::Because(reason.to_string()));
        }
    }

    /// The driver learned where the server is now (a sentinel named a new master): the next
    /// connect is due at once rather than after the backoff. Does nothing unless waiting to
    /// reconnect.
    pub fn connect_now(&mut self, now: Instant) {
        if let Link::Down { retry_at } = &mut self.link {
            *retry_at = (*retry_at).min(now);
        }
    }

    pub(super) fn restart_drain(&mut self) {
        for stream in &mut self.streams {
            stream.restart_drain();
            stream.claim_at = None;
        }
    }

    /// Forgets the connection's state, keeping acks and dead-letter moves owed.
    pub(super) fn reset_link(&mut self) {
        let in_flight: Vec<Sent> = self.in_flight.drain().map(|c| c.sent).collect();
        in_flight.into_iter().for_each(|sent| self.keep_owed(sent));
        self.script = None;
        self.staged = None;
        self.health = None;
        self.lag_checked = None;
        self.twins.lost();
        self.out.clear();
        self.tracked_upto = 0;
        self.decoder.reset();
    }

    pub(super) fn lose_link(&mut self, now: Instant, reason: Lost) {
        if self.stop == Stop::Stopping {
            // Not worth waiting for a connection: what a cut read brought waits for
            // `min_idle` (or this consumer's next drain).
            self.leave_due = false;
            self.cut = None;
        }
        // A connection the server never answered on counts as a failed connect.
        let was_up = self.ready() && self.heard;
        self.reset_link();
        self.drop_buffer();
        let retry_in = self.backoff.next_delay();
        self.link = Link::Down { retry_at: now + retry_in };
        self.finish_stop_if_clear();
        if !self.is_live() {
            return;
        }
        let notice = match reason {
            Lost::NotMaster(role) => {
                // Told once, not at every attempt: it stays a replica until a failover.
                if self.told_not_master.as_ref() == Some(&role) {
                    return;
                }
                self.told_not_master = Some(role.clone());
                Notice::NotMaster { role, retry_in }
            }
            Lost::Because(reason) if was_up => Notice::ConnectionLost { reason, retry_in },
            Lost::Because(reason) => Notice::ConnectFailed { reason, retry_in },
        };
        self.notices.push_back(notice);
    }

    /// Records an error; returns it for the caller to pass on.
    pub(super) fn fail(&mut self, now: Instant, error: Error) -> Error {
        self.stats.errors += 1;
        if error.is_fatal() {
            self.failed = Some(error.clone());
            self.reset_link();
            self.buffer.clear();
            self.link = Link::Closed;
        } else {
            let reason = match &error {
                Error::NotMaster { role } => Lost::NotMaster(role.clone()),
                _ => Lost::Because(error.to_string()),
            };
            self.lose_link(now, reason);
        }
        error
    }
}
