//! The drill-in views: a run's timeline, and the pages for one service, flow, DLQ entry,
//! violation or record (envelopes and bodies pretty-printed); and the flow graph as text.

use std::collections::BTreeSet;

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Paragraph, Row, Wrap};
use triggers_emulator::recorder::RecordKind;
use triggers_sdk::flow::{Flow, Node, NodeType, timer_delay_ms};

use super::lists::ListTable;
use super::{liveness_text, run_status_text};
use crate::format::{clock_time, duration_ns, one_line, pretty_json, span_ns};
use crate::model::{Covered, Detail, DlqRow, Event, ListId, Model, Page, ViolationRow};
use crate::theme::Theme;

pub(crate) fn draw_timeline(model: &Model, run_id: &str, frame: &mut Frame, area: Rect) {
    let t = model.theme;
    let [head, table] = Layout::vertical([Constraint::Length(4), Constraint::Min(3)]).areas(area);
    let Some(run) = model.run(run_id) else {
        frame.render_widget(
            Paragraph::new(format!(
                "Run {run_id} is no longer kept (older runs drop off)."
            ))
            .block(Block::bordered().title(" Run ")),
            area,
        );
        return;
    };
    let clock = model.clock_now();
    let mut facts = vec![
        Span::styled(run_status_text(run.status), t.run_status(run.status)),
        Span::raw(format!(
            " │ flow {} v{} │ started {} │ took {} │ {} steps",
            run.flow_id,
            run.flow_version,
            clock_time(run.started_at),
            duration_ns(run.duration_ns(clock)),
            run.steps
        )),
    ];
    if run.dlq > 0 {
        facts.push(Span::styled(
            format!(" │ {} in the DLQ (D shows)", run.dlq),
            t.bad(),
        ));
    }
    let failed = if run.failed.is_empty() {
        Line::styled("no node failed", t.dim())
    } else {
        Line::from(vec![
            Span::raw("failed: "),
            Span::styled(run.failed.join(", "), t.bad()),
        ])
    };
    frame.render_widget(
        Paragraph::new(vec![Line::from(facts), failed])
            .block(Block::bordered().title(Span::styled(format!(" Run {} ", run.id), t.bold()))),
        head,
    );
    ListTable {
        list: ListId::Timeline,
        title: "Timeline (Esc back)".into(),
        header: &[
            "#", "Started", "Node", "Type", "Service", "Status", "Took", "Retries", "Error",
        ],
        widths: &[
            Constraint::Length(3),
            Constraint::Length(12),
            Constraint::Fill(2),
            Constraint::Length(10),
            Constraint::Fill(1),
            Constraint::Length(9),
            Constraint::Length(7),
            Constraint::Length(7),
            Constraint::Fill(3),
        ],
        empty: "No step recorded yet.".into(),
    }
    .draw(model, frame, table, |pos| {
        let e = run.timeline.get(pos as usize)?;
        Some(Row::new([
            Cell::from((pos + 1).to_string()),
            Cell::from(clock_time(e.started_at)),
            Cell::from(e.node_id.clone()),
            Cell::from(e.node_type.clone()),
            Cell::from(e.service.clone()),
            Cell::from(Span::styled(e.status.clone(), t.step_status(&e.status))),
            Cell::from(duration_ns(span_ns(e.started_at, e.finished_at))),
            Cell::from(e.retries.to_string()),
            Cell::from(Span::styled(one_line(&e.error, 300), t.bad())),
        ]))
    });
}

pub(crate) fn draw_page(model: &Model, page: &Page, frame: &mut Frame, area: Rect) {
    let t = model.theme;
    let (title, lines) = page_content(model, &page.detail);
    let visible = usize::from(area.height.saturating_sub(2));
    let max = u16::try_from(lines.len().saturating_sub(visible)).unwrap_or(u16::MAX);
    let block = Block::bordered()
        .title(Span::styled(format!(" {title} "), t.bold()))
        .title_bottom(Line::from(" Esc back · j/k scroll ").right_aligned());
    frame.render_widget(
        Paragraph::new(lines)
            .block(block)
            .wrap(Wrap { trim: false })
            .scroll((page.scroll.min(max), 0)),
        area,
    );
}

