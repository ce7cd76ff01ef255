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
                () = upward(&mut from_client, &mut to_server, hold, cut_seen, |now| {
                    let mut held = held.lock().unwrap_or_else(PoisonError::into_inner);
                    match now {
                        Some(bytes) => held.insert(id, bytes.to_vec()),
                        None => held.remove(&id),
                    };
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

/// Copies what a client sends to the server, holding it while `hold` is set; tells `show` what
/// it holds (`None` for nothing). Writes nothing once `cut` has changed: a cut made before a
/// hold is lifted drops what was held, however the two are seen here.
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
        tokio::select! {
            read = from_client.read(&mut chunk) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => pending.extend_from_slice(&chunk[..n]),
            },
            changed = hold.changed() => if changed.is_err() { return },
        }
        let holding = *hold.borrow();
        if holding {
            show(Some(&pending));
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
