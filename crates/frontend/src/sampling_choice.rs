//! `--generation-config auto|none|FILE` (vLLM's flag) and the order `auto` follows: the model's
//! own recommendation (a checkpoint directory's generation_config.json, the GGUF's
//! `general.sampling.*` keys), else the catalog's entry for the file, else none.

use std::path::{Path, PathBuf};

use pagoda_gguf::GgufFile;

use crate::catalog::Catalog;
use crate::generation_config::{GenerationConfigError, SamplingDefaults};

/// `--generation-config`, vLLM's flag: where a model's sampling defaults come from.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum GenerationConfigChoice {
    /// The model's own (`generation_config.json` of a directory, GGUF metadata), else the
    /// catalog's entry for the file.
    #[default]
    Auto,
    /// No model defaults: the server's (temperature 1, no top-p/top-k, no penalties).
    None,
    /// A `generation_config.json` file.
    File(PathBuf),
}

impl std::str::FromStr for GenerationConfigChoice {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "auto" => Self::Auto,
            // `vllm` is vLLM's spelling of "no model defaults".
            "none" | "vllm" => Self::None,
            path => Self::File(PathBuf::from(path)),
        })
    }
}

impl GenerationConfigChoice {
    /// The defaults this choice gives the model at `model_path` whose (opened or converted)
    /// file is `file`: under `auto`, a checkpoint directory's `generation_config.json`, else
    /// the GGUF keys, else the catalog entry of the file's name.
    pub fn defaults_for(
        &self,
        model_path: &Path,
        file: &GgufFile,
    ) -> Result<SamplingDefaults, GenerationConfigError> {
        match self {
            Self::None => Ok(SamplingDefaults::default()),
            Self::File(path) => SamplingDefaults::from_json_file(path),
            Self::Auto => {
                let json = model_path.join("generation_config.json");
                if model_path.is_dir() && json.is_file() {
                    let d = SamplingDefaults::from_json_file(&json)?;
                    if !d.is_empty() {
                        return Ok(d);
                    }
                }
                let d = SamplingDefaults::from_gguf(file)?;
                if !d.is_empty() {
                    return Ok(d);
                }
                Ok(model_path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(|n| Catalog::builtin().by_path(n))
                    .map(|e| e.sampling.clone())
                    .unwrap_or_default())
            }
        }
    }
}

#[cfg(test)]
mod tests;
