//! The runs the emulator keeps: those it started and those it follows from events, in start
//! order, with the queue that evicts settled runs beyond `max_runs`. The map, the start order
//! and the eviction queue change together here, and nowhere else.

use std::collections::{HashMap, HashSet, VecDeque};

use crate::recorder::Run;

/// Every run kept, with its indexes and counts.
pub(crate) struct Runs {
    runs: HashMap<String, Run>,
    /// Run ids in start order.
    order: RunOrder,
    /// Settled run ids in settle order: the eviction queue.
    settled: VecDeque<String>,
    /// Settled runs kept; the oldest beyond it are evicted.
    max_runs: usize,
    /// Settled runs evicted beyond `max_runs`.
    evicted: u64,
    /// Open runs the emulator did not start (followed from events).
    followed_open: usize,
    /// Completion events of runs the emulator did not start that it did not follow, because
    /// `max_followed_runs` such runs were open.
    unfollowed: u64,
}

/// Why a run was not taken in.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// A run of that id is kept already.
    Exists,
    /// Open runs are at their bound; how many there are.
    Full(usize),
}

impl Runs {
    pub(crate) fn new(max_runs: usize) -> Self {
        Runs {
            runs: HashMap::new(),
            order: RunOrder::default(),
            settled: VecDeque::new(),
            max_runs,
            evicted: 0,
            followed_open: 0,
            unfollowed: 0,
        }
    }

    pub(crate) fn get(&self, id: &str) -> Option<&Run> {
        self.runs.get(id)
    }

    pub(crate) fn get_mut(&mut self, id: &str) -> Option<&mut Run> {
        self.runs.get_mut(id)
    }

    pub(crate) fn contains(&self, id: &str) -> bool {
        self.runs.contains_key(id)
    }

    /// Every run kept, in no order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &Run> {
        self.runs.values()
    }

    /// Every run kept, in no order.
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut Run> {
        self.runs.values_mut()
    }

    /// Runs kept (in the start order: the total of the pages).
    pub(crate) fn len(&self) -> usize {
        self.order.len()
    }

    /// Every run kept, in start order.
    pub(crate) fn in_order(&self) -> impl DoubleEndedIterator<Item = &Run> {
        self.order.iter().filter_map(|id| self.runs.get(id))
    }

    /// The newest `n` runs kept, in start order.
    pub(crate) fn newest(&self, n: usize) -> impl Iterator<Item = &Run> {
        self.order
            .iter()
            .skip(self.order.len().saturating_sub(n))
            .filter_map(|id| self.runs.get(id))
    }

    /// The ids of the newest `n` runs, newest first.
    pub(crate) fn latest_ids(&self, n: usize) -> impl Iterator<Item = &str> {
        self.order.iter().rev().take(n).map(String::as_str)
    }

    /// The runs with their places, in start order, from the first whose place is above `after`.
    pub(crate) fn after(&self, after: u64) -> impl Iterator<Item = (u64, &Run)> {
        self.order
            .after(after)
            .filter_map(|(place, id)| self.runs.get(id).map(|run| (place, run)))
    }

    /// Settled runs evicted beyond `max_runs`.
    pub(crate) fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Completion events of runs not followed (beyond `max_followed_runs`).
    pub(crate) fn unfollowed(&self) -> u64 {
        self.unfollowed
    }

    /// Runs neither settled nor evicted: every run held, less those waiting in the eviction
    /// queue (a run re-opened by a late event stays in that queue, so this may count a few too
    /// few; a bound, not a tally).
    pub(crate) fn open(&self) -> usize {
        self.runs.len().saturating_sub(self.settled.len())
    }

    /// Open runs the emulator started (followed runs have a bound of their own).
    pub(crate) fn open_started(&self) -> usize {
        self.open().saturating_sub(self.followed_open)
    }

    /// Takes in a run the emulator starts, unless one of its id is kept or `max_open` started
    /// runs are open.
    pub(crate) fn start(&mut self, run: Run, max_open: usize) -> Result<(), Refused> {
        if self.runs.contains_key(&run.id) {
            return Err(Refused::Exists);
        }
        let open = self.open_started();
        if open >= max_open {
            return Err(Refused::Full(open));
        }
        self.insert(run);
        Ok(())
    }

    /// Takes in a run the emulator did not start, followed from its events, unless `max_open`
    /// such runs are open: then its event is counted as not followed. Whether it was taken.
    pub(crate) fn follow(&mut self, run: Run, max_open: usize) -> bool {
        if self.followed_open >= max_open {
            self.unfollowed += 1;
            if self.unfollowed.is_power_of_two() {
                tracing::warn!(
                    run = %crate::conformance::clip(&run.id, 200),
                    "{} completion event(s) of runs the emulator did not start were not followed: {} such runs are open, the most it follows (max_followed_runs)",
                    self.unfollowed,
                    self.followed_open
                );
            }
            return false;
        }
        self.followed_open += 1;
        self.insert(run);
        true
    }

    fn insert(&mut self, run: Run) {
        self.order.push(run.id.clone());
        self.runs.insert(run.id.clone(), run);
    }

    /// Takes a run out with its indexes, as if it had never started; the run, if it was kept.
    pub(crate) fn remove(&mut self, id: &str) -> Option<Run> {
        let run = self.runs.remove(id)?;
        self.order.retain(|kept| kept != id);
        if let Some(at) = self.settled.iter().position(|s| s == id) {
            self.settled.remove(at);
        } else if run.is_followed() {
            self.followed_open = self.followed_open.saturating_sub(1);
        }
        Some(run)
    }

    /// Notes that a run settled, and evicts the oldest settled runs beyond `max_runs`.
    pub(crate) fn settled(&mut self, run_id: &str) {
        if self.runs.get(run_id).is_some_and(Run::is_followed) {
            self.followed_open = self.followed_open.saturating_sub(1);
        }
        self.settled.push_back(run_id.to_owned());
        // Evict in batches, so the start-order list is rewritten rarely.
        let slack = self.max_runs / 10 + 1;
        if self.settled.len() <= self.max_runs + slack {
            return;
        }
        let mut gone = HashSet::new();
        while self.settled.len() > self.max_runs {
            let Some(id) = self.settled.pop_front() else {
                break;
            };
            // A run re-opened since (a late event) is not settled: keep it.
            if self.runs.get(&id).is_some_and(|r| r.status.is_settled()) {
                self.runs.remove(&id);
                self.evicted += 1;
                gone.insert(id);
            }
        }
        self.order.retain(|id| !gone.contains(id));
    }
}

/// Run ids in start order, each with its place: a number given at its start and never reused,
/// so a reader can page through the runs by place while settled runs are evicted in between
/// (a position would shift under it).
#[derive(Debug, Default)]
struct RunOrder {
    ids: VecDeque<(u64, String)>,
    next: u64,
}

impl RunOrder {
    fn push(&mut self, id: String) {
        self.next += 1;
        self.ids.push_back((self.next, id));
    }

    fn retain(&mut self, mut keep: impl FnMut(&String) -> bool) {
        self.ids.retain(|(_, id)| keep(id));
    }

    fn len(&self) -> usize {
        self.ids.len()
    }

    /// The ids, oldest first.
    fn iter(&self) -> impl DoubleEndedIterator<Item = &String> + ExactSizeIterator {
        self.ids.iter().map(|(_, id)| id)
    }

    /// The ids with their places, oldest first, from the first whose place is above `after`.
    fn after(&self, after: u64) -> impl Iterator<Item = (u64, &String)> {
        let start = self.ids.partition_point(|(place, _)| *place <= after);
        self.ids.range(start..).map(|(place, id)| (*place, id))
    }
}
