//! How many entries to ask for per read: no more than the handlers get through well within
//! the lease, and no more than fit in [`Config::read_bytes`](crate::Config::read_bytes).
//!
//! Both estimates (handler time per entry, bytes per entry) jump up at once on a larger
//! sample and decay by an eighth of the gap per smaller one: reads shrink as soon as
//! handlers slow down or entries grow, and grow back gradually when they no longer do.

use std::time::Duration;

use crate::notice::{Notice, ShrinkCause};

#[derive(Debug)]
pub(crate) struct Pace {
    /// The configured count: the most ever asked.
    max: u32,
    /// How long one read's entries may take to hand out: half the lease.
    budget: Duration,
    read_bytes: usize,
    handler: Duration,
    entry_bytes: usize,
    /// The count last reported in a [`Notice::ReadShrunk`] (or `max`).
    reported: u32,
}

impl Pace {
    pub(crate) fn new(max: u32, lease: Duration, read_bytes: usize) -> Pace {
        Pace { max, budget: lease / 2, read_bytes, handler: Duration::ZERO, entry_bytes: 0, reported: max }
    }

    /// A handler took `took` for one entry.
    pub(crate) fn record_handler(&mut self, took: Duration) {
        self.handler = if took >= self.handler { took } else { self.handler - (self.handler - took) / 8 };
    }

    /// A read reply of `bytes` brought `entries` entries.
    pub(crate) fn record_read(&mut self, bytes: usize, entries: usize) {
        if let Some(each) = bytes.checked_div(entries) {
            self.entry_bytes = if each >= self.entry_bytes {
                each
            } else {
                self.entry_bytes - (self.entry_bytes - each) / 8
            };
        }
    }

    /// A read reply outgrew `read_bytes` after `completed` whole entries: ask for at most
    /// that many (at least one) next time.
    pub(crate) fn record_oversized(&mut self, completed: u64) {
        let fits = usize::try_from(completed.max(1)).unwrap_or(usize::MAX);
        self.entry_bytes = self.entry_bytes.max(self.read_bytes.div_ceil(fits));
    }

    /// The count for the next read, and why it is below the configured one.
    pub(crate) fn count(&self) -> (u32, Option<ShrinkCause>) {
        let by_time = cap(self.budget.as_nanos(), self.handler.as_nanos());
        let by_size = cap(self.read_bytes as u128, self.entry_bytes as u128);
        let count = self.max.min(by_time).min(by_size);
        let cause = if count == self.max {
            None
        } else if by_size <= by_time {
            Some(ShrinkCause::BigEntries)
        } else {
            Some(ShrinkCause::SlowHandler)
        };
        (count, cause)
    }

    /// The count for the next read, with a notice when it fell below the last one reported.
    /// Growth is not reported; the next fall is measured from where it grew back to (at least
    /// doubled), so that a count wavering around one value does not report every read.
    pub(crate) fn next_count(&mut self) -> (u32, Option<Notice>) {
        let (count, cause) = self.count();
        let notice = match cause {
            Some(cause) if count < self.reported => {
                self.reported = count;
                Some(Notice::ReadShrunk { count, cause })
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

/// How many items of `each` fit in `budget`, at least one (and all when `each` is unknown).
fn cap(budget: u128, each: u128) -> u32 {
    match budget.checked_div(each) {
        Some(n) => u32::try_from(n).unwrap_or(u32::MAX).max(1),
        None => u32::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(2);

    #[test]
    fn slow_handlers_shrink_reads_at_once_and_they_grow_back() {
        let mut pace = Pace::new(100, LEASE, 16 << 20);
        assert_eq!(pace.next_count(), (100, None));
        pace.record_handler(Duration::from_millis(100));
        // Half the lease (1 s) holds 10 entries of 100 ms.
        assert_eq!(
            pace.next_count(),
            (10, Some(Notice::ReadShrunk { count: 10, cause: ShrinkCause::SlowHandler }))
        );
        assert_eq!(pace.next_count(), (10, None), "reported once");
        let mut counts = Vec::new();
        for _ in 0..60 {
            pace.record_handler(Duration::from_micros(10));
            counts.push(pace.next_count());
        }
        assert!(counts.windows(2).all(|w| w[0].0 <= w[1].0), "grows steadily");
        assert!(counts.iter().all(|(_, n)| n.is_none()), "growth is not reported");
        assert_eq!(counts.last().unwrap().0, 100);
    }

    #[test]
    fn big_entries_shrink_reads() {
        let mut pace = Pace::new(100, LEASE, 1 << 20);
        pace.record_read(10 << 20, 100); // 100 KiB each
        let (count, notice) = pace.next_count();
        assert_eq!(
            (count, notice),
            (10, Some(Notice::ReadShrunk { count: 10, cause: ShrinkCause::BigEntries }))
        );
        pace.record_oversized(3);
        assert!(pace.count().0 <= 3);
        pace.record_oversized(0);
        assert_eq!(pace.count(), (1, Some(ShrinkCause::BigEntries)));
    }

    #[test]
    fn caps_never_reach_zero() {
        let mut pace = Pace::new(7, Duration::from_millis(50), 1024);
        pace.record_handler(Duration::from_secs(3600));
        pace.record_read(usize::MAX, 1);
        assert_eq!(pace.count().0, 1);
        assert_eq!(cap(5, 0), u32::MAX);
    }
}
