#!/usr/bin/env bash
# Two SmolLM2 replicas (--threads 1 each) behind `pagoda router --policy least_load` against
# one replica directly, same workload: 32 concurrent streams (issue 21's scale-out goal:
# output tok/s >= 1.85x). `pagoda bench --compare` runs it against both.
#   docs/bench/router-throughput.sh [PAGODA_BIN]     (default: target/release/pagoda)
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-target/release/pagoda}
M=${PAGODA_MODEL_DIR:-$HOME/.cache/pagoda/models}/SmolLM2-135M-Instruct.Q4_1.gguf
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true' EXIT
wait_ready() { for _ in $(seq 600); do curl -sf "$1/ready" >/dev/null && return; sleep 0.2; done; exit 1; }
for i in 0 1; do
  "$BIN" serve --model "$M" --threads 1 --port 820$i --kv-cache-memory 512MiB 2>/dev/null &
  PIDS+=($!)
done
wait_ready http://127.0.0.1:8200; wait_ready http://127.0.0.1:8201
"$BIN" router --policy least_load --port 8280 --poll-interval 0.5 \
  --worker http://127.0.0.1:8200 --worker http://127.0.0.1:8201 2>/dev/null &
PIDS+=($!)
wait_ready http://127.0.0.1:8280
"$BIN" bench --base-url http://127.0.0.1:8280 --compare http://127.0.0.1:8200 \
  --model SmolLM2-135M-Instruct.Q4_1 --workload random --input-len 64 --output-len 64 \
  --ignore-eos --concurrency 32 --num-requests 96 --warmup 8 --no-progress
curl -s http://127.0.0.1:8280/metrics | grep -E '^pagoda_router:(chosen_total|errors_total)'
