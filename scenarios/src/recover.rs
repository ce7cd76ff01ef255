//! Every problem of a scenario file the parser stops at the first of. The parser gives up at its
//! first unknown key or bad value; to report them all, the file is cut into its top-level keys,
//! and its lists (`steps`, `services`, `http_stubs`, `flows`) into their items, and each piece is
//! parsed alone in a copy of the file where every other line is blank, so that its errors keep
//! their own lines and columns. Then what could be read is checked as a whole file is (names
//! that must exist, ...), unless a piece the rest depends on (a service, a flow) was unreadable.

use std::ops::Range;
use std::path::Path;

use serde::de::IgnoredAny;
use serde_json::Value;
use serde_saphyr::Spanned;

use crate::error::LoadError;
use crate::load::{Checker, parse_yaml};
use crate::model::ScenarioFile;

/// The top-level keys whose items are parsed one by one.
const LISTS: [&str; 4] = ["steps", "services", "http_stubs", "flows"];

/// Every problem of `text`, whose whole parse failed with `first`.
pub(crate) fn every_problem(
    file: &str,
    text: &str,
    base_dir: &Path,
    first: LoadError,
) -> Vec<LoadError> {
    // A YAML syntax error: nothing after it can be read, so it comes alone.
    if parse_yaml::<Value>(file, text).is_err() {
        return vec![first];
    }
    let lines: Vec<&str> = text.lines().collect();
    let keys = top_level_keys(&lines);
    let mut errors = Vec::new();
    // The unreadable pieces, left out when the rest is checked: (their key's line, their lines).
    let mut unreadable: Vec<(usize, Range<usize>)> = Vec::new();
    // Keys whose every item is unreadable: written as an empty list when the rest is checked.
    let mut emptied: Vec<usize> = Vec::new();
    let mut check_rest = true;
    for (k, (start, key)) in keys.iter().enumerate() {
        let region = *start..keys.get(k + 1).map_or(lines.len(), |n| n.0);
        let Some(whole) = parse_piece(file, &lines, std::slice::from_ref(&region)) else {
            continue;
        };
        let items = if LISTS.contains(&key.as_str()) {
            item_ranges(file, &lines, region.clone())
        } else {
            None
        };
        let mut bad = 0;
        for (i, item) in items.iter().flatten().enumerate() {
            if let Some(mut e) = parse_piece(file, &lines, &[*start..*start + 1, item.clone()]) {
                renumber(&mut e, key, i);
                errors.push(e);
                unreadable.push((*start, item.clone()));
                bad += 1;
            }
        }
        match items {
            Some(items) if bad > 0 => {
                if bad == items.len() {
                    emptied.push(*start);
                }
            }
            _ => {
                errors.push(whole);
                // The rest depends on the steps being there and on the cluster's size.
                check_rest &= !["steps", "nats"].contains(&key.as_str());
                unreadable.push((*start, region));
            }
        }
    }
    // What the pieces cannot show (a key written twice at the top level, a missing `steps`).
    if !errors
        .iter()
        .any(|e| (e.line, e.column) == (first.line, first.column))
    {
        errors.push(first);
        check_rest = false;
    }
    if check_rest {
        errors.extend(check_the_rest(
            file,
            &lines,
            base_dir,
            &unreadable,
            &emptied,
        ));
    }
    errors
}

/// The problems of the file without its unreadable pieces, as if they were not there; what
/// they name (services, flows, stubs, runs) still counts as named.
fn check_the_rest(
    file: &str,
    lines: &[&str],
    base_dir: &Path,
    unreadable: &[(usize, Range<usize>)],
    emptied: &[usize],
) -> Vec<LoadError> {
    let mut text = String::new();
    for (i, line) in lines.iter().enumerate() {
        if emptied.contains(&i) {
            text.push_str(line.split_once(':').map_or(*line, |(k, _)| k));
            text.push_str(": []");
        } else if !unreadable.iter().any(|(_, r)| r.contains(&i)) {
            text.push_str(line);
        }
        text.push('\n');
    }
    let Ok(raw) = parse_yaml::<ScenarioFile>(file, &text) else {
        return Vec::new();
    };
    let mut checker = Checker::new(file, base_dir);
    checker.steps_elided = unreadable.iter().any(|(key, _)| {
        top_level_keys(lines)
            .iter()
            .any(|(at, k)| at == key && k == "steps")
    });
    for (key, piece) in unreadable {
        let text = masked(lines, &[*key..*key + 1, piece.clone()]);
        let Ok(v) = parse_yaml::<Value>(file, &text) else {
            continue;
        };
        for list in LISTS {
            for pointer in ["name", "id", "trigger/as"] {
                if let Some(name) = v
                    .pointer(&format!("/{list}/0/{pointer}"))
                    .and_then(Value::as_str)
                {
                    checker.elided_names.insert(name.to_owned());
                }
            }
        }
    }
    checker.check(raw).err().unwrap_or_default()
}

