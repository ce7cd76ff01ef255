//! What a new user met (issue 33), each with the test that fails without its fix: no
//! nats-server is the environment's problem (exit 3, said once, no scenario failed), the one
//! rule for `TRIGGERS_NATS_URL` and remedies that work for the command, `status` with nothing
//! running, `--filter` repeatable with `--skip`.

use std::path::{Path, PathBuf};
use std::process::Command;

use triggers_testkit::cli::{bin, streams};

fn docs_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/docs")
        .join(name)
}

/// `triggers-lab` on a machine with no way to a nats-server: no binary on PATH, offline with an
/// empty cache, no Docker engine.
fn without_any_server(home: &Path) -> Command {
    let path: Vec<PathBuf> = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .filter(|dir| !dir.join("nats-server").exists())
        .collect();
    let mut c = bin();
    c.env("PATH", std::env::join_paths(path).unwrap())
        .env("HOME", home)
        .env("XDG_RUNTIME_DIR", home)
        .env("TRIGGERS_NATS_OFFLINE", "1")
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .env_remove("TRIGGERS_NATS_SERVER_BIN")
        .env_remove("TRIGGERS_NATS_BACKEND")
        .env_remove("TRIGGERS_NATS_CACHE_DIR")
        .env_remove("XDG_CACHE_HOME")
        .env("TRIGGERS_NATS_URL", "nats://127.0.0.1:4222");
    c
}

#[test]
fn no_nats_server_is_exit_3_said_once_with_no_scenario_failed() {
    let home = tempfile::tempdir().unwrap();
    let junit = home.path().join("junit.xml");
    for args in [
        vec![
            "run".into(),
            docs_fixture("checks2").display().to_string(),
            "--junit".into(),
            junit.display().to_string(),
        ],
        vec!["demo".into()],
        vec!["up".into(), "--port".into(), "0".into()],
    ] {
        let out = without_any_server(home.path())
            .args(&args)
            .output()
            .unwrap();
        let (stdout, stderr) = streams(&out);
        let all = format!("{stdout}{stderr}");
        assert_eq!(out.status.code(), Some(3), "{args:?}:\n{all}");
        assert_eq!(
            all.matches("nats-server backends, in the order they are tried")
                .count(),
            1,
            "{args:?}: the diagnosis once:\n{all}"
        );
        assert!(
            !all.contains("FAIL"),
            "{args:?}: no scenario failed:\n{all}"
        );
        assert!(!all.contains("failed:"), "{args:?}:\n{all}");
        // The remedies work for this command: a URL by --nats (TRIGGERS_NATS_URL is exported
        // here and is not what `run` uses), the offline fetch with the variable overridden.
        assert!(
            all.contains("pass --nats nats://127.0.0.1:4222"),
            "{args:?}:\n{all}"
        );
        assert!(
            all.contains("TRIGGERS_NATS_OFFLINE=0 triggers-lab doctor --prepare"),
            "{args:?}:\n{all}"
        );
        // No Rust names, no paths of the repository.
        for word in [
            "NatsConfig",
            "Backend::",
            "natsbox/docker",
            "build-nats-image",
        ] {
            assert!(!all.contains(word), "{args:?}: {word} in:\n{all}");
        }
    }
    assert!(!junit.exists(), "no report of scenarios that did not run");
}

#[test]
fn doctor_states_the_same_rule_for_triggers_nats_url() {
    let home = tempfile::tempdir().unwrap();
    let out = without_any_server(home.path())
        .arg("doctor")
        .output()
        .unwrap();
    let (stdout, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(3), "{stdout}{stderr}");
    assert!(
        stdout.contains("TRIGGERS_NATS_URL is set (nats://127.0.0.1:4222): services and the commands that drive an `up` use it; `run`, `demo` and `up` start a server of their own")
            && stdout.contains("-> pass --nats nats://127.0.0.1:4222 to run on that server instead"),
        "{stdout}"
    );
    assert!(!stdout.contains("NatsConfig"), "{stdout}");
}

