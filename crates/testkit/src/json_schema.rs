//! JSON Schema validation by Python's `jsonschema` (the reference implementation, installed by
//! scripts/test.sh), for the tests of constrained output: a check of what llguidance
//! constrained that shares no code with it, and no second schema engine in the Rust build.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

/// Each `(schema, instance)`'s validation errors (empty: valid), checked under the draft the
/// schema names (2020-12 when it names none, formats not asserted), in one Python process.
#[allow(clippy::unwrap_used)]
pub fn schema_errors(cases: &[(&Value, &Value)]) -> Vec<Vec<String>> {
    const SCRIPT: &str = "import json, sys
from jsonschema import validators
out = []
for schema, instance in json.load(sys.stdin):
    cls = validators.validator_for(schema)
    cls.check_schema(schema)
    out.append([e.message for e in cls(schema).iter_errors(instance)])
json.dump(out, sys.stdout)";
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let mut child = Command::new(&python)
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {python}: {e}"));
    let input = serde_json::to_vec(&cases).unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "Python's jsonschema (scripts/test.sh installs it): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Panics naming the errors unless `instance` is valid under `schema`.
pub fn assert_valid(schema: &Value, instance: &Value) {
    let errors = schema_errors(&[(schema, instance)]).concat();
    assert!(errors.is_empty(), "{instance} against {schema}: {errors:?}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn valid_and_invalid_instances_are_told_apart() {
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}},
                            "required": ["n"], "additionalProperties": false});
        let (good, bad) = (json!({"n": 3}), json!({"n": "3", "x": 1}));
        let errors = schema_errors(&[(&schema, &good), (&schema, &bad)]);
        assert!(errors[0].is_empty(), "{errors:?}");
        assert_eq!(errors[1].len(), 2, "{errors:?}");
    }
}
