//! A TCP proxy in front of a nats-server that makes the connection faults a client must survive:
//! the server reading nothing of what a client sent ([`FaultProxy::hold`]), every connection
//! breaking with what it held unread ([`FaultProxy::cut`]), as when a network path fails with
//! bytes in the kernel's buffers, and a JetStream ack lost on its way ([`FaultProxy::drop_acks`]).
//! Clients connect to [`FaultProxy::url`]; the proxy connects each to the server.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
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
    acks: Arc<Acks>,
    accept: tokio::task::JoinHandle<()>,
}

/// The JetStream acks clients sent through the proxy: those to drop, dropped and passed on.
#[derive(Debug, Default)]
struct Acks {
    to_drop: AtomicU64,
    dropped: AtomicU64,
    passed: AtomicU64,
}

impl Acks {
    /// Whether the ack seen now is to be dropped (counted either way).
    fn take(&self) -> bool {
        let drop = self
            .to_drop
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        let count = if drop { &self.dropped } else { &self.passed };
        count.fetch_add(1, Ordering::SeqCst);
        drop
    }
}

/// How many JetStream acks went through a [`FaultProxy`], and how many it dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AckCount {
    /// Acks that reached the server.
    pub passed: u64,
    /// Acks dropped ([`FaultProxy::drop_acks`]).
    pub dropped: u64,
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
        let acks = Arc::new(Acks::default());
        let accept = tokio::spawn(accept(
            listener,
            upstream,
            hold.clone(),
            cut.clone(),
            held.clone(),
            acks.clone(),
        ));
        Ok(FaultProxy {
            url,
            hold,
            cut,
            held,
            acks,
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

    /// Drops the next `n` JetStream acks (`+ACK`, or an empty message, published to a `$JS.ACK.`
    /// subject) clients send: the server never reads them, so it redelivers the message after
    /// the consumer's `ack_wait`, as when an ack is lost in transit. In-progress acks, naks and
    /// everything else pass.
    pub fn drop_acks(&self, n: u64) {
        self.acks.to_drop.store(n, Ordering::SeqCst);
    }

    /// The JetStream acks clients sent through the proxy so far: passed on, and dropped.
    #[must_use]
    pub fn acks(&self) -> AckCount {
        AckCount {
            passed: self.acks.passed.load(Ordering::SeqCst),
            dropped: self.acks.dropped.load(Ordering::SeqCst),
        }
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
    acks: Arc<Acks>,
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
        let acks = acks.clone();
        connections.spawn(async move {
            let (mut from_client, mut to_client) = client.into_split();
            let (mut from_server, mut to_server) = server.into_split();
            let cut_seen = cut.clone();
            tokio::select! {
                biased;
                _ = cut.changed() => {}
                _ = tokio::io::copy(&mut from_server, &mut to_client) => {}
                () = upward(&mut from_client, &mut to_server, hold, cut_seen, &acks, |more| {
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
/// held, however the two are seen here. Writes whole protocol operations only, so that an ack
/// can be left out ([`FaultProxy::drop_acks`]).
async fn upward(
    from_client: &mut tokio::net::tcp::OwnedReadHalf,
    to_server: &mut tokio::net::tcp::OwnedWriteHalf,
    mut hold: watch::Receiver<bool>,
    cut: watch::Receiver<u64>,
    acks: &Acks,
    show: impl Fn(Option<&[u8]>),
) {
    let mut framing = Framing::Ops;
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
            let whole = framing.whole(&mut pending, acks);
            if !whole.is_empty() && to_server.write_all(&whole).await.is_err() {
                return;
            }
        }
    }
}

/// The longest control line the proxy waits to see whole (`CONNECT` with a JWT is a few KiB);
/// past it the bytes are not the NATS client protocol as the proxy knows it, and pass as they
/// come.
const MAX_LINE: usize = 64 << 10;

/// How the bytes a client sends are cut before they are written on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// Into protocol operations: the complete ones are written, the last partial one waits.
    Ops,
    /// As they come: what the client sends is not the protocol the proxy reads.
    Raw,
}

impl Framing {
    /// Takes the complete operations at the front of `pending` (all of it when raw), leaving a
    /// partial one; the acks `acks` says to drop are left out.
    fn whole(&mut self, pending: &mut Vec<u8>, acks: &Acks) -> Vec<u8> {
        if *self == Framing::Raw {
            return std::mem::take(pending);
        }
        let mut out = Vec::with_capacity(pending.len());
        let mut at = 0;
        while at < pending.len() {
            match op(&pending[at..]) {
                Op::Partial => break,
                Op::Unknown => {
                    *self = Framing::Raw;
                    out.extend_from_slice(&pending[at..]);
                    at = pending.len();
                }
                Op::Whole { len, ack } => {
                    if !(ack && acks.take()) {
                        out.extend_from_slice(&pending[at..at + len]);
                    }
                    at += len;
                }
            }
        }
        pending.drain(..at);
        out
    }
}

/// The protocol operation at the start of what a client sent.
#[derive(Debug, PartialEq, Eq)]
enum Op {
    /// It is `len` bytes long; `ack` when it is a JetStream ack.
    Whole { len: usize, ack: bool },
    /// Not all of it arrived yet.
    Partial,
    /// Not an operation of the client protocol.
    Unknown,
}

/// Reads the operation at the start of `buf`: a control line (`CONNECT`, `SUB`, `PING`, ...),
/// or `PUB`/`HPUB` with its payload.
fn op(buf: &[u8]) -> Op {
    let Some(eol) = buf.windows(2).position(|w| w == b"\r\n") else {
        return if buf.len() > MAX_LINE {
            Op::Unknown
        } else {
            Op::Partial
        };
    };
    let words: Vec<&[u8]> = buf[..eol]
        .split(|b| *b == b' ' || *b == b'\t')
        .filter(|w| !w.is_empty())
        .collect();
    let Some((verb, args)) = words.split_first() else {
        return Op::Whole {
            len: eol + 2,
            ack: false,
        };
    };
    let publish = verb.eq_ignore_ascii_case(b"PUB");
    if !publish && !verb.eq_ignore_ascii_case(b"HPUB") {
        return Op::Whole {
            len: eol + 2,
            ack: false,
        };
    }
    // PUB <subject> [reply] <size>; HPUB <subject> [reply] <header size> <total size>.
    let size = args
        .last()
        .and_then(|s| std::str::from_utf8(s).ok())
        .and_then(|s| s.parse::<usize>().ok());
    let (Some(subject), Some(size)) = (args.first(), size) else {
        return Op::Unknown;
    };
    let start = eol + 2;
    let Some(len) = start.checked_add(size).and_then(|n| n.checked_add(2)) else {
        return Op::Unknown;
    };
    if buf.len() < len {
        return Op::Partial;
    }
    let payload = &buf[start..start + size];
    let ack = publish
        && args.len() <= 3
        && subject.starts_with(b"$JS.ACK.")
        && (payload == b"+ACK" || payload.is_empty());
    Op::Whole { len, ack }
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

    #[test]
    fn operations_are_read_whole_and_acks_told_apart() {
        let whole = |len, ack| Op::Whole { len, ack };
        assert_eq!(op(b"PING\r\n"), whole(6, false));
        assert_eq!(op(b"PING\r"), Op::Partial);
        assert_eq!(op(b"PUB a 2\r\nhi\r\nPING\r\n"), whole(13, false));
        assert_eq!(op(b"PUB a 2\r\nh"), Op::Partial);
        let ack = b"PUB $JS.ACK.S.C.1.2.3.4.0 4\r\n+ACK\r\n";
        assert_eq!(op(ack), whole(ack.len(), true));
        let empty = b"pub $JS.ACK.S.C.1.2.3.4.0 _INBOX.x 0\r\n\r\n";
        assert_eq!(op(empty), whole(empty.len(), true));
        // In progress, a nak, an ack with headers: not acks to drop.
        let wpi = b"PUB $JS.ACK.S.C.1.2.3.4.0 4\r\n+WPI\r\n";
        assert_eq!(op(wpi), whole(wpi.len(), false));
        let hpub = b"HPUB $JS.ACK.S.C.1.2.3.4.0 12 16\r\nNATS/1.0\r\n\r\n+ACK\r\n";
        assert_eq!(op(hpub), whole(hpub.len(), false));
        assert_eq!(op(b"PUB a\r\n"), Op::Unknown);
        assert_eq!(op(&vec![b'x'; MAX_LINE + 1]), Op::Unknown);

        // Two acks and a ping in one read, one ack to drop, the last operation partial.
        let acks = Acks::default();
        acks.to_drop.store(1, Ordering::SeqCst);
        let mut pending = [&ack[..], &ack[..], b"PING\r\nPU"].concat();
        let mut framing = Framing::Ops;
        let out = framing.whole(&mut pending, &acks);
        assert_eq!(out, [&ack[..], b"PING\r\n"].concat());
        assert_eq!(pending, b"PU");
        assert_eq!(
            (
                acks.dropped.load(Ordering::SeqCst),
                acks.passed.load(Ordering::SeqCst)
            ),
            (1, 1)
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_ack_is_redelivered_after_ack_wait() {
        use async_nats::jetstream::{self, consumer::pull};
        let server = NatsServer::start(NatsConfig {
            backend: Backend::Binary,
            ..Default::default()
        })
        .await
        .expect("a nats-server binary");
        let proxy = FaultProxy::start(server.url()).await.unwrap();
        let client = async_nats::connect(proxy.url()).await.unwrap();
        let js = jetstream::new(client.clone());
        let stream = js
            .create_stream(jetstream::stream::Config {
                name: "ACKS".into(),
                subjects: vec!["acks".into()],
                ..Default::default()
            })
            .await
            .unwrap();
        let consumer = stream
            .create_consumer(pull::Config {
                durable_name: Some("c".into()),
                ack_wait: Duration::from_secs(1),
                ..Default::default()
            })
            .await
            .unwrap();
        js.publish("acks", "once".into())
            .await
            .unwrap()
            .await
            .unwrap();
        let mut messages = consumer.messages().await.unwrap();
        let mut next = async || {
            tokio::time::timeout(Duration::from_secs(30), messages.next())
                .await
                .expect("a delivery within 30 s")
                .unwrap()
                .unwrap()
        };
        proxy.drop_acks(1);
        let first = next().await;
        assert_eq!(first.info().unwrap().delivered, 1);
        first.ack().await.unwrap();
        // Lost: JetStream delivers it again after ack_wait; that ack reaches the server.
        let again = next().await;
        assert_eq!(again.info().unwrap().delivered, 2);
        assert_eq!(again.payload.as_ref(), b"once");
        again.double_ack().await.unwrap();
        assert_eq!(
            proxy.acks(),
            AckCount {
                passed: 1,
                dropped: 1
            }
        );
    }
}
