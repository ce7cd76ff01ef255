//! [`ControlClient`]: the Rust client of the control API, for the CLI, the terminal UI and
//! tests; it sends [`Request`]s and reads each op's typed reply.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use triggers_sdk::flow::Flow;
use triggers_sdk::transport::DropCounter;

use super::access::{ControlAccess, ControlToken, records_subject};
use super::protocol::{
    AdvanceRequest, Advanced, CancelRequest, DeployRequest, ErrorBody, FlowListRequest,
    FlowRequest, FlowSummary, FollowRequest, Op, RecordsRequest, Request, ResendDlqRequest,
    RunPage, RunPageRequest, RunRequest, RunSummary, RunTimelinePage, ServicesRequest,
    StateRequest, StateSummary, TriggerRequest, ViolationReport, ViolationsRequest,
};
use super::{FOLLOW_LEASE, PREFIX, RUN_PAGE, TOKEN_HEADER};
use crate::error::ControlError;
use crate::recorder::{Record, Run, ServiceState};

/// Services [`ControlClient::services`] asks for at a time.
const SERVICES_PAGE: usize = 500;
/// Violations [`ControlClient::violations`] asks for at a time.
const VIOLATIONS_PAGE: usize = 1000;

/// A client of the control API, for the CLI and the terminal UI.
#[derive(Debug, Clone)]
pub struct ControlClient {
    client: async_nats::Client,
    url: String,
    drops: DropCounter,
    token: Option<ControlToken>,
}

impl ControlClient {
    /// Connects to the NATS server a `triggers-lab up` runs on and checks an emulator answers:
    /// for an open control API. [`ControlClient::connect_with`] takes what a closed one needs.
    ///
    /// # Errors
    /// [`ControlError::NoEmulator`] when nothing answers.
    pub async fn connect(url: &str) -> Result<Self, ControlError> {
        Self::connect_with(url, &ControlAccess::default()).await
    }

    /// Connects with `access` (the control account's credentials, the token) and checks an
    /// emulator answers.
    ///
    /// # Errors
    /// [`ControlError::NoEmulator`] when the server refuses the credentials or nothing answers;
    /// [`ControlError::Refused`] when the emulator refuses the token.
    pub async fn connect_with(url: &str, access: &ControlAccess) -> Result<Self, ControlError> {
        let drops = DropCounter::new();
        let options = triggers_sdk::transport::with_url_credentials(
            crate::drops::connect_options("triggers-lab control", &drops),
            url,
        );
        let options = match &access.credentials {
            Some(c) => c.apply(options),
            None => options,
        };
        let client = options
            .connection_timeout(Duration::from_secs(5))
            .connect(url)
            .await
            .map_err(|e| ControlError::NoEmulator {
                url: url.to_owned(),
                reason: e.to_string(),
            })?;
        let this = ControlClient::from_client(client, url)
            .with_token(access.token.clone())
            .with_drops(drops);
        this.state().await?;
        Ok(this)
    }

    /// Wraps an existing connection (no check). Its drops are not counted unless it was made
    /// with [`crate::drops::connect_options`] and the counter given to [`ControlClient::with_drops`].
    #[must_use]
    pub fn from_client(client: async_nats::Client, url: &str) -> Self {
        ControlClient {
            client,
            url: url.to_owned(),
            drops: DropCounter::new(),
            token: None,
        }
    }

    /// The counter of the connection's slow-consumer drops (the connection was made with
    /// [`crate::drops::connect_options`] over it).
    #[must_use]
    pub fn with_drops(mut self, drops: DropCounter) -> Self {
        self.drops = drops;
        self
    }

    /// Messages NATS dropped for this client's slow subscriptions (records it followed).
    #[must_use]
    pub fn dropped_messages(&self) -> u64 {
        self.drops.count()
    }

    /// Sends `token` with every request and follows the records on its subject.
    #[must_use]
    pub fn with_token(mut self, token: Option<ControlToken>) -> Self {
        self.token = token;
        self
    }

