#!/bin/bash
# The speculative-decoding comparison of docs/benchmarks.md, in one sitting, release builds.
# Usage (repository root): python3 docs/bench/make-workloads.py && docs/bench/speculative.sh [ROUNDS]
#   PAGODA=path/to/pagoda (default target/release/pagoda), BASE=another pagoda binary (adds
#   base-suffix and base-ngram: the same flags on it, for an A/B of two builds in one run),
#   L=path/to/llama-server (skipped if absent), ONLY="plain suffix ..." to run some
#   configurations (ONLY=" ": none), SKIP_LOAD=1 to skip the random-text rows, FIRST=n to
#   number rounds from n, OUT=dir for the results (default /tmp/spec). CHAT=1 runs the
#   general-chat prompts (chat_*.jsonl) instead of the code edits, with the draft model's
#   configurations (D=path/to/draft.gguf, default Qwen2.5-Coder-0.5B) and its 16-stream rows on
#   the chat prompts (LOAD_CFGS="plain draft" by default there). Results:
#   $OUT/r<round>-<config>-<prompt>.txt; docs/bench/speculative_table.py tabulates them.
# Code editing: Qwen2.5-Coder-1.5B, batch 1, greedy, 2 threads, each prompt warmed (one
# 1-token request puts it in the prefix cache) and then decoded once; decode tok/s is
# 1000 / mean TPOT (the first token excluded). The configurations alternate within a round, so a
# loaded machine weighs on all of them alike. Random text: `auto` against no speculation at 1
# and 16 streams (128-token prompts, 64 tokens out; one wave of as many requests as streams, 4
# one after the other at 1); with CHAT=1 the chat prompts instead, 128 tokens out.
set -u
ROUNDS=${1:-1}
M=~/.cache/pagoda/models; T=$M/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
D=${D:-$M/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf}
OUT=${OUT:-/tmp/spec}; mkdir -p "$OUT"
PAGODA=${PAGODA:-./target/release/pagoda}
L=${L:-/tmp/llama/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-server}
P="$PAGODA serve --model $T --kv-cache-memory 1GiB --threads 2"
LS="$L -m $T -t 2 -c 8192 --host 127.0.0.1"
if [ -n "${CHAT:-}" ]; then
  PROMPTS="chat_explain chat_email chat_summary chat_question chat_advice"
  DEFAULT_ORDER="plain draft draft-k1 draft-k2 draft-k3 llama-plain llama-draft"
  LOAD_CFGS=${LOAD_CFGS:-"plain draft"}
else
  PROMPTS="admission cost_model dataset metrics"
  DEFAULT_ORDER="plain suffix ngram suffix+ngram llama-plain llama-ngram-simple llama-ngram-mod"
  LOAD_CFGS=${LOAD_CFGS:-"plain suffix+ngram"}
fi
declare -A CFG=(
  [plain]="$P"
  [suffix]="$P --speculative-method suffix"
  [ngram]="$P --speculative-method ngram --prompt-lookup-min 2 --prompt-lookup-max 5"
  [suffix+ngram]="$P --speculative-method suffix+ngram"
  [base-suffix]="${BASE:-} serve --model $T --kv-cache-memory 1GiB --threads 2 --speculative-method suffix"
  [base-ngram]="${BASE:-} serve --model $T --kv-cache-memory 1GiB --threads 2 --speculative-method ngram --prompt-lookup-min 2 --prompt-lookup-max 5"
  [draft]="$P --draft-model $D"
  [draft-k1]="$P --draft-model $D --num-speculative-tokens 1"
  [draft-k2]="$P --draft-model $D --num-speculative-tokens 2"
  [draft-k3]="$P --draft-model $D --num-speculative-tokens 3"
  [draft-k4]="$P --draft-model $D --num-speculative-tokens 4"
  [base-draft]="${BASE:-} serve --model $T --kv-cache-memory 1GiB --threads 2 --draft-model $D"
  [llama-plain]="$LS"
  [llama-draft]="$LS --model-draft $D"
  [llama-ngram-simple]="$LS --spec-type ngram-simple"
  [llama-ngram-mod]="$LS --spec-type ngram-mod"
)
ORDER=${ONLY:-$DEFAULT_ORDER}
PORT=8290

start() { # command -> waits until /v1/models answers
  $1 --port $PORT > $OUT/server.log 2>&1 &
  SPID=$!
  for _ in $(seq 1 600); do
    curl -sf localhost:$PORT/v1/models >/dev/null 2>&1 && return 0
    kill -0 $SPID 2>/dev/null || return 1
    sleep 0.5
  done
  return 1
}
stop() { kill $SPID; wait $SPID 2>/dev/null; }
warm() { # dataset file -> the prompt in the server's cache (one token)
  python3 - "$1" "$PORT" <<'PY'
import json, sys, urllib.request
base = f"http://127.0.0.1:{sys.argv[2]}"
model = json.load(urllib.request.urlopen(base + "/v1/models"))["data"][0]["id"]
prompt = json.loads(open(sys.argv[1]).readline())["prompt"]
body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": 1,
        "temperature": 0}
req = urllib.request.Request(base + "/v1/chat/completions",
                             json.dumps(body).encode(), {"Content-Type": "application/json"})
urllib.request.urlopen(req, timeout=600).read()
PY
}
bench() { "$PAGODA" bench --base-url http://127.0.0.1:$PORT --no-progress --temperature 0 "$@"; }

FIRST=${FIRST:-1}  # the first round's number (another sitting adds rounds to $OUT)
for r in $(seq "$FIRST" $((FIRST + ROUNDS - 1))); do
  for c in $ORDER; do
    case $c in llama-*) [ -x "$L" ] || continue;; base-*) [ -x "${BASE:-}" ] || continue;; esac
    start "${CFG[$c]}" || { echo "$c: server did not start"; stop; continue; }
    for p in $PROMPTS; do
      f=/tmp/spec/code_edit_$p.jsonl; [ -f "$f" ] || f=/tmp/spec/$p.jsonl
      warm "$f"
      bench --api chat --workload file --dataset-path "$f" --num-requests 1 --concurrency 1 \
        --warmup 0 --ignore-eos > $OUT/r$r-$c-$p.txt 2>&1
      echo "round $r $c $p: $(awk '/^TPOT/ {printf "%.1f tok/s", 1000/$2}' $OUT/r$r-$c-$p.txt)"
    done
    stop
  done
  [ -n "${SKIP_LOAD:-}" ] && continue
  for c in $LOAD_CFGS; do
    start "${CFG[$c]}" || { stop; continue; }
    for s in 1 16; do
      n=$((s == 1 ? 4 : s))
      if [ -n "${CHAT:-}" ]; then
        w=(--api chat --workload file --dataset-path /tmp/spec/chat_all.jsonl --output-len 128)
      else
        w=(--api completions --workload random --input-len 128 --output-len 64)
      fi
      bench "${w[@]}" --num-requests $n --concurrency $s --warmup 1 --ignore-eos \
        > $OUT/r$r-load$s-$c.txt 2>&1
      echo "round $r load $s $c: $(grep 'Output tokens/s' $OUT/r$r-load$s-$c.txt)"
    done
    stop
  done
done
