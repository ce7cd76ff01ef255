//! Running many scenarios: loading them from files and folders, choosing with a filter, and
//! running up to `jobs` at once, each on its own nats-server.

use std::path::PathBuf;
use std::time::Instant;

use regex::Regex;

use crate::error::LoadError;
use crate::load::{self, Scenario};
use crate::report::SuiteReport;
use crate::runner::{self, RunOptions};

/// Chooses scenarios by name or file: a regular expression, or (when the text is not one) a
/// substring.
#[derive(Debug, Clone)]
pub enum Filter {
    /// A regular expression.
    Regex(Regex),
    /// A substring.
    Substring(String),
}

impl Filter {
    /// A regular expression when `text` is one, else a substring.
    #[must_use]
    pub fn new(text: &str) -> Self {
        match Regex::new(text) {
            Ok(re) => Filter::Regex(re),
            Err(_) => Filter::Substring(text.to_owned()),
        }
    }

    /// Whether the scenario's name or file matches.
    #[must_use]
    pub fn matches(&self, scenario: &Scenario) -> bool {
        match self {
            Filter::Regex(re) => re.is_match(&scenario.name) || re.is_match(&scenario.file),
            Filter::Substring(s) => scenario.name.contains(s) || scenario.file.contains(s),
        }
    }
}

/// Loads every scenario under `paths`: files as named, folders searched recursively for
/// `*.scenario.yaml` (see [`discover`](crate::discover)).
///
/// # Errors
/// Every problem of every file that cannot be read or accepted, each with file, line and
/// column.
pub fn load_all(paths: &[PathBuf]) -> Result<Vec<Scenario>, Vec<LoadError>> {
    let files = crate::discover::discover(paths).map_err(|e| vec![e])?;
    let mut scenarios = Vec::new();
    let mut errors = Vec::new();
    for f in files {
        match load::load_file(&f) {
            Ok(s) => scenarios.push(s),
            Err(e) => errors.extend(e.into_vec()),
        }
    }
    if errors.is_empty() {
        Ok(scenarios)
    } else {
        Err(errors)
    }
}

/// Runs the scenarios, `jobs` at a time (at least one), in file order; the report lists them
/// in that order whatever order they finish in. When [`RunOptions::interrupt`] is requested,
/// running scenarios stop (and clean up) and the rest are reported as not run.
///
/// The scenarios run concurrently on the calling task (their services, emulators and servers on
/// tasks and processes of their own), so the future need not be `Send`: `NatsServer::restart`'s
/// is not.
pub async fn run_suite(scenarios: Vec<Scenario>, jobs: usize, options: &RunOptions) -> SuiteReport {
    use futures::StreamExt;
    let jobs = jobs.max(1);
    let started = Instant::now();
    let total = scenarios.len();
    let reports: Vec<_> = futures::stream::iter(scenarios.iter().enumerate())
        .map(|(index, scenario)| async move {
            // Futures are made as slots free up: one not begun when the run is interrupted
            // never starts.
            if options.interrupt.reason().is_some() {
                return runner::not_run(scenario);
            }
            runner::run_scenario(scenario, options, index, total).await
        })
        .buffered(jobs)
        .collect()
        .await;
    SuiteReport {
        scenarios: reports,
        duration: started.elapsed(),
        jobs,
        interrupted: options.interrupt.reason(),
        shard: None,
    }
}
