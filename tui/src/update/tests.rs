//! `update` without a terminal: sequences of messages and the model they leave.

use std::time::Duration;

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers, MouseEvent, MouseEventKind};
use serde_json::json;
use triggers_emulator::recorder::{Record, RecordKind, Run, RunStatus, TimelineEntry};

use super::update;
use crate::fixtures::{self, at_ms};
use crate::model::{Connection, Detail, ListId, Mode, Model, Prompt, Tab};
use crate::msg::{Cmd, Msg, Observed};
use crate::theme::Theme;

fn key(model: &mut Model, code: KeyCode) -> Option<Cmd> {
    update(model, Msg::Key(KeyEvent::new(code, KeyModifiers::NONE)))
}

/// Types `text`: `\n` is Enter, `\x1b` Esc; returns the last command asked for.
fn typed(model: &mut Model, text: &str) -> Option<Cmd> {
    let mut last = None;
    for c in text.chars() {
        let code = match c {
            '\n' => KeyCode::Enter,
            '\x1b' => KeyCode::Esc,
            c => KeyCode::Char(c),
        };
        if let Some(cmd) = key(model, code) {
            last = Some(cmd);
        }
    }
    last
}

fn control() -> Model {
    fixtures::control_model(Theme::monochrome())
}

fn record(seq: u64, kind: RecordKind) -> Record {
    Record {
        seq,
        at: at_ms(seq as i64),
        clock: at_ms(seq as i64),
        subject: "triggers.v2.heartbeat".into(),
        headers: Vec::new().into(),
        payload: Default::default(),
        kind,
    }
}

fn clock_advanced(seq: u64) -> Record {
    record(
        seq,
        RecordKind::ClockAdvanced {
            from: None,
            to: at_ms(seq as i64),
        },
    )
}

fn selected_run(model: &Model) -> String {
    let abs = model
        .selected_item(ListId::Runs)
        .expect("a run is selected");
    model.runs.get_abs(abs).expect("kept").id.clone()
}

#[test]
fn tabs_switch_with_keys_and_wrap_around() {
    let mut m = control();
    assert_eq!(m.tab(), Tab::Services);
    typed(&mut m, "l");
    assert_eq!(m.tab(), Tab::Flows);
    key(&mut m, KeyCode::BackTab);
    key(&mut m, KeyCode::BackTab);
    assert_eq!(m.tab(), Tab::Traffic);
    key(&mut m, KeyCode::Tab);
    assert_eq!(m.tab(), Tab::Services);
    typed(&mut m, "4");
    assert_eq!(m.tab(), Tab::Dlq);
    key(&mut m, KeyCode::Left);
    assert_eq!(m.tab(), Tab::Runs);
}

#[test]
fn the_filter_narrows_the_current_list_as_you_type() {
    let mut m = control();
    typed(&mut m, "3");
    assert_eq!(m.row_count(ListId::Runs), 4);
    typed(&mut m, "/0002");
    assert!(matches!(m.prompt, Some(Prompt::Filter { .. })));
    assert_eq!(m.row_count(ListId::Runs), 1);
    typed(&mut m, "\n");
    assert_eq!(m.prompt, None);
    assert_eq!(m.list(ListId::Runs).filter, "0002");
    assert_eq!(selected_run(&m), "run-0002");
    // Each list keeps its own filter (Traffic's hides only the heartbeats).
    let heartbeats = m
        .events
        .iter()
        .filter(|e| matches!(e.kind, Some(RecordKind::Heartbeat { .. })))
        .count();
    assert_eq!(m.row_count(ListId::Traffic), m.events.len() - heartbeats);
    // Filters match any column, ignoring case.
    typed(&mut m, "/");
    key(&mut m, KeyCode::Backspace);
    key(&mut m, KeyCode::Backspace);
    key(&mut m, KeyCode::Backspace);
    key(&mut m, KeyCode::Backspace);
    typed(&mut m, "REFUND\n");
    assert_eq!(selected_run(&m), "run-0004");
    // Esc on the list clears it.
    typed(&mut m, "\x1b");
    assert_eq!(m.list(ListId::Runs).filter, "");
    assert_eq!(m.row_count(ListId::Runs), 4);
    // Esc in the prompt clears it too.
    typed(&mut m, "/zzz");
    assert_eq!(m.row_count(ListId::Runs), 0);
    typed(&mut m, "\x1b");
    assert_eq!(m.row_count(ListId::Runs), 4);
}

