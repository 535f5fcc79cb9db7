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
#[non_exhaustive]
pub struct PendingEntry {
    /// The entry's id.
    pub id: EntryId,
    /// The consumer that owns it; empty for an entry released by `XNACK` (Redis 8), which
    /// belongs to nobody until a claim takes it.
    pub consumer: Vec<u8>,
    /// Virtual time (ms) of its last delivery; idle time is `now - delivered_at`. 0 for a
    /// released entry, and for one whose `XCLAIM … IDLE` dated it before the clock's 0.
    pub delivered_at: u64,
    /// How many times it was delivered.
    pub delivery_count: u64,
}

/// How a pending entry reached its owner, for test checks ([`Sim::origin`](crate::Sim::origin)):
/// who read it as a new entry, when, and whether a claim moved it on since. The servers keep
/// no such record; the simulator keeps it beside the pending entry.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Origin {
    /// The consumer whose read of new entries (`XREADGROUP … >`) delivered it.
    pub read_by: Vec<u8>,
    /// When (virtual ms).
    pub read_at: u64,
    /// Whether a claim (`XCLAIM`, `XAUTOCLAIM`) has given it to another consumer since.
    pub moved: bool,
}

/// The virtual time `now` as a delivery time.
fn at(now: u64) -> i64 {
    i64::try_from(now).unwrap_or(i64::MAX)
}

/// How long an entry delivered at `delivered_at` has been idle at `now`.
pub(crate) fn idle(now: u64, delivered_at: i64) -> u64 {
    u64::try_from(at(now).saturating_sub(delivered_at)).unwrap_or(0)
}

/// The largest delivery count: the servers never raise a count past `LLONG_MAX` (what
/// `XNACK … FATAL` sets).
pub(crate) const MAX_COUNT: u64 = i64::MAX as u64;

/// A delivery count raised by one, as the servers do it (stopping at [`MAX_COUNT`]).
fn bump(count: u64) -> u64 {
    if count >= MAX_COUNT {
        count
    } else {
        count + 1
    }
}

/// A pending entry's place in its group's delivery-time order (Redis 8's `pel_time` list,
/// which `XREADGROUP … CLAIM` walks from the oldest delivery): released entries (`XNACK`)
/// first, in the order they were released; then the others by delivery time, a tie going
/// to the one placed there first (the server inserts after every equal time).
type Slot = (bool, i64, u64);

/// A group's record of one delivered, unacknowledged entry.
#[derive(Clone, Debug)]
pub(crate) struct Nack {
    /// The consumer that owns it; empty once released by `XNACK` (`released`).
    pub(crate) owner: Vec<u8>,
    /// Released by `XNACK`: no owner, delivery time 0, claimable by anyone at once.
    pub(crate) released: bool,
    /// Virtual time (ms) of its last delivery; before the clock's 0 when an `XCLAIM … IDLE`
    /// set an idle time longer than the clock has run (a real server's clock counts from
    /// 1970: it is never so young).
    pub(crate) delivered_at: i64,
    pub(crate) count: u64,
    /// Where it stands in the group's delivery-time order.
    slot: Slot,
    /// Who read it as new, when, and whether a claim moved it to another consumer since.
    origin: Origin,
    /// `delivered_at` and `count` as the append-only file last recorded them: the servers
    /// write a delivery of a new entry and every claim to it (as `XCLAIM … TIME … RETRYCOUNT`)
    /// but not a read of a consumer's own pending list, whose raised count and fresh delivery
    /// time a restart thus forgets ([`Db::restart`]).
    saved: (i64, u64),
}

