//! `POST /v1/load_lora_adapter {"lora_name", "lora_path", "load_inplace"}` and
//! `POST /v1/unload_lora_adapter {"lora_name"}` in vLLM's shapes and answers; routed only with
//! `--enable-lora-runtime-updates` (else 404, as in vLLM).

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use crate::error::ApiError;
use crate::error::rejected::rejected;
use crate::model::lease::ModelLease;
use crate::model::loras::LoraServeError;
use crate::prepare::blocking::run_blocking;
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
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(e.to_string(), None))
}

fn api_error(e: LoraServeError) -> ApiError {
    match e {
        LoraServeError::NotFound(_) => ApiError::not_found(e.to_string(), "lora_name"),
        LoraServeError::OutsideDir { .. } => {
            ApiError::bad_request(e.to_string(), Some("lora_path"))
        }
        _ => ApiError::bad_request(e.to_string(), Some("lora_name")),
    }
}

/// The model adapters go on: the default one.
async fn base(state: &AppState) -> Result<ModelLease, ApiError> {
    Ok(state.models().acquire(None, None).await?)
}

pub async fn load(State(state): State<AppState>, body: Bytes) -> Response {
    let model = match base(&state).await {
        Ok(m) => m,
        Err(e) => return rejected(&state, e),
    };
    let lora = state.config().lora.clone();
    let done = run_blocking(move || {
        let req: LoadRequest = parse(&body)?;
        let path = lora.runtime_path(&req.lora_path).map_err(api_error)?;
        let loaded = model.generator()?;
        if req.load_inplace && loaded.loras.contains(&req.lora_name) {
            loaded.loras.unload(&req.lora_name).map_err(api_error)?;
        }
        loaded
            .loras
            .load(&req.lora_name, &path)
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
    let model = match base(&state).await {
        Ok(m) => m,
        Err(e) => return rejected(&state, e),
    };
    let done = (|| {
        let req: UnloadRequest = parse(&body)?;
        model
            .generator()?
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