#[test]
fn a_filter_keeps_up_with_new_records() {
    let mut m = control();
    typed(&mut m, "6/clock_advanced\n");
    assert_eq!(m.row_count(ListId::Traffic), 1);
    update(
        &mut m,
        Msg::Records(vec![clock_advanced(100), clock_advanced(101)]),
    );
    assert_eq!(m.row_count(ListId::Traffic), 3);
}

#[test]
fn failures_only_shows_failures_in_every_list() {
    let mut m = control();
    typed(&mut m, "3f");
    assert!(m.failures_only);
    assert_eq!(m.row_count(ListId::Runs), 1);
    assert_eq!(selected_run(&m), "run-0002");
    // Traffic: three retries, the failure, the DLQ entry, the two violations.
    assert_eq!(m.row_count(ListId::Traffic), 7);
    assert_eq!(m.row_count(ListId::Services), 1, "mail is late");
    assert_eq!(m.row_count(ListId::Flows), 1, "order has a failed run");
    typed(&mut m, "f");
    assert_eq!(m.row_count(ListId::Runs), 4);
    // All but the heartbeats, hidden until `H`.
    let heartbeats = m
        .events
        .iter()
        .filter(|e| matches!(e.kind, Some(RecordKind::Heartbeat { .. })))
        .count();
    assert_eq!(m.row_count(ListId::Traffic), m.events.len() - heartbeats);
}

#[test]
fn follow_mode_sticks_to_the_newest_row_until_moved_away() {
    let mut m = control();
    typed(&mut m, "6");
    assert!(m.follow());
    let last = m.row_count(ListId::Traffic) - 1;
    assert_eq!(m.list(ListId::Traffic).selected, last);
    update(&mut m, Msg::Records(vec![clock_advanced(100)]));
    assert_eq!(m.list(ListId::Traffic).selected, last + 1);
    // Moving up pauses it; new records do not move the selection.
    typed(&mut m, "k");
    assert!(!m.follow());
    assert_eq!(m.list(ListId::Traffic).selected, last);
    update(&mut m, Msg::Records(vec![clock_advanced(101)]));
    assert_eq!(m.list(ListId::Traffic).selected, last);
    // G jumps to the newest and follows again; F toggles.
    typed(&mut m, "G");
    assert!(m.follow());
    assert_eq!(m.list(ListId::Traffic).selected, last + 2);
    typed(&mut m, "Fg");
    assert!(!m.follow());
    assert_eq!(m.list(ListId::Traffic).selected, 0);
    typed(&mut m, "F");
    assert_eq!(m.list(ListId::Traffic).selected, last + 2);
}

#[test]
fn the_mouse_wheel_scrolls() {
    let mut m = control();
    typed(&mut m, "6");
    let last = m.list(ListId::Traffic).selected;
    let wheel = |kind| {
        Msg::Mouse(MouseEvent {
            kind,
            column: 0,
            row: 0,
            modifiers: KeyModifiers::NONE,
        })
    };
    update(&mut m, wheel(MouseEventKind::ScrollUp));
    assert_eq!(m.list(ListId::Traffic).selected, last - 3);
    assert!(!m.follow());
    update(&mut m, wheel(MouseEventKind::ScrollDown));
    update(&mut m, wheel(MouseEventKind::ScrollDown));
    assert_eq!(m.list(ListId::Traffic).selected, last);
}

