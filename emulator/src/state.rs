//! The emulator's state, behind its one mutex ([`crate::emulator::Shared::lock`]): a few parts,
//! each keeping its own invariants behind its methods (the runs and their indexes, the records,
//! the violations, the registry of services and flows, the emulator's own message ids), and the
//! few operations that span parts ([`State::remove_run`]). Nothing outside a part edits its
//! fields.

mod own;
mod records;
mod registry;
mod runs;
mod violations;

pub(crate) use own::Own;
pub(crate) use records::Records;
pub(crate) use registry::{Registry, RegistryView};
pub(crate) use runs::{Refused, Runs};
pub(crate) use violations::Violations;

use crate::clock::Clock;
use crate::emulator::{EmulatorConfig, FoundAtStart};
use crate::recorder::Run;

pub(crate) struct State {
    pub(crate) clock: Clock,
    pub(crate) records: Records,
    pub(crate) runs: Runs,
    pub(crate) violations: Violations,
    pub(crate) registry: Registry,
    pub(crate) own: Own,
    /// What the wire tap saw, judged for order.
    pub(crate) order: crate::order::Order,
    pub(crate) counts: Counts,
    /// What an earlier emulator left on the server, found at the start.
    pub(crate) found_at_start: Vec<FoundAtStart>,
}

/// Plain counts of what happened, for the `state` summary.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    /// Items the control API sent cut to an excerpt (one alone was larger than a message).
    pub(crate) cut_in_replies: u64,
    /// Times one of the emulator's streams (DLQ, events) was found gone, and made again.
    pub(crate) streams_lost: u64,
    /// Services whose consumers have been read (judged) so far.
    pub(crate) consumers_read: u64,
}

impl State {
    pub(crate) fn new(config: &EmulatorConfig) -> Self {
        State {
            clock: Clock::new(config.clock),
            records: Records::new(config.max_records, config.max_record_bytes),
            runs: Runs::new(config.max_runs),
            violations: Violations::new(config.max_violations, config.max_record_bytes),
            registry: Registry::default(),
            own: Own::default(),
            order: crate::order::Order::default(),
            counts: Counts::default(),
            found_at_start: Vec::new(),
        }
    }

    /// Takes a run out as if it had never started: the run with its indexes, its records, and
    /// what the wire tap expected of it (a trigger whose delivery could not be published); its
    /// delivery seen on the wire later is not recorded either. Whether it was kept.
    pub(crate) fn remove_run(&mut self, run_id: &str) -> bool {
        let Some(_run) = self.runs.remove(run_id) else {
            return false;
        };
        self.records.remove_run(run_id);
        self.order.forget(run_id);
        self.own.taken_back(run_id);
        true
    }

    /// Takes in a run the emulator starts (see [`Runs::start`]).
    pub(crate) fn start_run(&mut self, run: Run, max_open: usize) -> Result<(), Refused> {
        let id = run.id.clone();
        self.runs.start(run, max_open)?;
        self.own.started(&id);
        Ok(())
    }

    /// Notes that a run settled: the eviction queue and the wire tap's judging of it.
    pub(crate) fn settled(&mut self, run_id: &str) {
        self.runs.settled(run_id);
        self.order.settled(run_id);
    }
}
