//! A constraint compiled once: the llguidance grammar for it and a fresh parser built by the
//! model's `ParserFactory`, which every sequence's matcher deep-clones instead of recompiling.

use std::sync::Mutex;
use std::time::Duration;

use crate::Constraint;
use llguidance::api::TopLevelGrammar;
use llguidance::{ParserFactory, TokenParser};
use serde_json::{Value, json};

use crate::{ConstraintMatcher, StructuredError};

/// A validated constraint, ready to start matchers.
pub struct CompiledConstraint {
    constraint: Constraint,
    /// The parser in its start state. `TokenParser` is `Send` but not `Sync`; the lock is held
    /// only while cloning it, once per sequence.
    parser: Mutex<TokenParser>,
    compile_time: Duration,
}

impl std::fmt::Debug for CompiledConstraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledConstraint")
            .field("kind", &self.constraint.kind())
            .field("compile_time", &self.compile_time)
            .finish()
    }
}

impl CompiledConstraint {
    pub(crate) fn compile(
        factory: &ParserFactory,
        constraint: &Constraint,
    ) -> Result<Self, StructuredError> {
        let started = std::time::Instant::now();
        let grammar = top_level_grammar(constraint)?;
        let parser = factory
            .create_parser(grammar)
            .map_err(|e| kind_error(constraint, e.to_string()))?;
        Ok(Self {
            constraint: constraint.clone(),
            parser: Mutex::new(parser),
            compile_time: started.elapsed(),
        })
    }

    pub fn constraint(&self) -> &Constraint {
        &self.constraint
    }

    /// How long llguidance took to compile it.
    pub fn compile_time(&self) -> Duration {
        self.compile_time
    }

    /// A matcher in the start state, for one sequence.
    pub fn matcher(&self) -> ConstraintMatcher {
        let parser = match self.parser.lock() {
            Ok(p) => p.deep_clone(),
            Err(poisoned) => poisoned.into_inner().deep_clone(),
        };
        ConstraintMatcher::new(parser)
    }
}

/// The error of the constraint's own kind, so the message names what the user sent.
fn kind_error(c: &Constraint, msg: String) -> StructuredError {
    match c {
        Constraint::JsonObject | Constraint::JsonSchema(_) => {
            StructuredError::InvalidJsonSchema(msg)
        }
        Constraint::Regex(_) => StructuredError::InvalidRegex(msg),
        Constraint::Choice(_) => StructuredError::InvalidChoice(msg),
        Constraint::Grammar(_) => StructuredError::InvalidGrammar(msg),
    }
}

/// Compact JSON separators and no free whitespace: with llguidance's default
/// `whitespace_flexible: true`, sampling can run away on whitespace (NOTES.md gotcha 3).
fn x_guidance() -> Value {
    json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "})
}

/// The llguidance grammar for a constraint.
fn top_level_grammar(c: &Constraint) -> Result<TopLevelGrammar, StructuredError> {
    Ok(match c {
        Constraint::JsonObject => {
            TopLevelGrammar::from_json_schema(json!({"type": "object", "x-guidance": x_guidance()}))
        }
        Constraint::JsonSchema(text) => {
            let schema: Value = serde_json::from_str(text)
                .map_err(|e| StructuredError::InvalidJsonSchema(format!("not JSON: {e}")))?;
            let schema = match schema {
                Value::Object(mut m) => {
                    // A schema's own x-guidance options win over ours.
                    m.entry("x-guidance").or_insert_with(x_guidance);
                    Value::Object(m)
                }
                Value::Bool(true) => json!({"x-guidance": x_guidance()}),
                Value::Bool(false) => {
                    return Err(StructuredError::InvalidJsonSchema(
                        "the schema `false` matches nothing".into(),
                    ));
                }
                other => {
                    return Err(StructuredError::InvalidJsonSchema(format!(
                        "a schema is an object or a boolean, not {}",
                        json_type_name(&other)
                    )));
                }
            };
            TopLevelGrammar::from_json_schema(schema)
        }
        Constraint::Regex(rx) => TopLevelGrammar::from_regex(rx),
        Constraint::Choice(choices) => {
            if choices.is_empty() {
                return Err(StructuredError::InvalidChoice("the list is empty".into()));
            }
            if let Some(i) = choices.iter().position(|c| c.is_empty()) {
                return Err(StructuredError::InvalidChoice(format!(
                    "choice {i} is the empty string"
                )));
            }
            // Lark string literals take JSON escapes, so serde_json quotes each choice safely.
            let alts: Vec<String> = choices
                .iter()
                .map(|c| Value::String(c.clone()).to_string())
                .collect();
            TopLevelGrammar::from_lark(format!("start: {}\n", alts.join(" | ")))
        }
        Constraint::Grammar(lark) => {
            if lark.trim().is_empty() {
                return Err(StructuredError::InvalidGrammar(
                    "the grammar is empty".into(),
                ));
            }
            TopLevelGrammar::from_lark(lark.clone())
        }
    })
}

fn json_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
