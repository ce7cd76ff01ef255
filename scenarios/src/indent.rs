//! Which line's indentation is wrong, when the YAML parser stops on a file's structure: its own
//! words ("while parsing a block mapping, did not find expected key") name neither the line
//! that is out of place nor what it should be. Block YAML (what scenarios and flows are written
//! in) is walked line by line with the columns its open blocks start at; the first line whose
//! indentation matches none of them is the one named.

/// A line whose indentation differs from its block's: its 1-based line and column, and what
/// to say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Misplaced {
    pub(crate) line: u64,
    pub(crate) column: u64,
    pub(crate) message: String,
}

/// Whether the parser's message is about the file's structure (where indentation is the usual
/// cause), not about a value.
pub(crate) fn is_structure_error(message: &str) -> bool {
    [
        "did not find expected key",
        "did not find expected '-'",
        "mapping values are not allowed",
        "block sequence entries are not allowed",
        "while parsing a block",
    ]
    .iter()
    .any(|m| message.contains(m))
}

/// A line of block YAML, as far as indentation goes.
struct Line {
    number: u64,
    indent: usize,
    /// Where the block a line below it would continue starts, if it opens one at a known
    /// column (a list item's mapping: `- id: a` then `  type: b`).
    item_column: Option<usize>,
    /// It ends with `:` or `-`: the block it opens is indented further, by any amount.
    opens: bool,
}

/// The first line, up to `until` (the parser's line, and one more), whose indentation matches
/// no block open above it. `None` when every line fits, or the file uses what this walk does
/// not follow (a flow collection or a block scalar spanning lines, tabs).
pub(crate) fn misplaced(text: &str, until: u64) -> Option<Misplaced> {
    // Open blocks, outermost first: (the column their keys or items start at, the line that
    // started it).
    let mut open: Vec<(usize, u64)> = Vec::new();
    let mut previous: Option<Line> = None;
    for (i, raw) in text.lines().enumerate() {
        let number = i as u64 + 1;
        if number > until.saturating_add(1) {
            break;
        }
        let content = raw.trim_start_matches(' ');
        if content.is_empty() || content.starts_with('#') {
            continue;
        }
        if content.starts_with('\t') || content.starts_with("---") {
            return None;
        }
        let body = strip_comment(content).trim_end();
        // What this walk cannot follow: a value spanning lines.
        if body.ends_with(['|', '>', '{', '[', ',']) || body.contains("|-") || body.contains(">-") {
            return None;
        }
        let indent = raw.len() - content.len();
        if let Some(p) = &previous {
            if indent > p.indent {
                // A list item at an item's key column is a list where a key was due (`- a: 1`
                // then `  - b: 2`, the value of `a` given already).
                let item_at_key = content.starts_with('-') && !p.opens;
                let fits = p.opens || (p.item_column == Some(indent) && !item_at_key);
                if !fits {
                    // A `- ` line is most likely another item of the list above; any other, a
                    // key of the item's mapping.
                    let want = match p.item_column {
                        Some(c) if !content.starts_with('-') => c,
                        _ => p.indent,
                    };
                    return Some(differs(number, indent, want, p.number));
                }
                // The item's own keys (`- name: a` then `  actions:`), then what it nests.
                if let Some(c) = p.item_column.filter(|c| indent >= *c) {
                    open.push((c, p.number));
                }
                if p.opens && p.item_column != Some(indent) {
                    open.push((indent, number));
                }
            } else {
                // Back out of the blocks deeper than this line.
                while open.last().is_some_and(|(c, _)| *c > indent) {
                    open.pop();
                }
                let top = open.last().map_or(0, |(c, _)| *c);
                // A list may sit at its key's column (`steps:` then `- deploy: x`).
                let list_at_key = content.starts_with("- ") || content == "-";
                if top != indent && !(list_at_key && indent >= top) && indent != 0 {
                    let (column, from) = open.last().copied().unwrap_or((0, 1));
                    return Some(differs(number, indent, column, from));
                }
            }
        } else if indent > 0 {
            open.push((indent, number));
        }
        let item_column = content.strip_prefix("- ").and_then(|rest| {
            let rest = rest.trim_start();
            let key_value = rest.contains(": ") || rest.ends_with(':');
            (key_value && !rest.starts_with(['{', '[', '"', '\'']))
                .then(|| indent + (content.len() - rest.len()))
        });
        let opens = body.ends_with(':') || body == "-" || body.ends_with(" -");
        previous = Some(Line {
            number,
            indent,
            item_column,
            opens,
        });
    }
    None
}

/// Line `number`, indented `indent`, belongs to the block at column `want` started on `from`.
fn differs(number: u64, indent: usize, want: usize, from: u64) -> Misplaced {
    Misplaced {
        line: number,
        column: indent as u64 + 1,
        message: format!(
            "line {number}'s indentation ({indent} space{}) differs from its block's ({want}, from line {from}): \
             indent it as its block is",
            if indent == 1 { "" } else { "s" }
        ),
    }
}

/// `text` without a trailing ` # comment` (not inside quotes, roughly: a `#` after a space).
fn strip_comment(text: &str) -> &str {
    let mut quote = None;
    let mut last = ' ';
    for (at, c) in text.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '#') if last == ' ' => return &text[..at],
            _ => {}
        }
        last = c;
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_indented_more_than_its_block_is_named() {
        let text = "name: x\nsteps:\n  - deploy: order\n   - trigger: order\n";
        let m = misplaced(text, 4).unwrap();
        assert_eq!((m.line, m.column), (4, 4), "{m:?}");
        assert!(
            m.message.starts_with(
                "line 4's indentation (3 spaces) differs from its block's (2, from line 3)"
            ),
            "{m:?}"
        );
    }

    /// A list where a key was due: `- sleep: 1s` has its value, so `  - sleep: 2s` under it
    /// is out of place.
    #[test]
    fn a_list_item_at_an_items_key_column_is_named() {
        let m = misplaced("steps:\n  - sleep: 1s\n    - sleep: 2s\n", 3).unwrap();
        assert_eq!((m.line, m.column), (3, 5), "{m:?}");
        assert!(
            m.message.contains("from its block's (2, from line 2)"),
            "{m:?}"
        );
    }

    #[test]
    fn a_key_of_a_list_items_mapping_out_of_line_is_named() {
        let text = "services:\n  - name: shop\n     actions: []\n";
        let m = misplaced(text, 3).unwrap();
        assert_eq!((m.line, m.column), (3, 6), "{m:?}");
        assert!(
            m.message.contains("from its block's (4, from line 2)"),
            "{m:?}"
        );
        let text = "services:\n  - name: shop\n    actions:\n      - name: a\n   version: 1.0.0\n";
        let m = misplaced(text, 5).unwrap();
        assert_eq!(m.line, 5, "{m:?}");
        assert!(
            m.message
                .contains("(3 spaces) differs from its block's (2, from line 2)"),
            "{m:?}"
        );
    }

    #[test]
    fn well_indented_files_have_nothing_misplaced() {
        for text in [
            "name: x\nsteps:\n  - deploy: order\n  - trigger: {flow: order, as: r1}\n  - wait_settled: r1\n",
            "steps:\n- deploy: order\n- sleep: 1s\n",
            "services:\n  - name: shop # the shop\n    actions:\n      - name: charge\n        behavior: {return: {ok: true}}\nflows:\n  - file: f.yaml\n",
            "a:\n  b:\n    c: 1\n  d: 2\ne: 3\n",
            "s:\n  - actions:\n      - name: a\n    version: 1\n  - name: b\n",
        ] {
            assert_eq!(misplaced(text, 100), None, "{text}");
        }
    }
}
