//! Paths that are not what a command expects: folders linked back to their parents, a file
//! named twice, FIFOs, devices, standard input that never ends. Every command that reads a file
//! refuses what is not a regular file, or is too large, at once with exit code 2 and a message
//! naming the path; a folder search ends, each scenario once. None needs a running `up`.
#![cfg(unix)]

use std::io::Write;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use triggers_testkit::cli::bin_in;

/// How long any of these may take: each is refused before anything starts.
const LIMIT: Duration = Duration::from_secs(30);

const SCENARIO: &str = "steps:\n  - sleep: 10ms\n";

/// What a command did, or a failure if it has not ended within [`LIMIT`] (it is killed: the
/// bugs these tests keep away hung, reading forever).
struct Ended {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

fn ended(mut command: Command, stdin: Option<u64>) -> Ended {
    let out = tempfile::tempdir().unwrap();
    let (stdout, stderr) = (out.path().join("stdout"), out.path().join("stderr"));
    let mut child = command
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let writer = stdin.map(|bytes| {
        let mut pipe = child.stdin.take().unwrap();
        std::thread::spawn(move || {
            let block = vec![b' '; 1 << 20];
            let mut left = bytes;
            // The command stops reading at its limit: a broken pipe then is expected.
            while left > 0 {
                let n = left.min(block.len() as u64) as usize;
                if pipe.write_all(&block[..n]).is_err() {
                    return;
                }
                left -= n as u64;
            }
        })
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{command:?} had not ended after {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if let Some(writer) = writer {
        writer.join().unwrap();
    }
    Ended {
        status,
        stdout: std::fs::read_to_string(stdout).unwrap(),
        stderr: std::fs::read_to_string(stderr).unwrap(),
    }
}

/// `triggers-lab ARGS` with a runtime folder of its own (no `up` of the machine is found).
fn lab(xdg: &Path, args: &[&std::ffi::OsStr]) -> Command {
    let mut c = bin_in(xdg);
    c.args(args);
    c
}

fn mkfifo(path: &Path) {
    let made = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(made.success(), "mkfifo {}", path.display());
}

/// `run --list PATHS`: its exit code and the files listed, one a line.
fn listed(xdg: &Path, paths: &[&Path]) -> (Option<i32>, Vec<String>, String) {
    let mut args: Vec<&std::ffi::OsStr> = vec!["run".as_ref(), "--list".as_ref()];
    args.extend(paths.iter().map(|p| p.as_os_str()));
    let out = ended(lab(xdg, &args), None);
    let files = out
        .stdout
        .lines()
        .map(|l| {
            // `name  (FILE, N steps)`
            let file = l.split_once("  (").map_or(l, |(_, rest)| rest);
            file.rsplit_once(", ").map_or(file, |(f, _)| f).to_owned()
        })
        .collect();
    (out.status.code(), files, out.stderr)
}

#[test]
fn run_lists_each_scenario_once_through_links_back_up_and_repeated_paths() {
    let xdg = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let root = root.path();
    let shown = |p: PathBuf| p.display().to_string();

    // `loopdir/up -> ..`: the same file 41 times, until ELOOP.
    let looped = root.join("loopdir");
    std::fs::create_dir(&looped).unwrap();
    std::fs::write(looped.join("s.scenario.yaml"), SCENARIO).unwrap();
    symlink("..", looped.join("up")).unwrap();
    let (code, files, stderr) = listed(xdg.path(), &[&looped]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(files, [shown(looped.join("s.scenario.yaml"))], "{stderr}");

    // Two links to `..`: never ended, memory growing.
    let d = root.join("d");
    std::fs::create_dir(&d).unwrap();
    std::fs::write(d.join("t.scenario.yaml"), SCENARIO).unwrap();
    symlink("..", d.join("a")).unwrap();
    symlink("..", d.join("b")).unwrap();
    let (code, files, stderr) = listed(xdg.path(), &[&d]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        files,
        [
            shown(d.join("a/loopdir/s.scenario.yaml")),
            shown(d.join("t.scenario.yaml"))
        ],
        "{stderr}"
    );

    // `run f.yaml f.yaml DIR` with DIR holding f: three times.
    let dir = root.join("plain");
    std::fs::create_dir(&dir).unwrap();
    let f = dir.join("f.scenario.yaml");
    std::fs::write(&f, SCENARIO).unwrap();
    let (code, files, stderr) = listed(xdg.path(), &[&f, &f, &dir]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(files, [shown(f)], "{stderr}");
    assert!(stderr.contains("1 scenario\n"), "{stderr}");
}

#[test]
fn run_refuses_fifos_and_devices_as_what_they_are() {
    let xdg = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let fdir = root.path().join("fdir");
    std::fs::create_dir(&fdir).unwrap();
    let fifo = fdir.join("a.scenario.yaml");
    mkfifo(&fifo);
    std::fs::write(fdir.join("b.scenario.yaml"), SCENARIO).unwrap();
    let fifo_says = format!(
        "{}: cannot read: is a FIFO, not a regular file",
        fifo.display()
    );
    // In a folder (it hung), and named on its own (it was "no such file or folder").
    for path in [&fdir, &fifo] {
        let (code, _, stderr) = listed(xdg.path(), &[path]);
        assert_eq!(code, Some(2), "{stderr}");
        assert!(stderr.contains(&fifo_says), "{stderr}");
    }
    let (code, _, stderr) = listed(xdg.path(), &[Path::new("/dev/null")]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("/dev/null: cannot read: is a device, not a regular file"),
        "{stderr}"
    );
    // A path that is not there is still said to be missing.
    let (code, _, stderr) = listed(xdg.path(), &[&root.path().join("nope.yaml")]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("nope.yaml: no such file or folder"),
        "{stderr}"
    );
}

#[test]
fn every_command_that_reads_a_file_refuses_fifos_and_devices_at_once() {
    let xdg = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let fifo = root.path().join("in.fifo");
    mkfifo(&fifo);
    let scenario = root.path().join("s.scenario.yaml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    // A flow file that is a FIFO, named by a scenario: it hung.
    let flows_fifo = root.path().join("flows.scenario.yaml");
    std::fs::write(
        &flows_fifo,
        "flows:\n  - file: in.fifo\nsteps:\n  - sleep: 10ms\n",
    )
    .unwrap();
    let (code, _, stderr) = listed(xdg.path(), &[&flows_fifo]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "cannot read the flow file {}: is a FIFO, not a regular file",
            fifo.display()
        )),
        "{stderr}"
    );

    for (path, what) in [
        (Path::new("/dev/zero"), "is a device"),
        (fifo.as_path(), "is a FIFO"),
    ] {
        let at = format!("@{}", path.display());
        let p = path.as_os_str();
        let s = scenario.as_os_str();
        let commands: Vec<Vec<&std::ffi::OsStr>> = vec![
            vec!["manifest".as_ref(), "hash".as_ref(), p],
            vec!["manifest".as_ref(), "check".as_ref(), p],
            vec!["deploy".as_ref(), p],
            vec!["trigger".as_ref(), "f".as_ref(), at.as_ref()],
            vec!["load".as_ref(), "f".as_ref(), "--payloads".as_ref(), p],
            vec![
                "load".as_ref(),
                "f".as_ref(),
                "--payload".as_ref(),
                at.as_ref(),
            ],
            vec!["scenario".as_ref(), "from-record".as_ref(), p],
            vec!["replay".as_ref(), p],
            vec!["report".as_ref(), "merge".as_ref(), p],
            vec!["up".as_ref(), "--services".as_ref(), p],
            vec![
                "run".as_ref(),
                "--list".as_ref(),
                "--shard".as_ref(),
                "1/2".as_ref(),
                "--durations".as_ref(),
                p,
                s,
            ],
        ];
        for args in commands {
            let out = ended(lab(xdg.path(), &args), None);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {}", out.stderr);
            // Each command puts the path in its own words (`--payloads: PATH: cannot read: `,
            // `cannot read the recording PATH: `...).
            assert!(
                out.stderr.contains(&path.display().to_string())
                    && out.stderr.contains(&format!("{what}, not a regular file")),
                "{args:?}: {}",
                out.stderr
            );
        }
    }
}

#[test]
fn standard_input_is_read_up_to_the_same_limit() {
    let xdg = tempfile::tempdir().unwrap();
    // Past 256 MiB: each read all of it (and /dev/zero through a pipe, until memory ran out).
    let bytes = triggers_scenarios::MAX_INPUT_BYTES + 1;
    for args in [&["manifest", "hash", "-"][..], &["deploy", "-"]] {
        let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
        let out = ended(lab(xdg.path(), &args), Some(bytes));
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", out.stderr);
        assert!(
            out.stderr
                .contains("<stdin>: cannot read: holds more than the 256 MiB an input may hold"),
            "{args:?}: {}",
            out.stderr
        );
        assert!(out.stdout.is_empty(), "{}", out.stdout);
    }
}

#[test]
fn every_command_that_writes_a_file_refuses_fifos_and_devices_before_it_starts() {
    let xdg = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let fifo = root.path().join("out.fifo");
    mkfifo(&fifo);
    let scenario = root.path().join("s.scenario.yaml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    for (path, what) in [
        (fifo.as_path(), "is a FIFO"),
        (Path::new("/dev/null"), "is a device"),
    ] {
        let p = path.as_os_str();
        let s = scenario.as_os_str();
        // No reader ever opens the FIFO: `up --record` and `run --json` waited in `open()`.
        let commands: Vec<Vec<&std::ffi::OsStr>> = vec![
            vec!["run".as_ref(), "--json".as_ref(), p, s],
            vec!["run".as_ref(), "--junit".as_ref(), p, s],
            vec!["run".as_ref(), "--coverage".as_ref(), p, s],
            vec!["run".as_ref(), "--coverage-md".as_ref(), p, s],
            vec![
                "up".as_ref(),
                "--port".as_ref(),
                "0".as_ref(),
                "--record".as_ref(),
                p,
            ],
        ];
        for args in commands {
            let out = ended(lab(xdg.path(), &args), None);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {}", out.stderr);
            assert!(
                out.stderr.contains(&format!(
                    "{}: {what}, not a regular file; only regular files are written",
                    path.display()
                )),
                "{args:?}: {}",
                out.stderr
            );
            // Refused before anything started.
            assert!(!out.stderr.contains("starting"), "{args:?}: {}", out.stderr);
        }
    }
}

/// The discovery folder holds what no `up` wrote: a FIFO named `*.json` (reading it waited for
/// a writer: every command that looks for an `up` hung) and a 300 MB file (read whole). Both are
/// passed over without being read.
#[test]
fn commands_that_look_for_an_up_pass_over_a_fifo_or_a_huge_file_in_the_discovery_folder() {
    let xdg = tempfile::tempdir().unwrap();
    let dir = xdg.path().join("triggers-lab");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    mkfifo(&dir.join("stuck.json"));
    // Sparse: it says 300 MB without the disk holding them.
    std::fs::File::create(dir.join("huge.json"))
        .unwrap()
        .set_len(300 << 20)
        .unwrap();
    for args in [
        vec!["status"],
        vec!["runs", "list"],
        vec!["advance", "--instance", "x", "1s"],
    ] {
        let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
        let out = ended(lab(xdg.path(), &args), None);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {}", out.stderr);
        assert!(
            out.stderr.contains("no running `triggers-lab up`"),
            "{}",
            out.stderr
        );
    }
    // Nothing was taken for an instance, nor removed.
    assert!(dir.join("stuck.json").exists() && dir.join("huge.json").exists());
}
