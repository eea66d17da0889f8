//! `response_format` and the vLLM-style `structured_outputs` object -> a `Constraint`, compiled
//! before anything is submitted, so a bad schema, regex or grammar is a 400 that names the field
//! and the problem and costs no compute.

use pagoda_core::ConstraintRef;
use pagoda_structured::Constraint;
use serde_json::Value;

use crate::prepare::field_policy;
use crate::prepare::validation_error::ValidationError;
use crate::state::Loaded;

/// The constraint asked for by `response_format` and/or `structured_outputs` (at most one).
pub fn requested(
    response_format: Option<&Value>,
    structured_outputs: Option<&Value>,
) -> Result<Option<(Constraint, &'static str)>, ValidationError> {
    let from_format = match response_format {
        Some(f) => from_response_format(f)?,
        None => None,
    };
    let from_outputs = match structured_outputs {
        Some(s) => from_structured_outputs(s)?,
        None => None,
    };
    match (from_format, from_outputs) {
        (Some(_), Some(_)) => Err(ValidationError::Conflict {
            field: "structured_outputs",
            with: "a non-text `response_format`",
        }),
        (Some(c), None) => Ok(Some((c, "response_format"))),
        (None, Some(c)) => Ok(Some((c, "structured_outputs"))),
        (None, None) => Ok(None),
    }
}

/// Compiles `c` (cached by its text) into what the request carries to the engine; the one
/// compile of a request's constraint.
pub fn compile(
    loaded: &Loaded,
    c: Constraint,
    field: &str,
) -> Result<ConstraintRef, ValidationError> {
    loaded
        .structured
        .compile(&c)
        .map(|compiled| compiled.into_ref())
        .map_err(|error| ValidationError::Constraint {
            field: field.to_owned(),
            error,
        })
}

/// The one constraint of a reply, compiled: a requested format (`field` names where it came
/// from) or the tools' grammar, never both. Every API (chat, Messages, Responses) ends here.
pub fn reply(
    loaded: &Loaded,
    requested: Option<(Constraint, &'static str)>,
    tools: Option<&crate::prepare::tools::ToolSetup>,
) -> Result<Option<ConstraintRef>, ValidationError> {
    let tool_constraint = match tools {
        Some(t) => t.constraint()?,
        None => None,
    };
    match (requested, tool_constraint) {
        (Some((_, field)), Some(_)) => Err(ValidationError::Conflict {
            field: "tool_choice",
            with: match field {
                "text.format" => "`text.format` (when it constrains the reply)",
                "output_config.format" | "output_format" => {
                    "`output_config.format` (a tool choice of `any` or `tool`, or a strict tool)"
                }
                _ => "`response_format` or `structured_outputs` (when it constrains the reply)",
            },
        }),
        (Some((c, field)), None) => Ok(Some(compile(loaded, c, field)?)),
        (None, Some(c)) => Ok(Some(compile(loaded, c, "tools")?)),
        (None, None) => Ok(None),
    }
}

/// A json_schema format's body (`{name, schema, strict, description}`) at `field`: the
/// Responses API's `text.format` has it inline, chat's `response_format` under `json_schema`.
fn json_schema_format(
    js: &serde_json::Map<String, Value>,
    field: &str,
    allowed: &[&str],
) -> Result<Constraint, ValidationError> {
    field_policy::parameter_keys(js, field, allowed)?;
    if js.get("name").is_some_and(|n| !n.is_string()) {
        return Err(ValidationError::invalid(
            format!("{field}.name"),
            "a string",
        ));
    }
    match js.get("schema") {
        Some(s @ (Value::Object(_) | Value::Bool(_))) => Ok(Constraint::JsonSchema(s.to_string())),
        // OpenAI: a missing schema means any JSON object.
        None => Ok(Constraint::JsonObject),
        Some(_) => Err(ValidationError::invalid(
            format!("{field}.schema"),
            "a JSON schema object",
        )),
    }
}

/// The Responses API's `text`: `{"format": {"type": "text" | "json_object"}}` or
/// `{"format": {"type": "json_schema", "name", "schema", "strict"}}`.
pub fn from_text_config(
    text: &serde_json::Map<String, Value>,
) -> Result<Option<Constraint>, ValidationError> {
    if let Some(k) = text.keys().find(|k| k.as_str() != "format") {
        return Err(ValidationError::unsupported(
            format!("text.{k}"),
            "only `text.format` is supported",
        ));
    }
    let Some(format) = text.get("format") else {
        return Ok(None);
    };
    let obj = format
        .as_object()
        .ok_or_else(|| ValidationError::invalid("text.format", "an object"))?;
    match obj.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(Constraint::JsonObject)),
        Some("json_schema") => json_schema_format(
            obj,
            "text.format",
            &["type", "name", "schema", "strict", "description"],
        )
        .map(Some),
        Some(other) => Err(ValidationError::invalid_value(
            "text.format.type",
            "\"text\", \"json_object\" or \"json_schema\"",
            format!("{other:?}"),
        )),
        None => Err(ValidationError::invalid("text.format.type", "a string")),
    }
}

