//! `triggers-lab init`: a first scenario and flow beside a service, that pass as written, so
//! that the next step is editing something that works.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Args;

use crate::exit::{CliError, OrKind, Result};
use crate::out::outln;

/// Options of `triggers-lab init`.
#[derive(Debug, Args)]
pub(crate) struct InitArgs {
    /// The folder to write into (created if missing).
    #[arg(default_value = "scenarios")]
    dir: PathBuf,
    /// The service's name, as its manifest says.
    #[arg(long, default_value = "shop")]
    service: String,
    /// Overwrite files that exist.
    #[arg(long)]
    force: bool,
}

fn flow(service: &str) -> String {
    format!(
        "# A flow: {service}'s entry, then its `charge` action. `triggers-lab deploy` reads this\n\
         # file as is; the scenario beside it uses it too.\n\
         id: order\n\
         nodes:\n\
         \x20 - {{id: in, type: service-in, service: {service}}}\n\
         \x20 - {{id: charge, type: action, service: {service}, action: charge}}\n\
         edges:\n\
         \x20 - {{id: e1, from: in, to: charge}}\n"
    )
}

fn scenario(service: &str) -> String {
    format!(
        "# A scenario: `triggers-lab run {{dir}}` runs every *.scenario.yaml under it.\n\
         # Guide: docs/scenarios.md. Replace the scripted service with your own\n\
         # (`command: [cargo, run, --bin, {service}]`) once it registers.\n\
         name: an order is charged\n\
         services:\n\
         \x20 - name: {service}\n\
         \x20   actions:\n\
         \x20     - name: charge\n\
         \x20       behavior: {{return: {{charged: true}}}}\n\
         flows:\n\
         \x20 - file: flows/order.yaml\n\
         steps:\n\
         \x20 - deploy: order\n\
         \x20 - trigger: {{flow: order, payload: {{order_id: o-1}}, as: r1}}\n\
         \x20 - wait_settled: r1\n\
         \x20 - expect_calls: {{service: {service}, action: charge, run: r1, count: 1}}\n"
    )
}

/// Writes `text` to `path` unless a file is there (and not `force`).
fn write(path: &Path, text: &str, force: bool) -> Result<()> {
    if path.exists() && !force {
        return Err(CliError::usage(format!(
            "{} exists; nothing was written (--force overwrites)",
            path.display()
        )));
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create {}", dir.display()))
            .failed()?;
    }
    triggers_scenarios::write_output(path, text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))
        .failed()
}

pub(crate) fn init(args: InitArgs) -> Result<()> {
    // It becomes a subject token and a YAML scalar: keep it plain.
    let plain = !args.service.is_empty()
        && args
            .service
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !plain {
        return Err(CliError::usage(format!(
            "--service {:?}: use letters, digits, '-' and '_'",
            args.service
        )));
    }
    let scenario_path = args.dir.join("order.scenario.yaml");
    let flow_path = args.dir.join("flows/order.yaml");
    // Both checked before either is written.
    for p in [&scenario_path, &flow_path] {
        if p.exists() && !args.force {
            return Err(CliError::usage(format!(
                "{} exists; nothing was written (--force overwrites)",
                p.display()
            )));
        }
    }
    write(&flow_path, &flow(&args.service), args.force)?;
    write(
        &scenario_path,
        &scenario(&args.service).replace("{dir}", &args.dir.display().to_string()),
        args.force,
    )?;
    outln!("wrote {}", scenario_path.display());
    outln!("wrote {}", flow_path.display());
    outln!();
    outln!("Run it:     triggers-lab run {}", args.dir.display());
    // The flow's service must be registered before the flow deploys: the scenario's scripted
    // service, started by `up` itself, is.
    outln!(
        "Deploy it:  triggers-lab up --detach --services {} && triggers-lab deploy {}",
        scenario_path.display(),
        flow_path.display()
    );
    Ok(())
}
