//! Streams, consumer groups and pending entries lists (PELs): the data and its semantics,
//! without any RESP. Every function here mirrors what `t_stream.c` does on the real servers;
//! the differences are listed in the crate docs.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use crate::id::EntryId;
use crate::options::ClaimShape;

/// The field/value pairs of one entry.
pub(crate) type Fields = Vec<(Bytes, Bytes)>;

/// One pending entry, as the inspection API reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingEntry {
    /// The entry's id.
    pub id: EntryId,
    /// The consumer that owns it.
    pub consumer: Vec<u8>,
    /// Virtual time (ms) of its last delivery; idle time is `now - delivered_at`.
    pub delivered_at: u64,
    /// How many times it was delivered.
    pub delivery_count: u64,
}

/// How a pending entry reached its owner, for test checks ([`Sim::origin`](crate::Sim::origin)):
/// who read it as a new entry, when, and whether a claim moved it on since. The servers keep
/// no such record; the simulator keeps it beside the pending entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    /// The consumer whose read of new entries (`XREADGROUP … >`) delivered it.
    pub read_by: Vec<u8>,
    /// When (virtual ms).
    pub read_at: u64,
    /// Whether a claim (`XCLAIM`, `XAUTOCLAIM`) has given it to another consumer since.
    pub moved: bool,
}

/// A group's record of one delivered, unacknowledged entry.
#[derive(Clone, Debug)]
pub(crate) struct Nack {
    pub(crate) owner: Vec<u8>,
    pub(crate) delivered_at: u64,
    pub(crate) count: u64,
    /// Who read it as new, when, and whether a claim moved it to another consumer since.
    origin: Origin,
    /// `delivered_at` and `count` as the append-only file last recorded them: the servers
    /// write a delivery of a new entry and every claim to it (as `XCLAIM … TIME … RETRYCOUNT`)
    /// but not a read of a consumer's own pending list, whose raised count and fresh delivery
    /// time a restart thus forgets ([`Db::restart`]).
    saved: (u64, u64),
}

impl Nack {
    /// A first delivery to `owner` at `now` (recorded).
    fn new(owner: &[u8], now: u64) -> Nack {
        let origin = Origin { read_by: owner.to_vec(), read_at: now, moved: false };
        Nack { owner: owner.to_vec(), delivered_at: now, count: 1, saved: (now, 1), origin }
    }

    /// The delivery time and count as they are now are recorded (a claim).
    fn save(&mut self) {
        self.saved = (self.delivered_at, self.count);
    }
}

/// A consumer of a group: only its own PEL (ids; the group's PEL holds the details).
#[derive(Clone, Debug, Default)]
pub(crate) struct Consumer {
    pub(crate) pel: BTreeSet<EntryId>,
}

/// A consumer group.
#[derive(Clone, Debug)]
pub(crate) struct Group {
    pub(crate) last_id: EntryId,
    /// Logical read counter (`entries-read`); `None` when unknown.
    pub(crate) entries_read: Option<u64>,
    pub(crate) pel: BTreeMap<EntryId, Nack>,
    pub(crate) consumers: BTreeMap<Vec<u8>, Consumer>,
}

/// A stream: entries, the top id ever added, counters and groups.
#[derive(Clone, Debug, Default)]
pub(crate) struct Stream {
    pub(crate) entries: BTreeMap<EntryId, Fields>,
    /// The largest id ever added (survives deletes and trims).
    pub(crate) last_id: EntryId,
    /// How many entries were ever added.
    pub(crate) entries_added: u64,
    /// The largest id ever removed by `XDEL`.
    pub(crate) max_deleted: EntryId,
    pub(crate) groups: BTreeMap<Vec<u8>, Group>,
}

/// Why `XADD` refused an id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AddError {
    /// The id is not above the stream's top id.
    TooSmall,
}

