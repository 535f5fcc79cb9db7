//! What the consumer can be asked without changing it: its configuration and counters, its
//! hand, its connection, and whether it is parked, caught up or finished.

use super::*;

impl Consumer {
    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Counters since creation.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Ids of the entries the application holds (handed out, not yet settled), oldest first
    /// unless some were settled out of order.
    pub fn in_hand(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        self.in_hand.iter().map(|h| self.held.id(h.id))
    }

    /// How many entries are read and waiting to be handed out.
    pub fn buffered(&self) -> usize {
        self.buffer.len() + self.staged.as_ref().map_or(0, |s| s.entries.len())
    }

    /// The stream verbs spoken on the current (or last) connection ([`Dialect`]).
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// True while a connection is up (between `on_connected` and its loss), whether or not
    /// the node has yet answered as a master ([`Snapshot::connected`] waits for that).
    pub fn is_connected(&self) -> bool {
        self.link == Link::Up
    }

    /// Connected, and the node vetted: commands may go out.
    pub(super) fn ready(&self) -> bool {
        self.link == Link::Up && !self.vetting
    }

    /// The counters, the entries in hand and buffered, and whether connected, at once.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            stats: self.stats.clone(),
            in_hand: self.in_hand.len(),
            buffered: self.buffered(),
            connected: self.ready(),
            health: self.streams[0].last_health.clone(),
            not_master: self.not_master().map(str::to_string),
            oldest_in_hand: self.oldest_in_hand(),
            caught_up: self.is_caught_up(),
        }
    }

    /// While not connected because the node reached answers as a replica (a failover's
    /// old master, a URL naming a replica): what it is, e.g. `a replica of
    /// 10.0.0.1:6379`.
    pub(super) fn not_master(&self) -> Option<&str> {
        self.told_not_master.as_deref().filter(|_| !self.ready())
    }

    /// The entry in hand the longest (handed out, not yet settled), with when it was handed
    /// out; `None` while nothing is in hand. Its [`age`](OldestInHand::age) at a time passed
    /// in tells a handler that has gone silent: the consumer renews its lease however long
    /// it takes, so the group no longer sees it. A walk of the entries in hand.
    pub fn oldest_in_hand(&self) -> Option<OldestInHand> {
        let h = self.in_hand.iter().min_by_key(|h| h.handed_at)?;
        let stream = self.streams[h.stream as usize].key.clone();
        Some(OldestInHand { stream, id: self.held.to_bytes(h.id), since: h.handed_at })
    }

    /// Brings `last` up to date; true if anything changed. For a driver that publishes
    /// snapshots only when they change (compared without copying the counters first).
    pub fn refresh_snapshot(&self, last: &mut Snapshot) -> bool {
        // The oldest entry in hand is not compared (a walk): it changes only with a hand-out
        // or a settle, which change the counters, or with the number in hand.
        let same = self.stats == last.stats
            && self.in_hand.len() == last.in_hand
            && self.buffered() == last.buffered
            && self.ready() == last.connected
            && self.streams[0].last_health == last.health
            && self.not_master() == last.not_master.as_deref()
            && self.is_caught_up() == last.caught_up;
        if !same {
            *last = self.snapshot();
        }
        !same
    }

    /// Where the next connection should go when the server is a cluster node that said the
    /// stream's slot is served elsewhere (`MOVED`), or is moving there (`ASK`: each command
    /// there then follows `ASKING`): a host as the cluster names it (empty:
    /// the host last connected to) and a port. `None`: the address configured. A connect
    /// that fails there forgets it (the configured address leads to the slot's owner again).
    pub fn redirect(&self) -> Option<(&str, u16)> {
        self.redirect.as_ref().map(|(host, port)| (host.as_str(), *port))
    }

    /// True if the driver should open a connection: at once before the first, else once
    /// `poll_timeout` has passed. False while connected, and once stopped or failed. True
    /// with a connection open, after [`stop`](Self::stop) dropped a parked one to leave the
    /// group: close it (without telling [`on_disconnected`](Self::on_disconnected)) and
    /// connect again.
    pub fn wants_connection(&self) -> bool {
        matches!(self.link, Link::Fresh | Link::Down { .. })
    }

    /// True if the driver should connect now: [`wants_connection`](Self::wants_connection)
    /// and the reconnect time (if any) has come.
    pub fn connect_due(&self, now: Instant) -> bool {
        match self.link {
            Link::Fresh => self.is_live(),
            Link::Down { retry_at } => self.is_live() && now >= retry_at,
            Link::Up | Link::Closed => false,
        }
    }

    /// True while parked: connected, nothing in hand, buffered or owed, and a blocking read
    /// for new entries in flight. It says nothing of what waits on the server: a consumer
    /// parks between batches of a backlog too. [`is_caught_up`](Self::is_caught_up) says
    /// that there is nothing more to read.
    pub fn is_parked(&self) -> bool {
        self.link == Link::Up
            && self.in_hand.is_empty()
            && self.buffer.is_empty()
            && self.staged.is_none()
            && !self.streams.iter().any(Stream::owes_settles)
            && self.in_flight.len() == 1
            && self.in_flight.parked()
    }

    /// True when nothing is left to read as of the server's last answers: parked
    /// ([`is_parked`](Self::is_parked)), every stream's own pending list drained since this
    /// connection opened, its last sweep of idle entries (`XAUTOCLAIM`) finished, and its
    /// last read of new entries short of what it asked (the server had no more). A batch job
    /// that exits once caught up has handled everything that was there when it looked (what
    /// arrives later, or goes idle at a peer later, is the next run's); a driver that
    /// stopped at [`is_parked`](Self::is_parked) instead would leave a backlog behind.
    pub fn is_caught_up(&self) -> bool {
        self.is_parked()
            && self.streams.iter().filter(|s| s.active).all(|s| {
                matches!(s.next, Next::Beat)
                    && (self.dialect.claim_in_read || &s.cursor[..] == CURSOR_START)
                    && !s.backlog
            })
    }

    /// True once `Stopped` has been produced (or is ready for `poll_event`).
    pub fn is_stopped(&self) -> bool {
        matches!(self.stop, Stop::Stopped { .. })
    }

    /// The fatal error that finished the consumer, if one did.
    pub fn error(&self) -> Option<&Error> {
        self.failed.as_ref()
    }

    pub(super) fn is_live(&self) -> bool {
        self.failed.is_none() && !self.is_stopped()
    }
}
