//! Paths that are not what a command expects: folders linked back to their parents, a file
//! named twice. A folder search ends, each scenario once. None needs a running `up`.
#![cfg(unix)]

mod common;

use std::io::Write;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::bin_in;

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
    assert!(stderr.contains("1 scenario(s)"), "{stderr}");
}
