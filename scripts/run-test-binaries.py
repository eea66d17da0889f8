#!/usr/bin/env python3
"""Runs the test binaries `cargo test --no-run --message-format=json` built (read on stdin), as
`cargo test` would run them (each in its package's directory), but the two longest side by side.

Why: the model and server test binaries are 280 of the suite's ~370 s on 2 cores, and the
server's tests spend much of theirs waiting on sockets and Python clients, so the two together
keep both cores busy where one after the other left one idle. Everything else runs one at a
time afterwards, as before: the router's binaries start real replica processes with time bounds
that a loaded machine can break (docs/testing.md). Every binary runs even if one fails (cargo
test stops at the first); each one's output is printed whole when it ends, and the exit status
is non-zero if any failed.
"""

import json
import os
import subprocess
import sys
import threading
import time

# Test binaries run side by side, by (package, target) name; the rest run alone afterwards.
SIDE_BY_SIDE = [("pagoda-model-tests", "integration"), ("pagoda-server", "integration")]


def binaries(lines):
    """(package, target, kind, executable, package dir) of every test binary, in cargo's order."""
    out = []
    for line in lines:
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        target, profile = msg["target"], msg["profile"]
        # `cargo test` runs unit tests of libraries and binaries and the integration tests;
        # benches and examples are only built (`test = false` is their default).
        if not profile.get("test") or not set(target["kind"]) & {"lib", "bin", "test", "proc-macro"}:
            continue
        # "path+file:///…/crates/model#pagoda-model@0.1.0", or "…/crates/pagoda#0.1.0" when
        # the package is named as its directory.
        url, _, fragment = msg["package_id"].partition("#")
        package = fragment.split("@")[0] if "@" in fragment else url.rsplit("/", 1)[-1]
        out.append((package, target["name"], target["kind"][0], msg["executable"],
                    os.path.dirname(msg["manifest_path"])))
    return sorted(out, key=lambda b: (b[0], b[2] != "lib", b[1]))


def run(binary, results, lock):
    package, name, kind, exe, cwd = binary
    start = time.monotonic()
    env = dict(os.environ, CARGO_MANIFEST_DIR=cwd, CARGO_PKG_NAME=package)
    proc = subprocess.run([exe], cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT)
    took = time.monotonic() - start
    with lock:
        what = "unittests" if kind in ("lib", "bin") else "tests"
        print(f"     Running {what} {name} of {package} ({os.path.relpath(exe)}): {took:.1f} s",
              flush=True)
        sys.stdout.buffer.write(proc.stdout)
        sys.stdout.flush()
        results.append((binary, proc.returncode))


def main():
    all_binaries = binaries(sys.stdin)
    if not all_binaries:
        sys.exit("error: no test binaries in cargo's output")
    results, lock = [], threading.Lock()
    paired = [b for b in all_binaries if (b[0], b[1]) in SIDE_BY_SIDE]
    threads = [threading.Thread(target=run, args=(b, results, lock)) for b in paired]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for b in all_binaries:
        if b not in paired:
            run(b, results, lock)
    failed = [f"{b[0]} {b[1]}" for b, code in results if code != 0]
    if failed:
        sys.exit("error: test binaries failed: " + ", ".join(failed))


if __name__ == "__main__":
    main()
