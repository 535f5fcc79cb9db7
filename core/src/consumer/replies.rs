//! The replies that are not entries: the handshake's (dialect, role), the group's health,
//! twins, errors and cluster redirects.

use super::*;

impl Consumer {
    /// Tells [`Notice::Connected`] for this connection.
    pub(super) fn announce(&mut self) {
        if self.leaving_link {
            return; // the connection a stop opened to leave the group: nothing to tell
        }
        let reconnect = self.announced_before;
        self.notices.push_back(Notice::Connected { reconnect, dialect: self.dialect });
        self.announced_before = true;
    }

    /// The server's `HELLO` answered (`None`: it did not): the verbs spoken from now on, and
    /// whether the node is a master.
    pub(super) fn learn_hello(&mut self, hello: Option<Hello>, now: Instant) -> Result<(), Error> {
        let hello = hello.unwrap_or_default();
        if hello.mode.as_deref() == Some(b"sentinel") {
            return Err(Error::IsSentinel); // before anything is sent to it as to a data node
        }
        let (dialect, server) = match &hello.server {
            Some((server, version)) => (
                Dialect::of(server, version),
                format!("{} {}", String::from_utf8_lossy(server), String::from_utf8_lossy(version)),
            ),
            None => (Dialect::CLASSIC, "a server that does not answer HELLO".to_string()),
        };
        self.dialect = if self.config.classic_verbs { Dialect::CLASSIC } else { dialect };
        let cluster = hello.mode.as_deref() == Some(b"cluster");
        self.cluster = cluster;
        self.server = server;
        if self.config.delete_acked.is_some() && !dialect.ack_delete {
            let (feature, needs) = ("deleting acked entries", "XACKDEL (Redis 8.2 or later)");
            return Err(Error::Unsupported { feature, needs, server: self.server.clone() });
        }
        let waits_aof = hello.server.as_ref().is_some_and(|(s, v)| crate::dialect::waits_aof(s, v));
        if matches!(self.config.ack_wait, Some(AckWait::Aof { .. })) && !waits_aof {
            let (feature, needs) =
                ("waiting for acks to reach append-only files", "WAITAOF (Redis 7.2 or later, or Valkey)");
            return Err(Error::Unsupported { feature, needs, server: self.server.clone() });
        }
        if hello.is_standalone_replica() {
            // Asked only to name its master (`ROLE` needs `@admin`; refused, it goes unnamed).
            crate::encode::command(&mut self.out, &[b"ROLE"]);
            self.track(Sent::Role, now);
            return Ok(());
        }
        self.open(now);
        Ok(())
    }

    /// A replica's `ROLE` (or its refusal): the connection is not one to read from. Told
    /// once for each master it names (a master already, it is read from after all).
    pub(super) fn on_role(&mut self, role: Role, now: Instant) -> Result<(), Error> {
        if role == Role::Master {
            // Promoted between the two answers.
            self.open(now);
            return Ok(());
        }
        Err(Error::NotMaster { role: role.to_string() })
    }

    /// Asks after the group's health when it is due — never behind a parked read, which
    /// would hold the answers for up to a beat.
    pub(super) fn ask_health(&mut self, now: Instant) {
        let Some(every) = self.config.health_every.filter(|_| !self.health_refused) else { return };
        if self.health.is_some() || self.in_flight.parked() || !self.read_answered {
            return;
        }
        // One stream at a time, the one longest due.
        let due = self
            .streams
            .iter()
            .enumerate()
            .filter(|(_, s)| s.active && s.health_at.map_or(true, |at| now >= at));
        let Some((s, _)) = due.min_by_key(|(_, s)| s.health_at) else { return };
        self.streams[s].health_at = Some(now + every);
        self.health = Some((s as u32, GroupHealth::default()));
        // The dead-letter stream's length, for the alert that matters most: work given up.
        let dead_letters = self.config.dead_letter.is_some() && !self.dead_letters_refused;
        for part in [HealthPart::Groups, HealthPart::Oldest, HealthPart::DeadLetters, HealthPart::Time] {
            if part == HealthPart::DeadLetters && !dead_letters {
                continue;
            }
            commands::health(&mut self.out, &self.config, &self.streams[s].key, part);
            self.track(Sent::Health(s as u32, part), now);
        }
    }

    /// Whether this consumer looks for twins: it has a name to look for, and may not share it.
    pub(super) fn checks_twins(&self) -> bool {
        !self.config.allow_twins && self.config.client_name.is_some() && !self.twins.refused()
    }

