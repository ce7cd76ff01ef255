//! `update`: the one place the model changes. Pure: no I/O, no clock, no terminal; what must
//! happen outside (trigger, advance, fetch a run, quit) comes back as a [`Cmd`].

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers, MouseEventKind};

use triggers_emulator::recorder::RunStatus;

use crate::format::parse_duration;
use crate::model::{Connection, Detail, ListId, Model, Notice, Page, Prompt, Tab};
use crate::msg::{Cmd, Msg};

/// Rows moved by one wheel notch.
const WHEEL_ROWS: usize = 3;

/// Applies a message to the model; returns the side effect to perform, if any.
pub fn update(model: &mut Model, msg: Msg) -> Option<Cmd> {
    let mut runs_changed = false;
    let cmd = match msg {
        Msg::Key(key) => on_key(model, key),
        Msg::Mouse(mouse) => {
            match mouse.kind {
                MouseEventKind::ScrollDown => move_by(model, WHEEL_ROWS as isize),
                MouseEventKind::ScrollUp => move_by(model, -(WHEEL_ROWS as isize)),
                _ => {}
            }
            None
        }
        Msg::Resize(_, height) => {
            model.page_rows = usize::from(height).saturating_sub(8).max(1);
            None
        }
        Msg::Tick(now) => {
            model.now = now;
            None
        }
        Msg::Summary(summary) => {
            model.apply_summary(summary);
            runs_changed = true;
            None
        }
        Msg::Records(records) => {
            for record in records {
                runs_changed |= model.apply_record(record);
            }
            None
        }
        Msg::Observed(messages) => {
            for message in messages {
                runs_changed |= model.apply_observed(message);
            }
            None
        }
        Msg::RunLoaded(run) => {
            model.apply_run(*run);
            runs_changed = true;
            None
        }
        Msg::Dropped(count) => {
            model.own_dropped = count;
            None
        }
        Msg::Connected => {
            if matches!(model.connection, Connection::Lost { .. }) {
                notice(model, "connection restored", false);
            }
            model.connection = Connection::Connected;
            None
        }
        Msg::Disconnected(reason) => {
            model.connection = Connection::Lost { reason };
            None
        }
        Msg::SourceError(text) => {
            notice(model, &text, true);
            None
        }
        Msg::Done { text, error } => {
            notice(model, &text, error);
            None
        }
        Msg::Quit => {
            model.quit = true;
            Some(Cmd::Quit)
        }
    };
    model.refresh(runs_changed);
    cmd
}

fn notice(model: &mut Model, text: &str, error: bool) {
    model.notice = Some(Notice {
        text: text.to_owned(),
        error,
    });
}

fn on_key(model: &mut Model, key: KeyEvent) -> Option<Cmd> {
    if key.kind == KeyEventKind::Release {
        return None;
    }
    let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
    if ctrl && key.code == KeyCode::Char('c') {
        model.quit = true;
        return Some(Cmd::Quit);
    }
    if model.prompt.is_some() {
        return on_prompt_key(model, key);
    }
    if model.help {
        if matches!(
            key.code,
            KeyCode::Char('?' | 'q') | KeyCode::Esc | KeyCode::Enter
        ) {
            model.help = false;
        }
        return None;
    }
    let page = model.page_rows as isize;
    match key.code {
        KeyCode::Char('q') => {
            model.quit = true;
            return Some(Cmd::Quit);
        }
        KeyCode::Char('?') => model.help = true,
        KeyCode::Esc => back(model),
        KeyCode::Enter => return drill_in(model),
        KeyCode::Tab => switch_tab(model, 1),
        KeyCode::BackTab => switch_tab(model, -1),
        KeyCode::Right | KeyCode::Char('l') if !drilled_in(model) => switch_tab(model, 1),
        KeyCode::Left | KeyCode::Char('h') if !drilled_in(model) => switch_tab(model, -1),
        KeyCode::Left | KeyCode::Char('h') => back(model),
        KeyCode::Char(c @ '1'..='6') => {
            let i = c as usize - '1' as usize;
            go_to_tab(model, Tab::ALL[i]);
        }
        KeyCode::Down | KeyCode::Char('j') => move_by(model, 1),
        KeyCode::Up | KeyCode::Char('k') => move_by(model, -1),
        KeyCode::Char('d' | 'f') if ctrl => move_by(model, page),
        KeyCode::Char('u' | 'b') if ctrl => move_by(model, -page),
        KeyCode::PageDown => move_by(model, page),
        KeyCode::PageUp => move_by(model, -page),
        KeyCode::Home | KeyCode::Char('g') => move_by(model, isize::MIN),
        KeyCode::End | KeyCode::Char('G') => {
            move_by(model, isize::MAX);
            if model.page.is_none() {
                model.follow = true;
            }
        }
        KeyCode::Char('/') => {
            let input = model.list(model.current_list()).filter.clone();
            model.prompt = Some(Prompt::Filter { input });
        }
        KeyCode::Char('f') => {
            model.failures_only = !model.failures_only;
            recompute_all(model);
        }
        KeyCode::Char('F') => model.follow = !model.follow,
        KeyCode::Char('t') => start_trigger(model),
        KeyCode::Char('r') => retrigger(model),
        KeyCode::Char('R') => return resend(model),
        KeyCode::Char('x') => return cancel_run(model),
        KeyCode::Char('y') => return copy_id(model),
        KeyCode::Char('H') => {
            model.hide_heartbeats = !model.hide_heartbeats;
            model.recompute_rows(ListId::Traffic);
            let text = if model.hide_heartbeats {
                "heartbeats hidden from Traffic (H shows them)"
            } else {
                "heartbeats shown in Traffic"
            };
            notice(model, text, false);
        }
        KeyCode::Char('a') => start_advance(model),
        KeyCode::Char('D') => dlq_of_open_run(model),
        _ => {}
    }
    None
}

