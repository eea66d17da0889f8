#!/bin/bash
# Decode speed with f16 against int8 KV (docs/benchmarks.md, "KV cache dtype"): `pagoda serve`
# with each dtype in turn, f16 and int8 interleaved A B A B at each point so a drift of the
# shared machine hits both alike, `pagoda bench` (random 512-token prompts, 64 output tokens,
# ignore_eos) at 1 and 16 concurrent streams.
# Usage (repository root): docs/bench/kv_dtype_speed.sh [PAGODA_BINARY] [ROUNDS]
P=${1:-target/debug/pagoda}; ROUNDS=${2:-2}
MODEL=~/.cache/pagoda/models/SmolLM2-135M-Instruct.Q4_1.gguf
PORT=18741
for c in 1 16; do
  for r in $(seq "$ROUNDS"); do
    for dtype in f16 int8; do
      "$P" serve --model "$MODEL" --port $PORT --threads 2 --kv-cache-memory 1GiB \
        --kv-cache-dtype $dtype > /tmp/kv_speed_server.log 2>&1 &
      spid=$!
      for i in $(seq 1 240); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' localhost:$PORT/ready)" = 200 ] && break
        sleep 0.5
      done
      "$P" bench --base-url http://127.0.0.1:$PORT --no-progress --api completions \
        --workload random --input-len 512 --output-len 64 --num-requests $((2 * c)) \
        --concurrency $c --warmup 1 --ignore-eos > /tmp/kv_speed_bench.txt 2>&1
      kill $spid; wait $spid 2>/dev/null
      echo "streams $c round $r $dtype: $(grep -E 'Output tokens/s|TPOT' /tmp/kv_speed_bench.txt | tr -s ' ' | tr '\n' ';')"
    done
  done
done
