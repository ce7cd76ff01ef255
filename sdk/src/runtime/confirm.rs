//! Confirming plain publishes: an event no stream keeps must have reached the server before the
//! delivery that produced it is acked, or a connection lost in between would lose the event while
//! the ack, sent again on the new connection, settles the delivery.
//!
//! async-nats' `flush` only writes the client's buffer to the socket: bytes in the kernel when
//! the connection breaks are gone all the same. A confirmation is therefore a round trip, as Go's
//! `Flush` is: a ping published on this runtime's own inbox behind the publishes it confirms,
//! received back. The server reads a connection in order, so the echo proves it read every
//! publish before the ping, provided they travelled on the same connection: each publish carries
//! the client's connection count read before it was queued, each echo the count read after it
//! arrived, and a confirmation holds only when the two are equal (a reconnect in between fails
//! the delivery, which is given back and reported again).
//!
//! A server that never echoes a ping on a live connection (the service's user may not publish to
//! `_INBOX.>`) would hold every delivery: once the server has said so (a permissions violation
//! for the ping's inbox, [`PingRefusals`]), or after [`SILENCES_BEFORE_FLUSH`] silences in a
//! row without a word, the runtime warns once and confirms with a flush instead (the write, on an
//! unchanged connection), as before round trips. A server merely slow to echo (loaded, or a
//! network pause) gets pinged again: it keeps the stronger guarantee.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;

tokio::task_local! {
    /// Set while a delivery is handled ([`Runtime::handle`](super::service::Runtime)): its plain
    /// publishes that may not have reached the server yet, `None` for none. They are confirmed
    /// once, before the delivery's ack, with one round trip shared by every delivery waiting
    /// then; a JetStream ack in between confirms them already (a hop).
    pub(crate) static UNCONFIRMED: std::cell::Cell<Option<Unconfirmed>>;
}

/// How long a ping's echo is waited for before another ping is sent (the first may have been lost
/// with its connection).
const ECHO_PATIENCE: Duration = Duration::from_secs(2);

/// Pings in a row that went unanswered on a live, unchanged connection, the server saying
/// nothing, before confirmations become flushes: a server that has not refused the pings may be
/// slow, and is given several chances.
const SILENCES_BEFORE_FLUSH: u32 = 3;

/// Whether the server refused this client's pings: a permissions violation for a publish to an
/// inbox (the only inbox publishes a runtime makes are its pings), reported by async-nats as a
/// server error on the connection's events. Cheap to clone: clones share the answer.
#[derive(Debug, Clone, Default)]
pub(crate) struct PingRefusals(std::sync::Arc<AtomicBool>);

