//! `POST /models/load {"model", "keep_alive"?}`: loads the model now (waiting for the load, as a
//! request naming it would) and sets how long it stays; `POST /models/unload {"model"}`:
//! unloads it now if idle, else when its last request ends (Ollama's `keep_alive: 0`).

use std::time::Instant;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::error::rejected::rejected;
use crate::model::keep_alive::KeepAlive;
use crate::model::registry::Presence;
use crate::state::AppState;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LoadRequest {
    model: String,
    #[serde(default)]
    keep_alive: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UnloadRequest {
    model: String,
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(e.to_string(), None))
}

fn keep_alive(v: Option<&Value>) -> Result<Option<KeepAlive>, ApiError> {
    v.map(|v| {
        KeepAlive::from_json(v).ok_or_else(|| {
            ApiError::bad_request(
                "`keep_alive` must be a number of seconds or a duration such as \"5m\"",
                Some("keep_alive"),
            )
        })
    })
    .transpose()
}

pub async fn load(State(state): State<AppState>, body: Bytes) -> Response {
    let answer = async {
        let req: LoadRequest = parse(&body)?;
        let keep = keep_alive(req.keep_alive.as_ref())?;
        let started = Instant::now();
        let was = state.models().find(Some(&req.model))?.0.presence();
        let lease = state.models().acquire(Some(&req.model), keep).await?;
        let id = lease.id().to_owned();
        drop(lease);
        Ok::<_, ApiError>(json!({
            "model": id,
            "state": "loaded",
            "loaded_now": was != Presence::Loaded,
            "seconds": started.elapsed().as_secs_f64(),
        }))
    };
    match answer.await {
        Ok(v) => Json(v).into_response(),
        Err(e) => rejected(&state, e),
    }
}

pub async fn unload(State(state): State<AppState>, body: Bytes) -> Response {
    let answer = async {
        let req: UnloadRequest = parse(&body)?;
        let (slot, _) = state.models().find(Some(&req.model))?;
        let models = std::sync::Arc::clone(state.models());
        let s = std::sync::Arc::clone(&slot);
        // Shutting an engine down joins its thread: off the runtime.
        let gone = tokio::task::spawn_blocking(move || models.unload_slot(&s, "asked"))
            .await
            .map_err(|e| ApiError::internal(format!("unload failed: {e}")))?;
        if gone {
            return Ok((
                StatusCode::OK,
                json!({"model": slot.spec.id, "state": "unloaded"}),
            ));
        }
        // Busy: it goes when its last request ends.
        state.models().expire_when_idle(&slot);
        Ok((
            StatusCode::ACCEPTED,
            json!({"model": slot.spec.id, "state": "unloading", "in_flight": slot.in_flight()}),
        ))
    };
    match answer.await {
        Ok((status, v)) => (status, Json(v)).into_response(),
        Err(e) => rejected(&state, e),
    }
}
