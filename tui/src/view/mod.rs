//! `view`: draws the model. It reads, never changes, the model (the scroll offset of each list is
//! a drawing cache), and draws only the rows on screen.

mod detail;
mod lists;

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph, Row, Table, Tabs, Wrap};
use triggers_emulator::ClockMode;
use triggers_emulator::recorder::{Liveness, RunStatus};

use crate::format::clock_time;
use crate::model::{Connection, ListId, Mode, Model, Prompt, Tab};

pub(crate) use detail::page_line_count;

/// The key map, as the help overlay and `docs/tui.md` show it.
pub(crate) const KEYS: &[(&str, &str)] = &[
    ("?", "this help (any of ? Esc q Enter closes it)"),
    ("q, Ctrl-c", "quit"),
    ("Tab, Shift-Tab, ← →, h l", "next / previous tab"),
    ("1 … 6", "go to a tab"),
    ("↑ ↓, k j, mouse wheel", "move (or scroll a page)"),
    ("PgUp PgDn, Ctrl-u Ctrl-d", "move a page"),
    (
        "g G, Home End",
        "first / newest row (G also resumes follow)",
    ),
    ("Enter", "drill in: a run's timeline, an entry's details"),
    ("Esc, ← h (drilled in)", "back; on a list, clear its filter"),
    ("/", "filter the list (type, Enter keeps, Esc clears)"),
    ("f", "only DLQ entries and failures"),
    ("F", "follow: stick to the newest row"),
    (
        "t",
        "trigger a flow; its last payload is offered again (emulator modes)",
    ),
    (
        "r",
        "re-trigger the selected run with its payload (emulator modes)",
    ),
    ("R", "re-send the selected DLQ entry (emulator modes)"),
    ("x", "cancel the selected (or open) run (emulator modes)"),
    ("y", "copy the selected id (run, DLQ entry, flow, service)"),
    ("H", "show / hide heartbeats in Traffic (hidden at first)"),
    ("D", "on a run: its DLQ entries"),
    // One line at 80 columns: the help fits 24 rows.
    ("a", "advance the virtual clock, e.g. 1h (emulator modes)"),
];

/// Draws the whole screen.
pub fn view(model: &Model, frame: &mut Frame) {
    let [header, tabs, main, status, hint] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Min(1),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    draw_header(model, frame, header);
    draw_tabs(model, frame, tabs);
    if let Some(page) = &model.page {
        detail::draw_page(model, page, frame, main);
    } else if let Some(run) = &model.open_run {
        detail::draw_timeline(model, run, frame, main);
    } else {
        lists::draw_tab(model, frame, main);
    }
    draw_status(model, frame, status);
    draw_hint(model, frame, hint);
    if let Some(prompt) = &model.prompt {
        draw_prompt(model, prompt, frame, hint);
    }
    if model.help {
        draw_help(model, frame);
    }
}

pub(crate) fn liveness_text(l: Liveness) -> &'static str {
    match l {
        Liveness::Registered => "registered",
        Liveness::Live => "live",
        Liveness::Late => "late",
        Liveness::Down => "down",
        Liveness::ShuttingDown => "shutting down",
    }
}

pub(crate) fn run_status_text(s: RunStatus) -> &'static str {
    s.as_str()
}

fn draw_header(model: &Model, frame: &mut Frame, area: Rect) {
    let t = model.theme;
    let mut spans = vec![Span::styled(" triggers-lab ", t.accent()), Span::raw("│ ")];
    match model.mode {
        Mode::Control => {
            spans.push(Span::styled("emulator", t.bold()));
            spans.push(Span::raw(format!(" {}", model.source)));
        }
        Mode::InProcess => spans.push(Span::styled("emulator (in-process)", t.bold())),
        Mode::Passive => {
            spans.push(Span::styled(" passive observer: read-only ", t.banner()));
            spans.push(Span::raw(format!(" {}", model.source)));
        }
    }
    if let Some((clock, mode)) = model.clock {
        let mode = match mode {
            ClockMode::Virtual => "virtual",
            ClockMode::Real => "real",
        };
        spans.push(Span::raw(format!(
            " │ clock {} ({mode})",
            clock_time(clock)
        )));
    }
    frame.render_widget(Line::from(spans), area);
}

fn draw_tabs(model: &Model, frame: &mut Frame, area: Rect) {
    let t = model.theme;
    let wide = area.width >= 100;
    let titles: Vec<Line> = Tab::ALL
        .iter()
        .enumerate()
        .map(|(i, tab)| {
            let count = match tab {
                Tab::Services => model.services.len(),
                Tab::Flows => model.flows.len(),
                Tab::Runs => model.runs.len(),
                Tab::Dlq => model.dlq.len(),
                Tab::Violations => model.violations_total.max(model.violations.len()),
                Tab::Traffic => model.events.len(),
            };
            let style = match tab {
                Tab::Dlq | Tab::Violations if count > 0 => t.bad(),
                _ => Style::new(),
            };
            let number = if wide {
                format!("{} ", i + 1)
            } else {
                String::new()
            };
            Line::from(vec![
                Span::styled(number, t.dim()),
                Span::raw(tab.title()),
                Span::styled(format!(" {count}"), style),
            ])
        })
        .collect();
    let tabs = Tabs::new(titles)
        .select(model.tab.index())
        .highlight_style(t.selected())
        .divider("│");
    frame.render_widget(tabs, area);
}

