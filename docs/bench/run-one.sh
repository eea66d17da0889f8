#!/bin/bash
# run1.sh NAME PORT "server command" "bench args"  -> /tmp/spec/NAME.txt
name=$1; port=$2; server=$3; bench=$4
cd /work/main
$server > /tmp/spec/$name.server.log 2>&1 &
spid=$!
for i in $(seq 1 240); do curl -sf localhost:$port/health >/dev/null 2>&1 && break; sleep 0.5; done
# pagoda: /ready; llama-server: /health answers 200 once loaded
for i in $(seq 1 240); do c=$(curl -s -o /dev/null -w '%{http_code}' localhost:$port/ready); [ "$c" = 200 ] && break; c2=$(curl -s -o /dev/null -w '%{http_code}' localhost:$port/health); [ "$c2" = 200 ] && [ "$c" = 404 ] && break; sleep 0.5; done
./target/debug/pagoda bench --base-url http://127.0.0.1:$port --no-progress $bench > /tmp/spec/$name.txt 2>&1
curl -s localhost:$port/metrics | grep "spec_decode_num_speculative_tokens_bucket" | sed "s/.*le=/le=/" | tr "\n" " " > /tmp/spec/$name.k.txt
kill $spid; wait $spid 2>/dev/null
echo "$name: K buckets: $(cat /tmp/spec/$name.k.txt)"
grep -E "Output tokens/s|TPOT|acceptance|Mean accept|completed" /tmp/spec/$name.txt | sed "s/^/$name: /"
