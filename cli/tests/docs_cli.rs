//! The docs are tests: every fenced block of README.md and docs/*.md (every page, so a new page
//! is covered as soon as it is written) is checked, or says beside it why it cannot be.
//!
//! - A transcript (a `text`/`console` block whose lines start `$ `) marked `<!-- check: NAME -->`
//!   runs in a temporary folder holding a copy of `cli/tests/docs/NAME/` (its `setup.sh`, when
//!   there is one, runs first, with `$REPO` set), in one `bash`, with the built `triggers-lab`
//!   on `PATH`; each command's output (standard output and error together) is compared with the
//!   lines under it. What changes from run to run (times, durations, ports, pids, run ids, the
//!   nats-server's path) is matched by pattern; a line `…` matches any number of lines.
//! - A `sh` block marked `<!-- check: NAME -->` runs the same way; each command must exit 0.
//! - Every `yaml`/`json` block is loaded: a whole scenario (it has `steps`) is read and checked
//!   as `triggers-lab run` reads it, and run when marked `<!-- check: NAME -->`; a flow (`id`
//!   and `nodes`) is read as `deploy` reads it; a piece of a scenario (some of its keys, or a
//!   list of steps) is read with every key and type checked; JSON is parsed.
//! - Any other shell or output block says why it is not checked: `<!-- not checked: why -->` on
//!   the line before it (a TUI screen, a GitHub Actions file, measured figures...).
//!
//! A block that breaks any of this fails the test, at its `file:line`.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use regex::Regex;

/// How long one checked block may take before it is stopped and fails.
const BLOCK_LIMIT: Duration = Duration::from_secs(240);