    /// `CLIENT ID` and `CLIENT LIST`: until vetted, no read goes out before the answer.
    pub(super) fn look_for_twins(&mut self, now: Instant) {
        let Some(first) = self.twins.start(now, self.config.min_idle) else { return };
        commands::twins(&mut self.out);
        self.track(Sent::Twins { list: false, first }, now);
        self.track(Sent::Twins { list: true, first }, now);
    }

    /// The `CLIENT LIST` answer (see [`Twins::on_list`]).
    pub(super) fn on_twins(&mut self, value: Value, first: bool, now: Instant) -> Result<(), Error> {
        let clients =
            reply::client_list(value).map_err(|e| Error::Shape { command: Command::Twins, detail: e.0 })?;
        let name = self.config.client_name.clone().unwrap_or_default();
        let live = self.config.beat * 2 + self.config.read_grace;
        match self.twins.on_list(clients, &name, live, first, now, self.config.min_idle)? {
            // Looked for again a little later (`pump`); nothing is read meanwhile.
            Outcome::Done | Outcome::LookAgain => {}
            Outcome::Tell(notices) => self.notices.extend(notices),
        }
        Ok(())
    }

    /// One of the three health replies; the last completes the notice. A reply of another
    /// shape drops this round (health is for watching, not worth a connection).
    pub(super) fn on_health(&mut self, part: HealthPart, value: Value, now: Instant) {
        let Some((s, mut health)) = self.health.take() else { return };
        match part {
            HealthPart::Groups => match reply::group_info(value, &self.config.group) {
                Ok(Some(group)) => {
                    (health.pending, health.lag, health.consumers) =
                        (group.pending, group.lag, group.consumers);
                    if let (Some(1..), Some(last)) = (group.lag, &group.last_delivered) {
                        // Checked: a server may keep a wrong count (Redis 7.0 after a
                        // failover, see `on_beyond`).
                        commands::beyond(&mut self.out, &self.streams[s as usize].key, last);
                        self.track(Sent::Health(s, HealthPart::Beyond), now);
                        self.lag_checked = Some(false);
                    }
                }
                _ => return,
            },
            HealthPart::Oldest => match reply::oldest_pending(value) {
                Ok(oldest) => {
                    health.oldest = oldest.map(|(id, held, deliveries)| OldestPending {
                        id,
                        age: Duration::ZERO,
                        idle: held.as_ref().map(|(_, idle)| Duration::from_millis(*idle)),
                        deliveries,
                        owner: held.map(|(owner, _)| owner),
                    })
                }
                Err(_) => return,
            },
            HealthPart::DeadLetters => match value {
                Value::Int(n) if n >= 0 => health.dead_letters = Some(n as u64),
                _ => return,
            },
            HealthPart::Time => {
                let Ok(now_ms) = reply::time_ms(value) else { return };
                if let Some(oldest) = &mut health.oldest {
                    // An id's first part is the time it was added, in ms since the epoch.
                    let id_ms = oldest
                        .id
                        .split(|b| *b == b'-')
                        .next()
                        .and_then(|ms| std::str::from_utf8(ms).ok()?.parse::<u64>().ok());
                    oldest.age = Duration::from_millis(now_ms.saturating_sub(id_ms.unwrap_or(now_ms)));
                }
                if self.lag_checked == Some(false) {
                    self.lag_checked = Some(true); // told once the check answers
                    self.health = Some((s, health));
                    return;
                }
                self.tell_health(s, health);
                return;
            }
            HealthPart::Beyond => {
                // The server counts entries the group has not read: with none past its
                // last-delivered id, a lag above zero is a count gone wrong. Redis 7.0's
                // replicas do not keep the group's read count (`entries-read`; later servers
                // replicate it), so after a failover it can stay behind for good. Unknown
                // is true; a wrong figure would feed alerts and autoscalers.
                if reply::is_empty(&value) {
                    health.lag = None;
                }
                self.lag_checked = None;
                self.tell_health(s, health);
                return;
            }
        }
        self.health = Some((s, health));
    }

    fn tell_health(&mut self, s: u32, health: GroupHealth) {
        self.streams[s as usize].last_health = Some(health.clone());
        self.notices.push_back(Notice::Health(health));
    }