#[test]
fn enter_drills_in_and_esc_comes_back() {
    let mut m = control();
    let cmd = typed(&mut m, "3gj\n");
    assert_eq!(cmd, Some(Cmd::LoadRun("run-0002".into())));
    assert_eq!(m.open_run.as_deref(), Some("run-0002"));
    assert_eq!(m.current_list(), ListId::Timeline);
    assert_eq!(m.row_count(ListId::Timeline), 4);
    // The run's full account replaces what the records showed.
    let mut run: Run = serde_json::from_value(json!({
        "id": "run-0002", "flow_id": "order", "flow_version": 3, "trace_id": "",
        "status": "failed", "started_at": "2026-05-26T14:30:03.95Z",
        "pending": {}, "completed": ["in"], "failed": ["pay"], "timers": [],
        "timeline": [], "dlq": [19]}))
    .expect("a run");
    run.timeline.push(TimelineEntry {
        seq: 16,
        node_id: "pay".into(),
        node_type: "action".into(),
        service: "shop".into(),
        status: "failed".into(),
        started_at: at_ms(4_000),
        finished_at: at_ms(4_100),
        error: "card declined".into(),
        retries: 2,
    });
    update(&mut m, Msg::RunLoaded(Box::new(run)));
    assert_eq!(m.row_count(ListId::Timeline), 1);
    // Enter on a step opens its record; Esc goes back to the timeline, then to the runs.
    typed(&mut m, "\n");
    assert_eq!(
        m.page.as_ref().map(|p| p.detail.clone()),
        Some(Detail::Event(16))
    );
    // A page scrolls, no further than its last screenful.
    update(&mut m, Msg::Resize(80, 12));
    typed(&mut m, "jjj");
    let lines = crate::view::page_line_count(&m);
    assert!(lines > 9, "{lines}");
    assert_eq!(
        m.page.as_ref().map(|p| p.scroll),
        Some(3.min(lines as u16 - 6))
    );
    typed(&mut m, "G");
    assert_eq!(m.page.as_ref().map(|p| p.scroll), Some(lines as u16 - 6));
    typed(&mut m, "\x1b");
    assert!(m.page.is_none());
    assert_eq!(m.open_run.as_deref(), Some("run-0002"));
    typed(&mut m, "h");
    assert_eq!(m.open_run, None);
    assert_eq!(m.tab(), Tab::Runs);
    // Other lists open pages.
    typed(&mut m, "4\n");
    assert!(matches!(
        m.page.as_ref().map(|p| &p.detail),
        Some(Detail::Dlq(_))
    ));
    typed(&mut m, "2");
    assert!(m.page.is_none(), "switching tabs closes the page");
    typed(&mut m, "\n");
    assert_eq!(
        m.page.as_ref().map(|p| p.detail.clone()),
        Some(Detail::Flow("order".into()))
    );
}

#[test]
fn the_passive_observer_cannot_drive() {
    let mut m = fixtures::passive_model(Theme::monochrome());
    assert_eq!(m.mode(), Mode::Passive);
    assert_eq!(typed(&mut m, "3\n"), None, "no run to fetch");
    assert!(m.open_run.is_some());
    typed(&mut m, "\x1bt");
    assert_eq!(m.prompt, None);
    assert!(
        m.notice
            .as_ref()
            .is_some_and(|n| n.text.contains("read-only"))
    );
    typed(&mut m, "a");
    assert_eq!(m.prompt, None);
}

#[test]
fn the_passive_observer_builds_services_flows_and_runs() {
    let m = fixtures::passive_model(Theme::monochrome());
    assert_eq!(m.services.len(), 3);
    assert_eq!(m.services["shop"].version, "1.4.2");
    assert_eq!(m.services["shop"].capabilities, ["durable_timer.v1"]);
    assert!(m.services["billing"].shutting_down);
    assert!(m.flows["order"].flow.is_some());
    let status = |id: &str| m.run(id).map(|r| r.status);
    assert_eq!(status("run-0001"), Some(RunStatus::Succeeded));
    assert_eq!(status("run-0002"), Some(RunStatus::Failed));
    assert_eq!(status("run-0003"), Some(RunStatus::Waiting));
    assert_eq!(status("run-0004"), Some(RunStatus::Running));
    assert_eq!(m.run("run-0002").map(|r| r.dlq), Some(1));
    assert_eq!(m.dlq.len(), 1);
    // The heartbeat that does not decode is listed, not fatal.
    assert_eq!(m.violations.len(), 1);
}

