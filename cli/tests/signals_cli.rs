//! SIGINT, SIGTERM and SIGHUP from the outside: `triggers-lab run` stops the scenario in
//! progress, stops its external service (by process group) and its nats-server, deletes the
//! store, writes the reports with the scenario marked interrupted and the rest not run, and exits
//! 130 / 143 / 129; a second Ctrl-C forces the exit and still kills what it started; a SIGKILLed `up` takes its
//! nats-server with it. Processes are checked by pid; bounds are generous (no timed
//! assertions: each wait returns as soon as what it waits for happens).

#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process};

/// Long enough for a loaded machine; waits end as soon as their condition holds.
const PATIENCE: Duration = Duration::from_secs(90);

use triggers_testkit::cli::{alive, bin, children_of};

/// Polls `check` until it holds; panics with `what` after [`PATIENCE`].
fn wait_until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !check() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The pid of the nats-server listening for clients on `port`, from the process table.
fn nats_server_pid(port: u16) -> Option<u32> {
    let wanted = ["-p".to_string(), port.to_string()];
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let args: Vec<String> = cmdline
                .split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let is_server = args.first()?.ends_with("nats-server");
            (is_server && args.windows(2).any(|w| w == wanted)).then_some(pid)
        })
}

fn port_of(url: &str) -> u16 {
    url.trim()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {url:?}"))
}

fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// A `run` killed if the test ends while it still runs (a failed assertion included): left alone,
/// a `run --watch` never ends, and it would keep its nats-server with it.
struct Running(Child);

