//! The crate's integration tests, one binary: each file beside this one is a module (its
//! tests are named `file::test`), because linking a binary per file was most of the test
//! build on 2 cores. scripts/test.sh fails if a file here is not listed below.

mod common;
mod golden;
mod template_limits;
mod text_stream;
mod tokenizer;
mod tool_templates;
mod utf8_cuts;
