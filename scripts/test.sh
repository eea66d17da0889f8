#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it (.ci/run calls this and nothing else):
# fetch the real models if missing, check formatting and lints, then run every test.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/fetch-models.sh
# Python packages the tests drive: the official `openai` client (crates/server/tests/
# openai_conformance.rs) and `gguf`, ggml's reference dequantizers (crates/gguf/tests/
# dequantize_reference.rs). Idempotent (a no-op once installed); tries a plain install, then
# the forms that externally-managed (PEP 668) or read-only Pythons need.
pip_install() { PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check "$@"; }
ensure() { # ensure PROBE SPEC...
  local probe=$1
  shift
  python3 -c "$probe" 2>/dev/null || pip_install "$@" 2>/dev/null || pip_install --user "$@" 2>/dev/null ||
    pip_install --break-system-packages "$@" 2>/dev/null || pip_install --user --break-system-packages "$@"
}
ensure 'import openai, sys; v = tuple(map(int, openai.__version__.split(".")[:2])); sys.exit(not (1, 50) <= v < (2, 0))' 'openai>=1.50,<2'
ensure 'import gguf, numpy' 'gguf>=0.10'
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
