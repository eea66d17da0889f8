#!/usr/bin/env python3
"""pagoda's LoRA against llama.cpp's `--lora` on the same GGUF adapter (SmolLM2, a rank-16
adapter on q/k/v/o made by make-lora.py), on the golden prompts teacher-forced as in
kv_dtype_fidelity.py: the top-5 distance of pagoda-with-adapter from llama.cpp-with-adapter,
beside the distance of the two base models (the bar: no larger).

Usage (repository root):
  python3 docs/bench/lora_crosscheck.py --pagoda target/release/pagoda \
      --llama-server /tmp/llamacpp/build/bin/llama-server [--adapter /tmp/lora-bench/a0.gguf]
"""

import argparse
import json
import math
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kv_dtype_fidelity import GOLDEN, compare, pagoda_top5, post, run_server  # noqa: E402

MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"


def llama_top5(port, ctx):
    """llama-server's top-5, keyed by token text as pagoda's OpenAI-shaped top_logprobs are."""
    r = post(f"http://127.0.0.1:{port}/completion",
             {"prompt": ctx, "n_predict": 1, "temperature": 0, "top_k": 1, "n_probs": 5,
              "post_sampling_probs": False, "cache_prompt": True})
    probs = r.get("completion_probabilities") or [{}]
    # Nothing when the one token it sampled ended the reply: that position is left out.
    return {t["token"]: math.exp(t["logprob"]) for t in probs[0].get("top_logprobs", [])}


def both(ref, test):
    """Positions where both sides gave probabilities."""
    pairs = [(r, t) for r, t in zip(ref, test) if r and t]
    return [r for r, _ in pairs], [t for _, t in pairs]
GOLD = "smollm2-135m-q4_1.json"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pagoda", required=True)
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("--adapter", default="/tmp/lora-bench/a0.gguf")
    ap.add_argument("--threads", default="2")
    ap.add_argument("--port", type=int, default=18741)
    ap.add_argument("--b-scale", default="0.02", help="B's range when the adapter is made here")
    args = ap.parse_args()
    model = os.path.join(os.path.expanduser("~/.cache/pagoda/models"), MODEL)
    if not os.path.exists(args.adapter):
        here = os.path.dirname(os.path.abspath(__file__))
        subprocess.run([sys.executable, os.path.join(here, "make-lora.py"), model, args.adapter,
                        "--rank", "16", "--seed", "0", "--b-scale", args.b_scale], check=True)
    golden = json.load(open(os.path.join(GOLDEN, GOLD)))
    port = args.port
    pagoda = [args.pagoda, "serve", "--model", model, "--port", str(port), "--threads",
              args.threads, "--kv-cache-memory", "256MiB", "--served-model-name", "m",
              "--lora-modules", f"a={args.adapter}"]
    llama = [args.llama_server, "-m", model, "--port", str(port), "--host", "127.0.0.1",
             "-t", args.threads, "-c", "4096", "-np", "1"]
    ready_p, ready_l = f"http://127.0.0.1:{port}/ready", f"http://127.0.0.1:{port}/health"
    runs = {
        "pagoda_base": run_server(pagoda, ready_p, lambda c: pagoda_top5(port, c, "m"), golden),
        "pagoda_lora": run_server(pagoda, ready_p, lambda c: pagoda_top5(port, c, "a"), golden),
        "llama_base": run_server(llama, ready_l, lambda c: llama_top5(port, c), golden),
        "llama_lora": run_server(llama + ["--lora", args.adapter], ready_l,
                                 lambda c: llama_top5(port, c), golden),
    }
    result = {
        "base: pagoda vs llama.cpp": compare(*both(runs["llama_base"], runs["pagoda_base"])),
        "adapter: pagoda vs llama.cpp": compare(*both(runs["llama_lora"], runs["pagoda_lora"])),
        "adapter effect (llama.cpp lora vs base)":
            compare(*both(runs["llama_base"], runs["llama_lora"])),
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
