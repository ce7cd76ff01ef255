//! `triggers-lab` on a terminal, through `script` (util-linux), which gives it a pseudo-terminal
//! with no new dependency: `run --tui` starts the UI and, when it is quit, leaves the terminal
//! as it found it; the progress line of `run` fits COLUMNS on one row. Fails, saying what to
//! install, where `script` is missing.

#![cfg(target_os = "linux")]

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use unicode_width::UnicodeWidthStr;

const SCENARIO: &str = r#"name: NAME
steps:
  - register:
      manifest:
        protocol_version: 1.0.0
        service: shop
        service_version: 1.0.0
        actions: []
        service_sources: [{name: nats, transport: nats, default: shop.inbound}]
        supports_nodes: []
  - expect_registration: {service: shop}
  - sleep: 2s
"#;

/// Runs `args` on a pseudo-terminal `cols` wide (and COLUMNS saying so), typing `keys` after `after`; the terminal's
/// bytes and the exit code (printed by the shell after the command). Fails without `script`: a test
/// that cannot run is not a pass.
fn on_a_terminal(
    args: &str,
    cols: u16,
    keys: &str,
    after: Duration,
    dir: &std::path::Path,
) -> (String, Option<i32>) {
    on_a_terminal_with("", args, cols, keys, after, dir)
}

/// Fails, saying what to install, without `script`, which gives these tests a terminal.
fn need_script() {
    assert!(
        Command::new("script").arg("--version").output().is_ok(),
        "these tests need `script` (util-linux) for a pseudo-terminal: install util-linux"
    );
}

/// [`on_a_terminal`], with `env` (`NAME=value ...`) set for the command.
fn on_a_terminal_with(
    env: &str,
    args: &str,
    cols: u16,
    keys: &str,
    after: Duration,
    dir: &std::path::Path,
) -> (String, Option<i32>) {
    need_script();
    let bin = triggers_testkit::cli::bin_path();
    let bin = bin.display();
    let mut child = Command::new("script")
        .args(["-qfec"])
        .arg(format!(
            "stty cols {cols} rows 24 2>/dev/null; env -u TRIGGERS_NATS_URL COLUMNS={cols} LINES=24 {env} {bin} {args}; echo EXIT=$?"
        ))
        .arg("/dev/null")
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let keys = keys.to_owned();
    let typist = std::thread::spawn(move || {
        std::thread::sleep(after);
        let _ = stdin.write_all(keys.as_bytes());
        let _ = stdin.flush();
        // Kept open a while: `script` ends when its input does.
        std::thread::sleep(Duration::from_secs(60));
        drop(stdin);
    });
    let out = child.wait_with_output().unwrap();
    drop(typist);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let code = text
        .rsplit("EXIT=")
        .next()
        .and_then(|t| t.trim().parse().ok());
    (text, code)
}

#[test]
fn run_tui_starts_and_quits_leaving_the_terminal_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("t.scenario.yaml"),
        SCENARIO.replace("NAME", "tui quits"),
    )
    .unwrap();
    let (out, code) = on_a_terminal(
        "run --tui --backend binary t.scenario.yaml",
        80,
        "q",
        Duration::from_secs(3),
        dir.path(),
    );
    let shown = out.replace('\x1b', "^[");
    assert_eq!(code, Some(0), "{shown}");
    // The alternate screen, entered and left; the cursor shown again; mouse reporting off.
    let entered = out
        .find("\x1b[?1049h")
        .unwrap_or_else(|| panic!("no UI: {shown}"));
    let left = out
        .rfind("\x1b[?1049l")
        .unwrap_or_else(|| panic!("not left: {shown}"));
    assert!(entered < left, "{shown}");
    assert!(out[left..].contains("\x1b[?25h"), "{shown}");
    assert!(out[entered..].contains("\x1b[?1000l"), "{shown}");
    assert!(out[left..].contains("PASS"), "{shown}");
}