    /// The NATS client underneath.
    #[must_use]
    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }

    /// Sends `request` and reads its op's reply.
    async fn call<T: Op>(&self, request: T) -> Result<T::Reply, ControlError> {
        let (op, bytes) = Into::<Request>::into(request)
            .into_wire()
            .map_err(|e| ControlError::BadReply(e.to_string()))?;
        let mut headers = async_nats::HeaderMap::new();
        if let Some(token) = &self.token {
            headers.insert(TOKEN_HEADER, token.as_str());
        }
        // The server would refuse it, and async-nats says so only as a failed request, which
        // reads as "nothing answers": say what is wrong instead.
        let max = self.client.server_info().max_payload;
        let size = bytes.len() + TOKEN_HEADER.len() + 64;
        if max > 0 && size > max {
            return Err(ControlError::TooLarge {
                op,
                bytes: bytes.len(),
                max,
            });
        }
        let reply = tokio::time::timeout(
            Duration::from_secs(30),
            self.client
                .request_with_headers(format!("{PREFIX}.{op}"), headers, bytes.into()),
        )
        .await
        .map_err(|_| ControlError::NoEmulator {
            url: self.url.clone(),
            reason: format!("no reply to {op} within 30 s"),
        })?
        .map_err(|e| ControlError::NoEmulator {
            url: self.url.clone(),
            // async-nats' text repeats its kind ("no responders: no responders"): say it once,
            // in words.
            reason: match e.kind() {
                async_nats::RequestErrorKind::NoResponders => {
                    format!("nothing answers {PREFIX}.{op}")
                }
                async_nats::RequestErrorKind::TimedOut => format!("no reply to {op} in time"),
                _ => e.to_string(),
            },
        })?;
        read_reply(&reply.payload)
    }

    /// The state summary.
    ///
    /// # Errors
    /// When the call fails.
    pub async fn state(&self) -> Result<StateSummary, ControlError> {
        self.call(StateRequest::default()).await
    }

    /// The state summary with up to the newest `runs_limit` runs (fewer when they would not fit
    /// in one NATS message; `runs_total` counts them all).
    ///
    /// # Errors
    /// When the call fails.
    pub async fn state_with_runs(&self, runs_limit: usize) -> Result<StateSummary, ControlError> {
        self.call(StateRequest {
            runs_limit: Some(runs_limit),
        })
        .await
    }

    /// Messages the emulator has missed since it started: dropped for a slow subscription,
    /// plus connections lost (after each, plain-subject traffic published meanwhile went
    /// unseen). Read it before and after something to know whether a verdict on it rests on
    /// everything.
    ///
    /// # Errors
    /// When the call fails.
    pub async fn missed(&self) -> Result<u64, ControlError> {
        let s = self.state_with_runs(0).await?;
        Ok(s.dropped_messages + s.connection_losses)
    }

    /// The deployed flow `flow_id`, whole.
    ///
    /// # Errors
    /// When it is not deployed, or the call fails.
    pub async fn flow(&self, flow_id: &str) -> Result<Flow, ControlError> {
        self.call(FlowRequest {
            flow_id: flow_id.to_owned(),
        })
        .await
    }

    /// Every deployed flow at a glance.
    ///
    /// # Errors
    /// When the call fails.
    pub async fn flow_list(&self) -> Result<Vec<FlowSummary>, ControlError> {
        self.call(FlowListRequest {}).await
    }

    /// One page of the runs' summaries, in start order, after the place `after` (0: from the
    /// oldest; else the `next` of the page before).
    ///
    /// # Errors
    /// When the call fails.
    pub async fn run_page(&self, after: u64, limit: usize) -> Result<RunPage, ControlError> {
        self.call(RunPageRequest {
            after,
            limit: Some(limit),
        })
        .await
    }

    /// Every run's summary, in start order, read a page at a time (runs that start meanwhile
    /// are included, runs evicted meanwhile may be missing).
    ///
    /// # Errors
    /// When a call fails.
    pub async fn run_summaries(&self) -> Result<Vec<RunSummary>, ControlError> {
        let mut runs = Vec::new();
        let mut after = 0;
        loop {
            let page = self.run_page(after, RUN_PAGE).await?;
            runs.extend(page.runs);
            if !page.more || page.next <= after {
                return Ok(runs);
            }
            after = page.next;
        }
    }

    /// Deploys a flow; returns the released flow and the subject it was broadcast on.
    ///
    /// # Errors
    /// The release problems, or a failed call.
    pub async fn deploy(&self, flow: &Flow) -> Result<crate::Deployment, ControlError> {
        self.call(DeployRequest { flow: flow.clone() }).await
    }

    /// Starts a run; returns its id.
    ///
    /// # Errors
    /// When the call fails.
    pub async fn trigger(&self, flow_id: &str, payload: &Value) -> Result<String, ControlError> {
        self.start_run(TriggerRequest {
            flow_id: flow_id.to_owned(),
            payload: payload.clone(),
            ..TriggerRequest::default()
        })
        .await
    }

    /// Starts a run with `payload_json` sent exactly as written (a 64-bit integer stays exact);
    /// returns its id.
    ///
    /// # Errors
    /// When the call fails, or the text is not JSON.
    pub async fn trigger_json(
        &self,
        flow_id: &str,
        payload_json: &str,
    ) -> Result<String, ControlError> {
        self.start_run(TriggerRequest {
            flow_id: flow_id.to_owned(),
            payload_json: Some(payload_json.to_owned()),
            ..TriggerRequest::default()
        })
        .await
    }

    /// Starts a run at the `service-in` node `entry` (the flow's first entry point when `None`)
    /// with `payload_json` sent exactly as written; returns its id.
    ///
    /// # Errors
    /// When the call fails, the text is not JSON, or `entry` is not a `service-in` of the flow.
    pub async fn trigger_at(
        &self,
        flow_id: &str,
        entry: Option<&str>,
        payload_json: &str,
    ) -> Result<String, ControlError> {
        self.start_run(TriggerRequest {
            flow_id: flow_id.to_owned(),
            entry: entry.map(str::to_owned),
            payload_json: Some(payload_json.to_owned()),
            ..TriggerRequest::default()
        })
        .await
    }

    /// Starts a run at the `service-in` node `entry` (the flow's first entry point when `None`)
    /// with `raw` as its payload, JSON or not (a poison message); returns its id.
    ///
    /// # Errors
    /// When the call fails, or `entry` is not a `service-in` of the flow.
    pub async fn trigger_raw(
        &self,
        flow_id: &str,
        entry: Option<&str>,
        raw: &str,
    ) -> Result<String, ControlError> {
        self.start_run(TriggerRequest {
            flow_id: flow_id.to_owned(),
            entry: entry.map(str::to_owned),
            payload_raw: Some(raw.to_owned()),
            ..TriggerRequest::default()
        })
        .await
    }

    /// A `trigger` call with `request`: the new run's id.
    async fn start_run(&self, request: TriggerRequest) -> Result<String, ControlError> {
        Ok(self.call(request).await?.run_id)
    }

    /// Every registered service with its whole manifest.
    ///
    /// # Errors
    /// When the call fails.
    pub async fn services(&self) -> Result<BTreeMap<String, ServiceState>, ControlError> {
        // A page at a time: however many registered, every one can be read.
        let mut all = BTreeMap::new();
        let mut after: Option<String> = None;
        loop {
            let page = self
                .call(ServicesRequest {
                    after: after.clone(),
                    limit: Some(SERVICES_PAGE),
                })
                .await?;
            let Some(last) = page.keys().next_back().cloned() else {
                return Ok(all);
            };
            after = Some(last);
            all.extend(page);
        }
    }

    /// Every conformance violation.
    ///
    /// # Errors
    /// When the call fails.
    pub async fn violations(&self) -> Result<Vec<ViolationReport>, ControlError> {
        // A page at a time, so that however large, every one can be read (one too large alone
        // comes cut, and says so).
        let mut all = Vec::new();
        loop {
            let page = self
                .call(ViolationsRequest {
                    after: Some(all.len()),
                    limit: Some(VIOLATIONS_PAGE),
                })
                .await?;
            if page.is_empty() {
                return Ok(all);
            }
            all.extend(page);
        }
    }

    /// Re-sends the DLQ entry whose `Nats-Msg-Id` is `msg_id` to its service
    /// ([`crate::Emulator::resend_dlq`]).
    ///
    /// # Errors
    /// When the call fails, or the entry cannot be re-sent (the reason is the error's text).
    pub async fn resend_dlq(&self, msg_id: &str) -> Result<crate::Resent, ControlError> {
        self.call(ResendDlqRequest {
            msg_id: msg_id.to_owned(),
        })
        .await
    }

    /// Cancels an open run ([`crate::Emulator::cancel`]); returns what it dropped.
    ///
    /// # Errors
    /// When the call fails, or the run cannot be cancelled (the reason is the error's text).
    pub async fn cancel(&self, run_id: &str) -> Result<crate::recorder::Cancelled, ControlError> {
        self.call(CancelRequest {
            run_id: run_id.to_owned(),
        })
        .await
    }

    /// Advances the virtual clock; returns the timers fired and the new time.
    ///
    /// # Errors
    /// When the call fails (the real clock cannot be advanced).
    pub async fn advance(&self, by: Duration) -> Result<Advanced, ControlError> {
        let duration_ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.call(AdvanceRequest { duration_ms }).await
    }

    /// A run, whole: its timeline read a page at a time, as much as fits in one message each,
    /// so a run of any size is read (entries added meanwhile are included; the run's other
    /// fields are as of the last page).
    ///
    /// # Errors
    /// When a call fails or there is no such run.
    pub async fn run(&self, run_id: &str) -> Result<Run, ControlError> {
        let mut timeline = Vec::new();
        loop {
            let page: RunTimelinePage = self
                .call(RunRequest {
                    run_id: run_id.to_owned(),
                    timeline_from: Some(timeline.len()),
                    timeline_limit: None,
                })
                .await?;
            let (Some(from), Some(total)) = (page.timeline_from, page.timeline_total) else {
                // An emulator that does not page sent the run whole.
                return Ok(page.run);
            };
            if from != timeline.len() {
                return Err(ControlError::BadReply(format!(
                    "asked for run {run_id}'s timeline from entry {}, got it from {from}",
                    timeline.len()
                )));
            }
            let got = page.run.timeline.len();
            let mut run = page.run;
            timeline.append(&mut run.timeline);
            // Every page holds one entry at least while any is left, so this ends.
            if got == 0 || timeline.len() >= total {
                run.timeline = timeline;
                return Ok(run);
            }
        }
    }

    /// Records after `since`.
    ///
    /// # Errors
    /// When the call fails.
    pub async fn records(&self, since: u64, limit: usize) -> Result<Vec<Record>, ControlError> {
        self.call(RecordsRequest { since, limit }).await
    }

    /// Every record from now on, as the emulator publishes them. The emulator publishes records
    /// only while someone follows: this asks it to (a `follow` request) and renews the lease
    /// every third of [`FOLLOW_LEASE`] until the stream is dropped.
    ///
    /// # Errors
    /// When the subscription fails, or the emulator does not answer the `follow` request.
    pub async fn follow(&self) -> Result<BoxStream<'static, Record>, ControlError> {
        let sub = self
            .client
            .subscribe(records_subject(self.token.as_ref()))
            .await
            .map_err(|e| ControlError::NoEmulator {
                url: self.url.clone(),
                reason: e.to_string(),
            })?;
        // Every record published after this returns reaches the stream.
        triggers_sdk::transport::round_trip(&self.client)
            .await
            .map_err(|e| ControlError::NoEmulator {
                url: self.url.clone(),
                reason: e.to_string(),
            })?;
        let lease = FollowRequest {
            lease_ms: Some(u64::try_from(FOLLOW_LEASE.as_millis()).unwrap_or(u64::MAX)),
        };
        self.call(lease.clone()).await?;
        let renewer = self.clone();
        let mut renew = tokio::task::JoinSet::new();
        renew.spawn(async move {
            loop {
                tokio::time::sleep(FOLLOW_LEASE / 3).await;
                if let Err(e) = renewer.call(lease.clone()).await {
                    tracing::debug!("the records' lease could not be renewed (tried again): {e}");
                }
            }
        });
        let records = sub
            .filter_map(|m| async move { serde_json::from_slice(&m.payload).ok() })
            .boxed();
        Ok(Following {
            records,
            _renew: renew,
        }
        .boxed())
    }
}

