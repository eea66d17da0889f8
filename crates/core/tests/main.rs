//! The crate's integration tests, one binary: each file beside this one is a module (its
//! tests are named `file::test`), because linking a binary per file was most of the test
//! build on 2 cores. scripts/test.sh fails if a file here is not listed below.

mod block_hash_reference;
mod common;
mod engine_thread;
mod fair_scheduling;
mod invariants;
mod scheduler;
mod slo;