#[test]
fn trigger_picks_a_flow_and_a_payload() {
    let mut m = control();
    typed(&mut m, "t");
    assert_eq!(m.prompt, Some(Prompt::PickFlow { selected: 0 }));
    typed(&mut m, "jj\n"); // stops at the last flow
    assert!(
        matches!(&m.prompt, Some(Prompt::Payload { flow_id, input, .. }) if flow_id == "refund" && input == "{}")
    );
    key(&mut m, KeyCode::Backspace);
    assert_eq!(typed(&mut m, "\"id\": }\n"), None);
    assert!(
        matches!(&m.prompt, Some(Prompt::Payload { error: Some(e), .. }) if e.starts_with("not JSON"))
    );
    for _ in 0..2 {
        key(&mut m, KeyCode::Backspace);
    }
    let cmd = typed(&mut m, "7}\n");
    assert_eq!(
        cmd,
        Some(Cmd::Trigger {
            flow_id: "refund".into(),
            payload: json!({"id": 7})
        })
    );
    assert_eq!(m.prompt, None);
    update(
        &mut m,
        Msg::Done {
            text: "triggered refund: run r9".into(),
            error: false,
        },
    );
    assert!(m.notice.as_ref().is_some_and(|n| !n.error));
    // Esc cancels.
    typed(&mut m, "t\x1b");
    assert_eq!(m.prompt, None);
}

#[test]
fn advance_takes_a_duration() {
    let mut m = control();
    assert_eq!(typed(&mut m, "a5x\n"), None);
    assert!(matches!(
        &m.prompt,
        Some(Prompt::Advance { error: Some(_), .. })
    ));
    key(&mut m, KeyCode::Backspace);
    key(&mut m, KeyCode::Backspace);
    assert_eq!(
        typed(&mut m, "1h30m\n"),
        Some(Cmd::Advance(Duration::from_secs(5400)))
    );
    assert_eq!(m.prompt, None);
}

#[test]
fn quit_and_help() {
    let mut m = control();
    typed(&mut m, "?");
    assert!(m.help);
    assert_eq!(typed(&mut m, "q"), None, "q closes the help first");
    assert!(!m.help);
    assert_eq!(typed(&mut m, "q"), Some(Cmd::Quit));
    assert!(m.should_quit());
    let mut m = control();
    typed(&mut m, "/ab");
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    assert_eq!(
        update(&mut m, Msg::Key(ctrl_c)),
        Some(Cmd::Quit),
        "even in a prompt"
    );
    let mut m = control();
    assert_eq!(update(&mut m, Msg::Quit), Some(Cmd::Quit));
}

#[test]
fn the_ring_drops_the_oldest_and_counts_them() {
    let mut m = fixtures::large_model(0, 10, Theme::monochrome());
    typed(&mut m, "6");
    update(&mut m, Msg::Records((1..=25).map(clock_advanced).collect()));
    assert_eq!(m.events(), (10, 15));
    assert_eq!(m.list(ListId::Traffic).selected, 9);
    // Not following: the selection stays on its record while older ones drop off.
    typed(&mut m, "kk");
    let seq = |m: &Model| {
        m.events
            .get_abs(m.selected_item(ListId::Traffic).unwrap())
            .unwrap()
            .seq
    };
    assert_eq!(seq(&m), 23);
    update(
        &mut m,
        Msg::Records((26..=28).map(clock_advanced).collect()),
    );
    assert_eq!(seq(&m), 23);
    assert_eq!(m.events(), (10, 18));
    // A filtered list drops its rows too.
    typed(&mut m, "/clock\n");
    update(
        &mut m,
        Msg::Records((29..=40).map(clock_advanced).collect()),
    );
    assert_eq!(m.row_count(ListId::Traffic), 10);
    // Repeated records (backfill overlapping the live stream) are applied once.
    update(
        &mut m,
        Msg::Records((35..=40).map(clock_advanced).collect()),
    );
    assert_eq!(m.events(), (10, 30));
}

#[test]
fn a_lost_connection_is_shown_and_recovered() {
    let mut m = control();
    assert_eq!(m.connection(), &Connection::Connected);
    update(&mut m, Msg::Disconnected("disconnected".into()));
    assert_eq!(
        m.connection(),
        &Connection::Lost {
            reason: "disconnected".into()
        }
    );
    assert!(!m.should_quit());
    update(&mut m, Msg::Connected);
    assert_eq!(m.connection(), &Connection::Connected);
    assert!(
        m.notice
            .as_ref()
            .is_some_and(|n| n.text == "connection restored")
    );
    update(
        &mut m,
        Msg::SourceError("control API: no answer within 3 s".into()),
    );
    assert!(m.notice.as_ref().is_some_and(|n| n.error));
}

