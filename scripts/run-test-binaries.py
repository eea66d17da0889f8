#!/usr/bin/env python3
"""Runs the test binaries `cargo test --no-run --message-format=json` built (read on stdin), as
`cargo test` would run them (each in its package's directory), in two phases of two lanes.

Why: the model and server test binaries are most of the suite's time on 2 cores, and the
server's tests spend much of theirs waiting on sockets and Python clients, so the two together
keep both cores busy where one after the other left one idle (289 s against 317 s). Then the
router's binaries, which start real replica processes and mostly wait on them, run one after
the other in one lane while everything else runs one at a time in the other. The router's
binaries never run beside each other: side by side on a loaded machine, pd.rs's 30 s bound on
the fallback path failed (docs/testing.md). Every binary runs even if one fails (cargo test
stops at the first); each one's output is printed whole when it ends, and the exit status is
non-zero if any failed.
"""

import json
import os
import subprocess
import sys
import threading
import time

# The first phase: these two binaries side by side, by (package, target) name.
SIDE_BY_SIDE = [("pagoda-model-tests", "integration"), ("pagoda-server", "integration")]
# The second phase: the router's replica-starting binaries, in this order, in one lane; every
# other binary in the other.
ROUTER_LANE = [("pagoda-router", "pd"), ("pagoda-router", "router"), ("pagoda-router", "tenants")]


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

    def lanes(*groups):
        """Runs each group's binaries one after the other, the groups side by side."""
        def one_by_one(group):
            for b in group:
                run(b, results, lock)
        threads = [threading.Thread(target=one_by_one, args=(g,)) for g in groups]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def name(b):
        return (b[0], b[1])

    paired = [b for b in all_binaries if name(b) in SIDE_BY_SIDE]
    lanes(*[[b] for b in paired])
    router = sorted((b for b in all_binaries if name(b) in ROUTER_LANE),
                    key=lambda b: ROUTER_LANE.index(name(b)))
    lanes(router, [b for b in all_binaries if b not in paired and b not in router])
    failed = [f"{b[0]} {b[1]}" for b, code in results if code != 0]
    if failed:
        sys.exit("error: test binaries failed: " + ", ".join(failed))


if __name__ == "__main__":
    main()
