//! How many entries to ask for per read: no more than the handlers get through well within
//! the lease, and no more than fit in [`Config::read_bytes`](crate::Config::read_bytes).
//!
//! Both estimates (handler time per entry, bytes per entry) jump up at once on a larger
//! sample and decay by an eighth of the gap per smaller one: reads shrink as soon as
//! handlers slow down or entries grow, and grow back gradually when they no longer do.
//!
//! The plan they give is kept, not worked out per use: it is read on every settle. A
//! handler timing rework it only when it could change it (see `Pace::quick_until`).

use std::time::Duration;

use crate::notice::{Notice, ShrinkCause};

/// How much handler time one read may bring the handlers together: a read of more would
/// not be handled sooner, only kept from idle peers that could be handling it (reads ahead
/// hide the round trip). Fast handlers still get the configured count.
const HORIZON: Duration = Duration::from_millis(10);

/// A handler that gets through its entries at this rate or faster is not slow: its time is
/// their size's (5 MB entries written out in 30 ms each shrink reads as big entries do).
const BRISK_BYTES_PER_SEC: u128 = 10 << 20;

/// About how many entries reads ahead should ask for in all.
const AHEAD_ENTRIES: u32 = 512;
/// The most reads ahead in flight.
const MAX_AHEAD: u32 = 4;
/// Handlers timed before slow handlers are told: one slow first handling (a cold start, a
/// thread descheduled) shrinks reads at once, for the lease's sake, but is not news.
const TOLD_AFTER: u32 = 8;

#[derive(Debug)]
pub(crate) struct Pace {
    /// The configured count: the most ever asked.
    max: u32,
    /// How long one read's entries may take to hand out (half the lease), in nanoseconds of
    /// one handler's time: times the handlers that run at once.
    budget: u64,
    /// How much handler time one read may bring: [`HORIZON`] times the handlers that run at
    /// once, within `budget`.
    horizon: u64,
    /// What a read asks for before any handler is timed.
    start: u32,
    /// Handlers that run at once.
    concurrency: u32,
    read_bytes: usize,
    /// Handler time per entry, in nanoseconds: up at once on a larger sample (reads shrink
    /// as soon as handlers slow down, for the lease's sake).
    handler: u64,
    /// Handler time per entry, smoothed both ways (an eighth of each gap): what sizes reads
    /// to the handlers' pace ([`HORIZON`]), where one slow sample (a thread descheduled) must
    /// not cut the reads of quick handlers. Never above `handler`.
    smooth: u64,
    /// Whether any handler has been timed yet.
    timed: bool,
    /// Handlers timed (up to [`TOLD_AFTER`]).
    samples: u32,
    /// The last handler's time, in nanoseconds: slow handlers are told only while it is slow
    /// too.
    last: u64,
    entry_bytes: usize,
    /// The count last reported in a [`Notice::ReadShrunk`] (or `max`).
    reported: u32,
    plan: Plan,
    /// While handlers are timed at no more than this, the plan stands: it is already what
    /// the quickest handler would get.
    quick_until: u64,
}

/// What the estimates allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Plan {
    count: u32,
    cause: Option<ShrinkCause>,
    ahead: u32,
}

impl Pace {
    pub(crate) fn new(max: u32, lease: Duration, read_bytes: usize, concurrency: u32, start: u32) -> Pace {
        let budget = nanos(lease / 2).saturating_mul(u64::from(concurrency.max(1)));
        let mut pace = Pace {
            max,
            budget,
            horizon: nanos(HORIZON).saturating_mul(u64::from(concurrency.max(1))).min(budget),
            start: start.clamp(1, max),
            concurrency: concurrency.max(1),
            read_bytes,
            handler: 0,
            smooth: 0,
            timed: false,
            samples: 0,
            last: 0,
            entry_bytes: 0,
            reported: max,
            plan: Plan { count: max, cause: None, ahead: 1 },
            quick_until: 0,
        };
        pace.replan();
        pace
    }