fn draw_status(model: &Model, frame: &mut Frame, area: Rect) {
    let t = model.theme;
    let mut spans = match &model.connection {
        Connection::Connected => vec![Span::styled(" ● connected", t.ok())],
        Connection::Connecting => vec![Span::styled(" ○ connecting…", t.warn())],
        Connection::Lost { reason } => vec![Span::styled(
            format!(" ✕ connection lost ({reason}): reconnecting…"),
            t.bad(),
        )],
    };
    // First after the connection: what is on screen is incomplete, whatever else it says.
    if model.emulator_lost > 0 || model.own_dropped > 0 {
        let mut who = Vec::new();
        if model.emulator_lost > 0 {
            who.push(format!("{} to the emulator", model.emulator_lost));
        }
        if model.own_dropped > 0 {
            who.push(format!("{} to this view", model.own_dropped));
        }
        spans.push(Span::styled(
            format!(
                " │ ⚠ NATS dropped messages (slow consumer): {}; what shows is incomplete",
                who.join(", ")
            ),
            t.bad(),
        ));
    }
    if model.emulator_disconnects > 0 {
        spans.push(Span::styled(
            format!(
                " │ ⚠ the emulator lost its NATS connection {} time(s): triggers and heartbeats sent meanwhile were not seen",
                model.emulator_disconnects
            ),
            t.bad(),
        ));
    }
    let (kept, dropped) = (model.events.len(), model.events.dropped());
    spans.push(Span::raw(format!(" │ {kept} events")));
    if dropped > 0 {
        spans.push(Span::styled(format!(", {dropped} older dropped"), t.warn()));
    }
    if model.emulator_dropped > 0 {
        spans.push(Span::styled(
            format!(", emulator dropped {}", model.emulator_dropped),
            t.warn(),
        ));
    }
    spans.push(Span::raw(" │ "));
    spans.push(if model.follow {
        Span::styled("follow", t.ok())
    } else {
        Span::styled("paused (F follows)", t.dim())
    });
    if model.failures_only {
        spans.push(Span::raw(" │ "));
        spans.push(Span::styled("failures only", t.bad()));
    }
    let filter = &model.list(model.current_list()).filter;
    if !filter.is_empty() {
        spans.push(Span::raw(" │ filter: "));
        spans.push(Span::styled(filter.clone(), t.bold()));
    }
    frame.render_widget(Line::from(spans), area);
}

fn draw_hint(model: &Model, frame: &mut Frame, area: Rect) {
    let t = model.theme;
    if let Some(notice) = &model.notice {
        let style = if notice.error { t.bad() } else { t.ok() };
        frame.render_widget(Line::styled(format!(" {}", notice.text), style), area);
        return;
    }
    let mut hint = String::from(" ? help  / filter  f failures  F follow  ⏎ open");
    if model.page.is_some() || model.open_run.is_some() {
        hint.push_str("  Esc back");
    }
    if model.mode.can_drive() {
        let on_dlq = match &model.page {
            Some(page) => matches!(page.detail, crate::model::Detail::Dlq(_)),
            None => model.open_run.is_none() && model.tab == Tab::Dlq,
        };
        // On a DLQ entry its own action comes first; `a` stays in the help (80 columns hold
        // no more).
        if on_dlq {
            hint.push_str("  R re-send  t trigger");
        } else {
            hint.push_str("  t trigger  a advance");
        }
    }
    hint.push_str("  q quit");
    frame.render_widget(Line::styled(hint, t.dim()), area);
}