    /// How large the reply at the front may grow: reads asking for several entries are held
    /// to `read_bytes` (and skipped past it), a single entry to `max_frame`.
    pub(super) fn budget(&self) -> Budget {
        let max_frame = self.config.limits.max_frame;
        // Depth of the entry list: `[[key, entries]]` in RESP2, `{key: entries}` in RESP3;
        // `[cursor, entries, …]` for XAUTOCLAIM.
        let depth = match self.config.protocol {
            Protocol::Resp2 => 2,
            Protocol::Resp3 => 1,
        };
        let (many, depth) = match self.in_flight.front().map(|c| &c.sent) {
            Some(Sent::ReadPending { count, .. }) => (*count > 1, depth),
            Some(Sent::ReadNew { count, streams, .. }) => (*count > 1 || streams.len() > 1, depth),
            Some(Sent::Claim { count, .. }) => (*count > 1, 1),
            _ => return Budget { bytes: max_frame, skip: None, raw: false },
        };
        let bytes = if many { self.config.read_bytes } else { max_frame };
        Budget { bytes, skip: Some(depth), raw: true }
    }

    pub(super) fn on_reply(&mut self, sent: Sent, value: Value, now: Instant) -> Result<(), Error> {
        let command = sent.command();
        if let Sent::Discard(_) = sent {
            return Ok(());
        }
        if let Value::Error(message) = &value {
            return self.on_error_reply(sent, message, now);
        }
        if self.stop != Stop::Running && matches!(sent, Sent::FindTooLarge(_)) {
            return Ok(());
        }
        let shape = |e: reply::ShapeError| Error::Shape { command, detail: e.0 };
        match sent {
            Sent::Handshake(Command::Hello | Command::ServerInfo) if self.vetting => {
                // A map without a server and version (a proxy's?): the classic verbs.
                self.learn_hello(reply::hello_fields(value), now)?;
            }
            Sent::Role => return self.on_role(reply::role(value).map_err(shape)?, now),
            Sent::Wait { acks } => self.on_wait(acks, value).map_err(shape)?,
            Sent::Replicas => self.on_replicas(value).map_err(shape)?,
            Sent::Handshake(_) => reply::ok(value).map_err(shape)?,
            Sent::CreateGroup(s) => {
                reply::ok(value).map_err(shape)?;
                // Created, not found there (`BUSYGROUP`): after a first time, it was gone (a
                // parked read's `UNBLOCKED … no longer exists` leads here on Redis 7.0).
                let stream = &mut self.streams[s as usize];
                if stream.group_made {
                    self.stats.group_recreated += 1;
                    stream.stats.group_recreated += 1;
                    let start = match stream.added {
                        true => {
                            self.config.create_added_group.clone().unwrap_or_else(|| Bytes::from_static(b"0"))
                        }
                        false => self.config.create_group.clone().unwrap_or_default(),
                    };
                    let last_read = stream.last_read.clone();
                    self.notices.push_back(Notice::GroupRecreated { start, last_read });
                }
                stream.group_made = true;
            }
            Sent::Discard(_) => {}
            Sent::Release { .. } => self.stats.released += reply::count(value).map_err(shape)?,
            Sent::Ack(s, mut acks) => {
                let n = match self.deletes_acked() {
                    true => reply::acked_deleted(value),
                    false => reply::count(value),
                }
                .map_err(shape)?;
                self.stats.acked += n;
                self.streams[s as usize].stats.acked += n;
                // 0 for an id means it was no longer pending: a peer reclaimed and acked it
                // first if one could have, else the server forgot it. A signal, not an error.
                let uncounted = (acks.len() as u64).saturating_sub(n);
                let to_peer = uncounted.min(acks.exposed() as u64);
                self.stats.lost_to_peer += to_peer;
                self.stats.acks_unmatched += uncounted - to_peer;
                if self.ack_pool.len() < 4 {
                    acks.clear();
                    self.ack_pool.push(acks);
                }
            }
            Sent::ReadPending { .. } | Sent::Claim { .. } | Sent::ReadNew { .. } => {
                return Err(shape(reply::ShapeError("a read answered with neither entries nor an error")));
            }
            Sent::Counts { count, .. } => {
                let counts = reply::pending_counts(value).map_err(shape)?;
                self.join_counts(counts, count, now);
            }
            Sent::Lease(s, ids) => {
                let kept = reply::ids(value).map_err(shape)?;
                self.on_lease(s, ids, kept, now);
            }
            Sent::GiveBack => {}
            Sent::Park(s, park) => self.on_park(s, park, value, now).map_err(shape)?,
            Sent::Held { stream, count, since } => {
                let rows = reply::pending(value).map_err(shape)?;
                self.on_held(stream, count, since, rows, now);
            }
            Sent::Health(_, part) => self.on_health(part, value, now),
            Sent::Twins { list: false, .. } => self.twins.own_id(reply::int(value).map_err(shape)?),
            Sent::Twins { list: true, first } => return self.on_twins(value, first, now),
            Sent::DeadLetterCheck | Sent::CommitCheck => {
                reply::int(value).map_err(shape)?;
            }
            Sent::ScriptLoad => {
                self.script = Some(reply::string(value).map_err(shape)?);
                self.flush_acks(now);
            }
            Sent::Commit(s, jobs) => self.on_commits(s, jobs, value, now).map_err(shape)?,
            Sent::Leave(_) => {
                let holding = u64::try_from(reply::int(value).map_err(shape)?).unwrap_or(0);
                *self.left.0.get_or_insert(0) += holding;
                self.tell_left();
            }
            Sent::DeadLetter(s, job) => match reply::int(value).map_err(shape)? {
                1 => {
                    self.stats.dead_lettered += 1;
                    self.streams[s as usize].stats.dead_lettered += 1;
                    let Job { id, deliveries, reason, .. } = job;
                    self.notices.push_back(Notice::DeadLettered { id, deliveries, reason });
                }
                -1 => self.stats.deleted_seen += 1,
                _ => self.lost(s, job.id, false),
            },
            Sent::FindTooLarge(_) => {
                let pending = reply::pending_counts(value).map_err(shape)?;
                if let Some((id, _)) = pending.into_iter().next() {
                    let id = String::from_utf8_lossy(&id).into_owned();
                    self.fail_after_acks(Error::EntryTooLarge { id, limit: self.config.limits.max_frame });
                }
                // Gone meanwhile: the drain goes on.
            }
        }
        Ok(())
    }

