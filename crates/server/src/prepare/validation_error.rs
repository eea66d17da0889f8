//! `ValidationError`: every way a request can be refused as sent, typed (the field, and what it
//! must be or what it was). Every endpoint's validation returns it; `error/mapping.rs` is its
//! one mapping to an HTTP status and the OpenAI error body.

use pagoda_frontend::chat_prompt::PromptError;
use pagoda_structured::StructuredError;
use thiserror::Error;

/// An API's names for the engine's fields, so an engine error names the field the client sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldNames {
    /// `prompt`, `messages`, `input`, ...
    pub prompt: &'static str,
    /// `max_tokens`, `max_completion_tokens`, `max_output_tokens`, ...
    pub max_tokens: &'static str,
    /// `logprobs` or `top_logprobs`.
    pub logprobs: &'static str,
}

impl FieldNames {
    /// The completions API: the engine's own names.
    pub const COMPLETIONS: Self = Self {
        prompt: "prompt",
        max_tokens: "max_tokens",
        logprobs: "logprobs",
    };

    /// Chat completions, with the field `max_tokens` came from (`max_tokens` or
    /// `max_completion_tokens`).
    pub const fn chat(max_tokens: &'static str) -> Self {
        Self {
            prompt: "messages",
            max_tokens,
            logprobs: "top_logprobs",
        }
    }

    /// Anthropic's Messages API.
    pub const MESSAGES: Self = Self::chat("max_tokens");

    /// The Responses API.
    pub const RESPONSES: Self = Self {
        prompt: "input",
        max_tokens: "max_output_tokens",
        logprobs: "top_logprobs",
    };

    pub fn rename(&self, engine_field: &'static str) -> &'static str {
        match engine_field {
            "prompt" => self.prompt,
            "max_tokens" => self.max_tokens,
            "logprobs" => self.logprobs,
            other => other,
        }
    }
}

/// A request refused as sent.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ValidationError {
    /// The body is not the JSON the endpoint takes.
    #[error("{message}")]
    Body {
        field: Option<String>,
        message: String,
    },
    /// A key the endpoint does not know (`prepare/field_policy.rs` decides which are refused);
    /// `near`: the known name it is probably a typo of.
    #[error("Unrecognized request argument supplied: {field}{}", near.as_ref().map(|n| format!("; did you mean `{n}`?")).unwrap_or_default())]
    UnknownField { field: String, near: Option<String> },
    /// A known field pagoda does not implement (or not in this form).
    #[error("`{field}` is not supported: {why}")]
    Unsupported { field: String, why: String },
    /// A field that breaks a rule of its API (a message naming a missing tool, a template
    /// variable of the wrong kind, ...): `message` says which.
    #[error("{message}")]
    Rule { field: String, message: String },
    /// A field of the wrong shape or with a value outside what it takes.
    #[error("`{field}` must be {expected}{}", got.as_ref().map(|g| format!(", got {g}")).unwrap_or_default())]
    Invalid {
        field: String,
        expected: &'static str,
        got: Option<String>,
    },
    #[error("`{field}` must not be empty")]
    Empty { field: &'static str },
    #[error("`{field}` cannot be combined with {with}")]
    Conflict {
        field: &'static str,
        with: &'static str,
    },
    #[error("`{field}` needs {needs}")]
    Requires {
        field: &'static str,
        needs: &'static str,
    },
    /// A constraint (schema, regex, choice, grammar) that does not compile.
    #[error("`{field}`: {error}")]
    Constraint {
        field: String,
        error: StructuredError,
    },
    /// The chat template could not render these messages.
    #[error("cannot apply the chat template: {message}")]
    Template { message: String },
    /// A prompt or parameter outside the engine's limits.
    #[error("{}", error.describe(&|f| names.rename(f)))]
    Engine {
        error: pagoda_core::LimitError,
        names: FieldNames,
        /// Which prompt, for a request with several.
        prompt: usize,
    },
    #[error("The model `{model}` does not exist.")]
    ModelNotFound { model: String },
    /// The request names something (a stored response, ...) that does not exist: 404.
    #[error("{message}")]
    NotFound {
        field: &'static str,
        message: String,
    },
    /// An input longer than the model takes.
    #[error(
        "`{field}` #{index} has {tokens} tokens, more than the model's maximum of {max}; shorten it, or {truncate_hint}"
    )]
    TooLong {
        field: &'static str,
        index: usize,
        tokens: usize,
        max: usize,
        /// How a client of the API called asks for truncation.
        truncate_hint: &'static str,
    },
    /// An endpoint of another task than the one the loaded model serves.
    #[error("the model `{model}` serves {serves}; {endpoint} is not available")]
    WrongTask {
        model: String,
        serves: &'static str,
        endpoint: &'static str,
    },
}

impl ValidationError {
    /// A field that must be of another shape (`expected` says what it takes).
    pub fn invalid(field: impl Into<String>, expected: &'static str) -> Self {
        Self::Invalid {
            field: field.into(),
            expected,
            got: None,
        }
    }

    /// A field whose value `got` is not one it takes.
    pub fn invalid_value(
        field: impl Into<String>,
        expected: &'static str,
        got: impl ToString,
    ) -> Self {
        Self::Invalid {
            field: field.into(),
            expected,
            got: Some(got.to_string()),
        }
    }

    pub fn unsupported(field: impl Into<String>, why: impl Into<String>) -> Self {
        Self::Unsupported {
            field: field.into(),
            why: why.into(),
        }
    }

    pub fn rule(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Rule {
            field: field.into(),
            message: message.into(),
        }
    }

    pub fn unknown(field: impl Into<String>) -> Self {
        Self::UnknownField {
            field: field.into(),
            near: None,
        }
    }

    /// A body that is not the JSON the endpoint takes; `field` when one field is to blame.
    pub fn body(field: Option<String>, message: impl Into<String>) -> Self {
        Self::Body {
            field,
            message: message.into(),
        }
    }

    /// The `param` of the error body.
    pub fn field(&self) -> Option<String> {
        match self {
            Self::Body { field, .. } => field.clone(),
            Self::UnknownField { field, .. }
            | Self::Unsupported { field, .. }
            | Self::Rule { field, .. }
            | Self::Invalid { field, .. }
            | Self::Constraint { field, .. } => Some(field.clone()),
            Self::Empty { field }
            | Self::Conflict { field, .. }
            | Self::Requires { field, .. }
            | Self::NotFound { field, .. } => Some((*field).to_owned()),
            Self::Template { .. } => Some("messages".to_owned()),
            Self::Engine { error, names, .. } => Some(names.rename(error.field()).to_owned()),
            Self::ModelNotFound { .. } => Some("model".to_owned()),
            Self::TooLong { field, .. } => Some((*field).to_owned()),
            Self::WrongTask { .. } => None,
        }
    }
}

/// The chat-prompt rule's refusals, as the field and message every API reports.
impl From<PromptError> for ValidationError {
    fn from(e: PromptError) -> Self {
        match e {
            PromptError::PartType { .. } => Self::unsupported(e.field(), e.to_string()),
            PromptError::ContinueWithGenerationPrompt => Self::Conflict {
                field: "continue_final_message",
                with: "`add_generation_prompt: true`",
            },
            _ => Self::rule(e.field(), e.to_string()),
        }
    }
}
