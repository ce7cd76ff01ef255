//! The runtime loop: the terminal (restored on every way out, panics included), the input
//! thread, the source tasks, and the commands `update` asks for.

use std::io::stdout;
use std::sync::Arc;
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ratatui::DefaultTerminal;
use ratatui::crossterm::event::{self, DisableMouseCapture, EnableMouseCapture, Event};
use ratatui::crossterm::execute;
use tokio::sync::mpsc;

use crate::error::TuiError;
use crate::model::{Model, ModelConfig};
use crate::msg::{Cmd, Msg};
use crate::source::Source;
use crate::theme::Theme;
use crate::update::update;
use crate::view::view;

/// How the app runs. Every field has a default; set what you need and end with
/// `..Default::default()`.
#[derive(Debug, Clone)]
pub struct TuiOptions {
    /// Traffic records kept; older ones drop off with a visible count (default 100 000).
    pub event_capacity: usize,
    /// Runs kept (default 10 000).
    pub run_capacity: usize,
    /// Colours: `None` (default) follows `NO_COLOR`; `Some(false)` turns them off.
    pub colors: Option<bool>,
    /// Capture the mouse for wheel scrolling (default on; off lets the terminal select text).
    pub mouse: bool,
    /// How often the state is polled and the clock ticks (default 500 ms).
    pub poll_interval: Duration,
    /// What the header names as the source (default: the server's address).
    pub source_label: Option<String>,
    /// Quit on SIGTERM and SIGHUP (default on). Off for a caller that listens for them itself
    /// and ends the app by dropping it: two listeners race, and the caller could find the app
    /// ended before it heard the signal it must exit by (`watch` exited 0 on SIGTERM).
    pub quit_on_signals: bool,
}

impl Default for TuiOptions {
    fn default() -> Self {
        TuiOptions {
            event_capacity: 100_000,
            run_capacity: 10_000,
            colors: None,
            mouse: true,
            poll_interval: Duration::from_millis(500),
            source_label: None,
            quit_on_signals: true,
        }
    }
}

/// Most messages applied between two frames, so input stays responsive under a flood.
const MAX_MSGS_PER_FRAME: usize = 1024;

/// Runs the app on this terminal until the user quits.
///
/// # Errors
/// When the source cannot be subscribed to, or the terminal cannot be used. A lost connection
/// is shown on screen, not returned.
pub async fn run(source: Source, options: TuiOptions) -> Result<(), TuiError> {
    let theme = match options.colors {
        None => Theme::from_env(),
        Some(true) => Theme::colored(),
        Some(false) => Theme::monochrome(),
    };
    let mut model = Model::new(ModelConfig {
        mode: source.mode(),
        source: options
            .source_label
            .clone()
            .unwrap_or_else(|| source.label()),
        event_capacity: options.event_capacity,
        run_capacity: options.run_capacity,
        theme,
        ..ModelConfig::default()
    });
    let (tx, mut rx) = mpsc::channel(1024);
    // The set aborts its tasks when dropped, however this returns.
    let mut tasks = source.spawn(tx.clone(), options.poll_interval).await?;
    if options.quit_on_signals {
        tasks.spawn(quit_on_signal(tx.clone()));
    }

    let mut terminal = TerminalGuard::enter(options.mouse)?;
    let _input = InputThread::start(tx.clone());
    let size = terminal.terminal.size()?;
    update(&mut model, Msg::Resize(size.width, size.height));

    loop {
        terminal.terminal.draw(|frame| view(&model, frame))?;
        let Some(msg) = rx.recv().await else {
            break;
        };
        let mut next = Some(msg);
        let mut applied = 0;
        while let Some(msg) = next.take() {
            if let Some(cmd) = update(&mut model, msg) {
                if cmd == Cmd::Quit {
                    return Ok(());
                }
                if let Cmd::Copy(text) = &cmd {
                    copy_to_clipboard(text);
                    continue;
                }
                source.perform(cmd, tx.clone());
            }
            applied += 1;
            if applied < MAX_MSGS_PER_FRAME {
                next = rx.try_recv().ok();
            }
        }
        if model.should_quit() {
            break;
        }
    }
    Ok(())
}

async fn quit_on_signal(tx: mpsc::Sender<Msg>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut hup)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::hangup()),
        ) else {
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = hup.recv() => {}
        }
        let _ = tx.send(Msg::Quit).await;
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        let _ = tx.send(Msg::Quit).await;
    }
}

/// Leaves the terminal as it found it: also restored by the panic hook before a panic's message
/// is printed, and by `Drop` on every other way out.
struct TerminalGuard {
    terminal: DefaultTerminal,
}

static MOUSE_CAPTURED: AtomicBool = AtomicBool::new(false);

fn restore_terminal() {
    if MOUSE_CAPTURED.swap(false, Ordering::SeqCst) {
        let _ = execute!(stdout(), DisableMouseCapture);
    }
    ratatui::restore();
}

impl TerminalGuard {
    fn enter(mouse: bool) -> Result<Self, TuiError> {
        static HOOK: Once = Once::new();
        HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                restore_terminal();
                previous(info);
            }));
        });
        // `try_init` enables raw mode, enters the alternate screen and adds its own restoring
        // panic hook in front of ours.
        let terminal = ratatui::try_init()?;
        let guard = TerminalGuard { terminal };
        if mouse {
            execute!(stdout(), EnableMouseCapture)?;
            MOUSE_CAPTURED.store(true, Ordering::SeqCst);
        }
        Ok(guard)
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore_terminal();
    }
}

/// Reads terminal events on a thread of its own (crossterm's reads block) and sends them as
/// messages; stops within 100 ms of being dropped. Not joined: a send blocked on a full channel
/// must not hold up leaving (it fails as soon as the receiver goes).
struct InputThread {
    stop: Arc<AtomicBool>,
}

impl InputThread {
    fn start(tx: mpsc::Sender<Msg>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::spawn(move || {
            while !flag.load(Ordering::SeqCst) {
                match event::poll(Duration::from_millis(100)) {
                    Ok(false) => continue,
                    Ok(true) => {}
                    Err(_) => return,
                }
                let msg = match event::read() {
                    Ok(Event::Key(key)) => Msg::Key(key),
                    Ok(Event::Mouse(mouse)) => Msg::Mouse(mouse),
                    Ok(Event::Resize(w, h)) => Msg::Resize(w, h),
                    Ok(_) => continue,
                    Err(_) => return,
                };
                if tx.blocking_send(msg).is_err() {
                    return;
                }
            }
        });
        InputThread { stop }
    }
}

impl Drop for InputThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Puts `text` on the terminal's clipboard with OSC 52, the one way that works over SSH; a
/// terminal that does not support it ignores the sequence.
fn copy_to_clipboard(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout();
    let _ = write!(out, "\x1b]52;c;{}\x07", base64(text.as_bytes()));
    let _ = out.flush();
}

/// Standard base64 with padding (what OSC 52 takes).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> shift) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod clipboard_tests {
    #[test]
    fn base64_matches_the_standard() {
        for (input, want) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("run-1a", "cnVuLTFh"),
        ] {
            assert_eq!(super::base64(input.as_bytes()), want, "{input}");
        }
    }
}