    pub(super) fn on_error_reply(&mut self, sent: Sent, message: &Bytes, now: Instant) -> Result<(), Error> {
        let command = sent.command();
        let text = || String::from_utf8_lossy(message).into_owned();
        if let Some(redirect) = cluster::parse_redirect(message) {
            self.keep_owed(sent);
            return Err(self.redirected(command, redirect, message));
        }
        if cluster::classify(message) == Some(cluster::ClusterError::CrossSlot) {
            return Err(Error::CrossSlot { command, message: text() });
        }
        if let (Sent::CreateGroup(s), true) = (&sent, message.starts_with(b"BUSYGROUP")) {
            self.streams[*s as usize].group_made = true;
            return Ok(());
        }
        if let Sent::GiveBack | Sent::Park(..) | Sent::Release { .. } | Sent::Held { .. } | Sent::Replicas =
            sent
        {
            // Best effort: the counts stay one higher; entries not released are reclaimed
            // after `min_idle`.
            return Ok(());
        }
        if let (Sent::Handshake(Command::ServerInfo), true) = (&sent, self.vetting) {
            // A server (or proxy) that does not answer `HELLO`: the classic verbs, and a
            // role it does not tell (its writes' `READONLY`, if a replica, would).
            return self.learn_hello(None, now);
        }
        if let Sent::Role = sent {
            return Err(Error::NotMaster { role: "a replica".to_string() });
        }
        if let Sent::Health(_, HealthPart::DeadLetters) = sent {
            // The round goes on without the count; not allowed (an ACL that lets this user
            // add to the dead-letter stream but not read it): not asked again.
            if message.starts_with(b"NOPERM") {
                self.dead_letters_refused = true;
            }
            return Ok(());
        }
        if let Sent::Health(..) = sent {
            // No such key or group yet: nothing to tell this round. Not allowed (an ACL
            // without these commands): said once, and not asked again.
            if message.starts_with(b"NOPERM") && self.health.is_some() {
                self.health_refused = true;
                self.notices.push_back(Notice::Refused { feature: Notice::HEALTH, reason: text() });
            }
            self.health = None;
            self.lag_checked = None;
            return Ok(());
        }
        if let Sent::Twins { list, .. } = sent {
            self.notices.extend(self.twins.on_refused(list, text()));
            return Ok(());
        }
        if let Sent::Leave(_) = sent {
            // Not allowed (an ACL without `EVAL`), or the group gone: the consumer stays.
            self.left.1.get_or_insert_with(text);
            self.tell_left();
            return Ok(());
        }
        if let Sent::Commit(..) = sent {
            if message.starts_with(b"NOSCRIPT") {
                // The server forgot the script (`SCRIPT FLUSH`, a restart): load it again
                // and send these once it is.
                self.keep_owed(sent);
                self.script = None;
                self.load_script(now);
                return Ok(());
            }
            if message.windows(7).any(|w| w == b"NOGROUP") {
                // The group is gone, and its pending entries with it: nothing to commit.
                return Ok(());
            }
        }
        if let Sent::DeadLetter(..) = sent {
            // The script's own errors name the failing call after the code (6.2: `ERR Error
            // running script … NOGROUP …`): a missing group leaves nothing to move.
            if message.windows(7).any(|w| w == b"NOGROUP") {
                return Ok(());
            }
        }
        if sent.reads_group() && is_group_gone(message) {
            if let Sent::ReadPending { .. } = sent {
                self.in_flight.discard_counts();
            }
            // The stream it names (a read of many streams fails for one): the others go on.
            let named = match &sent {
                Sent::ReadNew { streams, .. } => match self.named_in(message) {
                    Some(s) => vec![s],
                    None => streams.to_vec(),
                },
                other => other.stream().into_iter().collect(),
            };
            self.buffer.retain(|b| !named.contains(&b.entry.stream));
            if self.staged.as_ref().is_some_and(|staged| named.contains(&staged.stream)) {
                self.staged = None;
            }
            return match self.config.on_group_gone {
                GroupGone::Fail => Err(Error::GroupGone { command, message: text() }),
                GroupGone::Recreate => {
                    for s in named {
                        // It was there (it was read): its creation is counted as a re-creation.
                        let stream = &mut self.streams[s as usize];
                        stream.group_made = true;
                        stream.cursor = Bytes::from_static(CURSOR_START);
                        stream.restart_drain();
                        stream.claim_at = None;
                        self.send(Sent::CreateGroup(s), now);
                    }
                    Ok(())
                }
            };
        }
        if is_transient(message) {
            self.keep_owed(sent);
            return Err(Error::Unavailable { command, message: text() });
        }
        Err(Error::Server { command, message: text() })
    }