/// Lines of the open page (for scrolling bounds).
pub(crate) fn page_line_count(model: &Model) -> usize {
    model
        .page
        .as_ref()
        .map_or(0, |p| page_content(model, &p.detail).1.len())
}

fn field(t: Theme, name: &str, value: impl Into<String>) -> Line<'static> {
    Line::from(vec![
        Span::styled(format!("{name:<14}"), t.bold()),
        Span::raw(value.into()),
    ])
}

fn section(t: Theme, name: &str) -> Line<'static> {
    Line::styled(name.to_owned(), t.header())
}

fn json_lines(text: &str) -> impl Iterator<Item = Line<'static>> {
    pretty_json(text)
        .lines()
        .map(|l| Line::raw(format!("  {l}")))
        .collect::<Vec<_>>()
        .into_iter()
}

fn headers_lines(t: Theme, headers: &[(String, String)]) -> Vec<Line<'static>> {
    if headers.is_empty() {
        return vec![Line::styled("  (none)", t.dim())];
    }
    headers
        .iter()
        .map(|(k, v)| Line::raw(format!("  {k}: {v}")))
        .collect()
}

fn page_content(model: &Model, detail: &Detail) -> (String, Vec<Line<'static>>) {
    let t = model.theme;
    match detail {
        Detail::Service(name) => {
            let Some(s) = model.services.get(name) else {
                return (
                    format!("Service {name}"),
                    vec![Line::raw("No longer registered.")],
                );
            };
            let live = s.liveness(model.now, model.heartbeat_interval);
            let mut lines = vec![
                field(t, "version", s.version.clone()),
                field(t, "manifest", s.manifest_hash.clone()),
                field(t, "state", liveness_text(live)),
                field(t, "heartbeat", crate::format::age(model.now, s.last_seen)),
                field(t, "replicas", s.replicas().to_string()),
                field(t, "capabilities", s.capabilities.join(", ")),
                Line::raw(""),
                section(t, "Actions"),
            ];
            lines.extend(s.actions.iter().map(|a| Line::raw(format!("  {a}"))));
            (format!("Service {name}"), lines)
        }
        Detail::Flow(id) => {
            let Some(f) = model.flows.get(id) else {
                return (format!("Flow {id}"), vec![Line::raw("Unknown flow.")]);
            };
            let versions: Vec<String> = f.versions.iter().map(|v| format!("v{v}")).collect();
            let mut lines = vec![
                field(t, "version", format!("v{}", f.version)),
                field(t, "seen", versions.join(" ")),
                Line::raw(""),
                section(t, "Graph"),
            ];
            match &f.flow {
                Some(flow) => {
                    lines.extend(graph_lines(model, flow, "  "));
                    lines.push(Line::raw(""));
                    lines.push(section(t, "Nodes"));
                    for n in &flow.body.nodes {
                        let mut text = format!("  {:<12} {:<10} {}", n.id, n.node_type, n.service);
                        if !n.inbound.is_empty() {
                            text.push_str(&format!("  inbound {}", n.inbound));
                        }
                        if !n.config.is_empty() {
                            let config = serde_json::to_string(&n.config).unwrap_or_default();
                            text.push_str(&format!("  {}", one_line(&config, 200)));
                        }
                        lines.push(Line::raw(text));
                    }
                }
                None => lines.push(Line::raw("  The flow's body has not been seen.")),
            }
            (format!("Flow {id}"), lines)
        }
        Detail::Dlq(abs) => match model.dlq.get_abs(*abs) {
            Some(d) => (format!("DLQ entry on {}", d.subject), dlq_lines(model, d)),
            None => (
                "DLQ entry".into(),
                vec![Line::raw("Dropped off (older entries go).")],
            ),
        },
        Detail::Violation(abs) => match model.violations.get_abs(*abs) {
            Some(v) => (format!("Violation {}", v.rule), violation_lines(model, v)),
            None => (
                "Violation".into(),
                vec![Line::raw("Dropped off (older ones go).")],
            ),
        },
        Detail::Event(seq) => match model.event_by_seq(*seq) {
            Some(e) => (
                format!("Record {} ({})", e.seq, e.kind_name()),
                event_lines(model, e),
            ),
            None => (
                format!("Record {seq}"),
                vec![Line::raw(
                    "Dropped off the traffic ring (older records go).",
                )],
            ),
        },
    }
}