impl std::ops::Deref for Running {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Running {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn signal(child: &Child, sig: Signal) {
    kill_process(Pid::from_raw(child.id() as i32).unwrap(), sig).unwrap();
}

fn wait_exit(child: &mut Child) -> ExitStatus {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the process did not exit");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What a test runs: a slow scenario with an external service that records its pids and the
/// server's URL, then one the interruption must leave unrun.
struct Setup {
    dir: tempfile::TempDir,
    tmp: PathBuf,
    pids: PathBuf,
}

impl Setup {
    /// `service` is the shell script of the external service; `$PIDS` is where it writes.
    fn new(service: &str) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let tmp = dir.path().join("tmp");
        let pids = dir.path().join("pids");
        std::fs::create_dir(&tmp).unwrap();
        std::fs::create_dir(&pids).unwrap();
        let slow = format!(
            r#"name: slow
services:
  - name: sleeper
    command: [sh, -c, {service:?}]
    env: {{PIDS: {pids:?}}}
    ready: started
steps:
  - sleep: 30s
  - sleep: 1s
"#,
            pids = pids.display().to_string(),
        );
        std::fs::write(dir.path().join("a-slow.yaml"), slow).unwrap();
        std::fs::write(
            dir.path().join("b-after.yaml"),
            "name: after\nsteps:\n  - sleep: 1s\n",
        )
        .unwrap();
        Setup { dir, tmp, pids }
    }

    fn spawn_run(&self) -> Running {
        let out = std::fs::File::create(self.dir.path().join("stdout")).unwrap();
        let err = std::fs::File::create(self.dir.path().join("stderr")).unwrap();
        bin()
            .args(["run", "--backend", "binary", "--json"])
            .arg(self.dir.path().join("report.json"))
            .arg("--junit")
            .arg(self.dir.path().join("junit.xml"))
            .arg(self.dir.path().join("a-slow.yaml"))
            .arg(self.dir.path().join("b-after.yaml"))
            // The server's store goes here: it must be empty afterwards.
            .env("TMPDIR", &self.tmp)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map(Running)
            .unwrap()
    }

    /// [`Setup::spawn_run`] in a terminal of its own (`script` gives it a pseudo-terminal for
    /// standard output and error). Fails without `script` (util-linux).
    fn spawn_run_in_terminal(&self) -> Child {
        let command = format!(
            "exec {} run --backend binary --json {} --junit {} {} {}",
            triggers_testkit::cli::bin_path().display(),
            self.dir.path().join("report.json").display(),
            self.dir.path().join("junit.xml").display(),
            self.dir.path().join("a-slow.yaml").display(),
            self.dir.path().join("b-after.yaml").display(),
        );
        std::process::Command::new("script")
            .args(["-q", "-c", &command, "/dev/null"])
            .env_remove("TRIGGERS_NATS_URL")
            .env("TMPDIR", &self.tmp)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("this test needs `script` (util-linux) to give the run a terminal")
    }

    fn output(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default()
    }

    /// The service's pids and the server's, once the service has written them.
    fn started(&self) -> (Vec<u32>, u32) {
        wait_until("the external service to start", || {
            std::fs::read_to_string(self.pids.join("url")).is_ok_and(|u| u.contains(':'))
                && read_pid(&self.pids.join("child")).is_some()
        });
        let url = std::fs::read_to_string(self.pids.join("url")).unwrap();
        let server = nats_server_pid(port_of(&url)).expect("the scenario's nats-server runs");
        let service = ["leader", "child"]
            .iter()
            .map(|f| read_pid(&self.pids.join(f)).unwrap())
            .collect::<Vec<_>>();
        for pid in service.iter().chain([&server]) {
            assert!(alive(*pid), "{pid} is not running");
        }
        (service, server)
    }

    fn store_dirs_left(&self) -> Vec<String> {
        std::fs::read_dir(&self.tmp)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("triggers-nats-"))
            .collect()
    }
}

/// The service: a shell (the group's leader) with a background sleep (a child that would be
/// orphaned if only the leader were signalled).
const SERVICE: &str = r#"echo $$ > "$PIDS/leader"; sleep 600 & echo $! > "$PIDS/child"; echo "$TRIGGERS_NATS_URL" > "$PIDS/url"; wait"#;

fn interrupted_by(sig: Signal, name: &str, code: i32) {
    let setup = Setup::new(SERVICE);
    let mut run = setup.spawn_run();
    let (service, server) = setup.started();

    signal(&run, sig);
    let status = wait_exit(&mut run);
    let stdout = setup.output("stdout");
    let stderr = setup.output("stderr");
    assert_eq!(status.code(), Some(code), "{stdout}\n{stderr}");
    for pid in service.iter().chain([&server]) {
        wait_until(&format!("process {pid} to be gone"), || !alive(*pid));
    }
    // The process's shared nats-server is killed, and its store removed, by its watchdog once
    // the run has exited: both happen, the removal just after the kill.
    wait_until("the server's store to be removed", || {
        setup.store_dirs_left().is_empty()
    });

    let report: serde_json::Value =
        serde_json::from_str(&setup.output("report.json")).expect("a JSON report");
    assert_eq!(report["interrupted"], name, "{report}");
    assert_eq!(report["scenarios"][0]["outcome"], "interrupted", "{report}");
    assert_eq!(report["scenarios"][0]["steps"][0]["outcome"], "interrupted");
    assert_eq!(report["scenarios"][0]["steps"][1]["outcome"], "not_run");
    assert_eq!(report["scenarios"][1]["outcome"], "not_run", "{report}");
    let junit = setup.output("junit.xml");
    assert!(junit.contains("type=\"interrupted\""), "{junit}");
    assert!(junit.contains("<skipped"), "{junit}");
    assert!(
        stdout
            .trim_end()
            .ends_with("scenarios: 0 passed, 0 failed, 1 interrupted, 1 not run"),
        "{stdout}"
    );
}

#[test]
fn sigint_stops_the_run_cleans_up_writes_reports_and_exits_130() {
    interrupted_by(Signal::INT, "SIGINT", 130);
}

#[test]
fn sigterm_stops_the_run_cleans_up_writes_reports_and_exits_143() {
    interrupted_by(Signal::TERM, "SIGTERM", 143);
}

/// A closed terminal or a dropped SSH session: the same clean stop, reports included.
#[test]
fn sighup_stops_the_run_cleans_up_writes_reports_and_exits_129() {
    interrupted_by(Signal::HUP, "SIGHUP", 129);
}

/// The terminal itself goes (the window closed): the run gets SIGHUP and every write to its
/// output fails from then on. It still stops cleanly and writes its reports, where a failed
/// `println!` used to panic and cut the stop short.
#[test]
fn a_run_whose_terminal_is_gone_still_stops_cleanly_and_writes_its_reports() {
    let setup = Setup::new(SERVICE);
    let mut terminal = setup.spawn_run_in_terminal();
    let (service, server) = setup.started();
    // Killing `script` closes the terminal's master side: the kernel hangs the terminal up.
    signal(&terminal, Signal::KILL);
    let _ = wait_exit(&mut terminal);
    for pid in service.iter().chain([&server]) {
        wait_until(&format!("process {pid} to be gone"), || !alive(*pid));
    }
    wait_until("the JSON report", || {
        serde_json::from_str::<serde_json::Value>(&setup.output("report.json")).is_ok()
    });
    let report: serde_json::Value = serde_json::from_str(&setup.output("report.json")).unwrap();
    assert_eq!(report["interrupted"], "SIGHUP", "{report}");
    assert_eq!(report["scenarios"][0]["outcome"], "interrupted", "{report}");
    assert!(setup.output("junit.xml").contains("type=\"interrupted\""));
    // The process's shared nats-server is killed, and its store removed, by its watchdog once
    // the run has exited: both happen, the removal just after the kill.
    wait_until("the server's store to be removed", || {
        setup.store_dirs_left().is_empty()
    });
}

#[test]
fn a_second_ctrl_c_forces_the_exit_and_still_kills_what_was_started() {
    // A service that ignores SIGTERM (its children inherit that): the clean stop would wait out
    // the grace period; the second Ctrl-C does not.
    let setup = Setup::new(&format!("trap '' TERM; {SERVICE}"));
    let mut run = setup.spawn_run();
    let (service, server) = setup.started();

    signal(&run, Signal::INT);
    wait_until("the clean stop to begin", || {
        setup.output("stderr").contains("press Ctrl-C again")
    });
    signal(&run, Signal::INT);
    let status = wait_exit(&mut run);
    assert_eq!(status.code(), Some(130), "{}", setup.output("stderr"));
    assert!(setup.output("stderr").contains("forced"));
    // The watchdogs: the service's group and the server die with the process, the store goes.
    for pid in service.iter().chain([&server]) {
        wait_until(&format!("process {pid} to be gone"), || !alive(*pid));
    }
    wait_until("the store to be removed", || {
        setup.store_dirs_left().is_empty()
    });
}

/// A service whose grandchild leaves its process group and session (`setsid`), as a daemon does.
const ESCAPING: &str = r#"setsid sh -c 'echo $$ > "$PIDS/escaped.tmp"; mv "$PIDS/escaped.tmp" "$PIDS/escaped"; exec sleep 600' & echo $$ > "$PIDS/leader"; sleep 600 & echo $! > "$PIDS/child"; echo "$TRIGGERS_NATS_URL" > "$PIDS/url"; wait"#;

/// The process group of `pid`, from the process table.
fn pgrp_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')')
        .next()?
        .split_whitespace()
        .nth(2)?
        .parse()
        .ok()
}

