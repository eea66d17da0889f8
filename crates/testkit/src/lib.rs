//! Test helpers shared by the pagoda crates (a dev-dependency only): a GGUF writer for crafting
//! valid and deliberately corrupted files, tiny random models, and those models written as
//! Hugging Face checkpoint directories, and the names-and-types check of a `/metrics` text.

pub mod gguf_writer;
pub mod hf_checkpoint;
pub mod lora_adapter;
pub mod metrics_names;
pub mod tiny_model;
