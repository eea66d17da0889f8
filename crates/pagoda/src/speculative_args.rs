//! Speculative decoding on the command line: vLLM's `--speculative-config` JSON, or the plain
//! flags for the common cases, resolved into one `SpecConfig`. Every bad value is a start-up
//! error naming the field.

use anyhow::{Context, bail};
use clap::Args;
use pagoda_core::speculative::config::{DEFAULT_AUTO_MAX, SUFFIX_NGRAM_DEFAULT};
use pagoda_core::{NumSpecTokens, SpecConfig, SpecMethod};
use serde_json::Value;

#[derive(Args, Clone, Debug, Default)]
pub struct SpeculativeArgs {
    /// Speculative decoding as vLLM's JSON: {"method": "ngram"|"suffix"|"suffix+ngram"|"draft_model",
    /// "num_speculative_tokens": K|"auto", "prompt_lookup_max", "prompt_lookup_min", "model"}.
    #[arg(long, env = "PAGODA_SPECULATIVE_CONFIG")]
    pub speculative_config: Option<String>,
    /// Speculative decoding method: ngram (prompt lookup), suffix (index over recent outputs),
    /// suffix+ngram (both; the longer match wins), or draft_model (with --draft-model).
    #[arg(long, env = "PAGODA_SPECULATIVE_METHOD", value_parser = ["ngram", "suffix", "suffix+ngram", "draft_model"])]
    pub speculative_method: Option<String>,
    /// A smaller GGUF model of the same vocabulary proposing tokens (implies draft_model).
    #[arg(long, env = "PAGODA_DRAFT_MODEL")]
    pub draft_model: Option<String>,
    /// Tokens proposed per step: a number, or auto (chosen each step from acceptance and load)
    /// [default: auto].
    #[arg(long, env = "PAGODA_NUM_SPECULATIVE_TOKENS")]
    pub num_speculative_tokens: Option<String>,
    /// Longest n-gram prompt lookup matches [default: 5, as vLLM; 23 for suffix+ngram].
    #[arg(long, env = "PAGODA_PROMPT_LOOKUP_MAX")]
    pub prompt_lookup_max: Option<usize>,
    /// Shortest n-gram prompt lookup matches [default: 5, as vLLM; 2 for suffix+ngram].
    #[arg(long, env = "PAGODA_PROMPT_LOOKUP_MIN")]
    pub prompt_lookup_min: Option<usize>,
}

/// The fields of the config before defaults.
#[derive(Default)]
struct Raw {
    method: Option<String>,
    k: Option<Value>,
    max: Option<usize>,
    min: Option<usize>,
    model: Option<String>,
}

impl SpeculativeArgs {
    /// The speculation this engine runs, if any.
    pub fn resolve(&self) -> anyhow::Result<Option<SpecConfig>> {
        let plain = self.speculative_method.is_some()
            || self.draft_model.is_some()
            || self.num_speculative_tokens.is_some()
            || self.prompt_lookup_max.is_some()
            || self.prompt_lookup_min.is_some();
        let raw = match &self.speculative_config {
            Some(json) => {
                if plain {
                    bail!(
                        "give speculative decoding either as --speculative-config or as the plain \
                         flags (--speculative-method, --draft-model, --num-speculative-tokens, \
                         --prompt-lookup-min/max), not both"
                    );
                }
                from_json(json)?
            }
            None if !plain => return Ok(None),
            None => Raw {
                method: self.speculative_method.clone(),
                k: self.num_speculative_tokens.as_ref().map(|k| {
                    k.parse::<u64>()
                        .map_or_else(|_| Value::String(k.clone()), Value::from)
                }),
                max: self.prompt_lookup_max,
                min: self.prompt_lookup_min,
                model: self.draft_model.clone(),
            },
        };
        resolve(raw).map(Some)
    }
}

fn from_json(json: &str) -> anyhow::Result<Raw> {
    let v: Value = serde_json::from_str(json).context("--speculative-config is not valid JSON")?;
    let Value::Object(map) = v else {
        bail!("--speculative-config must be a JSON object");
    };
    let mut raw = Raw::default();
    let usize_of = |field: &str, v: &Value| -> anyhow::Result<usize> {
        v.as_u64().map(|n| n as usize).with_context(|| {
            format!("speculative_config.{field} must be a non-negative integer, got {v}")
        })
    };
    for (key, v) in &map {
        match key.as_str() {
            "method" => {
                raw.method = Some(
                    v.as_str()
                        .with_context(|| {
                            format!("speculative_config.method must be a string, got {v}")
                        })?
                        .to_string(),
                )
            }
            "num_speculative_tokens" => raw.k = Some(v.clone()),
            "prompt_lookup_max" => raw.max = Some(usize_of(key, v)?),
            "prompt_lookup_min" => raw.min = Some(usize_of(key, v)?),
            "model" => {
                raw.model = Some(
                    v.as_str()
                        .with_context(|| {
                            format!("speculative_config.model must be a path, got {v}")
                        })?
                        .to_string(),
                )
            }
            other => bail!(
                "speculative_config.{other} is not supported (fields: method, \
                 num_speculative_tokens, prompt_lookup_max, prompt_lookup_min, model)"
            ),
        }
    }
    Ok(raw)
}

