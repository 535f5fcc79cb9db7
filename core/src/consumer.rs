//! The consumer-group loop as a state machine: drain own pending list, reclaim idle entries,
//! park for new ones, settle each by the application's verdict.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::{Bytes, BytesMut};

use crate::backoff::Backoff;
use crate::config::{Config, ConfigError, GroupGone, Protocol};
use crate::decode::{DecodeError, Decoder, Frame, Value};
use crate::encode::{command, Decimal};
use crate::entry::{Entry, Source, Verdict};
use crate::error::{is_group_gone, is_transient, Command, Error};
use crate::reply::{self, RawEntry};
use crate::stats::Stats;

/// What the consumer has to tell its driver.
#[derive(Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// An entry for the application. It is *in hand* until [`Consumer::settle`] is called;
    /// no other entry is handed out meanwhile.
    Entry(Entry),
    /// [`Consumer::stop`] has been honored: no entry is in hand and every earned ack is
    /// confirmed (or [`Consumer::abandon`] gave them up). Close the connection; the consumer
    /// does nothing more.
    Stopped,
}

/// A consumer-group consumer without I/O.
///
/// # Driving it
///
/// The driver owns the socket and the clock. Methods fall in four groups:
///
/// - **Connection**: [`on_connected`](Self::on_connected) when a fresh connection is up,
///   [`on_disconnected`](Self::on_disconnected) when it is lost or a connect attempt failed.
/// - **Input**: [`handle_input`](Self::handle_input) with bytes read from the socket,
///   [`handle_timeout`](Self::handle_timeout) when [`poll_timeout`](Self::poll_timeout) passes.
/// - **Application**: [`settle`](Self::settle) with the verdict on the entry in hand,
///   [`stop`](Self::stop) to finish, [`abandon`](Self::abandon) to finish without waiting on
///   the server.
/// - **Output**: [`poll_transmit`](Self::poll_transmit) / [`advance_transmit`](Self::advance_transmit)
///   for bytes to write, [`poll_event`](Self::poll_event) for entries and `Stopped`,
///   [`poll_timeout`](Self::poll_timeout) for the next deadline.
///
/// After every call of the first three groups the driver MUST drain the outputs: write what
/// `poll_transmit` gives, handle every `poll_event`, and re-arm its timer from `poll_timeout`.
///
/// An `Err` from `handle_input` or `handle_timeout` means the connection is done: the driver
/// MUST close it. If [`Error::is_fatal`] is false the consumer has already scheduled a
/// reconnect for `poll_timeout`; a fatal error is sticky and returned again by later calls.
#[derive(Debug)]
pub struct Consumer {
    config: Config,
    link: Link,
    out: BytesMut,
    decoder: Decoder,
    in_flight: VecDeque<InFlight>,
    next: Next,
    /// Entries read and not yet handed out; dropped (they stay pending) on stop or link loss.
    buffer: VecDeque<Entry>,
    /// Id of the entry the application holds.
    in_hand: Option<Bytes>,
    /// Acks earned and not yet written; written before the next read.
    acks: Vec<Bytes>,
    /// Where the next `XAUTOCLAIM` continues.
    cursor: Bytes,
    /// When the next reclaim is due; `None` is now.
    claim_at: Option<Instant>,
    stop: Stop,
    failed: Option<Error>,
    backoff: Backoff,
    connected_before: bool,
    /// The latest time passed in, for `stop`, which takes none.
    last_now: Option<Instant>,
    stats: Stats,
}

#[derive(Debug, PartialEq, Eq)]
enum Link {
    /// Never connected: connect now.
    Fresh,
    Up,
    /// Lost: connect again at `retry_at`.
    Down {
        retry_at: Instant,
    },
    /// Stopped or failed: no point in connecting.
    Closed,
}

/// The read to send once the entries in hand are settled.
#[derive(Debug)]
enum Next {
    /// A page of the own pending list after this id.
    Drain { after: Bytes },
    /// Reclaim if due, else park.
    Beat,
}

#[derive(Debug, PartialEq, Eq)]
enum Stop {
    Running,
    Stopping,
    Stopped { reported: bool },
}