/// A fenced block of a page.
#[derive(Debug, Clone)]
struct Block {
    /// `docs/cli.md:59` (the fence's line).
    at: String,
    /// The info string's first word (`text`, `yaml`, `sh`, or empty).
    lang: String,
    /// The marker on the line before the fence.
    mark: Mark,
    /// Its lines, without the fences.
    lines: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
enum Mark {
    None,
    Check(String),
    NotChecked(String),
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cli/ has a parent")
        .to_path_buf()
}

/// README.md and every page of docs/.
fn pages() -> Vec<PathBuf> {
    let root = repo();
    let mut pages = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ is readable")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The fenced blocks of one page (`name` is how it is named in failures).
fn blocks(name: &str, text: &str) -> Vec<Block> {
    let marker = Regex::new(r"^<!--\s*(check|not checked)\s*:\s*(.*?)\s*-->\s*$").unwrap();
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    let mut last_nonblank = String::new();
    for (i, line) in text.lines().enumerate() {
        if let Some(block) = open.as_mut() {
            if line.trim_start().starts_with("```") && line.trim() == "```" {
                out.push(open.take().expect("open block"));
                last_nonblank.clear();
            } else {
                block.lines.push(line.to_owned());
            }
            continue;
        }
        if let Some(info) = line.trim_start().strip_prefix("```") {
            let mark = match marker.captures(last_nonblank.trim()) {
                Some(c) if &c[1] == "check" => Mark::Check(c[2].to_owned()),
                Some(c) => Mark::NotChecked(c[2].to_owned()),
                None => Mark::None,
            };
            let lang = info
                .split([',', ' '])
                .next()
                .unwrap_or("")
                .trim()
                .to_owned();
            open = Some(Block {
                at: format!("{name}:{}", i + 1),
                lang,
                mark,
                lines: Vec::new(),
            });
            continue;
        }
        if !line.trim().is_empty() {
            last_nonblank = line.to_owned();
        }
    }
    if let Some(block) = open {
        out.push(block);
    }
    out
}

/// What a block is, and so how it is checked.
#[derive(Debug, PartialEq)]
enum Kind {
    /// Code compiled elsewhere (Rust doc tests), diagrams, Markdown, TOML: not ours to run.
    Other,
    /// Commands and their output.
    Transcript,
    /// Commands without output.
    Shell,
    /// Output without its command.
    Output,
    Yaml,
    Json,
}

fn kind(block: &Block) -> Kind {
    match block.lang.as_str() {
        "yaml" | "yml" => Kind::Yaml,
        "json" | "jsonc" => Kind::Json,
        "sh" | "bash" | "shell" => Kind::Shell,
        "" | "text" | "console" => {
            if block.lines.iter().any(|l| l.starts_with("$ ")) {
                Kind::Transcript
            } else if block.lang.is_empty() && !looks_like_output(block) {
                Kind::Other
            } else {
                Kind::Output
            }
        }
        _ => Kind::Other,
    }
}

/// A block without an info string is output when it starts as a command's output does; the
/// others (file trees, subjects, YAML-like sketches) are prose in a box.
fn looks_like_output(block: &Block) -> bool {
    let first = block.lines.first().map(String::as_str).unwrap_or("");
    ["PASS ", "FAIL ", "[1/", "error: ", "triggers-lab "]
        .iter()
        .any(|p| first.starts_with(p))
}

/// Every problem of one page's blocks that can be seen without running anything; the blocks to
/// run are pushed to `to_run`.
fn check_page(blocks: &[Block], to_run: &mut Vec<Block>) -> Vec<String> {
    let mut problems = Vec::new();
    for block in blocks {
        let k = kind(block);
        match (&k, &block.mark) {
            (Kind::Other, _) => {}
            (_, Mark::NotChecked(why)) if why.is_empty() => problems.push(format!(
                "{}: `<!-- not checked: -->` says no why: say why it cannot be checked",
                block.at
            )),
            (Kind::Yaml, m) => {
                if let Err(e) = load_yaml(block) {
                    problems.push(format!("{}: {e}", block.at));
                } else if matches!(m, Mark::Check(_)) {
                    to_run.push(block.clone());
                }
            }
            (Kind::Json, _) => {
                if let Err(e) = load_json(block) {
                    problems.push(format!("{}: {e}", block.at));
                }
            }
            (_, Mark::NotChecked(_)) => {}
            (Kind::Output, Mark::Check(_)) => problems.push(format!(
                "{}: output without its command cannot be checked: write the command in the block as `$ triggers-lab …`",
                block.at
            )),
            (_, Mark::Check(name)) => {
                if !repo().join("cli/tests/docs").join(name).is_dir() {
                    problems.push(format!(
                        "{}: `<!-- check: {name} -->` names no folder cli/tests/docs/{name}/: create it with the files the commands need",
                        block.at
                    ));
                } else {
                    to_run.push(block.clone());
                }
            }
            (_, Mark::None) => problems.push(format!(
                "{}: a {} block that is neither checked nor marked: put `<!-- check: NAME -->` (run in cli/tests/docs/NAME/) or `<!-- not checked: why -->` on the line before it",
                block.at,
                match k {
                    Kind::Transcript => "command-and-output",
                    Kind::Shell => "shell",
                    _ => "output",
                }
            )),
        }
    }
    problems
}

fn load_json(block: &Block) -> Result<(), String> {
    // jsonc: comment lines (`// name`) between JSON values, one value after each.
    let text: String = block
        .lines
        .iter()
        .filter(|l| !l.trim_start().starts_with("//"))
        .map(|l| format!("{l}\n"))
        .collect();
    let stream = serde_json::Deserializer::from_str(&text).into_iter::<serde_json::Value>();
    for value in stream {
        value.map_err(|e| format!("not JSON: {e}"))?;
    }
    Ok(())
}

fn load_yaml(block: &Block) -> Result<(), String> {
    use triggers_scenarios::model::ScenarioFile;
    let text = block.lines.join("\n") + "\n";
    let value: serde_json::Value = triggers_scenarios::parse_document("example", &text)
        .map_err(|e| format!("not YAML: {e}"))?;
    match &value {
        serde_json::Value::Object(map) if map.contains_key("steps") => {
            let base = match &block.mark {
                Mark::Check(name) => repo().join("cli/tests/docs").join(name),
                // Paths in the pages' scenarios are written from the shipped scenarios' folder.
                _ => repo().join("scenarios"),
            };
            triggers_scenarios::load_str("example", &text, &base)
                .map(drop)
                .map_err(|e| format!("the scenario does not load:\n{e}"))
        }
        serde_json::Value::Object(map) if map.contains_key("nodes") => {
            triggers_scenarios::read_flow("example", &text)
                .map(drop)
                .map_err(|e| {
                    let lines: Vec<String> = e.iter().map(|e| e.to_string()).collect();
                    format!("the flow does not load:\n{}", lines.join("\n"))
                })
        }
        serde_json::Value::Object(map)
            if map.keys().all(|k| SCENARIO_KEYS.contains(&k.as_str())) =>
        {
            triggers_scenarios::parse_document::<ScenarioFile>("example", &text)
                .map(drop)
                .map_err(|e| format!("not a piece of a scenario: {e}"))
        }
        serde_json::Value::Array(_) => {
            let indented: String = text.lines().map(|l| format!("  {l}\n")).collect();
            let wrapped = format!("steps:\n{indented}");
            triggers_scenarios::parse_document::<ScenarioFile>("example", &wrapped)
                .map(drop)
                .map_err(|e| format!("not a list of steps (line numbers one more than the block's): {e}"))
        }
        // Anything else (a CI file): it is YAML, and that is all that can be said.
        _ if matches!(block.mark, Mark::NotChecked(_)) => Ok(()),
        _ => Err("YAML that is neither a scenario, a piece of one, nor a flow: mark it `<!-- not checked: why -->`".into()),
    }
}

/// The top-level keys of a scenario file.
const SCENARIO_KEYS: &[&str] = &[
    "name",
    "description",
    "timeout",
    "step_timeout",
    "conformance",
    "emulator",
    "nats",
    "http_stubs",
    "services",
    "flows",
    "vars",
    "steps",
];

/// One command of a transcript and the output shown under it.
#[derive(Debug)]
struct Cmd {
    line: String,
    expected: Vec<String>,
}

fn commands(block: &Block) -> Vec<Cmd> {
    let mut cmds: Vec<Cmd> = Vec::new();
    for line in &block.lines {
        if let Some(cmd) = line.strip_prefix("$ ") {
            cmds.push(Cmd {
                line: cmd.to_owned(),
                expected: Vec::new(),
            });
        } else if let Some(last) = cmds.last_mut() {
            last.expected.push(line.clone());
        }
    }
    if block.lang == "sh" {
        // A shell block is commands only, one a line (a trailing `# comment` is the shell's).
        return block
            .lines
            .iter()
            .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
            .map(|l| Cmd {
                line: l.clone(),
                expected: Vec::new(),
            })
            .collect();
    }
    cmds
}

/// What changes from run to run, as a placeholder; both sides go through it.
fn normalise(line: &str, root: &str) -> String {
    use std::sync::OnceLock;
    static RULES: OnceLock<Vec<(Regex, &'static str)>> = OnceLock::new();
    let rules = RULES.get_or_init(|| {
        [
            (r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", "[TIME]"),
            (r"run-[0-9a-f]{16}", "run-[ID]"),
            (r"127\.0\.0\.1:\d+", "127.0.0.1:[PORT]"),
            (r"\bpid \d+", "pid [PID]"),
            (r"\S*/nats-server\b", "[NATS-SERVER]"),
            (r"\b\d+(\.\d+)?\s?(ms|s|µs)\b", "[DUR]"),
            (r"/run/user/\d+", "[RUNTIME]"),
        ]
        .into_iter()
        .map(|(re, to)| (Regex::new(re).expect("a valid pattern"), to))
        .collect()
    });
    let mut line = line.replace(&format!("{root}/rt"), "[RUNTIME]");
    line = line.replace(root, "[ROOT]");
    for (re, to) in rules {
        line = re.replace_all(&line, *to).into_owned();
    }
    line.trim_end().to_owned()
}

/// Whether `actual` matches `expected`, a line `…` in it matching any lines.
fn matches(expected: &[String], actual: &[String]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((first, rest)) if first.trim() == "…" => {
            (0..=actual.len()).any(|skip| matches(rest, &actual[skip..]))
        }
        Some((first, rest)) => actual
            .split_first()
            .is_some_and(|(a, more)| a == first && matches(rest, more)),
    }
}

/// Runs one checked block; its problems, if any.
fn run_block(block: &Block, bin_dir: &Path) -> Result<(), String> {
    let Mark::Check(name) = &block.mark else {
        return Ok(());
    };
    // `up` without `--port` takes 4222: one such block at a time.
    static FIXED_PORT: Mutex<()> = Mutex::new(());
    let fixed_port = block
        .lines
        .iter()
        .any(|l| l.contains("triggers-lab up") && !l.contains("--port"));
    let _one_at_a_time = fixed_port.then(|| FIXED_PORT.lock().unwrap_or_else(|e| e.into_inner()));
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let root = dir.path().canonicalize().map_err(|e| e.to_string())?;
    let work = root.join("work");
    copy_dir(&repo().join("cli/tests/docs").join(name), &work)?;
    std::fs::create_dir_all(root.join("rt")).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(root.join("home")).map_err(|e| e.to_string())?;
    let cmds = if kind(block) == Kind::Yaml {
        std::fs::write(
            work.join("example.scenario.yaml"),
            block.lines.join("\n") + "\n",
        )
        .map_err(|e| e.to_string())?;
        vec![Cmd {
            line: "triggers-lab run example.scenario.yaml".into(),
            expected: Vec::new(),
        }]
    } else {
        commands(block)
    };
    let mut script = String::from(
        "exec 2>&1\n__mark() { __rc=$?; printf '\\n\\036CMD %s %s\\036\\n' \"$1\" \"$__rc\"; return $__rc; }\n",
    );
    if work.join("setup.sh").is_file() {
        script.push_str(
            "bash ./setup.sh >/dev/null || { echo 'setup.sh failed'; exit 99; }\nrm -f setup.sh\n",
        );
    }
    for (i, cmd) in cmds.iter().enumerate() {
        let _ = writeln!(script, "__mark {i}\n{}", cmd.line);
    }
    let _ = writeln!(script, "__mark end");
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut child = {
        use std::os::unix::process::CommandExt as _;
        let mut c = Command::new("bash");
        c.arg("-c")
            .arg(&script)
            .current_dir(&work)
            .env("PATH", &path)
            .env("REPO", repo())
            .env("HOME", root.join("home"))
            .env("XDG_RUNTIME_DIR", root.join("rt"))
            .env("TMPDIR", &root)
            .env("NO_COLOR", "1")
            .env("COLUMNS", "100")
            .env_remove("TRIGGERS_NATS_URL")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0);
        c.spawn().map_err(|e| format!("cannot start bash: {e}"))?
    };
    let pgid = child.id();
    let mut stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stdout, &mut buf);
        buf
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break Some(status);
        }
        if started.elapsed() > BLOCK_LIMIT {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // Whatever it left running (a background `up`): stopped, then its process group killed.
    let _ = Command::new(bin_dir.join("triggers-lab"))
        .args(["down", "--all"])
        .env("XDG_RUNTIME_DIR", root.join("rt"))
        .env("HOME", root.join("home"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if let Ok(pid) = i32::try_from(pgid)
        && let Some(pid) = rustix::process::Pid::from_raw(pid)
    {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    let _ = child.wait();
    let output = String::from_utf8_lossy(&reader.join().unwrap_or_default()).into_owned();
    if status.is_none() {
        return Err(format!(
            "{}: still running after {BLOCK_LIMIT:?}; what it printed:\n{output}",
            block.at
        ));
    }
    // Each command's output: what lies between its mark and the next.
    let mut parts: Vec<(String, String, String)> = Vec::new();
    let mark = Regex::new(r"\n\x1eCMD (\S+) (\d+)\x1e\n").unwrap();
    let mut last: Option<(String, usize)> = None;
    for c in mark.captures_iter(&output) {
        let whole = c.get(0).expect("match");
        if let Some((id, from)) = last.take() {
            parts.push((id, output[from..whole.start()].to_owned(), c[2].to_owned()));
        } else if whole.start() > 0 && output[..whole.start()].contains("setup.sh failed") {
            return Err(format!("{}: setup.sh failed:\n{output}", block.at));
        }
        last = Some((c[1].to_owned(), whole.end()));
    }
    let root_text = root.display().to_string();
    let mut problems = Vec::new();
    for (i, cmd) in cmds.iter().enumerate() {
        let Some((_, got, rc)) = parts.iter().find(|(id, _, _)| id == &i.to_string()) else {
            problems.push(format!(
                "`$ {}` did not run (an earlier command ended the shell)\n{output}",
                cmd.line
            ));
            break;
        };
        let actual: Vec<String> = got.lines().map(|l| normalise(l, &root_text)).collect();
        if block.lang == "sh" || kind(block) == Kind::Yaml {
            // Commands alone, or a scenario run: each must succeed.
            if rc != "0" {
                problems.push(format!("`{}` exited {rc}:\n{}", cmd.line, indent(&actual)));
            }
            continue;
        }
        let expected: Vec<String> = trim_blank_tail(&cmd.expected)
            .iter()
            .map(|l| normalise(l, &root_text))
            .collect();
        let actual = trim_blank_tail(&actual);
        if !matches(&expected, &actual) {
            problems.push(format!(
                "`$ {}` printed, once normalised:\n{}\nwhere the page shows:\n{}",
                cmd.line,
                indent(&actual),
                indent(&expected)
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("{}: {}", block.at, problems.join("\n")))
    }
}

fn trim_blank_tail(lines: &[String]) -> Vec<String> {
    let mut v = lines.to_vec();
    while v.last().is_some_and(|l| l.trim().is_empty()) {
        v.pop();
    }
    v
}

fn indent(lines: &[String]) -> String {
    lines.iter().map(|l| format!("    | {l}\n")).collect()
}

fn copy_dir(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| format!("{}: {e}", to.display()))?;
    for entry in std::fs::read_dir(from).map_err(|e| format!("{}: {e}", from.display()))? {
        let entry = entry.map_err(|e| e.to_string())?;
        let target = to.join(entry.file_name());
        if entry.file_type().map_err(|e| e.to_string())?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)
                .map_err(|e| format!("{}: {e}", entry.path().display()))?;
        }
    }
    Ok(())
}

/// Runs the blocks two at a time (the machine is shared; each block starts its own servers).
fn run_all(to_run: Vec<Block>) -> Vec<String> {
    let bin = triggers_testkit::cli::bin_path();
    let bin_dir = bin.parent().expect("the binary's folder").to_path_buf();
    let queue = Arc::new(Mutex::new(VecDeque::from(to_run)));
    let problems = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let queue = Arc::clone(&queue);
            let problems = Arc::clone(&problems);
            let bin_dir = bin_dir.clone();
            std::thread::spawn(move || {
                loop {
                    let Some(block) = queue.lock().expect("queue").pop_front() else {
                        return;
                    };
                    if let Err(e) = run_block(&block, &bin_dir) {
                        problems.lock().expect("problems").push(e);
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("a worker");
    }
    let mut problems = problems.lock().expect("problems").clone();
    problems.sort();
    problems
}

/// Every page: every block checked or marked, the checked ones run.
#[test]
fn every_example_in_the_docs_is_checked() {
    let mut problems = Vec::new();
    let mut to_run = Vec::new();
    for page in pages() {
        let name = page
            .strip_prefix(repo())
            .expect("under the repository")
            .display()
            .to_string();
        let text = std::fs::read_to_string(&page).expect("a readable page");
        problems.extend(check_page(&blocks(&name, &text), &mut to_run));
    }
    let ran = to_run.len();
    problems.extend(run_all(to_run));
    assert!(
        problems.is_empty(),
        "{} problem(s) in the docs ({ran} block(s) run):\n\n{}",
        problems.len(),
        problems.join("\n\n")
    );
}

/// A deliberately broken example fails the check: the wrong output, an unmarked block, a
/// misspelt key in a step, JSON that is not.
#[test]
fn a_broken_example_fails_the_check() {
    let page = "\
<!-- check: typo -->
```text
$ triggers-lab run mine/typo.scenario.yaml
this is not what it prints
```

```text
$ triggers-lab status
```

```yaml
- wait_settled: {run: r1, statuss: failed}
```

```json
{\"a\": 1,}
```
";
    let blocks = blocks("broken.md", page);
    let mut to_run = Vec::new();
    let problems = check_page(&blocks, &mut to_run);
    assert_eq!(problems.len(), 3, "{problems:#?}");
    assert!(
        problems[0].starts_with(
            "broken.md:7: a command-and-output block that is neither checked nor marked"
        ),
        "{problems:#?}"
    );
    assert!(
        problems[1].starts_with("broken.md:11: ") && problems[1].contains("statuss"),
        "{problems:#?}"
    );
    assert!(
        problems[2].starts_with("broken.md:15: not JSON"),
        "{problems:#?}"
    );
    assert_eq!(to_run.len(), 1);
    let problems = run_all(to_run);
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert!(
        problems[0]
            .starts_with("broken.md:2: `$ triggers-lab run mine/typo.scenario.yaml` printed")
            && problems[0].contains("this is not what it prints"),
        "{problems:#?}"
    );
}

/// What varies from run to run matches; what does not, does not.
#[test]
fn normalised_output_matches_by_pattern_only_where_it_varies() {
    let n = |s: &str| normalise(s, "/tmp/x");
    assert_eq!(
        n("PASS an order (0.84s) pid 18308 nats://127.0.0.1:4222 run-05a2265a75928d7c"),
        n("PASS an order (1.20s) pid 7 nats://127.0.0.1:39999 run-49b8a3c1d2ad8bc2")
    );
    assert_ne!(n("PASS an order (0.84s)"), n("FAIL an order (0.84s)"));
    let e = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert!(matches(&e(&["a", "…", "d"]), &e(&["a", "b", "c", "d"])));
    assert!(!matches(&e(&["a", "…", "d"]), &e(&["a", "b", "c"])));
    assert!(!matches(&e(&["a"]), &e(&["a", "b"])));
}
