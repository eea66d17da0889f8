//! `POST /rerank`: TEI's `{"query", "texts"}` through the shared scoring rules
//! (`prepare/score_pairs.rs`) and the embedding batcher, answered as TEI does (`[{"index",
//! "score", "text"?}]`, most relevant first; errors in its shape). A body without `texts` is
//! vLLM's Cohere-shaped rerank (`api/vllm/rerank.rs`), which vLLM serves on this path too.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use pagoda_protocol::tei::{AnyRerankRequest, TeiRank, TeiRerankRequest};

use crate::api::vllm::rerank::{answer, ranked};
use crate::error::ApiError;
use crate::error::mapping::tei_body_error;
use crate::error::rejected::rejected_as;
use crate::error::shape::ErrorShape;
use crate::http::body::JsonBody;
use crate::http::request_id::RequestInfo;
use crate::model::lease::ModelLease;
use crate::model::pair_scores::{ScoreJob, scores};
use crate::prepare::blocking::run_blocking;
use crate::prepare::embed::Truncate;
use crate::prepare::field_policy::Ignored;
use crate::prepare::score_pairs::{self, PairOptions};
use crate::state::AppState;

pub async fn rerank(
    State(state): State<AppState>,
    info: Option<Extension<RequestInfo>>,
    body: Result<JsonBody<AnyRerankRequest>, ApiError>,
) -> Response {
    let fail = |e: ApiError| rejected_as(&state, ErrorShape::Tei, e);
    let req = match body {
        Ok(JsonBody(AnyRerankRequest::Tei(r))) => r,
        Ok(JsonBody(AnyRerankRequest::Cohere(r))) => {
            return answer(state.clone(), RequestInfo::user_agent_of(info), r).await;
        }
        Err(e) => return fail(tei_body_error(e)),
    };
    let ua = RequestInfo::user_agent_of(info);
    let _in_flight = match state.admit() {
        Ok(g) => g,
        Err(e) => return fail(e),
    };
    let (raw, texts) = (
        req.raw_scores.unwrap_or(false),
        req.return_text.unwrap_or(false).then(|| req.texts.clone()),
    );
    // TEI's body names no model: the default one.
    let model = match state.models().acquire(None, None).await {
        Ok(m) => Arc::new(m),
        Err(e) => return fail(e.into()),
    };
    let (st, m) = (state.clone(), Arc::clone(&model));
    let job = match run_blocking(move || prepare(&st, &m, req, ua)).await {
        Ok(j) => j,
        Err(e) => return fail(e),
    };
    let encoder = match model.encoder() {
        Ok(e) => e,
        Err(e) => return fail(e.to_tei_error()),
    };
    let scores = match scores(encoder, job, raw).await {
        Ok(s) => s,
        Err(e) => return fail(ApiError::internal(e)),
    };
    let ranks: Vec<TeiRank> = ranked(&scores, scores.len())
        .into_iter()
        .map(|i| TeiRank {
            index: i as u32,
            score: scores[i],
            text: texts.as_ref().map(|t| t[i].clone()),
        })
        .collect();
    Json(ranks).into_response()
}

fn prepare(
    state: &AppState,
    model: &ModelLease,
    req: TeiRerankRequest,
    user_agent: Option<String>,
) -> Result<ScoreJob, ApiError> {
    let mut ignored = Ignored::default();
    ignored
        .top_level(
            state.config().unknown_fields,
            &req.extra,
            TeiRerankRequest::FIELDS,
        )
        .map_err(|e| e.to_tei_error())?;
    ignored.report(state.metrics(), user_agent.as_deref());
    let e = model.encoder().map_err(|e| e.to_tei_error())?;
    let truncate = match req.truncate {
        Some(true) => Truncate::KeepFirst(e.max_seq_len),
        _ => Truncate::No,
    };
    score_pairs::check(
        e,
        &PairOptions {
            first: std::slice::from_ref(&req.query),
            first_field: "query",
            second: &req.texts,
            second_field: "texts",
            truncate,
            truncate_hint: "set `truncate` to true",
        },
    )
    .map_err(|e| e.to_tei_error())
}
