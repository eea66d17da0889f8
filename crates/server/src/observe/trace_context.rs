//! W3C trace context: a request's `traceparent` (`00-<trace id>-<parent span id>-<flags>`)
//! makes pagoda's spans children of the caller's; without one (or with a malformed one) the
//! request starts a trace of its own.

use std::hash::{BuildHasher, Hasher, RandomState};

use axum::http::HeaderMap;

/// The trace a request's spans belong to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceContext {
    pub trace_id: [u8; 16],
    /// The caller's span, parent of the request's root span.
    pub parent_span_id: Option<[u8; 8]>,
    /// The caller's sampling decision (a fresh trace is sampled).
    pub sampled: bool,
}

impl TraceContext {
    pub fn from_headers(headers: &HeaderMap) -> Self {
        headers
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .and_then(Self::parse)
            .unwrap_or_else(Self::fresh)
    }

    pub fn fresh() -> Self {
        let mut trace_id = [0u8; 16];
        trace_id[..8].copy_from_slice(&random_u64().to_be_bytes());
        trace_id[8..].copy_from_slice(&random_u64().to_be_bytes());
        Self {
            trace_id,
            parent_span_id: None,
            sampled: true,
        }
    }

    /// Version 00 as the spec writes it; a future version is read for its first four fields.
    pub fn parse(header: &str) -> Option<Self> {
        let mut parts = header.trim().split('-');
        let version = hex::<1>(parts.next()?)?;
        let trace_id = hex::<16>(parts.next()?)?;
        let parent = hex::<8>(parts.next()?)?;
        let flags = hex::<1>(parts.next()?)?;
        let valid = version[0] != 0xff
            && (version[0] != 0 || parts.next().is_none())
            && trace_id != [0; 16]
            && parent != [0; 8];
        valid.then_some(Self {
            trace_id,
            parent_span_id: Some(parent),
            sampled: flags[0] & 1 == 1,
        })
    }
}

/// A new span id.
pub fn span_id() -> [u8; 8] {
    random_u64().max(1).to_be_bytes()
}

/// Exactly `N` bytes of lowercase hex.
fn hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != 2 * N || !s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let mut out = [0u8; N];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// Lowercase hex of `bytes` (OTLP/JSON writes ids so).
pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// 64 random bits (std's per-process random SipHash keys, advanced per call).
pub fn random_u64() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_parses_and_bad_ones_are_refused() {
        let t =
            TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        assert_eq!(to_hex(&t.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(to_hex(&t.parent_span_id.unwrap()), "00f067aa0ba902b7");
        assert!(t.sampled);
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        ] {
            assert_eq!(TraceContext::parse(bad), None, "{bad}");
        }
        let unsampled =
            TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
        assert!(!unsampled.unwrap().sampled);
    }
}
