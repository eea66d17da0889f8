#!/usr/bin/env bash
# KV memory (issue 20 part 2): sequences a 2 GiB pool holds with and without sliding-window
# freeing (Gemma 3 270M, 8,192-token contexts), then decode tok/s of 16 long-context streams
# with freeing on and off, interleaved (on, off, on, off). Results: docs/benchmarks.md, "KV memory".
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
# PROFILE=dev reuses the test build (kernels and model are opt-level 3 there too).
PROFILE=${PROFILE:-release}
nice -n 10 cargo bench --profile "$PROFILE" -p pagoda-benches --bench kv_capacity -- capacity 8192 2048
nice -n 10 cargo bench --profile "$PROFILE" -p pagoda-benches --bench kv_capacity -- decode "${STREAMS:-16}" "${CONTEXT:-2048}" "${GENERATE:-32}"
