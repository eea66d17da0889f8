//! One streaming request against an OpenAI-compatible server, timed from the SSE stream:
//! send time, first token, every later chunk, end, `usage` counts and errors with their status.
//!
//! A "token" here is an SSE chunk that carries text (or a tool-call piece). Servers normally send
//! one token per chunk; when they batch, ITL is per chunk while TPOT still divides by the
//! `usage.completion_tokens` the server reports.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use pagoda_protocol::sse::SseParser;
use pagoda_protocol::{
    ChatCompletionRequest, ChatMessage, CompletionRequest, ErrorResponse, Prompt, StreamOptions,
    Usage,
};
use serde::{Deserialize, Serialize};

use crate::input::{Input, flatten_messages};

/// Which endpoint requests go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Api {
    /// `POST /v1/completions` with a text prompt.
    Completions,
    /// `POST /v1/chat/completions` with messages.
    Chat,
}

/// A server to measure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Target {
    /// Base URL without `/v1`, e.g. `http://127.0.0.1:8000`.
    pub base_url: String,
    /// Sent as `Authorization: Bearer ...`.
    #[serde(skip_serializing)]
    pub api_key: Option<String>,
    /// Model id put in every request.
    pub model: String,
}

impl Target {
    /// `base_url` joined with `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base_url.trim_end_matches('/'), path)
    }

    /// A request builder with the API key applied.
    pub fn post(&self, http: &reqwest::Client, path: &str) -> reqwest::RequestBuilder {
        let builder = http.post(self.url(path));
        match &self.api_key {
            Some(key) => builder.bearer_auth(key),
            None => builder,
        }
    }
}

/// Sampling settings shared by every request of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SamplingSettings {
    /// Send `ignore_eos: true` (vLLM extension) so every request generates `max_tokens`.
    pub ignore_eos: bool,
    /// Sampling temperature; the server's default when `None`.
    pub temperature: Option<f32>,
}

/// Build the JSON body of a streaming request that asks for the final usage chunk.
pub fn request_body(
    api: Api,
    model: &str,
    input: &Input,
    max_tokens: u32,
    sampling: SamplingSettings,
) -> serde_json::Result<serde_json::Value> {
    let stream_options = Some(StreamOptions {
        include_usage: Some(true),
        continuous_usage_stats: None,
    });
    let ignore_eos = sampling.ignore_eos.then_some(true);
    match (api, input) {
        (Api::Completions, input) => {
            let prompt = match input {
                Input::Prompt(p) => p.clone(),
                Input::Messages(m) => flatten_messages(m),
            };
            serde_json::to_value(CompletionRequest {
                model: model.to_owned(),
                prompt: Prompt::Text(prompt),
                max_tokens: Some(max_tokens),
                stream: Some(true),
                stream_options,
                ignore_eos,
                temperature: sampling.temperature,
                ..CompletionRequest::default()
            })
        }
        (Api::Chat, input) => {
            let messages = match input {
                Input::Prompt(p) => vec![ChatMessage::new(pagoda_protocol::Role::User, p.clone())],
                Input::Messages(m) => m.clone(),
            };
            // `max_tokens` rather than `max_completion_tokens`: every server still accepts it.
            serde_json::to_value(ChatCompletionRequest {
                model: model.to_owned(),
                messages,
                max_tokens: Some(max_tokens),
                stream: Some(true),
                stream_options,
                ignore_eos,
                temperature: sampling.temperature,
                ..ChatCompletionRequest::default()
            })
        }
    }
}

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestError {
    /// HTTP status, when the server answered with one.
    pub status: Option<u16>,
    /// The server's error message, or the transport error.
    pub message: String,
}

