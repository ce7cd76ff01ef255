//! What every `--help` ends with: examples of the command, then the exit codes. Set on the
//! command tree at start, so that no subcommand (nested ones included) can be left without them.

use clap::Command;

use crate::exit;

/// Examples per command path (`runs list` is `"runs list"`); a command without its own (a group
/// such as `manifest`) shows those of its subcommands' group entry.
const EXAMPLES: &[(&str, &str)] = &[
    (
        "",
        "triggers-lab demo                    # the shipped scenarios, step by step\n\
         triggers-lab init checks && triggers-lab run checks\n\
         triggers-lab up --detach             # a dev server on nats://127.0.0.1:4222",
    ),
    (
        "manifest",
        "triggers-lab manifest hash manifest.json\n\
         triggers-lab manifest check manifest.json",
    ),
    (
        "manifest hash",
        "triggers-lab manifest hash manifest.json\ncat manifest.json | triggers-lab manifest hash -",
    ),
    (
        "manifest canon",
        "triggers-lab manifest canon manifest.json | sha256sum",
    ),
    (
        "manifest check",
        "triggers-lab manifest check manifest.json",
    ),
    (
        "up",
        "triggers-lab up --detach                          # in the background; stop it with `down`\n\
         triggers-lab up --port 0 --instance ci -q         # any free port\n\
         triggers-lab up --services checks/order.scenario.yaml --record rec.jsonl",
    ),
    (
        "deploy",
        "triggers-lab deploy flows/order.yaml\ncat flow.json | triggers-lab deploy -",
    ),
    (
        "trigger",
        "triggers-lab trigger order '{\"order_id\": \"o-1\"}' --wait\n\
         triggers-lab trigger order @payload.json\n\
         triggers-lab trigger order --raw 'not json'      # a poison message",
    ),
    (
        "watch",
        "triggers-lab watch\ntriggers-lab watch --instance ci",
    ),
    (
        "scenario",
        "triggers-lab scenario from-record rec.jsonl -o rec.scenario.yaml",
    ),
    (
        "scenario from-record",
        "triggers-lab scenario from-record rec.jsonl -o rec.scenario.yaml\n\
         triggers-lab scenario from-record rec.jsonl --services checks/order.scenario.yaml\n\
         triggers-lab scenario from-record rec.jsonl --command shop=\"cargo run -q\"",
    ),
    (
        "run",
        "triggers-lab run checks                            # every *.scenario.yaml under checks/\n\
         triggers-lab run checks -j 4 --junit junit.xml --json report.json\n\
         triggers-lab run checks --filter order --filter refund --skip slow\n\
         triggers-lab run checks --shard 1/3 --json shard-1.json\n\
         triggers-lab run checks --watch                    # again on every change",
    ),
    (
        "report",
        "triggers-lab report merge shard-*.json --junit all.xml --json all.json",
    ),
    (
        "report merge",
        "triggers-lab report merge shard-*.json --junit all.xml --json all.json",
    ),
    (
        "conform",
        "triggers-lab conform -- python3 examples/conformance-python/service.py\n\
         triggers-lab conform --only echo -- ./my-service\n\
         triggers-lab conform --list",
    ),
    (
        "doctor",
        "triggers-lab doctor\ntriggers-lab doctor --prepare     # fetch the pinned nats-server now",
    ),
    ("demo", "triggers-lab demo\ntriggers-lab demo -j 2 -v"),
    (
        "init",
        "triggers-lab init checks\ntriggers-lab init checks --service shop",
    ),
    (
        "completions",
        "triggers-lab completions bash > ~/.local/share/bash-completion/completions/triggers-lab\n\
         triggers-lab completions zsh > ~/.zfunc/_triggers-lab",
    ),
    ("status", "triggers-lab status\ntriggers-lab status --json"),
    (
        "down",
        "triggers-lab down\ntriggers-lab down --instance ci\ntriggers-lab down --all",
    ),
    (
        "runs",
        "triggers-lab runs list --last 5\ntriggers-lab runs show run-05a2265a75928d7c\ntriggers-lab runs cancel run-05a2265a75928d7c",
    ),
    (
        "runs list",
        "triggers-lab runs list\ntriggers-lab runs list --last 5 --json",
    ),
    (
        "runs show",
        "triggers-lab runs show run-05a2265a75928d7c\ntriggers-lab runs show run-05a2265a75928d7c --json",
    ),
    (
        "runs cancel",
        "triggers-lab runs cancel run-05a2265a75928d7c\ntriggers-lab runs cancel run-05a2265a75928d7c --json",
    ),
    ("flows", "triggers-lab flows\ntriggers-lab flows --json"),
    (
        "dlq",
        "triggers-lab dlq list --run run-05a2265a75928d7c\ntriggers-lab dlq show run-05a2265a75928d7c:in:dlq:1796028352414030586",
    ),
    (
        "dlq list",
        "triggers-lab dlq list\ntriggers-lab dlq list --run run-05a2265a75928d7c --json",
    ),
    (
        "dlq show",
        "triggers-lab dlq show run-05a2265a75928d7c:in:dlq:1796028352414030586",
    ),
    (
        "services",
        "triggers-lab services\ntriggers-lab services --json",
    ),
    (
        "load",
        "triggers-lab load order --runs 300 --concurrency 16 --payload '{\"id\": \"o-{{i}}\"}'\n\
         triggers-lab load order --runs 50 --rate 25 --p99-below 500ms --json",
    ),
    (
        "fuzz",
        "triggers-lab fuzz --service shop --action charge --runs 200\n\
         triggers-lab fuzz --service shop --action charge --seed 7 --invalid",
    ),
    (
        "replay",
        "triggers-lab replay rec.jsonl\n\
         triggers-lab replay rec.jsonl --services checks/order.scenario.yaml",
    ),
    (
        "advance",
        "triggers-lab advance 1h\ntriggers-lab advance 1h30m --instance ci",
    ),
];