impl Nack {
    /// A first delivery to `owner` at `now` (recorded).
    fn new(owner: &[u8], now: u64) -> Nack {
        let origin = Origin { read_by: owner.to_vec(), read_at: now, moved: false };
        Nack {
            owner: owner.to_vec(),
            released: false,
            delivered_at: at(now),
            count: 1,
            slot: (true, at(now), 0),
            saved: (at(now), 1),
            origin,
        }
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
    /// The PEL in delivery-time order (see [`Slot`]).
    by_time: BTreeMap<Slot, EntryId>,
    /// The tie-breaker of the next [`Slot`].
    next_slot: u64,
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
    /// Idempotent appends (`XADD … IDMP`, Redis 8.6).
    idmp: Idmp,
    /// How the servers lay the entries out in nodes (listpacks), oldest first: each node's
    /// last id appended and how many were appended to it (deleted ones still count, as in
    /// the node's header). Approximate trimming (`~`) removes whole nodes only.
    nodes: std::collections::VecDeque<(EntryId, u64)>,
}

/// How many entries the servers append to one node before opening another
/// (`stream-node-max-entries`, default 100). Their other limit, 4096 bytes a node
/// (`stream-node-max-bytes`), is not modelled: big entries make smaller nodes there.
pub(crate) const NODE_ENTRIES: u64 = 100;

/// A stream's record of idempotent appends: per producer id, the idempotent ids of its
/// latest appends (oldest first) with the entry each made.
#[derive(Clone, Debug)]
struct Idmp {
    /// How long (s) an idempotent id is remembered (`IDMP-DURATION`, default 100).
    duration: u64,
    /// How many idempotent ids a producer keeps (`IDMP-MAXSIZE`, default 100).
    maxsize: u64,
    producers: BTreeMap<Vec<u8>, std::collections::VecDeque<(Vec<u8>, EntryId)>>,
}

impl Default for Idmp {
    fn default() -> Idmp {
        Idmp { duration: 100, maxsize: 100, producers: BTreeMap::new() }
    }
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

/// A trim rule (`MAXLEN n` or `MINID id`); exact (`=`, the default) or approximate (`~`:
/// whole nodes only, see [`NODE_ENTRIES`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Trim {
    /// Keep at most this many entries.
    MaxLen(u64),
    /// Remove entries below this id.
    MinId(EntryId),
}

/// What trimming or `XACKDEL` does with the groups' references to the entries it removes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refs {
    /// `KEEPREF` (the default): pending entries stay pending.
    Keep,
    /// `DELREF`: they leave every group's PEL.
    Delete,
    /// `ACKED`: only entries no group still needs are removed.
    Acked,
}

