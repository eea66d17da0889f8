#!/usr/bin/env python3
"""Restart with the disk tier of the prefix cache (issue 20 part 3): time to first token of a
request whose 4,000-token prefix was cached before a restart, against a cold server.

For each round: a server on an empty --kv-disk-dir answers the prompt (cold: the whole prompt
is computed), is stopped with SIGTERM (it saves its cached blocks), and a new server on the
same directory answers the same prompt (warm: the prefix is read back from disk, the last
block's tokens are computed). The request is a /v1/completions call with token ids and
max_tokens 1, so its wall time is its time to first token. The servers' debug log has the
tier's read lines (blocks, MiB, ms), from which the read throughput is taken.

Usage (repository root):
  python3 docs/bench/kv_disk_restart.py --pagoda target/release/pagoda [--tokens 4000] [--rounds 3]
Standard library only.
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

MODEL = os.path.expanduser("~/.cache/pagoda/models/SmolLM2-135M-Instruct.Q4_1.gguf")


def post(url, body):
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def wait_ready(url, proc, timeout=300):
    start = time.time()
    while time.time() - start < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.1)
    raise RuntimeError("server never got ready")


def serve(pagoda, port, disk, log):
    env = dict(os.environ, PAGODA_LOG="info,pagoda_model::kv_disk=debug")
    args = [pagoda, "serve", "--model", MODEL, "--port", str(port), "--kv-cache-memory", "1GiB",
            "--max-model-len", "8192", "--kv-disk-dir", disk, "--kv-disk-size", "4GiB"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log, env=env)
    wait_ready(f"http://127.0.0.1:{port}/ready", proc)
    return proc


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)


def ttft(port, prompt):
    start = time.time()
    r = post(f"http://127.0.0.1:{port}/v1/completions",
             {"model": "SmolLM2-135M-Instruct.Q4_1", "prompt": prompt, "max_tokens": 1, "temperature": 0})
    return time.time() - start, r["usage"]["prompt_tokens_details"]["cached_tokens"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pagoda", required=True)
    ap.add_argument("--tokens", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--port", type=int, default=18431)
    a = ap.parse_args()
    colds, warms, reads = [], [], []
    for rnd in range(a.rounds):
        # Another prompt each round: no round reuses another's blocks.
        prompt = [1000 + (i * 37 + rnd * 101) % 20000 for i in range(a.tokens)]
        disk = tempfile.mkdtemp(prefix="pagoda-kv-disk-bench-")
        logpath = disk + ".log"
        with open(logpath, "w") as log:
            p = serve(a.pagoda, a.port, disk, log)
            try:
                cold, c0 = ttft(a.port, prompt)
            finally:
                stop(p)
            p = serve(a.pagoda, a.port, disk, log)
            try:
                warm, c1 = ttft(a.port, prompt)
            finally:
                stop(p)
        text = re.sub(r"\x1b\[[0-9;]*m", "", open(logpath).read())
        for m in re.finditer(r"KV disk tier: read.*?blocks=(\d+) mib=([\d.]+) ms=([\d.]+)", text):
            reads.append((int(m.group(1)), float(m.group(2)), float(m.group(3))))
        print(f"round {rnd}: cold {cold * 1e3:.0f} ms (cached {c0}), "
              f"after restart {warm * 1e3:.0f} ms (cached {c1}), ratio {warm / cold:.3f}")
        colds.append(cold)
        warms.append(warm)
        shutil.rmtree(disk, ignore_errors=True)
        os.remove(logpath)
    colds.sort()
    warms.sort()
    med = lambda v: v[len(v) // 2]
    print(f"median: cold {med(colds) * 1e3:.0f} ms, after restart {med(warms) * 1e3:.0f} ms, "
          f"ratio {med(warms) / med(colds):.3f}")
    for blocks, mib, ms in reads:
        print(f"tier read: {blocks} blocks, {mib:.1f} MiB in {ms:.1f} ms = {mib / (ms / 1e3):.0f} MiB/s")


if __name__ == "__main__":
    sys.exit(main())
