//! Whether a call's arguments fit its tool's JSON schema, for calls the model wrote freely
//! (no grammar): the keywords tool schemas use (`type`, `enum`, `const`, `properties`,
//! `required`, `additionalProperties: false`, `items`, `anyOf` / `oneOf` / `allOf`); other
//! keywords do not reject. A reply is only taken as a call when its arguments fit.
//! [`fully_checked`] tells whether a schema uses nothing else, so that fitting it means
//! satisfying it (what a strict tool promises).

use serde_json::Value;

/// True when `v` satisfies `schema` as far as the keywords above go.
pub fn conforms(v: &Value, schema: &Value) -> bool {
    let Some(s) = schema.as_object() else {
        // `true` admits everything, `false` nothing.
        return schema.as_bool().unwrap_or(true);
    };
    if let Some(t) = s.get("type") {
        let ok = match t {
            Value::String(name) => has_type(v, name),
            Value::Array(names) => names
                .iter()
                .filter_map(Value::as_str)
                .any(|n| has_type(v, n)),
            _ => true,
        };
        if !ok {
            return false;
        }
    }
    if let Some(Value::Array(options)) = s.get("enum")
        && !options.contains(v)
    {
        return false;
    }
    if s.get("const").is_some_and(|c| c != v) {
        return false;
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(alts)) = s.get(key)
            && !alts.iter().any(|a| conforms(v, a))
        {
            return false;
        }
    }
    if let Some(Value::Array(all)) = s.get("allOf")
        && !all.iter().all(|a| conforms(v, a))
    {
        return false;
    }
    if let Value::Object(obj) = v {
        let props = s.get("properties").and_then(Value::as_object);
        if let Some(Value::Array(req)) = s.get("required")
            && req
                .iter()
                .filter_map(Value::as_str)
                .any(|k| !obj.contains_key(k))
        {
            return false;
        }
        for (k, val) in obj {
            match props.and_then(|p| p.get(k)) {
                Some(sub) if !conforms(val, sub) => return false,
                Some(_) => {}
                None => match s.get("additionalProperties") {
                    Some(Value::Bool(false)) => return false,
                    Some(extra @ Value::Object(_)) if !conforms(val, extra) => return false,
                    _ => {}
                },
            }
        }
    }
    if let (Value::Array(items), Some(item_schema)) = (v, s.get("items"))
        && !items.iter().all(|i| conforms(i, item_schema))
    {
        return false;
    }
    true
}

/// Keywords [`conforms`] checks, and those that constrain nothing (annotations).
const CHECKED: &[&str] = &[
    "type",
    "enum",
    "const",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "anyOf",
    "oneOf",
    "allOf",
    "title",
    "description",
    "default",
    "examples",
    "$schema",
    "$id",
    "$comment",
    "deprecated",
    "readOnly",
    "writeOnly",
];

/// True when every keyword of `schema`, at every depth, is one [`conforms`] checks or an
/// annotation: then arguments that conform satisfy the schema. `pattern`, `minimum`,
/// `format`, `$ref` and the like make it false.
pub fn fully_checked(schema: &Value) -> bool {
    let Some(s) = schema.as_object() else {
        return schema.is_boolean();
    };
    s.iter().all(|(k, v)| {
        if !CHECKED.contains(&k.as_str()) {
            return false;
        }
        match k.as_str() {
            "properties" => v.as_object().is_some_and(|p| p.values().all(fully_checked)),
            "items" | "additionalProperties" => fully_checked(v),
            "anyOf" | "oneOf" | "allOf" => v
                .as_array()
                .is_some_and(|alts| alts.iter().all(fully_checked)),
            _ => true,
        }
    })
}

fn has_type(v: &Value, name: &str) -> bool {
    match name {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        "number" => v.is_number(),
        "integer" => v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|f| f.fract() == 0.0),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_schemas_accept_and_reject() {
        let s = json!({"type": "object",
            "properties": {"city": {"type": "string"},
                           "unit": {"type": "string", "enum": ["c", "f"]},
                           "days": {"type": "integer"}},
            "required": ["city"], "additionalProperties": false});
        assert!(conforms(&json!({"city": "Paris"}), &s));
        assert!(conforms(
            &json!({"city": "Paris", "unit": "c", "days": 3}),
            &s
        ));
        assert!(!conforms(&json!({}), &s), "required");
        assert!(!conforms(&json!({"city": 3}), &s), "type");
        assert!(!conforms(&json!({"city": "P", "unit": "k"}), &s), "enum");
        assert!(!conforms(&json!({"city": "P", "x": 1}), &s), "additional");
        assert!(!conforms(&json!({"city": "P", "days": 1.5}), &s), "integer");
        assert!(!conforms(&json!("Paris"), &s));
        assert!(conforms(&json!({"anything": 1}), &json!({})));
        assert!(conforms(
            &json!([1, 2]),
            &json!({"type": "array", "items": {"type": "integer"}})
        ));
    }

    #[test]
    fn a_schema_is_fully_checked_only_with_keywords_conforms_checks() {
        let plain = json!({"type": "object", "description": "d",
            "properties": {"city": {"type": "string", "title": "City"},
                           "tags": {"type": "array", "items": {"enum": ["a", "b"]}}},
            "required": ["city"], "additionalProperties": false});
        assert!(fully_checked(&plain));
        assert!(fully_checked(&json!(true)));
        for unchecked in [
            json!({"type": "string", "pattern": "^a"}),
            json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}}),
            json!({"anyOf": [{"type": "string", "format": "date"}]}),
            json!({"$ref": "#/$defs/x"}),
            json!({"type": "array", "items": {"type": "string", "maxLength": 3}}),
        ] {
            assert!(!fully_checked(&unchecked), "{unchecked}");
        }
    }
}
