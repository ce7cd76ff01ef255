//! The terminal UI without the CLI: `cargo run -p triggers-tui --example watch -- [NATS_URL]`.
//! Uses the control API when a `triggers-lab up` answers at the URL, else watches passively.

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "nats://127.0.0.1:4222".into());
    triggers_tui::watch(&url).await?;
    Ok(())
}