/// Asked before a read hands out each entry (id, fields or `None` if deleted, idle time,
/// delivery count before): whether it may (`MAXSIZE`); `false` ends the read.
pub(crate) type Take<'a> = &'a mut dyn FnMut(EntryId, Option<&Fields>, u64, u64) -> bool;

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
        Group {
            last_id,
            entries_read,
            pel: BTreeMap::new(),
            consumers: BTreeMap::new(),
            by_time: BTreeMap::new(),
            next_slot: 0,
        }
    }

    /// Puts pending entry `id` at its place for delivery time `at` (or at the end of the
    /// released ones), as the servers' `pelListUpdate` / `pelListInsertNacked` do.
    fn place(&mut self, id: EntryId, at: i64, released: bool) {
        let Some(nack) = self.pel.get_mut(&id) else { return };
        self.by_time.remove(&nack.slot);
        self.next_slot += 1;
        nack.released = released;
        nack.delivered_at = if released { 0 } else { at };
        nack.slot = (!released, nack.delivered_at, self.next_slot);
        self.by_time.insert(nack.slot, id);
    }

    /// Records a first delivery of `id` to `consumer` at `now` (replacing any record).
    fn insert(&mut self, id: EntryId, consumer: &[u8], now: u64) {
        self.ack(id);
        self.pel.insert(id, Nack::new(consumer, now));
        self.place(id, at(now), false);
        self.consumer(consumer).pel.insert(id);
    }

    /// Removes a consumer (`XGROUP DELCONSUMER`) and its pending entries; how many it had.
    pub(crate) fn remove_consumer(&mut self, name: &[u8]) -> Option<usize> {
        let consumer = self.consumers.remove(name)?;
        for &id in &consumer.pel {
            if let Some(nack) = self.pel.remove(&id) {
                self.by_time.remove(&nack.slot);
            }
        }
        Some(consumer.pel.len())
    }

    /// The ids of the pending entries in delivery-time order.
    pub(crate) fn by_delivery(&self) -> Vec<EntryId> {
        self.by_time.values().copied().collect()
    }

    /// `XNACK`: releases `id` (no owner, first in line for claims) with its count set by
    /// `count`; with `force`, an id not pending but existing (`exists`) gets a released
    /// record with count `count(0)`. Whether it was released.
    pub(crate) fn release(
        &mut self,
        id: EntryId,
        count: impl Fn(u64) -> u64,
        force: bool,
        exists: bool,
        now: u64,
    ) -> bool {
        match self.pel.get_mut(&id) {
            Some(nack) => {
                nack.count = count(nack.count);
                if !nack.released {
                    let owner = std::mem::take(&mut nack.owner);
                    nack.origin.moved = true;
                    if let Some(c) = self.consumers.get_mut(&owner) {
                        c.pel.remove(&id);
                    }
                }
            }
            None if force && exists => {
                let mut nack = Nack::new(b"", now);
                nack.count = count(0);
                nack.origin.moved = true;
                nack.saved = (0, nack.count);
                self.pel.insert(id, nack);
            }
            None => return false,
        }
        self.place(id, 0, true);
        if let Some(nack) = self.pel.get_mut(&id) {
            nack.save();
        }
        true
    }

    /// The consumer named `name`, created if missing.
    pub(crate) fn consumer(&mut self, name: &[u8]) -> &mut Consumer {
        self.consumers.entry(name.to_vec()).or_default()
    }

    /// Gives `id` to `consumer` (taking it from its previous owner) with the new delivery
    /// time; `bump` raises the delivery count.
    fn assign(&mut self, id: EntryId, consumer: &[u8], now: u64, bump: bool) {
        self.place(id, at(now), false);
        let Some(nack) = self.pel.get_mut(&id) else { return };
        if bump {
            nack.count = self::bump(nack.count);
        }
        nack.save();
        if nack.owner != consumer || nack.released {
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
                self.by_time.remove(&nack.slot);
                if let Some(c) = self.consumers.get_mut(&nack.owner).filter(|_| !nack.released) {
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
        // The tail node takes it while it has room and an entry left (a node whose entries
        // were all deleted is gone).
        let start = self.nodes.len().checked_sub(2).and_then(|i| self.nodes[i].0.next()).unwrap_or_default();
        let entries = &self.entries;
        match self.nodes.back_mut() {
            Some((last, n)) if *n < NODE_ENTRIES && entries.range(start..=*last).next().is_some() => {
                *last = id;
                *n += 1;
            }
            _ => self.nodes.push_back((id, 1)),
        }
        self.entries.insert(id, fields);
        self.last_id = id;
        self.entries_added += 1;
        Ok(id)
    }

    /// Applies an approximate trim rule (`~`): whole nodes from the oldest, while what is
    /// left keeps `MAXLEN` entries (or the node's last id is below `MINID`), removing at
    /// most `limit` entries (0: no limit), as the servers do. With `ACKED` (Redis 8), the
    /// exact rule is applied instead. Returns how many entries it removed.
    pub(crate) fn trim_approx(&mut self, trim: Trim, refs: Refs, limit: u64) -> u64 {
        if refs == Refs::Acked {
            return self.trim(trim, refs);
        }
        let mut removed = 0;
        while let Some(&(last, _)) = self.nodes.front() {
            let ids: Vec<EntryId> = self.entries.range(..=last).map(|(&id, _)| id).collect();
            let live = ids.len() as u64;
            if limit != 0 && removed + live > limit {
                break;
            }
            let whole = match trim {
                Trim::MaxLen(n) => self.entries.len() as u64 - live >= n,
                Trim::MinId(min) => last < min,
            };
            if !whole {
                break;
            }
            for id in ids {
                if refs == Refs::Delete {
                    self.drop_refs(id);
                }
                self.entries.remove(&id);
            }
            self.nodes.pop_front();
            removed += live;
        }
        removed
    }

    /// Applies a trim rule with a reference policy (`KEEPREF`, `DELREF`, `ACKED`); returns
    /// how many entries it removed.
    pub(crate) fn trim(&mut self, trim: Trim, refs: Refs) -> u64 {
        let mut removed = 0;
        let ids: Vec<EntryId> = self.entries.keys().copied().collect();
        for id in ids {
            let stop = match trim {
                Trim::MaxLen(n) => self.entries.len() as u64 <= n,
                Trim::MinId(min) => id >= min,
            };
            if stop {
                break;
            }
            match refs {
                Refs::Keep => {}
                // ACKED skips what a group still holds and goes on with the next entry.
                Refs::Acked if self.referenced(id) => continue,
                Refs::Acked => {}
                Refs::Delete => self.drop_refs(id),
            }
            self.entries.remove(&id);
            removed += 1;
        }
        removed
    }

    /// Whether a group still needs entry `id`: not yet read by some group, or pending in one
    /// (Redis' `streamEntryIsReferenced`).
    pub(crate) fn referenced(&self, id: EntryId) -> bool {
        self.groups.values().any(|g| g.last_id < id || g.pel.contains_key(&id))
    }

    /// Removes `id` from every group's PEL (`DELREF`).
    pub(crate) fn drop_refs(&mut self, id: EntryId) {
        for g in self.groups.values_mut() {
            g.ack(id);
        }
    }

    /// The entry an earlier `XADD … IDMP pid iid` made, if still remembered. Ids whose
    /// entry's time is `IDMP-DURATION` old are forgotten (the servers sweep them in their
    /// cron; here exactly on the virtual clock).
    pub(crate) fn idmp_lookup(&mut self, pid: &[u8], iid: &[u8], now: u64) -> Option<EntryId> {
        let horizon = now.checked_sub(self.idmp.duration.saturating_mul(1000));
        let list = self.idmp.producers.get_mut(pid)?;
        if let Some(horizon) = horizon {
            while list.front().is_some_and(|(_, id)| id.ms <= horizon) {
                list.pop_front();
            }
        }
        list.iter().find(|(i, _)| i == iid).map(|&(_, id)| id)
    }

    /// Remembers an idempotent append, forgetting the producer's oldest beyond `IDMP-MAXSIZE`.
    pub(crate) fn idmp_insert(&mut self, pid: Vec<u8>, iid: Vec<u8>, id: EntryId) {
        let max = self.idmp.maxsize;
        let list = self.idmp.producers.entry(pid).or_default();
        list.push_back((iid, id));
        while list.len() as u64 > max {
            list.pop_front();
        }
    }

    /// `XCFGSET`: a setting changed to a new value forgets every idempotent id.
    pub(crate) fn idmp_configure(&mut self, duration: Option<u64>, maxsize: Option<u64>) {
        let changed = duration.is_some_and(|d| d != self.idmp.duration)
            || maxsize.is_some_and(|m| m != self.idmp.maxsize);
        self.idmp.duration = duration.unwrap_or(self.idmp.duration);
        self.idmp.maxsize = maxsize.unwrap_or(self.idmp.maxsize);
        if changed {
            self.idmp.producers.clear();
        }
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
        take: Take<'_>,
    ) -> Vec<(EntryId, Fields)> {
        let Some(g) = self.groups.get_mut(group) else { return Vec::new() };
        g.consumer(consumer);
        let start = g.last_id;
        let picked: Vec<(EntryId, Fields)> = self
            .entries
            .range(start..)
            .filter(|(&id, _)| id > start)
            .take(if count == 0 { usize::MAX } else { count })
            .take_while(|(&id, f)| take(id, Some(f), 0, 0))
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
            g.insert(*id, consumer, now);
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
        take: Take<'_>,
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
            let fields = self.entries.get(&id);
            if !take(id, fields, 0, 0) {
                break;
            }
            match fields {
                Some(fields) => {
                    if let Some(nack) = g.pel.get_mut(&id) {
                        nack.count = bump(nack.count);
                    }
                    g.place(id, at(now), false);
                    out.push((id, Some(fields.clone())));
                }
                None => out.push((id, None)),
            }
        }
        out
    }

    /// Whether an `XREADGROUP … CLAIM min_idle` has idle entries to take: the first pending
    /// entry in delivery-time order whose message still exists is released or idle enough.
    pub(crate) fn claimable(&self, group: &[u8], min_idle: u64, now: u64) -> bool {
        self.first_live(group).is_some_and(|n| n.released || idle(now, n.delivered_at) >= min_idle)
    }

    /// When a parked `XREADGROUP … CLAIM min_idle` should look again (the servers track
    /// it at parking): once the oldest delivery still in the stream is idle enough, or
    /// `min_idle` from now when there is none (at least 1 ms ahead).
    pub(crate) fn claim_wake(&self, group: &[u8], min_idle: u64, now: u64) -> u64 {
        let from = self.first_live(group).map_or(at(now), |n| n.delivered_at);
        let wake = from.saturating_add(at(min_idle)).max(at(now).saturating_add(1));
        u64::try_from(wake).unwrap_or(0)
    }

    /// The pending entry delivered longest ago whose message still exists.
    fn first_live(&self, group: &[u8]) -> Option<&Nack> {
        let g = self.groups.get(group)?;
        g.by_time.values().filter(|id| self.entries.contains_key(id)).find_map(|id| g.pel.get(id))
    }

    /// The claim part of `XREADGROUP … CLAIM min_idle … >`: walks the PEL from the oldest
    /// delivery (released entries first), stopping at the first entry not idle enough,
    /// skipping (and leaving pending) entries whose message is gone; each taken entry
    /// (up to `count`, 0 = no limit, and while `take` agrees) moves to `consumer` with
    /// count +1 and delivery time `now`. Returns `(id, fields, idle, count before)`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn claim_idle(
        &mut self,
        group: &[u8],
        consumer: &[u8],
        min_idle: u64,
        count: usize,
        now: u64,
        take: Take<'_>,
    ) -> Vec<(EntryId, Fields, u64, u64)> {
        let entries = &self.entries;
        let Some(g) = self.groups.get_mut(group) else { return Vec::new() };
        let mut out = Vec::new();
        for id in g.by_delivery() {
            let Some(nack) = g.pel.get(&id) else { continue };
            // A released entry's delivery time is 0: its idle time is the server's clock,
            // always enough on a real server.
            let idle = idle(now, nack.delivered_at);
            if !nack.released && idle < min_idle {
                break;
            }
            let Some(fields) = entries.get(&id) else { continue };
            let before = nack.count;
            if !take(id, Some(fields), idle, before) {
                break;
            }
            g.assign(id, consumer, now, true);
            out.push((id, fields.clone(), idle, before));
            if count != 0 && out.len() >= count {
                break;
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
            if !nack.released && min_idle > 0 && idle(now, nack.delivered_at) < min_idle {
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
            if !nack.released && idle(now, nack.delivered_at) < min_idle {
                continue;
            }
            g.assign(id, consumer, now, !options.justid && options.retry.is_none());
            // `IDLE` counts back from now, however far (see `Nack::delivered_at`).
            g.place(id, at(now).saturating_sub(at(options.idle.unwrap_or(0))), false);
            if let Some(nack) = g.pel.get_mut(&id) {
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
                    delivered_at: u64::try_from(n.delivered_at).unwrap_or(0),
                    delivery_count: n.count,
                })
                .collect(),
        )
    }
}

