//! `POST /v1/completions`: prompts (text, texts, token ids, token-id batches) -> choices
//! indexed prompt-major, with `echo`, legacy logprobs, `n`, stop strings; JSON or SSE.

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use pagoda_protocol::{
    CompletionChoice, CompletionLogprobs, CompletionRequest, CompletionResponse,
    CompletionStreamChunk, Prompt, Usage,
};

use crate::body::JsonBody;
use crate::constraints;
use crate::error::ApiError;
use crate::generation::{ChoiceUpdate, Generation};
use crate::logprobs;
use crate::routes::{now_secs, random_id, run_blocking};
use crate::state::{AppState, InFlight, Loaded};
use crate::stream as sse;
use crate::validate::{self, GenRequest};

/// What the response needs besides the generation.
struct Prepared {
    request: GenRequest,
    echo: bool,
    logprobs: bool,
    /// Echo text of each prompt.
    prompt_texts: Vec<String>,
}

pub async fn completions(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<CompletionRequest>,
) -> Response {
    match run(state.clone(), req).await {
        Ok(r) => r,
        Err(e) => super::rejected(&state, e),
    }
}

async fn run(state: AppState, req: CompletionRequest) -> Result<Response, ApiError> {
    let guard = state.admit()?;
    let st = state.clone();
    let prepared = run_blocking(move || prepare(&st, req)).await?;
    let loaded = state.loaded()?;
    let generation = Generation::start(&state, loaded, &prepared.request)?;
    let fmt = Formatter::new(&state, &prepared, generation.num_choices());
    if prepared.request.stream {
        Ok(sse::sse_response(events(
            generation,
            fmt,
            prepared.request.include_usage,
            guard,
        )))
    } else {
        collect(generation, fmt)
            .await
            .map(|r| Json(r).into_response())
    }
}

fn prepare(state: &AppState, req: CompletionRequest) -> Result<Prepared, ApiError> {
    validate::reject_unknown(&req.extra)?;
    validate::check_model(state, &req.model)?;
    let loaded = state.loaded()?;
    if let Some(b) = req.best_of
        && b != req.n.unwrap_or(1)
    {
        return Err(ApiError::unsupported(
            "best_of",
            "only `best_of` equal to `n` is supported",
        ));
    }
    if req.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::unsupported(
            "suffix",
            "insertion is not supported",
        ));
    }
    let constraint = match constraints::requested(
        req.response_format.as_ref(),
        req.structured_outputs.as_ref(),
    )? {
        Some((c, field)) => Some(constraints::compile(loaded, c, field)?),
        None => None,
    };
    validate::refuse(
        "prompt_logprobs",
        &req.prompt_logprobs,
        "not supported yet; use `echo` with `logprobs`",
    )?;
    validate::refuse(
        "spaces_between_special_tokens",
        &req.spaces_between_special_tokens,
        "not supported",
    )?;
    let add_special = req.add_special_tokens.unwrap_or(true);
    let tok = &loaded.tokenizer;
    let skip = req.skip_special_tokens.unwrap_or(true);
    let (prompts, prompt_texts): (Vec<Vec<u32>>, Vec<String>) = match &req.prompt {
        Prompt::Text(t) => (vec![tok.encode(t, add_special, true)], vec![t.clone()]),
        Prompt::Texts(ts) => (
            ts.iter()
                .map(|t| tok.encode(t, add_special, true))
                .collect(),
            ts.clone(),
        ),
        Prompt::Tokens(ids) => (vec![ids.clone()], vec![decode_checked(loaded, ids, skip)]),
        Prompt::TokenBatches(b) => (
            b.clone(),
            b.iter()
                .map(|ids| decode_checked(loaded, ids, skip))
                .collect(),
        ),
    };
    let fields = validate::sampling_fields!(
        &req,
        chat: false,
        max_tokens: Some(req.max_tokens.unwrap_or(16)),
        max_tokens_field: "max_tokens",
        logprobs: req.logprobs,
    );
    let mut request = validate::build(state, loaded, &fields, prompts)?;
    request.params.constraint = constraint;
    let echo = req.echo.unwrap_or(false);
    if echo && req.logprobs.is_some() {
        request.params.prompt_logprobs = req.logprobs;
    }
    Ok(Prepared {
        request,
        echo,
        logprobs: req.logprobs.is_some(),
        prompt_texts,
    })
}

/// Token ids to echo text; out-of-vocabulary ids are caught later by validation.
fn decode_checked(loaded: &Loaded, ids: &[u32], skip: bool) -> String {
    if ids.iter().all(|&t| (t as usize) < loaded.vocab_size) {
        loaded.tokenizer.decode(ids, skip)
    } else {
        String::new()
    }
}

/// Per-choice state shared by the JSON and SSE forms: echo, running logprobs offsets.
struct Formatter {
    state: AppState,
    id: String,
    created: u64,
    model: String,
    echo: bool,
    logprobs: bool,
    prompt_texts: Vec<String>,
    prompts: Vec<Vec<u32>>,
    n: usize,
    echoed: Vec<bool>,
    offsets: Vec<u32>,
}