#[derive(Debug)]
struct InFlight {
    sent: Sent,
    deadline: Instant,
}

/// A command in flight and what its reply needs.
#[derive(Debug)]
enum Sent {
    Handshake(Command),
    CreateGroup,
    Ack(Vec<Bytes>),
    ReadPending,
    Claim,
    ReadNew,
}

impl Sent {
    fn command(&self) -> Command {
        match self {
            Sent::Handshake(c) => *c,
            Sent::CreateGroup => Command::CreateGroup,
            Sent::Ack(_) => Command::Ack,
            Sent::ReadPending => Command::ReadPending,
            Sent::Claim => Command::Claim,
            Sent::ReadNew => Command::ReadNew,
        }
    }

    fn is_read(&self) -> bool {
        matches!(self, Sent::ReadPending | Sent::Claim | Sent::ReadNew)
    }
}

const CURSOR_START: &[u8] = b"0-0";

impl Consumer {
    /// A consumer, disconnected: connect, then call [`on_connected`](Self::on_connected).
    pub fn new(config: Config) -> Result<Consumer, ConfigError> {
        config.validate()?;
        Ok(Consumer {
            decoder: Decoder::new(config.limits),
            backoff: Backoff::new(config.backoff_min, config.backoff_max, config.seed),
            config,
            link: Link::Fresh,
            out: BytesMut::with_capacity(4096),
            in_flight: VecDeque::new(),
            next: Next::Drain { after: Bytes::from_static(b"0") },
            buffer: VecDeque::new(),
            in_hand: None,
            acks: Vec::new(),
            cursor: Bytes::from_static(CURSOR_START),
            claim_at: None,
            stop: Stop::Running,
            failed: None,
            connected_before: false,
            last_now: None,
            stats: Stats::default(),
        })
    }

    // ---- getters ------------------------------------------------------------------------

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Counters since creation.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Id of the entry the application holds, if any.
    pub fn in_hand(&self) -> Option<&Bytes> {
        self.in_hand.as_ref()
    }

    /// True while a connection is up (between `on_connected` and its loss).
    pub fn is_connected(&self) -> bool {
        self.link == Link::Up
    }

    /// True if the driver should open a connection: at once before the first, else once
    /// `poll_timeout` has passed. False while connected, and once stopped or failed.
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

    /// True while parked: connected, caught up (nothing in hand, buffered or owed), waiting
    /// on the blocking read for new entries. A stop now ends at once.
    pub fn is_parked(&self) -> bool {
        self.link == Link::Up
            && self.in_hand.is_none()
            && self.buffer.is_empty()
            && self.acks.is_empty()
            && self.in_flight.len() == 1
            && matches!(self.in_flight[0].sent, Sent::ReadNew)
    }

    /// True once `Stopped` has been produced (or is ready for `poll_event`).
    pub fn is_stopped(&self) -> bool {
        matches!(self.stop, Stop::Stopped { .. })
    }

    /// The fatal error that finished the consumer, if one did.
    pub fn error(&self) -> Option<&Error> {
        self.failed.as_ref()
    }

    fn is_live(&self) -> bool {
        self.failed.is_none() && !self.is_stopped()
    }

    // ---- connection ---------------------------------------------------------------------

    /// A fresh connection is up. Queues the handshake, the group door, acks still owed and
    /// the drain of the own pending list from the start: whatever this consumer held before
    /// (a crash, a lost connection) is handed out again at once.
    pub fn on_connected(&mut self, now: Instant) {
        self.last_now = Some(now);
        if !self.is_live() {
            return;
        }
        self.reset_link();
        if self.connected_before {
            self.stats.reconnects += 1;
        }
        self.connected_before = true;
        self.link = Link::Up;
        self.handshake(now);
        if self.config.create_group.is_some() && self.stop == Stop::Running {
            self.send(Sent::CreateGroup, now);
        }
        self.restart_drain();
        self.pump(now);
    }