/// `D` on a run: the DLQ tab, filtered to that run's entries.
fn dlq_of_open_run(model: &mut Model) {
    let Some(id) = model.open_run.clone().filter(|_| model.page.is_none()) else {
        notice(model, "D shows a run's DLQ entries: open a run first", true);
        return;
    };
    go_to_tab(model, Tab::Dlq);
    let state = model.list_mut(ListId::Dlq);
    state.filter = id;
    state.selected = 0;
    model.recompute_rows(ListId::Dlq);
}

fn drilled_in(model: &Model) -> bool {
    model.page.is_some() || model.open_run.is_some()
}

fn recompute_all(model: &mut Model) {
    for list in [
        ListId::Services,
        ListId::Flows,
        ListId::Runs,
        ListId::Dlq,
        ListId::Violations,
        ListId::Traffic,
        ListId::Timeline,
    ] {
        model.recompute_rows(list);
    }
}

fn back(model: &mut Model) {
    if model.page.take().is_some() {
        return;
    }
    if model.open_run.take().is_some() {
        return;
    }
    let list = model.current_list();
    if !model.list(list).filter.is_empty() {
        model.list_mut(list).filter.clear();
        model.recompute_rows(list);
    }
}

fn go_to_tab(model: &mut Model, tab: Tab) {
    model.page = None;
    model.open_run = None;
    model.tab = tab;
}

fn switch_tab(model: &mut Model, by: isize) {
    let n = Tab::ALL.len() as isize;
    let i = (model.tab.index() as isize + by).rem_euclid(n) as usize;
    go_to_tab(model, Tab::ALL[i]);
}

/// Moves the selection (or scrolls the open page) by `by` rows; `isize::MIN`/`MAX` go to the ends.
fn move_by(model: &mut Model, by: isize) {
    if model.page.is_some() {
        // The last page of text fills the screen: header, tabs, status, hint and borders aside.
        let visible = model.page_rows + 2;
        let max = crate::view::page_line_count(model).saturating_sub(visible) as isize;
        let Some(page) = model.page.as_mut() else {
            return;
        };
        let to = (page.scroll as isize).saturating_add(by).clamp(0, max);
        page.scroll = u16::try_from(to).unwrap_or(u16::MAX);
        return;
    }
    let list = model.current_list();
    let count = model.row_count(list);
    if by < 0 && Model::time_ordered(list) {
        model.follow = false;
    }
    let state = model.list_mut(list);
    let to = (state.selected as isize)
        .saturating_add(by)
        .clamp(0, (count as isize - 1).max(0));
    state.selected = to as usize;
}

fn drill_in(model: &mut Model) -> Option<Cmd> {
    if model.page.is_some() {
        return None;
    }
    let list = model.current_list();
    let item = model.selected_item(list)?;
    let detail = match list {
        ListId::Services => {
            Detail::Service(model.services.values().nth(item as usize)?.name.clone())
        }
        ListId::Flows => Detail::Flow(model.flows.values().nth(item as usize)?.id.clone()),
        ListId::Runs => {
            let id = model.runs.get_abs(item)?.id.clone();
            model.open_run = Some(id.clone());
            model.list_mut(ListId::Timeline).selected = 0;
            model.recompute_rows(ListId::Timeline);
            return model.mode.can_drive().then_some(Cmd::LoadRun(id));
        }
        ListId::Timeline => {
            let run = model.run(model.open_run.as_deref()?)?;
            Detail::Event(run.timeline.get(item as usize)?.seq)
        }
        ListId::Dlq => Detail::Dlq(item),
        ListId::Violations => Detail::Violation(item),
        ListId::Traffic => Detail::Event(model.events.get_abs(item)?.seq),
    };
    model.page = Some(Page { detail, scroll: 0 });
    None
}