impl Formatter {
    fn new(state: &AppState, p: &Prepared, choices: usize) -> Self {
        Self {
            state: state.clone(),
            id: random_id("cmpl"),
            created: now_secs(),
            model: state.config().served_model_name.clone(),
            echo: p.echo,
            logprobs: p.logprobs,
            prompt_texts: p.prompt_texts.clone(),
            prompts: p.request.prompts.clone(),
            n: p.request.n as usize,
            echoed: vec![false; choices],
            offsets: vec![0; choices],
        }
    }

    /// The wire choice for one update (text is the delta, echo included on the first).
    fn choice(&mut self, u: ChoiceUpdate) -> CompletionChoice {
        let i = u.index as usize;
        let prompt = i / self.n.max(1);
        let mut text = String::new();
        let mut lp = self.logprobs.then(CompletionLogprobs::default);
        let Ok(loaded) = self.state.loaded() else {
            return empty_choice(u.index);
        };
        if self.echo && !self.echoed[i] {
            self.echoed[i] = true;
            text.push_str(&self.prompt_texts[prompt]);
            if let Some(lp) = lp.as_mut() {
                let plp = u.prompt_logprobs.as_deref().unwrap_or(&[]);
                logprobs::echo_completion(
                    lp,
                    &loaded.tokenizer,
                    &self.prompts[prompt],
                    plp,
                    &mut self.offsets[i],
                );
                // Offsets of generated tokens count from the end of the echoed text.
                self.offsets[i] = text.chars().count() as u32;
            }
        }
        text.push_str(&u.text);
        if let Some(lp) = lp.as_mut() {
            logprobs::extend_completion(lp, &loaded.tokenizer, &u.logprobs, &mut self.offsets[i]);
        }
        CompletionChoice {
            index: u.index,
            text,
            logprobs: lp,
            finish_reason: u.finish.as_ref().map(|f| f.reason),
            stop_reason: u.finish.and_then(|f| f.stop_reason),
        }
    }

    fn chunk(&self, choices: Vec<CompletionChoice>, usage: Option<Usage>) -> CompletionStreamChunk {
        CompletionStreamChunk {
            id: self.id.clone(),
            object: CompletionResponse::OBJECT.to_owned(),
            created: self.created,
            model: self.model.clone(),
            choices,
            usage,
            system_fingerprint: None,
        }
    }
}

fn empty_choice(index: u32) -> CompletionChoice {
    CompletionChoice {
        index,
        text: String::new(),
        logprobs: None,
        finish_reason: None,
        stop_reason: None,
    }
}

async fn collect(
    mut generation: Generation,
    mut fmt: Formatter,
) -> Result<CompletionResponse, ApiError> {
    let mut choices: Vec<CompletionChoice> = (0..generation.num_choices() as u32)
        .map(empty_choice)
        .collect();
    while let Some(item) = generation.next().await {
        let part = fmt.choice(item?);
        let c = &mut choices[part.index as usize];
        c.text.push_str(&part.text);
        if let Some(lp) = part.logprobs {
            let all = c.logprobs.get_or_insert_with(CompletionLogprobs::default);
            all.tokens.extend(lp.tokens);
            all.token_logprobs.extend(lp.token_logprobs);
            all.top_logprobs.extend(lp.top_logprobs);
            all.text_offset.extend(lp.text_offset);
        }
        if part.finish_reason.is_some() {
            c.finish_reason = part.finish_reason;
            c.stop_reason = part.stop_reason;
        }
    }
    Ok(CompletionResponse {
        id: fmt.id.clone(),
        object: CompletionResponse::OBJECT.to_owned(),
        created: fmt.created,
        model: fmt.model.clone(),
        choices,
        usage: Some(generation.usage()),
        system_fingerprint: None,
    })
}

fn events(
    generation: Generation,
    fmt: Formatter,
    include_usage: bool,
    guard: InFlight,
) -> impl futures_util::Stream<Item = String> + Send + 'static {
    // One step per update; the last step sends the usage chunk and [DONE]; after an error
    // event the stream ends.
    stream::unfold(
        (generation, fmt, false, guard),
        move |(mut generation, mut fmt, ended, guard)| async move {
            if ended {
                return None;
            }
            loop {
                match generation.next().await {
                    Some(Ok(u)) => {
                        let echo_pending = fmt.echo && !fmt.echoed[u.index as usize];
                        if u.text.is_empty()
                            && u.finish.is_none()
                            && u.logprobs.is_empty()
                            && !echo_pending
                        {
                            continue;
                        }
                        let choice = fmt.choice(u);
                        let chunk = fmt.chunk(vec![choice], None);
                        return Some((sse::data(&chunk), (generation, fmt, false, guard)));
                    }
                    Some(Err(e)) => return Some((sse::error(&e), (generation, fmt, true, guard))),
                    None => {
                        let mut out = String::new();
                        if include_usage {
                            out.push_str(&sse::data(
                                &fmt.chunk(Vec::new(), Some(generation.usage())),
                            ));
                        }
                        out.push_str(&sse::done());
                        return Some((out, (generation, fmt, true, guard)));
                    }
                }
            }
        },
    )
}
