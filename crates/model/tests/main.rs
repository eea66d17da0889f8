//! The crate's integration tests, one binary: each file beside this one is a module (its
//! tests are named `file::test`), because linking a binary per file was most of the test
//! build on 2 cores. scripts/test.sh fails if a file here is not listed below.

mod batch_validation;
mod chunking;
mod common;
mod context_shift;
mod cross_encoder;
mod embeddinggemma;
mod embeddings;
mod engine;
mod forward_split;
mod golden;
mod head_rows;
mod kv_disk;
mod llamacpp_tiny;
mod loading;
mod lora;
mod mistral_window;
mod output_rows;
mod pack_cache;
mod pipeline_parallel;
mod runner;
mod sliding_window;
mod speculative;
mod speculative_real;
mod speculative_sampled;
mod structured;
mod tensor_parallel;
mod weight_types;
