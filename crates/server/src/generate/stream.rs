//! Server-sent events out, one driver for every endpoint: a generation's updates go through the
//! endpoint's `ChoiceFormatter` into framed events (chunks, usage chunk, `[DONE]`, or an error
//! event after the stream has started), or into its whole response. The body pulls events one
//! at a time, so a slow client applies backpressure up to the engine's bounded per-request
//! buffer and a gone client drops it all.

use std::convert::Infallible;

use axum::body::Body;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::Response;
use futures_util::{Stream, StreamExt};
use pagoda_protocol::{Usage, sse};
use serde::Serialize;
use tracing::Instrument;

use crate::error::ApiError;
use crate::generate::generation::{ChoiceUpdate, Generation};

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

/// How one endpoint writes a generation: its stream chunks and its whole (non-stream) response.
/// The driver below feeds it; it never sees the engine.
pub trait ChoiceFormatter: Send + 'static {
    type Response: Serialize + Send;

    /// Events before any update (chat's role chunks); none by default.
    fn opening(&mut self, _num_choices: usize) -> String {
        String::new()
    }

    /// The events of one update; empty when it adds nothing the client would see.
    fn events(&mut self, update: ChoiceUpdate) -> String;

    /// The final usage chunk (`stream_options.include_usage`); none by default.
    fn usage_event(&self, _usage: Usage) -> String {
        String::new()
    }

    /// The events after the last update: the usage chunk when asked, then `[DONE]` (the
    /// OpenAI APIs' ending; Messages and Responses end with their own events).
    fn closing(&mut self, usage: Usage, include_usage: bool) -> String {
        let mut out = String::new();
        if include_usage {
            out.push_str(&self.usage_event(usage));
        }
        out.push_str(&done());
        out
    }

    /// A failure after the headers went out, as this API's error event.
    fn error_event(&self, e: &ApiError) -> String {
        error(e)
    }

    /// Folds an update into the whole response (non-stream requests).
    fn absorb(&mut self, update: ChoiceUpdate);

    /// The whole response, once every choice finished.
    fn response(self, usage: Usage) -> Self::Response;
}

/// The SSE events of a generation: the opening, one event group per update, then the
/// formatter's closing (usage chunk when asked, `[DONE]`); an error after the headers is the
/// formatter's error event, which ends it.
/// `guard` keeps the request counted in flight until the stream ends or the client goes away.
pub fn events<F: ChoiceFormatter, G: Send + 'static>(
    generation: Generation,
    fmt: F,
    include_usage: bool,
    guard: G,
) -> impl Stream<Item = String> + Send + 'static {
    enum Phase {
        Opening,
        Updates,
        Ended,
    }
    // The body is polled after the handler returned: keep its logs under the request's span.
    let span = tracing::Span::current();
    futures_util::stream::unfold(
        (generation, fmt, Phase::Opening, guard),
        move |(mut generation, mut fmt, phase, guard)| {
            let span = span.clone();
            async move {
                match phase {
                    Phase::Opening => {
                        let out = fmt.opening(generation.num_choices());
                        Some((out, (generation, fmt, Phase::Updates, guard)))
                    }
                    Phase::Updates => loop {
                        match generation.next().await {
                            Some(Ok(u)) => {
                                let out = fmt.events(u);
                                if !out.is_empty() {
                                    return Some((out, (generation, fmt, Phase::Updates, guard)));
                                }
                            }
                            Some(Err(e)) => {
                                let out = fmt.error_event(&e);
                                return Some((out, (generation, fmt, Phase::Ended, guard)));
                            }
                            None => {
                                let out = fmt.closing(generation.usage(), include_usage);
                                return Some((out, (generation, fmt, Phase::Ended, guard)));
                            }
                        }
                    },
                    Phase::Ended => None,
                }
            }
            .instrument(span)
        },
    )
    .filter(|e| std::future::ready(!e.is_empty()))
}

/// Runs a generation to its end and returns the formatter's whole response.
pub async fn collect<F: ChoiceFormatter>(
    mut generation: Generation,
    mut fmt: F,
) -> Result<F::Response, ApiError> {
    while let Some(item) = generation.next().await {
        fmt.absorb(item?);
    }
    Ok(fmt.response(generation.usage()))
}