/// Fails, saying what to install, without `setsid`, which the services of these tests call.
fn need_setsid() {
    assert!(
        std::process::Command::new("setsid")
            .arg("true")
            .status()
            .is_ok(),
        "this test needs `setsid` (util-linux): install util-linux"
    );
}

/// Found by an audit: a service's descendant that called `setsid` left the process group that
/// `run` signals and the watchdog kills, and outlived `run`. Both ways out are checked: a clean
/// stop (SIGINT) and a SIGKILL of `run`, after which only the watchdog is left to act.
#[test]
fn a_service_process_that_left_its_group_is_stopped_with_it() {
    need_setsid();
    for sig in [Signal::INT, Signal::KILL] {
        let setup = Setup::new(ESCAPING);
        let mut run = setup.spawn_run();
        let (service, _server) = setup.started();
        wait_until("the escaped process to start", || {
            read_pid(&setup.pids.join("escaped")).is_some()
        });
        let escaped = read_pid(&setup.pids.join("escaped")).unwrap();
        assert!(alive(escaped));
        assert_ne!(pgrp_of(escaped), Some(service[0]), "it left the group");
        signal(&run, sig);
        wait_exit(&mut run);
        wait_until(
            &format!("the escaped process {escaped} to be gone ({sig:?})"),
            || !alive(escaped),
        );
    }
}

/// The ids `docker` lists with `args` (containers or networks), or `None` without a Docker CLI.
fn docker_ids(args: &[&str]) -> Option<Vec<String>> {
    let out = std::process::Command::new("docker")
        .args(args)
        .output()
        .ok()?;
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    })
}

