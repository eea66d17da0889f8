#!/bin/bash
# Decode tok/s with f16 against int8 KV (docs/benchmarks.md, "KV cache dtype"): the
# decode_profile bench (whole engine, steady decode after every prompt is prefilled), f16 and
# int8 interleaved A B A B at each point so a drift of the shared machine hits both alike.
# Usage (repository root): docs/bench/kv_dtype_speed.sh [ROUNDS] [MODEL_FILE]
set -e
ROUNDS=${1:-2}
MODEL=${2:-SmolLM2-135M-Instruct.Q4_1.gguf}
# The dev profile builds kernels, model and dependencies at opt-level 3 (Cargo.toml).
cargo build -p pagoda-model --bench decode_profile
BIN=$(ls -t "${CARGO_TARGET_DIR:-target}"/debug/deps/decode_profile-* | grep -v '\.d$' | head -1)
for point in "1 96" "16 96" "16 512"; do
  set -- $point
  for r in $(seq "$ROUNDS"); do
    for dtype in f16 int8; do
      PAGODA_KV_CACHE_DTYPE=$dtype PAGODA_PROMPT_LEN=$2 "$BIN" "$1" "$MODEL" | head -1
    done
  done
done
