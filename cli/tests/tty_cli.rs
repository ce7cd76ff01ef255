//! `triggers-lab` on a terminal, through `script` (util-linux), which gives it a pseudo-terminal
//! with no new dependency: `run --tui` starts the UI and, when it is quit, leaves the terminal
//! as it found it; the progress line of `run` fits COLUMNS on one row. Skipped (saying so) where
//! `script` is missing.

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
/// bytes and the exit code (printed by the shell after the command). `None` without `script`.
fn on_a_terminal(
    args: &str,
    cols: u16,
    keys: &str,
    after: Duration,
    dir: &std::path::Path,
) -> Option<(String, Option<i32>)> {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: `script` (util-linux) is not installed");
        return None;
    }
    let bin = env!("CARGO_BIN_EXE_triggers-lab");
    let mut child = Command::new("script")
        .args(["-qfec"])
        .arg(format!(
            "stty cols {cols} rows 24 2>/dev/null; env -u TRIGGERS_NATS_URL COLUMNS={cols} LINES=24 {bin} {args}; echo EXIT=$?"
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
    Some((text, code))
}

#[test]
fn run_tui_starts_and_quits_leaving_the_terminal_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("t.scenario.yaml"),
        SCENARIO.replace("NAME", "tui quits"),
    )
    .unwrap();
    let Some((out, code)) = on_a_terminal(
        "run --tui --backend binary t.scenario.yaml",
        80,
        "q",
        Duration::from_secs(3),
        dir.path(),
    ) else {
        return;
    };
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
    let Some((out, code)) = on_a_terminal(
        "run -j 2 --backend binary .",
        40,
        "",
        Duration::ZERO,
        dir.path(),
    ) else {
        return;
    };
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