fn draw_prompt(model: &Model, prompt: &Prompt, frame: &mut Frame, hint: Rect) {
    let t = model.theme;
    match prompt {
        Prompt::Filter { input } => {
            let line = Line::from(vec![
                Span::styled(" filter: ", t.bold()),
                Span::raw(input.clone()),
                Span::styled("▏", t.accent()),
                Span::styled("  Enter keep · Esc clear", t.dim()),
            ]);
            frame.render_widget(Clear, hint);
            frame.render_widget(line, hint);
        }
        Prompt::Advance { input, error } => {
            let mut spans = vec![
                Span::styled(" advance the clock by (30s, 5m, 1h): ", t.bold()),
                Span::raw(input.clone()),
                Span::styled("▏", t.accent()),
            ];
            if let Some(e) = error {
                spans.push(Span::styled(format!("  {e}"), t.bad()));
            }
            frame.render_widget(Clear, hint);
            frame.render_widget(Line::from(spans), hint);
        }
        Prompt::PickFlow { selected } => {
            let flows = model.flow_ids();
            let height = (flows.len() as u16 + 2).min(frame.area().height.saturating_sub(2));
            let area = frame.area().centered(
                Constraint::Percentage(60),
                Constraint::Length(height.max(3)),
            );
            frame.render_widget(Clear, area);
            let rows: Vec<Row> = flows.iter().map(|f| Row::new([f.clone()])).collect();
            let mut state = ratatui::widgets::TableState::default().with_selected(Some(*selected));
            let table = Table::new(rows, [Constraint::Fill(1)])
                .block(
                    Block::bordered()
                        .title(" Trigger which flow? ")
                        .title_bottom(Line::from(" Enter picks · Esc cancels ").right_aligned()),
                )
                .row_highlight_style(t.selected());
            frame.render_stateful_widget(table, area, &mut state);
        }
        Prompt::Payload {
            flow_id,
            input,
            error,
        } => {
            let area = frame
                .area()
                .centered(Constraint::Percentage(70), Constraint::Length(5));
            frame.render_widget(Clear, area);
            let mut lines = vec![Line::from(vec![
                Span::raw(input.clone()),
                Span::styled("▏", t.accent()),
            ])];
            lines.push(match error {
                Some(e) => Line::styled(e.clone(), t.bad()),
                None => Line::styled("JSON payload; Enter triggers, Esc cancels", t.dim()),
            });
            let block = Block::bordered().title(format!(" Trigger {flow_id} with payload "));
            frame.render_widget(
                Paragraph::new(lines)
                    .block(block)
                    .wrap(Wrap { trim: false }),
                area,
            );
        }
    }
}

fn draw_help(model: &Model, frame: &mut Frame) {
    let t = model.theme;
    let screen = frame.area();
    let key_width = KEYS
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0) as u16;
    let text_width = KEYS
        .iter()
        .map(|(_, v)| v.chars().count())
        .max()
        .unwrap_or(0) as u16;
    // As wide as the longest line, or the screen: then descriptions wrap rather than being cut.
    let width = (2 + key_width + 1 + text_width).min(screen.width);
    let room = usize::from(width.saturating_sub(2 + key_width + 1).max(8));
    let rows: Vec<(Row, u16)> = KEYS
        .iter()
        .map(|(k, v)| {
            let lines = wrap_words(v, room);
            let height = lines.len().max(1) as u16;
            let text: Vec<Line> = lines.into_iter().map(Line::raw).collect();
            (
                Row::new([
                    ratatui::text::Text::from(Span::styled(*k, t.bold())),
                    ratatui::text::Text::from(text),
                ])
                .height(height),
                height,
            )
        })
        .collect();
    let height = (rows.iter().map(|(_, h)| h).sum::<u16>() + 2).min(screen.height);
    let area = screen.centered(Constraint::Length(width), Constraint::Length(height));
    frame.render_widget(Clear, area);
    let mode = match model.mode {
        Mode::Passive => " passive observer: read-only ",
        Mode::Control => " emulator over its control API ",
        Mode::InProcess => " emulator in this process ",
    };
    let table = Table::new(
        rows.into_iter().map(|(r, _)| r),
        [Constraint::Length(key_width), Constraint::Fill(1)],
    )
    .block(
        Block::bordered()
            .title(" Keys ")
            .title_bottom(Line::from(mode).right_aligned()),
    )
    .column_spacing(1);
    frame.render_widget(table, area);
}

/// `text` in lines of at most `width` characters, broken between words (a word longer than a
/// line is cut).
fn wrap_words(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        match lines.last_mut() {
            Some(l) if l.chars().count() + 1 + word.chars().count() <= width => {
                l.push(' ');
                l.push_str(word);
            }
            _ => lines.push(word.chars().take(width).collect()),
        }
    }
    lines
}

/// The rows of `list` to draw in `height` lines: `(first, end, selected)` with the selection
/// kept in sight by moving the list's scroll offset as little as possible.
pub(crate) fn window(model: &Model, list: ListId, height: usize) -> (usize, usize, Option<usize>) {
    let count = model.row_count(list);
    let state = model.list(list);
    if count == 0 || height == 0 {
        state.offset.set(0);
        return (0, 0, None);
    }
    let selected = state.selected.min(count - 1);
    let mut offset = state.offset.get();
    if selected < offset {
        offset = selected;
    } else if selected >= offset + height {
        offset = selected + 1 - height;
    }
    offset = offset.min(count.saturating_sub(height));
    state.offset.set(offset);
    (
        offset,
        (offset + height).min(count),
        Some(selected - offset),
    )
}
