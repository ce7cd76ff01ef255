//! Shrinking: smaller inputs than a failing one, simplest first, for a greedy search that keeps
//! the first one that still fails.

use serde_json::{Number, Value, json};

/// Smaller inputs than `v`, simplest first: fields removed, strings and arrays cut, numbers
/// brought toward zero by ever smaller steps (which homes in on a boundary like a bisection).
#[must_use]
pub fn shrink(v: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    match v {
        Value::Object(map) => {
            for key in map.keys() {
                let mut smaller = map.clone();
                smaller.remove(key);
                out.push(Value::Object(smaller));
            }
            for (key, inner) in map {
                for s in shrink(inner) {
                    let mut smaller = map.clone();
                    smaller.insert(key.clone(), s);
                    out.push(Value::Object(smaller));
                }
            }
        }
        Value::Array(items) => {
            if !items.is_empty() {
                out.push(Value::Array(Vec::new()));
                out.push(Value::Array(items[..items.len() / 2].to_vec()));
                out.push(Value::Array(items[1..].to_vec()));
                out.push(Value::Array(items[..items.len() - 1].to_vec()));
            }
            for (i, inner) in items.iter().enumerate() {
                for s in shrink(inner) {
                    let mut smaller = items.clone();
                    smaller[i] = s;
                    out.push(Value::Array(smaller));
                }
            }
        }
        Value::String(s) if !s.is_empty() => {
            let chars: Vec<char> = s.chars().collect();
            out.push(json!(""));
            out.push(json!(chars[..chars.len() / 2].iter().collect::<String>()));
            out.push(json!(chars[1..].iter().collect::<String>()));
            out.push(json!(chars[..chars.len() - 1].iter().collect::<String>()));
            // The same length in plain letters: what fails for a character, not a length,
            // keeps failing on the others.
            if chars.iter().any(|c| !c.is_ascii_lowercase()) {
                out.push(json!("a".repeat(chars.len())));
            }
        }
        Value::Number(n) => {
            if let Some(i) = n.as_i64()
                && i != 0
            {
                out.push(json!(0));
                for k in 1..64 {
                    let step = i / (1i64 << k.min(62));
                    if step == 0 {
                        break;
                    }
                    out.push(json!(i - step));
                }
                out.push(json!(i - i.signum()));
            } else if let Some(f) = n.as_f64()
                && f != 0.0
            {
                out.push(json!(0));
                if f.fract() != 0.0 && f.trunc().abs() < 9.0e15 {
                    out.push(json!(f.trunc() as i64));
                }
                for k in 1..54 {
                    let smaller = f - f / 2f64.powi(k);
                    if smaller == f {
                        break;
                    }
                    if let Some(n) = Number::from_f64(smaller) {
                        out.push(Value::Number(n));
                    }
                }
            }
        }
        Value::Bool(true) => out.push(json!(false)),
        _ => {}
    }
    out.retain(|s| s != v);
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shrinking_goes_toward_small_values() {
        assert!(shrink(&json!(1000)).contains(&json!(500)));
        assert!(shrink(&json!(1000)).contains(&json!(999)));
        assert!(shrink(&json!({"a": 1, "b": "xy"})).contains(&json!({"b": "xy"})));
        assert!(shrink(&json!("")).is_empty());
        assert!(shrink(&json!(0)).is_empty());
        assert!(shrink(&json!("é")).contains(&json!("a")));
    }

    /// What greedy shrinking ends on: the first smaller input that still fails, again and again.
    fn greedy(mut v: Value, fails: impl Fn(&Value) -> bool) -> Value {
        'again: loop {
            for c in shrink(&v) {
                if fails(&c) {
                    v = c;
                    continue 'again;
                }
            }
            return v;
        }
    }

    /// Greedy shrinking of a float that fails above a bound ends close to the bound.
    #[test]
    fn a_float_is_shrunk_near_its_boundary() {
        let v = greedy(json!(123_456.789), |v| {
            v.as_f64().is_some_and(|f| f > 100.25)
        });
        // The smallest integer past it: simpler than any fraction.
        assert_eq!(v, json!(101));
        // Below 1, fractions are all there is: bisection gets close.
        let v = greedy(json!(0.987_654), |v| v.as_f64().is_some_and(|f| f > 0.25));
        let f = v.as_f64().unwrap();
        assert!(f > 0.25 && f < 0.26, "{f}");
    }
}