/// Everything measured about one request. Times are milliseconds, offsets are seconds from the
/// start of the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Position in the workload.
    pub index: usize,
    /// Conversation of a multi-turn workload.
    pub conversation: Option<usize>,
    /// Turn within the conversation.
    pub turn: Option<usize>,
    /// When the arrival process scheduled it.
    pub scheduled_s: f64,
    /// When it was actually sent (later than scheduled when a concurrency cap held it).
    pub sent_s: f64,
    /// Finished with a complete stream and no error.
    pub success: bool,
    /// Send to the first chunk carrying text.
    pub ttft_ms: Option<f64>,
    /// (end-to-end − TTFT) / (output tokens − 1); `None` with fewer than 2 output tokens.
    pub tpot_ms: Option<f64>,
    /// Send to end of stream.
    pub e2e_ms: f64,
    /// Gaps between consecutive text chunks after the first.
    pub itl_ms: Vec<f64>,
    /// `usage.prompt_tokens`, when the server sent usage.
    pub prompt_tokens: Option<u32>,
    /// `usage.completion_tokens`, when the server sent usage.
    pub completion_tokens: Option<u32>,
    /// `usage.prompt_tokens_details.cached_tokens`, when sent.
    pub cached_tokens: Option<u32>,
    /// Prompt length the workload built (tokens, or the stated approximation).
    pub expected_input_tokens: u32,
    /// `max_tokens` sent.
    pub requested_output_tokens: u32,
    /// SSE chunks that carried text.
    pub text_chunks: u32,
    /// Characters of generated text.
    pub output_chars: usize,
    /// The last `finish_reason` seen.
    pub finish_reason: Option<String>,
    /// Set when `success` is false.
    pub error: Option<RequestError>,
}

impl RequestRecord {
    /// Prompt tokens: the server's count, else the workload's.
    pub fn input_tokens(&self) -> u32 {
        self.prompt_tokens.unwrap_or(self.expected_input_tokens)
    }

    /// Output tokens: the server's count, else the number of text chunks.
    pub fn output_tokens(&self) -> u32 {
        self.completion_tokens.unwrap_or(self.text_chunks)
    }
}

/// A finished request: its record and the generated text (multi-turn workloads feed it back).
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Measurements.
    pub record: RequestRecord,
    /// Generated text of choice 0.
    pub text: String,
}

/// The parts of a completions or chat stream chunk the bench reads; anything else is ignored
/// so other servers' extra fields never break a run.
#[derive(Debug, Default, Deserialize)]
struct LooseChunk {
    #[serde(default)]
    choices: Vec<LooseChoice>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Debug, Default, Deserialize)]
struct LooseChoice {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    delta: Option<LooseDelta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct LooseDelta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    tool_calls: Option<serde_json::Value>,
}