/// The records a [`ControlClient::follow`] returns, with the task renewing their lease: dropped
/// together.
struct Following {
    records: BoxStream<'static, Record>,
    /// Aborts the renewing task when dropped.
    _renew: tokio::task::JoinSet<()>,
}

impl futures::Stream for Following {
    type Item = Record;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Record>> {
        self.records.poll_next_unpin(cx)
    }
}

/// A reply as read: `result` when `ok`, else `error`, whatever its shape (an older or other
/// emulator's error is still shown).
#[derive(Deserialize)]
struct Envelope<R> {
    #[serde(default)]
    ok: bool,
    #[serde(default = "Option::default")]
    result: Option<R>,
    #[serde(default)]
    error: Value,
}

/// The op's result, or the emulator's refusal as [`ControlError::Refused`] with its message.
fn read_reply<R: DeserializeOwned>(payload: &[u8]) -> Result<R, ControlError> {
    let reply: Envelope<R> =
        serde_json::from_slice(payload).map_err(|e| ControlError::BadReply(e.to_string()))?;
    if reply.ok {
        return reply
            .result
            .ok_or_else(|| ControlError::BadReply("a reply with `ok` but no `result`".into()));
    }
    let message = match serde_json::from_value::<ErrorBody>(reply.error.clone()) {
        Ok(error) => error.message().to_owned(),
        Err(_) => match &reply.error {
            Value::Object(o) => o
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("refused")
                .to_owned(),
            other => other.to_string(),
        },
    };
    Err(ControlError::Refused(message))
}
