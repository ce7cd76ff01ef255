//! The bridge between the wire module's transport-neutral [`Headers`] and async-nats.
//!
//! async-nats panics on a header name with a control character, a non-ASCII byte or `:`, and on a
//! value with CR or LF; these conversions check first and return an error instead.

use async_nats::HeaderMap;

use crate::wire::Headers;

/// A header that NATS cannot carry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("header {name:?} cannot be sent on NATS: {reason}")]
pub struct HeaderError {
    /// The header name.
    pub name: String,
    /// What is wrong with it or its value.
    pub reason: &'static str,
}

/// Converts headers for publishing, keeping every name's spelling.
///
/// # Errors
/// When a name or a value cannot be carried by NATS.
pub fn to_nats(headers: &Headers) -> Result<HeaderMap, HeaderError> {
    let mut map = HeaderMap::new();
    for (name, value) in headers.iter() {
        if name.is_empty() || name.contains(|c: char| !c.is_ascii_graphic() || c == ':') {
            return Err(HeaderError {
                name: name.to_owned(),
                reason: "a name must be printable ASCII without ':'",
            });
        }
        if value.contains(['\r', '\n']) {
            return Err(HeaderError {
                name: name.to_owned(),
                reason: "a value must not contain CR or LF",
            });
        }
        map.append(name, value);
    }
    Ok(map)
}

/// Converts received headers (names keep their spelling; order follows the map's).
#[must_use]
pub fn from_nats(map: Option<&HeaderMap>) -> Headers {
    let Some(map) = map else {
        return Headers::new();
    };
    let mut pairs: Vec<(String, String)> = map
        .iter()
        .flat_map(|(name, values)| {
            values
                .iter()
                .map(move |v| (name.to_string(), v.as_str().to_owned()))
        })
        .collect();
    // async-nats keeps headers in a HashMap; sort for a stable order in records and tests.
    pairs.sort();
    pairs.into_iter().collect()
}

/// Waits until the server has processed everything this client sent before the call: its
/// subscriptions included.
///
/// async-nats' `flush` only writes the client's buffer to the socket; a subscription made just
/// before it may not be in place yet when another connection publishes. A message to a fresh
/// inbox, received back, proves the server has read every earlier command of this connection (it
/// reads them in order).
///
/// # Errors
/// When the subscription or the publish fails, or the message does not come back in 10 s.
pub async fn round_trip(client: &async_nats::Client) -> Result<(), String> {
    use futures::StreamExt;
    let inbox = client.new_inbox();
    let mut sub = client
        .subscribe(inbox.clone())
        .await
        .map_err(|e| format!("cannot subscribe: {e}"))?;
    client
        .publish(inbox, bytes::Bytes::new())
        .await
        .map_err(|e| format!("cannot publish: {e}"))?;
    match tokio::time::timeout(std::time::Duration::from_secs(10), sub.next()).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err("the connection closed".into()),
        Err(_) => Err("the server did not echo a message within 10 s".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_nats_cannot_carry_and_keeps_spelling() {
        let mut h = Headers::new();
        h.insert("X-Triggers-Flow-Id", "f");
        h.insert("nats-msg-id", "k");
        let back = from_nats(Some(&to_nats(&h).unwrap()));
        assert_eq!(back.get("X-Triggers-Flow-Id"), Some("f"));
        assert!(back.iter().any(|(n, _)| n == "nats-msg-id"));
        for (name, value) in [("bad name", "v"), ("a:b", "v"), ("é", "v"), ("ok", "a\nb")] {
            let mut h = Headers::new();
            h.insert(name, value);
            assert!(to_nats(&h).is_err(), "{name:?} {value:?}");
        }
    }
}
