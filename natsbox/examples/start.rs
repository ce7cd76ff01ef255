//! Starts a nats-server the way `NatsServer::start` chooses, prints what it chose, and stops it.
//!
//! ```text
//! cargo run -p natsbox --example start
//! ```

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = natsbox::NatsServer::start(natsbox::NatsConfig::default()).await?;
    println!("{}", server.summary());
    let client = async_nats::connect(server.url()).await?;
    client.publish("greetings", "hello".into()).await?;
    client.flush().await?;
    server.stop().await?;
    Ok(())
}
