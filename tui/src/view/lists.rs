//! The tab views: one table per tab, drawn row by row for the rows on screen only; the flows,
//! DLQ and violations tabs show the selected item beside or below their table.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Paragraph, Row, Table, TableState, Wrap};

use super::{detail, liveness_text, run_status_text, window};
use crate::format::{age, clock_time, duration_ns, one_line, short_hash};
use crate::model::{ListId, Mode, Model, Tab};

pub(crate) fn draw_tab(model: &Model, frame: &mut Frame, area: Rect) {
    match model.tab {
        Tab::Services => services(model, frame, area),
        Tab::Flows => flows(model, frame, area),
        Tab::Runs => runs(model, frame, area),
        Tab::Dlq => dlq(model, frame, area),
        Tab::Violations => violations(model, frame, area),
        Tab::Traffic => traffic(model, frame, area),
    }
}

/// A table of `list` in a bordered block: header, the visible rows, the selection, an empty-state
/// line, and the position in the bottom border.
pub(crate) struct ListTable<'a> {
    pub(crate) list: ListId,
    pub(crate) title: String,
    pub(crate) header: &'a [&'a str],
    pub(crate) widths: &'a [Constraint],
    pub(crate) empty: String,
}

impl ListTable<'_> {
    pub(crate) fn draw(
        self,
        model: &Model,
        frame: &mut Frame,
        area: Rect,
        make_row: impl Fn(u64) -> Option<Row<'static>>,
    ) {
        let t = model.theme;
        let count = model.row_count(self.list);
        let mut title = format!(" {} ", self.title);
        // A run's timeline too: with `f` on it says how many steps it hides.
        let total = model.collection_len(self.list);
        if count != total {
            title = format!(" {} · {count} of {total} shown ", self.title);
        }
        let height = usize::from(area.height.saturating_sub(3));
        let (first, end, selected) = window(model, self.list, height);
        let mut block = Block::bordered().title(Span::styled(title, t.bold()));
        if count > 0 {
            block = block.title_bottom(
                Line::from(format!(
                    " {}/{count} ",
                    model.list(self.list).selected.min(count - 1) + 1
                ))
                .right_aligned(),
            );
        }
        let header = Row::new(self.header.iter().map(|h| Cell::from(*h))).style(t.header());
        if count == 0 {
            let inner = block.inner(area);
            frame.render_widget(block, area);
            let table = Table::new(Vec::<Row>::new(), self.widths.to_vec()).header(header);
            frame.render_widget(table, inner);
            let [_, msg] =
                Layout::vertical([Constraint::Length(1), Constraint::Min(0)]).areas(inner);
            frame.render_widget(
                Paragraph::new(Line::styled(self.empty, t.dim())).wrap(Wrap { trim: true }),
                msg,
            );
            return;
        }
        let rows: Vec<Row> = (first..end)
            .filter_map(|i| model.row_at(self.list, i))
            .filter_map(make_row)
            .collect();
        let mut state = TableState::default().with_selected(selected);
        let table = Table::new(rows, self.widths.to_vec())
            .header(header)
            .block(block)
            .row_highlight_style(t.selected())
            .highlight_symbol("▶ ");
        frame.render_stateful_widget(table, area, &mut state);
    }
}

fn services(model: &Model, frame: &mut Frame, area: Rect) {
    let t = model.theme;
    let empty = match model.mode {
        Mode::Passive => "No service seen yet: waiting for heartbeats on triggers.v2.heartbeat.",
        _ => "No service registered yet: start one against this NATS server.",
    };
    ListTable {
        list: ListId::Services,
        title: "Services".into(),
        header: &[
            "Service",
            "Version",
            "Manifest",
            "Capabilities",
            "Heartbeat",
            "State",
            "Repl.",
        ],
        widths: &[
            Constraint::Fill(2),
            Constraint::Length(8),
            Constraint::Length(12),
            Constraint::Fill(2),
            Constraint::Length(9),
            Constraint::Length(13),
            Constraint::Length(5),
        ],
        empty: empty.into(),
    }
    .draw(model, frame, area, |pos| {
        let s = model.services.values().nth(pos as usize)?;
        let live = s.liveness(model.now, model.heartbeat_interval);
        Some(Row::new([
            Cell::from(s.name.clone()),
            Cell::from(s.version.clone()),
            Cell::from(short_hash(&s.manifest_hash)),
            Cell::from(s.capabilities.join(", ")),
            Cell::from(age(model.now, s.last_seen)),
            Cell::from(Span::styled(liveness_text(live), t.liveness(live))),
            Cell::from(s.replicas().to_string()),
        ]))
    });
}

