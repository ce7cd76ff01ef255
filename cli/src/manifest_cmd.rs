//! `triggers-lab manifest hash|canon|check FILE`.
//!
//! FILE is a manifest as sent on `triggers.v2.manifest.register` (any key order, catalog fields
//! included); `-` reads standard input. Exit codes: 0 success, 1 `check` found a problem, 2 the
//! input could not be read or decoded (the message names file, line, column and JSON path).

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Subcommand;
use triggers_sdk::error::{DecodeError, JsonError};
use triggers_sdk::wire::Manifest;

use crate::exit::{CliError, Kind};

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

/// Why a manifest command could not do its work. Every case is the input's (exit code 2, as
/// the table in `--help` says): each is decided here, where the error is made.
#[derive(Debug, thiserror::Error)]
enum ManifestError {
    /// The file (or standard input) cannot be read.
    #[error("{name}: cannot read: {source}")]
    Read {
        name: String,
        #[source]
        source: std::io::Error,
    },
    /// Not a manifest: the message says file, line, column and JSON path.
    #[error(
        "{name}:{}:{}: not a valid manifest{}: {}",
        .source.line,
        .source.column,
        if .source.path.is_empty() { String::new() } else { format!(" at {}", .source.path) },
        .source.message
    )]
    Decode {
        name: String,
        #[source]
        source: DecodeError,
    },
    /// A manifest whose contents have no hash input (a number JSON cannot write).
    #[error("{name}: {source}")]
    Hash {
        name: String,
        #[source]
        source: JsonError,
    },
    /// The canonical bytes could not be written out.
    #[error("{name}: cannot write: {source}")]
    Write {
        name: String,
        #[source]
        source: std::io::Error,
    },
}

impl From<ManifestError> for CliError {
    /// Every case is the input's. Said as its own message is: that already says its cause
    /// (where it is, what was wrong) in its own words.
    fn from(e: ManifestError) -> Self {
        match e {
            ManifestError::Read { .. }
            | ManifestError::Decode { .. }
            | ManifestError::Hash { .. }
            | ManifestError::Write { .. } => CliError::usage(e.to_string()),
        }
    }
}

/// One of the subcommands, given the file's display name and the decoded manifest.
type Action = fn(&str, &Manifest) -> Result<(), CliError>;

pub(crate) fn run(cmd: ManifestCommand) -> Result<(), CliError> {
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
    let bytes = read(file, &name)?;
    if matches!(cmd, ManifestCommand::Hash { .. })
        && let Some(hash) = Manifest::hash_of_json(&bytes)
    {
        // Straight from the text (the schemas never decoded into trees); anything that path
        // declines is decoded below, for the same hash or the error.
        println!("{hash}");
        return Ok(());
    }
    let manifest = Manifest::from_json(&bytes).map_err(|source| ManifestError::Decode {
        name: name.clone(),
        source,
    })?;
    let outcome = action(&name, &manifest);
    // The process ends here: leave the decoded manifest (for a large one, a tree of thousands of
    // maps) to the operating system rather than free it node by node, a tenth of the time.
    std::mem::forget(manifest);
    outcome
}

fn read(file: &Path, name: &str) -> Result<Vec<u8>, ManifestError> {
    if file.as_os_str() == "-" {
        triggers_scenarios::read_stdin()
    } else {
        triggers_scenarios::read_input(file)
    }
    .map_err(|source| ManifestError::Read {
        name: name.to_owned(),
        source,
    })
}

fn hash(name: &str, m: &Manifest) -> Result<(), CliError> {
    let hash = compute_hash(name, m)?;
    println!("{hash}");
    Ok(())
}

fn compute_hash(name: &str, m: &Manifest) -> Result<String, ManifestError> {
    m.compute_hash().map_err(|source| ManifestError::Hash {
        name: name.to_owned(),
        source,
    })
}

fn canon(name: &str, m: &Manifest) -> Result<(), CliError> {
    let bytes = m.hash_input().map_err(|source| ManifestError::Hash {
        name: name.to_owned(),
        source,
    })?;
    let mut out = std::io::stdout().lock();
    out.write_all(&bytes)
        .and_then(|()| out.flush())
        .map_err(|source| ManifestError::Write {
            name: name.to_owned(),
            source,
        })?;
    Ok(())
}

fn check(name: &str, m: &Manifest) -> Result<(), CliError> {
    let computed = compute_hash(name, m)?;
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
        Ok(())
    } else {
        let problems = issues.len() + usize::from(!hash_ok);
        println!(
            "{problems} problem(s); `triggers-lab manifest hash {name}` prints the right hash"
        );
        Err(CliError::said(Kind::Failed))
    }
}
