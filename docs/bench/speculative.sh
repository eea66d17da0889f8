#!/bin/bash
# The speculative-decoding comparison of docs/benchmarks.md, in one sitting.
# Usage (repository root): mkdir -p /tmp/spec && python3 docs/bench/make-workloads.py && docs/bench/speculative.sh
# pagoda runs from target/debug (the dev profile builds kernels, model and dependencies at
# opt-level 3); llama-server from L below.
M=~/.cache/pagoda/models; T=$M/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf; D=$M/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
L=/tmp/llamacpp/build/bin/llama-server
P="./target/debug/pagoda serve --kv-cache-memory 1GiB --threads 2"
LS="$L -t 2 -c 4096 --host 127.0.0.1"
CODE="--api chat --workload file --dataset-path /tmp/spec/code_edit.jsonl --num-requests 2 --concurrency 1 --warmup 1 --ignore-eos"
CHAT="--api chat --workload file --dataset-path /tmp/spec/chat.jsonl --num-requests 2 --concurrency 1 --warmup 1 --ignore-eos"
R="$(dirname "$0")/run-one.sh"
$R code-pagoda-plain 8201 "$P --model $T --port 8201" "$CODE"
$R code-pagoda-ngram-auto 8202 "$P --model $T --port 8202 --speculative-method ngram --prompt-lookup-min 2 --prompt-lookup-max 5" "$CODE"
$R code-pagoda-ngram-k2 8203 "$P --model $T --port 8203 --speculative-method ngram --prompt-lookup-min 2 --prompt-lookup-max 5 --num-speculative-tokens 2" "$CODE"
$R code-pagoda-suffix-auto 8204 "$P --model $T --port 8204 --speculative-method suffix" "$CODE"
$R code-pagoda-draft-auto 8205 "$P --model $T --port 8205 --draft-model $D" "$CODE"
$R code-llama-plain 8206 "$LS -m $T --port 8206" "$CODE"
$R code-llama-ngram 8207 "$LS -m $T --port 8207 --spec-type ngram-simple" "$CODE"
$R code-llama-draft 8208 "$LS -m $T --port 8208 --spec-type draft-simple -md $D --spec-draft-n-max 3" "$CODE"
$R chat-pagoda-plain 8211 "$P --model $T --port 8211" "$CHAT"
$R chat-pagoda-draft-auto 8212 "$P --model $T --port 8212 --draft-model $D" "$CHAT"
$R chat-pagoda-draft-k2 8213 "$P --model $T --port 8213 --draft-model $D --num-speculative-tokens 2" "$CHAT"
$R chat-llama-draft 8214 "$LS -m $T --port 8214 --spec-type draft-simple -md $D --spec-draft-n-max 3" "$CHAT"
$R chat-llama-plain 8215 "$LS -m $T --port 8215" "$CHAT"
for c in 8 16 32; do
  LOAD="--api completions --workload random --input-len 128 --output-len 64 --num-requests $c --concurrency $c --warmup 2 --ignore-eos"
  $R load$c-pagoda-plain 82$((20+c)) "$P --model $D --port 82$((20+c))" "$LOAD"
  $R load$c-pagoda-suffix-auto 83$((20+c)) "$P --model $D --port 83$((20+c)) --speculative-method suffix" "$LOAD"
  $R load$c-pagoda-ngram-auto 84$((20+c)) "$P --model $D --port 84$((20+c)) --speculative-method ngram --prompt-lookup-min 2" "$LOAD"
done
