//! Prometheus's `/metrics`, written through `pagoda-exposition`: the requests' histograms and
//! the engine's stats (`engine`), the disk tier, KV transfer and speculative decoding families,
//! each model's loads and memory (`models`), and `--metrics-compat vllm`'s second copy under
//! vLLM's names (`compat`).

pub mod compat;
pub mod endpoint;
pub mod engine;
pub mod kv_disk;
pub mod kv_transfer;
pub mod labels;
pub mod models;
pub mod pipeline_parallel;
pub mod speculative;
pub mod tensor_parallel;
