//! The models the server serves: the registry that loads them on demand and unloads them when
//! idle or short of memory (`registry`, `eviction`, `keep_alive`, `memory`), a request's hold on
//! one (`lease`), and what a loaded model is (`served`: an engine from `loader`, with its LoRA
//! adapters, or the embedding batcher an encoder runs on).

mod embed_steps;
pub mod embedder;
pub mod eviction;
pub mod keep_alive;
pub mod lease;
pub mod loader;
pub mod loras;
pub mod memory;
pub mod model_error;
pub mod models_config;
pub mod models_dir;
pub mod pair_scores;
pub mod registry;
pub mod served;
pub mod slot;
