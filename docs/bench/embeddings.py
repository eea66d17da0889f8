#!/usr/bin/env python3
"""Embeddings throughput (issue 22): sentences/s of `POST /v1/embeddings` at batch 64 with
inputs of exactly 32 and 256 tokens, for MiniLM and EmbeddingGemma, and each server's load time
(start to /ready: conversion of the safetensors checkpoint with in-situ quantization included).

Each input is a long multilingual paragraph (varied per input so no two are equal) cut to its
last N tokens by `truncate_prompt_tokens`, so the lengths are exact in the model's own tokens.
One request carries the 64 inputs; the figure is the median over the rounds after one
warm-up. With --st, sentence-transformers runs the same texts cut to N tokens
(`max_seq_length = N`, batch_size 64) on the same CPU, if it imports. With --onnx also its ONNX
backend (`backend="onnx"`, exported once into ~/.cache/pagoda/st-onnx/) in f32 and dynamically
quantized to int8 (`export_dynamic_quantized_onnx_model(..., "avx2")`, the efficiency docs'
recipe for a CPU without VNNI), onnxruntime on --threads threads; each ONNX row also gives its
lowest cosine to torch's f32 embedding over the test sentences and the 32-token inputs. That
needs a sentence-transformers whose `[onnx]` extra installs (docs/benchmarks.md, "ONNX": its
own virtual environment).

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


def onnx_dir(name):
    """Where the ONNX exports of a checkpoint live: outside the model directory and the
    repository, one directory per sentence-transformers version (its exporter's output)."""
    import sentence_transformers
    return os.path.join(os.path.expanduser("~/.cache/pagoda/st-onnx"),
                        f"{CHECKPOINTS[name]}-st{sentence_transformers.__version__}")


def load_st(name, backend, threads):
    """A SentenceTransformer on `backend`: torch, onnx (f32) or onnx-int8 (exported and
    quantized once, then loaded from the export)."""
    from sentence_transformers import SentenceTransformer
    src = os.path.join(MODELS, CHECKPOINTS[name])
    if backend == "torch":
        return SentenceTransformer(src, device="cpu")
    import glob
    import onnxruntime
    from sentence_transformers import export_dynamic_quantized_onnx_model
    d = onnx_dir(name)
    if not os.path.exists(os.path.join(d, "onnx", "model.onnx")):
        m = SentenceTransformer(src, backend="onnx")  # optimum's exporter, opset as it picks
        m.save_pretrained(d)
    # The efficiency docs' CPU recipe: dynamic (no calibration) int8, the "avx2" config
    # (u8 weights, per tensor); it names the file model_quint8_avx2.onnx.
    if not glob.glob(os.path.join(d, "onnx", "model_*_avx2.onnx")):
        export_dynamic_quantized_onnx_model(SentenceTransformer(d, backend="onnx"), "avx2", d)
    if backend == "onnx-int8":
        file = os.path.relpath(glob.glob(os.path.join(d, "onnx", "model_*_avx2.onnx"))[0], d)
    else:
        file = "onnx/model.onnx"
    # onnxruntime keeps its own thread pool: torch.set_num_threads does not reach it.
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return SentenceTransformer(d, backend="onnx",
                               model_kwargs={"file_name": file, "session_options": so})


SENTENCES = [  # the encoders' numpy-reference test sentences (crates/model/tests/embeddings.rs)
    "A man is playing a guitar.",
    "Someone is playing an acoustic guitar on stage.",
    "The stock market fell sharply this morning.",
    "Le chat dort sur le canapé.",
    "Die Katze schläft auf dem Sofa.",
    "El gato duerme en el sofá.",
    "猫はソファの上で寝ています。",
    "猫在沙发上睡觉。",
    "Кошка спит на диване.",
    "How do I reset my password?",
    "I forgot my password and cannot log in.",
    "Photosynthesis converts light energy into chemical energy.",
]


def worst_cosine(m, reference):
    """The lowest cosine between `m`'s embedding of each test sentence and `reference`'s
    (torch f32), and of the bench's 32-token inputs."""
    import numpy as np
    worst = 1.0
    for inputs, n in ((SENTENCES, 128), (texts(64), 32)):
        m.max_seq_length = reference.max_seq_length = n
        a = m.encode(inputs, batch_size=64, normalize_embeddings=True)
        b = reference.encode(inputs, batch_size=64, normalize_embeddings=True)
        worst = min(worst, float(np.min(np.sum(a * b, axis=1))))
    return round(worst, 6)


def bench_st(args, name, backend="torch"):
    threads = args.threads or os.cpu_count() or 1
    try:
        import torch
        torch.set_num_threads(threads)
        t0 = time.monotonic()
        m = load_st(name, backend, threads)
    except Exception as e:  # ImportError, or an export the backend cannot do
        return {"backend": backend, "error": f"{type(e).__name__}: {e}"}
    out = {"backend": backend, "load_s": round(time.monotonic() - t0, 2),
           "torch": torch.__version__}
    if backend != "torch":
        import onnxruntime
        out["onnxruntime"] = onnxruntime.__version__
        out["min_cosine_to_torch_f32"] = worst_cosine(m, load_st(name, "torch", threads))
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
    p.add_argument("--pagoda", help="the binary (none: only the sentence-transformers rows)")
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
        for q in args.quantization.split(",") if args.pagoda else []:
            r = bench_pagoda(args, name, q, args.port)
            print(json.dumps({"engine": "pagoda", "model": name, "quantization": q, **r}), flush=True)
        backends = (["torch"] if args.st else []) + (["onnx", "onnx-int8"] if args.onnx else [])
        for backend in backends:
            r = bench_st(args, name, backend)
            print(json.dumps({"engine": "sentence-transformers", "model": name, **r}), flush=True)
    print(f"# load average after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
