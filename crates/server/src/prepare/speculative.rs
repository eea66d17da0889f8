//! A request's `speculative` field -> the engine's per-request cap on speculative tokens.
//! It can only narrow what the server runs: `false` (or K = 0) turns speculation off for the
//! request, an object may lower K; another method, a K above the server's or speculation on
//! a server without it is refused, so a client never believes it got what it did not.

use pagoda_core::{SpecConfig, SpecMethod};
use serde_json::Value;

use crate::prepare::validation_error::ValidationError;

const FIELD: &str = "speculative";
const KEYS: [&str; 2] = ["method", "num_speculative_tokens"];

/// The cap `v` asks for: `None` for the server's own setting, `Some(0)` for off.
pub fn parse(
    v: Option<&Value>,
    server: Option<&SpecConfig>,
) -> Result<Option<u32>, ValidationError> {
    let obj = match v {
        None | Some(Value::Null) | Some(Value::Bool(true)) => {
            if matches!(v, Some(Value::Bool(true))) && server.is_none() {
                return Err(not_configured());
            }
            return Ok(None);
        }
        Some(Value::Bool(false)) => return Ok(Some(0)),
        Some(Value::Object(o)) => o,
        Some(_) => {
            return Err(ValidationError::invalid(
                FIELD,
                "false, or an object with `method` and `num_speculative_tokens`",
            ));
        }
    };
    if let Some(k) = obj.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(ValidationError::unknown(format!("{FIELD}.{k}")));
    }
    let Some(server) = server else {
        return Err(not_configured());
    };
    if let Some(m) = obj.get("method") {
        let name = m
            .as_str()
            .ok_or_else(|| ValidationError::invalid(format!("{FIELD}.method"), "a string"))?;
        if !same_method(name, &server.method) {
            return Err(ValidationError::unsupported(
                format!("{FIELD}.method"),
                format!(
                    "this server runs speculative decoding with `{}` only, not `{name}`",
                    server.method.name()
                ),
            ));
        }
    }
    let max = server.num_speculative_tokens.max();
    match obj.get("num_speculative_tokens") {
        None | Some(Value::Null) => Ok(None),
        Some(k) => match k.as_u64() {
            Some(k) if k as usize <= max => Ok(Some(k as u32)),
            Some(k) => Err(ValidationError::rule(
                format!("{FIELD}.num_speculative_tokens"),
                format!(
                    "`{FIELD}.num_speculative_tokens` is {k}, above this server's maximum of {max}"
                ),
            )),
            None => Err(ValidationError::invalid_value(
                format!("{FIELD}.num_speculative_tokens"),
                "a non-negative integer",
                k,
            )),
        },
    }
}

fn not_configured() -> ValidationError {
    ValidationError::unsupported(
        FIELD,
        "this server runs without speculative decoding (start it with --speculative-config)",
    )
}

/// `name` as a client may spell the server's method: vLLM's names, and `draft` for a draft
/// model.
fn same_method(name: &str, method: &SpecMethod) -> bool {
    match method {
        SpecMethod::Ngram { .. } => name == "ngram",
        SpecMethod::Suffix => name == "suffix",
        SpecMethod::SuffixNgram { .. } => name == "suffix+ngram",
        SpecMethod::DraftModel { .. } => matches!(name, "draft_model" | "draft"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use pagoda_core::NumSpecTokens;
    use serde_json::json;

    fn ngram(k: usize) -> SpecConfig {
        SpecConfig {
            method: SpecMethod::Ngram { min_n: 1, max_n: 3 },
            num_speculative_tokens: NumSpecTokens::Fixed(k),
        }
    }

    #[test]
    fn narrows_or_refuses() {
        let s = ngram(4);
        let p = |v: Value| parse(Some(&v), Some(&s));
        assert_eq!(parse(None, Some(&s)).unwrap(), None);
        assert_eq!(parse(None, None).unwrap(), None);
        assert_eq!(p(json!(false)).unwrap(), Some(0));
        assert_eq!(parse(Some(&json!(false)), None).unwrap(), Some(0));
        assert_eq!(p(json!(true)).unwrap(), None);
        assert_eq!(p(json!({"method": "ngram"})).unwrap(), None);
        assert_eq!(
            p(json!({"method": "ngram", "num_speculative_tokens": 2})).unwrap(),
            Some(2)
        );
        assert_eq!(p(json!({"num_speculative_tokens": 0})).unwrap(), Some(0));
        let field = |e: ValidationError| e.field().unwrap();
        assert_eq!(
            field(p(json!({"num_speculative_tokens": 5})).unwrap_err()),
            "speculative.num_speculative_tokens"
        );
        assert_eq!(
            field(p(json!({"num_speculative_tokens": -1})).unwrap_err()),
            "speculative.num_speculative_tokens"
        );
        assert_eq!(
            field(p(json!({"method": "draft_model"})).unwrap_err()),
            "speculative.method"
        );
        assert_eq!(field(p(json!({"k": 1})).unwrap_err()), "speculative.k");
        assert_eq!(field(p(json!(3)).unwrap_err()), "speculative");
        let off = parse(Some(&json!({"method": "ngram"})), None).unwrap_err();
        assert!(
            off.to_string().contains("without speculative decoding"),
            "{off}"
        );
        assert!(parse(Some(&json!(true)), None).is_err());
        let draft = SpecConfig {
            method: SpecMethod::DraftModel { path: "d".into() },
            num_speculative_tokens: NumSpecTokens::Auto { max: 8 },
        };
        let d = |v: Value| parse(Some(&v), Some(&draft));
        assert_eq!(
            d(json!({"method": "draft", "num_speculative_tokens": 8})).unwrap(),
            Some(8)
        );
        assert_eq!(d(json!({"method": "draft_model"})).unwrap(), None);
    }
}
