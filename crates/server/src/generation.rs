//! One request's generation as the routes see it: every choice is its own engine request (so a
//! stop string ends only its choice); engine outputs become per-choice text updates through a
//! `TextStream`, with stop strings, finish reasons, usage and the latency metrics. Dropping a
//! `Generation` drops its engine streams, which aborts whatever is still running.

use std::sync::Arc;
use std::time::Instant;

use futures_util::future::select_all;
use pagoda_core::engine::{RequestStream, StreamError};
use pagoda_core::kv::ExtraKeys;
use pagoda_core::{AddRequestError, EngineOutput, EngineRequest, FinishReason, PositionLogprobs};
use pagoda_frontend::{TextStream, TextStreamOptions, Tokenizer};
use pagoda_protocol::{FinishReason as WireFinish, PromptTokensDetails, StopReason, Usage};

use crate::error::ApiError;
use crate::state::{AppState, Loaded};
use crate::validate::GenRequest;

/// How a choice ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Finish {
    pub reason: WireFinish,
    /// The stop string or stop token id that matched (vLLM `stop_reason`).
    pub stop_reason: Option<StopReason>,
}

/// What one engine output added to one choice.
#[derive(Clone, Debug, Default)]
pub struct ChoiceUpdate {
    /// Choice index (`prompt * n + i`).
    pub index: u32,
    pub text: String,
    /// The tokens this update accounts for (after a stop string: up to the one completing it).
    pub token_ids: Vec<u32>,
    /// One per token of `token_ids`, when logprobs were asked for.
    pub logprobs: Vec<PositionLogprobs>,
    /// Prompt logprobs (positions 1 onward), on the first update of a choice that asked.
    pub prompt_logprobs: Option<Vec<PositionLogprobs>>,
    pub finish: Option<Finish>,
}

struct Choice {
    stream: Option<RequestStream>,
    text: TextStream,
    generated: u32,
    cached_tokens: usize,
    first_token_at: Option<Instant>,
    last_output_at: Option<Instant>,
    arrival: Option<Instant>,
}

/// A running request: its choices' engine streams and text state.
pub struct Generation {
    state: AppState,
    choices: Vec<Choice>,
    prompt_lens: Vec<usize>,
    stop: Vec<String>,
    stop_token_ids: Vec<u32>,
    n: usize,
}

impl Generation {
    /// Submits every choice; 429 when the waiting queue is full (nothing stays submitted).
    pub fn start(state: &AppState, loaded: &Loaded, req: &GenRequest) -> Result<Self, ApiError> {
        let opts = TextStreamOptions {
            stop: req.stop.clone(),
            skip_special_tokens: req.skip_special_tokens,
            include_stop_str_in_output: req.include_stop_str_in_output,
        };
        let mut choices = Vec::with_capacity(req.prompts.len() * req.n as usize);
        for prompt in &req.prompts {
            for i in 0..req.n {
                let mut params = req.params.clone();
                // The engine's own n > 1 seeds sequence i with seed + i; keep that.
                params.seed = params.seed.map(|s| s.wrapping_add(u64::from(i)));
                let stream = loaded
                    .engine
                    .add_request(EngineRequest {
                        id: 0,
                        prompt_token_ids: prompt.clone(),
                        params,
                        priority: req.priority,
                        extra_keys: ExtraKeys {
                            lora_id: None,
                            cache_salt: req.cache_salt.clone(),
                        },
                    })
                    .map_err(|e| submit_error(state, e))?;
                let text = TextStream::new(Arc::clone(&loaded.tokenizer), prompt, opts.clone())
                    .map_err(|e| ApiError::invalid("stop", e.to_string()))?;
                choices.push(Choice {
                    stream: Some(stream),
                    text,
                    generated: 0,
                    cached_tokens: 0,
                    first_token_at: None,
                    last_output_at: None,
                    arrival: None,
                });
            }
        }
        Ok(Self {
            state: state.clone(),
            choices,
            prompt_lens: req.prompts.iter().map(Vec::len).collect(),
            stop: req.stop.clone(),
            stop_token_ids: req.params.stop_token_ids.clone(),
            n: req.n as usize,
        })
    }

    /// The next update of any choice; `None` when every choice has finished.
    pub async fn next(&mut self) -> Option<Result<ChoiceUpdate, ApiError>> {
        let (index, item) = {
            let mut live: Vec<(usize, &mut RequestStream)> = self
                .choices
                .iter_mut()
                .enumerate()
                .filter_map(|(i, c)| c.stream.as_mut().map(|s| (i, s)))
                .collect();
            match live.len() {
                0 => return None,
                1 => {
                    let (i, s) = live.pop()?;
                    (i, s.recv().await)
                }
                _ => {
                    // RequestStream::recv is a tokio mpsc recv: cancel-safe, so the losers of
                    // the race lose nothing.
                    let futs = live
                        .into_iter()
                        .map(|(i, s)| Box::pin(async move { (i, s.recv().await) }));
                    select_all(futs).await.0
                }
            }
        };
        match item {
            Some(Ok(out)) => Some(Ok(self.apply(index, out))),
            Some(Err(e)) => {
                self.choices[index].stream = None;
                Some(Err(stream_error(e)))
            }
            None => {
                self.choices[index].stream = None;
                Some(Err(ApiError::internal("the engine stream ended early")))
            }
        }
    }

