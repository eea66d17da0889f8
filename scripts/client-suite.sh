#!/usr/bin/env bash
# The client-library suite (issue 35): the libraries applications build on (openai for Python and
# Node, the Responses API, langchain-openai, litellm, openai-agents, anthropic, instructor,
# pydantic-ai), at pinned versions, against a real server: chat, stream, structured output, tool
# round trip, errors, usage, and embeddings against a second server holding an embedding model.
# Each check prints PASS or FAIL with its reason (SKIP: embeddings with --no-embed); the last line is the pass count. Not in CI (it
# takes minutes); its latest result is in docs/clients.md.
#
#   scripts/client-suite.sh                        # starts pagoda (release build) on Qwen2.5-Coder
#                                                  # 0.5B and on all-MiniLM-L6-v2, runs, stops them
#   scripts/client-suite.sh --base-url http://127.0.0.1:8080 --embed-base-url http://127.0.0.1:8081
#                                                  # any running OpenAI-compatible servers
#   scripts/client-suite.sh --libs openai,litellm --only tool_round_trip --no-node
#
# The Python packages go into their own virtualenv (~/.cache/pagoda/client-suite-venv, never the
# system Python, whose openai is pinned <2 for the test suite), the npm package into
# ~/.cache/pagoda/client-suite-npm; both are made on the first run (a minute or two).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CLIENTS="$ROOT/docs/bench/clients"
CACHE="${HOME}/.cache/pagoda"
VENV="${CLIENT_SUITE_VENV:-$CACHE/client-suite-venv}"
NPM_DIR="${CLIENT_SUITE_NPM:-$CACHE/client-suite-npm}"
MODELS="$CACHE/models"
CHAT_MODEL="$MODELS/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
EMBED_MODEL="$MODELS/all-MiniLM-L6-v2"
PAGODA="${PAGODA:-${CARGO_TARGET_DIR:-$ROOT/target}/release/pagoda}"
NODE_PKG="openai@$(cat "$CLIENTS/node-version.txt")"

base="" embed="" libs="" only="" node=1 embed_wanted=1
while [ "$#" -gt 0 ]; do
  case "$1" in
    --base-url) base="$2"; shift 2 ;;
    --embed-base-url) embed="$2"; shift 2 ;;
    --no-embed) embed_wanted=0; shift ;;
    --libs) libs="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    --no-node) node=0; shift ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done

# The clients, installed once; a changed requirements file reinstalls.
req="$CLIENTS/requirements.txt"
stamp="$VENV/.requirements.sha256"
if [ ! -x "$VENV/bin/python" ] || ! sha256sum --status -c "$stamp" 2>/dev/null; then
  echo "installing the Python clients into $VENV" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req"
  sha256sum "$req" > "$stamp"
fi
node_installed() {
  grep -q "\"version\": \"${NODE_PKG#openai@}\"" "$NPM_DIR/node_modules/openai/package.json" 2>/dev/null
}
if [ "$node" = 1 ] && ! node_installed; then
  echo "installing $NODE_PKG into $NPM_DIR" >&2
  mkdir -p "$NPM_DIR"
  npm install --silent --no-audit --no-fund --prefix "$NPM_DIR" "$NODE_PKG" >&2
fi

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
started=""
start_pagoda() { # model path -> $started, the root URL of a ready server (not in a subshell, so
  # that its pid reaches the cleanup)
  local port; port="$(free_port)"
  "$PAGODA" serve --model "$1" --port "$port" > "/tmp/client-suite-pagoda-$port.log" 2>&1 &
  pids+=("$!")
  for _ in $(seq 600); do
    if curl -sf "http://127.0.0.1:$port/ready" > /dev/null; then started="http://127.0.0.1:$port"; return; fi
    sleep 0.5
  done
  echo "pagoda on $1 did not become ready; see /tmp/client-suite-pagoda-$port.log" >&2; exit 1
}
if [ -z "$base" ] || { [ -z "$embed" ] && [ "$embed_wanted" = 1 ]; }; then
  [ -x "$PAGODA" ] || { echo "no pagoda binary at $PAGODA: cargo build --release -p pagoda" >&2; exit 1; }
fi
if [ -z "$base" ]; then start_pagoda "$CHAT_MODEL"; base="$started"; fi
if [ -z "$embed" ] && [ "$embed_wanted" = 1 ]; then start_pagoda "$EMBED_MODEL"; embed="$started"; fi

args=(--base-url "$base")
[ -n "$embed" ] && args+=(--embed-base-url "$embed")
[ -n "$libs" ] && args+=(--libs "$libs")
[ -n "$only" ] && args+=(--only "$only")
out="$(mktemp)"
(cd "$CLIENTS" && "$VENV/bin/python" suite.py "${args[@]}") | tee "$out" || true
if [ "$node" = 1 ] && { [ -z "$libs" ] || [[ ",$libs," == *",openai-node,"* ]]; }; then
  CLIENT_SUITE_NPM="$NPM_DIR" node "$CLIENTS/openai_node.mjs" "$base" ${embed:+"$embed"} | tee -a "$out" || true
fi
passed="$(grep -c '^PASS ' "$out" || true)"
failed="$(grep -c '^FAIL ' "$out" || true)"
skipped="$(grep -c '^SKIP ' "$out" || true)"
rm -f "$out"
echo "client suite: $passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
