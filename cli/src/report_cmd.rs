//! `triggers-lab report merge`: the JSON reports of a sharded run (`run --shard K/N --json`)
//! joined into the JSON and JUnit reports one unsharded run would have written.

use std::path::PathBuf;

use clap::Subcommand;

use crate::exit::{self, CliError, Kind};
use crate::out::{self, out};

/// `triggers-lab report ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum ReportCommand {
    /// Merge the JSON reports of the shards of a run (`run --shard K/N --json FILE`) into one;
    /// exit 1 when a scenario in them failed, as the unsharded run would have.
    Merge {
        /// The shards' JSON reports.
        #[arg(required = true, value_name = "REPORT.json")]
        reports: Vec<PathBuf>,
        /// Write the merged JUnit XML report to FILE (`-` for standard output).
        #[arg(long, value_name = "FILE")]
        junit: Option<PathBuf>,
        /// Write the merged JSON report to FILE (`-` for standard output; the default when
        /// neither --junit nor --json is given).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
    },
}

pub(crate) fn run(command: ReportCommand) -> exit::Result<()> {
    let ReportCommand::Merge {
        reports,
        junit,
        json,
    } = command;
    if junit.as_deref().is_some_and(|p| p.as_os_str() == "-")
        && json.as_deref().is_some_and(|p| p.as_os_str() == "-")
    {
        return Err(CliError::usage(
            "only one of --junit - and --json - can have standard output",
        ));
    }
    let json = match (&junit, json) {
        (None, None) => Some(PathBuf::from("-")),
        (_, json) => json,
    };
    let mut read = Vec::new();
    for path in &reports {
        let report = triggers_scenarios::merge::read_report(path)
            .map_err(|e| CliError::usage(e.to_string()))?;
        read.push((path.display().to_string(), report));
    }
    check_shards(&read);
    let merged =
        triggers_scenarios::merge::merge(read).map_err(|e| CliError::usage(e.to_string()))?;
    let mut failed = merged.failed() > 0;
    if !crate::run_cmd::write_reports(&merged, junit.as_deref(), json.as_deref()) {
        failed = true;
    }
    let machine_stdout = [&junit, &json]
        .iter()
        .any(|p| p.as_deref().is_some_and(|p| p.as_os_str() == "-"));
    let text = format!(
        "merged {} report(s)\n{}",
        reports.len(),
        crate::run_cmd::summary(&merged, !machine_stdout && out::colour_stdout())
    );
    if machine_stdout {
        eprint!("{text}");
    } else {
        out!("{text}");
    }
    if failed {
        return Err(CliError::said(Kind::Failed));
    }
    Ok(())
}

/// Warns when the reports are not every shard of one split: a shard missing, or shards of
/// different splits. The merge goes on (the scenarios found are all reported).
fn check_shards(reports: &[(String, triggers_scenarios::SuiteReport)]) {
    let shards: Vec<_> = reports
        .iter()
        .filter_map(|(_, r)| r.shard.as_ref())
        .collect();
    let Some(first) = shards.first() else {
        return;
    };
    if shards
        .iter()
        .any(|s| s.count != first.count || s.selected != first.selected)
    {
        eprintln!(
            "warning: these reports come from different splits (--shard K/N with different N, or different selections): the merged order may differ from an unsharded run's"
        );
        return;
    }
    let missing: Vec<String> = (1..=first.count)
        .filter(|k| !shards.iter().any(|s| s.index == *k))
        .map(|k| format!("{k}/{}", first.count))
        .collect();
    if !missing.is_empty() {
        eprintln!(
            "warning: no report of shard {}: its scenarios are not in the merged report",
            missing.join(", ")
        );
    }
}
