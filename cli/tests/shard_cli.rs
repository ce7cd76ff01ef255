//! `triggers-lab run --shard K/N` and `triggers-lab report merge` from the outside: every
//! scenario in exactly one shard whatever the order of the arguments, bad K/N refused with exit
//! code 2, and shard reports merged into what one unsharded run reports.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Output;

use triggers_testkit::cli::bin;

fn run(args: &[&str]) -> Output {
    bin().args(args).output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The scenarios `--list` printed, `name  (file, N steps)` a line.
fn listed(args: &[&str]) -> Vec<String> {
    let mut all = vec!["run", "--list"];
    all.extend_from_slice(args);
    let out = run(&all);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    text(&out.stdout).lines().map(str::to_owned).collect()
}

const FLOW_LAB: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/flow-lab");
const DELIVERY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/delivery");

#[test]
fn every_scenario_is_in_exactly_one_shard_whatever_the_argument_order() {
    let all: BTreeSet<String> = listed(&[FLOW_LAB, DELIVERY]).into_iter().collect();
    assert!(all.len() > 10, "{all:?}");
    let one = listed(&["--shard", "1/2", FLOW_LAB, DELIVERY]);
    let two = listed(&["--shard", "2/2", FLOW_LAB, DELIVERY]);
    let one_set: BTreeSet<_> = one.iter().cloned().collect();
    let two_set: BTreeSet<_> = two.iter().cloned().collect();
    assert!(one_set.is_disjoint(&two_set), "{one:?}\n{two:?}");
    assert_eq!(
        one_set.union(&two_set).cloned().collect::<BTreeSet<_>>(),
        all
    );
    // By count: 27 scenarios are 14 and 13.
    assert!(one.len().abs_diff(two.len()) <= 1, "{one:?}\n{two:?}");
    // The other order of the folders: the same split (each shard in its run order).
    let swapped: BTreeSet<_> = listed(&["--shard", "1/2", DELIVERY, FLOW_LAB])
        .into_iter()
        .collect();
    assert_eq!(swapped, one_set);
    // The summary line says which shard.
    let out = run(&["run", "--list", "--shard", "2/2", DELIVERY, FLOW_LAB]);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "shard 2/2: {} of {} scenarios",
            two.len(),
            all.len()
        )),
        "{stderr}"
    );
    // More shards than scenarios: an empty shard is no error.
    let out = run(&["run", "--list", "--shard", "40/40", DELIVERY]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stderr).contains("an empty shard"));
}

#[test]
fn a_bad_shard_is_a_usage_error() {
    for (bad, why) in [
        ("0/2", "no shard 0 of 2"),
        ("3/2", "no shard 3 of 2"),
        ("1/0", "0 shards"),
        ("a/b", "whole numbers"),
    ] {
        let out = run(&["run", "--list", "--shard", bad, DELIVERY]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {stderr}");
        assert!(stderr.contains(why), "{bad}: {stderr}");
    }
    // --durations needs --shard.
    let out = run(&["run", "--list", "--durations", "r.json", DELIVERY]);
    assert_eq!(out.status.code(), Some(2));
}

fn scenario(name: &str, service: &str) -> String {
    format!(
        r#"name: {name}
steps:
  - register:
      manifest:
        protocol_version: 1.0.0
        service: {service}
        service_version: 1.0.0
        actions: []
        service_sources: [{{name: nats, transport: nats, default: {service}.inbound}}]
        supports_nodes: []
  - expect_registration: {{service: {service}}}
"#
    )
}

const FAILING: &str = r#"name: waits for nobody
step_timeout: 300ms
steps:
  - expect_registration: {service: nobody}
"#;

/// The `<testcase ...>` tags of a JUnit report, times left out (they differ run to run).
fn test_cases(xml: &str) -> Vec<String> {
    xml.split("<testcase ")
        .skip(1)
        .map(|case| {
            let tag = &case[..case.find('>').unwrap()];
            tag.split("\" ")
                .filter(|attr| !attr.starts_with("time="))
                .collect::<Vec<_>>()
                .join("\" ")
        })
        .collect()
}

fn run_to(dir: &Path, extra: &[&str], json: &str, junit: Option<&str>) -> Output {
    let mut c = bin();
    c.args(["run", "--backend", "binary", "-j", "2", "--json"])
        .arg(dir.join(json));
    if let Some(junit) = junit {
        c.arg("--junit").arg(dir.join(junit));
    }
    c.args(extra).arg(dir.join("s")).output().unwrap()
}

#[test]
fn merged_shard_reports_are_the_unsharded_run_s() {
    let dir = tempfile::tempdir().unwrap();
    let s = dir.path().join("s");
    std::fs::create_dir(&s).unwrap();
    for (file, body) in [
        ("a.scenario.yaml", scenario("alpha", "shop")),
        ("b.scenario.yaml", scenario("bravo", "till")),
        ("c.scenario.yaml", FAILING.to_owned()),
    ] {
        std::fs::write(s.join(file), body).unwrap();
    }
    let whole = run_to(dir.path(), &[], "whole.json", Some("whole.xml"));
    assert_eq!(whole.status.code(), Some(1), "{}", text(&whole.stdout));
    for k in ["1/2", "2/2"] {
        let json = format!("shard-{}.json", &k[..1]);
        let out = run_to(dir.path(), &["--shard", k], &json, None);
        let stdout = text(&out.stdout);
        assert!(stdout.contains(&format!("shard {k}: ")), "{stdout}");
    }
    let out = bin()
        .current_dir(dir.path())
        .args([
            "report",
            "merge",
            "shard-2.json",
            "shard-1.json",
            "--junit",
            "merged.xml",
            "--json",
            "merged.json",
        ])
        .output()
        .unwrap();
    // A scenario failed in a shard: the merge fails as the whole run did.
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("scenarios: 2 passed, 1 failed"),
        "{}",
        text(&out.stdout)
    );
    let read = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap();
    let whole_cases = test_cases(&read("whole.xml"));
    assert_eq!(whole_cases.len(), 3);
    assert_eq!(test_cases(&read("merged.xml")), whole_cases);
    // Failures keep their messages.
    assert!(read("merged.xml").contains("waited 300ms for a registration"));
    let json = |f: &str| serde_json::from_str::<serde_json::Value>(&read(f)).unwrap();
    let (whole, merged) = (json("whole.json"), json("merged.json"));
    assert_eq!(merged["format"], 1);
    assert_eq!(merged["totals"], whole["totals"]);
    assert_eq!(merged.get("shard"), None);
    let outcomes = |v: &serde_json::Value| {
        v["scenarios"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s["name"].clone(), s["file"].clone(), s["outcome"].clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(outcomes(&merged), outcomes(&whole));

    // The same shard twice: refused, naming the scenario.
    let out = bin()
        .current_dir(dir.path())
        .args(["report", "merge", "shard-1.json", "shard-1.json"])
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("is in both shard-1.json and shard-1.json"),
        "{stderr}"
    );
    // A file that is not a report: its path, line and column.
    std::fs::write(dir.path().join("bad.json"), "{\n  \"scenarios\": 3\n}\n").unwrap();
    let out = bin()
        .current_dir(dir.path())
        .args(["report", "merge", "shard-1.json", "bad.json"])
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("bad.json:2:"), "{stderr}");
}
