//! Colours that read on light and dark terminals alike, and `NO_COLOR`.
//!
//! Only a few named colours that keep their contrast on both backgrounds (red, green, blue,
//! magenta, cyan) are used, always as foreground over the terminal's own background; emphasis is
//! carried by modifiers (bold, reversed, dim), so a selection is the terminal's own colours
//! swapped. With colours off (`NO_COLOR` set and not empty, see <https://no-color.org>) only the
//! modifiers remain.

use ratatui::style::{Color, Modifier, Style};
use triggers_emulator::recorder::{Liveness, RunStatus};

/// The styles the views use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Theme {
    colors: bool,
}

impl Default for Theme {
    fn default() -> Self {
        Theme::from_env()
    }
}

impl Theme {
    /// With colours, unless `NO_COLOR` is set to a non-empty value.
    #[must_use]
    pub fn from_env() -> Self {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Theme { colors: !no_color }
    }

    /// With colours.
    #[must_use]
    pub fn colored() -> Self {
        Theme { colors: true }
    }

    /// Modifiers only, no colour at all.
    #[must_use]
    pub fn monochrome() -> Self {
        Theme { colors: false }
    }

    /// Whether colours are on.
    #[must_use]
    pub fn has_colors(self) -> bool {
        self.colors
    }

    fn fg(self, color: Color) -> Style {
        if self.colors {
            Style::new().fg(color)
        } else {
            Style::new()
        }
    }

    pub(crate) fn ok(self) -> Style {
        self.fg(Color::Green)
    }

    pub(crate) fn bad(self) -> Style {
        self.fg(Color::Red).add_modifier(Modifier::BOLD)
    }

    pub(crate) fn warn(self) -> Style {
        self.fg(Color::Magenta)
    }

    pub(crate) fn busy(self) -> Style {
        self.fg(Color::Cyan)
    }

    pub(crate) fn waiting(self) -> Style {
        self.fg(Color::Blue)
    }

    pub(crate) fn dim(self) -> Style {
        Style::new().add_modifier(Modifier::DIM)
    }

    pub(crate) fn bold(self) -> Style {
        Style::new().add_modifier(Modifier::BOLD)
    }

    pub(crate) fn accent(self) -> Style {
        self.fg(Color::Blue).add_modifier(Modifier::BOLD)
    }

    pub(crate) fn header(self) -> Style {
        Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED)
    }

    pub(crate) fn selected(self) -> Style {
        Style::new().add_modifier(Modifier::REVERSED)
    }

    /// The passive-mode badge and other things that must not be missed.
    pub(crate) fn banner(self) -> Style {
        self.fg(Color::Magenta)
            .add_modifier(Modifier::BOLD | Modifier::REVERSED)
    }

    pub(crate) fn run_status(self, status: RunStatus) -> Style {
        match status {
            RunStatus::Running => self.busy(),
            RunStatus::Waiting => self.waiting(),
            RunStatus::Succeeded => self.ok(),
            RunStatus::Failed => self.bad(),
            RunStatus::Cancelled => self.dim(),
        }
    }

    pub(crate) fn step_status(self, status: &str) -> Style {
        match status {
            "succeeded" => self.ok(),
            "failed" => self.bad(),
            "retrying" => self.warn(),
            "skipped" => self.dim(),
            _ => self.waiting(),
        }
    }

    pub(crate) fn liveness(self, liveness: Liveness) -> Style {
        match liveness {
            Liveness::Live => self.ok(),
            Liveness::Late => self.warn(),
            Liveness::Down => self.bad(),
            Liveness::ShuttingDown | Liveness::Registered => self.dim(),
        }
    }

    pub(crate) fn severity(self, severity: &str) -> Style {
        if severity == "error" {
            self.bad()
        } else {
            self.warn()
        }
    }
}
