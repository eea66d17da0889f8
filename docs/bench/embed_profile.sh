#!/usr/bin/env bash
# Where a MiniLM embeddings request's time goes (issue 36's step profile): serves
# all-MiniLM-L6-v2 with the given binary and `perf record`s the server while it answers
# REQUESTS batch-64 `/v1/embeddings` requests of exactly TOKENS tokens per input, one after
# another (after one warm-up). Prints the median request time and the server's self time by
# symbol; at -F 999 a sample is ~1 ms of one thread's CPU time, so samples / REQUESTS is the
# CPU-ms a request costs (both threads together), a figure other processes on the machine
# disturb far less than wall time.
#
# Usage (repository root, release build, perf installed):
#   docs/bench/embed_profile.sh target/release/pagoda 256 [REQUESTS] [QUANTIZATION]
set -euo pipefail
BIN=${1:?pagoda binary}
TOKENS=${2:?tokens per input}
REQUESTS=${3:-5}
QUANT=${4:-q8_0}
PORT=${PORT:-8397}
MODEL=${PAGODA_MODEL_DIR:-$HOME/.cache/pagoda/models}/all-MiniLM-L6-v2
OUT=$(mktemp -d /tmp/embed-profile.XXXX)

"$BIN" serve --model "$MODEL" --port "$PORT" --quantization "$QUANT" --served-model-name m \
    >"$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null || true' EXIT
until curl -sf "http://127.0.0.1:$PORT/ready" >/dev/null; do sleep 0.2; done

cat >"$OUT/load.py" <<'PY'
import json, statistics, sys, time, urllib.request
port, n, count = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
base = ("The river rose through the night, and by morning the old stone bridge stood alone in a "
        "wide brown lake. Les habitants regardaient l'eau monter sans rien dire. ")
body = json.dumps({"model": "m", "truncate_prompt_tokens": n,
                   "input": [f"{i} {i * 7919 % 1000}. " + base * 24 for i in range(64)]}).encode()
times = []
for _ in range(count):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/embeddings", data=body,
                                 headers={"Content-Type": "application/json"})
    t = time.monotonic()
    with urllib.request.urlopen(req, timeout=600) as r:
        assert json.loads(r.read())["usage"]["prompt_tokens"] == 64 * n
    times.append(time.monotonic() - t)
if count > 1:
    print(f"{count} requests, median {statistics.median(times) * 1000:.1f} ms wall")
PY
python3 "$OUT/load.py" "$PORT" "$TOKENS" 1
echo "# $(date -u '+%H:%M UTC'), load average $(cut -d' ' -f1 /proc/loadavg), $TOKENS tokens x 64, $QUANT"
perf record -F 999 -g -p "$SERVER" -o "$OUT/perf.data" -- \
    python3 "$OUT/load.py" "$PORT" "$TOKENS" "$REQUESTS" 2>/dev/null
perf report -i "$OUT/perf.data" --no-children --sort symbol --stdio 2>/dev/null \
    | grep -E '^# (Samples|Event count)|^ +[0-9.]+%' | head -26
