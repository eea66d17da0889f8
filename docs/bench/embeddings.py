#!/usr/bin/env python3
"""Embeddings throughput (issue 22): sentences/s of `POST /v1/embeddings` at batch 64 with
inputs of exactly 32 and 256 tokens, for MiniLM and EmbeddingGemma, and each server's load time
(start to /ready: conversion of the safetensors checkpoint with in-situ quantization included).

Each input is a long multilingual paragraph (varied per input so no two are equal) cut to its
last N tokens by `truncate_prompt_tokens`, so the lengths are exact in the model's own tokens.
One request carries the 64 inputs; the figure is the median over the rounds after one
warm-up. With --st, sentence-transformers runs the same texts cut to N tokens
(`max_seq_length = N`, batch_size 64) on the same CPU, if it imports; with --onnx also its ONNX
backend (`backend="onnx"`, exported once into /tmp/st-onnx-<model>) in f32 and dynamically
quantized to int8 (`export_dynamic_quantized_onnx_model(..., "avx2")`), if optimum and
onnxruntime import.

--latency N adds batch-1 latency: N requests of one 16-token query, one after another, p50 and
p99 in ms; pagoda's through HTTP on one kept-alive connection (`http.client`, as a client
library would), sentence-transformers' as `SentenceTransformer.encode([text])` in process.

Usage (repository root, release build):
  cargo build --release -p pagoda
  python3 docs/bench/embeddings.py --pagoda target/release/pagoda [--st] [--onnx] \
      [--rounds 5] [--latency 200]
Standard library only for the pagoda part.
"""

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request

MODELS = os.environ.get("PAGODA_MODEL_DIR", os.path.expanduser("~/.cache/pagoda/models"))
QUERY_TOKENS = 16
CHECKPOINTS = {"minilm": "all-MiniLM-L6-v2", "embeddinggemma": "embeddinggemma-300m"}
BASE = (
    "The river rose through the night, and by morning the old stone bridge stood alone in a wide "
    "brown lake. Les habitants regardaient l'eau monter sans rien dire. Am Nachmittag kamen die "
    "ersten Boote, und niemand wusste, wohin man die Tiere bringen sollte. "
)


def texts(n):
    return [f"{i} {i * 7919 % 1000}. " + BASE * 24 for i in range(n)]


def post(port, body):
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/embeddings",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def percentiles(ms):
    ms = sorted(ms)
    pick = lambda q: ms[min(len(ms) - 1, int(q * len(ms)))]
    return {"p50_ms": round(statistics.median(ms), 2), "p99_ms": round(pick(0.99), 2)}


