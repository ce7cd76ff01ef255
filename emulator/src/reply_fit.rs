//! Fitting control replies into one NATS message: a list is sent a page at a time (as many
//! items as fit, one at least), and an item too large on its own (a record of a near
//! `max_payload` message, a violation of a message with thousands of headers) is cut to an
//! excerpt that says so, rather than make the op unreadable for good.

use serde::Serialize;
use serde_json::Value;

/// The bytes kept of a long string in a cut item, at first (halved until the item fits).
const CUT_TEXT: usize = 4096;
/// The headers kept of a cut item, at first (halved until the item fits, 8 at least).
const CUT_HEADERS: usize = 64;
/// What an item may take, at most, of a reply of `max` bytes: the rest is the reply's frame.
const FRAME: usize = 128;

/// How many bytes `v` takes as JSON, counted without keeping them.
pub(crate) fn json_len<T: Serialize + ?Sized>(v: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, v);
    count.0
}

/// The first of `items` that fit together in a JSON array of at most `max` bytes, one at least:
/// an item too large alone is cut first ([`cut`]). Returns them and how many were cut.
pub(crate) fn fit_page(items: Vec<Value>, max: usize) -> (Vec<Value>, usize) {
    let room = max.saturating_sub(FRAME);
    let mut size = 2;
    let mut cuts = 0;
    let mut page = Vec::new();
    for mut item in items {
        let mut len = json_len(&item);
        if len > room {
            cut(&mut item, room);
            cuts += 1;
            len = json_len(&item);
        }
        let needs = len + usize::from(!page.is_empty());
        if !page.is_empty() && size + needs > room {
            break;
        }
        size += needs;
        page.push(item);
    }
    (page, cuts)
}

/// Cuts `item` to at most `room` bytes of JSON if it can: every string longer than a bound is
/// cut to its first bytes, and a `headers` list to its first entries, each saying what it lost
/// (the bounds halve until it fits). The shape stays: strings stay strings, a header stays a
/// `[name, value]` pair.
pub(crate) fn cut(item: &mut Value, room: usize) {
    let whole = item.clone();
    let (mut text, mut headers) = (CUT_TEXT, CUT_HEADERS);
    loop {
        let mut v = whole.clone();
        cut_value(&mut v, text, headers);
        if json_len(&v) <= room || text <= 16 {
            *item = v;
            return;
        }
        text /= 2;
        headers = (headers / 2).max(8);
    }
}

fn cut_value(v: &mut Value, text: usize, headers: usize) {
    match v {
        Value::String(s) if s.len() > text => {
            let mut end = text;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            let len = s.len();
            s.truncate(end);
            s.push_str(&format!("… [cut for the reply: {end} of {len} bytes]"));
        }
        Value::Array(list) => list.iter_mut().for_each(|x| cut_value(x, text, headers)),
        Value::Object(map) => {
            for (key, x) in map.iter_mut() {
                if key == "headers"
                    && let Value::Array(list) = x
                    && list.len() > headers
                {
                    let more = list.len() - headers;
                    list.truncate(headers);
                    list.push(Value::from(vec![
                        "Triggers-Lab-Cut".to_owned(),
                        format!("{more} more header(s) cut for the reply"),
                    ]));
                }
                cut_value(x, text, headers);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_page_holds_what_fits_and_one_item_too_large_is_cut_to_fit() {
        let big = json!({"seq": 1, "payload": "x".repeat(10_000),
            "headers": (0..3000).map(|i| [format!("X-Junk-{i}"), "junk".to_owned()]).collect::<Vec<_>>()});
        let small = json!({"seq": 2, "payload": "ok"});
        let (page, cuts) = fit_page(vec![big, small.clone()], 4096);
        assert_eq!(cuts, 1);
        assert!(json_len(&page) <= 4096, "{}", json_len(&page));
        assert_eq!(page.len(), 2);
        assert_eq!(page[1], small);
        let payload = page[0]["payload"].as_str().unwrap();
        assert!(payload.contains("of 10000 bytes]"), "{payload}");
        let headers = page[0]["headers"].as_array().unwrap();
        let last = headers.last().unwrap();
        assert_eq!(last[0], "Triggers-Lab-Cut");
        assert!(last[1].as_str().unwrap().contains("more header(s) cut"));
        // Many items: the first that fit, never none.
        let many: Vec<Value> = (0..1000)
            .map(|i| json!({"seq": i, "p": "y".repeat(50)}))
            .collect();
        let (page, cuts) = fit_page(many, 4096);
        assert_eq!(cuts, 0);
        assert!(!page.is_empty() && page.len() < 1000);
        assert_eq!(page[0]["seq"], 0);
        assert!(json_len(&page) <= 4096);
    }

    #[test]
    fn cutting_keeps_text_on_char_boundaries() {
        let mut v = json!({"payload": "é".repeat(5000)});
        cut(&mut v, 1000);
        assert!(json_len(&v) <= 1000);
        assert!(v["payload"].as_str().unwrap().starts_with("éé"));
    }
}
