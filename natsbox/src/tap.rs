//! A wire tap: one plain NATS connection that subscribes to several subjects and yields every
//! message it receives, on all of them, **in the order the server sent them**, with its reply
//! subject and its headers.
//!
//! async-nats gives each subscription a channel of its own, so the order of two messages on two
//! subscriptions is lost; one wildcard subscription keeps it but receives everything. The tap
//! speaks the client protocol itself (`CONNECT`, `SUB`, `PING`/`PONG`, `MSG`/`HMSG`) on one TCP
//! connection, for what an observer needs and nothing else: it never publishes. It reconnects
//! (with its subscriptions) when the connection drops, and says so in [`TapEvent::Reconnected`]
//! (what passed meanwhile is not known). Its queue is bounded: a message that does not fit is
//! dropped and counted ([`Tap::dropped`]), never waited for (the server would drop the
//! connection of a reader that falls behind).
//!
//! ```no_run
//! # async fn example() {
//! use natsbox::tap::{Tap, TapOptions, TapEvent};
//! let (tap, mut events) = Tap::start(TapOptions::new("nats://127.0.0.1:4222"));
//! tap.subscribe("triggers.v2.>");
//! tap.subscribe("$JS.ACK.>");
//! while let Some(TapEvent::Message(m)) = events.recv().await {
//!     println!("{} (reply {:?})", m.subject, m.reply);
//! }
//! # }
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// Where and how the tap connects.
#[derive(Clone)]
pub struct TapOptions {
    /// The server: `nats://host:port`, `host:port`, optionally with `user:password@`; the first of
    /// a comma-separated list.
    pub url: String,
    /// A user and password to log in with (else those of the URL, if any).
    pub user_password: Option<(String, String)>,
    /// The connection's name, as the server shows it.
    pub name: String,
    /// Messages queued for the reader at most; beyond, they are dropped and counted.
    pub capacity: usize,
}

impl std::fmt::Debug for TapOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TapOptions")
            .field("url", &redact(&self.url))
            .field("user", &self.user_password.as_ref().map(|(u, _)| u))
            .field("name", &self.name)
            .field("capacity", &self.capacity)
            .finish()
    }
}

impl TapOptions {
    /// Options for `url`, without credentials, named `triggers-lab wire tap`, queueing at most
    /// 65 536 messages.
    #[must_use]
    pub fn new(url: &str) -> Self {
        TapOptions {
            url: url.to_owned(),
            user_password: None,
            name: "triggers-lab wire tap".into(),
            capacity: 65_536,
        }
    }

    /// These options, logging in as `user`.
    #[must_use]
    pub fn user_and_password(mut self, user: &str, password: &str) -> Self {
        self.user_password = Some((user.to_owned(), password.to_owned()));
        self
    }
}

/// A URL with any password in it hidden.
fn redact(url: &str) -> String {
    match url.rsplit_once('@') {
        Some((_, host)) => format!("<credentials>@{host}"),
        None => url.to_owned(),
    }
}

/// One message as the server sent it to the tap.
#[derive(Debug, Clone)]
pub struct TapMessage {
    /// Its subject.
    pub subject: String,
    /// Its reply subject, if it has one (a request, a JetStream publish awaiting its ack).
    pub reply: Option<String>,
    /// Its headers, in order, as sent (names as spelt).
    pub headers: Vec<(String, String)>,
    /// Its payload.
    pub payload: Bytes,
}

/// What the tap yields.
#[derive(Debug, Clone)]
pub enum TapEvent {
    /// A message, in the order received.
    Message(TapMessage),
    /// The connection was lost and made again (every subscription with it): messages sent
    /// meanwhile were not seen.
    Reconnected,
}