#[test]
fn liveness_follows_the_clock() {
    let mut m = control();
    let shop = |m: &Model| m.services["shop"].liveness(m.now, m.heartbeat_interval);
    use triggers_emulator::recorder::Liveness;
    assert_eq!(shop(&m), Liveness::Live);
    update(&mut m, Msg::Tick(at_ms(30_000)));
    assert_eq!(shop(&m), Liveness::Late);
    update(&mut m, Msg::Tick(at_ms(40_000)));
    assert_eq!(shop(&m), Liveness::Down);
}

#[test]
fn odd_data_never_panics() {
    let mut m = fixtures::empty_model(Mode::Passive, Theme::monochrome());
    let odd: Vec<Observed> = [
        ("triggers.v2.heartbeat", &b"\xff\xfe"[..]),
        ("triggers.v2.heartbeat", b"[]"),
        ("triggers.v2.flow.events.x", b"{\"flow_run_id\": \"\", \"status\": \"failed\"}"),
        ("triggers.v2.flow.events.x", b"{\"flow_run_id\": \"r\", \"node_id\": \"n\", \"status\": \"weird\", \"started_at\": \"0001-01-01T00:00:00Z\", \"finished_at\": \"0001-01-01T00:00:00Z\", \"flow_id\": \"x\", \"flow_version\": 1, \"node_type\": \"?\", \"service\": \"\"}"),
        ("triggers.v2.flow.broadcast.all", b"{\"id\": \"f\", \"version\": 1, \"body\": {\"nodes\": 5}}"),
        ("triggers.v2.flow.broadcast.all", b"{\"id\": \"g\", \"version\": 1, \"body\": {\"nodes\": [{\"id\": \"a\", \"type\": \"action\"}], \"edges\": [{\"id\": \"e\", \"from\": \"a\", \"to\": \"a\"}]}}"),
        ("triggers.v2.dlq.svc.act", b"null"),
        ("triggers.v2.manifest.register", b"{}"),
        ("triggers.v2.manifest.fetch", b""),
        ("triggers.v2.nonsense.a.b.c", b"\x00"),
        ("", b""),
    ]
    .into_iter()
    .map(|(subject, payload)| Observed {
        at: at_ms(0),
        subject: subject.into(),
        headers: vec![("nats-msg-id".into(), "\u{0}".into())],
        payload: payload.to_vec(),
    })
    .collect();
    update(&mut m, Msg::Observed(odd));
    assert_eq!(m.events().0, 11);
    // Records out of order, without runs, at seq 0.
    update(
        &mut m,
        Msg::Records(vec![
            record(
                0,
                RecordKind::TimerFired {
                    run_id: "nope".into(),
                    node_id: "t".into(),
                    occurrence: 9,
                    resume_node_id: String::new(),
                },
            ),
            record(
                7,
                RecordKind::TimerArmed {
                    run_id: "nope".into(),
                    node_id: "t".into(),
                    due: at_ms(0),
                    occurrence: 1,
                    fence: 1,
                },
            ),
            record(
                3,
                RecordKind::Trigger {
                    run_id: String::new(),
                    flow_id: "missing".into(),
                    entry: String::new(),
                },
            ),
        ]),
    );
    // Every view, every key, on all of it.
    for tab in "123456".chars() {
        typed(&mut m, &tab.to_string());
        typed(&mut m, "gjjG\nkk\x1b/x\n\x1bf?\x1bf");
    }
    let mut terminal =
        ratatui::Terminal::new(ratatui::backend::TestBackend::new(60, 20)).expect("backend");
    for tab in "123456".chars() {
        typed(&mut m, &tab.to_string());
        terminal.draw(|f| crate::view::view(&m, f)).expect("draw");
        typed(&mut m, "\n");
        terminal.draw(|f| crate::view::view(&m, f)).expect("draw");
        typed(&mut m, "\x1b");
    }
}