#[test]
fn status_with_nothing_running_is_exit_3_as_down_and_trigger_are() {
    let xdg = tempfile::tempdir().unwrap();
    for args in [&["status"][..], &["status", "--json"], &["down"]] {
        let out = bin()
            .env("XDG_RUNTIME_DIR", xdg.path())
            .args(args)
            .output()
            .unwrap();
        let (stdout, stderr) = streams(&out);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {stdout}{stderr}");
        assert!(
            stderr.starts_with("error: no") && stderr.contains("`triggers-lab up`"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn filter_is_repeatable_and_skip_leaves_out() {
    let dir = docs_fixture("checks2");
    let list = |extra: &[&str]| {
        let out = bin()
            .arg("run")
            .arg(&dir)
            .arg("--list")
            .args(extra)
            .output()
            .unwrap();
        let (stdout, stderr) = streams(&out);
        (out.status.code(), stdout, stderr)
    };
    let (code, stdout, stderr) = list(&["--filter", "an order", "--filter", "twice"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains("an order is charged") && stdout.contains("charged twice"),
        "{stdout}"
    );
    let (code, stdout, stderr) = list(&["--filter", "charged", "--skip", "twice"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains("an order is charged") && !stdout.contains("charged twice"),
        "{stdout}"
    );
    let (code, _, stderr) = list(&["--skip", "charged"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--skip left out all"), "{stderr}");
}

#[test]
fn one_step_is_one_step() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("one.scenario.yaml"),
        "name: one\nservices: [{name: shop}]\nsteps:\n  - expect_registration: {service: shop}\n",
    )
    .unwrap();
    let out = bin()
        .arg("run")
        .arg(dir.path())
        .arg("--list")
        .output()
        .unwrap();
    let (stdout, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stdout.contains(", 1 step)"), "{stdout}");
}

/// The bash completion script completes a subcommand's flags (its case labels used not to match
/// the command it computed, so no flag ever completed).
#[test]
fn bash_completion_completes_a_subcommands_flags() {
    let out = bin().args(["completions", "bash"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("triggers-lab.bash");
    std::fs::write(&script, &out.stdout).unwrap();
    let probe = format!(
        "source '{}'\n\
         COMP_WORDS=(triggers-lab run --fil); COMP_CWORD=2\n\
         _triggers__lab triggers-lab --fil run\n\
         printf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        script.display()
    );
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(&probe)
        .output()
        .unwrap();
    let (stdout, stderr) = streams(&out);
    assert!(
        stdout.lines().any(|l| l == "--filter"),
        "no --filter among the completions of `triggers-lab run --fil`:\n{stdout}{stderr}"
    );
}

/// `init`'s "Deploy it" line works as printed: it used to be `up --detach && deploy FLOW`, whose
/// deploy was refused (the flow's service was never registered). Run here with `--port 0` added
/// to `up` (a test must not take 4222), in a runtime folder of its own.
#[test]
fn inits_next_step_works_as_printed() {
    let dir = tempfile::tempdir().unwrap();
    let xdg = tempfile::tempdir().unwrap();
    let out = bin().current_dir(dir.path()).arg("init").output().unwrap();
    let (stdout, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("Deploy it:"))
        .unwrap_or_else(|| panic!("no `Deploy it:` line in:\n{stdout}"));
    let _down = triggers_testkit::cli::DownAll(xdg.path().to_owned());
    for command in line.split("&&") {
        let mut words: Vec<&str> = command.split_whitespace().collect();
        assert_eq!(words.first(), Some(&"triggers-lab"), "{line}");
        if words.get(1) == Some(&"up") {
            words.extend(["--port", "0"]);
        }
        let out = triggers_testkit::cli::bin_in(xdg.path())
            .current_dir(dir.path())
            .args(&words[1..])
            .output()
            .unwrap();
        let (stdout, stderr) = streams(&out);
        assert_eq!(
            out.status.code(),
            Some(0),
            "`{}` as init printed it:\n{stdout}{stderr}",
            command.trim()
        );
    }
}

/// Offline, `doctor`'s remedies that fetch lift TRIGGERS_NATS_OFFLINE: a bare
/// `doctor --prepare` fails under the same setting.
#[test]
fn doctors_offline_hints_work_offline() {
    let home = tempfile::tempdir().unwrap();
    let out = without_any_server(home.path())
        .arg("doctor")
        .output()
        .unwrap();
    let (stdout, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(3), "{stdout}{stderr}");
    let mentions = stdout.matches("triggers-lab doctor --prepare").count();
    let lifted = stdout
        .matches("TRIGGERS_NATS_OFFLINE=0 triggers-lab doctor --prepare")
        .count();
    assert!(mentions > 0 && mentions == lifted, "{stdout}");
}

/// `up` stopped by Ctrl-C says it is stopping once (it said "SIGINT: stopping cleanly…" and
/// then "stopping…").
#[cfg(unix)]
#[test]
fn up_says_it_is_stopping_once() {
    use std::io::{BufRead, BufReader, Read};
    use std::process::Stdio;
    let xdg = tempfile::tempdir().unwrap();
    let mut up = triggers_testkit::cli::bin_in(xdg.path())
        .args(["up", "--backend", "binary", "--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(up.stdout.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        if stdout.read_line(&mut line).unwrap() == 0 {
            break;
        }
        seen.push_str(&line);
        if line.starts_with("Ctrl-C stops it.") {
            break;
        }
    }
    assert!(seen.contains("Ctrl-C stops it."), "{seen}");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(up.id() as i32).unwrap(),
        rustix::process::Signal::INT,
    )
    .unwrap();
    let status = up.wait().unwrap();
    let mut stderr = String::new();
    up.stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(status.code(), Some(130), "{stderr}");
    let stopping: Vec<&str> = stderr.lines().filter(|l| l.contains("stopping")).collect();
    assert_eq!(stopping.len(), 1, "{stderr}");
    assert!(
        stopping[0].starts_with("SIGINT: stopping cleanly"),
        "{stderr}"
    );
}

/// `-v` shows a load step's report whole, as the docs promise (it showed its first line only).
#[test]
fn verbose_shows_the_load_report() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("load.scenario.yaml"),
        "name: a small load\n\
         services:\n  - name: shop\n    actions:\n      - {name: charge, behavior: {echo: true}}\n\
         flows:\n  - id: order\n    nodes:\n      - {id: in, type: service-in, service: shop}\n      - {id: charge, type: action, service: shop, action: charge}\n    edges:\n      - {id: e1, from: in, to: charge}\n\
         steps:\n  - deploy: order\n  - load: {flow: order, runs: 3, concurrency: 1}\n",
    )
    .unwrap();
    let out = bin()
        .arg("run")
        .arg(dir.path())
        .args(["-v", "--backend", "binary"])
        .output()
        .unwrap();
    let (stdout, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains("latency") && stdout.contains("run (trigger→settled)"),
        "{stdout}"
    );
}

/// A YAML indentation error names the line out of place and its block's indentation, not the
/// parser's "while parsing a block collection, did not find expected '-' indicator" alone.
#[test]
fn an_indentation_error_names_the_line_out_of_place() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a.scenario.yaml");
    std::fs::write(
        &file,
        "name: x\nsteps:\n  - deploy: order\n   - trigger: order\n",
    )
    .unwrap();
    let out = bin().arg("run").arg(&file).arg("--list").output().unwrap();
    let (_, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "a.scenario.yaml:4:4: line 4's indentation (3 spaces) differs from its block's (2, from line 3)"
        ),
        "{stderr}"
    );
}
