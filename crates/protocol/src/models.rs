//! `/v1/models`: the model list and one model card.

use serde::{Deserialize, Serialize};

/// Body of `GET /v1/models` (`object: "list"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelList {
    /// Always `"list"`.
    pub object: String,
    /// The served models.
    pub data: Vec<ModelCard>,
}

impl ModelList {
    /// A list with `object: "list"`.
    pub fn new(data: Vec<ModelCard>) -> Self {
        Self {
            object: "list".to_owned(),
            data,
        }
    }
}

/// One served model (`object: "model"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCard {
    /// Model id used in requests.
    pub id: String,
    /// Always `"model"`.
    pub object: String,
    /// Unix seconds.
    pub created: u64,
    /// Owner, e.g. `"pagoda"`.
    pub owned_by: String,
    /// vLLM: the model the id refers to (path or repo).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    /// vLLM: parent model of an adapter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// vLLM: context length the server accepts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_model_len: Option<u32>,
    /// What the model serves: `"generate"` (completions and chat) or `"embed"` (embeddings),
    /// as vLLM's `--task` / `supported_tasks` name them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// pagoda (and Ollama's `ps`): `loaded`, `loading` or `unloaded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Bytes it takes loaded (weights + KV + scratch; estimated while unloaded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    /// Other names requests may use for it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aliases: Vec<String>,
    /// Seconds it stays loaded once idle (-1: until memory is short).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_alive: Option<f64>,
    /// pagoda: the model's recommended sampling that requests without their own values get
    /// (`--generation-config`), each field, and `source` saying where they were published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling_defaults: Option<serde_json::Value>,
    /// pagoda: how a loaded model is split over ranks (tensor or pipeline parallelism; absent
    /// for one rank).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel: Option<ParallelLayout>,
}

/// The ranks a model is split over (`/v1/models` `parallel`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParallelLayout {
    /// Tensor-parallel ranks (`--tensor-parallel-size`).
    pub tensor_parallel_size: usize,
    /// Pipeline stages (`--pipeline-parallel-size`).
    pub pipeline_parallel_size: usize,
    /// What the ranks are (`--distributed-executor-backend`): `threads` of the server's
    /// process, or the processes of an `mpi` job.
    #[serde(default)]
    pub backend: String,
    /// In rank order.
    pub ranks: Vec<RankCard>,
}

/// One rank's part: ranges are `[start, end)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankCard {
    /// Its rank (rank 0 runs the scheduler; a pipeline's stage number).
    pub rank: usize,
    /// CPUs its thread is pinned to (empty: not pinned).
    pub cpus: Vec<usize>,
    /// Layers it runs.
    pub layers: [usize; 2],
    /// Query heads of those layers it holds.
    pub heads: [usize; 2],
    /// KV heads of those layers it holds (and caches).
    pub kv_heads: [usize; 2],
    /// Rows of the LM head it holds (absent on a pipeline stage before the last).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vocab: Option<[usize; 2]>,
    /// Bytes of weights it holds.
    pub weight_bytes: u64,
}

impl ModelCard {
    /// A card with `object: "model"` and no vLLM extras.
    pub fn new(id: impl Into<String>, created: u64, owned_by: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            object: "model".to_owned(),
            created,
            owned_by: owned_by.into(),
            root: None,
            parent: None,
            max_model_len: None,
            task: None,
            state: None,
            size_bytes: None,
            aliases: Vec::new(),
            keep_alive: None,
            sampling_defaults: None,
            parallel: None,
        }
    }
}