#[test]
fn runs_beyond_capacity_keep_the_newest() {
    let mut m = Model::new(crate::model::ModelConfig {
        run_capacity: 3,
        theme: Theme::monochrome(),
        ..Default::default()
    });
    let mut summary = fixtures::summary();
    let template = summary.runs[0].clone();
    summary.runs = (1..=5)
        .map(|i| triggers_emulator::control::RunSummary {
            id: format!("r{i}"),
            ..template.clone()
        })
        .collect();
    for _ in 0..2 {
        update(&mut m, Msg::Summary(summary.clone()));
        let ids: Vec<&str> = m.runs.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["r3", "r4", "r5"]);
        assert_eq!(m.run_index.len(), 3);
        assert_eq!(m.runs.dropped(), 0, "the older ones are never taken in");
    }
    // A run that starts later pushes the oldest out, index and all.
    update(
        &mut m,
        Msg::Records(vec![record(
            1,
            RecordKind::Trigger {
                run_id: "r6".into(),
                flow_id: "order".into(),
                entry: String::new(),
            },
        )]),
    );
    assert!(m.run("r3").is_none());
    assert!(m.run("r6").is_some());
    assert_eq!(m.run_index.len(), 3);
}

#[test]
fn t_offers_the_last_payload_of_the_flow_again() {
    let mut m = control();
    typed(&mut m, "tjj\n");
    key(&mut m, KeyCode::Backspace);
    let cmd = typed(&mut m, "\"id\": 7}\n");
    assert!(matches!(cmd, Some(Cmd::Trigger { .. })), "{cmd:?}");
    typed(&mut m, "tjj\n");
    assert!(
        matches!(&m.prompt, Some(Prompt::Payload { flow_id, input, .. }) if flow_id == "refund" && input == "{\"id\": 7}"),
        "{:?}",
        m.prompt
    );
}

#[test]
fn r_retriggers_the_selected_run_and_y_copies_its_id() {
    let mut m = control();
    typed(&mut m, "3");
    assert_eq!(m.tab, Tab::Runs);
    let id = selected_run(&m);
    let flow = m.run(&id).unwrap().flow_id.clone();
    assert_eq!(typed(&mut m, "y"), Some(Cmd::Copy(id.clone())));
    assert!(
        m.notice
            .as_ref()
            .is_some_and(|n| n.text == format!("copied {id}"))
    );
    typed(&mut m, "r");
    assert!(
        matches!(&m.prompt, Some(Prompt::Payload { flow_id, .. }) if *flow_id == flow),
        "{:?}",
        m.prompt
    );
    let cmd = typed(&mut m, "\n");
    assert!(
        matches!(&cmd, Some(Cmd::Trigger { flow_id, .. }) if *flow_id == flow),
        "{cmd:?}"
    );
}

/// Heartbeats (one per service every few seconds) swamp Traffic: hidden by default, `H`
/// shows them, and hides them again.
#[test]
fn heartbeats_are_hidden_from_traffic_until_capital_h() {
    let mut m = control();
    typed(&mut m, "6");
    let all = m.events.len();
    let heartbeats = m
        .events
        .iter()
        .filter(|e| matches!(e.kind, Some(RecordKind::Heartbeat { .. })))
        .count();
    assert!(heartbeats > 0);
    assert_eq!(m.row_count(ListId::Traffic), all - heartbeats);
    typed(&mut m, "H");
    assert_eq!(m.row_count(ListId::Traffic), all);
    typed(&mut m, "H");
    assert_eq!(m.row_count(ListId::Traffic), all - heartbeats);
}

#[test]
fn capital_r_resends_the_selected_dlq_entry_and_only_that() {
    let mut m = control();
    // Nowhere near a DLQ entry: said so, nothing sent.
    typed(&mut m, "3");
    assert_eq!(typed(&mut m, "R"), None);
    assert!(
        m.notice
            .as_ref()
            .is_some_and(|n| n.error && n.text.contains("select one in DLQ"))
    );
    typed(&mut m, "4");
    assert_eq!(m.tab(), Tab::Dlq);
    let abs = m
        .selected_item(ListId::Dlq)
        .expect("the fixture has DLQ entries");
    let msg_id = m.dlq.get_abs(abs).unwrap().msg_id.clone();
    assert_eq!(typed(&mut m, "R"), Some(Cmd::ResendDlq(msg_id.clone())));
    // From the entry's open page too.
    typed(&mut m, "\n");
    assert!(m.page.is_some());
    assert_eq!(typed(&mut m, "R"), Some(Cmd::ResendDlq(msg_id)));
    // A passive observer cannot.
    m.mode = crate::model::Mode::Passive;
    assert_eq!(typed(&mut m, "R"), None);
    assert!(
        m.notice
            .as_ref()
            .is_some_and(|n| n.text.contains("read-only"))
    );
}

