//! `POST /v1/completions`: prompts (text, texts, token ids, token-id batches) -> choices
//! indexed prompt-major, with `echo`, legacy logprobs, `n`, stop strings; JSON or SSE.

use std::sync::Arc;

use pagoda_protocol::{
    CompletionChoice, CompletionLogprobs, CompletionRequest, CompletionResponse,
    CompletionStreamChunk, Prompt, Usage,
};

use pagoda_frontend::Tokenizer;

use crate::api::ids::{now_secs, random_id};
use crate::api::openai::logprobs;
use crate::generate::endpoint::{GenerationEndpoint, Model};
use crate::generate::generation::ChoiceUpdate;
use crate::generate::stream::{self as sse, ChoiceFormatter};
use crate::model::lease::ModelLease;
use crate::prepare::constraints;
use crate::prepare::field_policy::Ignored;
use crate::prepare::valid_request::ValidRequest;
use crate::prepare::validate;
use crate::prepare::validation_error::{FieldNames, ValidationError};
use crate::state::{AppState, Loaded};

/// A completions request, validated, with what its response needs.
pub struct Completions {
    echo: bool,
    logprobs: bool,
    /// vLLM's `prompt_logprobs` was asked for.
    prompt_logprobs: bool,
    /// Echo text of each prompt.
    prompt_texts: Vec<String>,
}

impl GenerationEndpoint for Completions {
    type Wire = CompletionRequest;
    type Formatter = Formatter;

    fn prepare(
        state: &AppState,
        model: &ModelLease,
        req: CompletionRequest,
    ) -> Result<(ValidRequest, Self), ValidationError> {
        prepare(state, model, req)
    }

    fn formatter(
        self,
        _: &AppState,
        model: &Model<'_>,
        req: &ValidRequest,
        num_choices: usize,
    ) -> Formatter {
        Formatter {
            tokenizer: Arc::clone(&model.loaded.tokenizer),
            id: random_id("cmpl"),
            created: now_secs(),
            model: model.name.to_owned(),
            echo: self.echo,
            logprobs: self.logprobs,
            prompt_logprobs: self.prompt_logprobs,
            prompt_texts: self.prompt_texts,
            prompts: (0..req.num_prompts())
                .map(|p| req.prompt(p).to_vec())
                .collect(),
            n: req.n as usize,
            echoed: vec![false; num_choices],
            offsets: vec![0; num_choices],
            choices: (0..num_choices as u32).map(empty_choice).collect(),
        }
    }
}