/// How `XADD` picks the id.
#[derive(Clone, Copy, Debug)]
pub(crate) enum NewId {
    /// `*`: from the clock.
    Auto,
    /// `ms-*`: this ms, next sequence.
    AutoSeq(u64),
    /// An explicit id.
    Exact(EntryId),
}

/// A trim rule (`MAXLEN n` or `MINID id`); always applied exactly.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Trim {
    /// Keep at most this many entries.
    MaxLen(u64),
    /// Remove entries below this id.
    MinId(EntryId),
}

/// One element of an `XAUTOCLAIM` claimed list.
#[derive(Clone, Debug)]
pub(crate) enum Claimed {
    /// A claimed entry with its fields.
    Entry(EntryId, Fields),
    /// A claimed id (`JUSTID`).
    Id(EntryId),
    /// A claimed entry that no longer exists (Redis 6.2 shape): a bare nil.
    Gone,
}

/// `XCLAIM`'s options.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ClaimOptions {
    /// `JUSTID`: answer ids only, leave the delivery count alone.
    pub(crate) justid: bool,
    /// `RETRYCOUNT n`: set the delivery count.
    pub(crate) retry: Option<u64>,
    /// `IDLE ms`: the idle time to leave it with.
    pub(crate) idle: Option<u64>,
}

/// The result of `XAUTOCLAIM`.
#[derive(Clone, Debug)]
pub(crate) struct AutoClaim {
    pub(crate) cursor: EntryId,
    pub(crate) claimed: Vec<Claimed>,
    pub(crate) deleted: Vec<EntryId>,
}

/// `XINFO GROUPS` data for one group.
#[derive(Clone, Debug)]
pub(crate) struct GroupInfo {
    pub(crate) name: Vec<u8>,
    pub(crate) consumers: usize,
    pub(crate) pending: usize,
    pub(crate) last_id: EntryId,
    pub(crate) entries_read: Option<u64>,
    pub(crate) lag: Option<u64>,
}

impl Group {
    pub(crate) fn new(last_id: EntryId, entries_read: Option<u64>) -> Group {
        Group { last_id, entries_read, pel: BTreeMap::new(), consumers: BTreeMap::new() }
    }

    /// The consumer named `name`, created if missing.
    pub(crate) fn consumer(&mut self, name: &[u8]) -> &mut Consumer {
        self.consumers.entry(name.to_vec()).or_default()
    }

    /// Gives `id` to `consumer` (taking it from its previous owner) with the new delivery
    /// time; `bump` raises the delivery count.
    fn assign(&mut self, id: EntryId, consumer: &[u8], now: u64, bump: bool) {
        let Some(nack) = self.pel.get_mut(&id) else { return };
        nack.delivered_at = now;
        if bump {
            nack.count += 1;
        }
        nack.save();
        if nack.owner != consumer {
            nack.origin.moved = true;
            let old = std::mem::replace(&mut nack.owner, consumer.to_vec());
            if let Some(c) = self.consumers.get_mut(&old) {
                c.pel.remove(&id);
            }
            self.consumer(consumer).pel.insert(id);
        }
    }

    /// Removes `id` from the group PEL and its owner's PEL; whether it was there.
    pub(crate) fn ack(&mut self, id: EntryId) -> bool {
        match self.pel.remove(&id) {
            Some(nack) => {
                if let Some(c) = self.consumers.get_mut(&nack.owner) {
                    c.pel.remove(&id);
                }
                true
            }
            None => false,
        }
    }
}

impl Stream {
    /// Appends an entry; returns its id.
    pub(crate) fn add(&mut self, id: NewId, fields: Fields, now: u64) -> Result<EntryId, AddError> {
        let top = self.last_id;
        let id = match id {
            NewId::Auto => {
                if now > top.ms {
                    EntryId::new(now, 0)
                } else {
                    top.next().ok_or(AddError::TooSmall)?
                }
            }
            NewId::AutoSeq(ms) if ms == top.ms => {
                top.next().filter(|n| n.ms == ms).ok_or(AddError::TooSmall)?
            }
            NewId::AutoSeq(ms) => EntryId::new(ms, 0),
            NewId::Exact(id) => id,
        };
        if id <= top {
            return Err(AddError::TooSmall);
        }
        self.entries.insert(id, fields);
        self.last_id = id;
        self.entries_added += 1;
        Ok(id)
    }

