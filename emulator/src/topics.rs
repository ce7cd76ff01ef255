//! Waking each `wait_*` for what concerns it only: a waiter on run `r` is woken by records about
//! `r`, not by every heartbeat, hop and completion event of every other run.
//!
//! Every record the emulator pushes names its topics ([`Topic::of`]); the push notes them
//! ([`Topics::touch`], nothing to do when nobody waits), and the next [`Topics::wake`] (called
//! where the emulator used to wake everyone) wakes the waiters of those topics alone. A waiter
//! also re-checks every [`RECHECK`], so a change that came without a record about it (none is
//! known) delays it by that much at worst, never hangs it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::watch;

use crate::recorder::RecordKind;

/// How often a waiter re-checks even when nothing about its topic was recorded.
pub(crate) const RECHECK: Duration = Duration::from_millis(100);
/// Topics noted between two wakes beyond which every waiter is woken instead (a burst).
const TOUCHED_KEPT: usize = 4096;

/// What a waiter waits on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Topic {
    /// A run: its trigger, hops, completion events, timers, DLQ entries, settling.
    Run(String),
    /// A service: its registrations and heartbeats.
    Service(String),
    /// Any DLQ entry.
    Dlq,
    /// Any conformance violation.
    Violations,
}

impl Topic {
    /// The topics a record is about (at most two).
    fn of(kind: &RecordKind) -> [Option<Topic>; 2] {
        let run = |id: &str| Some(Topic::Run(id.to_owned()));
        match kind {
            RecordKind::Registration { service, .. }
            | RecordKind::FlowsWithheld { service, .. } => {
                [Some(Topic::Service(service.clone())), None]
            }
            RecordKind::Heartbeat { heartbeat } => {
                [Some(Topic::Service(heartbeat.service.clone())), None]
            }
            RecordKind::Completion { event } => [run(&event.flow_run_id), None],
            RecordKind::Dlq { entry, .. } => [
                Some(Topic::Dlq),
                entry.as_ref().and_then(|e| run(&e.envelope.flow_run_id)),
            ],
            RecordKind::Resend { run_id, .. }
            | RecordKind::Trigger { run_id, .. }
            | RecordKind::Hop { run_id, .. }
            | RecordKind::TimerArmed { run_id, .. }
            | RecordKind::TimerFired { run_id, .. }
            | RecordKind::RunSettled { run_id, .. } => [run(run_id), None],
            RecordKind::Violation { .. } => [Some(Topic::Violations), None],
            _ => [None, None],
        }
    }
}

/// The waiters' topics, and those touched since the last wake.
#[derive(Default)]
pub(crate) struct Topics {
    waiting: Mutex<HashMap<Topic, watch::Sender<u64>>>,
    /// How many topics have waiters: a push skips all of this when none does.
    active: AtomicUsize,
    touched: Mutex<Vec<Topic>>,
    /// More was touched than kept: the next wake wakes every waiter.
    overflow: AtomicBool,
}

impl Topics {
    /// Notes the topics of a record just pushed (under the state lock, so a waiter that
    /// subscribed before its check is always seen here).
    pub(crate) fn touch(&self, kind: &RecordKind) {
        if self.active.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut touched = lock(&self.touched);
        for topic in Topic::of(kind).into_iter().flatten() {
            if touched.len() >= TOUCHED_KEPT {
                touched.clear();
                self.overflow.store(true, Ordering::Relaxed);
            }
            touched.push(topic);
        }
    }

    /// Wakes the waiters of the topics touched since the last wake.
    pub(crate) fn wake(&self) {
        let touched = std::mem::take(&mut *lock(&self.touched));
        let everyone = self.overflow.swap(false, Ordering::Relaxed);
        if touched.is_empty() && !everyone {
            return;
        }
        let waiting = lock(&self.waiting);
        if everyone {
            for tx in waiting.values() {
                tx.send_modify(|v| *v += 1);
            }
            return;
        }
        for topic in &touched {
            if let Some(tx) = waiting.get(topic) {
                tx.send_modify(|v| *v += 1);
            }
        }
    }

    /// Wakes for `topic` until the subscription is dropped.
    pub(crate) fn subscribe(&self, topic: Topic) -> Subscription<'_> {
        let mut waiting = lock(&self.waiting);
        let rx = waiting
            .entry(topic.clone())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe();
        self.active.store(waiting.len(), Ordering::Relaxed);
        Subscription {
            topics: self,
            topic,
            rx: Some(rx),
        }
    }
}

/// A waiter's wakes: see [`Topics::subscribe`].
pub(crate) struct Subscription<'t> {
    topics: &'t Topics,
    topic: Topic,
    rx: Option<watch::Receiver<u64>>,
}

impl Subscription<'_> {
    /// Marks every wake so far seen (before the waiter checks the state).
    pub(crate) fn seen(&mut self) {
        if let Some(rx) = &mut self.rx {
            rx.borrow_and_update();
        }
    }

    /// Until a wake after the last [`Subscription::seen`], or [`RECHECK`].
    pub(crate) async fn next(&mut self) {
        if let Some(rx) = &mut self.rx {
            let _ = tokio::time::timeout(RECHECK, rx.changed()).await;
        }
    }
}

impl Drop for Subscription<'_> {
    fn drop(&mut self) {
        drop(self.rx.take());
        let mut waiting = lock(&self.topics.waiting);
        if waiting
            .get(&self.topic)
            .is_some_and(|tx| tx.receiver_count() == 0)
        {
            waiting.remove(&self.topic);
        }
        self.topics.active.store(waiting.len(), Ordering::Relaxed);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use triggers_sdk::wire::CompletionEvent;

    fn completion(run: &str) -> RecordKind {
        RecordKind::Completion {
            event: CompletionEvent {
                flow_run_id: run.into(),
                ..CompletionEvent::default()
            },
        }
    }

    /// A waiter is woken by a record about its topic, not by one about another; and the
    /// topics' table empties when the last waiter goes.
    #[tokio::test]
    async fn a_waiter_wakes_for_its_topic_only() {
        let topics = Topics::default();
        topics.touch(&completion("r1")); // nobody waits: nothing noted
        assert!(lock(&topics.touched).is_empty());
        let mut sub = topics.subscribe(Topic::Run("r1".into()));
        sub.seen();
        topics.touch(&completion("r2"));
        topics.wake();
        let rx = sub.rx.as_mut().unwrap();
        assert!(!rx.has_changed().unwrap(), "woken by another run");
        topics.touch(&completion("r1"));
        topics.wake();
        assert!(rx.has_changed().unwrap(), "not woken by its run");
        drop(sub);
        assert!(lock(&topics.waiting).is_empty());
        assert_eq!(topics.active.load(Ordering::Relaxed), 0);
    }

    /// A burst beyond what is noted wakes everyone rather than losing a wake.
    #[tokio::test]
    async fn a_burst_wakes_every_waiter() {
        let topics = Topics::default();
        let mut sub = topics.subscribe(Topic::Run("r0".into()));
        sub.seen();
        for i in 1..=TOUCHED_KEPT + 1 {
            topics.touch(&completion(&format!("r{i}")));
        }
        topics.wake();
        assert!(sub.rx.as_mut().unwrap().has_changed().unwrap());
    }
}
