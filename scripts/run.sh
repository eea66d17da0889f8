#!/usr/bin/env bash
# Runs pagoda from a checkout: fetches the default model if it is missing, builds the release
# binary, then passes every argument to it, e.g. `scripts/run.sh generate --prompt "Hello"`.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/fetch-models.sh smollm2
cargo build --release --locked --quiet -p pagoda
exec target/release/pagoda "$@"
