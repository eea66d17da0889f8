#!/usr/bin/env python3
"""Per-request overhead of each API against Chat Completions, for the same prompt.

Sends the same one-message conversation, greedy, one output token, through
/v1/chat/completions, /v1/messages and /v1/responses of a running server, sequentially over
one keep-alive connection, interleaved (chat, messages, responses, chat, ...) so drift hits
all three alike. Every request renders to the same prompt tokens (checked), so the engine
does the same work (a prefix-cache hit after the first); what differs is each API's
validation, conversion and formatting. Prints the median and mean latency of each, and the
difference to chat. Streaming is measured the same way (time to the last byte).

Usage: scripts/api-overhead.py --base-url http://127.0.0.1:8000 --model NAME [--n 200]
"""

import argparse
import statistics
import time

import httpx

PROMPT = "Name three colors."


def bodies(model, stream):
    msgs = [{"role": "user", "content": PROMPT}]
    return {
        "chat": ("/v1/chat/completions",
                 {"model": model, "messages": msgs, "max_tokens": 1, "temperature": 0,
                  "stream": stream}),
        "messages": ("/v1/messages",
                     {"model": model, "messages": msgs, "max_tokens": 1, "temperature": 0,
                      "stream": stream}),
        "responses": ("/v1/responses",
                      {"model": model, "input": PROMPT, "max_output_tokens": 1,
                       "temperature": 0, "stream": stream, "store": False}),
    }


def prompt_tokens(name, r):
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        return None
    v = r.json()
    if name == "chat":
        return v["usage"]["prompt_tokens"]
    if name == "messages":
        u = v["usage"]
        return u["input_tokens"] + u.get("cache_read_input_tokens", 0)
    return v["usage"]["input_tokens"]


def run(client, base, model, n, stream):
    reqs = bodies(model, stream)
    times = {k: [] for k in reqs}
    counts = {}
    for i in range(n + 5):
        for name, (path, body) in reqs.items():
            t = time.perf_counter()
            r = client.post(base + path, json=body)
            r.read()
            dt = time.perf_counter() - t
            if r.status_code != 200:
                raise SystemExit(f"{name}: {r.status_code} {r.text}")
            counts[name] = prompt_tokens(name, r)
            if i >= 5:  # warm-up
                times[name].append(dt * 1000)
    if not stream and len(set(counts.values())) != 1:
        raise SystemExit(f"the APIs rendered different prompts: {counts}")
    base_med = statistics.median(times["chat"])
    print(f"{'stream' if stream else 'json'}: n={n} per API, prompt tokens {counts.get('chat')}")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"  {name:9s} median {med:7.2f} ms  mean {statistics.mean(ts):7.2f} ms"
              f"  vs chat {med - base_med:+6.2f} ms")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--base-url", default="http://127.0.0.1:8000")
    p.add_argument("--model", required=True)
    p.add_argument("--n", type=int, default=200)
    args = p.parse_args()
    with httpx.Client(timeout=60.0) as client:
        for stream in (False, True):
            run(client, args.base_url.rstrip("/"), args.model, args.n, stream)


if __name__ == "__main__":
    main()
