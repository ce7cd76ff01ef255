//! `triggers-lab manifest`: exit codes, stdin, messages that say where the input is wrong.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn run(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(triggers_testkit::cli::bin_path())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(bytes) = stdin {
        child.stdin.take().unwrap().write_all(bytes).unwrap();
    }
    drop(child.stdin.take());
    child.wait_with_output().unwrap()
}

fn case(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/manifests")
        .join(name)
}

#[test]
fn hash_and_canon_print_the_golden_bytes() {
    for name in [
        "001_spec_example",
        "004_control_chars",
        "014_unsorted_lookups",
    ] {
        let file = case(name).join("manifest.json");
        let out = run(&["manifest", "hash", file.to_str().unwrap()], None);
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            std::fs::read_to_string(case(name).join("hash.txt")).unwrap()
        );
        let out = run(&["manifest", "canon", file.to_str().unwrap()], None);
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(
            out.stdout,
            std::fs::read(case(name).join("canonical.json")).unwrap()
        );
    }
}

#[test]
fn stdin_is_read_with_a_dash() {
    let bytes = std::fs::read(case("001_spec_example").join("manifest.json")).unwrap();
    let out = run(&["manifest", "hash", "-"], Some(&bytes));
    assert_eq!(out.status.code(), Some(0));
    assert!(
        String::from_utf8(out.stdout)
            .unwrap()
            .starts_with("sha256:2898887")
    );
}

#[test]
fn check_passes_a_sealed_manifest_and_fails_a_wrong_hash() {
    let text = std::fs::read_to_string(case("001_spec_example").join("manifest.json")).unwrap();
    let out = run(&["manifest", "check", "-"], Some(text.as_bytes()));
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("manifest_hash: wrong"), "{stdout}");
    assert!(stdout.contains("sha256:289888788fd67c1c"), "{stdout}");

    let sealed = text.replace(
        "sha256:6f3a...c91d",
        "sha256:289888788fd67c1c96727dc28cd3e772969279b224e455a0c0543cf09b53606f",
    );
    let out = run(&["manifest", "check", "-"], Some(sealed.as_bytes()));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("manifest_hash: ok"), "{stdout}");
}

#[test]
fn bad_input_exits_2_and_says_where() {
    for (input, wants) in [
        (&b"not json"[..], vec!["<stdin>:1:2", "expected"]),
        (b"{\n  \"service\": \"x\",\n  \"actions\": [{\"name\": 3}]\n}", vec!["<stdin>:3:", "actions[0].name", "expected a string"]),
        (b"{\"service\": \"x\", \"actions\": []", vec!["EOF"]),
        (b"[]", vec!["expected a JSON object"]),
        (b"{\"protocol_version\":\"1.0.0\",\"service\":\"s\",\"service_version\":\"1\",\"actions\":[],\"service_sources\":[]}", vec!["supports_nodes"]),
        (&[0xff, 0xfe][..], vec!["<stdin>:1:1"]),
    ] {
        let out = run(&["manifest", "hash", "-"], Some(input));
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(out.stdout.is_empty());
        for want in wants {
            assert!(stderr.contains(want), "{want:?} not in {stderr:?}");
        }
    }
    let out = run(&["manifest", "hash", "/nonexistent/manifest.json"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("/nonexistent/manifest.json: cannot read")
    );
}
