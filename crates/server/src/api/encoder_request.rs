//! The steps every encoder endpoint (`/v1/embeddings`, TEI's `/embed`, rerank, score) takes
//! before its model runs, in one place: admit the request, find the model it names, check and
//! tokenize it off the async runtime.

use std::sync::Arc;

use crate::error::ApiError;
use crate::http::wire_request::WireRequest;
use crate::model::lease::ModelLease;
use crate::prepare::blocking::run_blocking;
use crate::state::{AppState, InFlight};

/// An admitted, prepared request: held in flight, its model leased, `prepared` ready to run.
pub struct Admitted<P> {
    pub in_flight: InFlight,
    pub model: Arc<ModelLease>,
    pub prepared: P,
}

/// The endpoint's own check, run on the blocking pool with the request's model.
pub type Prepare<W, P> = fn(&AppState, &ModelLease, W, Option<String>) -> Result<P, ApiError>;

/// Admits `req` (503 while draining), leases its model (404, 503, 500 as `model_for`) and runs
/// `prepare` off the runtime.
pub async fn admit_and_prepare<W, P>(
    state: &AppState,
    req: W,
    user_agent: Option<String>,
    prepare: Prepare<W, P>,
) -> Result<Admitted<P>, ApiError>
where
    W: WireRequest + Send + 'static,
    P: Send + 'static,
{
    let in_flight = state.admit()?;
    let model = Arc::new(state.model_for(&req).await?);
    let (st, m) = (state.clone(), Arc::clone(&model));
    let prepared = run_blocking(move || prepare(&st, &m, req, user_agent)).await?;
    Ok(Admitted {
        in_flight,
        model,
        prepared,
    })
}
