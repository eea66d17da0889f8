#!/usr/bin/env python3
"""Router measurements (issue 21), standard library only.

  overhead  URL_DIRECT URL_ROUTER: per-request latency (max_tokens 1, non-streamed) and, for
            greedy 64-token streams, TTFT and the gap between chunks, each p50/p99, direct
            against through the router, sequential (one request at a time).
  prefix    URL_ROUTER: 16 distinct ~1,500-token system prompts x 4 requests each in random
            order (seeded), CONCURRENCY at a time; prints the prefix-cache hit rate (cached /
            prompt tokens, from usage.prompt_tokens_details), the ideal (every request after a
            prompt's first hits its system prompt) and TTFT p50/p99.

Run by docs/bench/router.sh, which starts the replicas and routers.
"""
import http.client
import json
import random
import re
import sys
import threading
import time
import urllib.parse

MODEL = "SmolLM2-135M-Instruct.Q4_1"


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


TOKEN = re.compile(rb'"(content|text)":"[^"]')


def request(url, path, body):
    """POSTs body; returns (seconds to the first generated text: the first chunk carrying
    non-empty `content`/`text`, or the whole body when not streamed; [seconds of each chunk];
    text)."""
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", path, json.dumps(body), {"content-type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, (r.status, r.read())
    times, chunks, first = [], [], None
    while True:
        b = r.read1(65536) if body.get("stream") else r.read()
        if not b:
            break
        times.append(time.perf_counter() - t0)
        chunks.append(b)
        if first is None and (TOKEN.search(b) or not body.get("stream")):
            first = times[-1]
        if not body.get("stream"):
            break
    c.close()
    return first if first is not None else times[-1], times, b"".join(chunks).decode()


def overhead(direct, router):
    short = {"model": MODEL, "prompt": "Hi", "max_tokens": 1, "temperature": 0}
    stream = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 64,
              "temperature": 0, "ignore_eos": True, "stream": True}
    for name, url in (("direct", direct), ("router", router)):
        for _ in range(3):  # warm connections and caches
            request(url, "/v1/completions", short)
    # Direct and routed requests alternate, so load from elsewhere falls on both alike.
    res = {"direct": ([], [], []), "router": ([], [], [])}
    for _ in range(40):
        for name, url in (("direct", direct), ("router", router)):
            t, _, _ = request(url, "/v1/completions", short)
            res[name][0].append(t)
    for _ in range(8):
        for name, url in (("direct", direct), ("router", router)):
            t, times, _ = request(url, "/v1/completions", stream)
            res[name][1].append(t)
            res[name][2].extend(b - a for a, b in zip(times, times[1:]))
    for what, i in (("request (max_tokens 1)", 0), ("stream TTFT", 1), ("chunk gap", 2)):
        d, r = res["direct"][i], res["router"][i]
        print(f"{what:24} direct p50 {pct(d, 50)*1e3:7.2f} ms p99 {pct(d, 99)*1e3:7.2f} ms | "
              f"router p50 {pct(r, 50)*1e3:7.2f} ms p99 {pct(r, 99)*1e3:7.2f} ms | "
              f"added p50 {(pct(r, 50)-pct(d, 50))*1e3:+.2f} ms p99 {(pct(r, 99)-pct(d, 99))*1e3:+.2f} ms")


def system_prompt(i):
    rnd = random.Random(i)
    words = ["garden", "orbit", "river", "engine", "violin", "harbor", "lantern", "meadow",
             "circuit", "glacier", "compass", "pepper", "thunder", "marble", "falcon", "cedar"]
    text = f"You are assistant number {i}. "
    # ~1,500 tokens of distinct rules.
    for k in range(150):
        text += f"Rule {k}: {rnd.choice(words)} {rnd.choice(words)} {rnd.choice(words)}. "
    return text


def prefix(router, concurrency):
    prompts = [system_prompt(i) for i in range(16)]
    jobs = [(p, q) for p in range(16) for q in range(4)]
    random.Random(21).shuffle(jobs)
    lock = threading.Lock()
    results = []

    def worker():
        while True:
            with lock:
                if not jobs:
                    return
                p, q = jobs.pop()
            body = {"model": MODEL, "max_tokens": 4, "temperature": 0, "stream": True,
                    "stream_options": {"include_usage": True},
                    "messages": [{"role": "system", "content": prompts[p]},
                                 {"role": "user", "content": f"Question {q}?"}]}
            t, _, text = request(router, "/v1/chat/completions", body)
            usage = [json.loads(l[6:])["usage"] for l in text.split("\n")
                     if l.startswith("data: {") and '"usage":{' in l][-1]
            with lock:
                results.append((p, t, usage["prompt_tokens"],
                                (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    prompt = sum(r[2] for r in results)
    cached = sum(r[3] for r in results)
    # Ideal: a prompt's first request misses, the other three hit its whole system prompt
    # (block-aligned); the user turn never hits. Approximated per prompt by its best hit.
    ideal = sum(3 * max(r[3] for r in results if r[0] == p) for p in range(16))
    ttft = [r[1] for r in results]
    print(f"{len(results)} requests in {wall:.1f} s: hit rate {cached / prompt:.1%} "
          f"(cached {cached} of {prompt} prompt tokens; {cached / max(ideal, 1):.1%} of the ideal "
          f"{ideal}); TTFT p50 {pct(ttft, 50):.2f} s p99 {pct(ttft, 99):.2f} s")


if __name__ == "__main__":
    if sys.argv[1] == "overhead":
        overhead(sys.argv[2], sys.argv[3])
    else:
        prefix(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 4)
