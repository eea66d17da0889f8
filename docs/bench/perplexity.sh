#!/usr/bin/env bash
# Perplexity of one model under pagoda and under llama.cpp's llama-perplexity, same text, same
# windows (docs/benchmarks.md, "Perplexity"). llama.cpp is built outside the project:
#   L=/path/to/llama.cpp/build/bin docs/bench/perplexity.sh [MODEL] [CHUNKS]
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:-$HOME/.cache/pagoda/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf}
chunks=${2:-12}
text=${TEXT:-/tmp/ppl-text.txt}
# A public-domain-licensed English text present on every Debian machine (~80 KB).
[ -f "$text" ] || cat /usr/share/common-licenses/{GPL-3,Apache-2.0,MPL-2.0} > "$text"
cargo build --release --locked --quiet -p pagoda
echo "== pagoda"
target/release/pagoda perplexity --model "$model" -f "$text" --ctx 512 --chunks "$chunks" --threads 2
if [ -n "${L:-}" ]; then
  echo "== llama.cpp"
  "$L/llama-perplexity" -m "$model" -f "$text" -c 512 --chunks "$chunks" -t 2 2>&1 |
    grep -E "^\[1\]|Final estimate"
fi
