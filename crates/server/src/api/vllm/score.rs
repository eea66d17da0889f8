//! `POST /v1/score` (and `/score`), vLLM's: `text_1` and `text_2` paired 1:1, 1:N or N:N by the
//! shared scoring rules (`prepare/score_pairs.rs`, off the runtime), scored through the
//! embedding batcher (`model/pair_scores.rs`), one score per pair in pair order.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use pagoda_protocol::{EmbeddingUsage, ScoreData, ScoreRequest, ScoreResponse};

use crate::api::encoder_request::{Admitted, admit_and_prepare};
use crate::api::ids::{now_secs, random_id};
use crate::error::ApiError;
use crate::error::rejected::rejected;
use crate::http::body::JsonBody;
use crate::http::request_id::RequestInfo;
use crate::model::lease::ModelLease;
use crate::model::pair_scores::{ScoreJob, scores};
use crate::prepare::embed::Truncate;
use crate::prepare::field_policy::Ignored;
use crate::prepare::score_pairs::{self, PairOptions};
use crate::state::AppState;

pub async fn score(
    State(state): State<AppState>,
    info: Option<Extension<RequestInfo>>,
    JsonBody(req): JsonBody<ScoreRequest>,
) -> Response {
    let ua = RequestInfo::user_agent_of(info);
    let Admitted {
        in_flight: _in_flight,
        model,
        prepared: job,
    } = match admit_and_prepare(&state, req, ua, prepare).await {
        Ok(a) => a,
        Err(e) => return rejected(&state, e),
    };
    let encoder = match model.encoder() {
        Ok(e) => e,
        Err(e) => return rejected(&state, e.into()),
    };
    let tokens = job.tokens() as u32;
    let scores = match scores(encoder, job, false).await {
        Ok(s) => s,
        Err(e) => return rejected(&state, ApiError::internal(e)),
    };
    let data = scores
        .into_iter()
        .enumerate()
        .map(|(i, score)| ScoreData {
            index: i as u32,
            object: "score".to_owned(),
            score,
        })
        .collect();
    Json(ScoreResponse {
        id: random_id("score"),
        object: "list".to_owned(),
        created: now_secs(),
        model: model.name().to_owned(),
        data,
        usage: EmbeddingUsage {
            prompt_tokens: tokens,
            total_tokens: tokens,
        },
    })
    .into_response()
}

fn prepare(
    state: &AppState,
    model: &ModelLease,
    req: ScoreRequest,
    user_agent: Option<String>,
) -> Result<ScoreJob, ApiError> {
    let mut ignored = Ignored::default();
    let policy = state.config().unknown_fields;
    ignored.top_level(policy, &req.extra, ScoreRequest::FIELDS)?;
    ignored.report(state.metrics(), user_agent.as_deref());
    let e = model.encoder()?;
    Ok(score_pairs::check(
        e,
        &PairOptions {
            first: req.text_1.as_slice(),
            first_field: "text_1",
            second: req.text_2.as_slice(),
            second_field: "text_2",
            truncate: Truncate::from_vllm(req.truncate_prompt_tokens, e)?,
            truncate_hint: "set `truncate_prompt_tokens` to cut it",
        },
    )?)
}