/// Moves the Runs selection to `id` (from the first row down).
fn select_run(m: &mut Model, id: &str) {
    typed(m, "3g");
    for _ in 0..m.row_count(ListId::Runs) {
        if selected_run(m) == id {
            return;
        }
        typed(m, "j");
    }
    panic!("no row for run {id}");
}

#[test]
fn x_cancels_the_open_or_selected_run_and_only_an_open_one() {
    let mut m = control();
    // Nowhere near a run: said so, nothing sent.
    typed(&mut m, "1");
    assert_eq!(typed(&mut m, "x"), None);
    assert!(
        m.notice
            .as_ref()
            .is_some_and(|n| n.error && n.text.contains("select one in Runs"))
    );
    // A settled run is not cancelled: the reason, and no command.
    select_run(&mut m, "run-0001");
    assert_eq!(typed(&mut m, "x"), None);
    assert!(
        m.notice
            .as_ref()
            .is_some_and(|n| n.error && n.text == "run run-0001 has succeeded already"),
        "{:?}",
        m.notice
    );
    // The selected open run, from the list.
    select_run(&mut m, "run-0003");
    assert_eq!(typed(&mut m, "x"), Some(Cmd::CancelRun("run-0003".into())));
    // The open run, from its page (the timeline): the run page's key.
    select_run(&mut m, "run-0004");
    assert_eq!(typed(&mut m, "\n"), Some(Cmd::LoadRun("run-0004".into())));
    assert_eq!(m.open_run.as_deref(), Some("run-0004"));
    assert_eq!(typed(&mut m, "x"), Some(Cmd::CancelRun("run-0004".into())));
    // The emulator says it settled cancelled: so it stays, whatever comes after, and a second
    // x says so.
    update(
        &mut m,
        Msg::Records(vec![record(
            9_000,
            RecordKind::RunSettled {
                run_id: "run-0004".into(),
                flow_id: "order".into(),
                status: RunStatus::Cancelled,
            },
        )]),
    );
    assert_eq!(
        m.run("run-0004").map(|r| r.status),
        Some(RunStatus::Cancelled)
    );
    assert_eq!(typed(&mut m, "x"), None);
    assert!(
        m.notice
            .as_ref()
            .is_some_and(|n| n.text == "run run-0004 was cancelled already"),
        "{:?}",
        m.notice
    );
    // A passive observer cannot.
    m.mode = crate::model::Mode::Passive;
    typed(&mut m, "\x1b");
    select_run(&mut m, "run-0003");
    assert_eq!(typed(&mut m, "x"), None);
    assert!(
        m.notice
            .as_ref()
            .is_some_and(|n| n.text.contains("read-only"))
    );
}

/// A run page that says "1 in the DLQ" jumps to its entries with `D`; with `f` on, the
/// timeline's title says how many of its steps it shows.
#[test]
fn a_runs_dlq_entries_are_a_key_away_and_f_says_what_it_hides() {
    let mut m = control();
    typed(&mut m, "3gj\n"); // the second run: failed, one entry in the DLQ
    let run = m.open_run.clone().expect("a run is open");
    assert_eq!(m.run(&run).map(|r| r.dlq), Some(1));
    let steps = m.collection_len(ListId::Timeline);
    typed(&mut m, "f");
    assert!(m.row_count(ListId::Timeline) < steps);
    typed(&mut m, "f");
    typed(&mut m, "D");
    assert_eq!(m.tab, Tab::Dlq);
    assert_eq!(m.open_run, None);
    assert_eq!(m.list(ListId::Dlq).filter, run);
    assert_eq!(m.row_count(ListId::Dlq), 1);
}
