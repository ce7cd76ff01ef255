//! Every view drawn on a `TestBackend`, empty and full, at 80x24 and 140x40, against the
//! snapshots in `src/snapshots/` (`INSTA_UPDATE=always` to accept changes, then review them).

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use crate::fixtures::{self, at_ms};
use crate::model::{Mode, Model};
use crate::msg::Msg;
use crate::theme::Theme;
use crate::update::update;
use crate::view::view;
use triggers_emulator::control::RunSummary;
use triggers_emulator::recorder::RunStatus;

const SIZES: [(u16, u16); 2] = [(80, 24), (140, 40)];

fn render(model: &Model, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("test backend");
    terminal.draw(|f| view(model, f)).expect("draw");
    terminal.backend().to_string()
}

/// Presses keys: characters as typed, `\n` Enter, `\x1b` Esc.
fn keys(model: &mut Model, typed: &str) {
    for c in typed.chars() {
        let code = match c {
            '\n' => KeyCode::Enter,
            '\x1b' => KeyCode::Esc,
            c => KeyCode::Char(c),
        };
        update(model, Msg::Key(KeyEvent::new(code, KeyModifiers::NONE)));
    }
}

fn snapshot(name: &str, model: &Model) {
    for (w, h) in SIZES {
        insta::assert_snapshot!(format!("{name}_{w}x{h}"), render(model, w, h));
    }
}

fn full() -> Model {
    fixtures::control_model(Theme::colored())
}

fn empty() -> Model {
    fixtures::empty_model(Mode::Control, Theme::colored())
}

#[test]
fn services() {
    snapshot("services_empty", &empty());
    snapshot("services_full", &full());
}

#[test]
fn flows() {
    for (name, mut model) in [("flows_empty", empty()), ("flows_full", full())] {
        keys(&mut model, "2");
        snapshot(name, &model);
    }
}

#[test]
fn runs() {
    for (name, mut model) in [("runs_empty", empty()), ("runs_full", full())] {
        keys(&mut model, "3");
        snapshot(name, &model);
    }
}

#[test]
fn timeline() {
    // A run the summary knows and no step of which was recorded.
    let mut model = empty();
    let mut summary = fixtures::summary();
    summary.runs = vec![RunSummary {
        id: "run-0009".into(),
        flow_id: "order".into(),
        status: RunStatus::Running,
        started_at: at_ms(15_000),
        settled_at: None,
        failed: vec![],
        steps: 0,
    }];
    update(&mut model, Msg::Summary(summary));
    keys(&mut model, "3\n");
    snapshot("timeline_empty", &model);

    let mut model = full();
    keys(&mut model, "3gj\n"); // the second run: failed after two retries
    snapshot("timeline_full", &model);
}

#[test]
fn dlq() {
    for (name, mut model) in [("dlq_empty", empty()), ("dlq_full", full())] {
        keys(&mut model, "4");
        snapshot(name, &model);
    }
    let mut model = full();
    keys(&mut model, "4\n");
    snapshot("dlq_page", &model);
}

#[test]
fn violations() {
    for (name, mut model) in [("violations_empty", empty()), ("violations_full", full())] {
        keys(&mut model, "5");
        snapshot(name, &model);
    }
}

#[test]
fn traffic() {
    for (name, mut model) in [("traffic_empty", empty()), ("traffic_full", full())] {
        keys(&mut model, "6");
        snapshot(name, &model);
    }
    let mut model = full();
    keys(&mut model, "6/completion\n");
    snapshot("traffic_filtered", &model);
}

#[test]
fn pages() {
    let mut model = full();
    keys(&mut model, "2\n");
    snapshot("flow_page", &model);
    let mut model = full();
    keys(&mut model, "\n");
    snapshot("service_page", &model);
}

/// Nodes no run reached in this session are dimmed and marked `○`, edges none took drawn `╌▷`,
/// with a legend: `refund`'s output and the edge to it (its one run is still retrying the
/// action); none of `order` v3 (its runs reached each node and took each edge, the timer's
/// resume included).
#[test]
fn nodes_not_run_yet() {
    let model = full();
    let order = &model.ran[&("order".to_owned(), 3)];
    assert_eq!(order.nodes.len(), 6, "{order:?}");
    let flow = model.flows["order"].flow.as_ref().unwrap();
    assert_eq!(order.edges.len(), flow.body.edges.len(), "{order:?}");
    let refund = &model.ran[&("refund".to_owned(), 1)];
    let ran: Vec<_> = refund.nodes.iter().collect();
    assert_eq!(ran, ["refund", "rin"]);
    let flow = model.flows["refund"].flow.as_ref().unwrap();
    let taken: Vec<_> = flow
        .body
        .edges
        .iter()
        .filter(|e| refund.edges.contains(&e.id))
        .map(|e| (e.from.as_str(), e.to.as_str()))
        .collect();
    assert_eq!(taken, [("rin", "refund")]);
    let mut model = full();
    keys(&mut model, "2j");
    snapshot("flows_not_run", &model);
    keys(&mut model, "\n");
    snapshot("flow_page_not_run", &model);
}

