//! `WireRequest`: what every API's request type tells the body extractor (its smallest valid
//! body, to name the field that fails) and the model lookup (the `model` it names and how long
//! to keep it loaded).

use serde::de::DeserializeOwned;
use serde_json::Value;

/// A request body type, with the smallest valid body (used to find which field fails), and
/// the model it names (`None`: the server's default model) with how long to keep it loaded.
pub trait WireRequest: DeserializeOwned {
    /// Required fields only, as JSON.
    const MINIMAL: &'static str;

    fn model(&self) -> Option<&str> {
        None
    }

    fn keep_alive(&self) -> Option<&Value> {
        None
    }
}

/// A request type with `model` (a string, or optional) and `keep_alive`.
macro_rules! wire {
    ($t:ty, $minimal:literal, model) => {
        impl WireRequest for $t {
            const MINIMAL: &'static str = $minimal;
            fn model(&self) -> Option<&str> {
                Some(&self.model)
            }
            fn keep_alive(&self) -> Option<&Value> {
                self.keep_alive.as_ref()
            }
        }
    };
    ($t:ty, $minimal:literal, optional model) => {
        impl WireRequest for $t {
            const MINIMAL: &'static str = $minimal;
            fn model(&self) -> Option<&str> {
                self.model.as_deref()
            }
        }
    };
    ($t:ty, $minimal:literal) => {
        impl WireRequest for $t {
            const MINIMAL: &'static str = $minimal;
        }
    };
}

wire!(
    pagoda_protocol::CompletionRequest,
    r#"{"model":"m","prompt":"p"}"#,
    model
);
wire!(
    pagoda_protocol::ChatCompletionRequest,
    r#"{"model":"m","messages":[]}"#,
    model
);
wire!(
    pagoda_protocol::anthropic::MessagesRequest,
    r#"{"model":"m","messages":[],"max_tokens":1}"#,
    model
);
wire!(
    pagoda_protocol::responses::ResponsesRequest,
    r#"{"model":"m"}"#,
    model
);
wire!(
    pagoda_protocol::EmbeddingRequest,
    r#"{"model":"m","input":"i"}"#,
    model
);
impl WireRequest for pagoda_protocol::anthropic::CountTokensRequest {
    const MINIMAL: &'static str = r#"{"model":"m","messages":[]}"#;
    fn model(&self) -> Option<&str> {
        Some(&self.model)
    }
}
wire!(pagoda_protocol::TokenizeRequest, "{}", optional model);
wire!(pagoda_protocol::DetokenizeRequest, r#"{"tokens":[]}"#, optional model);
wire!(pagoda_protocol::tei::TeiEmbedRequest, r#"{"inputs":"i"}"#);
impl WireRequest for pagoda_protocol::RerankRequest {
    const MINIMAL: &'static str = r#"{"query":"q","documents":[]}"#;
    fn model(&self) -> Option<&str> {
        Some(&self.model)
    }
}
impl WireRequest for pagoda_protocol::ScoreRequest {
    const MINIMAL: &'static str = r#"{"text_1":"a","text_2":"b"}"#;
    fn model(&self) -> Option<&str> {
        Some(&self.model)
    }
}
impl WireRequest for pagoda_protocol::tei::AnyRerankRequest {
    const MINIMAL: &'static str = r#"{"query":"q","texts":[]}"#;
    fn model(&self) -> Option<&str> {
        match self {
            Self::Tei(_) => None,
            Self::Cohere(r) => Some(&r.model),
        }
    }
}
