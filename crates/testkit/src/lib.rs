//! Test helpers shared by the pagoda crates (a dev-dependency only): a GGUF writer for crafting
//! valid and deliberately corrupted files, tiny random models, and those models written as
//! Hugging Face checkpoint directories, a tiny random cross-encoder checkpoint, the
//! names-and-types check of a `/metrics` text, and the runners of the Python references (a
//! numpy forward pass, JSON Schema validation).

pub mod gguf_writer;
pub mod hf_checkpoint;
pub mod json_schema;
pub mod lora_adapter;
pub mod metrics_names;
pub mod python_reference;
pub mod tiny_cross_encoder;
pub mod tiny_model;

/// A loopback port free at the time of asking, for a test server or publisher to bind (the
/// kernel picks it; another process could take it before the test binds, which loopback tests
/// accept).
#[allow(clippy::unwrap_used)]
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