pub(crate) fn dlq_lines(model: &Model, d: &DlqRow) -> Vec<Line<'static>> {
    let t = model.theme;
    let mut lines = vec![
        field(t, "subject", d.subject.clone()),
        field(t, "Nats-Msg-Id", d.msg_id.clone()),
        field(
            t,
            "recorded",
            format!("{} (record {})", clock_time(d.at), d.seq),
        ),
    ];
    match &d.entry {
        Some(e) => {
            lines.push(Line::from(vec![
                Span::styled(format!("{:<14}", "kind"), t.bold()),
                Span::styled(e.kind.clone(), t.bad()),
            ]));
            lines.push(field(t, "error", e.err_msg.clone()));
            lines.push(field(t, "occurred at", e.occurred_at.to_string()));
            lines.push(section(t, "Envelope"));
            let envelope = serde_json::to_string(&e.envelope).unwrap_or_default();
            lines.extend(json_lines(&envelope));
            lines.push(section(t, "Body"));
            lines.extend(json_lines(e.body.get()));
        }
        None => {
            lines.push(Line::styled(
                "The entry does not decode as a DLQ entry:",
                t.bad(),
            ));
            lines.extend(json_lines(&d.payload));
        }
    }
    lines
}

pub(crate) fn violation_lines(model: &Model, v: &ViolationRow) -> Vec<Line<'static>> {
    let t = model.theme;
    let mut lines = vec![
        Line::from(vec![
            Span::styled(format!("{:<14}", "severity"), t.bold()),
            Span::styled(v.severity.clone(), t.severity(&v.severity)),
        ]),
        field(t, "rule", v.rule.clone()),
        field(t, "subject", v.subject.clone()),
        field(
            t,
            "recorded",
            format!("{} (record {})", clock_time(v.at), v.seq),
        ),
        field(t, "message", v.message.clone()),
        section(t, "Headers"),
    ];
    lines.extend(headers_lines(t, &v.headers));
    lines.push(section(t, "Payload"));
    lines.extend(json_lines(&v.payload));
    lines
}

fn event_lines(model: &Model, e: &Event) -> Vec<Line<'static>> {
    let t = model.theme;
    let mut lines = vec![
        field(t, "kind", e.kind_name()),
        field(t, "at", e.at.to_string()),
        field(t, "subject", e.subject.clone()),
        field(t, "what", e.summary()),
    ];
    if let Some(RecordKind::Completion { event }) = &e.kind
        && !event.trace_id.is_empty()
    {
        lines.push(field(t, "trace", event.trace_id.clone()));
    }
    lines.push(section(t, "Headers"));
    lines.extend(headers_lines(t, &e.headers));
    lines.push(section(t, "Payload"));
    if e.payload.is_empty() {
        lines.push(Line::styled("  (empty)", t.dim()));
    } else {
        lines.extend(json_lines(&e.payload));
    }
    lines
}

fn node_label(n: &Node) -> String {
    match n.node_type {
        NodeType::Action => format!("{} [action {}.{}]", n.id, n.service, n.action),
        NodeType::Timer => match timer_delay_ms(n) {
            Some(ms) => format!(
                "{} [timer {}]",
                n.id,
                duration_ns(i128::from(ms) * 1_000_000)
            ),
            None => format!("{} [timer]", n.id),
        },
        t if n.service.is_empty() => format!("{} [{t}]", n.id),
        t => format!("{} [{t} {}]", n.id, n.service),
    }
}

/// What marks a node no run reached in this session, in the graph and its legend.
pub(crate) const NOT_RUN: &str = "○";
/// The arrow of an edge no run took in this session (a taken one is `─▶`).
pub(crate) const NOT_TAKEN: &str = "╌▷";