fn start_trigger(model: &mut Model) {
    if !model.mode.can_drive() {
        notice(
            model,
            "passive observer: read-only (no emulator to trigger)",
            true,
        );
    } else if model.flows.is_empty() {
        notice(model, "no flow deployed: nothing to trigger", true);
    } else {
        model.prompt = Some(Prompt::PickFlow { selected: 0 });
    }
}

/// `r`: the selected (or open) run's flow again, its payload offered in the prompt to edit.
fn retrigger(model: &mut Model) {
    if !model.mode.can_drive() {
        notice(
            model,
            "passive observer: read-only (no emulator to trigger)",
            true,
        );
        return;
    }
    let run = match (&model.open_run, model.current_list()) {
        (Some(id), _) => model.run(id).cloned(),
        (None, ListId::Runs) => model
            .selected_item(ListId::Runs)
            .and_then(|i| model.runs.get_abs(i).cloned()),
        _ => None,
    };
    let Some(run) = run else {
        notice(model, "r re-triggers a run: select one in Runs first", true);
        return;
    };
    let input = run
        .payload
        .clone()
        .filter(|p| !p.trim().is_empty())
        .unwrap_or_else(|| "{}".into());
    model.prompt = Some(Prompt::Payload {
        flow_id: run.flow_id,
        input,
        error: None,
    });
}

/// `R`: the selected (or open) DLQ entry re-sent to its service as a new delivery.
fn resend(model: &mut Model) -> Option<Cmd> {
    if !model.mode.can_drive() {
        notice(
            model,
            "passive observer: read-only (no emulator to re-send with)",
            true,
        );
        return None;
    }
    let item = match &model.page {
        Some(Page {
            detail: Detail::Dlq(item),
            ..
        }) => Some(*item),
        Some(_) => None,
        None if model.open_run.is_none() && model.current_list() == ListId::Dlq => {
            model.selected_item(ListId::Dlq)
        }
        None => None,
    };
    let Some(entry) = item.and_then(|i| model.dlq.get_abs(i)) else {
        notice(
            model,
            "R re-sends a DLQ entry: select one in DLQ first",
            true,
        );
        return None;
    };
    Some(Cmd::ResendDlq(entry.msg_id.clone()))
}

/// `x`: the open (or selected) run cancelled, unless it has settled already.
fn cancel_run(model: &mut Model) -> Option<Cmd> {
    if !model.mode.can_drive() {
        notice(
            model,
            "passive observer: read-only (no emulator to cancel a run with)",
            true,
        );
        return None;
    }
    let run = match (&model.open_run, model.current_list()) {
        (Some(id), _) => model.run(id).cloned(),
        (None, ListId::Runs) => model
            .selected_item(ListId::Runs)
            .and_then(|i| model.runs.get_abs(i).cloned()),
        _ => None,
    };
    let Some(run) = run else {
        notice(model, "x cancels a run: select one in Runs first", true);
        return None;
    };
    if run.status.is_settled() {
        let text = match run.status {
            RunStatus::Cancelled => format!("run {} was cancelled already", run.id),
            status => format!("run {} has {} already", run.id, status.as_str()),
        };
        notice(model, &text, true);
        return None;
    }
    Some(Cmd::CancelRun(run.id))
}

/// `y`: the selected row's id (a run id, a DLQ entry's message id, a flow id, a service name)
/// to the clipboard.
fn copy_id(model: &mut Model) -> Option<Cmd> {
    let list = model.current_list();
    let id = match (&model.open_run, list) {
        (Some(id), ListId::Timeline) if model.page.is_none() => Some(id.clone()),
        _ => {
            let item = model.selected_item(list);
            item.and_then(|i| match list {
                ListId::Services => model
                    .services
                    .values()
                    .nth(i as usize)
                    .map(|s| s.name.clone()),
                ListId::Flows => model.flows.values().nth(i as usize).map(|f| f.id.clone()),
                ListId::Runs => model.runs.get_abs(i).map(|r| r.id.clone()),
                ListId::Dlq => model.dlq.get_abs(i).map(|d| d.msg_id.clone()),
                ListId::Violations | ListId::Traffic | ListId::Timeline => None,
            })
        }
    };
    match id {
        Some(id) => {
            notice(model, &format!("copied {id}"), false);
            Some(Cmd::Copy(id))
        }
        None => {
            notice(
                model,
                "nothing to copy here (y copies a run, DLQ entry, flow or service id)",
                true,
            );
            None
        }
    }
}

fn start_advance(model: &mut Model) {
    if !model.mode.can_drive() {
        notice(
            model,
            "passive observer: read-only (no clock to advance)",
            true,
        );
    } else if matches!(model.clock, Some((_, triggers_emulator::ClockMode::Real))) {
        notice(
            model,
            "the emulator runs on the real clock: it cannot be advanced",
            true,
        );
    } else {
        model.prompt = Some(Prompt::Advance {
            input: String::new(),
            error: None,
        });
    }
}