/// Anthropic's structured outputs: `output_config` (`{"format": {"type": "json_schema",
/// "schema": {...}}}`, what the SDK's `messages.parse` sends) or the beta's top-level
/// `output_format` (the same format object). `effort` is refused: it tunes a reasoning model.
pub fn from_anthropic_output(
    output_config: Option<&Value>,
    output_format: Option<&Value>,
) -> Result<Option<(Constraint, &'static str)>, ValidationError> {
    let from_config = match output_config {
        None | Some(Value::Null) => None,
        Some(Value::Object(c)) => {
            field_policy::parameter_keys(c, "output_config", &["format", "effort"])?;
            if c.get("effort").is_some_and(|e| !e.is_null()) {
                return Err(ValidationError::unsupported(
                    "output_config.effort",
                    "no reasoning models are served",
                ));
            }
            c.get("format").filter(|f| !f.is_null())
        }
        Some(_) => return Err(ValidationError::invalid("output_config", "an object")),
    };
    let (format, field) = match (from_config, output_format.filter(|f| !f.is_null())) {
        (Some(_), Some(_)) => {
            return Err(ValidationError::Conflict {
                field: "output_format",
                with: "`output_config.format` (the same setting)",
            });
        }
        (Some(f), None) => (f, "output_config.format"),
        (None, Some(f)) => (f, "output_format"),
        (None, None) => return Ok(None),
    };
    let obj = format
        .as_object()
        .ok_or_else(|| ValidationError::invalid(field, "an object"))?;
    field_policy::parameter_keys(obj, field, &["type", "schema"])?;
    if obj.get("type").and_then(Value::as_str) != Some("json_schema") {
        return Err(ValidationError::invalid_value(
            format!("{field}.type"),
            "\"json_schema\"",
            obj.get("type").cloned().unwrap_or(Value::Null),
        ));
    }
    match obj.get("schema") {
        Some(s @ Value::Object(_)) => Ok(Some((Constraint::JsonSchema(s.to_string()), field))),
        _ => Err(ValidationError::invalid(
            format!("{field}.schema"),
            "a JSON schema object",
        )),
    }
}

/// `{"type": "text" | "json_object" | "json_schema", "json_schema": {name, schema, strict}}`.
fn from_response_format(f: &Value) -> Result<Option<Constraint>, ValidationError> {
    let field = "response_format";
    let obj = f
        .as_object()
        .ok_or_else(|| ValidationError::invalid(field, "an object"))?;
    let kind = obj
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| ValidationError::invalid("response_format.type", "a string"))?;
    field_policy::parameter_keys(obj, field, &["type", "json_schema"])?;
    match kind {
        "text" => Ok(None),
        "json_object" => Ok(Some(Constraint::JsonObject)),
        "json_schema" => {
            let js = obj
                .get("json_schema")
                .and_then(Value::as_object)
                .ok_or_else(|| {
                    ValidationError::invalid(
                        "response_format.json_schema",
                        "an object with a `schema`",
                    )
                })?;
            json_schema_format(
                js,
                "response_format.json_schema",
                &["name", "schema", "strict", "description"],
            )
            .map(Some)
        }
        other => Err(ValidationError::invalid_value(
            "response_format.type",
            "\"text\", \"json_object\" or \"json_schema\"",
            format!("{other:?}"),
        )),
    }
}

