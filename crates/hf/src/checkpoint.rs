//! A checkpoint directory: its config and its tensors, from `model.safetensors` or from the
//! shards `model.safetensors.index.json` names.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::safetensors::{SafetensorsFile, TensorView};
use crate::{HfConfig, HfError};

const INDEX: &str = "model.safetensors.index.json";
const SINGLE: &str = "model.safetensors";

/// Whether `path` looks like a Hugging Face checkpoint directory (a directory with a
/// `config.json`), which is how `--model` tells one from a GGUF file.
pub fn is_checkpoint_dir(path: &Path) -> bool {
    path.is_dir() && path.join("config.json").is_file()
}

/// Whether `path` is a checkpoint directory of an encoder (served for embeddings).
pub fn is_encoder_dir(path: &Path) -> bool {
    is_checkpoint_dir(path)
        && HfConfig::read(&path.join("config.json"))
            .and_then(|c| c.arch())
            .is_ok_and(|a| a.is_encoder())
}

/// Whether `path` is a checkpoint directory of a cross-encoder (scores text pairs).
pub fn is_cross_encoder_dir(path: &Path) -> bool {
    is_checkpoint_dir(path)
        && HfConfig::read(&path.join("config.json"))
            .and_then(|c| c.arch())
            .is_ok_and(|a| a == crate::config::Arch::BertCrossEncoder)
}

#[derive(Deserialize)]
struct Index {
    weight_map: HashMap<String, String>,
}

/// The open files of a checkpoint and where each tensor is.
pub struct Checkpoint {
    dir: PathBuf,
    pub config: HfConfig,
    files: Vec<SafetensorsFile>,
    /// Tensor name -> index into `files`.
    location: HashMap<String, usize>,
    /// Tensors of dtypes pagoda does not read, with their dtype.
    unsupported: HashMap<String, String>,
}

impl Checkpoint {
    pub fn open(dir: &Path) -> Result<Self, HfError> {
        let not = |reason: String| HfError::NotACheckpoint {
            path: dir.to_owned(),
            reason,
        };
        if !dir.join("config.json").is_file() {
            return Err(not("no config.json".to_owned()));
        }
        let config = HfConfig::read(&dir.join("config.json"))?;
        let shard_names: Vec<String> = if dir.join(INDEX).is_file() {
            let path = dir.join(INDEX);
            let text = crate::read_text::read_text(&path)?;
            let index: Index = serde_json::from_str(&text).map_err(|e| HfError::BadFile {
                path: path.clone(),
                message: e.to_string(),
            })?;
            let mut names: Vec<String> = index.weight_map.into_values().collect();
            names.sort();
            names.dedup();
            names
        } else if dir.join(SINGLE).is_file() {
            vec![SINGLE.to_owned()]
        } else {
            return Err(not(format!("neither {SINGLE} nor {INDEX}")));
        };
        let mut files = Vec::with_capacity(shard_names.len());
        let mut location = HashMap::new();
        let mut unsupported = HashMap::new();
        for name in &shard_names {
            // Shard names come from the index: keep them inside the directory.
            if name.contains('/') || name.contains('\\') || name.starts_with('.') {
                return Err(not(format!(
                    "{INDEX} names shard {name:?} outside the directory"
                )));
            }
            let file = SafetensorsFile::open(&dir.join(name))?;
            for t in file.names() {
                location.insert(t.to_owned(), files.len());
            }
            for (t, dtype) in file.unsupported() {
                unsupported.insert(t.to_owned(), dtype.to_owned());
            }
            files.push(file);
        }
        Ok(Self {
            dir: dir.to_owned(),
            config,
            files,
            location,
            unsupported,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn tensor(&self, name: &str) -> Option<TensorView<'_>> {
        self.location
            .get(name)
            .and_then(|&i| self.files[i].tensor(name))
    }

    /// Every tensor name, those of unsupported dtypes included.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.location
            .keys()
            .chain(self.unsupported.keys())
            .map(String::as_str)
    }

    /// The dtype of tensor `name` when pagoda cannot read it.
    pub fn unsupported_dtype(&self, name: &str) -> Option<&str> {
        self.unsupported.get(name).map(String::as_str)
    }

    /// `file` in the checkpoint directory as text, `None` when absent.
    pub fn read_optional(&self, file: &str) -> Result<Option<String>, HfError> {
        let path = self.dir.join(file);
        if !path.is_file() {
            return Ok(None);
        }
        crate::read_text::read_text(&path).map(Some)
    }
}
