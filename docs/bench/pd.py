#!/usr/bin/env python3
"""PD under a mixed workload (issue 21), standard library only.

  pd.py URL SECONDS: 8 threads each stream greedy 64-token completions of a short prompt
  (ignore_eos, one after another) while another thread sends a distinct ~1,500-token prompt
  (max_tokens 8) every 2 s, for SECONDS. Prints the inter-token latency (gap between the
  streams' chunks after their first) p50/p99 and the long prompts' TTFT p50/p99.

Run by docs/bench/pd.sh against one replica and against the router over a prefill and a
decode replica.
"""
import http.client
import json
import os
import sys
import threading
import time
import urllib.parse

MODEL = "SmolLM2-135M-Instruct.Q4_1"
STREAMS = 8


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


def post(url, body):
    """POSTs a completion; returns the arrival time of every chunk, from the request."""
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", json.dumps(body), {"content-type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, (r.status, r.read())
    times = []
    while True:
        b = r.read1(65536) if body.get("stream") else r.read()
        if not b:
            break
        # One SSE event per token at most; a read may carry several.
        times.extend([time.perf_counter() - t0] * max(1, b.count(b"data: {")))
    c.close()
    return times


def main():
    url, secs = sys.argv[1], float(sys.argv[2])
    end = time.perf_counter() + secs
    gaps, ttfts, lock = [], [], threading.Lock()

    def stream(i):
        n = 0
        while time.perf_counter() < end:
            body = {"model": MODEL, "prompt": f"Stream {i}.{n}: tell a long story about rivers.",
                    "max_tokens": 64, "temperature": 0, "ignore_eos": True, "stream": True}
            t = post(url, body)
            n += 1
            with lock:
                gaps.extend(b - a for a, b in zip(t[1:], t[2:]) if b > a)

    def long_prompts():
        n = 0
        while time.perf_counter() < end:
            start = time.perf_counter()
            facts = " ".join(f"Fact {k} of set {n}: item {k * 7 + n} is filed under {k % 13}."
                             for k in range(int(os.environ.get("PD_LONG_FACTS", "110"))))
            t = post(url, {"model": MODEL, "prompt": facts + " Summarize:", "max_tokens": 8,
                           "temperature": 0, "stream": True})
            with lock:
                ttfts.append(t[0] if t else float("nan"))
            n += 1
            time.sleep(max(0.0, 2.0 - (time.perf_counter() - start)))

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(STREAMS)]
    threads.append(threading.Thread(target=long_prompts))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"ITL of {STREAMS} streams: p50 {pct(gaps, 50) * 1e3:.1f} ms, p99 {pct(gaps, 99) * 1e3:.1f} ms "
          f"({len(gaps)} gaps); long prompts: {len(ttfts)}, TTFT p50 {pct(ttfts, 50) * 1e3:.0f} ms, "
          f"p99 {pct(ttfts, 99) * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