    /// A handler took `took` for one entry.
    pub(crate) fn record_handler(&mut self, took: Duration) {
        self.samples = (self.samples + 1).min(TOLD_AFTER);
        let took = nanos(took);
        self.last = took;
        self.handler = if took >= self.handler { took } else { self.handler - (self.handler - took) / 8 };
        // The mean of the first few, then an eighth of each gap: a slow first handling (a
        // cold start) weighs no more than the others.
        let weight = u64::from(self.samples.min(TOLD_AFTER));
        self.smooth = match self.timed {
            false => took,
            true if took >= self.smooth => self.smooth + (took - self.smooth) / weight,
            true => self.smooth - (self.smooth - took) / weight,
        };
        // The plan depends on both estimates; `smooth` never passes `handler`, so this bound
        // covers both.
        if !self.timed || self.handler > self.quick_until {
            self.timed = true;
            self.replan();
        }
    }

    /// A read reply of `bytes` brought `entries` entries.
    pub(crate) fn record_read(&mut self, bytes: usize, entries: usize) {
        if let Some(each) = bytes.checked_div(entries) {
            self.entry_bytes = if each >= self.entry_bytes {
                each
            } else {
                self.entry_bytes - (self.entry_bytes - each) / 8
            };
            self.replan();
        }
    }

    /// A read reply outgrew `read_bytes` after `completed` whole entries: ask for at most
    /// that many (at least one) next time.
    pub(crate) fn record_oversized(&mut self, completed: u64) {
        let fits = usize::try_from(completed.max(1)).unwrap_or(usize::MAX);
        self.entry_bytes = self.entry_bytes.max(self.read_bytes.div_ceil(fits));
        self.replan();
    }

    /// The estimate of one handler's time per entry (zero before any is timed).
    pub(crate) fn handler_time(&self) -> Duration {
        Duration::from_nanos(self.handler)
    }

    /// The count for the next read, and why it is below the configured one.
    pub(crate) fn count(&self) -> (u32, Option<ShrinkCause>) {
        (self.plan.count, self.plan.cause)
    }

    /// How many reads of new entries may be in flight ahead of the application while a
    /// backlog lasts, so that the server always has the next read at hand (and, when reads
    /// are small, several to answer per wake-up): enough for about [`AHEAD_ENTRIES`], two to
    /// [`MAX_AHEAD`] — while handlers (once timed) get through what may be buffered (one
    /// read's worth, plus those on the way) well within the lease, and it takes at most a
    /// quarter of `read_bytes`. Otherwise one.
    pub(crate) fn reads_ahead(&self) -> usize {
        self.plan.ahead as usize
    }

    fn replan(&mut self) {
        self.plan = self.plan_for(self.handler, self.smooth);
        let quickest = self.plan_for(0, 0);
        self.quick_until = if self.timed && self.plan == quickest {
            // The largest handler time that still gives this plan (see `plan_for`).
            let count = u64::from(quickest.count);
            let by_count = self.horizon / count;
            let by_ahead = match quickest.ahead {
                1 => u64::MAX,
                n => self.budget.saturating_mul(2) / ((u64::from(n) + 1) * count),
            };
            by_count.min(by_ahead)
        } else {
            0
        };
    }

    fn plan_for(&self, handler: u64, smooth: u64) -> Plan {
        // Before any handler is timed, ask for the start count: enough for the handlers at
        // hand, not what idle peers could be working on.
        // Once timed, about HORIZON of the handlers' work, at least one entry for each handler
        // (a read fills the free slots at once), within the lease.
        let by_time = match self.timed {
            true => cap(self.budget, handler).min(cap(self.horizon, smooth).max(self.concurrency)),
            false => self.start,
        };
        let by_size = cap(self.read_bytes as u64, self.entry_bytes as u64);
        let count = self.max.min(by_time).min(by_size);
        // The start count is no shrinking: nothing has been measured to shrink for.
        let cause = if count == self.max || (!self.timed && by_size >= by_time) {
            None
        } else if by_size <= by_time || self.brisk(handler) {
            Some(ShrinkCause::BigEntries)
        } else {
            Some(ShrinkCause::SlowHandler)
        };
        let ahead = if !self.timed || cause.is_some() {
            1
        } else {
            let most = AHEAD_ENTRIES.div_ceil(count).clamp(2, MAX_AHEAD);
            let fits = |n: u32| {
                let read = u64::from(count);
                let quick = handler.saturating_mul(u64::from(n + 1) * read) <= self.budget.saturating_mul(2);
                let small =
                    (n as usize * count as usize).saturating_mul(self.entry_bytes) <= self.read_bytes / 4;
                quick && small
            };
            (2..=most).rev().find(|n| fits(*n)).unwrap_or(1)
        };
        Plan { count, cause, ahead }
    }

