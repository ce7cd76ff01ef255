//! `run --shard K/N [--durations REPORT.json]`: which of the selected scenarios this shard runs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use triggers_scenarios::shard::{Shard, ShardItem, assign};
use triggers_scenarios::{Outcome, ReportReadError, Scenario, ShardInfo};

/// How long each scenario (by name) took in an earlier run.
pub(super) type Durations = HashMap<String, Duration>;

/// The durations in a JSON report; scenarios it did not run are left out (unknown).
pub(super) fn durations(path: &Path) -> Result<Durations, ReportReadError> {
    let report = triggers_scenarios::merge::read_report(path)?;
    Ok(report
        .scenarios
        .into_iter()
        .filter(|s| s.outcome != Outcome::NotRun)
        .map(|s| (s.name, s.duration))
        .collect())
}

/// What orders a scenario the same on every machine: its name, then its file relative to the
/// folder given on the command line it was found in (a file given itself: its file name), so
/// neither the order of the arguments nor where the checkout lives changes the split.
fn key(scenario: &Scenario, roots: &[PathBuf]) -> String {
    let file = Path::new(&scenario.file);
    let relative = roots
        .iter()
        .filter(|r| r.is_dir())
        .find_map(|r| file.strip_prefix(r).ok())
        .or_else(|| file.file_name().map(Path::new))
        .unwrap_or(file);
    let relative: Vec<_> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect();
    format!("{}\u{0}{}", scenario.name, relative.join("/"))
}

/// The scenarios of `shard`, in the order they were selected, and where each stands in the
/// whole selection.
pub(super) fn shard(
    roots: &[PathBuf],
    selected: Vec<Scenario>,
    shard: Shard,
    durations: Option<&Durations>,
) -> (Vec<Scenario>, ShardInfo) {
    let items: Vec<ShardItem> = selected
        .iter()
        .map(|s| ShardItem {
            key: key(s, roots),
            duration: durations.and_then(|d| d.get(&s.name).copied()),
        })
        .collect();
    let shard_of = assign(&items, shard.count);
    let total = selected.len();
    let (positions, scenarios): (Vec<usize>, Vec<Scenario>) = selected
        .into_iter()
        .enumerate()
        .filter(|(i, _)| shard_of[*i] + 1 == shard.index)
        .unzip();
    (
        scenarios,
        ShardInfo {
            index: shard.index,
            count: shard.count,
            selected: total,
            positions,
        },
    )
}
