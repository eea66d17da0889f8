#!/usr/bin/env python3
"""Fidelity of a quantized KV cache against f16 KV, for pagoda and for llama.cpp, on the golden
prompts (/work/shared/golden/*.json).

Every position of every golden prompt is teacher-forced: the context is the prompt's tokens plus
llama.cpp's recorded greedy completion up to that position, and one greedy token is asked for
with its top-5 probabilities. The same contexts go to each server, one server at a time, so a
quantized run and its f16 run see identical inputs. Per position the distance is
sum over the union of both top-5 sets of |p_quant - p_f16| (a token missing from one top-5
counts as 0 there), and top-1 agreement is whether the argmax is the same.

Usage (repository root):
  python3 docs/bench/kv_dtype_fidelity.py --pagoda target/release/pagoda \
      --llama-server /tmp/llamacpp/build/bin/llama-server [--models smollm2,gemma3,qwen]
llama.cpp is built outside the project; pass its llama-server. Standard library only.
"""

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time
import urllib.request

GOLDEN = "/work/shared/golden"
MODELS = {
    "smollm2": ("SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2-135m-q4_1.json"),
    "gemma3": ("gemma-3-270m-q4_k_m.gguf", "gemma3-270m-q4_k_m.json"),
    "qwen": ("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "qwen2.5-coder-0.5b-instruct-q4_k_m.json"),
}


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
        time.sleep(0.5)
    raise RuntimeError("server not ready")


def contexts(golden):
    """(prompt id, position, context token ids) for every teacher-forced position."""
    for p in golden["prompts"]:
        prompt = p["tokens"]["add_special_true"]
        done = p["completion_token_ids"]
        for i in range(len(done)):
            yield p["id"], i, prompt + done[:i]


def pagoda_top5(port, ctx, model="m"):
    r = post(
        f"http://127.0.0.1:{port}/v1/completions",
        {
            "model": model,
            "prompt": ctx,
            "max_tokens": 1,
            "temperature": 0,
            "logprobs": 5,
        },
    )
    top = r["choices"][0]["logprobs"]["top_logprobs"][0]
    return {tok: math.exp(lp) for tok, lp in top.items()}


def llama_top5(port, ctx):
    r = post(
        f"http://127.0.0.1:{port}/completion",
        {
            "prompt": ctx,
            "n_predict": 1,
            "temperature": 0,
            "top_k": 1,
            "n_probs": 5,
            "post_sampling_probs": False,
            "cache_prompt": True,
        },
    )
    top = r["completion_probabilities"][0]["top_logprobs"]
    return {str(t["id"]): math.exp(t["logprob"]) for t in top}


def run_server(cmd, ready_url, ask, golden):
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(ready_url, proc)
        return [ask(ctx) for _, _, ctx in contexts(golden)]
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def distance(a, b):
    keys = set(a) | set(b)
    return sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in keys)


def top1(d):
    return max(d.items(), key=lambda kv: kv[1])[0]


def compare(ref, test):
    ds = [distance(r, t) for r, t in zip(ref, test)]
    agree = sum(top1(r) == top1(t) for r, t in zip(ref, test))
    return {
        "positions": len(ds),
        "mean_top5_distance": sum(ds) / len(ds),
        "max_top5_distance": max(ds),
        "top1_agreement": agree / len(ds),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pagoda", required=True)
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("--models", default="smollm2,gemma3,qwen")
    ap.add_argument("--threads", default="2")
    ap.add_argument("--port", type=int, default=18731)
    ap.add_argument("--out", default="/tmp/kv_dtype_fidelity.json")
    args = ap.parse_args()
    model_dir = os.path.expanduser("~/.cache/pagoda/models")
    results = {}
    for name in args.models.split(","):
        file, gold = MODELS[name]
        model = os.path.join(model_dir, file)
        golden = json.load(open(os.path.join(GOLDEN, gold)))
        port = args.port
        runs = {}
        for dtype in ["f16", "int8"]:
            cmd = [args.pagoda, "serve", "--model", model, "--port", str(port),
                   "--threads", args.threads, "--kv-cache-memory", "256MiB", "--served-model-name", "m",
                   "--kv-cache-dtype", dtype]
            runs[f"pagoda_{dtype}"] = run_server(
                cmd, f"http://127.0.0.1:{port}/ready", lambda c: pagoda_top5(port, c), golden)
            print(f"{name} pagoda {dtype} done", file=sys.stderr)
        for ctk in ["f16", "q8_0"]:
            cmd = [args.llama_server, "-m", model, "--port", str(port), "--host", "127.0.0.1",
                   "-t", args.threads, "-c", "4096", "-np", "1", "-fa", "on",
                   "-ctk", ctk, "-ctv", ctk]
            runs[f"llama_{ctk}"] = run_server(
                cmd, f"http://127.0.0.1:{port}/health", lambda c: llama_top5(port, c), golden)
            print(f"{name} llama.cpp {ctk} done", file=sys.stderr)
        results[name] = {
            "pagoda int8 vs f16": compare(runs["pagoda_f16"], runs["pagoda_int8"]),
            "llama.cpp q8_0 vs f16": compare(runs["llama_f16"], runs["llama_q8_0"]),
        }
        print(json.dumps({name: results[name]}, indent=1))
    json.dump(results, open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
