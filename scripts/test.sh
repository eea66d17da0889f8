#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it (.ci/run calls this and nothing else):
# fetch the real models if missing, check formatting and lints, then run every test.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/fetch-models.sh
# The official `openai` Python client, for crates/server/tests/openai_conformance.rs.
# Idempotent (a no-op once installed); tries a plain install, then the forms that
# externally-managed (PEP 668) or read-only Pythons need.
openai_pin='openai>=1.50,<2'
pip_install() { PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check "$@" "$openai_pin"; }
openai_ok='import openai, sys; v = tuple(map(int, openai.__version__.split(".")[:2])); sys.exit(not (1, 50) <= v < (2, 0))'
python3 -c "$openai_ok" 2>/dev/null || pip_install 2>/dev/null || pip_install --user 2>/dev/null ||
  pip_install --break-system-packages 2>/dev/null || pip_install --user --break-system-packages
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
