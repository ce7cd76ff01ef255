//! Verdicts that must not pass on what did not happen, each found by an outside audit: an
//! `expect_violation` step excuses only what it expected (never with `count: 0`, never another
//! subject's), and an exact count scoped to a run is judged only once that run is quiet, since
//! while it runs more may come after the count is first reached.

use std::path::Path;

use triggers_emulator::{Backend, NatsConfig};
use triggers_scenarios::{RunOptions, load_str, run_suite};

/// Runs each scenario on its own server; returns each one's failure text (`None`: passed).
async fn verdicts(scenarios: &[(&str, &str)]) -> Vec<Option<String>> {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let loaded = scenarios
        .iter()
        .map(|(name, text)| {
            load_str(&format!("{name}.scenario.yaml"), text, here).unwrap_or_else(|e| panic!("{e}"))
        })
        .collect();
    let options = RunOptions {
        nats: NatsConfig {
            backend: Backend::Binary,
            ..Default::default()
        },
        ..Default::default()
    };
    let report = run_suite(loaded, 1, &options).await;
    report
        .scenarios
        .iter()
        .map(|s| (!s.passed()).then(|| s.failure_text()))
        .collect()
}

/// A strict scenario that publishes a hop without an envelope (breaking `hop_envelope_invalid`
/// and `hop_msg_id` on `shop.inbound`), with `before` steps ahead of the publish and `after`
/// steps behind it.
fn raw_hop(name: &str, before: &str, after: &str) -> String {
    format!(
        r#"
name: {name}
conformance: strict
services:
  - name: shop
    actions:
      - {{name: charge, behavior: {{return: {{charged: true}}}}}}
steps:
{before}
  - publish:
      subject: shop.inbound
      headers: {{Nats-Msg-Id: raw-1}}
      body: '{{"order_id":"x"}}'
  - expect_dlq: {{kind: missing_envelope, count: 1}}
{after}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_violation_excuses_only_what_it_expected() {
    let none_first = raw_hop(
        "count 0 first",
        "  - expect_violation: {rule: hop_envelope_invalid, count: 0}\n  - expect_violation: {rule: hop_msg_id, count: 0}",
        "",
    );
    let other_subject = raw_hop(
        "another subject",
        "",
        "  - expect_violation: {rule: hop_envelope_invalid, subject: nothing.here, count: 0}\n  - expect_violation: {rule: hop_msg_id, subject: nothing.here, count: 0}",
    );
    let expected = raw_hop(
        "expected on its subject",
        "",
        "  - expect_violation: {rule: hop_envelope_invalid, subject: shop.inbound, count: 1}\n  - expect_violation: {rule: hop_msg_id, subject: shop.inbound}",
    );
    let got = verdicts(&[
        ("none_first", &none_first),
        ("other_subject", &other_subject),
        ("expected", &expected),
    ])
    .await;
    for (i, what) in ["count: 0", "another subject"].iter().enumerate() {
        let failure = got[i]
            .as_deref()
            .unwrap_or_else(|| panic!("a violation excused by an expectation of {what} passed"));
        assert!(failure.contains("hop_envelope_invalid"), "{failure}");
    }
    assert_eq!(got[2], None, "the violations expected on their subject");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exact_count_of_a_run_is_judged_once_the_run_is_quiet() {
    // Two DLQ entries and two failing calls come of r1, the second 1.5 s after the first.
    let text = |name: &str, step: &str| {
        format!(
            r#"
name: {name}
services:
  - name: shop
    actions:
      - name: charge
        behavior: {{return: {{charged: true}}}}
      - name: fastfail
        retry: {{max_attempts: 1}}
        behavior: {{fail: "fast boom"}}
      - name: slowfail
        retry: {{max_attempts: 1}}
        timeout: 10s
        behavior: {{sleep: 1500ms, fail: "slow boom"}}
flows:
  - id: fan
    nodes:
      - {{id: in, type: service-in, service: shop}}
      - {{id: charge, type: action, service: shop, action: charge}}
      - {{id: f1, type: action, service: shop, action: fastfail}}
      - {{id: f2, type: action, service: shop, action: slowfail}}
    edges:
      - {{id: e1, from: in, to: charge}}
      - {{id: e2, from: charge, to: f1}}
      - {{id: e3, from: charge, to: f2}}
steps:
  - deploy: fan
  - trigger: {{flow: fan, payload: {{order_id: o-1}}, as: r1}}
  - {step}
"#
        )
    };
    let got = verdicts(&[
        (
            "dlq one",
            &text("dlq one", "expect_dlq: {run: r1, count: 1}"),
        ),
        (
            "dlq none of slowfail",
            &text(
                "dlq none of slowfail",
                "expect_dlq: {run: r1, subject: triggers.v2.dlq.shop.slowfail, count: 0}",
            ),
        ),
        (
            "dlq two",
            &text("dlq two", "expect_dlq: {run: r1, count: 2}"),
        ),
        (
            "calls two",
            &text(
                "calls two",
                "expect_calls: {service: shop, action: fastfail, run: r1, count: 1}",
            ),
        ),
    ])
    .await;
    for (i, what) in ["1 DLQ entry", "no DLQ entry of slowfail"]
        .iter()
        .enumerate()
    {
        let failure = got[i]
            .as_deref()
            .unwrap_or_else(|| panic!("{what} passed while the run was still running"));
        assert!(failure.contains("found"), "{failure}");
    }
    assert_eq!(got[2], None, "exactly 2 DLQ entries");
    assert_eq!(got[3], None, "exactly 1 call of fastfail");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_of_dlq_entries_is_no_verdict_once_entries_fell_off_the_record_ring() {
    // A ring of two records: r1's DLQ entry falls off it as r2..r4 are recorded.
    let text = |name: &str, last: &str| {
        format!(
            r#"
name: {name}
emulator: {{max_records: 2}}
services:
  - name: shop
    actions:
      - name: charge
        behavior: {{return: {{charged: true}}}}
      - name: fastfail
        retry: {{max_attempts: 1}}
        behavior: {{fail: "fast boom"}}
flows:
  - id: bad
    nodes:
      - {{id: in, type: service-in, service: shop}}
      - {{id: f1, type: action, service: shop, action: fastfail}}
    edges:
      - {{id: e1, from: in, to: f1}}
  - id: good
    nodes:
      - {{id: in, type: service-in, service: shop}}
      - {{id: c, type: action, service: shop, action: charge}}
    edges:
      - {{id: e1, from: in, to: c}}
steps:
  - deploy: bad
  - deploy: good
  - trigger: {{flow: bad, as: r1}}
  - wait_settled: {{run: r1, status: failed}}
  - expect_dlq: {{run: r1, kind: action_failed, count: 1}}
  - trigger: {{flow: good, as: r2}}
  - wait_settled: r2
  - trigger: {{flow: good, as: r3}}
  - wait_settled: r3
  - {last}
"#
        )
    };
    let got = verdicts(&[
        (
            "none of r1",
            &text("none of r1", "expect_dlq: {run: r1, count: 0}"),
        ),
        (
            "none at all",
            &text("none at all", "expect_dlq: {count: 0}"),
        ),
    ])
    .await;
    for (i, failure) in got.iter().enumerate() {
        let failure = failure.as_deref().unwrap_or_else(|| {
            panic!("case {i}: a count of DLQ entries passed on a ring that dropped one")
        });
        assert!(
            failure.contains("dropped off the emulator's record ring"),
            "{failure}"
        );
        assert!(failure.contains("max_records"), "{failure}");
    }
}
