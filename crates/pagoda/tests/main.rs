//! The crate's integration tests, one binary: each file beside this one is a module (its
//! tests are named `file::test`), because linking a binary per file was most of the test
//! build on 2 cores. scripts/test.sh fails if a file here is not listed below.

mod chat;
mod cli;
mod deploy_manifests;
mod embed_cli;
mod fuzz_corpus;
mod kv_disk_restart;
mod models_cli;
mod mpi;
mod perplexity;
mod plan_cli;
mod serve_logs;
