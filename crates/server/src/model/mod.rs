//! What the server has loaded: the model (opened, converted, warmed) and its engine, the LoRA
//! adapters, and the embedding batcher an encoder model runs on (with the scores of text pairs
//! computed from its outputs).

mod embed_steps;
pub mod embedder;
pub mod loader;
pub mod loras;
pub mod pair_scores;
