//! `X-Request-Id`: taken from the request when it is a sane token (else made), returned on
//! every response, and the field of the `request` span that every log line of the request
//! (handler, preparation, the SSE body) is written under; the tenant joins it once known.

use std::time::{Instant, SystemTime};

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

use crate::observe::trace_context::{TraceContext, random_u64};

pub static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// What the middleware learned of a request, for handlers that want it.
#[derive(Clone, Debug)]
pub struct RequestInfo {
    pub id: String,
    /// `METHOD /path`.
    pub route: String,
    /// From `traceparent`, or a fresh trace.
    pub trace: TraceContext,
    /// When the request reached the server, on both clocks.
    pub received: (Instant, SystemTime),
    /// `User-Agent`, when it is printable (the field policy logs it with ignored keys, so an
    /// operator can tell which client library sends them).
    pub user_agent: Option<String>,
}

impl RequestInfo {
    /// The User-Agent of a handler's optional `RequestInfo`.
    pub fn user_agent_of(info: Option<axum::Extension<RequestInfo>>) -> Option<String> {
        info.and_then(|axum::Extension(i)| i.user_agent)
    }
}

/// A fresh id: 32 hex digits, as vLLM's (a uuid4 hex).
pub fn make() -> String {
    format!("{:016x}{:016x}", random_u64(), random_u64())
}

/// A client's id is kept when it is 1-128 visible ASCII characters (it goes into logs and
/// headers as is); anything else is replaced.
fn accept(v: &HeaderValue) -> Option<String> {
    let s = v.to_str().ok()?;
    let ok = (1..=128).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_graphic());
    ok.then(|| s.to_owned())
}

/// Middleware around every route.
pub async fn request_id(mut req: Request, next: Next) -> Response {
    let id = req
        .headers()
        .get(&X_REQUEST_ID)
        .and_then(accept)
        .unwrap_or_else(make);
    let span = tracing::info_span!(
        "request",
        request_id = %id,
        method = %req.method(),
        path = %req.uri().path(),
        tenant = tracing::field::Empty,
    );
    let start = Instant::now();
    let info = RequestInfo {
        id: id.clone(),
        route: format!("{} {}", req.method(), req.uri().path()),
        trace: TraceContext::from_headers(req.headers()),
        received: (start, SystemTime::now()),
        user_agent: req
            .headers()
            .get(axum::http::header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .map(|s| s.chars().take(200).collect()),
    };
    req.extensions_mut().insert(info);
    let mut res = next.run(req).instrument(span.clone()).await;
    span.in_scope(|| {
        tracing::info!(
            status = res.status().as_u16(),
            ms = start.elapsed().as_secs_f64() * 1e3,
            "response"
        );
    });
    if let Ok(v) = HeaderValue::from_str(&id) {
        res.headers_mut().insert(X_REQUEST_ID.clone(), v);
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_kept_only_when_sane() {
        let keep = HeaderValue::from_static("abc-123_X");
        assert_eq!(accept(&keep).as_deref(), Some("abc-123_X"));
        assert_eq!(accept(&HeaderValue::from_static("a b")), None);
        assert_eq!(accept(&HeaderValue::from_static("")), None);
        let long = HeaderValue::from_str(&"x".repeat(129)).ok();
        assert_eq!(long.and_then(|v| accept(&v)), None);
        let (a, b) = (make(), make());
        assert!(a.len() == 32 && a != b);
    }
}
