//! `POST /v1/embeddings`: maps OpenAI's fields (and vLLM's `truncate_prompt_tokens`,
//! sentence-transformers' `prompt_name`) onto the shared embedding rules (`prepare/embed.rs`,
//! off the runtime), hands the job to the embedding batcher (`embedder.rs`), and answers in
//! OpenAI's shape: floats or base64, with token usage.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use pagoda_protocol::{
    Embedding, EmbeddingRequest, EmbeddingResponse, EmbeddingUsage, EmbeddingVector,
};

use crate::api::encoder_request::{Admitted, admit_and_prepare};
use crate::error::ApiError;
use crate::error::rejected::rejected;
use crate::http::body::JsonBody;
use crate::http::request_id::RequestInfo;
use crate::model::embedder::EmbedJob;
use crate::model::lease::ModelLease;
use crate::prepare::embed::{self, EmbedOptions, Truncate};
use crate::prepare::field_policy::Ignored;
use crate::prepare::validation_error::ValidationError;
use crate::state::AppState;

/// A checked request and how to shape the answer.
struct Prepared {
    job: EmbedJob,
    base64: bool,
    model: String,
}

pub async fn embeddings(
    State(state): State<AppState>,
    info: Option<Extension<RequestInfo>>,
    JsonBody(req): JsonBody<EmbeddingRequest>,
) -> Response {
    let ua = RequestInfo::user_agent_of(info);
    let Admitted {
        in_flight: _in_flight,
        model,
        prepared,
    } = match admit_and_prepare(&state, req, ua, prepare).await {
        Ok(a) => a,
        Err(e) => return rejected(&state, e),
    };
    let embedder = match model.embedder() {
        Ok(e) => e,
        Err(e) => return rejected(&state, e.into()),
    };
    let prompt_tokens = prepared.job.tokens();
    let vectors = match embedder.vectors(prepared.job).await {
        Ok(v) => v,
        Err(e) => return rejected(&state, ApiError::internal(e)),
    };
    let data = vectors
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
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
    model: &ModelLease,
    req: EmbeddingRequest,
    user_agent: Option<String>,
) -> Result<Prepared, ApiError> {
    let mut ignored = Ignored::default();
    let policy = state.config().unknown_fields;
    ignored.top_level(policy, &req.extra, EmbeddingRequest::FIELDS)?;
    ignored.report(state.metrics(), user_agent.as_deref());
    let e = model.embedder()?;
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
    let truncate = Truncate::from_vllm(req.truncate_prompt_tokens, e)?;
    let job = embed::check(
        e,
        &EmbedOptions {
            input: &req.input,
            input_field: "input",
            dimensions: req.dimensions,
            truncate,
            truncate_hint: "set `truncate_prompt_tokens` to keep the last ones",
            prompt_name: req.prompt_name.as_deref(),
            normalize: None,
        },
    )?;
    Ok(Prepared {
        job,
        base64,
        model: model.name().to_owned(),
    })
}
