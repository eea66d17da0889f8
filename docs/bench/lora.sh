#!/bin/bash
# Multi-LoRA throughput on SmolLM2: 32 streams of 128 in / 128 out, base only vs one adapter vs
# 8 adapters (rank 16, q/k/v/o) spread over the streams (8 clients x 4 streams each, one model
# name per client; the base-only and one-adapter loads use the same 8 x 4 clients). Rounds are
# interleaved so the machine's load hits all three alike.
# usage: docs/bench/lora.sh [PAGODA_BIN] [ROUNDS]   -> /tmp/lora-bench/*.txt
set -e
bin=${1:-target/release/pagoda}; rounds=${2:-2}
model=${PAGODA_MODEL_DIR:-$HOME/.cache/pagoda/models}/SmolLM2-135M-Instruct.Q4_1.gguf
out=/tmp/lora-bench; mkdir -p $out
mods=()
for i in 0 1 2 3 4 5 6 7; do
  [ -f $out/a$i.gguf ] || python3 docs/bench/make-lora.py $model $out/a$i.gguf --rank 16 --seed $i
  mods+=("a$i=$out/a$i.gguf")
done
$bin serve --model $model --port 8111 --served-model-name smol --max-loras 8 --lora-modules "${mods[@]}" > $out/server.log 2>&1 &
spid=$!
trap "kill $spid" EXIT
for i in $(seq 1 240); do [ "$(curl -s -o /dev/null -w '%{http_code}' localhost:8111/ready)" = 200 ] && break; sleep 0.5; done
run() { # name model0..model7
  local name=$1; shift; local pids=()
  local t0=$(date +%s.%N)
  for m in "$@"; do
    $bin bench --base-url http://127.0.0.1:8111 --model $m --no-progress --input-len 128 --output-len 128 \
      --ignore-eos --concurrency 4 --num-requests 8 > $out/$name.$m.$RANDOM.txt 2>&1 & pids+=($!)
  done
  wait "${pids[@]}"
  local t1=$(date +%s.%N)
  # 8 clients x 8 requests x 128 output tokens over the wall time of the slowest client
  echo "$name $(echo "8*8*128/($t1-$t0)" | bc -l)" | tee -a $out/summary.txt
}
for r in $(seq 1 $rounds); do
  run base smol smol smol smol smol smol smol smol
  run one a0 a0 a0 a0 a0 a0 a0 a0
  run eight a0 a1 a2 a3 a4 a5 a6 a7
done