    /// Applies a trim rule; returns how many entries it removed.
    pub(crate) fn trim(&mut self, trim: Trim) -> u64 {
        let mut removed = 0;
        while let Some((&first, _)) = self.entries.first_key_value() {
            let remove = match trim {
                Trim::MaxLen(n) => self.entries.len() as u64 > n,
                Trim::MinId(min) => first < min,
            };
            if !remove {
                break;
            }
            self.entries.remove(&first);
            removed += 1;
        }
        removed
    }

    /// Deletes one entry (`XDEL`); whether it existed.
    pub(crate) fn delete(&mut self, id: EntryId) -> bool {
        let existed = self.entries.remove(&id).is_some();
        if existed && id > self.max_deleted {
            self.max_deleted = id;
        }
        existed
    }

    /// Whether an entry newer than `after` exists.
    pub(crate) fn has_after(&self, after: EntryId) -> bool {
        self.entries.range(after..).any(|(&id, _)| id > after)
    }

    /// `XREADGROUP … >`: delivers up to `count` (0 = no limit) entries after the group's
    /// last id to `consumer` (created if missing), recording them in the PEL unless `noack`.
    pub(crate) fn read_new(
        &mut self,
        group: &[u8],
        consumer: &[u8],
        count: usize,
        noack: bool,
        now: u64,
    ) -> Vec<(EntryId, Fields)> {
        let Some(g) = self.groups.get_mut(group) else { return Vec::new() };
        g.consumer(consumer);
        let start = g.last_id;
        let picked: Vec<(EntryId, Fields)> = self
            .entries
            .range(start..)
            .filter(|(&id, _)| id > start)
            .take(if count == 0 { usize::MAX } else { count })
            .map(|(&id, f)| (id, f.clone()))
            .collect();
        for (id, _) in &picked {
            let tombstones = self.has_tombstone_from(*id);
            let estimate = self.distance_from_first(*id);
            let Some(g) = self.groups.get_mut(group) else { break };
            g.entries_read = match g.entries_read {
                Some(n) if !tombstones => Some(n + 1),
                _ if self.entries_added > 0 => estimate,
                other => other,
            };
            g.last_id = *id;
            if noack {
                continue;
            }
            if let Some(old) = g.pel.get(id).map(|n| n.owner.clone()) {
                if let Some(c) = g.consumers.get_mut(&old) {
                    c.pel.remove(id);
                }
            }
            g.pel.insert(*id, Nack::new(consumer, now));
            g.consumer(consumer).pel.insert(*id);
        }
        picked
    }