#[test]
fn overlays() {
    let mut model = full();
    keys(&mut model, "?");
    snapshot("help", &model);
    let mut model = full();
    keys(&mut model, "t");
    snapshot("trigger_pick_flow", &model);
    keys(&mut model, "\n");
    snapshot("trigger_payload", &model);
    let mut model = full();
    keys(&mut model, "a5x\n");
    snapshot("advance_error", &model);
}

#[test]
fn passive() {
    let empty = fixtures::empty_model(Mode::Passive, Theme::colored());
    snapshot("passive_services_empty", &empty);
    let mut model = fixtures::passive_model(Theme::colored());
    snapshot("passive_services_full", &model);
    keys(&mut model, "3");
    snapshot("passive_runs_full", &model);
    keys(&mut model, "5");
    snapshot("passive_violations_full", &model);
}

#[test]
fn connection_lost_and_dropped_records() {
    let mut model = fixtures::large_model(2_000, 1_500, Theme::colored());
    update(&mut model, Msg::Disconnected("disconnected".into()));
    keys(&mut model, "6");
    snapshot("traffic_lost_connection", &model);
}

#[test]
fn dropped_messages_are_a_warning_in_the_status_bar() {
    let mut model = full();
    let status = |model: &Model, width| {
        render(model, width, 24)
            .lines()
            .nth(22)
            .unwrap_or_default()
            .to_owned()
    };
    assert!(
        !status(&model, 140).contains("dropped"),
        "{}",
        status(&model, 140)
    );
    let mut summary = fixtures::summary();
    summary.dropped_messages = 5;
    update(&mut model, Msg::Summary(summary));
    assert!(
        status(&model, 140).contains("⚠ NATS dropped messages (slow consumer): 5 to the emulator;"),
        "{}",
        render(&model, 140, 24)
    );
    update(&mut model, Msg::Dropped(3));
    let line = status(&model, 140);
    assert!(
        line.contains("⚠ NATS dropped messages (slow consumer): 5 to the emulator, 3 to this view; what shows is incomplete"),
        "{line}"
    );
    // At 80 columns the warning still shows: it comes right after the connection.
    assert!(
        status(&model, 80).contains("⚠ NATS dropped messages"),
        "{}",
        status(&model, 80)
    );
    assert_eq!(model.dropped_messages(), (5, 3));
}

#[test]
fn the_emulators_lost_connections_are_a_warning_in_the_status_bar() {
    let mut model = full();
    let status = |model: &Model| {
        render(model, 160, 24)
            .lines()
            .nth(22)
            .unwrap_or_default()
            .to_owned()
    };
    assert!(!status(&model).contains("lost its NATS connection"));
    let mut summary = fixtures::summary();
    summary.connection_losses = 2;
    update(&mut model, Msg::Summary(summary));
    let line = status(&model);
    assert!(
        line.contains("⚠ the emulator lost its NATS connection 2 time(s)"),
        "{line}"
    );
}

#[test]
fn evicted_runs_are_named_over_the_runs_list() {
    let mut model = full();
    keys(&mut model, "3");
    assert!(!render(&model, 140, 24).contains("evicted"));
    let mut summary = fixtures::summary();
    summary.evicted_runs = 12;
    update(&mut model, Msg::Summary(summary));
    let screen = render(&model, 140, 24);
    assert!(
        screen.contains("Runs (12 settled runs evicted by the emulator beyond its max_runs)"),
        "{screen}"
    );
    let mut summary = fixtures::summary();
    summary.unfollowed_runs = 5;
    update(&mut model, Msg::Summary(summary));
    let screen = render(&model, 160, 24);
    assert!(
        screen.contains("events of 5 runs it did not start not followed"),
        "{screen}"
    );
}

#[test]
fn no_color_draws_no_colour() {
    let model = fixtures::control_model(Theme::monochrome());
    let mut terminal = Terminal::new(TestBackend::new(140, 40)).expect("test backend");
    for tab in "123456".chars() {
        let mut model = fixtures::control_model(Theme::monochrome());
        keys(&mut model, &tab.to_string());
        terminal.draw(|f| view(&model, f)).expect("draw");
        let buffer = terminal.backend().buffer();
        for cell in buffer.content() {
            assert_eq!(cell.fg, ratatui::style::Color::Reset, "tab {tab}: {cell:?}");
            assert_eq!(cell.bg, ratatui::style::Color::Reset, "tab {tab}: {cell:?}");
        }
    }
    drop(model);
}

#[test]
fn tiny_and_odd_sizes_do_not_panic() {
    let mut model = full();
    for typed in ["", "2", "3", "3\n", "4", "4\n", "5", "6", "?", "\x1b\x1bt"] {
        keys(&mut model, typed);
        for (w, h) in [(1, 1), (10, 3), (20, 5), (300, 2), (2, 100)] {
            render(&model, w, h);
        }
    }
}

/// With `f` on, a run's timeline says how many of its steps it shows (it hid them silently).
#[test]
fn a_filtered_timeline_says_how_many_steps_it_shows() {
    let mut model = full();
    keys(&mut model, "3gj\n");
    let all = model.row_count(crate::model::ListId::Timeline);
    keys(&mut model, "f");
    let shown = model.row_count(crate::model::ListId::Timeline);
    assert!(shown < all);
    let screen = render(&model, 140, 40);
    assert!(
        screen.contains(&format!("Timeline (Esc back) · {shown} of {all} shown")),
        "{screen}"
    );
}
