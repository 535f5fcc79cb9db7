//! Finding a failing world, and shrinking it to a small one that still fails — without
//! proptest (see `kit::strategy` for proptest's own shrinking).

use super::fault::Fault;
use super::report::Failure;
use super::world::World;

/// A failing world found by [`search`]: the first one, and the smallest it shrank to.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Found {
    /// The first world that failed, as it failed.
    pub first: Failure,
    /// The smallest world found that still fails: fewest faults, entries and consumers, the
    /// least concurrency, no order by key unless it is needed, the simplest fault
    /// parameters. Its [`Display`](std::fmt::Display) prints the seed, the
    /// violations and the code that replays it.
    pub minimal: Failure,
    /// How many worlds were run, searching and shrinking.
    pub runs: u64,
}

/// How many worlds [`shrink`] may run.
const SHRINK_RUNS: u64 = 3_000;

/// Runs `property` on each world in turn until one fails, then shrinks that one
/// ([`shrink`]). `None`: every world passed.
///
/// ```
/// use pelican::Verdict;
/// use pelican_sim::kit::{search, FaultKind, World};
///
/// // A handler that counts successes: with crashes, some entries are counted twice.
/// let worlds = (1..40).map(|seed| World::new(seed).phase_ms(2_000).random_faults([FaultKind::Crash]));
/// let found = search(worlds, |world| {
///     world.run(0u64, |count, _, _| { *count += 1; Verdict::Ack }).check_with(|&count| {
///         if count == 0 { Ok(()) } else { Err(format!("{count} handled")) }
///     })
/// });
/// let found = found.expect("the first world fails");
/// assert_eq!(found.minimal.world.given_entries().map(|e| e.len()), Some(1), "{}", found.minimal);
/// ```
pub fn search<P>(worlds: impl IntoIterator<Item = World>, mut property: P) -> Option<Found>
where
    P: FnMut(&World) -> Result<(), Failure>,
{
    let mut runs = 0;
    for world in worlds {
        runs += 1;
        if let Err(first) = property(&world) {
            let (minimal, more) = shrink(&first, property);
            return Some(Found { first, minimal, runs: runs + more });
        }
    }
    None
}

/// Shrinks a failure: removes faults and entries (halves, then quarters, … then one at a
/// time), lowers the number of consumers, their concurrency and the phase, drops the order by
/// key, and simplifies fault parameters,
/// keeping each change under which `property` still fails, until none helps (or 3,000 runs).
/// The seed stays: it draws the rest (handling times, consumer settings). Returns the
/// smallest failure and how many worlds were run.
pub fn shrink<P>(failure: &Failure, mut property: P) -> (Failure, u64)
where
    P: FnMut(&World) -> Result<(), Failure>,
{
    let mut shrinker = Shrinker { best: failure.clone(), runs: 0, property: &mut property };
    shrinker.best.world.random_faults.clear(); // written out already in a report's world
    loop {
        let mut better = shrinker.faults();
        better |= shrinker.entries();
        better |= shrinker.consumers();
        better |= shrinker.concurrency();
        better |= shrinker.parameters();
        better |= shrinker.phase();
        if !better || shrinker.runs >= SHRINK_RUNS {
            break;
        }
    }
    (shrinker.best, shrinker.runs)
}

struct Shrinker<'p, P> {
    best: Failure,
    runs: u64,
    property: &'p mut P,
}

impl<P> Shrinker<'_, P>
where
    P: FnMut(&World) -> Result<(), Failure>,
{
    /// Whether `world` still fails; if it does, it is the new best.
    fn fails(&mut self, world: World) -> bool {
        if self.runs >= SHRINK_RUNS {
            return false;
        }
        self.runs += 1;
        match (self.property)(&world) {
            Err(failure) => {
                self.best = failure;
                true
            }
            Ok(()) => false,
        }
    }

    /// Removes runs of a list's items, longest first.
    fn list<T: Clone>(&mut self, get: fn(&World) -> Vec<T>, set: fn(World, Vec<T>) -> World) -> bool {
        let mut better = false;
        let mut chunk = get(&self.best.world).len().div_ceil(2);
        while chunk >= 1 {
            let mut start = 0;
            while start < get(&self.best.world).len() {
                let mut items = get(&self.best.world);
                let end = (start + chunk).min(items.len());
                items.drain(start..end);
                if self.fails(set(World::clone(&self.best.world), items)) {
                    better = true;
                } else {
                    start += chunk;
                }
            }
            chunk /= 2;
        }
        better
    }

    fn faults(&mut self) -> bool {
        self.list(
            |w| w.faults.clone(),
            |mut w, faults| {
                w.faults = faults;
                w
            },
        )
    }

    fn entries(&mut self) -> bool {
        self.list(|w| w.entries.clone().unwrap_or_default(), |w, entries| w.entries(entries))
    }

    fn consumers(&mut self) -> bool {
        let n = self.best.world.consumers;
        (1..n).any(|fewer| self.fails(self.best.world.clone().consumers(fewer)))
    }

    /// One entry in hand at a time, else half as many; then no order by key.
    fn concurrency(&mut self) -> bool {
        let n = self.best.world.concurrency;
        let fewer = n > 1
            && (self.fails(self.best.world.clone().concurrency(1))
                || (n > 2 && self.fails(self.best.world.clone().concurrency(n / 2))));
        let unordered = self.best.world.order_by.is_some() && {
            let mut world = World::clone(&self.best.world);
            world.order_by = None;
            self.fails(world)
        };
        fewer || unordered
    }

    /// The phase down to the last entry or fault, when that is earlier.
    fn phase(&mut self) -> bool {
        let w = &self.best.world;
        let last_entry = w.entries.iter().flatten().map(|e| e.at_ms).max().unwrap_or(0);
        let last_fault = w.faults.iter().map(|(at, _)| *at).max().unwrap_or(0);
        let end = last_entry.max(last_fault) + 1;
        end < w.phase_ms && self.fails(w.clone().phase_ms(end))
    }

    /// Each fault with simpler parameters: consumer 0, short restarts, no downtime.
    fn parameters(&mut self) -> bool {
        let mut better = false;
        for i in 0..self.best.world.faults.len() {
            let Some(&(at, fault)) = self.best.world.faults.get(i) else { break };
            let mut simpler = vec![fault.with_consumer(0)];
            simpler.push(match fault {
                Fault::Crash { consumer, restart_ms } => {
                    Fault::Crash { consumer, restart_ms: restart_ms / 2 }
                }
                Fault::Stop { consumer, restart_ms } => Fault::Stop { consumer, restart_ms: restart_ms / 2 },
                Fault::Abandon { consumer, restart_ms } => {
                    Fault::Abandon { consumer, restart_ms: restart_ms / 2 }
                }
                Fault::SlowHandler { consumer, ms } => Fault::SlowHandler { consumer, ms: ms / 2 },
                Fault::DeletePending { .. } => Fault::DeletePending { pick: 0 },
                Fault::Trim { .. } => Fault::Trim { count: 1 },
                Fault::ServerRestart { .. } => Fault::ServerRestart { down_ms: 0 },
                other => other,
            });
            for candidate in simpler {
                if candidate != fault {
                    let mut world = World::clone(&self.best.world);
                    world.faults[i] = (at, candidate);
                    better |= self.fails(world);
                }
            }
        }
        better
    }
}