/// The flow as a tree of text from its entry points: each edge `└─▶`, a node reached again
/// marked `↺`, nodes no entry reaches listed as roots of their own. With `ran` (what some run
/// reached), the nodes not run are marked [`NOT_RUN`] and the edges not taken drawn
/// [`NOT_TAKEN`]; each line says whether it shows either.
pub(crate) fn flow_graph(flow: &Flow, ran: Option<&Covered>) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    let entries: Vec<&Node> = flow.entry_points().collect();
    let roots = entries.into_iter().chain(flow.body.nodes.iter());
    for root in roots {
        if seen.contains(root.id.as_str()) {
            continue;
        }
        walk(flow, root, "", None, ran, &mut seen, &mut out);
    }
    if out.is_empty() {
        out.push(("(no nodes)".into(), false));
    }
    out
}

/// The flow graph of `flow` as the views show it: nodes no run of this version reached in this
/// session, and edges none took, dimmed and marked, with a legend when there are any.
pub(crate) fn graph_lines(model: &Model, flow: &Flow, indent: &str) -> Vec<Line<'static>> {
    let t = model.theme;
    let ran = model.ran.get(&(flow.id.clone(), flow.version));
    let empty = Covered::default();
    let lines = flow_graph(flow, Some(ran.unwrap_or(&empty)));
    let any_not_run = lines.iter().any(|(_, not_run)| *not_run);
    let mut out: Vec<Line<'static>> = lines
        .into_iter()
        .map(|(text, not_run)| {
            let text = format!("{indent}{text}");
            if not_run {
                Line::styled(text, t.dim())
            } else {
                Line::raw(text)
            }
        })
        .collect();
    if any_not_run {
        out.push(Line::styled(
            format!(
                "{indent}{NOT_RUN} not run yet, {NOT_TAKEN} not taken yet (by no run of v{} this session)",
                flow.version
            ),
            t.dim(),
        ));
    }
    out
}

fn walk<'a>(
    flow: &'a Flow,
    node: &'a Node,
    prefix: &str,
    branch: Option<Branch>,
    ran: Option<&Covered>,
    seen: &mut BTreeSet<&'a str>,
    out: &mut Vec<(String, bool)>,
) {
    let arrow = |b: &Branch| if b.taken { "─▶" } else { NOT_TAKEN };
    let (lead, child_prefix) = match &branch {
        None => (String::new(), String::new()),
        Some(b) => (
            format!("{prefix}{}{} ", if b.last { "└" } else { "├" }, arrow(b)),
            format!("{prefix}{}", if b.last { "    " } else { "│   " }),
        ),
    };
    let mapping = if branch.as_ref().is_some_and(|b| b.mapped) {
        " (mapped)"
    } else {
        ""
    };
    let not_run = ran.is_some_and(|r| !r.nodes.contains(&node.id));
    let dim = not_run || branch.as_ref().is_some_and(|b| !b.taken);
    if !seen.insert(node.id.as_str()) {
        out.push((format!("{lead}↺ {}{mapping}", node.id), dim));
        return;
    }
    let mark = if not_run {
        format!("{NOT_RUN} ")
    } else {
        String::new()
    };
    out.push((format!("{lead}{mark}{}{mapping}", node_label(node)), dim));
    if out.len() > 500 {
        return; // a flow this large is read on its page, not drawn
    }
    let children: Vec<_> = flow.successors(&node.id).collect();
    let n = children.len();
    for (i, (edge, next)) in children.into_iter().enumerate() {
        let branch = Branch {
            last: i + 1 == n,
            mapped: edge.mapping.is_some(),
            taken: ran.is_none_or(|r| r.edges.contains(&edge.id)),
        };
        walk(flow, next, &child_prefix, Some(branch), ran, seen, out);
    }
}

/// The edge a line of the graph is reached by.
struct Branch {
    /// The last of its node's successors.
    last: bool,
    /// The edge carries a mapping.
    mapped: bool,
    /// Some run took it (always, without coverage).
    taken: bool,
}
