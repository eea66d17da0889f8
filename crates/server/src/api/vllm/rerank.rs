//! `POST /v1/rerank` (also `/v2/rerank`, and `/rerank` for a body without TEI's `texts`): the
//! Cohere/Jina shape as vLLM serves it. The query and documents go through the shared scoring
//! rules (`prepare/score_pairs.rs`, off the runtime) and the embedding batcher
//! (`model/pair_scores.rs`); the answer lists the documents most relevant first.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use pagoda_protocol::{
    RerankRequest, RerankResponse, RerankResult, RerankResultDocument, RerankUsage,
};

use crate::api::encoder_request::{Admitted, admit_and_prepare};
use crate::api::ids::random_id;
use crate::error::ApiError;
use crate::error::rejected::rejected;
use crate::http::body::JsonBody;
use crate::http::request_id::RequestInfo;
use crate::model::lease::ModelLease;
use crate::model::pair_scores::{ScoreJob, scores};
use crate::prepare::embed::Truncate;
use crate::prepare::field_policy::Ignored;
use crate::prepare::score_pairs::{self, PairOptions};
use crate::prepare::validation_error::ValidationError;
use crate::state::AppState;

/// A checked request and how to shape the answer.
struct Prepared {
    job: ScoreJob,
    /// The documents' texts, when they are echoed.
    documents: Option<Vec<String>>,
    top_n: usize,
    model: String,
}

pub async fn rerank(
    State(state): State<AppState>,
    info: Option<Extension<RequestInfo>>,
    JsonBody(req): JsonBody<RerankRequest>,
) -> Response {
    answer(state, RequestInfo::user_agent_of(info), req).await
}

/// Answers a parsed request (`/rerank` parses it itself, to tell TEI's shape from this one).
pub async fn answer(state: AppState, user_agent: Option<String>, req: RerankRequest) -> Response {
    let Admitted {
        in_flight: _in_flight,
        model,
        prepared: p,
    } = match admit_and_prepare(&state, req, user_agent, prepare).await {
        Ok(a) => a,
        Err(e) => return rejected(&state, e),
    };
    let encoder = match model.encoder() {
        Ok(e) => e,
        Err(e) => return rejected(&state, e.into()),
    };
    let tokens = p.job.tokens();
    let scores = match scores(encoder, p.job, false).await {
        Ok(s) => s,
        Err(e) => return rejected(&state, ApiError::internal(e)),
    };
    let results = ranked(&scores, p.top_n)
        .into_iter()
        .map(|i| RerankResult {
            index: i as u32,
            relevance_score: scores[i],
            document: p
                .documents
                .as_ref()
                .map(|d| RerankResultDocument { text: d[i].clone() }),
        })
        .collect();
    Json(RerankResponse {
        id: random_id("rerank"),
        model: p.model,
        results,
        usage: RerankUsage {
            total_tokens: tokens as u32,
        },
    })
    .into_response()
}

/// The indices of the `top_n` highest scores, highest first (ties in input order).
pub fn ranked(scores: &[f32], top_n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    order.truncate(top_n);
    order
}

fn prepare(
    state: &AppState,
    model: &ModelLease,
    req: RerankRequest,
    user_agent: Option<String>,
) -> Result<Prepared, ApiError> {
    let mut ignored = Ignored::default();
    let policy = state.config().unknown_fields;
    ignored.top_level(policy, &req.extra, RerankRequest::FIELDS)?;
    ignored.report(state.metrics(), user_agent.as_deref());
    let e = model.encoder()?;
    let n = req.documents.len();
    let top_n = match req.top_n {
        None => n,
        Some(k) if k >= 1 => n.min(k as usize),
        Some(k) => {
            return Err(ValidationError::invalid_value("top_n", "a positive integer", k).into());
        }
    };
    let documents: Vec<String> = req.documents.iter().map(|d| d.text().to_owned()).collect();
    let job = score_pairs::check(
        e,
        &PairOptions {
            first: std::slice::from_ref(&req.query),
            first_field: "query",
            second: &documents,
            second_field: "documents",
            truncate: Truncate::from_vllm(req.truncate_prompt_tokens, e)?,
            truncate_hint: "set `truncate_prompt_tokens` to cut it",
        },
    )?;
    Ok(Prepared {
        job,
        documents: req.return_documents.unwrap_or(true).then_some(documents),
        top_n,
        model: model.name().to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::ranked;

    #[test]
    fn ranked_is_highest_first_ties_in_order() {
        assert_eq!(ranked(&[0.1, 0.9, 0.5, 0.9], 4), [1, 3, 2, 0]);
        assert_eq!(ranked(&[0.1, 0.9, 0.5], 2), [1, 2]);
    }
}
