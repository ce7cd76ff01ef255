//! `triggers-lab doctor`: what this machine offers for a nats-server, what would be chosen and why,
//! and what to do to enable the rest. `--prepare` first fetches the pinned binary and builds the
//! Docker image where they are missing (what `scripts/test` does on a fresh machine).
//!
//! Exit codes: 0 when some backend works, 3 when none does (an environment problem, not a failed
//! test: CI can tell the two apart).

use natsbox::{NatsConfig, survey};

use crate::exit::{CliError, Kind};

/// `triggers-lab doctor [--prepare]`.
#[derive(Debug, clap::Args)]
pub(crate) struct DoctorArgs {
    /// Fetch the pinned nats-server into the cache and build the Docker image (when Docker
    /// answers) if they are missing, then report. Idempotent.
    #[arg(long)]
    prepare: bool,
    /// Print only the path of the pinned binary (after --prepare) on stdout, for scripts.
    #[arg(long, requires = "prepare")]
    print_binary: bool,
}

pub(crate) fn run(args: DoctorArgs) -> crate::exit::Result<()> {
    let runtime = crate::exit::runtime()?;
    runtime.block_on(async move {
        // As `run`, `demo` and `up` choose: an exported TRIGGERS_NATS_URL is not theirs.
        let config = NatsConfig {
            ignore_env_url: true,
            ..NatsConfig::default()
        };
        let mut binary = None;
        if args.prepare {
            match survey::prepare(&config, |line: &str| eprintln!("{line}")).await {
                Ok(prepared) => {
                    for problem in &prepared.problems {
                        eprintln!("could not prepare: {problem}");
                    }
                    binary = prepared.binary;
                }
                Err(e) => return Err(CliError::env(e.to_string())),
            }
        }
        let found = match survey::survey(&config).await {
            Ok(mut found) => {
                crate::nats_choice::external_by_flag(&mut found);
                found
            }
            Err(e) => return Err(CliError::env(e.to_string())),
        };
        if args.print_binary {
            eprintln!("{found}");
            match binary {
                Some(path) => println!("{}", path.display()),
                None => return Err(CliError::said(Kind::Environment)),
            }
        } else {
            println!("{found}");
        }
        if found.works() {
            Ok(())
        } else {
            Err(CliError::said(Kind::Environment))
        }
    })
}
