//! What `run` prints while scenarios run: one progress line on standard error (terminals
//! only, cut to the terminal's width so it never wraps), each scenario's result whole on
//! standard output, and with `--message-format json` one JSON object per event instead.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

use serde_json::json;
use triggers_scenarios::report::seconds;
use triggers_scenarios::{Event, Outcome, ScenarioReport};

use crate::out::{self, outln};

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// For people.
    Human,
    /// One JSON object a line on standard output (`--message-format json`).
    Json,
}

/// What the progress line and the printed results know.
pub(crate) struct Progress {
    pub(crate) total: usize,
    pub(crate) done: usize,
    /// Running scenarios: index -> (name, step label, when the scenario started).
    running: BTreeMap<usize, (String, String, Instant)>,
    /// Standard error is a terminal: the progress line is shown.
    pub(crate) tty: bool,
    /// Every step.
    pub(crate) verbose: bool,
    /// With what each step did (a run id, "1 DLQ entry"...).
    pub(crate) details: bool,
    /// The terminal UI has the screen while each scenario runs: no progress line and no step
    /// lines; a line before each scenario (its UI opens next) and its verdict once it is closed.
    pub(crate) quiet: bool,
    /// Several scenarios at once: what a scenario prints is kept until it ends, then printed
    /// whole, so that its lines are never mixed with another's.
    pub(crate) buffered: bool,
    pub(crate) colour: bool,
    pub(crate) format: Format,
    /// Standard output carries a report (`--json -`): what is for people goes to standard
    /// error.
    pub(crate) to_stderr: bool,
    /// The scenario's lines so far, while buffered.
    pending: BTreeMap<usize, String>,
    line_shown: bool,
}

impl Progress {
    pub(crate) fn new(tty: bool, verbose: bool, quiet: bool, jobs: usize, format: Format) -> Self {
        Progress {
            total: 0,
            done: 0,
            running: BTreeMap::new(),
            tty,
            verbose,
            details: true,
            quiet,
            buffered: jobs > 1,
            colour: out::colour_stdout(),
            format,
            to_stderr: false,
            pending: BTreeMap::new(),
            line_shown: false,
        }
    }

    fn clear(&mut self) {
        if self.line_shown {
            // The line was cut to fit, so it took one row: clearing that row clears it all.
            eprint!("\r\x1b[2K");
            self.line_shown = false;
        }
    }

    /// Redraws the progress line, its times a second on (called every second while scenarios
    /// run: a step that waits a minute must not look frozen).
    pub(crate) fn tick(&mut self) {
        if self.line_shown {
            self.show();
        }
    }

    fn show(&mut self) {
        if !self.tty || self.quiet || self.running.is_empty() {
            return;
        }
        eprint!("\r\x1b[2K{}", self.line(out::terminal_width()));
        let _ = std::io::stderr().flush();
        self.line_shown = true;
    }

    /// The progress line for a terminal `width` columns wide: always one row.
    fn line(&self, width: usize) -> String {
        let running: Vec<String> = self
            .running
            .values()
            .map(|(name, step, since)| {
                let elapsed = elapsed(since.elapsed());
                if step.is_empty() {
                    format!("{name} (starting, {elapsed})")
                } else {
                    format!("{name} ({step}, {elapsed})")
                }
            })
            .collect();
        let line = format!(
            "[{}/{}] running {}",
            self.done + 1,
            self.total,
            running.join(", ")
        );
        out::fit(&line, width)
    }

    /// Prints `text` now, or keeps it for the end of scenario `index` when buffered.
    fn say(&mut self, index: usize, text: String) {
        if self.buffered {
            self.pending.entry(index).or_default().push_str(&text);
        } else {
            self.clear();
            self.write(&text);
        }
    }

    fn write(&self, text: &str) {
        if self.to_stderr {
            eprint!("{text}");
        } else {
            out::write_stdout(text);
        }
    }

    /// The result line, `PASS`/`FAIL` in colour when standard output is a terminal.
    fn summary_line(&self, report: &ScenarioReport) -> String {
        let line = report.summary_line();
        let word = report.outcome.word();
        match line.strip_prefix(word) {
            Some(rest) => {
                let mut s = out::paint(word, report.passed(), self.colour);
                s.push_str(rest);
                s
            }
            None => line,
        }
    }

