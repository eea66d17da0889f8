//! One request's generation as the front ends see it: one engine request per prompt, whose
//! `n` choices the engine fans out; engine outputs become per-choice text updates through a
//! `TextStream`, with stop strings (ending that choice alone), finish reasons, usage and the
//! latency metrics. Dropping a `Generation` drops its engine streams, which aborts the rest.

use std::sync::Arc;
use std::time::Instant;

use futures_util::future::select_all;
use pagoda_core::engine::{EngineHandle, RequestStream, StreamError};
use pagoda_core::{EngineOutput, FinishReason, PositionLogprobs};
use pagoda_frontend::{TextStream, TextStreamOptions, Tokenizer};
use pagoda_protocol::{FinishReason as WireFinish, PromptTokensDetails, StopReason, Usage};

use crate::error::ApiError;
use crate::error::mapping::admission_error;
use crate::observe::metrics::engine::Metrics;
use crate::observe::request_trace::{RequestTrace, Timeline};
use crate::prepare::valid_request::ValidRequest;
use crate::prepare::validation_error::ValidationError;
use crate::tenants::TenantState;

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
    /// Tokens of this choice's prompt served from the prefix cache.
    pub cached_tokens: usize,
    /// Arrival to this update, for the first one of a choice.
    pub first_token_after: Option<std::time::Duration>,
}

struct Choice {
    text: TextStream,
    finished: bool,
    generated: u32,
    cached_tokens: usize,
    first_token_at: Option<Instant>,
    last_output_at: Option<Instant>,
}

/// A running request: one engine stream per prompt, text state per choice.
pub struct Generation {
    metrics: Option<Arc<Metrics>>,
    /// The tenant whose token counts (and `max_tokens_per_minute`) the output goes to.
    tenant: Option<Arc<TenantState>>,
    trace: Option<RequestTrace>,
    /// Arrival and first step of the first prompt, for the trace.
    arrival: Option<(Instant, Option<Instant>)>,
    /// One per prompt; `None` once it ended.
    streams: Vec<Option<RequestStream>>,
    choices: Vec<Choice>,
    prompt_lens: Vec<usize>,
    stop: Vec<String>,
    stop_token_ids: Vec<u32>,
    n: usize,
}

impl Generation {
    /// Submits every prompt at once (all of them or none: 429 when the waiting queue cannot
    /// take them now or the SLO policy predicts them late, 400 when it never could). A 429 is
    /// counted in `refusals`, the server's counters that `/metrics` renders (as a tenant's are).
    pub fn start(
        engine: &EngineHandle,
        tokenizer: &Arc<Tokenizer>,
        req: &ValidRequest,
        metrics: Option<Arc<Metrics>>,
        refusals: Option<&Metrics>,
    ) -> Result<Self, ApiError> {
        let opts = TextStreamOptions {
            stop: req.text.stop.clone(),
            skip_special_tokens: req.text.skip_special_tokens,
            include_stop_str_in_output: req.text.include_stop_str_in_output,
        };
        let n = req.n as usize;
        let mut choices = Vec::with_capacity(req.num_prompts() * n);
        for p in 0..req.num_prompts() {
            for _ in 0..n {
                let text = TextStream::new(Arc::clone(tokenizer), req.prompt(p), opts.clone())
                    .map_err(|e| ApiError::from(ValidationError::rule("stop", e.to_string())))?;
                choices.push(Choice {
                    text,
                    finished: false,
                    generated: 0,
                    cached_tokens: 0,
                    first_token_at: None,
                    last_output_at: None,
                });
            }
        }
        let streams = engine.submit(req.requests.clone()).map_err(|e| {
            let reason = match &e {
                StreamError::Rejected(pagoda_core::AddRequestError::QueueFull { .. }) => {
                    Some("queue_full")
                }
                StreamError::Rejected(pagoda_core::AddRequestError::SloWouldBreak { .. }) => {
                    Some("slo")
                }
                _ => None,
            };
            if let (Some(m), Some(reason)) = (refusals, reason) {
                m.count_rejected(reason);
            }
            stream_error(e)
        })?;
        Ok(Self {
            metrics,
            tenant: None,
            trace: None,
            arrival: None,
            streams: streams.into_iter().map(Some).collect(),
            choices,
            prompt_lens: (0..req.num_prompts())
                .map(|p| req.prompt(p).len())
                .collect(),
            stop: req.text.stop.clone(),
            stop_token_ids: req.params().stop_token_ids.clone(),
            n,
        })
    }

    /// Counts every generated token to `tenant`.
    pub fn count_for(mut self, tenant: Option<Arc<TenantState>>) -> Self {
        self.tenant = tenant;
        self
    }

    /// Exports the request's spans when the generation ends.
    pub fn traced(mut self, trace: Option<RequestTrace>) -> Self {
        self.trace = trace;
        self
    }

