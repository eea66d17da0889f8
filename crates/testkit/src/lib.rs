//! Test helpers shared by the pagoda crates (a dev-dependency only): a GGUF writer for crafting
//! valid and deliberately corrupted files.

pub mod gguf_writer;
pub mod tiny_model;