    /// Whether handlers taking `handler` nanoseconds an entry get through the entries' bytes
    /// at [`BRISK_BYTES_PER_SEC`] or faster.
    fn brisk(&self, handler: u64) -> bool {
        handler > 0 && self.entry_bytes as u128 * 1_000_000_000 >= u128::from(handler) * BRISK_BYTES_PER_SEC
    }

    /// The count for the next read, with a notice when it fell below the last one reported.
    /// Growth is not reported; the next fall is measured from where it grew back to (at least
    /// doubled), so that a count wavering around one value does not report every read.
    /// Reads paced to handlers of a few milliseconds are the norm, not news: slow handlers
    /// are told once reads bring each handler a single entry (10 ms or more each), by the
    /// smoothed time of [`TOLD_AFTER`] handlers at least and the last one's (not by one slow
    /// first handling, which shrinks reads all the same).
    pub(crate) fn next_count(&mut self) -> (u32, Option<Notice>) {
        let (count, cause) = self.count();
        let told = match cause {
            Some(ShrinkCause::SlowHandler) => {
                count <= self.concurrency
                    && self.samples >= TOLD_AFTER
                    && cap(self.horizon, self.last) <= self.concurrency
            }
            _ => true,
        };
        let notice = match cause {
            Some(cause) if count < self.reported && told => {
                self.reported = count;
                let handler = Duration::from_nanos(self.smooth);
                Some(Notice::ReadShrunk { count, cause, handler })
            }
            _ => {
                if count == self.max || count >= self.reported.saturating_mul(2) {
                    self.reported = count;
                }
                None
            }
        };
        (count, notice)
    }
}

