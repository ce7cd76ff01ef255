//! `expect_http`: requests an HTTP stub received, by body and headers, counted.

use std::collections::BTreeMap;

use futures::FutureExt;
use futures::future::LocalBoxFuture;
use serde::Deserialize;
use serde_json::Value;

use super::count::json_eq;
use super::{CheckCx, StepFailure, StepKind, StepOutcome, mean};
use crate::describe;
use crate::model::{Dur, present};
use crate::runner::{DEFAULT_SETTLE, Lab};

/// `expect_http`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectHttpStep {
    /// The stub.
    pub stub: String,
    /// Only requests with this JSON body.
    #[serde(default, deserialize_with = "present")]
    pub body: Option<Value>,
    /// Only requests with these headers (names in any case, exact values).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Only requests without these headers.
    #[serde(default)]
    pub headers_absent: Vec<String>,
    /// Exactly this many requests match; without it, at least one.
    #[serde(default)]
    pub count: Option<usize>,
    /// How long to watch for more after the count is reached (default 250ms).
    #[serde(default)]
    pub settle: Option<Dur>,
    /// This step's time limit.
    #[serde(default)]
    pub timeout: Option<Dur>,
}

impl StepKind for ExpectHttpStep {
    fn label(&self) -> String {
        format!("expect_http {}", self.stub)
    }

    fn check(&self, cx: &mut CheckCx<'_>) -> Result<(), String> {
        if cx.stubs.contains(&self.stub) {
            return Ok(());
        }
        Err(format!(
            "no HTTP stub {:?} in `http_stubs`{}",
            self.stub,
            mean(&self.stub, cx.stubs.iter().map(String::as_str))
        ))
    }

    fn run<'a>(&'a self, lab: &'a mut Lab<'_>) -> LocalBoxFuture<'a, StepOutcome> {
        expect_http(lab, self).boxed_local()
    }
}

async fn expect_http(lab: &Lab<'_>, h: &ExpectHttpStep) -> StepOutcome {
    let Some((spec, server)) = lab.stubs.get(&h.stub) else {
        return Err(StepFailure::invalid(format!("no HTTP stub {:?}", h.stub)));
    };
    let body = h.body.as_ref().map(|b| lab.subst(b)).transpose()?;
    let headers: Vec<(String, String)> = h
        .headers
        .iter()
        .map(|(k, v)| Ok((k.to_ascii_lowercase(), lab.subst_str(v)?)))
        .collect::<Result<_, StepFailure>>()?;
    let matches = |r: &wiremock::Request| {
        r.method.as_str().eq_ignore_ascii_case(&spec.method)
            && r.url.path() == spec.path
            && body.as_ref().is_none_or(|b| {
                serde_json::from_slice::<Value>(&r.body).is_ok_and(|got| json_eq(b, &got))
            })
            && headers.iter().all(|(name, value)| {
                r.headers
                    .get(name.as_str())
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v == value)
            })
            && h.headers_absent
                .iter()
                .all(|name| !r.headers.contains_key(name.to_ascii_lowercase().as_str()))
    };
    let what = format!(
        "{} {} request(s) on stub {} ({}){}{}",
        h.count
            .map(|n| format!("exactly {n}"))
            .unwrap_or_else(|| "at least one".into()),
        spec.method,
        h.stub,
        spec.path,
        body.as_ref()
            .map(|b| format!(" with body {b}"))
            .unwrap_or_default(),
        if headers.is_empty() {
            String::new()
        } else {
            format!(
                " with headers {}",
                headers
                    .iter()
                    .map(|(k, v)| format!("{k}: {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    );
    let settle = h.settle.map_or(DEFAULT_SETTLE, |d| d.0);
    let want = h.count.unwrap_or(1);
    let mut w = lab.waiter(h.timeout);
    if want > 0 {
        loop {
            let all = server.received_requests().await.unwrap_or_default();
            if all.iter().filter(|r| matches(r)).count() >= want {
                break;
            }
            if !w.next().await {
                return Err(w.timeout(what, describe::requests(&all)));
            }
        }
    }
    let Some(exact) = h.count else {
        return Ok("received".into());
    };
    tokio::time::sleep(settle).await;
    let all = server.received_requests().await.unwrap_or_default();
    let n = all.iter().filter(|r| matches(r)).count();
    if n == exact {
        Ok(format!("{n} request(s)"))
    } else {
        Err(StepFailure::unmet(format!(
            "expected {what}, found {n} (after watching {} more); {}",
            Dur(settle),
            describe::requests(&all)
        )))
    }
}