fn resolve(raw: Raw) -> anyhow::Result<SpecConfig> {
    let method = match (raw.method.as_deref(), &raw.model) {
        (Some("ngram"), None) => {
            // vLLM's defaults: both 5 when neither is given, else the one given for both.
            let (min_n, max_n) = match (raw.min, raw.max) {
                (None, None) => (5, 5),
                (Some(m), None) | (None, Some(m)) => (m, m),
                (Some(a), Some(b)) => (a, b),
            };
            SpecMethod::Ngram { min_n, max_n }
        }
        (Some("suffix"), None) => SpecMethod::Suffix,
        (Some("suffix+ngram"), None) => {
            let (lo, hi) = SUFFIX_NGRAM_DEFAULT;
            let (min_n, max_n) = (raw.min.unwrap_or(lo), raw.max.unwrap_or(hi));
            SpecMethod::SuffixNgram { min_n, max_n }
        }
        (Some("draft_model") | None, Some(path)) => SpecMethod::DraftModel { path: path.clone() },
        (Some("draft_model"), None) => {
            bail!("speculative_config.model (--draft-model) is required for method draft_model")
        }
        (Some(m @ ("ngram" | "suffix" | "suffix+ngram")), Some(_)) => {
            bail!("speculative_config.model is only for method draft_model, not {m}")
        }
        (Some(other), _) => bail!(
            "speculative_config.method {other:?} is not supported (ngram, suffix, suffix+ngram, \
             draft_model)"
        ),
        (None, None) => bail!("speculative_config.method is required"),
    };
    let lookup = matches!(
        method,
        SpecMethod::Ngram { .. } | SpecMethod::SuffixNgram { .. }
    );
    if !lookup && (raw.min.is_some() || raw.max.is_some()) {
        bail!(
            "speculative_config.prompt_lookup_min/max are only for methods ngram and suffix+ngram"
        );
    }
    let num_speculative_tokens = match raw.k {
        None => NumSpecTokens::Auto {
            max: DEFAULT_AUTO_MAX,
        },
        Some(Value::String(s)) if s == "auto" => NumSpecTokens::Auto {
            max: DEFAULT_AUTO_MAX,
        },
        Some(Value::Number(n)) if n.as_u64().is_some() => {
            NumSpecTokens::Fixed(n.as_u64().unwrap_or(0) as usize)
        }
        Some(v) => bail!(
            "speculative_config.num_speculative_tokens must be a positive integer or \"auto\", got {v}"
        ),
    };
    let config = SpecConfig {
        method,
        num_speculative_tokens,
    };
    config
        .validate()
        .map_err(|e| anyhow::anyhow!("speculative_config: {e}"))?;
    Ok(config)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn json(s: &str) -> anyhow::Result<Option<SpecConfig>> {
        SpeculativeArgs {
            speculative_config: Some(s.into()),
            ..Default::default()
        }
        .resolve()
    }

    #[test]
    fn vllm_json_resolves_with_vllm_defaults() {
        let c = json(r#"{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}"#)
            .unwrap()
            .unwrap();
        assert_eq!(c.method, SpecMethod::Ngram { min_n: 3, max_n: 3 });
        assert_eq!(c.num_speculative_tokens, NumSpecTokens::Fixed(4));
        let c = json(r#"{"method": "suffix"}"#).unwrap().unwrap();
        assert_eq!(c.num_speculative_tokens, NumSpecTokens::Auto { max: 8 });
        let c = json(r#"{"method": "suffix+ngram", "prompt_lookup_min": 3}"#)
            .unwrap()
            .unwrap();
        assert_eq!(
            c.method,
            SpecMethod::SuffixNgram {
                min_n: 3,
                max_n: 23
            }
        );
        assert_eq!(c.method.name(), "suffix+ngram");
        let c = json(r#"{"model": "d.gguf", "num_speculative_tokens": "auto"}"#)
            .unwrap()
            .unwrap();
        assert_eq!(
            c.method,
            SpecMethod::DraftModel {
                path: "d.gguf".into()
            }
        );
    }

    #[test]
    fn bad_values_name_the_field() {
        for (input, field) in [
            (r#"{"method": "eagle"}"#, "method"),
            (
                r#"{"method": "ngram", "num_speculative_tokens": 0}"#,
                "num_speculative_tokens",
            ),
            (
                r#"{"method": "ngram", "num_speculative_tokens": "lots"}"#,
                "num_speculative_tokens",
            ),
            (
                r#"{"method": "ngram", "prompt_lookup_min": 4, "prompt_lookup_max": 2}"#,
                "prompt_lookup_max",
            ),
            (r#"{"method": "draft_model"}"#, "model"),
            (
                r#"{"method": "suffix", "prompt_lookup_max": 2}"#,
                "prompt_lookup",
            ),
            (
                r#"{"method": "ngram", "speculative_token_tree": 1}"#,
                "speculative_token_tree",
            ),
            (r#"[1]"#, "JSON object"),
        ] {
            let e = format!("{:#}", json(input).unwrap_err());
            assert!(e.contains(field), "{input}: {e}");
        }
        let both = SpeculativeArgs {
            speculative_config: Some(r#"{"method": "suffix"}"#.into()),
            draft_model: Some("x".into()),
            ..Default::default()
        };
        assert!(both.resolve().is_err());
    }

    #[test]
    fn plain_flags_resolve() {
        let a = SpeculativeArgs {
            draft_model: Some("d.gguf".into()),
            num_speculative_tokens: Some("3".into()),
            ..Default::default()
        };
        let c = a.resolve().unwrap().unwrap();
        assert_eq!(c.num_speculative_tokens, NumSpecTokens::Fixed(3));
        assert!(SpeculativeArgs::default().resolve().unwrap().is_none());
    }
}
