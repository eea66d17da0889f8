//! Why a request's model cannot be served: a name nobody serves, no model yet, a load that
//! failed, or no memory for it. `error/mapping.rs` turns each into its HTTP status.

/// Why a request's model cannot be served.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ModelError {
    #[error("The model `{model}` does not exist; this server serves: {available}.")]
    NotFound { model: String, available: String },
    #[error("no model is loaded yet")]
    NoModels,
    #[error("cannot load model `{model}`: {message}")]
    LoadFailed { model: String, message: String },
    #[error("model `{model}` needs {need} bytes, more than the {budget} bytes of --models-memory")]
    TooBig {
        model: String,
        need: u64,
        budget: u64,
    },
    #[error(
        "no memory to load model `{model}`: the models loaded are all busy; retry when they finish"
    )]
    Busy { model: String },
}
