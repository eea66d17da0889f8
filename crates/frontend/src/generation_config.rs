//! A model's recommended sampling settings (`SamplingDefaults`) and where they came from: a Hugging
//! Face `generation_config.json`, the GGUF `general.sampling.*` keys llama.cpp writes, the
//! catalog, or none (`sampling_choice` picks among them). Requests override them field by
//! field; the server's own defaults fill the rest.

use std::path::Path;

use pagoda_gguf::GgufFile;
use serde::Serialize;
use serde_json::Value;

/// Where a model's sampling defaults came from; shown (`/v1/models`, logs) as `none`, `gguf`,
/// `file:PATH` or `catalog:SOURCE`.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum DefaultsSource {
    /// None applied: the server's defaults.
    #[default]
    None,
    /// A `generation_config.json` (the model directory's or `--generation-config FILE`).
    File(String),
    /// The model file's `general.sampling.*` metadata.
    Gguf,
    /// The catalog entry of this model file (`scripts/model-catalog.txt`), with the entry's source.
    Catalog(String),
}

impl std::fmt::Display for DefaultsSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::None => f.write_str("none"),
            Self::File(path) => write!(f, "file:{path}"),
            Self::Gguf => f.write_str("gguf"),
            Self::Catalog(source) => write!(f, "catalog:{source}"),
        }
    }
}

impl Serialize for DefaultsSource {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Recommended values of the sampling fields; `None` leaves a field to the server's default.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SamplingDefaults {
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "short_f32")]
    pub temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "short_f32")]
    pub top_p: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_k: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "short_f32")]
    pub min_p: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "short_f32")]
    pub repetition_penalty: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "short_f32")]
    pub presence_penalty: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "short_f32")]
    pub frequency_penalty: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    pub source: DefaultsSource,
}

/// An f32 as the f64 of its shortest decimal form: 0.95, not 0.949999988079071.
fn short_f32<S: serde::Serializer>(v: &Option<f32>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(x) => s.serialize_f64(x.to_string().parse().unwrap_or(f64::from(*x))),
        None => s.serialize_none(),
    }
}

/// Why sampling defaults could not be read.
#[derive(Debug, thiserror::Error)]
pub enum GenerationConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: not a JSON object: {message}")]
    Json { path: String, message: String },
    #[error("{path}: `{key}` must be {expected}")]
    BadValue {
        path: String,
        key: &'static str,
        expected: &'static str,
    },
    #[error("GGUF metadata: {0}")]
    Gguf(#[from] pagoda_gguf::GgufError),
}

/// `generation_config.json`'s keys taken, as vLLM's `get_diff_sampling_param` takes them:
/// `do_sample` is not read (vLLM ignores it too; a file that sets it false usually sets no
/// sampling values either), `max_new_tokens` becomes `max_tokens`.
const JSON_FLOATS: [&str; 4] = ["temperature", "top_p", "min_p", "repetition_penalty"];

/// llama.cpp's `general.sampling.*` keys (gguf-py `Keys.General.SAMPLING_*`) that pagoda's
/// sampler has a field for; llama.cpp defines no presence/frequency keys.
const GGUF_KEYS: [(&str, &str); 5] = [
    ("temperature", "general.sampling.temp"),
    ("top_p", "general.sampling.top_p"),
    ("top_k", "general.sampling.top_k"),
    ("min_p", "general.sampling.min_p"),
    ("repetition_penalty", "general.sampling.penalty_repeat"),
];

impl SamplingDefaults {
    /// Whether no field is set.
    pub fn is_empty(&self) -> bool {
        self.temperature.is_none()
            && self.top_p.is_none()
            && self.top_k.is_none()
            && self.min_p.is_none()
            && self.repetition_penalty.is_none()
            && self.presence_penalty.is_none()
            && self.frequency_penalty.is_none()
            && self.max_tokens.is_none()
    }