#[test]
fn the_progress_line_fits_columns_on_one_row() {
    let dir = tempfile::tempdir().unwrap();
    // Wide characters first: each takes two columns, so counting characters would overflow.
    let long = "支払いのシナリオ, an order with a name too long for a narrow terminal";
    for i in 0..2 {
        std::fs::write(
            dir.path().join(format!("{i}.scenario.yaml")),
            SCENARIO.replace("NAME", &format!("{long} {i}")),
        )
        .unwrap();
    }
    let (out, code) = on_a_terminal(
        "run -j 2 --backend binary .",
        40,
        "",
        Duration::ZERO,
        dir.path(),
    );
    let shown = out.replace('\x1b', "^[");
    assert_eq!(code, Some(0), "{shown}");
    // Each progress line comes after a clear, up to the next line break or clear; results
    // (which may be long, and wrap) come after a clear too, but start otherwise.
    let lines: Vec<&str> = out
        .split("\r\x1b[2K")
        .skip(1)
        .map(|l| l.split(['\r', '\n']).next().unwrap_or_default())
        .filter(|l| l.starts_with('[') && l.contains("] running "))
        .collect();
    assert!(!lines.is_empty(), "no progress line: {shown}");
    for progress in lines {
        assert!(
            progress.width() < 40,
            "{} columns: {progress:?}\n{shown}",
            progress.width()
        );
    }
}

/// A dumb terminal (Emacs' shell, some CI log viewers) prints escapes as they are: no progress
/// line redrawn with `ESC[2K` there, nor colour; each scenario's start is a line of its own.
#[test]
fn a_dumb_terminal_gets_no_redraws() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("t.scenario.yaml"),
        SCENARIO.replace("NAME", "dumb"),
    )
    .unwrap();
    let (out, code) = on_a_terminal_with(
        "TERM=dumb",
        "run --backend binary .",
        80,
        "",
        Duration::ZERO,
        dir.path(),
    );
    let shown = out.replace('\x1b', "^[");
    assert_eq!(code, Some(0), "{shown}");
    assert!(!out.contains('\x1b'), "{shown}");
    assert!(out.contains("[1/1] dumb"), "{shown}");
}

/// `watch` on a terminal, stopped by `sig` once its UI is on screen; its exit code.
fn watch_stopped_by(url: &str, sig: rustix::process::Signal, dir: &std::path::Path) -> Option<i32> {
    use std::io::Read;
    use std::sync::{Arc, Mutex};
    use std::time::Instant;
    let bin = triggers_testkit::cli::bin_path();
    let bin = bin.display();
    let pid_file = dir.join("pid");
    let code_file = dir.join("code");
    let _ = std::fs::remove_file(&pid_file);
    let _ = std::fs::remove_file(&code_file);
    let mut child = Command::new("script")
        .args(["-qfc"])
        .arg(format!(
            "stty cols 100 rows 30 2>/dev/null; sh -c 'echo $$ > {pid}; exec env -u TRIGGERS_NATS_URL XDG_RUNTIME_DIR={dir} {bin} watch --nats {url}'; echo $? > {code}",
            pid = pid_file.display(),
            dir = dir.display(),
            code = code_file.display(),
        ))
        .arg("/dev/null")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let screen = Arc::new(Mutex::new(Vec::new()));
    let mut stdout = child.stdout.take().unwrap();
    let reader = {
        let screen = screen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    break;
                }
                screen.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    // The UI is up once the alternate screen is entered and the header drawn.
    let drawn = |screen: &[u8]| {
        let screen = String::from_utf8_lossy(screen);
        screen.contains("\x1b[?1049h") && screen.contains(url.trim_start_matches("nats://"))
    };
    while !drawn(&screen.lock().unwrap()) {
        assert!(Instant::now() < deadline, "watch never drew its UI");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    rustix::process::kill_process(rustix::process::Pid::from_raw(pid).unwrap(), sig).unwrap();
    while !std::fs::read_to_string(&code_file).is_ok_and(|c| c.ends_with('\n')) {
        assert!(Instant::now() < deadline, "watch did not stop on {sig:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = reader.join();
    std::fs::read_to_string(&code_file)
        .unwrap()
        .trim()
        .parse()
        .ok()
}

/// `watch` exits 143 on SIGTERM and 130 on SIGINT every time: the UI used to quit on SIGTERM by
/// itself, and `watch` then sometimes ended before it heard the signal, exiting 0.
#[test]
fn watch_exits_143_on_sigterm_and_130_on_sigint_every_time() {
    need_script();
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = Command::new("nats-server")
        .args(["-a", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nats-server on PATH");
    let url = format!("nats://127.0.0.1:{port}");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "nats-server did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut codes = Vec::new();
    for _ in 0..8 {
        codes.push(watch_stopped_by(
            &url,
            rustix::process::Signal::TERM,
            dir.path(),
        ));
    }
    for _ in 0..3 {
        codes.push(watch_stopped_by(
            &url,
            rustix::process::Signal::INT,
            dir.path(),
        ));
    }
    let _ = server.kill();
    let _ = server.wait();
    let mut wanted = vec![Some(143); 8];
    wanted.extend([Some(130); 3]);
    assert_eq!(codes, wanted);
}