    /// The stream a `NOGROUP` error names (`No such key 'k' or consumer group 'g' …`).
    pub(super) fn named_in(&self, message: &[u8]) -> Option<u32> {
        let text = message.strip_prefix(b"NOGROUP No such key '")?;
        // Keys may hold quotes: the longest known key that the message goes on from.
        let group = [&b"' or consumer group '"[..], &self.config.group].concat();
        (1..=text.len())
            .rev()
            .filter(|&end| text[end..].starts_with(&group))
            .find_map(|end| self.index.get(&text[..end]).copied())
    }

    /// A cluster redirect. `MOVED` for the stream's slot: reconnect to the node named (and
    /// drain there). `MOVED` for another slot: a command touched another key (the
    /// dead-letter stream), which must share the stream's slot. `ASK`: the slot is migrating
    /// and the key is already on the node named: reconnect there and send each command
    /// after `ASKING` (once the move is done, that node owns the slot and `ASKING` is moot).
    pub(super) fn redirected(
        &mut self,
        command: Command,
        redirect: cluster::Redirect,
        message: &[u8],
    ) -> Error {
        let text = String::from_utf8_lossy(message).into_owned();
        if !self.streams.iter().any(|s| s.slot == redirect.slot) {
            return Error::CrossSlot { command, message: text };
        }
        match redirect.kind {
            // `?`: the cluster announces host names it does not know; the configured address
            // is asked again after the backoff.
            cluster::RedirectKind::Moved if redirect.host == "?" => {
                Error::Unavailable { command, message: text }
            }
            cluster::RedirectKind::Moved => {
                self.stats.moved += 1;
                self.asking = false;
                self.redirect = Some((redirect.host.clone(), redirect.port));
                Error::Moved { command, host: redirect.host, port: redirect.port }
            }
            cluster::RedirectKind::Ask if redirect.host == "?" => {
                Error::Unavailable { command, message: text }
            }
            cluster::RedirectKind::Ask => {
                self.asking = true;
                self.redirect = Some((redirect.host, redirect.port));
                Error::Unavailable { command, message: text }
            }
        }
    }
}