    /// The settings of a `generation_config.json` text; `path` names it in errors and the source.
    pub fn from_json(text: &str, path: &str) -> Result<Self, GenerationConfigError> {
        let value: Value = serde_json::from_str(text).map_err(|e| GenerationConfigError::Json {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        let Value::Object(map) = value else {
            return Err(GenerationConfigError::Json {
                path: path.to_owned(),
                message: "not an object".to_owned(),
            });
        };
        let bad = |key: &'static str, expected: &'static str| GenerationConfigError::BadValue {
            path: path.to_owned(),
            key,
            expected,
        };
        let mut d = Self {
            source: DefaultsSource::File(path.to_owned()),
            ..Self::default()
        };
        for key in JSON_FLOATS {
            // `null` is how transformers writes an unset field.
            let v = match map.get(key) {
                None | Some(Value::Null) => None,
                Some(v) => Some(v.as_f64().ok_or_else(|| bad(key, "a number"))? as f32),
            };
            d.set_float(key, v);
        }
        d.top_k = match map.get("top_k") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_i64()
                    .and_then(|k| i32::try_from(k).ok())
                    .ok_or_else(|| bad("top_k", "an integer"))?,
            ),
        };
        d.max_tokens = match map.get("max_new_tokens") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_u64()
                    .and_then(|k| u32::try_from(k).ok())
                    .ok_or_else(|| bad("max_new_tokens", "a positive integer"))?,
            ),
        };
        Ok(d)
    }

    /// Reads the `generation_config.json` at `path`.
    pub fn from_json_file(path: &Path) -> Result<Self, GenerationConfigError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| GenerationConfigError::Read {
            path: shown.clone(),
            source,
        })?;
        Self::from_json(&text, &shown)
    }

    /// The `general.sampling.*` keys of a GGUF file.
    pub fn from_gguf(file: &GgufFile) -> Result<Self, GenerationConfigError> {
        let mut d = Self {
            source: DefaultsSource::Gguf,
            ..Self::default()
        };
        for (field, key) in GGUF_KEYS {
            if field == "top_k" {
                d.top_k = file.get_i32(key)?;
            } else {
                d.set_float(field, file.get_f32(key)?);
            }
        }
        Ok(d)
    }

    /// The catalog's `key=value ...` spelling (generation_config.json's key names).
    pub fn from_spec(spec: &str, source: DefaultsSource) -> Result<Self, String> {
        let mut d = Self {
            source,
            ..Self::default()
        };
        for pair in spec.split_whitespace() {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("`{pair}` is not key=value"))?;
            let float = || {
                value
                    .parse::<f32>()
                    .map_err(|_| format!("`{key}` wants a number, not `{value}`"))
            };
            match key {
                "temperature" | "top_p" | "min_p" | "repetition_penalty" | "presence_penalty"
                | "frequency_penalty" => {
                    let v = float()?;
                    d.set_float(key, Some(v));
                }
                "top_k" => {
                    d.top_k = Some(
                        value
                            .parse()
                            .map_err(|_| format!("`top_k` wants an integer, not `{value}`"))?,
                    );
                }
                "max_tokens" => {
                    d.max_tokens =
                        Some(value.parse().map_err(|_| {
                            format!("`max_tokens` wants an integer, not `{value}`")
                        })?);
                }
                _ => return Err(format!("unknown sampling key `{key}`")),
            }
        }
        Ok(d)
    }

    fn set_float(&mut self, key: &str, v: Option<f32>) {
        let slot = match key {
            "temperature" => &mut self.temperature,
            "top_p" => &mut self.top_p,
            "min_p" => &mut self.min_p,
            "repetition_penalty" => &mut self.repetition_penalty,
            "presence_penalty" => &mut self.presence_penalty,
            "frequency_penalty" => &mut self.frequency_penalty,
            _ => return,
        };
        *slot = v;
    }
}

#[cfg(test)]
mod tests;
