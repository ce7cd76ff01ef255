//! The conformance violations kept: at most `max_violations`, and no more than `max_record_bytes`
//! of the messages they hold (past it, a violation keeps an excerpt); the rest are counted.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::conformance::{self, Violation};
use crate::recorder::{Body, SharedHeaders};

pub(crate) struct Violations {
    kept: VecDeque<Violation>,
    max_count: usize,
    max_bytes: usize,
    /// Violations beyond `max_violations`, counted, not kept.
    dropped: u64,
    /// Bytes of the payloads and headers the kept violations hold.
    bytes: usize,
    /// Violations kept with an excerpt of their message (its first bytes and headers) because
    /// the violations' bytes had reached `max_record_bytes`.
    trimmed: u64,
}

impl Violations {
    pub(crate) fn new(max_count: usize, max_bytes: usize) -> Self {
        Violations {
            kept: VecDeque::new(),
            max_count,
            max_bytes,
            dropped: 0,
            bytes: 0,
            trimmed: 0,
        }
    }

    /// Every violation kept, oldest first.
    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = &Violation> {
        self.kept.iter()
    }

    /// Violations found but not kept.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Violations kept with an excerpt of their message.
    pub(crate) fn trimmed(&self) -> u64 {
        self.trimmed
    }

    /// Every violation found: those kept and those counted.
    pub(crate) fn found(&self) -> usize {
        self.kept
            .len()
            .saturating_add(usize::try_from(self.dropped).unwrap_or(usize::MAX))
    }

    /// Keeps the violations of one message within the bounds (they share its bytes: counted
    /// once while they stay shared), counting the rest; calls `record` with each, as kept.
    pub(crate) fn add(&mut self, violations: Vec<Violation>, mut record: impl FnMut(&Violation)) {
        let mut shared: Option<(Body, SharedHeaders)> = None;
        for mut v in violations {
            let sharing = shared.as_ref().is_some_and(|(payload, headers)| {
                payload.as_bytes().as_ptr() == v.payload.as_bytes().as_ptr()
                    && Arc::ptr_eq(headers, &v.headers)
            });
            if self.kept.len() < self.max_count && !sharing {
                let size = held_bytes(&v);
                if self.bytes.saturating_add(size) > self.max_bytes {
                    trim(&mut v);
                    self.trimmed += 1;
                    self.bytes = self.bytes.saturating_add(held_bytes(&v));
                } else {
                    self.bytes = self.bytes.saturating_add(size);
                    shared = Some((v.payload.clone(), v.headers.clone()));
                }
            }
            record(&v);
            if self.kept.len() >= self.max_count {
                self.dropped += 1;
            } else {
                self.kept.push_back(v);
            }
        }
    }
}

/// The bytes of its message a violation holds: its payload and headers.
fn held_bytes(v: &Violation) -> usize {
    v.payload.len()
        + v.headers
            .iter()
            .map(|(n, value)| n.len() + value.len())
            .sum::<usize>()
}

/// The payload bytes, the headers and the bytes of each header's name and value a trimmed
/// violation keeps of its message.
const EXCERPT_BYTES: usize = 4096;
const EXCERPT_HEADERS: usize = 64;
const EXCERPT_HEADER_BYTES: usize = 256;

/// Cuts a violation's message to an excerpt (copied, so the whole message is not kept alive
/// through it), and says so in its text.
fn trim(v: &mut Violation) {
    let payload = v.payload.len();
    let headers = v.headers.len();
    if payload > EXCERPT_BYTES {
        v.payload = Body::from(&v.payload[..EXCERPT_BYTES]);
    }
    v.headers = v
        .headers
        .iter()
        .take(EXCERPT_HEADERS)
        .map(|(name, value)| {
            (
                conformance::clip(name, EXCERPT_HEADER_BYTES),
                conformance::clip(value, EXCERPT_HEADER_BYTES),
            )
        })
        .collect();
    v.message.push_str(&format!(
        " [kept as an excerpt: the violations already hold max_record_bytes of messages; this one's payload of {payload} bytes and {headers} header(s) cut to at most {EXCERPT_BYTES} bytes and {EXCERPT_HEADERS} headers of {EXCERPT_HEADER_BYTES} bytes]"
    ));
}
