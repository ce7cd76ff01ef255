//! A TCP proxy in front of a nats-server that makes the connection faults a client must survive:
//! the server reading nothing of what a client sent ([`FaultProxy::hold`]), and every connection
//! breaking with what it held unread ([`FaultProxy::cut`]), as when a network path fails with
//! bytes in the kernel's buffers. Clients connect to [`FaultProxy::url`]; the proxy connects each
//! to the server.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// What each connection holds, by its number.
type Held = Arc<Mutex<HashMap<u64, Vec<u8>>>>;

/// A proxy in front of one server. Dropping it closes every connection through it.
#[derive(Debug)]
pub struct FaultProxy {
    url: String,
    hold: watch::Sender<bool>,
    cut: watch::Sender<u64>,
    /// What clients sent while held and the server has not read yet, by connection.
    held: Held,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // The accept task owns the connections' tasks: aborting it ends them.
        self.accept.abort();
    }
}

impl FaultProxy {
    /// Starts a proxy to `upstream` (`host:port` or a `nats://` URL) on a free local port.
    ///
    /// # Errors
    /// When no local port can be bound.
    pub async fn start(upstream: &str) -> std::io::Result<FaultProxy> {
        let upstream = upstream.trim_start_matches("nats://").to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("nats://{}", listener.local_addr()?);
        let (hold, _) = watch::channel(false);
        let (cut, _) = watch::channel(0);
        let held = Held::default();
        let accept = tokio::spawn(accept(
            listener,
            upstream,
            hold.clone(),
            cut.clone(),
            held.clone(),
        ));
        Ok(FaultProxy {
            url,
            hold,
            cut,
            held,
            accept,
        })
    }

    /// The URL clients connect to.
    #[must_use]
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Holds (`true`) what clients send from now on: the server reads none of it until the hold
    /// is lifted (`false`), when it reads it all, in order. What the server sends passes always.
    /// A connection holds up to 16 MiB; then the proxy stops reading it, and the client's writes
    /// wait as they would on a server that reads nothing.
    pub fn hold(&self, on: bool) {
        self.hold.send_replace(on);
    }

    /// Closes every connection open now; what they held is dropped, unread by the server.
    /// Clients that connect again get new connections.
    pub fn cut(&self) {
        self.cut.send_modify(|n| *n += 1);
    }

    /// Waits up to `patience` until what is held contains `needle` (a subject, say): proof that
    /// a client wrote it and the server has not read it. Returns whether it did.
    pub async fn wait_held(&self, needle: &[u8], patience: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            if self.holds(needle) {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn holds(&self, needle: &[u8]) -> bool {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        !needle.is_empty()
            && held
                .values()
                .any(|bytes| bytes.windows(needle.len()).any(|w| w == needle))
    }
}

async fn accept(
    listener: TcpListener,
    upstream: String,
    hold: watch::Sender<bool>,
    cut: watch::Sender<u64>,
    held: Held,
) {
    let mut connections = JoinSet::new();
    let mut number = 0;
    while let Ok((client, _)) = listener.accept().await {
        number += 1;
        let id = number;
        let Ok(server) = TcpStream::connect(&upstream).await else {
            continue;
        };
        let (hold, mut cut) = (hold.subscribe(), cut.subscribe());
        cut.mark_unchanged();
        let held = held.clone();
        connections.spawn(async move {
            let (mut from_client, mut to_client) = client.into_split();
            let (mut from_server, mut to_server) = server.into_split();
            let cut_seen = cut.clone();
            tokio::select! {
                biased;
                _ = cut.changed() => {}
                _ = tokio::io::copy(&mut from_server, &mut to_client) => {}
                () = upward(&mut from_client, &mut to_server, hold, cut_seen, |more| {
                    let mut held = held.lock().unwrap_or_else(PoisonError::into_inner);
                    match more {
                        Some(bytes) => held.entry(id).or_default().extend_from_slice(bytes),
                        None => drop(held.remove(&id)),
                    }
                }) => {}
            }
            // Whatever this connection held is gone with it.
            held.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id);
        });
        // Reap the connections that ended, so the set does not grow with every reconnect.
        while connections.try_join_next().is_some() {}
    }
}

/// The most a connection holds: beyond it the proxy stops reading from the client, whose writes
/// then wait (TCP's own flow control), as a server that reads nothing makes them.
const MAX_HELD: usize = 16 << 20;

/// Copies what a client sends to the server, holding it while `hold` is set (up to
/// [`MAX_HELD`]); tells `show` what it adds to what it holds, and `None` once it let it go.
/// Writes nothing once `cut` has changed: a cut made before a hold is lifted drops what was
/// held, however the two are seen here.
async fn upward(
    from_client: &mut tokio::net::tcp::OwnedReadHalf,
    to_server: &mut tokio::net::tcp::OwnedWriteHalf,
    mut hold: watch::Receiver<bool>,
    cut: watch::Receiver<u64>,
    show: impl Fn(Option<&[u8]>),
) {
    let mut pending = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let full = *hold.borrow() && pending.len() >= MAX_HELD;
        let read = tokio::select! {
            read = from_client.read(&mut chunk), if !full => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            changed = hold.changed() => if changed.is_err() { return } else { 0 },
        };
        pending.extend_from_slice(&chunk[..read]);
        let holding = *hold.borrow();
        if holding {
            if read > 0 {
                show(Some(&chunk[..read]));
            }
        } else if !pending.is_empty() {
            if cut.has_changed().unwrap_or(true) {
                return;
            }
            show(None);
            if to_server.write_all(&pending).await.is_err() {
                return;
            }
            pending.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;
    use crate::{Backend, NatsConfig, NatsServer};

    async fn next(sub: &mut async_nats::Subscriber, patience: Duration) -> Option<String> {
        tokio::time::timeout(patience, sub.next())
            .await
            .ok()
            .flatten()
            .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn held_bytes_reach_the_server_on_release_and_never_after_a_cut() {
        let server = NatsServer::start(NatsConfig {
            backend: Backend::Binary,
            ..Default::default()
        })
        .await
        .expect("a nats-server binary");
        let proxy = FaultProxy::start(server.url()).await.unwrap();
        let direct = async_nats::connect(server.url()).await.unwrap();
        let mut seen = direct.subscribe("faults").await.unwrap();
        direct.flush().await.unwrap();
        let client = async_nats::connect(proxy.url()).await.unwrap();

        // Held: written, not read, until released.
        proxy.hold(true);
        client.publish("faults", "one".into()).await.unwrap();
        assert!(proxy.wait_held(b"PUB faults", Duration::from_secs(5)).await);
        assert_eq!(next(&mut seen, Duration::from_millis(300)).await, None);
        proxy.hold(false);
        assert_eq!(
            next(&mut seen, Duration::from_secs(5)).await.as_deref(),
            Some("one")
        );

        // Held, then cut: gone; the client connects again and goes on.
        proxy.hold(true);
        client.publish("faults", "two".into()).await.unwrap();
        assert!(proxy.wait_held(b"two", Duration::from_secs(5)).await);
        proxy.cut();
        proxy.hold(false);
        // What is published before the client sees the break is lost too (core NATS is at most
        // once): wait for its second connection.
        let connects = || {
            client
                .statistics()
                .connects
                .load(std::sync::atomic::Ordering::SeqCst)
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while connects() < 2 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(connects(), 2, "the client connected again within 10 s");
        client.publish("faults", "three".into()).await.unwrap();
        assert_eq!(
            next(&mut seen, Duration::from_secs(10)).await.as_deref(),
            Some("three")
        );
    }
}