/// Edits a prompt's input line; returns whether the key was an edit.
fn edit(input: &mut String, key: &KeyEvent) -> bool {
    match key.code {
        KeyCode::Char('u') if key.modifiers.contains(KeyModifiers::CONTROL) => input.clear(),
        KeyCode::Char(_) if key.modifiers.contains(KeyModifiers::CONTROL) => return false,
        KeyCode::Char(c) => input.push(c),
        KeyCode::Backspace => {
            input.pop();
        }
        _ => return false,
    }
    true
}

fn on_prompt_key(model: &mut Model, key: KeyEvent) -> Option<Cmd> {
    match model.prompt.take()? {
        Prompt::Filter { input } => on_filter_key(model, input, &key),
        Prompt::PickFlow { selected } => on_pick_flow_key(model, selected, &key),
        Prompt::Payload {
            flow_id,
            input,
            error,
        } => return on_payload_key(model, flow_id, input, error, &key),
        Prompt::Advance { input, error } => return on_advance_key(model, input, error, &key),
    }
    None
}

/// The filter prompt: the list's rows follow each edit; Enter keeps the filter, Esc clears it.
fn on_filter_key(model: &mut Model, mut input: String, key: &KeyEvent) {
    let list = model.current_list();
    match key.code {
        KeyCode::Enter => return,
        KeyCode::Esc => input.clear(),
        _ => {
            edit(&mut input, key);
            model.prompt = Some(Prompt::Filter {
                input: input.clone(),
            });
        }
    }
    if model.list(list).filter != input {
        model.list_mut(list).filter = input;
        model.recompute_rows(list);
    }
}

/// The trigger's flow picker: Enter goes on to the payload prompt for the flow picked.
fn on_pick_flow_key(model: &mut Model, selected: usize, key: &KeyEvent) {
    let flows = model.flow_ids();
    let last = flows.len().saturating_sub(1);
    match key.code {
        KeyCode::Esc => {}
        KeyCode::Enter => {
            if let Some(flow_id) = flows.get(selected.min(last)) {
                // The last payload sent to this flow, to edit rather than retype.
                let input = model
                    .last_payloads
                    .get(flow_id)
                    .cloned()
                    .unwrap_or_else(|| "{}".into());
                model.prompt = Some(Prompt::Payload {
                    flow_id: flow_id.clone(),
                    input,
                    error: None,
                });
            }
        }
        KeyCode::Down | KeyCode::Char('j') => {
            model.prompt = Some(Prompt::PickFlow {
                selected: (selected + 1).min(last),
            });
        }
        KeyCode::Up | KeyCode::Char('k') => {
            model.prompt = Some(Prompt::PickFlow {
                selected: selected.saturating_sub(1),
            });
        }
        _ => model.prompt = Some(Prompt::PickFlow { selected }),
    }
}

/// The trigger's payload prompt: Enter triggers with the JSON typed (empty is `{}`), or says
/// why it is not JSON and stays open.
fn on_payload_key(
    model: &mut Model,
    flow_id: String,
    mut input: String,
    error: Option<String>,
    key: &KeyEvent,
) -> Option<Cmd> {
    match key.code {
        KeyCode::Esc => {}
        KeyCode::Enter => {
            let text = if input.trim().is_empty() {
                "{}"
            } else {
                &input
            };
            match serde_json::from_str(text) {
                Ok(payload) => {
                    model.last_payloads.insert(flow_id.clone(), text.to_owned());
                    return Some(Cmd::Trigger { flow_id, payload });
                }
                Err(e) => {
                    model.prompt = Some(Prompt::Payload {
                        flow_id,
                        input,
                        error: Some(format!("not JSON: {e}")),
                    });
                }
            }
        }
        _ => {
            let edited = edit(&mut input, key);
            model.prompt = Some(Prompt::Payload {
                flow_id,
                input,
                error: if edited { None } else { error },
            });
        }
    }
    None
}

/// The advance prompt: Enter advances the clock by the duration typed, or says why it is not
/// one and stays open.
fn on_advance_key(
    model: &mut Model,
    mut input: String,
    error: Option<String>,
    key: &KeyEvent,
) -> Option<Cmd> {
    match key.code {
        KeyCode::Esc => {}
        KeyCode::Enter => match parse_duration(&input) {
            Ok(by) => return Some(Cmd::Advance(by)),
            Err(e) => {
                model.prompt = Some(Prompt::Advance {
                    input,
                    error: Some(e.to_string()),
                });
            }
        },
        _ => {
            let edited = edit(&mut input, key);
            model.prompt = Some(Prompt::Advance {
                input,
                error: if edited { None } else { error },
            });
        }
    }
    None
}

#[cfg(test)]
mod tests;