    /// `XREADGROUP … <id>`: `consumer`'s own pending entries after `after`, up to `count`
    /// (0 = no limit). Existing ones get count +1 and a new delivery time; deleted ones come
    /// back without fields and untouched.
    pub(crate) fn read_pending(
        &mut self,
        group: &[u8],
        consumer: &[u8],
        after: EntryId,
        count: usize,
        now: u64,
    ) -> Vec<(EntryId, Option<Fields>)> {
        let Some(g) = self.groups.get_mut(group) else { return Vec::new() };
        let Some(start) = after.next() else { return Vec::new() };
        let ids: Vec<EntryId> = g
            .consumer(consumer)
            .pel
            .range(start..)
            .take(if count == 0 { usize::MAX } else { count })
            .copied()
            .collect();
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            match self.entries.get(&id) {
                Some(fields) => {
                    if let Some(nack) = g.pel.get_mut(&id) {
                        nack.delivered_at = now;
                        nack.count += 1;
                    }
                    out.push((id, Some(fields.clone())));
                }
                None => out.push((id, None)),
            }
        }
        out
    }

    /// `XAUTOCLAIM`: scans at most `count × 10` PEL entries from `start`, claiming for
    /// `consumer` (created on its first claim) those idle at least `min_idle` ms.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn autoclaim(
        &mut self,
        group: &[u8],
        consumer: &[u8],
        min_idle: u64,
        start: EntryId,
        count: usize,
        justid: bool,
        shape: ClaimShape,
        deleted_use_count: bool,
        now: u64,
    ) -> AutoClaim {
        let entries = &self.entries;
        let Some(g) = self.groups.get_mut(group) else {
            return AutoClaim { cursor: EntryId::MIN, claimed: Vec::new(), deleted: Vec::new() };
        };
        let mut attempts = count.saturating_mul(10);
        let mut left = count;
        let mut claimed = Vec::new();
        let mut deleted = Vec::new();
        let mut pos = start;
        let mut exhausted = true;
        loop {
            if attempts == 0 || left == 0 {
                exhausted = false;
                break;
            }
            attempts -= 1;
            let Some((&id, nack)) = g.pel.range(pos..).next() else { break };
            pos = match id.next() {
                Some(n) => n,
                None => EntryId::MAX,
            };
            let exists = entries.contains_key(&id);
            if !exists && shape == ClaimShape::Redis7 {
                g.ack(id);
                deleted.push(id);
                if deleted_use_count {
                    left -= 1;
                }
                if id == EntryId::MAX {
                    break;
                }
                continue;
            }
            if min_idle > 0 && now.saturating_sub(nack.delivered_at) < min_idle {
                if id == EntryId::MAX {
                    break;
                }
                continue;
            }
            g.assign(id, consumer, now, !justid);
            claimed.push(match (justid, entries.get(&id)) {
                (true, _) => Claimed::Id(id),
                (false, Some(f)) => Claimed::Entry(id, f.clone()),
                (false, None) => Claimed::Gone,
            });
            left -= 1;
            if id == EntryId::MAX {
                break;
            }
        }
        let cursor = if exhausted {
            EntryId::MIN
        } else {
            g.pel.range(pos..).next().map(|(&id, _)| id).unwrap_or(EntryId::MIN)
        };
        AutoClaim { cursor, claimed, deleted }
    }

    /// `XCLAIM`: gives `consumer` (created on its first claim) each of `ids` that is pending
    /// and idle at least `min_idle` ms. A deleted entry is dropped from the PEL and skipped
    /// ([`ClaimShape::Redis7`]) or claimed like any other and answered as nil unless `justid`
    /// (Redis 6.2).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn claim(
        &mut self,
        group: &[u8],
        consumer: &[u8],
        min_idle: u64,
        ids: &[EntryId],
        options: ClaimOptions,
        shape: ClaimShape,
        now: u64,
    ) -> Vec<Claimed> {
        let entries = &self.entries;
        let Some(g) = self.groups.get_mut(group) else { return Vec::new() };
        let mut claimed = Vec::new();
        for &id in ids {
            let Some(nack) = g.pel.get(&id) else { continue };
            let exists = entries.contains_key(&id);
            if !exists && shape == ClaimShape::Redis7 {
                g.ack(id);
                continue;
            }
            if now.saturating_sub(nack.delivered_at) < min_idle {
                continue;
            }
            g.assign(id, consumer, now, !options.justid && options.retry.is_none());
            if let Some(nack) = g.pel.get_mut(&id) {
                nack.delivered_at = now.saturating_sub(options.idle.unwrap_or(0));
                if let Some(count) = options.retry {
                    nack.count = count;
                }
                nack.save();
            }
            claimed.push(match (options.justid, entries.get(&id)) {
                (true, _) => Claimed::Id(id),
                (false, Some(f)) => Claimed::Entry(id, f.clone()),
                (false, None) => Claimed::Gone,
            });
        }
        claimed
    }

    /// The fields of entry `id`, if it exists.
    pub(crate) fn fields(&self, id: EntryId) -> Option<&Fields> {
        self.entries.get(&id)
    }

    /// Whether `id` is pending in `group` and owned by `consumer`.
    pub(crate) fn owns(&self, group: &[u8], consumer: &[u8], id: EntryId) -> bool {
        self.groups.get(group).and_then(|g| g.pel.get(&id)).is_some_and(|n| n.owner == consumer)
    }

    /// Whether an `XDEL`-made hole may lie at or after `from` (Redis'
    /// `streamRangeHasTombstones` with an open end).
    fn has_tombstone_from(&self, from: EntryId) -> bool {
        !self.entries.is_empty() && self.max_deleted != EntryId::MIN && from <= self.max_deleted
    }

    /// Redis' `streamEstimateDistanceFromFirstEverEntry`: how many entries were added up to
    /// and including `id`, when that can be known.
    fn distance_from_first(&self, id: EntryId) -> Option<u64> {
        if self.entries_added == 0 {
            return Some(0);
        }
        if self.entries.is_empty() && id <= self.last_id {
            return Some(self.entries_added);
        }
        if id == self.last_id {
            return Some(self.entries_added);
        }
        if id > self.last_id {
            return None;
        }
        let first = self.entries.keys().next().copied().unwrap_or(EntryId::MIN);
        if self.max_deleted == EntryId::MIN || self.max_deleted < first {
            let len = self.entries.len() as u64;
            if id < first {
                return Some(self.entries_added - len);
            } else if id == first {
                return Some(self.entries_added - len + 1);
            }
        }
        None
    }

    /// `XINFO GROUPS` data, groups in name order.
    pub(crate) fn group_infos(&self) -> Vec<GroupInfo> {
        self.groups
            .iter()
            .map(|(name, g)| {
                let lag = if self.entries_added == 0 {
                    Some(0)
                } else {
                    match g.entries_read {
                        Some(read) if !self.has_tombstone_from(g.last_id) => {
                            Some(self.entries_added.saturating_sub(read))
                        }
                        _ => {
                            self.distance_from_first(g.last_id).map(|r| self.entries_added.saturating_sub(r))
                        }
                    }
                };
                GroupInfo {
                    name: name.clone(),
                    consumers: g.consumers.len(),
                    pending: g.pel.len(),
                    last_id: g.last_id,
                    entries_read: g.entries_read,
                    lag,
                }
            })
            .collect()
    }

    /// How pending entry `id` of `group` reached its owner.
    pub(crate) fn origin(&self, group: &[u8], id: EntryId) -> Option<Origin> {
        Some(self.groups.get(group)?.pel.get(&id)?.origin.clone())
    }

    /// Every pending entry of `group`, in id order.
    pub(crate) fn pending(&self, group: &[u8]) -> Option<Vec<PendingEntry>> {
        let g = self.groups.get(group)?;
        Some(
            g.pel
                .iter()
                .map(|(&id, n)| PendingEntry {
                    id,
                    consumer: n.owner.clone(),
                    delivered_at: n.delivered_at,
                    delivery_count: n.count,
                })
                .collect(),
        )
    }
}

/// The keyspace: only streams exist.
#[derive(Clone, Debug, Default)]
pub(crate) struct Db {
    pub(crate) streams: BTreeMap<Vec<u8>, Stream>,
}

impl Db {
    /// What a restart from the append-only file brings back: everything, but pending
    /// entries' delivery times and counts as last recorded (see [`Nack`]).
    pub(crate) fn restart(&mut self) {
        let nacks =
            self.streams.values_mut().flat_map(|s| s.groups.values_mut()).flat_map(|g| g.pel.values_mut());
        for nack in nacks {
            (nack.delivered_at, nack.count) = nack.saved;
        }
    }
}