fn flows(model: &Model, frame: &mut Frame, area: Rect) {
    let [list, graph] = if area.width >= 110 {
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(area)
    } else {
        Layout::vertical([Constraint::Percentage(45), Constraint::Percentage(55)]).areas(area)
    };
    let empty = match model.mode {
        Mode::Passive => "No flow seen yet: flows appear when the orchestrator broadcasts them.",
        _ => "No flow deployed yet: `triggers-lab deploy FLOW`, or a scenario.",
    };
    ListTable {
        list: ListId::Flows,
        title: "Flows".into(),
        header: &["Flow", "Version", "Seen", "Services", "Nodes"],
        widths: &[
            Constraint::Fill(2),
            Constraint::Length(7),
            Constraint::Length(8),
            Constraint::Fill(3),
            Constraint::Length(5),
        ],
        empty: empty.into(),
    }
    .draw(model, frame, list, |pos| {
        let f = model.flows.values().nth(pos as usize)?;
        let versions: Vec<String> = f.versions.iter().map(|v| format!("v{v}")).collect();
        let (services, nodes) = f
            .flow
            .as_ref()
            .map_or((String::new(), String::new()), |fl| {
                (
                    fl.services().into_iter().collect::<Vec<_>>().join(", "),
                    fl.body.nodes.len().to_string(),
                )
            });
        Some(Row::new([
            f.id.clone(),
            format!("v{}", f.version),
            versions.join(" "),
            services,
            nodes,
        ]))
    });
    let selected = model
        .selected_item(ListId::Flows)
        .and_then(|pos| model.flows.values().nth(pos as usize));
    let lines: Vec<Line> = match selected {
        Some(f) => match &f.flow {
            Some(flow) => detail::graph_lines(model, flow, ""),
            None => vec![Line::raw(
                "The flow's body has not been seen (only its version).",
            )],
        },
        None => Vec::new(),
    };
    let title = selected.map_or(" Graph ".to_owned(), |f| {
        format!(" Graph of {} v{} ", f.id, f.version)
    });
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(title)),
        graph,
    );
}

fn runs(model: &Model, frame: &mut Frame, area: Rect) {
    let t = model.theme;
    let clock = model.clock_now();
    let empty = match model.mode {
        Mode::Passive => "No run seen yet: runs appear with their first completion event.",
        _ => "No run yet: press t to trigger a flow.",
    };
    // Ids and flow names as wide as the widest kept (within bounds): the rest of the width goes
    // to the failed nodes and their errors, not to padding after a 20-character id.
    let widest = |f: &dyn Fn(&crate::model::RunRow) -> usize, floor: usize, cap: usize| {
        model
            .runs
            .iter()
            .map(f)
            .max()
            .unwrap_or(0)
            .clamp(floor, cap) as u16
    };
    let widths = [
        Constraint::Length(widest(&|r| r.id.chars().count(), 3, 40)),
        Constraint::Length(widest(&|r| r.flow_id.chars().count(), 4, 32)),
        Constraint::Length(9),
        Constraint::Length(12),
        Constraint::Length(8),
        Constraint::Length(5),
        Constraint::Fill(1),
    ];
    ListTable {
        list: ListId::Runs,
        title: runs_title(model),
        header: &[
            "Run", "Flow", "Status", "Started", "Duration", "Steps", "Failed",
        ],
        widths: &widths,
        empty: empty.into(),
    }
    .draw(model, frame, area, |abs| {
        let r = model.runs.get_abs(abs)?;
        let mut status = run_status_text(r.status).to_owned();
        if r.dlq > 0 {
            status.push('*');
        }
        Some(Row::new([
            Cell::from(r.id.clone()),
            Cell::from(r.flow_id.clone()),
            Cell::from(Span::styled(status, t.run_status(r.status))),
            Cell::from(clock_time(r.started_at)),
            Cell::from(duration_ns(r.duration_ns(clock))),
            Cell::from(r.steps.to_string()),
            Cell::from(Span::styled(r.failed_node(), t.bad())),
        ]))
    });
}

