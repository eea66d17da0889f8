#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it (.ci/run calls this and nothing else):
# fetch the real models if missing, check formatting and lints, then run every test.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/fetch-models.sh
# Python packages the tests drive: the official SDKs `openai` (crates/server/tests/
# openai_conformance.rs, front_apis.rs) and `anthropic` (front_apis.rs), and `gguf`, ggml's
# reference dequantizers (crates/gguf/tests/dequantize_reference.rs), and `kubernetes-validate`,
# which checks deploy/kubernetes against the Kubernetes schemas (crates/pagoda/tests/
# deploy_manifests.rs) and brings `jsonschema`, which validates constrained outputs
# (pagoda_testkit::json_schema). Idempotent (a no-op
# once installed); tries a plain install, then the forms that externally-managed (PEP 668)
# or read-only Pythons need.
pip_install() { PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check "$@"; }
ensure_py() { # ensure_py PIN CHECK
  python3 -c "$2" 2>/dev/null || pip_install "$1" 2>/dev/null || pip_install --user "$1" 2>/dev/null ||
    pip_install --break-system-packages "$1" 2>/dev/null || pip_install --user --break-system-packages "$1"
}
version_in() { # version_in MODULE LOW HIGH: a check that MODULE's major.minor is in [LOW, HIGH)
  echo "import $1, sys; v = tuple(map(int, $1.__version__.split('.')[:2])); sys.exit(not $2 <= v < $3)"
}
ensure_py 'openai>=1.50,<2' "$(version_in openai '(1, 50)' '(2, 0)')"
ensure_py 'anthropic>=0.50,<3' "$(version_in anthropic '(0, 50)' '(3, 0)')"
ensure_py 'gguf>=0.10' 'import gguf, numpy'
ensure_py 'kubernetes-validate>=1.30' 'import kubernetes_validate, jsonschema, yaml'
# `cbor2`: the independent block-hash implementation (crates/core/tests/block_hash_reference.rs)
ensure_py 'cbor2>=5.4' 'import cbor2'
# `pyzmq` + `msgpack`: a real KV-events subscriber (crates/kv-events/tests/zmq_subscriber.rs)
ensure_py 'pyzmq>=25' 'import zmq'
ensure_py 'msgpack>=1.0' 'import msgpack'
# `litellm` (crates/server/tests/client_compat.rs) needs openai>=2, the SDK tests above pin 1.x:
# it gets its own virtualenv, next to the models (LITELLM_PYTHON picks another interpreter).
LITELLM_VENV="${HOME}/.cache/pagoda/litellm-venv"
"$LITELLM_VENV/bin/python" -c 'import litellm' 2>/dev/null || {
  python3 -m venv "$LITELLM_VENV" &&
    "$LITELLM_VENV/bin/python" -m pip install --quiet --disable-pip-version-check 'litellm==1.80.0'
}
# Open MPI's mpirun and library: tensor-parallel ranks as processes (crates/pagoda/tests/mpi.rs).
# Installed from the distribution (Debian's openmpi-bin) in the background while the workspace
# compiles; pagoda itself opens the library only when asked to (--distributed-executor-backend).
ensure_mpi() {
  command -v mpirun >/dev/null && return 0
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  { $sudo apt-get install -y -qq --no-install-recommends openmpi-bin ||
    { $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends openmpi-bin; }
  } >/dev/null 2>&1
}
ensure_mpi &
mpi_install=$!
cargo fmt --all -- --check
# A crate's tests/*.rs are modules of its one test binary, tests/main.rs (autotests = false:
# one link instead of one per file); a file missing from main.rs would silently never run.
for main in crates/*/tests/main.rs; do
  for f in "${main%/main.rs}"/*.rs; do
    m=$(basename "$f" .rs)
    [ "$m" = main ] || grep -qx "mod $m;" "$main" ||
      { echo "error: $f is not a module of $main (add \`mod $m;\`)" >&2; exit 1; }
  done
done
# Lints and the test build in one compilation: clippy-driver is rustc plus clippy's lints, and
# builds in full when cargo asks it to, so it stands in for rustc on the workspace's own crates
# (`cargo clippy` sets these two variables the same way, for `cargo check`). --all-targets
# builds the benches too, so they are linted as clippy --all-targets did. The same environment
# for the run, or cargo would rebuild the workspace without the wrapper.
driver="$(rustc --print sysroot)/bin/clippy-driver"
[ -x "$driver" ] || { echo "error: no $driver (rustup component add clippy)" >&2; exit 1; }
export RUSTC_WORKSPACE_WRAPPER="$driver"
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
# No incremental state: this command builds from scratch on CI, where writing it cost 16% of
# the workspace's compile time (docs/testing.md).
export CARGO_INCREMENTAL=0
# The test binaries are then run by scripts/run-test-binaries.py, as `cargo test` would run
# them, but the model's and the server's side by side (289 s together against 317 s one after
# the other: the server's tests leave a core idle while they wait on sockets and clients).
artifacts="$(mktemp)"
trap 'rm -f "$artifacts"' EXIT
cargo test --workspace --all-targets --locked --no-run --message-format=json-render-diagnostics >"$artifacts"
wait "$mpi_install" || { echo "error: cannot install Open MPI (apt-get install openmpi-bin)" >&2; exit 1; }
python3 scripts/run-test-binaries.py <"$artifacts"