/// A key that is not a stream: a string (with its expiry, virtual ms) or a hash (its fields
/// in the order first set, as a small hash's listpack keeps them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Value {
    /// A string, expiring at `expires_at` (virtual ms) if set.
    Str { data: Vec<u8>, expires_at: Option<u64> },
    /// A hash.
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
}

/// An entry acked by pelican's commit script, its writes made with it: the simulator's
/// record (the servers keep none), for test checks ([`Sim::commits`](crate::Sim::commits)).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Commit {
    /// The consumed stream.
    pub stream: Vec<u8>,
    /// The group.
    pub group: Vec<u8>,
    /// The entry committed.
    pub id: EntryId,
    /// The consumer whose commit it was.
    pub consumer: Vec<u8>,
    /// When (virtual ms).
    pub at: u64,
}

/// The keyspace: streams, and strings and hashes (what pelican's commits write); a key is
/// in one map at most.
#[derive(Clone, Debug, Default)]
pub(crate) struct Db {
    pub(crate) streams: BTreeMap<Vec<u8>, Stream>,
    /// Strings and hashes. An expired string may linger here: read through
    /// [`Db::value`], which does not see it.
    pub(crate) values: BTreeMap<Vec<u8>, Value>,
    /// Every commit made, in order: the history the data holds (a failover loses those its
    /// replica had not copied, with their writes).
    pub(crate) commits: Vec<Commit>,
}