    fn apply(&mut self, index: usize, mut out: EngineOutput) -> ChoiceUpdate {
        let metrics = self.state.metrics();
        let choice = &mut self.choices[index];
        choice.cached_tokens = out.num_cached_tokens;
        choice.arrival = Some(out.timing.arrival);
        let mut update = ChoiceUpdate {
            index: index as u32,
            prompt_logprobs: out.prompt_logprobs.take(),
            ..Default::default()
        };
        let mut stopped = None;
        for (j, &tok) in out.new_token_ids.iter().enumerate() {
            let delta = choice.text.push(tok);
            update.text.push_str(&delta.text);
            update.token_ids.push(tok);
            if let Some(lp) = out.logprobs.get(j) {
                update.logprobs.push(lp.clone());
            }
            if let Some(m) = delta.stopped {
                stopped = Some(m.stop_index);
                break;
            }
        }
        choice.generated += update.token_ids.len() as u32;
        let now = out.timing.at;
        if !update.token_ids.is_empty() {
            match (choice.first_token_at, choice.last_output_at) {
                (None, _) => {
                    choice.first_token_at = Some(now);
                    metrics
                        .time_to_first_token
                        .observe((now - out.timing.arrival).as_secs_f64());
                    if let Some(s) = out.timing.first_scheduled {
                        metrics
                            .queue_time
                            .observe((s - out.timing.arrival).as_secs_f64());
                    }
                }
                (Some(_), Some(last)) => metrics
                    .inter_token_latency
                    .observe((now - last).as_secs_f64()),
                (Some(_), None) => {}
            }
            choice.last_output_at = Some(now);
        }
        let finish = if let Some(stop_index) = stopped {
            // A stop string ends the choice here; dropping the stream aborts it in the engine.
            choice.stream = None;
            Some(Finish {
                reason: WireFinish::Stop,
                stop_reason: self.stop.get(stop_index).cloned().map(StopReason::Text),
            })
        } else if let Some(reason) = &out.finish_reason {
            choice.stream = None;
            let tail = choice.text.finish();
            update.text.push_str(&tail.text);
            Some(match (tail.stopped, reason) {
                (Some(m), _) => Finish {
                    reason: WireFinish::Stop,
                    stop_reason: self.stop.get(m.stop_index).cloned().map(StopReason::Text),
                },
                (None, FinishReason::Stop(tok)) => Finish {
                    reason: WireFinish::Stop,
                    stop_reason: self
                        .stop_token_ids
                        .contains(tok)
                        .then_some(StopReason::Token(*tok)),
                },
                (None, FinishReason::Length) => Finish {
                    reason: WireFinish::Length,
                    stop_reason: None,
                },
                (None, FinishReason::Abort | FinishReason::Error(_)) => Finish {
                    reason: WireFinish::Abort,
                    stop_reason: None,
                },
            })
        } else {
            None
        };
        if let Some(f) = &finish {
            let end = if stopped.is_some() {
                Instant::now()
            } else {
                now
            };
            let arrival = out.timing.arrival;
            metrics.e2e_latency.observe((end - arrival).as_secs_f64());
            if let Some(first) = choice.first_token_at
                && choice.generated > 1
            {
                let per = (end - first).as_secs_f64() / f64::from(choice.generated - 1);
                metrics.time_per_output_token.observe(per);
            }
            metrics.prompt_tokens.observe(out.num_prompt_tokens as f64);
            metrics
                .generation_tokens
                .observe(f64::from(choice.generated));
            metrics.count_finished(wire_name(f.reason));
        }
        update.finish = finish;
        update
    }

    /// Exact token counts so far: each prompt once, every choice's generated tokens, and the
    /// prompt tokens served from the prefix cache (first choice of each prompt).
    pub fn usage(&self) -> Usage {
        let prompt: usize = self.prompt_lens.iter().sum();
        let completion: u32 = self.choices.iter().map(|c| c.generated).sum();
        let cached: usize = self
            .choices
            .iter()
            .step_by(self.n.max(1))
            .map(|c| c.cached_tokens)
            .sum();
        let mut usage = Usage::new(prompt as u32, completion);
        usage.prompt_tokens_details = Some(PromptTokensDetails {
            cached_tokens: cached as u32,
        });
        usage
    }

    /// Number of choices (`prompts * n`).
    pub fn num_choices(&self) -> usize {
        self.choices.len()
    }
}

impl Drop for Generation {
    /// Choices still running when the request goes away (client gone, error) count as aborted.
    fn drop(&mut self) {
        for c in &self.choices {
            if c.stream.is_some() {
                self.state.metrics().count_finished("abort");
            }
        }
    }
}

fn wire_name(r: WireFinish) -> &'static str {
    match r {
        WireFinish::Stop => "stop",
        WireFinish::Length => "length",
        WireFinish::Abort => "abort",
        _ => "error",
    }
}

fn submit_error(state: &AppState, e: StreamError) -> ApiError {
    match e {
        StreamError::Rejected(AddRequestError::QueueFull(n)) => {
            state.metrics().count_rejected("queue_full");
            ApiError::overloaded(format!(
                "the server is at capacity: {n} requests are already waiting; retry later"
            ))
        }
        other => stream_error(other),
    }
}

fn stream_error(e: StreamError) -> ApiError {
    match e {
        StreamError::Rejected(AddRequestError::QueueFull(n)) => ApiError::overloaded(format!(
            "the server is at capacity: {n} requests are already waiting; retry later"
        )),
        StreamError::Rejected(other) => ApiError::malformed(other.to_string()),
        StreamError::Shutdown => ApiError::unavailable("the engine is shutting down"),
        other @ (StreamError::Overflow(_) | StreamError::Engine(_)) => {
            ApiError::internal(other.to_string())
        }
    }
}

/// A token's text for logprobs: its bytes, lossily decoded (a piece of a character shows as
/// U+FFFD, its exact bytes go in `bytes`).
pub fn token_text(tokenizer: &Tokenizer, id: u32) -> (String, Option<Vec<u8>>) {
    let bytes = tokenizer.token_bytes(id).map(<[u8]>::to_vec);
    let text = bytes
        .as_deref()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default();
    (text, bytes)
}
