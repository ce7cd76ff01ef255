//! Settling a delivery: its ack once what it reported has reached the server, else its return
//! for a redelivery.
//!
//! A delivery whose plain publishes (a completion event no stream keeps) are not confirmed yet
//! does not wait for the round trip that confirms them in a task of its own: it is handed to
//! the settler, which makes the round trip for every delivery handed over meanwhile and then
//! acks each one it confirmed. Waking dozens of parked tasks for each echo, each to send one ack,
//! cost the runtime more CPU than the round trip itself. A delivery keeps its place among those
//! in flight (its permit) until it is settled, so the settler holds at most `max_concurrency`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use tokio::sync::OwnedSemaphorePermit;

use crate::runtime::confirm::{Confirmation, LOST, Unconfirmed, not_confirmed_within};
use crate::runtime::outcome::{Fatal, REPORT_PATIENCE};
use crate::runtime::service::Runtime;

/// The longest pause before a message given back is redelivered.
const MAX_REDELIVERY_DELAY: Duration = Duration::from_secs(30);

/// A delivery whose outcome is reported, waiting for the confirmation of its plain publishes.
struct Unsettled {
    delivery: Delivery,
    waiting: Unconfirmed,
    /// When it was handed over: it is given back after [`REPORT_PATIENCE`] unconfirmed.
    since: tokio::time::Instant,
    /// Its place among the deliveries in flight, given up once it is settled.
    permit: OwnedSemaphorePermit,
}

/// What settling a delivery needs of it.
pub(crate) struct Delivery {
    pub(crate) msg: jetstream::Message,
    /// Its idempotency key, remembered as handled once it is acked.
    pub(crate) key: Option<String>,
    /// Which delivery of the message this is (1 for the first).
    pub(crate) delivered: i64,
    /// Whether JetStream will deliver it no more.
    pub(crate) last: bool,
}

/// The deliveries handed over, and whether a settler task is at work on them.
#[derive(Default)]
pub(crate) struct Settler {
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    unsettled: Vec<Unsettled>,
    running: bool,
}

impl Settler {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Runtime {
    /// Settles `delivery` once its publishes `waiting` are confirmed: now, when something
    /// confirmed them already; else by the settler, started if none is at work.
    pub(crate) async fn settle_when_confirmed(
        self: &Arc<Self>,
        delivery: Delivery,
        waiting: Unconfirmed,
        permit: OwnedSemaphorePermit,
    ) {
        let status = self.confirmer.status(waiting);
        if status != Confirmation::Pending {
            self.settle(delivery, verdict(status)).await;
            drop(permit);
            return;
        }
        let start = {
            let mut queue = self.settler.lock();
            queue.unsettled.push(Unsettled {
                delivery,
                waiting,
                since: tokio::time::Instant::now(),
                permit,
            });
            !std::mem::replace(&mut queue.running, true)
        };
        if start {
            tokio::spawn(self.clone().run_settler());
        }
    }

    /// Makes round trips for the deliveries handed over and settles them, until none is left.
    async fn run_settler(self: Arc<Self>) {
        /// Marks the settler stopped if it ends otherwise than by finding no work (a panic),
        /// so that the next hand-over starts one.
        struct Running<'a> {
            settler: &'a Settler,
            armed: bool,
        }
        impl Drop for Running<'_> {
            fn drop(&mut self) {
                if self.armed {
                    self.settler.lock().running = false;
                }
            }
        }
        let mut running = Running {
            settler: &self.settler,
            armed: true,
        };
        let mut pending: Vec<Unsettled> = Vec::new();
        loop {
            let newest = {
                let mut queue = self.settler.lock();
                pending.append(&mut queue.unsettled);
                let newest = pending.iter().map(|u| u.waiting).max_by_key(|w| w.last);
                if newest.is_none() {
                    // Stopped under the lock a hand-over takes: the next one starts a settler.
                    queue.running = false;
                    running.armed = false;
                }
                newest
            };
            let Some(newest) = newest else {
                return;
            };
            // A round trip behind the newest publish waiting (one on its way counts); its
            // verdict is read for each delivery below, as they may differ by connection.
            let trip = self.confirmer.confirm(&self.client, newest).await;
            let mut still = Vec::new();
            for unsettled in pending.drain(..) {
                let result = match self.confirmer.status(unsettled.waiting) {
                    Confirmation::Pending if unsettled.since.elapsed() < REPORT_PATIENCE => {
                        still.push(unsettled);
                        continue;
                    }
                    // Past its patience: what the round trip said, if it failed.
                    Confirmation::Pending if let Err(e) = &trip => {
                        Err(Fatal(format!("confirm the published events: {e}")))
                    }
                    status => verdict(status),
                };
                let Unsettled {
                    delivery, permit, ..
                } = unsettled;
                self.settle(delivery, result).await;
                drop(permit);
            }
            pending = still;
            if !pending.is_empty() && trip.is_err() {
                // NATS refused the round trip (no connection): not at once again.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    /// Acks a delivery whose outcome is reported (and remembers it handled), or gives it back
    /// for a redelivery when it could not be, or gives it up on its last delivery.
    pub(crate) async fn settle(&self, delivery: Delivery, result: Result<(), Fatal>) {
        let Delivery {
            msg,
            key,
            delivered,
            last,
        } = delivery;
        match result {
            Ok(()) => {
                if let Some(k) = key {
                    self.lock_processed().insert(k, ());
                }
                if let Err(e) = msg.ack().await {
                    tracing::warn!(
                        "ack failed (the message will be redelivered and recognised): {e}"
                    );
                }
            }
            Err(Fatal(reason)) if last => {
                tracing::error!(
                    "a message could not be handled nor dead-lettered in {delivered} deliveries, and is given up: {reason}"
                );
                self.stats
                    .given_up
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let _ = msg.ack_with(AckKind::Term).await;
            }
            Err(Fatal(reason)) => {
                let delay = Duration::from_secs(1u64 << (delivered - 1).clamp(0, 5))
                    .min(MAX_REDELIVERY_DELAY);
                tracing::warn!(
                    "cannot report an outcome ({reason}); delivery {delivered} of {} is given back, redelivered in {delay:?}",
                    self.config.max_deliver
                );
                let _ = msg.ack_with(AckKind::Nak(Some(delay))).await;
            }
        }
    }
}

/// The verdict on a delivery's publishes: confirmed, maybe lost with their connection, or
/// unconfirmed past [`REPORT_PATIENCE`] (the settler keeps those waiting until then).
fn verdict(status: Confirmation) -> Result<(), Fatal> {
    let why = match status {
        Confirmation::Held => return Ok(()),
        Confirmation::Lost => LOST.to_owned(),
        Confirmation::Pending => not_confirmed_within(REPORT_PATIENCE),
    };
    Err(Fatal(format!("confirm the published events: {why}")))
}
