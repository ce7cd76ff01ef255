//! `triggers-lab demo`: the shipped flow-lab scenarios, built into the binary so that the binary
//! alone runs them, from any folder. The one that starts the real flow-lab example with `cargo
//! run` is left out: its scripted twin (`flow-lab-scripted`) shows the same flow without cargo.

use std::path::{Path, PathBuf};

macro_rules! embed {
    ($path:literal) => {
        (
            $path,
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../", $path)),
        )
    };
}
/// The scenarios and the files they read, at their paths relative to the repository's root (the
/// scenarios' `file:` references are relative, so the layout is kept).
pub(crate) const FILES: &[(&str, &str)] = &[
    embed!("scenarios/flow-lab/broadcast-two-replicas.scenario.yaml"),
    embed!("scenarios/flow-lab/capability-gate.scenario.yaml"),
    embed!("scenarios/flow-lab/dlq-dedup.scenario.yaml"),
    embed!("scenarios/flow-lab/dlq-fallback.scenario.yaml"),
    embed!("scenarios/flow-lab/durable-timer-target-mismatch.scenario.yaml"),
    embed!("scenarios/flow-lab/durable-timer.scenario.yaml"),
    embed!("scenarios/flow-lab/flow-lab-scripted.scenario.yaml"),
    embed!("scenarios/flow-lab/graceful-shutdown.scenario.yaml"),
    embed!("scenarios/flow-lab/http-output.scenario.yaml"),
    embed!("scenarios/flow-lab/load.scenario.yaml"),
    embed!("scenarios/flow-lab/load-payloads.jsonl"),
    embed!("scenarios/flow-lab/manifest-hash-mismatch.scenario.yaml"),
    embed!("scenarios/flow-lab/nats-restart.scenario.yaml"),
    embed!("scenarios/flow-lab/poison-message.scenario.yaml"),
    embed!("scenarios/flow-lab/retries-then-dlq.scenario.yaml"),
    embed!("scenarios/flow-lab/timeouts-and-panics.scenario.yaml"),
    embed!("scenarios/flow-lab/wrong-protocol-major.scenario.yaml"),
    embed!("sdk/examples/flows/flow_lab.yaml"),
];

/// The shipped scenarios that need more than the binary (a Rust toolchain), so are not built in.
#[cfg(test)]
pub(crate) const LEFT_OUT: &[&str] = &["flow-lab.scenario.yaml", "fuzz.scenario.yaml"];

/// Writes the embedded files under `dir`; returns the scenarios' folder.
pub(crate) fn unpack(dir: &Path) -> std::io::Result<PathBuf> {
    for (path, text) in FILES {
        let to = dir.join(path);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&to, text)?;
    }
    Ok(dir.join("scenarios/flow-lab"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scenario added to scenarios/flow-lab must be built into the demo too (or be left out
    /// on purpose).
    #[test]
    fn every_shipped_flow_lab_scenario_is_embedded() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/flow-lab");
        for entry in std::fs::read_dir(dir).unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            if !triggers_scenarios::is_scenario_file(Path::new(&name)) {
                continue;
            }
            let embedded = FILES.iter().any(|(p, _)| p.ends_with(&format!("/{name}")));
            assert!(
                embedded || LEFT_OUT.contains(&name.as_str()),
                "{name} is not in the demo"
            );
        }
    }
}
