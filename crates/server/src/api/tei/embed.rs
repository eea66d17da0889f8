//! `POST /embed`: TEI's fields mapped onto the shared embedding rules (`prepare/embed.rs`, off
//! the runtime), the job run by the embedding batcher (`embedder.rs`) beside `/v1/embeddings`'
//! ones, answered as TEI does: a JSON array of vectors, errors as `{"error", "error_type"}`
//! with TEI's statuses (`error/shape.rs`).

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use pagoda_protocol::tei::TeiEmbedRequest;

use crate::api::encoder_request::{Admitted, admit_and_prepare};
use crate::error::ApiError;
use crate::error::mapping::tei_body_error;
use crate::error::rejected::rejected_as;
use crate::error::shape::ErrorShape;
use crate::http::body::JsonBody;
use crate::http::request_id::RequestInfo;
use crate::model::embedder::EmbedJob;
use crate::model::lease::ModelLease;
use crate::prepare::embed::{self, EmbedOptions, Truncate};
use crate::prepare::field_policy::Ignored;
use crate::prepare::validation_error::ValidationError;
use crate::state::AppState;

pub async fn embed(
    State(state): State<AppState>,
    info: Option<Extension<RequestInfo>>,
    body: Result<JsonBody<TeiEmbedRequest>, ApiError>,
) -> Response {
    let fail = |e: ApiError| rejected_as(&state, ErrorShape::Tei, e);
    let req = match body {
        Ok(JsonBody(r)) => r,
        Err(e) => return fail(tei_body_error(e)),
    };
    let ua = RequestInfo::user_agent_of(info);
    let Admitted {
        in_flight: _in_flight,
        model,
        prepared: job,
    } = match admit_and_prepare(&state, req, ua, prepare).await {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    let embedder = match model.embedder() {
        Ok(e) => e,
        Err(e) => return fail(e.to_tei_error()),
    };
    match embedder.vectors(job).await {
        Ok(vectors) => Json(vectors).into_response(),
        Err(e) => fail(ApiError::internal(e)),
    }
}

fn prepare(
    state: &AppState,
    model: &ModelLease,
    req: TeiEmbedRequest,
    user_agent: Option<String>,
) -> Result<EmbedJob, ApiError> {
    let mut ignored = Ignored::default();
    ignored
        .top_level(
            state.config().unknown_fields,
            &req.extra,
            TeiEmbedRequest::FIELDS,
        )
        .map_err(|e| e.to_tei_error())?;
    ignored.report(state.metrics(), user_agent.as_deref());
    let e = model.embedder().map_err(|e| e.to_tei_error())?;
    let max = e.max_seq_len;
    let truncate = match (req.truncate, req.truncation_direction.as_deref()) {
        (None | Some(false), _) => Truncate::No,
        (Some(true), None | Some("Right" | "right")) => Truncate::KeepFirst(max),
        (Some(true), Some("Left" | "left")) => Truncate::KeepLast(max),
        (Some(true), Some(other)) => {
            let err =
                ValidationError::invalid_value("truncation_direction", "Left or Right", other);
            return Err(err.to_tei_error());
        }
    };
    embed::check(
        e,
        &EmbedOptions {
            input: &req.inputs,
            input_field: "inputs",
            dimensions: req.dimensions,
            truncate,
            truncate_hint: "set `truncate` to true",
            prompt_name: req.prompt_name.as_deref(),
            // TEI normalises unless told not to, whatever the model's modules.
            normalize: Some(req.normalize.unwrap_or(true)),
        },
    )
    .map_err(|e| e.to_tei_error())
}
