//! Server-sent events out: a stream of already-framed events becomes a `text/event-stream`
//! response. The routes build the events (chunks, usage chunk, `[DONE]`, or an error event
//! after the stream has started); the body pulls them one at a time, so a slow client applies
//! backpressure up to the engine's bounded per-request buffer and a gone client drops it all.

use std::convert::Infallible;

use axum::body::Body;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::Response;
use futures_util::{Stream, StreamExt};
use pagoda_protocol::sse;
use serde::Serialize;

use crate::error::ApiError;

/// A streaming response over `events` (each a complete SSE event).
pub fn sse_response<S>(events: S) -> Response
where
    S: Stream<Item = String> + Send + 'static,
{
    let body = Body::from_stream(events.map(Ok::<_, Infallible>));
    let mut res = Response::new(body);
    let headers = res.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        axum::http::HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(
        CACHE_CONTROL,
        axum::http::HeaderValue::from_static("no-cache"),
    );
    res
}

/// One `data: {json}` event.
pub fn data<T: Serialize>(value: &T) -> String {
    sse::encode_data(value).unwrap_or_else(|e| error(&ApiError::internal(e.to_string())))
}

/// The OpenAI error body as an event, for failures after the headers went out.
pub fn error(e: &ApiError) -> String {
    sse::encode_error(&e.body)
}

/// `data: [DONE]`.
pub fn done() -> String {
    sse::DONE_EVENT.to_owned()
}