    /// The connection was lost, or an attempt to connect failed. Commands in flight are
    /// forgotten (acks among them are kept and sent again: `XACK` is idempotent); entries
    /// read but not handed out stay pending on the server. A reconnect is scheduled.
    ///
    /// After an `Err` from `handle_input`/`handle_timeout` the consumer has already done
    /// this; calling it again before the scheduled reconnect time changes nothing.
    pub fn on_disconnected(&mut self, now: Instant) {
        self.last_now = Some(now);
        let scheduled = matches!(self.link, Link::Down { retry_at } if now < retry_at);
        if self.is_live() && !scheduled {
            self.lose_link(now);
        }
    }

    // ---- input --------------------------------------------------------------------------

    /// Bytes read from the connection. An `Err` means the connection must be closed.
    pub fn handle_input(&mut self, bytes: &[u8], now: Instant) -> Result<(), Error> {
        self.last_now = Some(now);
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.link != Link::Up || self.is_stopped() {
            return Ok(());
        }
        self.decoder.extend(bytes);
        while self.link == Link::Up && !self.is_stopped() {
            let value = match self.decoder.next(self.config.protocol) {
                Ok(None) => break,
                Ok(Some(Frame::Push)) => continue,
                Ok(Some(Frame::Reply(value))) => value,
                Err(e) => {
                    let limits = self.config.limits;
                    return Err(self.fail(
                        now,
                        match e {
                            DecodeError::Invalid(detail) => Error::Protocol { detail },
                            DecodeError::TooLarge => Error::FrameTooLarge { limit: limits.max_frame },
                            DecodeError::TooDeep => Error::TooDeep { limit: limits.max_depth },
                        },
                    ));
                }
            };
            let Some(cmd) = self.in_flight.pop_front() else {
                let detail = "a reply arrived for no command".to_string();
                return Err(self.fail(now, Error::Protocol { detail }));
            };
            if let Err(e) = self.on_reply(cmd.sent, value, now) {
                return Err(self.fail(now, e));
            }
            // Stop as soon as the last owed ack is confirmed, whatever else is buffered,
            // so that how the bytes were split cannot matter.
            self.finish_stop_if_clear();
        }
        self.pump(now);
        Ok(())
    }

