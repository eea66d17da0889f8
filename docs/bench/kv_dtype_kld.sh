#!/usr/bin/env bash
# Full-vocabulary KL divergence of int8 KV against f16 KV, pagoda and llama.cpp side by side
# (docs/benchmarks.md, "KV cache dtype"). Each engine is compared against its own f16 run, on
# the same text and windows. llama.cpp is built outside the project:
#   L=/path/to/llama.cpp/build/bin docs/bench/kv_dtype_kld.sh [MODEL] [CHUNKS]
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:-$HOME/.cache/pagoda/models/SmolLM2-135M-Instruct.Q4_1.gguf}
chunks=${2:-12}
text=${TEXT:-/usr/share/common-licenses/GPL-3}
out=$(mktemp -d)
cargo build --release --locked --quiet -p pagoda
p=target/release/pagoda
echo "== pagoda: int8 KV against f16 KV"
$p perplexity --model "$model" -f "$text" -c 512 --chunks "$chunks" --threads 1 \
  --kv-cache-dtype f16 --kl-divergence-base "$out/pagoda.kld"
$p perplexity --model "$model" -c 512 --threads 1 --kv-cache-dtype int8 \
  --kl-divergence-base "$out/pagoda.kld" --kl-divergence
if [ -n "${L:-}" ]; then
  echo "== llama.cpp: q8_0 KV against f16 KV (flash attention on in both: q8_0 V needs it)"
  "$L/llama-perplexity" -m "$model" -f "$text" -c 512 --chunks "$chunks" -t 1 -fa on \
    -ctk f16 -ctv f16 --kl-divergence-base "$out/llama.kld" 2>&1 | grep -E "Final estimate"
  "$L/llama-perplexity" -m "$model" -c 512 -t 1 -fa on -ctk q8_0 -ctv q8_0 \
    --kl-divergence-base "$out/llama.kld" --kl-divergence 2>&1 |
    grep -E "Mean +KLD|Same top|99.0%"
fi
rm -rf "$out"
