//! Every YAML example in `docs/scenarios.md` is read by the real parser: a whole scenario (one
//! with `steps:`) must load, a list of steps must parse as steps. The guide cannot drift from
//! the format.

use std::path::Path;

use serde_saphyr::Spanned;
use triggers_scenarios::load_str;
use triggers_scenarios::model::Step;

#[test]
fn every_yaml_example_in_the_guide_is_valid() {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs");
    let guide = std::fs::read_to_string(docs.join("scenarios.md")).unwrap();
    let mut blocks = 0;
    let mut rest = guide.as_str();
    while let Some(start) = rest.find("```yaml\n") {
        let body = &rest[start + 8..];
        let end = body.find("```").expect("a closed block");
        let block = &body[..end];
        let line = guide[..guide.len() - rest.len() + start].lines().count() + 2;
        let name = format!("docs/scenarios.md (block at line {line})");
        if block.lines().any(|l| l.starts_with("steps:")) {
            if let Err(e) = load_str(&name, block, &docs) {
                panic!("{e}\n{block}");
            }
        } else {
            let opts = serde_saphyr::options! { strict_booleans: true };
            if let Err(e) = serde_saphyr::from_str_with_options::<Vec<Spanned<Step>>>(block, opts) {
                panic!("{name}: {e}\n{block}");
            }
        }
        blocks += 1;
        rest = &body[end + 3..];
    }
    assert!(blocks >= 20, "only {blocks} YAML blocks found");
}
