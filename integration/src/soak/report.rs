//! What a soak showed: the faults planned, the accounting, the verdict.

use std::collections::BTreeMap;
use std::time::Duration;

/// Faults planned, by kind.
#[derive(Debug, Default, Clone)]
pub struct Faults {
    /// Retryable failures on the first attempts (recovered).
    pub flaky: u64,
    /// Panics on the first attempts (recovered).
    pub panics: u64,
    /// Attempts past the timeout (recovered).
    pub timeouts: u64,
    /// Permanent failures (dead-lettered at once).
    pub permanent: u64,
    /// Retryable failures on every attempt (dead-lettered after the last).
    pub exhausted: u64,
    /// Panics on every attempt (dead-lettered after the last).
    pub always_panics: u64,
    /// Payloads that are not JSON (dead-lettered by the receiver).
    pub poison: u64,
}

impl Faults {
    /// Every fault planned.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.flaky
            + self.panics
            + self.timeouts
            + self.permanent
            + self.exhausted
            + self.always_panics
            + self.poison
    }
}

/// What a soak showed. [`SoakReport::passed`] is the verdict.
#[derive(Debug, Default, Clone)]
pub struct SoakReport {
    /// The seed.
    pub seed: u64,
    /// Runs triggered.
    pub runs: usize,
    /// Runs checked (settled, and compared with the oracle).
    pub checked: usize,
    /// Runs that succeeded.
    pub succeeded: usize,
    /// Runs that failed (into the DLQ), as planned.
    pub failed: usize,
    /// Faults planned.
    pub faults: Faults,
    /// nats-server kills made.
    pub nats_kills: usize,
    /// Replica crashes made.
    pub replica_crashes: usize,
    /// Runs that did not settle, and node executions owed but missing.
    pub lost: u64,
    /// Node executions beyond what was owed, DLQ entries beyond one per failed run, runs the
    /// driver did not start.
    pub duplicated: u64,
    /// Runs whose status was not the planned one.
    pub wrong_status: usize,
    /// DLQ entries owed and DLQ entries in the stream.
    pub dlq_owed: u64,
    /// DLQ entries stored by the DLQ stream (after dedup).
    pub dlq_stored: u64,
    /// A handler that ran to success again for the same run and node (after a crash or a lost
    /// ack: at-least-once delivery); not a duplicate settlement, reported apart.
    pub handler_reruns: u64,
    /// DLQ entries that repeat another for the same delivery (same idempotency key and subject),
    /// as the DLQ stream holds them: a failure run again by another replica after a crash lost
    /// the first one's ack. Counted in `duplicated` too.
    pub dlq_repeats: u64,
    /// The runs of the repeated DLQ entries.
    pub dlq_repeat_runs: Vec<String>,
    /// Handled keys and kept outcomes the services' bounded caches forgot
    /// (`RuntimeStats::handled_keys_evicted` + `outcomes_evicted`): by design, reported.
    pub cache_evictions: u64,
    /// Messages the services gave up on (`RuntimeStats::given_up`).
    pub given_up: u64,
    /// Registrations of the hostile client the emulator refused, as it must.
    pub refused_registrations: u64,
    /// Completion events for made-up runs the hostile client published.
    pub fake_events: u64,
    /// Of their runs, those the emulator did not follow (beyond `max_followed_runs`).
    pub unfollowed_runs: u64,
    /// Conformance violations by rule.
    pub violations: BTreeMap<String, u64>,
    /// Peak resident memory of this process (emulator and services), KiB.
    pub peak_rss_kib: u64,
    /// Peak resident memory of the nats-server processes, KiB (the largest of its lives).
    pub nats_peak_rss_kib: u64,
    /// Wall time.
    pub elapsed: Duration,
    /// Why the accounting is incomplete, if it is (a verdict on partial data is not one).
    pub partial: Vec<String>,
    /// Each problem, one line, enough to find it.
    pub problems: Vec<String>,
}

/// Violations that mean a delivery was lost or a node ran twice.
pub(super) const DUPLICATE_OR_LOSS_RULES: [&str; 3] = [
    "completion_unexpected",
    "idempotency_key_reused",
    "delivery_deduplicated",
];

impl SoakReport {
    /// The verdict: every run checked, none lost, none duplicated, the accounting complete.
    #[must_use]
    pub fn passed(&self) -> bool {
        self.partial.is_empty()
            && self.problems.is_empty()
            && self.lost == 0
            && self.duplicated == 0
            && self.wrong_status == 0
            && self.checked == self.runs
            && self.given_up == 0
            && self.dlq_owed == self.dlq_stored
    }

    /// The figures as one markdown table row (the header is [`SoakReport::TABLE_HEADER`]).
    #[must_use]
    pub fn table_row(&self) -> String {
        format!(
            "| {} | {} | {} | {} | {} | {} / {} | {} | {} | {} | {} | {} | {} MiB | {} MiB | {:.0?} |",
            self.runs,
            self.succeeded,
            self.failed,
            self.faults.total(),
            self.nats_kills,
            self.dlq_stored,
            self.dlq_owed,
            self.lost,
            self.duplicated,
            self.wrong_status,
            self.handler_reruns,
            self.given_up,
            self.peak_rss_kib / 1024,
            self.nats_peak_rss_kib / 1024,
            self.elapsed
        )
    }

    /// The header of [`SoakReport::table_row`].
    pub const TABLE_HEADER: &'static str = "| runs | succeeded | failed (DLQ) | faults | nats-server kills | DLQ stored / owed | lost | duplicated | wrong status | handler re-runs | given up | peak RSS (emulator + services) | peak RSS (nats-server) | time |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|";
}

impl std::fmt::Display for SoakReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "soak, seed {}: {} runs, {} checked, {} succeeded, {} failed",
            self.seed, self.runs, self.checked, self.succeeded, self.failed
        )?;
        writeln!(
            f,
            "faults: {:?}; nats-server kills {}, replica crashes {}",
            self.faults, self.nats_kills, self.replica_crashes
        )?;
        writeln!(
            f,
            "lost {}, duplicated {}, wrong status {}, DLQ stored {} of {} owed ({} repeats), handler re-runs {}, given up {}, cache evictions {}",
            self.lost,
            self.duplicated,
            self.wrong_status,
            self.dlq_stored,
            self.dlq_owed,
            self.dlq_repeats,
            self.handler_reruns,
            self.given_up,
            self.cache_evictions
        )?;
        writeln!(
            f,
            "hostile: {} registrations refused, {} fake events for made-up runs ({} runs not followed)",
            self.refused_registrations, self.fake_events, self.unfollowed_runs
        )?;
        writeln!(
            f,
            "violations {:?}; peak RSS {} MiB (nats-server {} MiB); {:.1?}",
            self.violations,
            self.peak_rss_kib / 1024,
            self.nats_peak_rss_kib / 1024,
            self.elapsed
        )?;
        crate::write_verdict(f, &self.partial, &self.problems, 50, self.passed())
    }
}