/// Found by an audit: a second Ctrl-C while a Docker cluster started left a container and the
/// cluster's network behind: the forced exit listed the containers before the one being created
/// appeared, and removed no network. Ctrl-C twice as soon as the first container exists, then
/// nothing of the process may be left, containers or networks.
#[test]
#[ignore = "needs Docker: scripts/test runs the docker_ tests when Docker answers"]
fn docker_a_second_ctrl_c_while_a_cluster_starts_leaves_no_container_nor_network() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cluster.scenario.yaml");
    std::fs::write(
        &file,
        "name: cluster start\nnats: {cluster: 3}\nsteps:\n  - sleep: 30s\n",
    )
    .unwrap();
    let err_path = dir.path().join("stderr");
    let mut run = bin()
        .args(["run", file.to_str().unwrap(), "--backend", "docker"])
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let stderr = || std::fs::read_to_string(&err_path).unwrap_or_default();
    let pid = run.id();
    let containers = || {
        docker_ids(&[
            "ps",
            "-aq",
            "--filter",
            &format!("label=org.triggers-lab.owner-pid={pid}"),
        ])
        .expect("the Docker CLI lists containers")
    };
    let networks = || {
        docker_ids(&[
            "network",
            "ls",
            "-q",
            "--filter",
            &format!("name=triggers-lab-nats-{pid}-"),
        ])
        .expect("the Docker CLI lists networks")
    };
    wait_until("the cluster's first container", || {
        run.try_wait().unwrap().is_none() && !containers().is_empty()
    });
    signal(&run, Signal::INT);
    // Two signals sent at once are one: the second only once the first was taken.
    wait_until("the clean stop to begin", || {
        stderr().contains("press Ctrl-C again")
    });
    signal(&run, Signal::INT);
    let status = wait_exit(&mut run);
    assert_eq!(status.code(), Some(130), "{}", stderr());
    assert!(stderr().contains("forced"), "{}", stderr());
    // Whatever the engine was still creating when the process left is gone as well.
    wait_until("the process's containers to be gone", || {
        containers().is_empty()
    });
    wait_until("the process's networks to be gone", || {
        networks().is_empty()
    });
}

#[test]
fn a_sigkilled_up_takes_its_nats_server_and_store_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut up = bin()
        .args(["up", "--backend", "binary", "--port", "0", "--quiet"])
        .env("TMPDIR", dir.path())
        .env("XDG_RUNTIME_DIR", dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut url = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(up.stdout.take().unwrap()),
        &mut url,
    )
    .unwrap();
    let server = nats_server_pid(port_of(&url)).expect("up's nats-server runs");
    let stores = || {
        std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("triggers-nats-")
            })
            .count()
    };
    assert_eq!(stores(), 1);

    signal(&up, Signal::KILL);
    up.wait().unwrap();
    wait_until("the orphaned nats-server to die", || !alive(server));
    wait_until("its store to be removed", || stores() == 0);
}

/// `run --watch`: a first run, a second one when the scenario changes, and Ctrl-C while it
/// waits for the next change ends it with 130, nothing of its runs left behind.
#[test]
fn run_watch_runs_again_on_a_change_and_ctrl_c_stops_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("w.scenario.yaml");
    let scenario = |name: &str| {
        format!(
            "name: {name}\nsteps:\n  - register:\n      manifest:\n        protocol_version: 1.0.0\n        service: shop\n        service_version: 1.0.0\n        actions: []\n        service_sources: [{{name: nats, transport: nats, default: shop.inbound}}]\n        supports_nodes: []\n  - expect_registration: {{service: shop}}\n"
        )
    };
    std::fs::write(&file, scenario("first")).unwrap();
    let mut child = Running(
        bin()
            .args(["run", "--watch", "--backend", "binary"])
            .arg(dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    for stream in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stream)
                .lines()
                .map_while(Result::ok)
            {
                let _ = tx.send(line);
            }
        });
    }
    let mut seen = Vec::new();
    let wait_for = |what: &str, seen: &mut Vec<String>| {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    let hit = line.contains(what);
                    seen.push(line);
                    if hit {
                        return;
                    }
                }
                Err(_) => panic!("no line with {what:?}; saw:\n{}", seen.join("\n")),
            }
        }
    };
    wait_for("PASS first", &mut seen);
    wait_for("watching", &mut seen);
    std::fs::write(&file, scenario("second")).unwrap();
    wait_for("PASS second", &mut seen);
    wait_for("watching", &mut seen);
    // Between runs only the process's shared nats-server (and its watchdog) may be left: one
    // server for every run of the watcher, each run an account of its own.
    let pid = child.id();
    let left = children_of(pid);
    signal(&child, Signal::INT);
    let status = wait_exit(&mut child);
    assert_eq!(status.code(), Some(130), "{}", seen.join("\n"));
    for p in left {
        wait_until(&format!("process {p} of the watcher to be gone"), || {
            !alive(p)
        });
    }
}