impl Db {
    /// The string or hash at `key`, unless it has expired by `now`.
    pub(crate) fn value(&self, key: &[u8], now: u64) -> Option<&Value> {
        self.values.get(key).filter(|v| !expired(v, now))
    }

    /// Forgets `key`'s value if it has expired by `now` (before a write looks at it).
    pub(crate) fn expire(&mut self, key: &[u8], now: u64) {
        if self.values.get(key).is_some_and(|v| expired(v, now)) {
            self.values.remove(key);
        }
    }

    /// What `TYPE` answers for `key`: `stream`, `string`, `hash` or `none`.
    pub(crate) fn kind(&self, key: &[u8], now: u64) -> &'static str {
        if self.streams.contains_key(key) {
            return "stream";
        }
        match self.value(key, now) {
            Some(Value::Str { .. }) => "string",
            Some(Value::Hash(_)) => "hash",
            None => "none",
        }
    }

    /// Whether `key` holds a string or a hash (live at `now`): a stream command on it is
    /// `WRONGTYPE`.
    pub(crate) fn holds_other(&self, key: &[u8], now: u64) -> bool {
        self.value(key, now).is_some()
    }

    /// What a restart from the append-only file brings back: everything, but pending
    /// entries' delivery times and counts as last recorded (see [`Nack`]).
    pub(crate) fn restart(&mut self) {
        let nacks =
            self.streams.values_mut().flat_map(|s| s.groups.values_mut()).flat_map(|g| g.pel.values_mut());
        for nack in nacks {
            (nack.delivered_at, nack.count) = nack.saved;
        }
        // The reload places each entry again by its recorded delivery time.
        for g in self.streams.values_mut().flat_map(|s| s.groups.values_mut()) {
            let mut order: Vec<(Slot, EntryId)> = g.by_time.iter().map(|(&s, &id)| (s, id)).collect();
            order.sort_by_key(|&((live, _, seq), id)| {
                (live, g.pel.get(&id).map_or(0, |n| n.delivered_at), seq)
            });
            for (_, id) in order {
                let (at, released) = g.pel.get(&id).map_or((0, false), |n| (n.delivered_at, n.released));
                g.place(id, at, released);
            }
        }
    }
}

/// Whether a string's expiry has come by `now`.
fn expired(value: &Value, now: u64) -> bool {
    matches!(value, Value::Str { expires_at: Some(at), .. } if *at <= now)
}
