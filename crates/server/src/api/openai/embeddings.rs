//! `POST /v1/embeddings`: validates and tokenizes the inputs (off the runtime), hands their
//! token sequences to the embedding batcher (`embedder.rs`), and answers in OpenAI's shape:
//! floats or base64, cut to `dimensions` for Matryoshka models, with token usage.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use pagoda_protocol::{
    Embedding, EmbeddingRequest, EmbeddingResponse, EmbeddingUsage, EmbeddingVector, Prompt,
};

use crate::error::ApiError;
use crate::error::rejected::rejected;
use crate::http::body::JsonBody;
use crate::http::request_id::RequestInfo;
use crate::prepare::blocking::run_blocking;
use crate::prepare::field_policy::Ignored;
use crate::prepare::validate;
use crate::prepare::validation_error::ValidationError;
use crate::state::AppState;

/// A checked request: the token sequences and how to shape the answer.
struct Prepared {
    seqs: Vec<Vec<u32>>,
    base64: bool,
    dimensions: Option<usize>,
    model: String,
}

pub async fn embeddings(
    State(state): State<AppState>,
    info: Option<Extension<RequestInfo>>,
    JsonBody(req): JsonBody<EmbeddingRequest>,
) -> Response {
    let ua = RequestInfo::user_agent_of(info);
    let _in_flight = match state.admit() {
        Ok(g) => g,
        Err(e) => return rejected(&state, e),
    };
    let st = state.clone();
    let prepared = match run_blocking(move || prepare(&st, req, ua)).await {
        Ok(p) => p,
        Err(e) => return rejected(&state, e),
    };
    let embedder = match state.embedder() {
        Ok(e) => e,
        Err(e) => return rejected(&state, e),
    };
    let prompt_tokens: usize = prepared.seqs.iter().map(Vec::len).sum();
    let vectors = match embedder.embed(prepared.seqs).await {
        Ok(v) => v,
        Err(e) => return rejected(&state, ApiError::internal(e)),
    };
    let data = vectors
        .into_iter()
        .enumerate()
        .map(|(i, mut v)| {
            if let Some(d) = prepared.dimensions {
                pagoda_model::encoder::truncate_normalized(&mut v, d, embedder.normalize);
            }
            let embedding = if prepared.base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                EmbeddingVector::Base64(crate::api::openai::base64::encode(&bytes))
            } else {
                EmbeddingVector::Float(v)
            };
            Embedding {
                object: "embedding".to_owned(),
                index: i as u32,
                embedding,
            }
        })
        .collect();
    Json(EmbeddingResponse {
        object: "list".to_owned(),
        data,
        model: prepared.model,
        usage: EmbeddingUsage {
            prompt_tokens: prompt_tokens as u32,
            total_tokens: prompt_tokens as u32,
        },
    })
    .into_response()
}

fn prepare(
    state: &AppState,
    req: EmbeddingRequest,
    user_agent: Option<String>,
) -> Result<Prepared, ApiError> {
    let mut ignored = Ignored::default();
    let policy = state.config().unknown_fields;
    ignored.top_level(policy, &req.extra, EmbeddingRequest::FIELDS)?;
    ignored.report(state.metrics(), user_agent.as_deref());
    validate::check_model(state, &req.model)?;
    let e = state.embedder()?;
    let base64 = match req.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ValidationError::invalid_value(
                "encoding_format",
                "\"float\" or \"base64\"",
                other,
            )
            .into());
        }
    };
    let dimensions = match req.dimensions {
        None => None,
        Some(_) if e.matryoshka.is_empty() => {
            return Err(ValidationError::unsupported(
                "dimensions",
                format!(
                    "this model was not trained for shortened embeddings; its embeddings have {} dimensions",
                    e.dim
                ),
            )
            .into());
        }
        Some(d) if d > 0 && e.matryoshka.contains(&(d as usize)) => Some(d as usize),
        Some(d) => {
            return Err(ValidationError::Rule {
                field: "dimensions".to_owned(),
                message: format!(
                    "`dimensions` must be one of {:?} for this model, got {d}",
                    e.matryoshka
                ),
            }
            .into());
        }
    };
    let truncate = match req.truncate_prompt_tokens {
        None => None,
        Some(-1) => Some(e.max_seq_len),
        Some(k) if k >= 1 && k as usize <= e.max_seq_len => Some(k as usize),
        Some(k) => {
            return Err(ValidationError::Rule {
                field: "truncate_prompt_tokens".to_owned(),
                message: format!(
                    "`truncate_prompt_tokens` must be -1 or 1 to {} (the model's maximum), got {k}",
                    e.max_seq_len
                ),
            }
            .into());
        }
    };
    let encode = |text: &str| -> Result<Vec<u32>, ApiError> {
        e.tokenizer
            .encode(text)
            .map_err(|err| ValidationError::rule("input", format!("cannot tokenize: {err}")).into())
    };
    let mut seqs = match &req.input {
        Prompt::Text(t) => vec![encode(t)?],
        Prompt::Texts(ts) => ts.iter().map(|t| encode(t)).collect::<Result<_, _>>()?,
        Prompt::Tokens(ids) => vec![ids.clone()],
        Prompt::TokenBatches(b) => b.clone(),
    };
    let empty_text = match &req.input {
        Prompt::Text(t) => t.is_empty(),
        Prompt::Texts(ts) => ts.iter().any(String::is_empty),
        _ => false,
    };
    if seqs.is_empty() || empty_text || seqs.iter().any(Vec::is_empty) {
        return Err(ValidationError::Empty { field: "input" }.into());
    }
    for s in &seqs {
        if let Some(&t) = s.iter().find(|&&t| t as usize >= e.vocab_size) {
            return Err(ValidationError::invalid_value(
                "input",
                "token ids inside the model's vocabulary",
                t,
            )
            .into());
        }
    }
    for (index, s) in seqs.iter_mut().enumerate() {
        if let Some(k) = truncate
            && s.len() > k
        {
            // vLLM keeps the last k tokens.
            s.drain(..s.len() - k);
        }
        if s.len() > e.max_seq_len {
            return Err(ValidationError::TooLong {
                field: "input",
                index,
                tokens: s.len(),
                max: e.max_seq_len,
            }
            .into());
        }
    }
    Ok(Prepared {
        seqs,
        base64,
        dimensions,
        model: state.config().served_model_name.clone(),
    })
}
