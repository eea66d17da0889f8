#!/bin/bash
# run-one.sh NAME PORT "server command" "bench args"  -> $OUT/NAME.txt (OUT=/tmp/spec)
# Run from the repository root; PAGODA picks the bench client (a release build: debug-profile
# figures were 2-3x off).
set -u
name=$1; port=$2; server=$3; bench=$4
OUT=${OUT:-/tmp/spec}; mkdir -p "$OUT"
PAGODA=${PAGODA:-./target/release/pagoda}
$server > $OUT/$name.server.log 2>&1 &
spid=$!
for i in $(seq 1 240); do curl -sf localhost:$port/health >/dev/null 2>&1 && break; sleep 0.5; done
# pagoda: /ready; llama-server: /health answers 200 once loaded
for i in $(seq 1 240); do c=$(curl -s -o /dev/null -w '%{http_code}' localhost:$port/ready); [ "$c" = 200 ] && break; c2=$(curl -s -o /dev/null -w '%{http_code}' localhost:$port/health); [ "$c2" = 200 ] && [ "$c" = 404 ] && break; sleep 0.5; done
"$PAGODA" bench --base-url http://127.0.0.1:$port --no-progress $bench > $OUT/$name.txt 2>&1
curl -s localhost:$port/metrics | grep "spec_decode_num_speculative_tokens_bucket" | sed "s/.*le=/le=/" | tr "\n" " " > $OUT/$name.k.txt
kill $spid; wait $spid 2>/dev/null
echo "$name: K buckets: $(cat $OUT/$name.k.txt)"
grep -E "Output tokens/s|TPOT|acceptance|Mean accept|completed" $OUT/$name.txt | sed "s/^/$name: /"
