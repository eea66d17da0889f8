#!/usr/bin/env python3
"""Embeddings throughput (issue 22): sentences/s of `POST /v1/embeddings` at batch 64 with
inputs of exactly 32 and 256 tokens, for MiniLM and EmbeddingGemma, and each server's load time
(start to /ready: conversion of the safetensors checkpoint with in-situ quantization included).

Each input is a long multilingual paragraph (varied per input so no two are equal) cut to its
last N tokens by `truncate_prompt_tokens`, so the lengths are exact in the model's own tokens.
One request carries the 64 inputs (one forward pass); the figure is the median over the rounds
after one warm-up. With --st, sentence-transformers runs the same texts cut to N tokens
(`max_seq_length = N`, batch_size 64) on the same CPU, if it imports.

Usage (repository root, release build):
  cargo build --release -p pagoda
  python3 docs/bench/embeddings.py --pagoda target/release/pagoda [--st] [--rounds 5]
Standard library only for the pagoda part.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request

MODELS = os.environ.get("PAGODA_MODEL_DIR", os.path.expanduser("~/.cache/pagoda/models"))
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
        return out
    finally:
        proc.terminate()
        proc.wait()


def bench_st(args, name):
    try:
        import torch
        from sentence_transformers import SentenceTransformer
    except ImportError as e:
        return {"error": f"sentence-transformers does not import: {e}"}
    torch.set_num_threads(os.cpu_count() or 1)
    t0 = time.monotonic()
    m = SentenceTransformer(os.path.join(MODELS, CHECKPOINTS[name]), device="cpu")
    out = {"load_s": round(time.monotonic() - t0, 2), "torch": torch.__version__}
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
    args = p.parse_args()
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    for name in args.models.split(","):
        for q in args.quantization.split(","):
            r = bench_pagoda(args, name, q, args.port)
            print(json.dumps({"engine": "pagoda", "model": name, "quantization": q, **r}), flush=True)
        if args.st:
            r = bench_st(args, name)
            print(json.dumps({"engine": "sentence-transformers", "model": name, **r}), flush=True)
    print(f"# load average after {os.getloadavg()[0]:.2f}")


main()