/// Timing state while a stream is read.
struct StreamTimer {
    sent: Instant,
    first: Option<Instant>,
    last: Option<Instant>,
    itl_ms: Vec<f64>,
    text: String,
    text_chunks: u32,
    usage: Option<Usage>,
    finish_reason: Option<String>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl StreamTimer {
    fn new(sent: Instant) -> Self {
        Self {
            sent,
            first: None,
            last: None,
            itl_ms: Vec::new(),
            text: String::new(),
            text_chunks: 0,
            usage: None,
            finish_reason: None,
        }
    }

    /// Take one `data:` payload received at `now`.
    fn on_data(&mut self, data: &str, now: Instant) -> Result<(), String> {
        let chunk: LooseChunk = serde_json::from_str(data)
            .map_err(|e| format!("bad stream chunk ({e}): {}", clip(data)))?;
        if chunk.usage.is_some() {
            self.usage = chunk.usage;
        }
        let mut piece = String::new();
        let mut carries_output = false;
        for choice in chunk.choices {
            if let Some(t) = choice.text {
                piece.push_str(&t);
            }
            if let Some(d) = choice.delta {
                piece.push_str(d.content.as_deref().unwrap_or(""));
                piece.push_str(d.reasoning_content.as_deref().unwrap_or(""));
                carries_output |= d.tool_calls.is_some_and(|v| !v.is_null());
            }
            if choice.finish_reason.is_some() {
                self.finish_reason = choice.finish_reason;
            }
        }
        if piece.is_empty() && !carries_output {
            return Ok(());
        }
        match self.last {
            None => self.first = Some(now),
            Some(prev) => self.itl_ms.push(ms(now - prev)),
        }
        self.last = Some(now);
        self.text_chunks += 1;
        self.text.push_str(&piece);
        Ok(())
    }

    fn finish(self, mut record: RequestRecord, end: Instant) -> Outcome {
        let e2e = ms(end - self.sent);
        record.e2e_ms = e2e;
        record.ttft_ms = self.first.map(|f| ms(f - self.sent));
        record.itl_ms = self.itl_ms;
        record.text_chunks = self.text_chunks;
        record.output_chars = self.text.chars().count();
        record.finish_reason = self.finish_reason;
        if let Some(u) = self.usage {
            record.prompt_tokens = Some(u.prompt_tokens);
            record.completion_tokens = Some(u.completion_tokens);
            record.cached_tokens = u.prompt_tokens_details.map(|d| d.cached_tokens);
        }
        let out = record.output_tokens();
        record.tpot_ms = match record.ttft_ms {
            Some(ttft) if out > 1 => Some((e2e - ttft) / f64::from(out - 1)),
            _ => None,
        };
        Outcome {
            record,
            text: self.text,
        }
    }
}

fn clip(s: &str) -> String {
    s.chars().take(300).collect()
}

/// The message of an error body, whether OpenAI-shaped or not.
fn error_message(body: &str) -> String {
    match serde_json::from_str::<ErrorResponse>(body) {
        Ok(e) => e.error.message,
        Err(_) => clip(body.trim()),
    }
}

/// Send one streaming request and time it. `record` comes pre-filled with the workload fields;
/// `epoch` is the start of the run. Never fails: errors are recorded.
pub async fn send_streaming(
    http: &reqwest::Client,
    target: &Target,
    api: Api,
    body: &serde_json::Value,
    mut record: RequestRecord,
    epoch: Instant,
    timeout: Duration,
) -> Outcome {
    let sent = Instant::now();
    record.sent_s = (sent - epoch).as_secs_f64();
    let path = match api {
        Api::Completions => "/v1/completions",
        Api::Chat => "/v1/chat/completions",
    };
    let mut timer = StreamTimer::new(sent);
    let result =
        tokio::time::timeout(timeout, read_stream(http, target, path, body, &mut timer)).await;
    let end = Instant::now();
    let error = match result {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e),
        Err(_) => Some(RequestError {
            status: None,
            message: format!("timed out after {timeout:?}"),
        }),
    };
    record.success = error.is_none();
    record.error = error;
    timer.finish(record, end)
}

async fn read_stream(
    http: &reqwest::Client,
    target: &Target,
    path: &str,
    body: &serde_json::Value,
    timer: &mut StreamTimer,
) -> Result<(), RequestError> {
    let transport = |e: reqwest::Error| RequestError {
        status: None,
        message: e.to_string(),
    };
    let response = target
        .post(http, path)
        .json(body)
        .send()
        .await
        .map_err(transport)?;
    let status = response.status();
    if !status.is_success() {
        let text = response.text().await.unwrap_or_default();
        return Err(RequestError {
            status: Some(status.as_u16()),
            message: error_message(&text),
        });
    }
    let mut parser = SseParser::new();
    let mut bytes = response.bytes_stream();
    let mut done = false;
    while let Some(chunk) = bytes.next().await {
        let chunk = chunk.map_err(transport)?;
        let now = Instant::now();
        for event in parser.feed(&chunk) {
            if done {
                break;
            }
            done = handle_event(timer, &event, now, status.as_u16())?;
        }
        if done {
            return Ok(());
        }
    }
    if let Some(event) = parser.finish() {
        done = handle_event(timer, &event, Instant::now(), status.as_u16())?;
    }
    if done {
        Ok(())
    } else {
        Err(RequestError {
            status: Some(status.as_u16()),
            message: "stream ended before [DONE]".into(),
        })
    }
}