impl PingRefusals {
    /// Notes `event` if it is such a refusal.
    pub(crate) fn observe(&self, event: &async_nats::Event) {
        if let async_nats::Event::ServerError(async_nats::ServerError::Other(text)) = event
            && text
                .to_ascii_lowercase()
                .contains("permissions violation for publish to")
            && text.contains("_INBOX.")
        {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    fn refused(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// A delivery's plain publishes waiting for confirmation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unconfirmed {
    /// The number of the last of them.
    pub(crate) last: u64,
    /// The client's connection count before the first of them was queued.
    pub(crate) connection: u64,
}

impl Unconfirmed {
    /// Adds a publish numbered `n`, queued on `connection`, to those `waiting` (if any).
    pub(crate) fn and(waiting: Option<Unconfirmed>, n: u64, connection: u64) -> Unconfirmed {
        Unconfirmed {
            last: n,
            connection: waiting.map_or(connection, |w| w.connection),
        }
    }
}

/// Where plain publishes stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Confirmation {
    /// Not confirmed yet.
    Pending,
    /// Confirmed: they reached the server.
    Held,
    /// A confirmation came on another connection than theirs: they may be lost with it.
    Lost,
}

impl Confirmation {
    /// Where the publishes `waiting` stand when every plain publish up to `confirmed.0` is
    /// confirmed on connection `confirmed.1`.
    fn of(confirmed: (u64, u64), waiting: Unconfirmed) -> Confirmation {
        let (up_to, on) = confirmed;
        if up_to < waiting.last {
            Confirmation::Pending
        } else if on == waiting.connection {
            Confirmation::Held
        } else {
            Confirmation::Lost
        }
    }
}

/// Why publishes found [`Confirmation::Lost`] fail their delivery.
pub(crate) const LOST: &str = "the connection to NATS was replaced before the server confirmed \
                               the events published on it (they may be lost)";

/// Why publishes still [`Confirmation::Pending`] after `patience` fail their delivery.
pub(crate) fn not_confirmed_within(patience: Duration) -> String {
    format!("the server did not confirm within {patience:?}")
}

/// The client's connection count: 1 for its first connection, one more for every reconnect.
pub(crate) fn connection(client: &async_nats::Client) -> u64 {
    client.statistics().connects.load(Ordering::SeqCst)
}

/// Confirms plain publishes with as few round trips as the connection allows. Each plain publish
/// gets a number once it is queued on the connection; an echo of a ping sent after it confirms
/// it, and so does the ack of a JetStream publish sent after it, both on the same connection.
/// Deliveries waiting at once share one round trip rather than each making its own.
#[derive(Debug, Default)]
pub(crate) struct Confirmer {
    /// Plain publishes queued on the connection, numbered from 1.
    sent: AtomicU64,
    /// Every plain publish up to `.0` reached the server, if it was queued on connection `.1`.
    confirmed: tokio::sync::watch::Sender<(u64, u64)>,
    /// A round trip is on its way.
    pinging: AtomicBool,
    /// The server refused the pings, or left [`SILENCES_BEFORE_FLUSH`] of them in a row
    /// unanswered on a live connection: confirmations are flushes from then on.
    silent: AtomicBool,
    /// Pings in a row unanswered on a live, unchanged connection.
    silences: std::sync::atomic::AtomicU32,
    /// What the connection's events said of the pings.
    refusals: PingRefusals,
    /// The inbox pings come back on, subscribed on the first round trip.
    echo: tokio::sync::Mutex<Option<Echo>>,
}

#[derive(Debug)]
struct Echo {
    inbox: String,
    pings: async_nats::Subscriber,
}

impl Confirmer {
    /// A confirmer told of the server's refusals by `refusals`, which the connection's event
    /// callback feeds ([`PingRefusals::observe`]).
    pub(crate) fn new(refusals: PingRefusals) -> Self {
        Confirmer {
            refusals,
            ..Confirmer::default()
        }
    }

    /// Numbers a plain publish just queued.
    pub(crate) fn queued(&self) -> u64 {
        self.sent.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// The number of the last plain publish queued so far: what a message sent now follows.
    pub(crate) fn sent(&self) -> u64 {
        self.sent.load(Ordering::SeqCst)
    }

    /// Every plain publish up to `n` has reached the server, if queued on `connection`.
    pub(crate) fn confirmed_up_to(&self, n: u64, connection: u64) {
        self.confirmed.send_if_modified(|c| {
            let newer = n > c.0;
            if newer {
                *c = (n, connection);
            }
            newer
        });
    }

    /// Whether the publishes `waiting` are known to have reached the server: confirmed on the
    /// connection they were queued on.
    pub(crate) fn holds(&self, waiting: Unconfirmed) -> bool {
        self.status(waiting) == Confirmation::Held
    }

    /// Where the publishes `waiting` stand.
    pub(crate) fn status(&self, waiting: Unconfirmed) -> Confirmation {
        Confirmation::of(*self.confirmed.borrow(), waiting)
    }

    /// Returns once the publishes `waiting` have reached the server: at once when something
    /// confirmed them already, else with a round trip, this caller's or one on its way. Fails
    /// when the connection they were queued on was replaced before they were confirmed (they
    /// may be lost), and after [`super::outcome::REPORT_PATIENCE`] (NATS unreachable all that
    /// time).
    pub(crate) async fn confirm(
        &self,
        client: &async_nats::Client,
        waiting: Unconfirmed,
    ) -> Result<(), String> {
        let patience = super::outcome::REPORT_PATIENCE;
        tokio::time::timeout(patience, self.confirm_unbounded(client, waiting))
            .await
            .unwrap_or_else(|_| Err(not_confirmed_within(patience)))
    }

    async fn confirm_unbounded(
        &self,
        client: &async_nats::Client,
        waiting: Unconfirmed,
    ) -> Result<(), String> {
        /// Clears `pinging` however the round trip ends, a cancelled wait included, and wakes
        /// the callers waiting for it if it confirmed nothing (they would otherwise wait on,
        /// with nobody pinging): one of them pings next.
        struct Pinging<'a> {
            confirmer: &'a Confirmer,
            up_to: u64,
        }
        impl Drop for Pinging<'_> {
            fn drop(&mut self) {
                self.confirmer.pinging.store(false, Ordering::SeqCst);
                if self.confirmer.confirmed.borrow().0 == self.up_to {
                    self.confirmer.confirmed.send_modify(|_| {});
                }
            }
        }
        let mut confirmed = self.confirmed.subscribe();
        loop {
            let now = *confirmed.borrow_and_update();
            match Confirmation::of(now, waiting) {
                Confirmation::Held => return Ok(()),
                Confirmation::Lost => return Err(LOST.into()),
                Confirmation::Pending => {}
            }
            let up_to = now.0;
            if !self.pinging.swap(true, Ordering::SeqCst) {
                let _pinging = Pinging {
                    confirmer: self,
                    up_to,
                };
                if self.silent.load(Ordering::SeqCst) {
                    self.flush(client).await?;
                } else {
                    self.round_trip(client).await?;
                }
                continue;
            }
            // Another caller's round trip: wait for what it confirms, or for its end (then
            // make one). No timer: its end always wakes this wait.
            if confirmed.changed().await.is_err() {
                return Err("the confirmer was dropped".into());
            }
        }
    }

    /// Pings this runtime's inbox behind every plain publish queued so far and waits up to
    /// [`ECHO_PATIENCE`] for the echo (an echo of an earlier, late ping confirms what it
    /// follows). Returns without confirming when no echo came: the caller pings again.
    async fn round_trip(&self, client: &async_nats::Client) -> Result<(), String> {
        let mut echo = self.echo.lock().await;
        if echo.is_none() {
            let inbox = client.new_inbox();
            let pings = client
                .subscribe(inbox.clone())
                .await
                .map_err(|e| format!("cannot subscribe to the confirmation inbox: {e}"))?;
            *echo = Some(Echo { inbox, pings });
        }
        let Some(Echo { inbox, pings }) = echo.as_mut() else {
            return Err("no confirmation inbox".into());
        };
        let target = self.sent();
        let pinged_on = connection(client);
        client
            .publish(inbox.clone(), target.to_string().into())
            .await
            .map_err(|e| format!("cannot publish a confirmation ping: {e}"))?;
        let deadline = tokio::time::Instant::now() + ECHO_PATIENCE;
        loop {
            let next = tokio::time::timeout_at(deadline, pings.next()).await;
            match next {
                Ok(Some(ping)) => {
                    let on = connection(client);
                    let Some(n) = std::str::from_utf8(&ping.payload)
                        .ok()
                        .and_then(|n| n.parse::<u64>().ok())
                    else {
                        continue;
                    };
                    self.silences.store(0, Ordering::SeqCst);
                    self.confirmed_up_to(n, on);
                    if n >= target {
                        return Ok(());
                    }
                }
                Ok(None) => {
                    *echo = None;
                    return Err("the confirmation inbox was closed".into());
                }
                Err(_) => {
                    let connected =
                        client.connection_state() == async_nats::connection::State::Connected;
                    if connected && connection(client) == pinged_on {
                        // Not lost with a connection: the server took the ping. Refused it (a
                        // permission), or silent too often to be only slow: flushes from now on.
                        let silences = self.silences.fetch_add(1, Ordering::SeqCst) + 1;
                        let refused = self.refusals.refused();
                        if refused || silences >= SILENCES_BEFORE_FLUSH {
                            let why = if refused {
                                "the server refused it (this service may not publish to _INBOX.>)"
                                    .to_owned()
                            } else {
                                format!("{silences} pings in a row got no echo")
                            };
                            tracing::warn!(
                                inbox = inbox.as_str(),
                                "a confirmation ping got no echo in {ECHO_PATIENCE:?} on a live \
                                 connection, and {why}; completion events no stream keeps are \
                                 confirmed by a flush from now on, which a connection breaking \
                                 just before an ack can defeat"
                            );
                            self.silent.store(true, Ordering::SeqCst);
                        } else {
                            tracing::debug!(
                                inbox = inbox.as_str(),
                                silences,
                                "a confirmation ping got no echo in {ECHO_PATIENCE:?} on a live \
                                 connection; pinging again"
                            );
                        }
                    }
                    return Ok(());
                }
            }
        }
    }

    /// A confirmation by flush, for a server that does not echo pings: every plain publish queued
    /// so far written to the socket, on a connection that did not change meanwhile.
    async fn flush(&self, client: &async_nats::Client) -> Result<(), String> {
        let target = self.sent();
        let on = connection(client);
        client.flush().await.map_err(|e| e.to_string())?;
        if connection(client) == on {
            self.confirmed_up_to(target, on);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use natsbox::FaultProxy;

    use super::*;

    /// A nats-server behind a [`FaultProxy`], a client through it, and a confirmer that has made
    /// its first round trip (its inbox is subscribed before the hold); the publish it confirmed.
    struct Setup {
        _server: natsbox::NatsServer,
        proxy: FaultProxy,
        client: async_nats::Client,
        confirmer: Arc<Confirmer>,
        first: Unconfirmed,
    }

    /// The set-up, then the server held (it reads nothing the client sends) and a publish made
    /// that it has not read.
    async fn held_publish() -> (Setup, Unconfirmed) {
        let server = natsbox::NatsServer::start(natsbox::NatsConfig {
            backend: natsbox::Backend::Binary,
            ..Default::default()
        })
        .await
        .expect("a nats-server binary");
        let proxy = FaultProxy::start(server.url()).await.unwrap();
        let client = async_nats::connect(proxy.url()).await.unwrap();
        let confirmer = Arc::new(Confirmer::default());
        let first = publish(&client, &confirmer).await;
        confirmer.confirm(&client, first).await.unwrap();
        proxy.hold(true);
        let waiting = publish(&client, &confirmer).await;
        let setup = Setup {
            _server: server,
            proxy,
            client,
            confirmer,
            first,
        };
        (setup, waiting)
    }

    /// Publishes a plain message as the runtime does: numbered, with its connection.
    async fn publish(client: &async_nats::Client, confirmer: &Confirmer) -> Unconfirmed {
        let on = connection(client);
        client.publish("events", "e".into()).await.unwrap();
        Unconfirmed::and(None, confirmer.queued(), on)
    }

    /// Confirms `waiting` in a task of its own.
    fn spawn_confirm(
        confirmer: &Arc<Confirmer>,
        client: &async_nats::Client,
        waiting: Unconfirmed,
    ) -> tokio::task::JoinHandle<Result<(), String>> {
        let (confirmer, client) = (confirmer.clone(), client.clone());
        tokio::spawn(async move { confirmer.confirm(&client, waiting).await })
    }

    /// Publishes while the server reads nothing for `held` and checks that nothing confirms it
    /// meanwhile, and that it is confirmed once the server reads it. Returns the confirmer.
    async fn confirmed_after_a_hold_of(held: Duration) -> Arc<Confirmer> {
        let (setup, waiting) = held_publish().await;
        let confirming = spawn_confirm(&setup.confirmer, &setup.client, waiting);
        // Written to the socket is not read by the server: no confirmation while it is held.
        tokio::time::sleep(held).await;
        assert!(
            !confirming.is_finished(),
            "confirmed while the server had read nothing"
        );
        setup.proxy.hold(false);
        tokio::time::timeout(Duration::from_secs(10), confirming)
            .await
            .expect("confirmed once the server read it")
            .unwrap()
            .unwrap();
        setup.confirmer
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_publish_is_confirmed_only_once_the_server_has_read_it() {
        confirmed_after_a_hold_of(Duration::from_millis(500)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_publish_lost_with_its_connection_is_not_confirmed_by_the_next_one() {
        let (setup, lost) = held_publish().await;
        let Setup {
            proxy,
            client,
            confirmer,
            first,
            ..
        } = &setup;
        // Written to the proxy, which holds it (async-nats' flush waits for a connection).
        tokio::time::timeout(Duration::from_secs(5), client.flush())
            .await
            .expect("written within 5 s")
            .unwrap();
        // The connection breaks with the publish unread; the client connects again.
        proxy.cut();
        proxy.hold(false);
        let err = tokio::time::timeout(Duration::from_secs(20), confirmer.confirm(client, lost))
            .await
            .expect("an answer")
            .expect_err("a publish lost with its connection was confirmed");
        assert!(err.contains("replaced"), "{err}");
        assert!(connection(client) > first.connection);

        // What is published on the new connection is confirmed again.
        let next = publish(client, confirmer).await;
        confirmer.confirm(client, next).await.unwrap();
    }

    /// The caller making the round trip goes away (its delivery cancelled) while another waits
    /// for it: the other takes over rather than waiting for an echo nobody reads.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wait_outlives_the_round_trip_it_waited_for() {
        let (setup, waiting) = held_publish().await;
        let pinger = spawn_confirm(&setup.confirmer, &setup.client, waiting);
        while !setup.confirmer.pinging.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let waiter = spawn_confirm(&setup.confirmer, &setup.client, waiting);
        tokio::time::sleep(Duration::from_millis(200)).await;
        pinger.abort();
        setup.proxy.hold(false);
        tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the waiter confirmed once the pinger was gone")
            .unwrap()
            .unwrap();
    }

    /// A nats-server whose only user may not publish to `_INBOX.>`: a locked-down service's
    /// permissions. Stopped, and its config removed, when dropped.
    struct Restricted {
        server: std::process::Child,
        url: String,
        dir: std::path::PathBuf,
    }

    impl Drop for Restricted {
        fn drop(&mut self) {
            let _ = self.server.kill();
            let _ = self.server.wait();
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn restricted() -> Restricted {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let dir = std::env::temp_dir().join(format!("confirm-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let conf = dir.join("nats.conf");
        std::fs::write(
            &conf,
            format!(
                "listen: 127.0.0.1:{port}\nauthorization {{ users = [ {{ user: svc, password: svc, \
                 permissions: {{ publish: {{ deny: [\"_INBOX.>\"] }} }} }} ] }}\n"
            ),
        )
        .unwrap();
        let bin = std::env::var_os("TRIGGERS_NATS_SERVER_BIN").unwrap_or("nats-server".into());
        let server = std::process::Command::new(bin)
            .arg("-c")
            .arg(&conf)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("a nats-server binary (TRIGGERS_NATS_SERVER_BIN or on PATH)");
        Restricted {
            server,
            url: format!("nats://127.0.0.1:{port}"),
            dir,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_server_that_refuses_pings_gets_flushes_instead_of_a_stalled_service() {
        let server = restricted();
        let refusals = PingRefusals::default();
        let mut client = None;
        for _ in 0..100 {
            let refusals = refusals.clone();
            let options =
                async_nats::ConnectOptions::with_user_and_password("svc".into(), "svc".into())
                    .event_callback(move |event| {
                        let refusals = refusals.clone();
                        async move {
                            refusals.observe(&event);
                        }
                    });
            if let Ok(c) = options.connect(&server.url).await {
                client = Some(c);
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let client = client.expect("connects to the restricted server");
        // Told by the server: flushes after the first silence. Not told (no event callback):
        // after SILENCES_BEFORE_FLUSH of them.
        for (confirmer, silences) in [
            (Confirmer::new(refusals), 1),
            (Confirmer::default(), SILENCES_BEFORE_FLUSH),
        ] {
            for round in 0..2 {
                let waiting = publish(&client, &confirmer).await;
                // Well within the minute a delivery would otherwise wait before it is given back.
                tokio::time::timeout(Duration::from_secs(15), confirmer.confirm(&client, waiting))
                    .await
                    .unwrap_or_else(|_| panic!("round {round}: no confirmation within 15 s"))
                    .unwrap();
                assert!(confirmer.silent.load(Ordering::SeqCst), "round {round}");
                assert_eq!(confirmer.silences.load(Ordering::SeqCst), silences);
            }
        }
    }

    /// A server slow to echo (here: reading nothing for longer than the echo patience, on a
    /// live connection) is pinged again, and keeps the round-trip guarantee.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_late_echo_is_waited_for_and_keeps_round_trips() {
        let confirmer = confirmed_after_a_hold_of(ECHO_PATIENCE + Duration::from_secs(1)).await;
        assert!(
            !confirmer.silent.load(Ordering::SeqCst),
            "one late echo made confirmations flushes"
        );
        assert_eq!(confirmer.silences.load(Ordering::SeqCst), 0);
    }
}
