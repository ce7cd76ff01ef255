//! `${...}` in flows, payloads and expectations: `${stubs.<name>.url}` (an HTTP stub's URL),
//! `${runs.<name>}` (a named run's id), `${nats.url}` (the scenario's nats-server), `${vars.<name>}`
//! (a value given on the command line with `--var name=value`).

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

static VAR: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\$\{([^}]*)\}").expect("a valid pattern"));

/// Replaces every `${name}` in every string of `value` (keys included) by `lookup(name)`.
///
/// # Errors
/// The first name `lookup` does not know.
pub(crate) fn substitute(
    value: &Value,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Value, String> {
    Ok(match value {
        Value::String(s) => Value::String(substitute_str(s, lookup)?),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|v| substitute(v, lookup))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| Ok((substitute_str(k, lookup)?, substitute(v, lookup)?)))
                .collect::<Result<_, String>>()?,
        ),
        other => other.clone(),
    })
}

/// [`substitute`] for one string.
///
/// # Errors
/// As [`substitute`].
pub(crate) fn substitute_str(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<String, String> {
    if !text.contains("${") {
        return Ok(text.to_owned());
    }
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for caps in VAR.captures_iter(text) {
        let (Some(whole), Some(name)) = (caps.get(0), caps.get(1)) else {
            continue;
        };
        out.push_str(&text[last..whole.start()]);
        let name = name.as_str().trim();
        out.push_str(&lookup(name).ok_or_else(|| match name.strip_prefix("vars.") {
            Some(var) => format!(
                "${{{name}}} has no value: give one with `triggers-lab run --var {var}=VALUE`"
            ),
            None => format!(
                "unknown ${{{name}}}: write ${{stubs.<name>.url}}, ${{runs.<name>}}, ${{nats.url}} \
                 or ${{vars.<name>}} (set with --var)"
            ),
        })?);
        last = whole.end();
    }
    out.push_str(&text[last..]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn replaces_known_names_and_refuses_others() {
        let lookup = |n: &str| (n == "stubs.hook.url").then(|| "http://h/hook".to_owned());
        let v = json!({"t": "${stubs.hook.url}?x=1", "n": 3, "l": ["a${stubs.hook.url}"]});
        assert_eq!(
            substitute(&v, &lookup).unwrap(),
            json!({"t": "http://h/hook?x=1", "n": 3, "l": ["ahttp://h/hook"]})
        );
        let e = substitute(&json!("${runs.r9}"), &lookup).unwrap_err();
        assert!(e.contains("${runs.r9}"), "{e}");
        assert_eq!(substitute_str("$5 {x}", &lookup).unwrap(), "$5 {x}");
    }
}
