//! Writing to the terminal: standard output that treats a closed pipe (`| head`) as the reader
//! having seen enough rather than as a crash, colour only where it helps (a terminal, and
//! `NO_COLOR` unset), and the terminal's width for lines that must not wrap.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once a write to standard output found the pipe closed: nothing more is written there,
/// the command goes on (it still stops its servers and writes its reports) and exits with the
/// code it would have.
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes `text` to standard output; a closed pipe silences every later write.
pub(crate) fn write_stdout(text: &str) {
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        // A closed pipe is the reader's choice; any other error (a full disk) would be the same
        // for every later line, so the rest is dropped either way, and said once.
        STDOUT_CLOSED.store(true, Ordering::Relaxed);
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("error: cannot write to standard output: {e}");
        }
    }
}

/// `println!` that survives `| head`.
macro_rules! outln {
    () => { $crate::out::write_stdout("\n") };
    ($($arg:tt)*) => { $crate::out::write_stdout(&format!("{}\n", format_args!($($arg)*))) };
}

/// `print!` that survives `| head`.
macro_rules! out {
    ($($arg:tt)*) => { $crate::out::write_stdout(&format!($($arg)*)) };
}

pub(crate) use {out, outln};

/// Whether standard output gets colour: a terminal, `NO_COLOR` unset (<https://no-color.org>),
/// `TERM` not `dumb`.
pub(crate) fn colour_stdout() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        && std::env::var("TERM").map_or(true, |t| t != "dumb")
        && std::io::stdout().is_terminal()
}

/// Whether standard error takes a line redrawn in place (`\r`, `ESC[2K`): a terminal whose
/// `TERM` is not `dumb` (a dumb terminal, as Emacs' shell, prints the escapes as they are).
pub(crate) fn redraw_stderr() -> bool {
    std::env::var("TERM").map_or(true, |t| t != "dumb") && std::io::stderr().is_terminal()
}

/// `1 run`, `2 runs`, `1 entry`, `3 entries`: a count and its noun, singular for one.
pub(crate) fn count(n: impl Into<u64>, noun: &str) -> String {
    let n = n.into();
    if n == 1 {
        format!("1 {noun}")
    } else if let Some(stem) = noun.strip_suffix('y') {
        format!("{n} {stem}ies")
    } else {
        format!("{n} {noun}s")
    }
}

/// `text` in bold green (`ok`) or bold red, when `colour`.
pub(crate) fn paint(text: &str, ok: bool, colour: bool) -> String {
    if colour {
        format!("\x1b[1;{}m{text}\x1b[0m", if ok { 32 } else { 31 })
    } else {
        text.to_owned()
    }
}

/// The terminal's width in columns (standard error's, where the progress line goes), else
/// `COLUMNS`, else 80.
pub(crate) fn terminal_width() -> usize {
    ratatui::crossterm::terminal::size()
        .ok()
        .map(|(w, _)| usize::from(w))
        .filter(|w| *w > 0)
        .or_else(|| {
            std::env::var("COLUMNS")
                .ok()
                .and_then(|c| c.trim().parse().ok())
        })
        .unwrap_or(80)
}

/// `line` cut to fit in `width` terminal columns, counted by display width (a wide character
/// takes two, a combining one none), with `…` where it was cut; control characters (a tab, a
/// newline in a scenario's name) become spaces, so the line stays one row. A line exactly as
/// wide as the terminal would wrap on some terminals, so it is kept one column short.
pub(crate) fn fit(line: &str, width: usize) -> String {
    use unicode_width::UnicodeWidthChar;
    let room = width.saturating_sub(1).max(1);
    let clean: String = line
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if unicode_width::UnicodeWidthStr::width(clean.as_str()) <= room {
        return clean;
    }
    // Room for the `…` (one column) after what is kept.
    let mut out = String::new();
    let mut used = 0;
    for c in clean.chars() {
        let w = c.width().unwrap_or(0);
        if used + w > room.saturating_sub(1) {
            break;
        }
        used += w;
        out.push(c);
    }
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_never_reaches_the_last_column() {
        assert_eq!(fit("abc", 80), "abc");
        let cut = fit(&"x".repeat(200), 40);
        assert_eq!(cut.chars().count(), 39);
        assert!(cut.ends_with('…'));
        assert_eq!(fit("abcdef", 1).chars().count(), 1);
    }

    #[test]
    fn fit_counts_display_columns_not_characters() {
        use unicode_width::UnicodeWidthStr;
        for width in [2, 3, 40, 80, 200] {
            for line in [
                "支払いシナリオ".repeat(40),
                "e\u{301}".repeat(300),
                "🚀 launch ".repeat(40),
                "tab\there\nnewline ".repeat(30),
            ] {
                let cut = fit(&line, width);
                assert!(cut.width() < width, "{cut:?} at {width}");
                assert!(!cut.chars().any(char::is_control), "{cut:?}");
            }
        }
    }

    /// "1 steps", "2 run(s)": one is singular, the rest plural, in every count shown.
    #[test]
    fn a_count_agrees_with_its_noun() {
        assert_eq!(count(1u64, "step"), "1 step");
        assert_eq!(count(0u64, "run"), "0 runs");
        assert_eq!(count(3u64, "entry"), "3 entries");
        assert_eq!(count(1u64, "entry"), "1 entry");
    }
}