/// Every command of the tree, each with its examples (when it has some) and the exit codes.
pub(crate) fn with_examples_and_exit_codes(cmd: Command) -> Command {
    fn walk(cmd: Command, path: &str) -> Command {
        let names: Vec<String> = cmd
            .get_subcommands()
            .map(|s| s.get_name().to_owned())
            .filter(|n| n != "help")
            .collect();
        let mut cmd = cmd;
        for name in names {
            let sub_path = if path.is_empty() {
                name.clone()
            } else {
                format!("{path} {name}")
            };
            cmd = cmd.mut_subcommand(&name, |sub| walk(sub, &sub_path));
        }
        let mut after = String::new();
        if let Some((_, examples)) = EXAMPLES.iter().find(|(p, _)| *p == path) {
            after.push_str("Examples:\n");
            for line in examples.lines() {
                after.push_str("  ");
                after.push_str(line.trim_start());
                after.push('\n');
            }
            after.push('\n');
        }
        if path == "conform" {
            after.push_str(CONFORM_EXIT);
        } else {
            after.push_str(exit::HELP);
        }
        cmd.after_help(after)
    }
    walk(cmd, "")
}

/// `conform`'s codes: those of every command, said for a judged service.
const CONFORM_EXIT: &str = "\
Exit codes (the same for every command, here for a judged service):
  0    done; every check passed
  1    a verdict failed: a check failed or could not be judged
  2    usage: a bad flag or argument
  3    environment: the service or a nats-server could not be started
  130  stopped by SIGINT (Ctrl-C); 143 by SIGTERM; 129 by SIGHUP (terminal closed)

The service to judge implements the conformance service of docs/conform.md.";

/// The paths of every command that has examples, for the test that every command has some.
#[cfg(test)]
pub(crate) fn example_paths() -> impl Iterator<Item = &'static str> {
    EXAMPLES.iter().map(|(p, _)| *p)
}
