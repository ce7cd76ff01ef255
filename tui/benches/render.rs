//! Frame time with 100 000 recorded events: the runs view and the traffic log drawn into a
//! 200x50 `TestBackend` (the whole `Terminal::draw`, buffer diff included), beside an empty
//! model's frame as the baseline; and the cost of applying a batch of 1 000 records to the full
//! model. The goal is under 16 ms a frame.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use triggers_emulator::recorder::{Record, RecordKind};
use triggers_tui::fixtures::{self, at_ms};
use triggers_tui::{Mode, Model, Msg, Theme, update, view};

const EVENTS: usize = 100_000;

fn press(model: &mut Model, keys: &str) {
    for c in keys.chars() {
        let code = if c == '\n' {
            KeyCode::Enter
        } else {
            KeyCode::Char(c)
        };
        update(model, Msg::Key(KeyEvent::new(code, KeyModifiers::NONE)));
    }
}

fn frame(c: &mut Criterion, name: &str, model: &Model) {
    let mut terminal = Terminal::new(TestBackend::new(200, 50)).expect("test backend");
    c.bench_function(name, |b| {
        b.iter(|| {
            terminal.draw(|f| view(black_box(model), f)).expect("draw");
        });
    });
}

fn render(c: &mut Criterion) {
    let empty = fixtures::empty_model(Mode::Control, Theme::colored());
    frame(c, "empty model, services view (baseline)", &empty);

    let mut model = fixtures::large_model(EVENTS, EVENTS, Theme::colored());
    assert_eq!(model.events().0, EVENTS);
    press(&mut model, "3");
    frame(c, "100k events: runs view, following", &model);
    press(&mut model, "gjjjjj");
    frame(c, "100k events: runs view, scrolled to the top", &model);
    press(&mut model, "G/failed\n");
    frame(c, "100k events: runs view, filtered", &model);
    press(&mut model, "6");
    frame(c, "100k events: traffic log, following", &model);
    press(&mut model, "/dlq\n");
    frame(c, "100k events: traffic log, filtered", &model);
    press(&mut model, "4");
    frame(c, "100k events: DLQ view", &model);
}

fn ingest(c: &mut Criterion) {
    let mut model = fixtures::large_model(EVENTS, EVENTS, Theme::colored());
    let mut seq = 1_000_000u64;
    c.bench_function("100k events: apply a batch of 1000 records", |b| {
        b.iter(|| {
            let batch: Vec<Record> = (0..1000)
                .map(|_| {
                    seq += 1;
                    Record {
                        seq,
                        at: at_ms(0),
                        clock: at_ms(0),
                        subject: String::new(),
                        headers: Vec::new().into(),
                        payload: Default::default(),
                        kind: RecordKind::ClockAdvanced {
                            from: None,
                            to: at_ms(0),
                        },
                    }
                })
                .collect();
            update(&mut model, Msg::Records(black_box(batch)));
        });
    });
}

criterion_group!(benches, render, ingest);
criterion_main!(benches);
