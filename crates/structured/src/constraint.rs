//! What a request's output must match, as the user asked for it: plain data the server fills
//! from `response_format` / `structured_outputs` / `tool_choice`, compiled once by
//! `StructuredOutputs` into what the engine carries (`pagoda_core::ConstraintRef`).

use std::fmt;

/// A constraint on the generated text, enforced token by token.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Constraint {
    /// Any JSON object (`response_format: {"type": "json_object"}`).
    JsonObject,
    /// A JSON value valid against this JSON schema (serialized schema text).
    JsonSchema(String),
    /// Text fully matching this regular expression.
    Regex(String),
    /// Exactly one of these strings.
    Choice(Vec<String>),
    /// A Lark grammar, as llguidance reads it (may embed `%json {...}` schemas).
    Grammar(String),
}

impl Constraint {
    /// The request field a user sets to ask for this kind, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::JsonObject => "json_object",
            Self::JsonSchema(_) => "json",
            Self::Regex(_) => "regex",
            Self::Choice(_) => "choice",
            Self::Grammar(_) => "grammar",
        }
    }
}

impl fmt::Display for Constraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind())
    }
}
