#!/usr/bin/env bash
# Prefill/decode disaggregation under a mixed workload (issue 21): 8 greedy streams decoding
# while ~1,500-token prompts arrive every 2 s. First one SmolLM2 replica (--threads 1) doing
# both; then a prefill and a decode replica (--threads 1 each) behind the router
# (--pd-threshold 256: the streams' short prompts are prefilled on the decode replica, the
# long ones on the prefill replica and shipped over loopback TCP). pd.py prints the streams'
# inter-token latency p50/p99 and the long prompts' TTFT; the KV transfer throughput is the
# decode replica's bytes received / seconds receiving. PD_LONG_FACTS (default 110, ~1,500
# tokens) sizes the long prompts (a loaded machine or a debug build may need shorter ones).
#   docs/bench/pd.sh [PAGODA_BIN] [SECONDS]     (default: target/release/pagoda, 60)
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-target/release/pagoda}
SECS=${2:-60}
M=${PAGODA_MODEL_DIR:-$HOME/.cache/pagoda/models}/SmolLM2-135M-Instruct.Q4_1.gguf
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
wait_ready() { for _ in $(seq 600); do curl -sf "$1/ready" >/dev/null && return; sleep 0.2; done; exit 1; }
serve() { # serve PORT ARGS...
  local port=$1; shift
  "$BIN" serve --model "$M" --threads 1 --port "$port" --kv-cache-memory 768MiB \
    --max-model-len 4096 "$@" 2>/dev/null &
  PIDS+=($!)
  wait_ready "http://127.0.0.1:$port"
}
stop_all() { cleanup; PIDS=(); sleep 1; }

echo "== one replica doing both"
serve 8200
python3 docs/bench/pd.py http://127.0.0.1:8200 "$SECS"
stop_all

echo "== prefill + decode replicas behind the router"
serve 8201 --kv-role prefill --kv-transfer-peers 127.0.0.1
serve 8202 --kv-role decode --kv-transfer-host 127.0.0.1 --kv-transfer-port 7202
"$BIN" router --model "$M" --port 8280 --poll-interval 0.5 --pd-threshold 256 --pd-prefill-timeout 600 \
  --prefill http://127.0.0.1:8201 --worker http://127.0.0.1:8202,kv=127.0.0.1:7202 2>/dev/null &
PIDS+=($!)
wait_ready http://127.0.0.1:8280
python3 docs/bench/pd.py http://127.0.0.1:8280 "$SECS"
curl -s http://127.0.0.1:8280/metrics | grep -E '^pagoda_router:pd_'
curl -s http://127.0.0.1:8202/metrics | python3 -c '
import re, sys
m = dict(re.findall(r"^(pagoda:kv_transfer_\w+)\{[^}]*\} (\S+)$", sys.stdin.read(), re.M))
b, s = float(m["pagoda:kv_transfer_bytes_received_total"]), float(m["pagoda:kv_transfer_receive_seconds_total"])
print(f"KV transfer: {b / 1e6:.1f} MB in {s:.3f} s receiving = {b / 1e6 / max(s, 1e-9):.0f} MB/s; "
      "fallbacks " + m["pagoda:kv_transfer_fallbacks_total"] + ", receive failures " + m["pagoda:kv_transfer_receive_failures_total"])'