fn prepare(
    state: &AppState,
    model: &ModelLease,
    req: CompletionRequest,
) -> Result<(ValidRequest, Completions), ValidationError> {
    let loaded = model.generator()?;
    let mut ignored = Ignored::default();
    let policy = state.config().unknown_fields;
    ignored.top_level(policy, &req.extra, CompletionRequest::FIELDS)?;
    let lora = validate::resolve_adapter(model)?;
    if let Some(b) = req.best_of
        && b != req.n.unwrap_or(1)
    {
        return Err(ValidationError::unsupported(
            "best_of",
            "only `best_of` equal to `n` is supported",
        ));
    }
    if req.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(ValidationError::unsupported(
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
    let echo = req.echo.unwrap_or(false);
    let mut fields = validate::sampling_fields!(
        &req,
        names: FieldNames::COMPLETIONS,
        max_tokens: Some(req.max_tokens.unwrap_or(16)),
        logprobs: req.logprobs,
    );
    fields.constraint = constraint;
    fields.lora = lora;
    // One count of prompt alternatives serves both `prompt_logprobs` and echoed logprobs.
    fields.prompt_logprobs = match (req.prompt_logprobs, echo && req.logprobs.is_some()) {
        (Some(p), true) if Some(p) != req.logprobs => {
            return Err(ValidationError::rule(
                "prompt_logprobs",
                "with `echo` and `logprobs`, `prompt_logprobs` must equal `logprobs`",
            ));
        }
        (Some(p), _) => Some(p),
        (None, true) => req.logprobs,
        (None, false) => None,
    };
    let mut request = validate::build(state, loaded, &fields, prompts)?;
    request.ignored = ignored;
    let completions = Completions {
        echo,
        logprobs: req.logprobs.is_some(),
        prompt_logprobs: req.prompt_logprobs.is_some(),
        prompt_texts,
    };
    Ok((request, completions))
}

/// Token ids to echo text; out-of-vocabulary ids are caught later by validation.
fn decode_checked(loaded: &Loaded, ids: &[u32], skip: bool) -> String {
    if ids
        .iter()
        .all(|&t| (t as usize) < loaded.engine.limits().vocab_size)
    {
        loaded.tokenizer.decode(ids, skip)
    } else {
        String::new()
    }
}

/// Per-choice state shared by the JSON and SSE forms: echo, running logprobs offsets, and the
/// whole response's choices.
pub struct Formatter {
    tokenizer: Arc<Tokenizer>,
    id: String,
    created: u64,
    model: String,
    echo: bool,
    logprobs: bool,
    prompt_logprobs: bool,
    prompt_texts: Vec<String>,
    prompts: Vec<Vec<u32>>,
    n: usize,
    echoed: Vec<bool>,
    offsets: Vec<u32>,
    choices: Vec<CompletionChoice>,
}

impl Formatter {
    /// The wire choice for one update (text is the delta, echo included on the first).
    fn choice(&mut self, u: ChoiceUpdate) -> CompletionChoice {
        let i = u.index as usize;
        let prompt = i / self.n.max(1);
        let mut text = String::new();
        let mut lp = self.logprobs.then(CompletionLogprobs::default);
        if self.echo && !self.echoed[i] {
            self.echoed[i] = true;
            text.push_str(&self.prompt_texts[prompt]);
            if let Some(lp) = lp.as_mut() {
                let plp = u.prompt_logprobs.as_deref().unwrap_or(&[]);
                logprobs::echo_completion(
                    lp,
                    &self.tokenizer,
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
            logprobs::extend_completion(lp, &self.tokenizer, &u.logprobs, &mut self.offsets[i]);
        }
        let prompt_logprobs = match (self.prompt_logprobs, u.prompt_logprobs.as_deref()) {
            (true, Some(plp)) => Some(logprobs::prompt(&self.tokenizer, plp)),
            _ => None,
        };
        CompletionChoice {
            index: u.index,
            text,
            logprobs: lp,
            finish_reason: u.finish.as_ref().map(|f| f.reason),
            stop_reason: u.finish.and_then(|f| f.stop_reason),
            prompt_logprobs,
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
        prompt_logprobs: None,
    }
}

impl ChoiceFormatter for Formatter {
    type Response = CompletionResponse;

    fn events(&mut self, u: ChoiceUpdate) -> String {
        let echo_pending = self.echo && !self.echoed[u.index as usize];
        let prompt_lp = self.prompt_logprobs && u.prompt_logprobs.is_some();
        if u.text.is_empty()
            && u.finish.is_none()
            && u.logprobs.is_empty()
            && !echo_pending
            && !prompt_lp
        {
            return String::new();
        }
        let choice = self.choice(u);
        sse::data(&self.chunk(vec![choice], None))
    }

    fn usage_event(&self, usage: Usage) -> String {
        sse::data(&self.chunk(Vec::new(), Some(usage)))
    }

    fn absorb(&mut self, u: ChoiceUpdate) {
        let part = self.choice(u);
        let c = &mut self.choices[part.index as usize];
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
        if part.prompt_logprobs.is_some() {
            c.prompt_logprobs = part.prompt_logprobs;
        }
    }

    fn response(self, usage: Usage) -> CompletionResponse {
        CompletionResponse {
            id: self.id,
            object: CompletionResponse::OBJECT.to_owned(),
            created: self.created,
            model: self.model,
            choices: self.choices,
            usage: Some(usage),
            system_fingerprint: None,
        }
    }
}
