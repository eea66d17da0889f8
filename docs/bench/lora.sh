#!/bin/bash
# Multi-LoRA throughput on SmolLM2: 32 streams of 128 in / 128 out, base only vs one adapter vs
# 8 adapters (rank 16, q/k/v/o) spread over the streams (8 clients x 4 streams each, one model
# name per client; the base-only and one-adapter loads use the same 8 x 4 clients). Rounds are
# interleaved so the machine's load hits all three alike. Then llama-server (LLAMA=path to its
# binary; skipped when unset) as the reference: it applies one adapter set to every request, so
# it has the base and one-adapter loads only. Adapter load time and memory come from the
# server's "lora adapter loaded" log lines. Each round reports output tok/s over its wall time
# and per CPU-second of the server process (utime + stime from /proc): on a shared machine the
# second is the steadier cost measure. Every client of every round sends its own prompts (a seed of
# its own), so no request hits the prefix cache and every round prefills all of its 8,192 prompt
# tokens: with one seed for all, the eight clients shared eight prompts and only the first round of
# a new adapter paid for prefill.
# usage: [LLAMA=.../llama-server] docs/bench/lora.sh [PAGODA_BIN] [ROUNDS]   -> /tmp/lora-bench/
set -e
bin=${1:-target/release/pagoda}; rounds=${2:-2}
model=${PAGODA_MODEL_DIR:-$HOME/.cache/pagoda/models}/SmolLM2-135M-Instruct.Q4_1.gguf
out=/tmp/lora-bench; mkdir -p $out; : > $out/summary.txt
mods=()
for i in 0 1 2 3 4 5 6 7; do
  [ -f $out/a$i.gguf ] || python3 docs/bench/make-lora.py $model $out/a$i.gguf --rank 16 --seed $i
  mods+=("a$i=$out/a$i.gguf")
done
wait_ready() { # port path
  for _ in $(seq 1 480); do [ "$(curl -s -o /dev/null -w '%{http_code}' localhost:$1$2)" = 200 ] && return; sleep 0.5; done
  echo "server on $1 never became ready" >&2; exit 1
}
cpu_ticks() { awk '{print $14 + $15}' /proc/$1/stat; }
seed=1000
run() { # pid port name model0..model7
  local pid=$1 port=$2 name=$3; shift 3; local pids=()
  local t0 c0 c1; t0=$(date +%s.%N); c0=$(cpu_ticks $pid)
  for m in "$@"; do
    seed=$((seed + 1))
    $bin bench --seed $seed --base-url http://127.0.0.1:$port --model $m --no-progress --input-len 128 --output-len 128 \
      --ignore-eos --concurrency 4 --num-requests 8 > $out/$name.$m.$RANDOM.txt 2>&1 & pids+=($!)
  done
  wait "${pids[@]}"
  local t1; t1=$(date +%s.%N); c1=$(cpu_ticks $pid)
  # 8 clients x 8 requests x 128 output tokens over the wall time of the slowest client, and
  # over the server's CPU time (clock ticks of 1/100 s)
  printf "%s wall_tok_s %.1f cpu_tok_s %.1f\n" $name "$(echo "8*8*128/($t1-$t0)" | bc -l)" \
    "$(echo "8*8*128*100/($c1-$c0)" | bc -l)" | tee -a $out/summary.txt
}
$bin serve --model $model --port 8111 --served-model-name smol --max-loras 8 --lora-modules "${mods[@]}" > $out/server.log 2>&1 &
spid=$!
trap 'kill $spid 2>/dev/null || true' EXIT
wait_ready 8111 /ready
grep "lora adapter loaded" $out/server.log | tee $out/load.txt
for r in $(seq 1 $rounds); do
  run $spid 8111 base smol smol smol smol smol smol smol smol
  run $spid 8111 one a0 a0 a0 a0 a0 a0 a0 a0
  run $spid 8111 eight a0 a1 a2 a3 a4 a5 a6 a7
done
kill $spid; wait $spid 2>/dev/null || true
if [ -n "$LLAMA" ]; then
  for variant in base one; do
    extra=(); [ $variant = one ] && extra=(--lora $out/a0.gguf)
    $LLAMA -m $model --port 8112 -t 2 -np 32 -c 8192 --host 127.0.0.1 "${extra[@]}" > $out/llama-$variant.log 2>&1 &
    lpid=$!
    wait_ready 8112 /health
    for r in $(seq 1 $rounds); do run $lpid 8112 llama-$variant m m m m m m m m; done
    kill $lpid; wait $lpid 2>/dev/null || true
  done
fi
