//! `triggers-lab manifest hash|canon|check FILE`.
//!
//! FILE is a manifest as sent on `triggers.v2.manifest.register` (any key order, catalog fields
//! included); `-` reads standard input. Exit codes: 0 success, 1 `check` found a problem, 2 the
//! input could not be read or decoded (the message names file, line, column and JSON path).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Subcommand;
use triggers_sdk::wire::Manifest;

/// What to do with a manifest.
#[derive(Debug, Subcommand)]
pub(crate) enum ManifestCommand {
    /// Print the manifest hash: `sha256:<64 lowercase hex>`.
    Hash {
        /// The manifest file, or `-` for standard input.
        file: PathBuf,
    },
    /// Print the exact bytes that are hashed (no trailing newline).
    Canon {
        /// The manifest file, or `-` for standard input.
        file: PathBuf,
    },
    /// Validate the manifest and say whether its `manifest_hash` is right.
    Check {
        /// The manifest file, or `-` for standard input.
        file: PathBuf,
    },
}

/// Exit code for input that cannot be read or decoded.
const BAD_INPUT: u8 = 2;

/// One of the subcommands, given the file's display name and the decoded manifest.
type Action = fn(&str, &Manifest) -> Result<ExitCode, String>;

pub(crate) fn run(cmd: ManifestCommand) -> ExitCode {
    let (file, action): (&PathBuf, Action) = match &cmd {
        ManifestCommand::Hash { file } => (file, hash),
        ManifestCommand::Canon { file } => (file, canon),
        ManifestCommand::Check { file } => (file, check),
    };
    let name = if file.as_os_str() == "-" {
        "<stdin>".to_owned()
    } else {
        file.display().to_string()
    };
    let bytes = match read(file) {
        Ok(bytes) => bytes,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(BAD_INPUT);
        }
    };
    if matches!(cmd, ManifestCommand::Hash { .. })
        && let Some(hash) = Manifest::hash_of_json(&bytes)
    {
        // Straight from the text (the schemas never decoded into trees); anything that path
        // declines is decoded below, for the same hash or the error.
        println!("{hash}");
        return ExitCode::SUCCESS;
    }
    let manifest = match decode(&name, &bytes) {
        Ok(m) => m,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(BAD_INPUT);
        }
    };
    let outcome = action(&name, &manifest);
    // The process ends here: leave the decoded manifest (for a large one, a tree of thousands of
    // maps) to the operating system rather than free it node by node, a tenth of the time.
    std::mem::forget(manifest);
    match outcome {
        Ok(code) => code,
        Err(message) => {
            eprintln!("error: {name}: {message}");
            ExitCode::from(BAD_INPUT)
        }
    }
}

fn read(file: &Path) -> Result<Vec<u8>, String> {
    if file.as_os_str() == "-" {
        return triggers_scenarios::read_stdin().map_err(|e| format!("<stdin>: cannot read: {e}"));
    }
    triggers_scenarios::read_input(file)
        .map_err(|e| format!("{}: cannot read: {e}", file.display()))
}

fn decode(name: &str, bytes: &[u8]) -> Result<Manifest, String> {
    Manifest::from_json(bytes).map_err(|e| {
        let at = if e.path.is_empty() {
            String::new()
        } else {
            format!(" at {}", e.path)
        };
        format!(
            "{name}:{}:{}: not a valid manifest{at}: {}",
            e.line, e.column, e.message
        )
    })
}

fn hash(_name: &str, m: &Manifest) -> Result<ExitCode, String> {
    let hash = m.compute_hash().map_err(|e| e.to_string())?;
    println!("{hash}");
    Ok(ExitCode::SUCCESS)
}

fn canon(_name: &str, m: &Manifest) -> Result<ExitCode, String> {
    let bytes = m.hash_input().map_err(|e| e.to_string())?;
    let mut out = std::io::stdout().lock();
    out.write_all(&bytes)
        .and_then(|()| out.flush())
        .map_err(|e| format!("cannot write: {e}"))?;
    Ok(ExitCode::SUCCESS)
}

fn check(name: &str, m: &Manifest) -> Result<ExitCode, String> {
    let computed = m.compute_hash().map_err(|e| e.to_string())?;
    let issues = m.validate();
    println!(
        "{name}: service {:?} version {:?}, protocol {}, {} action(s), {} source(s)",
        m.service,
        m.service_version,
        m.protocol_version,
        m.actions.len(),
        m.service_sources.len()
    );
    let hash_ok = m.manifest_hash == computed;
    if hash_ok {
        println!("  manifest_hash: ok ({computed})");
    } else if m.manifest_hash.is_empty() {
        println!("  manifest_hash: missing; it should be {computed}");
    } else {
        println!(
            "  manifest_hash: wrong: the manifest says {}, the hash of its contents is {computed}",
            m.manifest_hash
        );
    }
    // A malformed hash is reported above, with the right one.
    let issues: Vec<_> = issues
        .into_iter()
        .filter(|i| hash_ok || i.path != "manifest_hash")
        .collect();
    for issue in &issues {
        println!("  {issue}");
    }
    if hash_ok && issues.is_empty() {
        println!("ok");
        Ok(ExitCode::SUCCESS)
    } else {
        let problems = issues.len() + usize::from(!hash_ok);
        println!(
            "{problems} problem(s); `triggers-lab manifest hash {name}` prints the right hash"
        );
        Ok(ExitCode::from(1))
    }
}
