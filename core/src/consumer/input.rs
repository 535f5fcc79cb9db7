//! Input: bytes read from the connection, decoded and routed to the command each answers, and
//! the timer: replies overdue, acks and renewals come due.

use super::*;

impl Consumer {
    /// Bytes read from the connection. An `Err` means the connection must be closed.
    pub fn handle_input(&mut self, bytes: &[u8], now: Instant) -> Result<(), Error> {
        self.tick(now);
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.tell_dropped() {
            return Err(Error::Dropped);
        }
        if self.link != Link::Up || self.is_stopped() {
            return Ok(());
        }
        self.decoder.extend(bytes);
        while self.link == Link::Up && !self.is_stopped() {
            let (frame, len) = match self.decoder.next_within(self.config.protocol, self.budget()) {
                Ok(None) => {
                    // A read being skipped: shrink now, so that even a reconnect (the skip
                    // outlasting the reply's deadline) reads less.
                    if let Some(completed) = self.decoder.skipping() {
                        self.pace.record_oversized(completed);
                    }
                    break;
                }
                Ok(Some((Frame::Push, _))) => continue,
                Ok(Some(frame)) => {
                    self.heard = true;
                    frame
                }
                Err(e) => {
                    let limits = self.config.limits;
                    return Err(self.fail(
                        now,
                        match e {
                            // The first words on a connection, and no server ever spoke
                            // RESP to this consumer: not a Redis server at all.
                            DecodeError::Invalid(_) if !self.heard && !self.announced_before => {
                                Error::NotRedis { said: first_line(bytes) }
                            }
                            // One did: a proxy's hiccup, a node being replaced; reconnect.
                            DecodeError::Invalid(_) if !self.heard => Error::Protocol {
                                detail: format!("not a Redis server? it answered \"{}\"", first_line(bytes)),
                            },
                            e => e.into_error(limits),
                        },
                    ));
                }
            };
            let Some(cmd) = self.in_flight.pop_front() else {
                let detail = "a reply arrived for no command".to_string();
                return Err(self.fail(now, Error::Protocol { detail }));
            };
            // Begun by the time the server was done with the command ahead (or got this one);
            // done by its reply, or its longest run after that, whichever is sooner: a process
            // that stood still reads late replies, which must not make old entries look fresh.
            let began_by = self.done_by.map_or(cmd.sent_at, |at| at.max(cmd.sent_at));
            let done_by = now.min(began_by + self.longest_run(&cmd.sent));
            self.done_by = Some(done_by);
            if let Sent::Wait { .. } = cmd.sent {
                self.waited_at = Some(done_by);
            }
            let outcome = match frame {
                Frame::Reply(value) => self.on_reply(cmd.sent, value, now),
                Frame::Raw { bytes, spans } => {
                    let outcome = self.on_entries((cmd.sent, cmd.sent_at, began_by), bytes, &spans, len, now);
                    self.decoder.reuse(spans);
                    outcome
                }
                Frame::Skipped { completed } => self.on_oversized(cmd.sent, completed, now),
                Frame::Push => Ok(()),
            };
            if let Err(e) = outcome {
                return Err(self.fail(now, e));
            }
            // Stop as soon as the last owed ack is confirmed, whatever else is buffered,
            // so that how the bytes were split cannot matter.
            self.finish_stop_if_clear();
        }
        self.pump(now);
        self.failed.clone().map_or(Ok(()), Err)
    }

    /// Call when `poll_timeout` has passed. A reply overdue past its deadline is an
    /// [`Error::Timeout`]: the connection must be closed. Otherwise sends what has come due:
    /// acks past [`Config::ack_delay`], lease renewals.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), Error> {
        self.tick(now);
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.tell_dropped() {
            return Err(Error::Dropped);
        }
        if self.link == Link::Up {
            let late = self.in_flight.iter().find(|c| c.deadline <= now).map(|c| c.sent.command());
            if let Some(command) = late {
                return Err(self.fail(now, Error::Timeout { command }));
            }
            if self.ack_due.is_some_and(|due| due <= now) {
                self.flush_acks(now);
            }
            self.renew_leases(now);
            self.pump(now);
        }
        self.failed.clone().map_or(Ok(()), Err)
    }

    /// Whether the consumer dropped the connection and the driver is yet to hear of it
    /// (then it has).
    pub(super) fn tell_dropped(&mut self) -> bool {
        let untold = self.dropped == Some(false) && matches!(self.link, Link::Down { .. });
        if untold {
            self.dropped = Some(true);
        }
        untold
    }
}

/// The first line of what a server said (at most 60 bytes), escaped, for a message.
fn first_line(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|b| *b == b'\r' || *b == b'\n').unwrap_or(bytes.len()).min(60);
    bytes[..end].escape_ascii().to_string()
}