/// vLLM's `structured_outputs`: exactly one of `json` (a schema object or its text), `regex`,
/// `choice` (a list of strings), `grammar` (Lark).
fn from_structured_outputs(s: &Value) -> Result<Option<Constraint>, ValidationError> {
    let field = "structured_outputs";
    let obj = s
        .as_object()
        .ok_or_else(|| ValidationError::invalid(field, "an object"))?;
    let mut found: Vec<(&str, Constraint)> = Vec::new();
    for (k, v) in obj {
        if v.is_null() {
            continue;
        }
        let name = format!("structured_outputs.{k}");
        let c = match k.as_str() {
            "json" => match v {
                Value::String(text) => {
                    serde_json::from_str::<Value>(text)
                        .map_err(|e| ValidationError::invalid_value(&name, "a JSON schema", e))?;
                    Constraint::JsonSchema(text.clone())
                }
                Value::Object(_) | Value::Bool(_) => Constraint::JsonSchema(v.to_string()),
                _ => {
                    return Err(ValidationError::invalid(&name, "a JSON schema"));
                }
            },
            "json_object" if v.as_bool() == Some(true) => Constraint::JsonObject,
            "json_object" if v.as_bool() == Some(false) => continue,
            "regex" => Constraint::Regex(
                v.as_str()
                    .ok_or_else(|| ValidationError::invalid(&name, "a string"))?
                    .to_owned(),
            ),
            "grammar" => Constraint::Grammar(
                v.as_str()
                    .ok_or_else(|| ValidationError::invalid(&name, "a string"))?
                    .to_owned(),
            ),
            "choice" => {
                let list = v.as_array().filter(|l| !l.is_empty()).ok_or_else(|| {
                    ValidationError::invalid(&name, "a non-empty list of strings")
                })?;
                let strings: Option<Vec<String>> =
                    list.iter().map(|x| x.as_str().map(str::to_owned)).collect();
                Constraint::Choice(
                    strings.ok_or_else(|| ValidationError::invalid(&name, "a list of strings"))?,
                )
            }
            _ => {
                let known = &["json", "json_object", "regex", "grammar", "choice"];
                return Err(field_policy::unknown(name, k, known));
            }
        };
        found.push((k.as_str(), c));
    }
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop().map(|(_, c)| c)),
        _ => Err(ValidationError::invalid_value(
            field,
            "exactly one of json, regex, choice, grammar",
            found.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", "),
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn response_format_and_structured_outputs_map_to_constraints() {
        let s = json!({"type": "object"});
        assert_eq!(
            requested(
                Some(&json!({"type": "json_schema", "json_schema": {"name": "x", "schema": s}})),
                None
            )
            .unwrap(),
            Some((Constraint::JsonSchema(s.to_string()), "response_format"))
        );
        assert_eq!(
            requested(Some(&json!({"type": "text"})), None).unwrap(),
            None
        );
        assert_eq!(
            requested(None, Some(&json!({"choice": ["a", "b"]}))).unwrap(),
            Some((
                Constraint::Choice(vec!["a".into(), "b".into()]),
                "structured_outputs"
            ))
        );
        let e = requested(None, Some(&json!({"regex": "a", "grammar": "b"}))).unwrap_err();
        assert!(format!("{e:?}").contains("exactly one"), "{e:?}");
        assert!(requested(Some(&json!({"type": "xml"})), None).is_err());
        assert!(requested(None, Some(&json!({"choice": [1]}))).is_err());
        assert!(requested(None, Some(&json!({"lark": "x"}))).is_err());
    }
}
