//! `POST /v1/load_lora_adapter {"lora_name", "lora_path", "load_inplace"}` and
//! `POST /v1/unload_lora_adapter {"lora_name"}` in vLLM's shapes and answers; routed only with
//! `--enable-lora-runtime-updates` (else 404, as in vLLM).

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use pagoda_protocol::ErrorResponse;
use serde::Deserialize;

use super::{rejected, run_blocking};
use crate::error::ApiError;
use crate::loras::LoraServeError;
use crate::state::AppState;

#[derive(Deserialize)]
struct LoadRequest {
    lora_name: String,
    lora_path: String,
    /// Replace an adapter already loaded under this name (vLLM's `load_inplace`).
    #[serde(default)]
    load_inplace: bool,
}

#[derive(Deserialize)]
struct UnloadRequest {
    lora_name: String,
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            ErrorResponse::invalid_request(e.to_string(), None),
        )
    })
}

fn api_error(e: LoraServeError) -> ApiError {
    let status = match e {
        LoraServeError::NotFound(_) => StatusCode::NOT_FOUND,
        _ => StatusCode::BAD_REQUEST,
    };
    ApiError::new(
        status,
        ErrorResponse::invalid_request(e.to_string(), Some("lora_name")),
    )
}

pub async fn load(State(state): State<AppState>, body: Bytes) -> Response {
    let st = state.clone();
    let done = run_blocking(move || {
        let req: LoadRequest = parse(&body)?;
        let loaded = st.loaded()?;
        if req.load_inplace && loaded.loras.contains(&req.lora_name) {
            loaded.loras.unload(&req.lora_name).map_err(api_error)?;
        }
        loaded
            .loras
            .load(&req.lora_name, std::path::Path::new(&req.lora_path))
            .map_err(api_error)?;
        Ok(req.lora_name)
    })
    .await;
    match done {
        Ok(name) => format!("Success: LoRA adapter '{name}' added successfully.").into_response(),
        Err(e) => rejected(&state, e),
    }
}

pub async fn unload(State(state): State<AppState>, body: Bytes) -> Response {
    let done = (|| {
        let req: UnloadRequest = parse(&body)?;
        state
            .loaded()?
            .loras
            .unload(&req.lora_name)
            .map_err(api_error)?;
        Ok::<_, ApiError>(req.lora_name)
    })();
    match done {
        Ok(name) => format!("Success: LoRA adapter '{name}' removed successfully.").into_response(),
        Err(e) => rejected(&state, e),
    }
}