fn dlq(model: &Model, frame: &mut Frame, area: Rect) {
    let t = model.theme;
    let [list, preview] =
        Layout::vertical([Constraint::Percentage(40), Constraint::Percentage(60)]).areas(area);
    ListTable {
        list: ListId::Dlq,
        title: "DLQ".into(),
        header: &["Time", "Subject", "Kind", "Run", "Error"],
        widths: &[
            Constraint::Length(12),
            Constraint::Fill(2),
            Constraint::Length(15),
            Constraint::Fill(2),
            Constraint::Fill(3),
        ],
        empty: "No DLQ entry: nothing has been dead-lettered.".into(),
    }
    .draw(model, frame, list, |abs| {
        let d = model.dlq.get_abs(abs)?;
        let (kind, run, err) = d.entry.as_ref().map_or(
            ("undecodable".to_owned(), String::new(), String::new()),
            |e| {
                (
                    e.kind.clone(),
                    e.envelope.flow_run_id.clone(),
                    one_line(&e.err_msg, 200),
                )
            },
        );
        Some(Row::new([
            Cell::from(clock_time(d.at)),
            Cell::from(d.target().to_owned()),
            Cell::from(Span::styled(kind, t.bad())),
            Cell::from(run),
            Cell::from(err),
        ]))
    });
    let lines = model
        .selected_item(ListId::Dlq)
        .and_then(|abs| model.dlq.get_abs(abs))
        .map(|d| detail::dlq_lines(model, d))
        .unwrap_or_default();
    frame.render_widget(
        Paragraph::new(lines)
            .block(Block::bordered().title(" Entry (Enter opens) "))
            .wrap(Wrap { trim: false }),
        preview,
    );
}

fn violations(model: &Model, frame: &mut Frame, area: Rect) {
    let t = model.theme;
    let [list, preview] =
        Layout::vertical([Constraint::Percentage(55), Constraint::Percentage(45)]).areas(area);
    let empty = match model.mode {
        Mode::Passive => {
            "No undecodable message. (The full conformance checker runs in the emulator; passive mode lists messages that do not decode as their locked shape.)"
        }
        _ => "No conformance violation: everything seen follows the wire contract.",
    };
    ListTable {
        list: ListId::Violations,
        title: "Conformance violations".into(),
        header: &["Time", "Severity", "Rule", "Subject", "Message"],
        widths: &[
            Constraint::Length(12),
            Constraint::Length(8),
            Constraint::Fill(2),
            Constraint::Fill(2),
            Constraint::Fill(4),
        ],
        empty: empty.into(),
    }
    .draw(model, frame, list, |abs| {
        let v = model.violations.get_abs(abs)?;
        Some(Row::new([
            Cell::from(clock_time(v.at)),
            Cell::from(Span::styled(v.severity.clone(), t.severity(&v.severity))),
            Cell::from(v.rule.clone()),
            Cell::from(v.subject.clone()),
            Cell::from(one_line(&v.message, 300)),
        ]))
    });
    let lines = model
        .selected_item(ListId::Violations)
        .and_then(|abs| model.violations.get_abs(abs))
        .map(|v| detail::violation_lines(model, v))
        .unwrap_or_default();
    frame.render_widget(
        Paragraph::new(lines)
            .block(Block::bordered().title(" Violation (Enter opens) "))
            .wrap(Wrap { trim: false }),
        preview,
    );
}

fn traffic(model: &Model, frame: &mut Frame, area: Rect) {
    let t = model.theme;
    let empty = match model.mode {
        Mode::Passive => "Nothing seen yet on triggers.v2.>.",
        _ => "No record yet.",
    };
    ListTable {
        list: ListId::Traffic,
        title: if model.hide_heartbeats {
            "Traffic (heartbeats hidden: H shows them)".into()
        } else {
            "Traffic".into()
        },
        header: &["Seq", "Time", "Kind", "Subject", "What"],
        widths: &[
            Constraint::Length(7),
            Constraint::Length(12),
            Constraint::Length(14),
            Constraint::Fill(2),
            Constraint::Fill(3),
        ],
        empty: empty.into(),
    }
    .draw(model, frame, area, |abs| {
        let e = model.events.get_abs(abs)?;
        let style = if crate::model::is_failure(e) {
            t.bad()
        } else {
            ratatui::style::Style::new()
        };
        Some(Row::new([
            Cell::from(e.seq.to_string()),
            Cell::from(clock_time(e.at)),
            Cell::from(Span::styled(e.kind_name(), style)),
            Cell::from(e.subject.clone()),
            Cell::from(one_line(&e.summary(), 300)),
        ]))
    });
}

/// The runs list's title, naming the runs the emulator holds no more (evicted) or never held
/// (events of runs it did not start, not followed beyond its bound).
fn runs_title(model: &Model) -> String {
    let mut notes = Vec::new();
    if model.evicted_runs > 0 {
        notes.push(format!(
            "{} settled runs evicted by the emulator beyond its max_runs",
            model.evicted_runs
        ));
    }
    if model.unfollowed_runs > 0 {
        notes.push(format!(
            "events of {} runs it did not start not followed beyond its max_followed_runs",
            model.unfollowed_runs
        ));
    }
    if notes.is_empty() {
        "Runs".into()
    } else {
        format!("Runs ({})", notes.join("; "))
    }
}