    /// When each phase happened, over every choice.
    fn timeline(&self) -> Timeline {
        let usage = self.usage();
        Timeline {
            arrival: self.arrival.map(|a| a.0),
            first_scheduled: self.arrival.and_then(|a| a.1),
            first_token: self.choices.iter().filter_map(|c| c.first_token_at).min(),
            last_token: self.choices.iter().filter_map(|c| c.last_output_at).max(),
            prompt_tokens: u64::from(usage.prompt_tokens),
            completion_tokens: u64::from(usage.completion_tokens),
        }
    }

    /// The next update of any choice; `None` when every choice has finished.
    pub async fn next(&mut self) -> Option<Result<ChoiceUpdate, ApiError>> {
        loop {
            let (prompt, item) = {
                let mut live: Vec<(usize, &mut RequestStream)> = self
                    .streams
                    .iter_mut()
                    .enumerate()
                    .filter_map(|(i, s)| s.as_mut().map(|s| (i, s)))
                    .collect();
                match live.len() {
                    0 => return None,
                    1 => {
                        let (i, s) = live.pop()?;
                        (i, s.recv().await)
                    }
                    _ => {
                        // RequestStream::recv is a tokio mpsc recv: cancel-safe, so the losers
                        // of the race lose nothing.
                        let futs = live
                            .into_iter()
                            .map(|(i, s)| Box::pin(async move { (i, s.recv().await) }));
                        select_all(futs).await.0
                    }
                }
            };
            match item {
                Some(Ok(out)) => {
                    let index = prompt * self.n + out.index as usize;
                    // What a choice produced after its stop string, and its abort, are dropped.
                    if self.choices.get(index).is_some_and(|c| !c.finished) {
                        return Some(Ok(self.apply(prompt, index, out)));
                    }
                }
                Some(Err(e)) => {
                    // The engine failed this prompt's choices: they end as errors, not aborts.
                    self.streams[prompt] = None;
                    let n = self.n;
                    for c in self.choices[prompt * n..(prompt + 1) * n].iter_mut() {
                        if !c.finished {
                            c.finished = true;
                            if let Some(m) = &self.metrics {
                                m.count_finished("error");
                            }
                        }
                    }
                    return Some(Err(stream_error(e)));
                }
                None => self.streams[prompt] = None,
            }
        }
    }

    fn apply(&mut self, prompt: usize, index: usize, mut out: EngineOutput) -> ChoiceUpdate {
        let metrics = self.metrics.as_deref();
        self.arrival
            .get_or_insert((out.timing.arrival, out.timing.first_scheduled));
        let choice = &mut self.choices[index];
        choice.cached_tokens = out.num_cached_tokens;
        let mut update = ChoiceUpdate {
            index: index as u32,
            prompt_logprobs: out.prompt_logprobs.take(),
            cached_tokens: out.num_cached_tokens,
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
        if let Some(t) = &self.tenant {
            t.add_generated(update.token_ids.len() as u64);
        }
        let now = out.timing.at;
        if !update.token_ids.is_empty() {
            match (choice.first_token_at, choice.last_output_at, metrics) {
                (None, _, m) => {
                    choice.first_token_at = Some(now);
                    update.first_token_after = Some(now - out.timing.arrival);
                    if let Some(m) = m {
                        m.time_to_first_token
                            .observe((now - out.timing.arrival).as_secs_f64());
                        if let Some(s) = out.timing.first_scheduled {
                            m.queue_time.observe((s - out.timing.arrival).as_secs_f64());
                        }
                    }
                }
                (Some(_), Some(last), Some(m)) => {
                    // A run of k tokens (accepted proposals) is k gaps of a k-th each, as vLLM
                    // counts them: one observation per token, not per output.
                    let k = update.token_ids.len();
                    let gap = (now - last).as_secs_f64() / k as f64;
                    for _ in 0..k {
                        m.inter_token_latency.observe(gap);
                    }
                }
                (Some(_), _, _) => {}
            }
            choice.last_output_at = Some(now);
        }
        let finish = if let Some(stop_index) = stopped {
            // A stop string ends this choice here; the engine frees its blocks next step.
            if let Some(s) = &self.streams[prompt] {
                s.abort_choice(out.index);
            }
            Some(Finish {
                reason: WireFinish::Stop,
                stop_reason: self.stop.get(stop_index).cloned().map(StopReason::Text),
            })
        } else if let Some(reason) = &out.finish_reason {
            // A cut (length, abort) drops an unfinished character instead of writing U+FFFD:
            // its bytes were held back, so the stream and the whole text agree.
            let tail = match reason {
                FinishReason::Stop(_) => choice.text.finish(),
                _ => choice.text.finish_cut(),
            };
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
        choice.finished = finish.is_some();
        if let (Some(f), Some(metrics)) = (&finish, metrics) {
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
        if let Some(t) = self.trace.take() {
            t.finish(&self.timeline());
        }
        if let Some(m) = &self.metrics {
            for _ in self.choices.iter().filter(|c| !c.finished) {
                m.count_finished("abort");
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

fn stream_error(e: StreamError) -> ApiError {
    match e {
        StreamError::Rejected(e) => admission_error(e),
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