/// A service whose child leaves its session (`setsid`) and then keeps changing pid: each
/// generation ignores SIGTERM, writes a heartbeat, starts the next one in a session of its own,
/// and exits. A single scan of the process table kills a pid that has already handed over to
/// the next.
const HOPPING: &str = r#"cat > "$PIDS/hop.sh" <<'HOP'
trap '' TERM
while :; do
  date +%s%N > "$PIDS/beat.tmp"; mv "$PIDS/beat.tmp" "$PIDS/beat"
  setsid sh "$PIDS/hop.sh" once &
  exit 0
done
HOP
setsid sh "$PIDS/hop.sh" &
echo $$ > "$PIDS/leader"; sleep 600 & echo $! > "$PIDS/child"; echo "$TRIGGERS_NATS_URL" > "$PIDS/url"; wait"#;

/// Found by an audit: the heartbeat of a re-forking, `setsid`-ing descendant still beat after
/// `run` exited. `run` is its subreaper and kills its tree pass after pass until nothing of it
/// runs.
#[test]
fn a_service_descendant_that_keeps_reforking_in_new_sessions_does_not_outlive_run() {
    need_setsid();
    let setup = Setup::new(HOPPING);
    let mut run = setup.spawn_run();
    setup.started();
    let beat = setup.pids.join("beat");
    wait_until("the first heartbeat", || beat.exists());
    signal(&run, Signal::INT);
    let status = wait_exit(&mut run);
    assert_eq!(status.code(), Some(130), "{}", setup.output("stderr"));
    // Nothing of it runs: its heartbeat file stops changing. A chain that survived hops
    // hundreds of times a second: 200 reads 10 ms apart see it. (The first read comes a moment
    // after the exit, so that a write already in the kernel when the last hop died is not taken
    // for a beat.)
    std::thread::sleep(Duration::from_millis(100));
    let last = std::fs::read_to_string(&beat).unwrap_or_default();
    for _ in 0..200 {
        std::thread::sleep(Duration::from_millis(10));
        assert_eq!(
            std::fs::read_to_string(&beat).unwrap_or_default(),
            last,
            "the service's descendant still beats after `run` exited"
        );
    }
}

/// Found by an audit: `run` blocked writing its report ignored SIGTERM. Here the report goes to
/// standard output, a pipe no one reads, and is larger than the pipe holds: once `run` waits in
/// that write, SIGTERM still ends it, with 143.
#[test]
fn a_run_blocked_writing_its_report_still_exits_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let mut scenario = String::from("name: many steps\nsteps:\n");
    for _ in 0..3000 {
        scenario.push_str("  - sleep: 1ms\n");
    }
    let file = dir.path().join("many.scenario.yaml");
    std::fs::write(&file, scenario).unwrap();
    let err = std::fs::File::create(dir.path().join("stderr")).unwrap();
    let mut run = bin()
        .args(["run", "--backend", "binary", "--json", "-"])
        .arg(&file)
        .env("TMPDIR", dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(err)
        .spawn()
        .unwrap();
    // Kept open and never read: the report's write fills the pipe and waits.
    let _stdout = run.stdout.take();
    let pid = run.id();
    wait_until("run to wait on its full standard output", || {
        std::fs::read_to_string(format!("/proc/{pid}/wchan"))
            .is_ok_and(|w| w.contains("pipe_write"))
    });
    signal(&run, Signal::TERM);
    let status = wait_exit(&mut run);
    let stderr = std::fs::read_to_string(dir.path().join("stderr")).unwrap_or_default();
    assert_eq!(status.code(), Some(143), "{stderr}");
    assert!(
        stderr.contains("SIGTERM: exiting without finishing the reports and summary"),
        "{stderr}"
    );
}
