#!/usr/bin/env bash
# Runs pagoda from a checkout: fetches the default model if it is missing, builds the release
# binary, then passes every argument to it, e.g. `scripts/run.sh generate --prompt "Hello"`.
# With no arguments it serves the default model: `pagoda serve` on 127.0.0.1:8000.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/fetch-models.sh qwen2.5-coder
cargo build --release --locked --quiet -p pagoda
if [ "$#" -eq 0 ]; then
    set -- serve
fi
exec target/release/pagoda "$@"