    pub(crate) fn on(&mut self, event: Event) {
        if self.format == Format::Json {
            self.json(&event);
        }
        match event {
            Event::ScenarioStarted {
                index,
                name,
                total,
                description,
            } => {
                self.total = total;
                self.running
                    .insert(index, (name.clone(), String::new(), Instant::now()));
                if self.format == Format::Human && self.quiet {
                    self.say(
                        index,
                        format!(
                            "[{}/{total}] {name}: the terminal UI opens; quit it (q) to go on\n",
                            index + 1
                        ),
                    );
                } else if self.format == Format::Human {
                    if self.verbose {
                        let mut text = format!("\n[{}/{total}] {name}\n", index + 1);
                        for line in wrap(description.trim(), 96) {
                            text.push_str(&format!("  {line}\n"));
                        }
                        self.say(index, text);
                    } else if !self.tty {
                        self.say(index, format!("[{}/{total}] {name}\n", index + 1));
                    }
                }
            }
            Event::StepStarted {
                index,
                step,
                steps,
                label,
                ..
            } => {
                if let Some(r) = self.running.get_mut(&index) {
                    r.1 = format!("step {step}/{steps}: {label}");
                }
            }
            Event::StepFinished {
                index, step, steps, ..
            } => {
                if self.verbose && self.format == Format::Human && !self.quiet {
                    let mark = match step.outcome {
                        Outcome::Passed => "ok  ",
                        Outcome::Failed => "FAIL",
                        Outcome::Skipped => "skip",
                        Outcome::Interrupted => "INTR",
                        Outcome::NotRun => "-   ",
                    };
                    let shown = self.details && step.outcome != Outcome::Failed;
                    let mut lines = step.detail.lines().filter(|_| shown);
                    let first = lines.next().unwrap_or_default();
                    let mut text = format!(
                        "  {mark} {}/{steps} {} ({}){}\n",
                        step.index,
                        step.label,
                        seconds(step.duration),
                        if first.is_empty() {
                            String::new()
                        } else {
                            format!(": {first}")
                        }
                    );
                    // The rest of what it did (a load step's report) whole, under it.
                    for line in lines {
                        text.push_str(&format!("         {line}\n"));
                    }
                    self.say(index, text);
                }
            }
            Event::ScenarioFinished { index, report, .. } => {
                self.running.remove(&index);
                self.done += 1;
                self.clear();
                let mut text = self.pending.remove(&index).unwrap_or_default();
                // The scenario's UI (with --tui) was closed before it could end: the screen is
                // ours again.
                if self.format == Format::Human {
                    text.push_str(&self.summary_line(&report));
                    text.push('\n');
                    text.push_str(&report.failure_text());
                }
                self.write(&text);
            }
        }
        self.show();
    }

    /// `--message-format json`: one object a line, `type` first.
    fn json(&self, event: &Event) {
        let value = match event {
            Event::ScenarioStarted {
                index, total, name, ..
            } => json!({"type": "scenario_started", "index": index, "total": total, "name": name}),
            Event::StepStarted {
                index,
                name,
                step,
                steps,
                label,
            } => json!({
                "type": "step_started", "index": index, "scenario": name, "step": step,
                "steps": steps, "label": label,
            }),
            Event::StepFinished {
                index, name, step, ..
            } => json!({
                "type": "step_finished", "index": index, "scenario": name, "step": step,
            }),
            Event::ScenarioFinished { index, report, .. } => json!({
                "type": "scenario_finished", "index": index, "report": report,
            }),
        };
        outln!("{value}");
    }
}

/// `7s`, `1m05s`, `1h02m`: how long a scenario has run, as the progress line shows it.
fn elapsed(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

/// Words of `text` in lines of at most `width` characters.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        match lines.last_mut() {
            Some(l) if l.len() + 1 + word.len() <= width => {
                l.push(' ');
                l.push_str(word);
            }
            _ => lines.push(word.to_owned()),
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use unicode_width::UnicodeWidthStr;

    #[test]
    fn the_progress_line_fits_every_width_on_one_row() {
        let mut p = Progress::new(true, false, false, 4, Format::Human);
        p.total = 12;
        let names = [
            (
                "an order is charged twice and refunded once",
                "step 3/9: wait_settled r1",
            ),
            ("支払いのシナリオ、二重請求のテスト", "step 1/2: trigger"),
            ("rocket 🚀 launch with a\ttab and a\nnewline", ""),
            ("e\u{301}clair", "step 2/2: expect_dlq"),
        ];
        for (i, (name, step)) in names.iter().enumerate() {
            p.running
                .insert(i, ((*name).to_owned(), (*step).to_owned(), Instant::now()));
        }
        for width in [40, 80, 200] {
            let line = p.line(width);
            assert!(
                line.width() < width,
                "{} columns at {width}: {line:?}",
                line.width()
            );
            assert!(!line.contains(['\n', '\r', '\t']), "{line:?}");
        }
        // Wide enough, nothing is cut.
        assert!(!p.line(400).contains('…'));
    }

    /// A step that waits a minute must not look frozen: the line says how long each scenario
    /// has run.
    #[test]
    fn the_progress_line_says_how_long_each_scenario_has_run() {
        let mut p = Progress::new(true, false, false, 1, Format::Human);
        p.total = 2;
        let started = Instant::now()
            .checked_sub(Duration::from_secs(65))
            .expect("a minute ago");
        p.running.insert(
            0,
            (
                "waits".to_owned(),
                "step 2/3: wait_settled r1".to_owned(),
                started,
            ),
        );
        let line = p.line(200);
        assert!(line.contains("(step 2/3: wait_settled r1, 1m0"), "{line}");
        assert_eq!(elapsed(Duration::from_secs(7)), "7s");
        assert_eq!(elapsed(Duration::from_secs(3725)), "1h02m");
    }
}