/// The lines where a top-level key is written (0-based), with the key: a block mapping's keys
/// start in the first column.
fn top_level_keys(lines: &[&str]) -> Vec<(usize, String)> {
    lines
        .iter()
        .enumerate()
        .filter(|(_, l)| {
            l.chars()
                .next()
                .is_some_and(|c| !c.is_whitespace() && !"#-{}[]".contains(c))
                && !l.starts_with("...")
        })
        .filter_map(|(i, l)| {
            let (key, _) = l.split_once(':')?;
            Some((i, key.trim().trim_matches(['"', '\'']).to_owned()))
        })
        .collect()
}

/// The lines of each item of the list under the key at `region.start`, or `None` when they
/// cannot be told apart (a list written on one line, `[a, b]`).
fn item_ranges(file: &str, lines: &[&str], region: Range<usize>) -> Option<Vec<Range<usize>>> {
    #[derive(serde::Deserialize)]
    struct Outline(std::collections::BTreeMap<String, Vec<Spanned<IgnoredAny>>>);
    let outline: Outline = parse_yaml(file, &masked(lines, std::slice::from_ref(&region))).ok()?;
    let items = outline.0.into_values().next()?;
    let mut starts: Vec<usize> = Vec::new();
    for item in &items {
        let mut at = usize::try_from(item.referenced.line())
            .ok()?
            .checked_sub(1)?;
        // `-` alone on its line, the item below it: the dash belongs to the item.
        while at > region.start + 1 && lines[at - 1].trim() == "-" {
            at -= 1;
        }
        if at <= region.start || starts.last().is_some_and(|s| *s >= at) {
            return None;
        }
        starts.push(at);
    }
    let ends = starts.iter().skip(1).copied().chain([region.end]);
    Some(starts.iter().zip(ends).map(|(s, e)| *s..e).collect())
}

/// The first error of the file with only the lines in `keep`, `None` when they read well (a
/// piece without `steps` misses nothing).
fn parse_piece(file: &str, lines: &[&str], keep: &[Range<usize>]) -> Option<LoadError> {
    parse_yaml::<ScenarioFile>(file, &masked(lines, keep))
        .err()
        .filter(|e| !e.message.contains("missing field `steps`"))
}

/// The text with every line not in `keep` blank: the kept lines stay where they were.
fn masked(lines: &[&str], keep: &[Range<usize>]) -> String {
    let mut out = String::new();
    for (i, line) in lines.iter().enumerate() {
        if keep.iter().any(|r| r.contains(&i)) {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// An item parsed alone is item 0 of its list: its path gets its real index back.
fn renumber(e: &mut LoadError, key: &str, index: usize) {
    let alone = format!("{key}[0]");
    if let Some(rest) = e.message.strip_prefix(&alone) {
        e.message = format!("{key}[{index}]{rest}");
    }
}

#[cfg(test)]
mod tests {
    use crate::load_str;
    use std::path::Path;

    #[test]
    fn every_problem_of_a_file_is_reported_at_its_line() {
        let text = "\
services:
  - name: shop
    actions:
      - {name: charge, retrys: 3}
flows:
  - {id: order, nodes: [{id: in, type: service-in, service: shop}], edges: []}
steps:
  - deploy: order
  - trigger: {flow: ordr, as: r1}
  - advance: soon
  - wait_settled: {run: r1, timeout: 1e20}
  - stop_service: shp
";
        let errors = load_str("s.yaml", text, Path::new(".")).unwrap_err();
        let got: Vec<(u64, &str)> = errors
            .iter()
            .map(|e| (e.line, e.message.as_str()))
            .collect();
        assert_eq!(errors.len(), 5, "{errors}");
        assert_eq!(got[0].0, 4, "{errors}");
        assert!(got[0].1.contains("did you mean `retry`?"), "{errors}");
        assert_eq!(got[1].0, 9, "{errors}");
        assert!(got[1].1.contains("did you mean \"order\"?"), "{errors}");
        assert_eq!(got[2].0, 10, "{errors}");
        assert!(got[2].1.contains("steps[2].advance"), "{errors}");
        assert_eq!(got[3].0, 11, "{errors}");
        assert!(
            got[3].1.contains("steps[3].wait_settled.timeout"),
            "{errors}"
        );
        assert_eq!(got[4].0, 12, "{errors}");
        assert!(got[4].1.contains("did you mean \"shop\"?"), "{errors}");
    }

    #[test]
    fn a_syntax_error_comes_alone() {
        let text = "steps:\n  - deploy: [\n  - advance: soon\n";
        let errors = load_str("s.yaml", text, Path::new(".")).unwrap_err();
        assert_eq!(errors.len(), 1, "{errors}");
    }

    #[test]
    fn many_problems_are_capped() {
        let mut text = String::from("steps:\n");
        for i in 0..25 {
            text.push_str(&format!("  - advance: soon{i}\n"));
        }
        let errors = load_str("s.yaml", &text, Path::new(".")).unwrap_err();
        assert_eq!(errors.len(), 25);
        let shown = errors.to_string();
        assert_eq!(shown.lines().count(), 21, "{shown}");
        assert!(shown.ends_with("and 5 more problem(s)"), "{shown}");
    }
}