/// Whole nanoseconds, saturating (a lease of centuries is as good as forever).
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// How many items of `each` fit in `budget`, at least one (and all when `each` is unknown).
fn cap(budget: u64, each: u64) -> u32 {
    match budget.checked_div(each) {
        Some(n) => u32::try_from(n).unwrap_or(u32::MAX).max(1),
        None => u32::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(2);

    /// A read shrunk to this many entries, for this cause.
    fn shrunk(count: u32, cause: ShrinkCause, handler_ms: u64) -> Option<Notice> {
        Some(Notice::ReadShrunk { count, cause, handler: Duration::from_millis(handler_ms) })
    }

    /// [`Pace::next_count`], the notice's handler time left out.
    fn next(pace: &mut Pace) -> (u32, Option<(u32, ShrinkCause)>) {
        let (count, notice) = pace.next_count();
        let told = notice.map(|n| match n {
            Notice::ReadShrunk { count, cause, .. } => (count, cause),
            other => panic!("{other:?}"),
        });
        (count, told)
    }

    #[test]
    fn slow_handlers_shrink_reads_at_once_and_they_grow_back() {
        let mut pace = Pace::new(100, LEASE, 16 << 20, 1, 100);
        assert_eq!(pace.next_count(), (100, None));
        pace.record_handler(Duration::from_millis(1));
        // A read brings the handlers 10 ms of work: 10 entries of 1 ms. That is pacing, not
        // news; one entry a read (handlers of 10 ms or more) is told, once.
        assert_eq!(pace.next_count(), (10, None));
        pace.record_handler(Duration::from_millis(50));
        assert_eq!(pace.next_count(), (1, None), "shrunk at once, told once it is the handlers' pace");
        for _ in 0..5 {
            pace.record_handler(Duration::from_millis(50));
            assert_eq!(pace.next_count(), (1, None));
        }
        pace.record_handler(Duration::from_millis(50));
        assert_eq!(next(&mut pace), (1, Some((1, ShrinkCause::SlowHandler))), "the eighth handler");
        assert_eq!(pace.next_count(), (1, None), "reported once");
        let mut counts = Vec::new();
        for _ in 0..60 {
            pace.record_handler(Duration::from_micros(10));
            counts.push(pace.next_count());
        }
        assert!(counts.windows(2).all(|w| w[0].0 <= w[1].0), "grows steadily");
        assert!(counts.iter().all(|(_, n)| n.is_none()), "growth is not reported");
        assert_eq!(counts.last().unwrap().0, 100);
    }

    /// One slow first handling (a cold start) shrinks reads at once, and they grow back as
    /// the next ones are quick; it is not told: the handlers are not slow.
    #[test]
    fn one_slow_first_handling_is_not_told() {
        let mut pace = Pace::new(100, LEASE, 16 << 20, 1, 100);
        pace.record_handler(Duration::from_millis(40));
        assert_eq!(pace.next_count(), (1, None));
        let mut counts = Vec::new();
        for _ in 0..80 {
            pace.record_handler(Duration::from_micros(80));
            counts.push(next(&mut pace));
        }
        assert!(counts.iter().all(|(_, told)| told.is_none()), "{counts:?}");
        assert_eq!(counts.last().unwrap().0, 100, "grown back");
    }

    #[test]
    fn many_handlers_at_once_get_what_they_get_through_together() {
        // Eight handlers of 10 ms: eight a read (each gets one), never what idle peers could
        // be handling; before any is timed, the start count.
        let mut pace = Pace::new(100, LEASE, 1 << 20, 8, 8);
        assert_eq!(pace.next_count(), (8, None), "the start count is no shrinking");
        pace.record_handler(Duration::from_millis(10));
        assert_eq!(pace.count(), (8, Some(ShrinkCause::SlowHandler)));
        pace.record_handler(Duration::from_millis(1));
        assert!(pace.count().0 > 8, "quicker handlers, larger reads");
        let mut pace = Pace::new(100, LEASE, 1 << 20, 8, 8);
        pace.record_handler(Duration::from_micros(1));
        assert_eq!(pace.count(), (100, None), "quick handlers: the configured count");
        // Slower than the horizon: still one entry for each handler a read.
        let mut pace = Pace::new(100, LEASE, 1 << 20, 4, 4);
        pace.record_handler(Duration::from_millis(50));
        assert_eq!(pace.count(), (4, Some(ShrinkCause::SlowHandler)));
    }

    #[test]
    fn big_entries_shrink_reads() {
        let mut pace = Pace::new(100, LEASE, 1 << 20, 1, 100);
        pace.record_read(10 << 20, 100); // 100 KiB each
        assert_eq!(pace.next_count(), (10, shrunk(10, ShrinkCause::BigEntries, 0)));
        pace.record_oversized(3);
        assert!(pace.count().0 <= 3);
        pace.record_oversized(0);
        assert_eq!(pace.count(), (1, Some(ShrinkCause::BigEntries)));
    }

    #[test]
    fn handlers_slow_only_for_their_entries_size_are_told_as_big_entries() {
        // 5 MB entries (3 fit in the read budget) handled in 30 ms each: 166 MB/s.
        let mut pace = Pace::new(100, LEASE, 16 << 20, 1, 100);
        pace.record_read(15_000_000, 3);
        pace.record_handler(Duration::from_millis(30));
        assert_eq!(pace.next_count(), (1, shrunk(1, ShrinkCause::BigEntries, 30)));
        // The same 5 MB taking 2 s each (2.5 MB/s): the handler is slow.
        pace.record_handler(Duration::from_secs(2));
        assert_eq!(pace.count(), (1, Some(ShrinkCause::SlowHandler)));
        // 1 KB entries in 30 ms: slow.
        let mut pace = Pace::new(100, LEASE, 16 << 20, 1, 100);
        pace.record_read(100_000, 100);
        pace.record_handler(Duration::from_millis(30));
        assert_eq!(pace.count(), (1, Some(ShrinkCause::SlowHandler)));
    }

    #[test]
    fn reads_ahead_for_quick_handlers_and_small_entries() {
        let mut pace = Pace::new(100, LEASE, 1 << 20, 1, 100);
        assert_eq!(pace.reads_ahead(), 1, "until a handler is timed");
        pace.record_handler(Duration::ZERO);
        assert_eq!(pace.reads_ahead(), 4, "small reads: four ahead");
        assert_eq!(Pace::new(1000, LEASE, 16 << 20, 1, 1000).timed_at(Duration::ZERO).reads_ahead(), 2);
        assert_eq!(Pace::new(200, LEASE, 16 << 20, 1, 200).timed_at(Duration::ZERO).reads_ahead(), 3);
        pace.record_read(100 * 100, 100);
        assert_eq!(pace.reads_ahead(), 4, "100 entries of 100 bytes");
        // Handlers of 50 µs: a read of 100 is 5 ms of work, within the 10 ms horizon: four
        // ahead. One sample of 200 µs (a thread descheduled) does not cut the reads; handlers
        // of 200 µs from then on make it 50 a read (the horizon), and one ahead only.
        pace.record_handler(Duration::from_micros(50));
        assert_eq!((pace.count().0, pace.reads_ahead()), (100, 4));
        pace.record_handler(Duration::from_micros(200));
        assert_eq!(pace.count().0, 100, "one slow sample");
        for _ in 0..60 {
            pace.record_handler(Duration::from_micros(200));
        }
        assert_eq!((pace.count().0, pace.reads_ahead()), (50, 1));
        // A tight lease still bounds what is buffered and on the way: (n + 1) reads of 100
        // entries within twice half the lease (20 ms): of 20 µs, four ahead; of 60 µs, two.
        let tight = Pace::new(100, Duration::from_millis(20), 1 << 20, 1, 100);
        assert_eq!(tight.timed_at(Duration::from_micros(20)).reads_ahead(), 4);
        let tight = Pace::new(100, Duration::from_millis(20), 1 << 20, 1, 100);
        assert_eq!(tight.timed_at(Duration::from_micros(60)).reads_ahead(), 2, "(n + 1) × 6 ms within 20 ms");
        let mut pace = Pace::new(100, LEASE, 1 << 20, 1, 100).timed_at(Duration::ZERO);
        pace.record_read(100 * 1024, 100);
        assert_eq!((pace.count().0, pace.reads_ahead()), (100, 2), "100 KiB a read: two within a quarter");
        pace.record_read(100 * 2048, 100);
        assert_eq!((pace.count().0, pace.reads_ahead()), (100, 1), "200 KiB a read: none fits");
    }

    impl Pace {
        fn timed_at(mut self, took: Duration) -> Pace {
            self.record_handler(took);
            self
        }
    }

    proptest::proptest! {
        /// The kept plan is always the one the estimates give, however the timings and read
        /// sizes come (the skipped replans included).
        #[test]
        fn the_kept_plan_is_the_current_one(
            max in 1u32..2000,
            lease_ms in 1u64..60_000,
            read_bytes in 1usize..(64 << 20),
            events in proptest::collection::vec((0u8..3, 0u64..50_000_000, 0usize..1000), 0..200),
        ) {
            let mut pace = Pace::new(max, Duration::from_millis(lease_ms), read_bytes, 1, max);
            for (kind, amount, entries) in events {
                match kind {
                    0 => pace.record_handler(Duration::from_nanos(amount)),
                    1 => pace.record_read(amount as usize, entries),
                    _ => pace.record_oversized(entries as u64),
                }
                proptest::prop_assert_eq!(pace.plan, pace.plan_for(pace.handler, pace.smooth));
            }
        }
    }

    #[test]
    fn caps_never_reach_zero() {
        let mut pace = Pace::new(7, Duration::from_millis(50), 1024, 1, 7);
        pace.record_handler(Duration::from_secs(3600));
        pace.record_read(usize::MAX, 1);
        assert_eq!(pace.count().0, 1);
        assert_eq!(cap(5, 0), u32::MAX);
    }
}
