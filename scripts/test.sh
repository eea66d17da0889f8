#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it (.ci/run calls this and nothing else):
# fetch the real models if missing, check formatting and lints, then run every test.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/fetch-models.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