    /// Call when `poll_timeout` has passed. A reply overdue past its deadline is an
    /// [`Error::Timeout`]: the connection must be closed.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), Error> {
        self.last_now = Some(now);
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.link == Link::Up {
            if let Some(late) = self.in_flight.iter().find(|c| c.deadline <= now) {
                let command = late.sent.command();
                return Err(self.fail(now, Error::Timeout { command }));
            }
        }
        Ok(())
    }

    // ---- application --------------------------------------------------------------------

    /// The application's verdict on the entry in hand (from the last [`Event::Entry`]).
    /// `Ack` earns an `XACK`, written before the next read; `Retry` leaves it pending.
    /// Without an entry in hand this does nothing. `now` is the time of the settle (after
    /// the handler ran), which dates the commands it sends.
    pub fn settle(&mut self, verdict: Verdict, now: Instant) {
        self.last_now = Some(now);
        let Some(id) = self.in_hand.take() else { return };
        match verdict {
            Verdict::Ack => self.acks.push(id),
            Verdict::Retry => self.stats.retried += 1,
        }
        self.pump(now);
    }

    /// Asks the consumer to stop. Honored between entries: the entry in hand is settled
    /// first, earned acks are sent and confirmed, then [`Event::Stopped`] comes out. Entries
    /// read but not handed out stay pending. Parked with nothing owed, it stops at once.
    pub fn stop(&mut self) {
        if self.stop == Stop::Running && self.is_live() {
            self.stop = Stop::Stopping;
            self.buffer.clear();
            // Acks settled mid-batch wait for the batch's end; the batch ends here.
            match self.last_now {
                Some(now) => self.pump(now),
                None => self.finish_stop_if_clear(),
            }
        }
    }

    /// Stops at once, without waiting on the server: for a stop that cannot wait, e.g. while
    /// the server is unreachable and [`stop`](Self::stop) would wait to confirm owed acks.
    /// The entry in hand, if any, is left unsettled (a later [`settle`](Self::settle) does
    /// nothing) and acks not yet confirmed are given up, counted in
    /// [`Stats::abandoned_acks`]: their entries stay pending on the server and come again, to
    /// this consumer's drain when it restarts or to a peer's reclaim. Nothing is lost; some
    /// entries may be handled twice. [`Event::Stopped`] comes out next; close the connection.
    pub fn abandon(&mut self) {
        if !self.is_live() {
            return;
        }
        self.reset_link(); // acks in flight join the owed ones
        self.stats.abandoned_acks += self.acks.len() as u64;
        self.acks.clear();
        self.buffer.clear();
        self.in_hand = None;
        self.link = Link::Closed;
        self.stop = Stop::Stopped { reported: false };
    }

    // ---- output -------------------------------------------------------------------------

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
    }

    /// The next event: an entry to handle (only when none is in hand) or `Stopped`.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        if self.failed.is_some() {
            return None;
        }
        if self.stop == (Stop::Stopped { reported: false }) {
            self.stop = Stop::Stopped { reported: true };
            return Some(Event::Stopped);
        }
        if self.stop != Stop::Running || self.in_hand.is_some() {
            return None;
        }
        let entry = self.buffer.pop_front()?;
        match entry.source {
            Source::Pending => self.stats.drained += 1,
            Source::Claimed => self.stats.claimed += 1,
            Source::New => self.stats.new += 1,
        }
        self.in_hand = Some(entry.id.clone());
        Some(Event::Entry(entry))
    }

    /// The next deadline: while connected, the earliest a reply is overdue; while
    /// disconnected, when to connect again. `None`: no deadline (finished, or waiting on the
    /// application only).
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if !self.is_live() {
            return None;
        }
        match self.link {
            Link::Up => self.in_flight.iter().map(|c| c.deadline).min(),
            Link::Down { retry_at } => Some(retry_at),
            Link::Fresh | Link::Closed => None,
        }
    }

    // ---- internals ----------------------------------------------------------------------

    /// Decides what to send next; called after anything that may change the answer.
    fn pump(&mut self, now: Instant) {
        if self.stop == Stop::Stopping && self.in_hand.is_none() {
            // Owed acks go out if the link is up; with nothing owed the stop ends, link or not.
            if self.link == Link::Up {
                self.flush_acks(now);
            }
            self.finish_stop_if_clear();
            return;
        }
        if self.link != Link::Up || !self.is_live() || self.in_hand.is_some() {
            return;
        }
        if !self.buffer.is_empty() || self.in_flight.iter().any(|c| c.sent.is_read()) {
            return;
        }
        self.flush_acks(now);
        let read = match &self.next {
            Next::Drain { .. } => Sent::ReadPending,
            Next::Beat if self.claim_at.map_or(true, |at| now >= at) => Sent::Claim,
            Next::Beat => Sent::ReadNew,
        };
        self.send(read, now);
    }

    fn finish_stop_if_clear(&mut self) {
        let owed = !self.acks.is_empty() || self.in_flight.iter().any(|c| matches!(c.sent, Sent::Ack(_)));
        if self.stop == Stop::Stopping && self.in_hand.is_none() && !owed {
            self.stop = Stop::Stopped { reported: false };
            self.reset_link();
            self.link = Link::Closed;
        }
    }

    fn flush_acks(&mut self, now: Instant) {
        if !self.acks.is_empty() {
            let ids = std::mem::take(&mut self.acks);
            self.send(Sent::Ack(ids), now);
        }
    }

    fn restart_drain(&mut self) {
        self.next = Next::Drain { after: Bytes::from_static(b"0") };
        self.claim_at = None;
    }

    /// Forgets the connection's state, keeping acks owed.
    fn reset_link(&mut self) {
        for c in self.in_flight.drain(..) {
            if let Sent::Ack(ids) = c.sent {
                self.acks.extend(ids);
            }
        }
        self.out.clear();
        self.decoder.reset();
    }

    fn lose_link(&mut self, now: Instant) {
        self.reset_link();
        self.buffer.clear();
        self.link = Link::Down { retry_at: now + self.backoff.next_delay() };
        self.finish_stop_if_clear();
    }

    /// Records an error; returns it for the caller to pass on.
    fn fail(&mut self, now: Instant, error: Error) -> Error {
        self.stats.errors += 1;
        if error.is_fatal() {
            self.failed = Some(error.clone());
            self.reset_link();
            self.buffer.clear();
            self.link = Link::Closed;
        } else {
            self.lose_link(now);
        }
        error
    }

    fn on_reply(&mut self, sent: Sent, value: Value, now: Instant) -> Result<(), Error> {
        let command = sent.command();
        if let Value::Error(message) = &value {
            return self.on_error_reply(command, message, now);
        }
        if self.stop != Stop::Running && sent.is_read() {
            // Entries read after a stop was asked stay pending, untouched.
            return Ok(());
        }
        let shape = |e: reply::ShapeError| Error::Shape { command, detail: e.0 };
        match sent {
            Sent::Handshake(_) | Sent::CreateGroup => reply::ok(value).map_err(shape)?,
            Sent::Ack(ids) => {
                let n = reply::count(value).map_err(shape)?;
                self.stats.acked += n;
                // 0 for an id means a peer reclaimed and acked it first: a signal, not an error.
                self.stats.lost_to_peer += (ids.len() as u64).saturating_sub(n);
            }
            Sent::ReadPending => {
                let entries = reply::read(value).map_err(shape)?;
                self.backoff.reset();
                // The drain pages forward by the last id, so an entry left pending by a
                // failing handler cannot spin it; an empty page ends it.
                self.next = match entries.last() {
                    Some(last) => Next::Drain { after: last.id.clone() },
                    None => Next::Beat,
                };
                self.take(entries, Source::Pending);
            }
            Sent::Claim => {
                let claim = reply::autoclaim(value).map_err(shape)?;
                self.backoff.reset();
                self.stats.deleted_seen += claim.deleted.len() as u64;
                let sweeping = !claim.claimed.is_empty() && claim.cursor != CURSOR_START;
                // Carry the cursor across beats; `0-0` starts the next sweep from the top.
                self.cursor = claim.cursor;
                self.claim_at = if sweeping { None } else { Some(now + self.config.beat) };
                self.take(claim.claimed, Source::Claimed);
                if claim.bare_nils > 0 {
                    // Redis 6.2 moved deleted entries' ids into our pending list without
                    // naming them: drain it to see them as `[id, nil]` and ack them away.
                    self.next = Next::Drain { after: Bytes::from_static(b"0") };
                }
            }
            Sent::ReadNew => {
                let entries = reply::read(value).map_err(shape)?;
                self.backoff.reset();
                self.take(entries, Source::New);
            }
        }
        Ok(())
    }

    fn on_error_reply(&mut self, command: Command, message: &Bytes, now: Instant) -> Result<(), Error> {
        let text = || String::from_utf8_lossy(message).into_owned();
        if command == Command::CreateGroup && message.starts_with(b"BUSYGROUP") {
            return Ok(());
        }
        let is_read = matches!(command, Command::ReadPending | Command::Claim | Command::ReadNew);
        if is_read && is_group_gone(message) {
            return match self.config.on_group_gone {
                GroupGone::Fail => Err(Error::GroupGone { command, message: text() }),
                GroupGone::Recreate => {
                    self.stats.group_recreated += 1;
                    self.send(Sent::CreateGroup, now);
                    self.cursor = Bytes::from_static(CURSOR_START);
                    self.restart_drain();
                    Ok(())
                }
            };
        }
        if is_transient(message) {
            return Err(Error::Unavailable { command, message: text() });
        }
        Err(Error::Server { command, message: text() })
    }

    /// Buffers entries for the application; deleted ones (`[id, nil]`) cannot be processed,
    /// so they are acked away and counted, never handed out.
    fn take(&mut self, entries: Vec<RawEntry>, source: Source) {
        for RawEntry { id, fields } in entries {
            match fields {
                Some(fields) => self.buffer.push_back(Entry { id, fields, source }),
                None => {
                    self.stats.deleted_seen += 1;
                    self.acks.push(id);
                }
            }
        }
    }

    fn handshake(&mut self, now: Instant) {
        let c = &self.config;
        let mut sent = Vec::with_capacity(3);
        let user = |a: &crate::config::Auth| a.user.clone().unwrap_or_else(|| Bytes::from_static(b"default"));
        match c.protocol {
            Protocol::Resp3 => {
                let mut args: Vec<Bytes> = vec![Bytes::from_static(b"HELLO"), Bytes::from_static(b"3")];
                if let Some(auth) = &c.auth {
                    args.extend([Bytes::from_static(b"AUTH"), user(auth), auth.password.clone()]);
                }
                if let Some(name) = &c.client_name {
                    args.extend([Bytes::from_static(b"SETNAME"), name.clone()]);
                }
                let refs: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
                command(&mut self.out, &refs);
                sent.push(Command::Hello);
            }
            Protocol::Resp2 => {
                if let Some(auth) = &c.auth {
                    match &auth.user {
                        Some(u) => command(&mut self.out, &[b"AUTH", u, &auth.password]),
                        None => command(&mut self.out, &[b"AUTH", &auth.password]),
                    }
                    sent.push(Command::Auth);
                }
                if let Some(name) = &c.client_name {
                    command(&mut self.out, &[b"CLIENT", b"SETNAME", name]);
                    sent.push(Command::SetName);
                }
            }
        }
        if c.db != 0 {
            command(&mut self.out, &[b"SELECT", Decimal::new(c.db.into()).as_bytes()]);
            sent.push(Command::Select);
        }
        for command in sent {
            self.track(Sent::Handshake(command), now);
        }
    }

    /// Encodes a command (handshake aside) and tracks it.
    fn send(&mut self, sent: Sent, now: Instant) {
        let c = &self.config;
        let count = Decimal::new(c.count.into());
        let out = &mut self.out;
        match &sent {
            // Encoded by `handshake`: its arguments depend on the protocol and credentials.
            Sent::Handshake(_) => {}
            Sent::CreateGroup => {
                let start = c.create_group.as_deref().unwrap_or(b"$");
                command(out, &[b"XGROUP", b"CREATE", &c.stream, &c.group, start, b"MKSTREAM"]);
            }
            Sent::Ack(ids) => {
                let mut args: Vec<&[u8]> = Vec::with_capacity(3 + ids.len());
                args.extend([&b"XACK"[..], &c.stream, &c.group]);
                args.extend(ids.iter().map(|id| &id[..]));
                command(out, &args);
            }
            Sent::ReadPending => {
                let after = match &self.next {
                    Next::Drain { after } => &after[..],
                    Next::Beat => b"0",
                };
                let args: [&[u8]; 9] = [
                    b"XREADGROUP",
                    b"GROUP",
                    &c.group,
                    &c.consumer,
                    b"COUNT",
                    count.as_bytes(),
                    b"STREAMS",
                    &c.stream,
                    after,
                ];
                command(out, &args);
            }
            Sent::Claim => {
                let idle = Decimal::new(c.min_idle.as_millis() as u64);
                let args: [&[u8]; 8] = [
                    b"XAUTOCLAIM",
                    &c.stream,
                    &c.group,
                    &c.consumer,
                    idle.as_bytes(),
                    &self.cursor,
                    b"COUNT",
                    count.as_bytes(),
                ];
                command(out, &args);
            }
            Sent::ReadNew => {
                let block = Decimal::new(c.beat.as_millis() as u64);
                let args: [&[u8]; 11] = [
                    b"XREADGROUP",
                    b"GROUP",
                    &c.group,
                    &c.consumer,
                    b"COUNT",
                    count.as_bytes(),
                    b"BLOCK",
                    block.as_bytes(),
                    b"STREAMS",
                    &c.stream,
                    b">",
                ];
                command(out, &args);
            }
        }
        self.track(sent, now);
    }

    fn track(&mut self, sent: Sent, now: Instant) {
        // A parked read answers after up to `beat`; anything else at once.
        let wait = match sent {
            Sent::ReadNew => self.config.beat + self.config.read_grace,
            _ => self.config.read_grace,
        };
        self.in_flight.push_back(InFlight { sent, deadline: now + wait });
    }
}
