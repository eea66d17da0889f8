#!/usr/bin/env python3
"""Runs the test binaries `cargo test --no-run --message-format=json` built (read on stdin), as
`cargo test` would run them (each in its package's directory), two at a time.

Why: the suite is CPU-bound on 2 cores, and one binary at a time leaves a core idle whenever
its tests wait on sockets, replica processes or Python clients. Two lanes take jobs from one
queue, longest first (the model's and the server's binaries, then the router's), so the short
binaries fill whichever lane frees first and both cores stay busy to the end. The router's
three replica-starting binaries are one job, run one after the other: two of them side by side
overloaded the replicas they start (docs/testing.md). Every binary runs even if one fails
(cargo test stops at the first); each one's output is printed whole when it ends, and the exit
status is non-zero if any failed.
"""

import json
import os
import subprocess
import sys
import threading
import time

LANES = 2
# The queue's head, by (package, target) name: each inner list is one job, its binaries one
# after the other; every other binary follows as a job of its own, in cargo's order. Seventh
# round's times (docs/testing.md): model 257 s, server 224 s, the router's three 47 s, pagoda's
# 24 s.
FIRST = [
    [("pagoda-model-tests", "integration")],
    [("pagoda-server", "integration")],
    [("pagoda-router", "pd"), ("pagoda-router", "router"), ("pagoda-router", "tenants")],
    [("pagoda", "integration")],
]


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

    by_name = {(b[0], b[1]): b for b in all_binaries}
    jobs = [[by_name[n] for n in job if n in by_name] for job in FIRST]
    named = {b for job in jobs for b in job}
    jobs = [job for job in jobs if job] + [[b] for b in all_binaries if b not in named]
    queue = iter(jobs)

    def lane():
        while True:
            with lock:
                job = next(queue, None)
            if job is None:
                return
            for b in job:
                run(b, results, lock)

    threads = [threading.Thread(target=lane) for _ in range(LANES)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    failed = [f"{b[0]} {b[1]}" for b, code in results if code != 0]
    if failed:
        sys.exit("error: test binaries failed: " + ", ".join(failed))


if __name__ == "__main__":
    main()