def latency_pagoda(port, n):
    """n one-input requests of QUERY_TOKENS tokens on one kept-alive connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    body = json.dumps({"model": "m", "input": [texts(1)[0]],
                       "truncate_prompt_tokens": QUERY_TOKENS}).encode()
    ms = []
    for i in range(n + 10):
        t = time.perf_counter()
        conn.request("POST", "/v1/embeddings", body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        out = json.loads(r.read())
        if i >= 10:  # the first ten warm up
            ms.append((time.perf_counter() - t) * 1000)
    assert out["usage"]["prompt_tokens"] == QUERY_TOKENS, out["usage"]
    conn.close()
    return percentiles(ms)


def latency_st(m, n):
    m.max_seq_length = QUERY_TOKENS
    text = [texts(1)[0]]
    ms = []
    for i in range(n + 10):
        t = time.perf_counter()
        m.encode(text, batch_size=1)
        if i >= 10:
            ms.append((time.perf_counter() - t) * 1000)
    return percentiles(ms)


def wait_ready(port, proc, timeout=600):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            sys.exit(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit("server not ready")


def bench_pagoda(args, name, quantization, port):
    model = os.path.join(MODELS, CHECKPOINTS[name])
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [args.pagoda, "serve", "--model", model, "--port", str(port), "--quantization", quantization,
         "--served-model-name", "m"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **({"PAGODA_THREADS": str(args.threads)} if args.threads else {})},
    )
    try:
        wait_ready(port, proc)
        load = time.monotonic() - t0
        out = {"load_s": round(load, 2)}
        print(f"# {name} {quantization}: ready in {load:.2f} s", flush=True)
        batch = texts(args.batch)
        for n in map(int, args.lengths.split(",")):
            body = {"model": "m", "input": batch, "truncate_prompt_tokens": n}
            r = post(port, body)  # warm-up
            assert r["usage"]["prompt_tokens"] == n * args.batch, r["usage"]
            rates = []
            for _ in range(args.rounds):
                t = time.monotonic()
                post(port, body)
                rates.append(args.batch / (time.monotonic() - t))
            out[f"{n}_tok_sent_per_s"] = round(statistics.median(rates), 1)
            print(f"# {name} {quantization} {n} tokens: {out[f'{n}_tok_sent_per_s']} sentences/s", flush=True)
        if args.latency:
            out["query_16_tok"] = latency_pagoda(port, args.latency)
        return out
    finally:
        proc.terminate()
        proc.wait()


def load_st(name, backend):
    """A SentenceTransformer on `backend`: torch, onnx (f32) or onnx-int8."""
    from sentence_transformers import SentenceTransformer
    src = os.path.join(MODELS, CHECKPOINTS[name])
    if backend == "torch":
        return SentenceTransformer(src, device="cpu")
    from sentence_transformers import export_dynamic_quantized_onnx_model
    # Exported outside the model directory, once.
    d = f"/tmp/st-onnx-{name}"
    q8 = os.path.join(d, "onnx", "model_qint8_avx2.onnx")
    if not os.path.exists(q8):
        m = SentenceTransformer(src, backend="onnx")
        m.save_pretrained(d)
        export_dynamic_quantized_onnx_model(m, "avx2", d)
    file = "onnx/model_qint8_avx2.onnx" if backend == "onnx-int8" else "onnx/model.onnx"
    return SentenceTransformer(d, backend="onnx", model_kwargs={"file_name": file})


def bench_st(args, name, backend="torch"):
    try:
        import torch
        t0 = time.monotonic()
        m = load_st(name, backend)
    except Exception as e:  # ImportError, or an export the backend cannot do
        return {"error": f"{backend}: {type(e).__name__}: {e}"}
    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    out = {"backend": backend, "load_s": round(time.monotonic() - t0, 2),
           "torch": torch.__version__}
    batch = texts(args.batch)
    for n in map(int, args.lengths.split(",")):
        m.max_seq_length = n
        m.encode(batch, batch_size=args.batch)
        rates = []
        for _ in range(args.rounds):
            t = time.monotonic()
            m.encode(batch, batch_size=args.batch)
            rates.append(args.batch / (time.monotonic() - t))
        out[f"{n}_tok_sent_per_s"] = round(statistics.median(rates), 1)
    if args.latency:
        out["query_16_tok"] = latency_st(m, args.latency)
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--pagoda", required=True)
    p.add_argument("--models", default="minilm,embeddinggemma")
    p.add_argument("--quantization", default="q8_0,none")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lengths", default="32,256", help="input lengths in tokens")
    p.add_argument("--port", type=int, default=8391)
    p.add_argument("--st", action="store_true", help="also run sentence-transformers")
    p.add_argument("--onnx", action="store_true",
                   help="also sentence-transformers' ONNX backend, f32 and int8")
    p.add_argument("--threads", type=int, default=0,
                   help="compute threads of both engines (default: all cores)")
    p.add_argument("--latency", type=int, default=0,
                   help="batch-1 latency over this many 16-token queries")
    args = p.parse_args()
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    for name in args.models.split(","):
        for q in args.quantization.split(","):
            r = bench_pagoda(args, name, q, args.port)
            print(json.dumps({"engine": "pagoda", "model": name, "quantization": q, **r}), flush=True)
        backends = (["torch"] if args.st else []) + (["onnx", "onnx-int8"] if args.onnx else [])
        for backend in backends:
            r = bench_st(args, name, backend)
            print(json.dumps({"engine": "sentence-transformers", "model": name, **r}), flush=True)
    print(f"# load average after {os.getloadavg()[0]:.2f}")


main()
