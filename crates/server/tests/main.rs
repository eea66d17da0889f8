//! The crate's integration tests, one binary: each file beside this one is a module (its
//! tests are named `file::test`), because linking a binary per file was most of the test
//! build on 2 cores. scripts/test.sh fails if a file here is not listed below.

mod admission;
mod api;
mod client_compat;
mod common;
mod embeddinggemma;
mod embeddings;
mod front_apis;
mod hf_checkpoint;
mod hostile;
mod lifecycle;
mod lora;
mod metrics_names;
mod models;
mod openai_conformance;
mod operations;
mod parallel;
mod rerank;
mod speculative;
mod structured;
mod tenants;
