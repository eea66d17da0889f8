#!/usr/bin/env bash
# Tenant-fair scheduling measured on the real model: one tenant floods (closed loop, more
# clients than --max-num-seqs), another sends a steady trickle; the trickle's TTFT under
# --scheduling-policy fcfs and fair, against the trickle alone. Two `pagoda bench` processes
# at once, each with its own tenant's key. Results: docs/benchmarks.md, "Tenant-fair scheduling".
#
# usage: scripts/bench-fairness.sh [PAGODA_BINARY] [OUT_DIR]
set -euo pipefail
bin=${1:-target/release/pagoda}
out=${2:-/tmp/pagoda-fairness}
model=${PAGODA_MODEL:-$HOME/.cache/pagoda/models/SmolLM2-135M-Instruct.Q4_1.gguf}
port=${PORT:-18431}
mkdir -p "$out"
cat >"$out/keys.json" <<'KEYS'
{"keys": [{"key": "k-flood", "tenant": "flood"}, {"key": "k-trickle", "tenant": "trickle"}]}
KEYS
base="http://127.0.0.1:$port"
common=(--input-len 64 --output-len 8..24 --ignore-eos --temperature 0 --no-progress)
trickle=(--api-key k-trickle --request-rate 0.25 --num-requests 12 --seed 7 "${common[@]}")
flood=(--api-key k-flood --concurrency 16 --duration 60s --seed 3 "${common[@]}")

serve() {
  "$bin" serve --model "$model" --port "$port" --api-keys-file "$out/keys.json" \
    --max-num-seqs 8 --scheduling-policy "$1" 2>"$out/serve-$1.log" &
  server=$!
  until curl -sf "$base/ready" >/dev/null; do sleep 0.2; done
}

stop() { kill -TERM "$server"; wait "$server" || true; }

serve fair
"$bin" bench --base-url "$base" "${trickle[@]}" --output "$out/alone.json" >"$out/alone.txt"
stop
for policy in fcfs fair; do
  serve "$policy"
  "$bin" bench --base-url "$base" "${flood[@]}" --output "$out/flood-$policy.json" >"$out/flood-$policy.txt" &
  flood_pid=$!
  sleep 3 # the flood's queue builds up first
  "$bin" bench --base-url "$base" "${trickle[@]}" --output "$out/trickle-$policy.json" >"$out/trickle-$policy.txt"
  wait "$flood_pid"
  stop
done
for f in alone trickle-fcfs trickle-fair flood-fcfs flood-fair; do
  echo "== $f"; grep -E "TTFT|Successful|Output token throughput" "$out/$f.txt" || cat "$out/$f.txt"
done