/// A running tap; dropping it closes its connection.
#[derive(Debug)]
pub struct Tap {
    commands: mpsc::UnboundedSender<String>,
    dropped: Arc<AtomicU64>,
    connections: tokio::sync::watch::Receiver<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Tap {
    /// Starts the tap (it connects in the background, and again whenever the connection drops).
    /// Returns it and the receiver of what it sees.
    #[must_use]
    pub fn start(options: TapOptions) -> (Tap, mpsc::Receiver<TapEvent>) {
        let (tx, rx) = mpsc::channel(options.capacity.max(1));
        let (commands, commands_rx) = mpsc::unbounded_channel();
        let dropped = Arc::new(AtomicU64::new(0));
        let (connected, connections) = tokio::sync::watch::channel(0);
        let task = tokio::spawn(run(options, tx, commands_rx, dropped.clone(), connected));
        (
            Tap {
                commands,
                dropped,
                connections,
                task,
            },
            rx,
        )
    }

    /// Adds a subscription (kept across reconnections). Subscribing twice to one subject is
    /// harmless: the tap subscribes once.
    pub fn subscribe(&self, subject: &str) {
        let _ = self.commands.send(subject.to_owned());
    }

    /// Waits (at most `within`) until the tap is connected with its subscriptions in place;
    /// whether it is.
    pub async fn wait_connected(&self, within: Duration) -> bool {
        let mut connections = self.connections.clone();
        tokio::time::timeout(within, connections.wait_for(|n| *n > 0))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Messages dropped because the reader did not keep up (the queue was full).
    #[must_use]
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// A protocol line or a payload longer than this ends the connection (a server never sends one).
const MAX_LINE: usize = 64 * 1024;
const MAX_PAYLOAD: usize = 64 << 20;
/// Subjects subscribed to at most.
const MAX_SUBSCRIPTIONS: usize = 100_000;

async fn run(
    options: TapOptions,
    tx: mpsc::Sender<TapEvent>,
    mut commands: mpsc::UnboundedReceiver<String>,
    dropped: Arc<AtomicU64>,
    connected: tokio::sync::watch::Sender<u64>,
) {
    let mut subjects: Vec<String> = Vec::new();
    let mut backoff = Duration::from_millis(100);
    loop {
        // Subjects asked for while disconnected.
        while let Ok(s) = commands.try_recv() {
            add_subject(&mut subjects, s);
        }
        let before = *connected.borrow();
        match session(
            &options,
            &tx,
            &mut commands,
            &mut subjects,
            &dropped,
            &connected,
        )
        .await
        {
            Ok(()) => return, // the tap was dropped (its command channel closed)
            Err(e) => {
                tracing::debug!(url = %redact(&options.url), "wire tap connection: {e}");
                if tx.is_closed() {
                    return;
                }
            }
        }
        if *connected.borrow() != before {
            backoff = Duration::from_millis(100);
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

fn add_subject(subjects: &mut Vec<String>, s: String) -> bool {
    if subjects.contains(&s) || subjects.len() >= MAX_SUBSCRIPTIONS || s.is_empty() {
        return false;
    }
    subjects.push(s);
    true
}

/// Host, port and credentials of the URL.
fn parse_url(url: &str) -> (String, Option<(String, String)>) {
    let first = url.split(',').next().unwrap_or_default().trim();
    let rest = first.split_once("://").map_or(first, |(_, r)| r);
    let rest = rest.trim_end_matches('/');
    let (creds, host) = match rest.rsplit_once('@') {
        Some((c, h)) => {
            let (u, p) = c.split_once(':').unwrap_or((c, ""));
            (Some((u.to_owned(), p.to_owned())), h)
        }
        None => (None, rest),
    };
    let host = if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:4222")
    };
    (host, creds)
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

async fn session(
    options: &TapOptions,
    tx: &mpsc::Sender<TapEvent>,
    commands: &mut mpsc::UnboundedReceiver<String>,
    subjects: &mut Vec<String>,
    dropped: &AtomicU64,
    connected: &tokio::sync::watch::Sender<u64>,
) -> Result<(), String> {
    let (host, url_creds) = parse_url(&options.url);
    let stream = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(&host))
        .await
        .map_err(|_| format!("connecting to {host} timed out"))?
        .map_err(|e| format!("cannot connect to {host}: {e}"))?;
    let _ = stream.set_nodelay(true);
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::with_capacity(256 * 1024, read);
    let mut line = Vec::new();
    read_line(&mut read, &mut line).await?;
    if !line.starts_with(b"INFO ") {
        return Err("the server did not start with INFO".into());
    }
    let creds = options.user_password.clone().or(url_creds);
    let mut connect = format!(
        "CONNECT {{\"verbose\":false,\"pedantic\":false,\"lang\":\"rust-tap\",\"version\":\"0.1\",\"protocol\":1,\"headers\":true,\"no_responders\":true,\"echo\":true,\"name\":{}",
        json_string(&options.name)
    );
    if let Some((user, pass)) = &creds {
        connect.push_str(&format!(
            ",\"user\":{},\"pass\":{}",
            json_string(user),
            json_string(pass)
        ));
    }
    connect.push_str("}\r\n");
    for (sid, s) in subjects.iter().enumerate() {
        connect.push_str(&format!("SUB {s} {}\r\n", sid + 1));
    }
    connect.push_str("PING\r\n");
    write
        .write_all(connect.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    // Up once the server answered the PING: every subscription is in place.
    loop {
        read_line(&mut read, &mut line).await?;
        if line.starts_with(b"PONG") {
            break;
        }
        if line.starts_with(b"-ERR") {
            return Err(format!(
                "the server refused the tap: {}",
                String::from_utf8_lossy(trimmed(&line))
            ));
        }
    }
    if *connected.borrow() > 0 && tx.try_send(TapEvent::Reconnected).is_err() {
        dropped.fetch_add(1, Ordering::Relaxed);
    }
    connected.send_modify(|n| *n += 1);
    loop {
        tokio::select! {
            command = commands.recv() => match command {
                None => return Ok(()),
                Some(s) => {
                    if add_subject(subjects, s.clone()) {
                        let sub = format!("SUB {s} {}\r\n", subjects.len());
                        write.write_all(sub.as_bytes()).await.map_err(|e| e.to_string())?;
                    }
                }
            },
            read_result = read_line(&mut read, &mut line) => {
                read_result?;
                if line.starts_with(b"PING") {
                    write.write_all(b"PONG\r\n").await.map_err(|e| e.to_string())?;
                } else if line.starts_with(b"MSG ") || line.starts_with(b"HMSG ") {
                    let message = read_message(&mut read, trimmed(&line)).await?;
                    if let Err(mpsc::error::TrySendError::Full(_)) = tx.try_send(TapEvent::Message(message)) {
                        dropped.fetch_add(1, Ordering::Relaxed);
                    }
                } else if line.starts_with(b"-ERR") {
                    tracing::warn!("the wire tap's server says {}", String::from_utf8_lossy(trimmed(&line)));
                }
                // INFO, +OK, PONG: nothing to do.
            }
        }
    }
}

/// One protocol line, without its CRLF, appended to `line` (which the caller clears once it has
/// handled it). Cancel-safe: what a cancelled call read stays in `line`, and the next call goes
/// on from there.
async fn read_line(
    read: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
    line: &mut Vec<u8>,
) -> Result<(), String> {
    if line.ends_with(b"\n") {
        line.clear();
    }
    let room = MAX_LINE.saturating_sub(line.len()) as u64;
    let n = (&mut *read)
        .take(room)
        .read_until(b'\n', line)
        .await
        .map_err(|e| e.to_string())?;
    if n == 0 && !line.ends_with(b"\n") {
        return Err(if room == 0 {
            "a protocol line too long".into()
        } else {
            "the server closed the connection".into()
        });
    }
    if !line.ends_with(b"\n") {
        return Err("a protocol line too long".into());
    }
    Ok(())
}

/// A protocol line without its CRLF.
fn trimmed(line: &[u8]) -> &[u8] {
    let mut end = line.len();
    while end > 0 && (line[end - 1] == b'\n' || line[end - 1] == b'\r') {
        end -= 1;
    }
    &line[..end]
}

/// The message a `MSG`/`HMSG` line announces, read whole.
async fn read_message(
    read: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
    line: &[u8],
) -> Result<TapMessage, String> {
    let text = std::str::from_utf8(line).map_err(|_| "a MSG line that is not UTF-8")?;
    let parts: Vec<&str> = text.split_ascii_whitespace().collect();
    let with_headers = parts.first() == Some(&"HMSG");
    let numbers = if with_headers { 2 } else { 1 };
    // MSG <subject> <sid> [reply] <size> / HMSG <subject> <sid> [reply] <hdr size> <size>
    let (subject, reply, sizes) = match parts.len() - numbers {
        3 => (parts[1], None, &parts[3..]),
        4 => (parts[1], Some(parts[3]), &parts[4..]),
        _ => return Err(format!("a malformed message line: {text}")),
    };
    let parse = |s: &str| {
        s.parse::<usize>()
            .ok()
            .filter(|n| *n <= MAX_PAYLOAD)
            .ok_or_else(|| format!("a malformed size in {text}"))
    };
    let (header_len, total) = if with_headers {
        (parse(sizes[0])?, parse(sizes[1])?)
    } else {
        (0, parse(sizes[0])?)
    };
    if header_len > total {
        return Err(format!("headers longer than the message in {text}"));
    }
    let mut buf = vec![0u8; total + 2];
    read.read_exact(&mut buf).await.map_err(|e| e.to_string())?;
    buf.truncate(total);
    let payload = Bytes::from(buf.split_off(header_len));
    Ok(TapMessage {
        subject: subject.to_owned(),
        reply: reply.map(str::to_owned),
        headers: parse_headers(&buf),
        payload,
    })
}

/// `NATS/1.0[ status]\r\nName: value\r\n...\r\n\r\n` as (name, value) pairs; the status line is
/// skipped, lines without a colon too.
fn parse_headers(block: &[u8]) -> Vec<(String, String)> {
    let text = String::from_utf8_lossy(block);
    text.split("\r\n")
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_give_a_host_and_port_and_their_credentials() {
        assert_eq!(parse_url("nats://127.0.0.1:4222").0, "127.0.0.1:4222");
        assert_eq!(parse_url("localhost").0, "localhost:4222");
        let (host, creds) = parse_url("nats://me:secret@h:1,nats://other:2");
        assert_eq!(host, "h:1");
        assert_eq!(creds, Some(("me".into(), "secret".into())));
        assert!(!format!("{:?}", TapOptions::new("nats://me:secret@h:1")).contains("secret"));
    }

    #[test]
    fn headers_parse_in_order_and_the_status_line_is_skipped() {
        let h = parse_headers(b"NATS/1.0\r\nA: 1\r\nNats-Msg-Id: x:y\r\n\r\n");
        assert_eq!(
            h,
            vec![
                ("A".into(), "1".into()),
                ("Nats-Msg-Id".into(), "x:y".into())
            ]
        );
        assert!(parse_headers(b"NATS/1.0 503\r\n\r\n").is_empty());
    }
}