/// Process one SSE event; `Ok(true)` at `[DONE]`.
fn handle_event(
    timer: &mut StreamTimer,
    event: &pagoda_protocol::SseEvent,
    now: Instant,
    status: u16,
) -> Result<bool, RequestError> {
    if event.is_done() {
        return Ok(true);
    }
    if event.is_error() {
        return Err(RequestError {
            status: Some(status),
            message: error_message(&event.data),
        });
    }
    timer
        .on_data(&event.data, now)
        .map_err(|message| RequestError {
            status: Some(status),
            message,
        })?;
    Ok(false)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn timer_measures_chunks_and_reads_usage() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut timer = StreamTimer::new(t0);
        let role = r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#;
        timer.on_data(role, at(5)).unwrap();
        for (i, word) in ["Hel", "lo", " world"].iter().enumerate() {
            let c = format!(
                r#"{{"choices":[{{"index":0,"delta":{{"content":"{word}"}},"finish_reason":null}}]}}"#
            );
            timer.on_data(&c, at(100 + 10 * i as u64)).unwrap();
        }
        timer
            .on_data(
                r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#,
                at(121),
            )
            .unwrap();
        timer
            .on_data(
                r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10,"prompt_tokens_details":{"cached_tokens":4}}}"#,
                at(122),
            )
            .unwrap();
        let out = timer.finish(
            RequestRecord {
                success: true,
                ..Default::default()
            },
            at(130),
        );
        let r = out.record;
        assert_eq!(out.text, "Hello world");
        assert_eq!(r.ttft_ms, Some(100.0));
        assert_eq!(r.itl_ms, vec![10.0, 10.0]);
        assert_eq!(r.e2e_ms, 130.0);
        assert_eq!(r.tpot_ms, Some(15.0)); // (130 - 100) / (3 - 1)
        assert_eq!(
            (r.prompt_tokens, r.completion_tokens, r.cached_tokens),
            (Some(7), Some(3), Some(4))
        );
        assert_eq!(r.finish_reason.as_deref(), Some("length"));
        assert_eq!(r.text_chunks, 3);
    }

    #[test]
    fn completions_chunks_and_bad_json() {
        let t0 = Instant::now();
        let mut timer = StreamTimer::new(t0);
        timer
            .on_data(r#"{"id":"x","choices":[{"text":"a","index":0}]}"#, t0)
            .unwrap();
        assert!(timer.on_data("not json", t0).is_err());
        let out = timer.finish(RequestRecord::default(), t0 + Duration::from_millis(1));
        assert_eq!(out.text, "a");
        assert_eq!(out.record.tpot_ms, None);
        assert_eq!(out.record.output_tokens(), 1);
    }

    #[test]
    fn error_bodies() {
        let body = r#"{"error":{"message":"`top_p` must be in (0, 1]","type":"invalid_request_error","param":"top_p","code":null}}"#;
        assert_eq!(error_message(body), "`top_p` must be in (0, 1]");
        assert_eq!(error_message("  plain failure \n"), "plain failure");
    }

    #[test]
    fn bodies_ask_for_a_stream_with_usage() {
        let s = SamplingSettings {
            ignore_eos: true,
            temperature: Some(0.0),
        };
        let b = request_body(Api::Completions, "m", &Input::Prompt("hi".into()), 16, s).unwrap();
        assert_eq!(b["stream"], true);
        assert_eq!(b["stream_options"]["include_usage"], true);
        assert_eq!(b["ignore_eos"], true);
        assert_eq!(b["max_tokens"], 16);
        assert_eq!(b["prompt"], "hi");
        let b = request_body(
            Api::Chat,
            "m",
            &Input::Prompt("hi".into()),
            16,
            SamplingSettings::default(),
        )
        .unwrap();
        assert_eq!(b["messages"][0]["role"], "user");
        assert!(b.get("ignore_eos").is_none() && b.get("temperature").is_none());
    }
}
