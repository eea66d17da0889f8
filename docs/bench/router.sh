#!/usr/bin/env bash
# Router measurements (issue 21): two SmolLM2 replicas (--threads 1, KV events on) and a
# router per policy on loopback; router.py measures the router's overhead against the
# replica directly, then the shared-prefix workload under round_robin and cache_aware (fresh
# replicas for each, so neither starts with the other's cache).
#   docs/bench/router.sh [PAGODA_BIN]     (default: target/release/pagoda)
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-target/release/pagoda}
M=${PAGODA_MODEL_DIR:-$HOME/.cache/pagoda/models}/SmolLM2-135M-Instruct.Q4_1.gguf
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

wait_ready() { for _ in $(seq 600); do curl -sf "$1/ready" >/dev/null && return; sleep 0.2; done; exit 1; }

replicas() { # replicas: two fresh replicas on 8100/8101, events on 5650/5651, replay 5660/5661
  for i in 0 1; do
    "$BIN" serve --model "$M" --threads 1 --port 810$i --kv-cache-memory 768MiB \
      --max-model-len 4096 --kv-events-config "{\"enable_kv_cache_events\": true,
        \"publisher\": \"zmq\", \"endpoint\": \"tcp://127.0.0.1:565$i\",
        \"replay_endpoint\": \"tcp://127.0.0.1:566$i\"}" 2>/dev/null &
    PIDS+=($!)
  done
  wait_ready http://127.0.0.1:8100; wait_ready http://127.0.0.1:8101
}

router() { # router POLICY: on 8180
  "$BIN" router --model "$M" --policy "$1" --port 8180 --poll-interval 0.5 \
    --worker http://127.0.0.1:8100,events=tcp://127.0.0.1:5650,replay=tcp://127.0.0.1:5660 \
    --worker http://127.0.0.1:8101,events=tcp://127.0.0.1:5651,replay=tcp://127.0.0.1:5661 2>/dev/null &
  PIDS+=($!)
  wait_ready http://127.0.0.1:8180
}

stop_all() { cleanup; PIDS=(); sleep 1; }

replicas
# Overhead: the router over ONE replica (so both paths hit the same engine).
"$BIN" router --port 8180 --worker http://127.0.0.1:8100 2>/dev/null &
PIDS+=($!)
wait_ready http://127.0.0.1:8180
echo "== overhead (router over one replica vs the replica)"
python3 docs/bench/router.py overhead http://127.0.0.1:8100 http://127.0.0.1:8180
stop_all

for policy in round_robin cache_aware; do
  replicas
  router "$policy"
  echo "== shared prefixes, $policy"
  python3 docs/bench/router.py prefix http://127.0.0.1:8180 4
  curl -s http://127.0.0.1:8180/metrics | grep -E '^pagoda_router:(chosen_total|prefix_hit_blocks_total|balance_overrides_total)'
  stop_all
done
