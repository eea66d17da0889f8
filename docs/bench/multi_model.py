#!/usr/bin/env python3
"""Several models in one server (issue 34), release build, idle machine:

1. Time to the first token of a request whose model is not loaded (the file in the page
   cache: it was read just before) and of the same request once the model is loaded, for
   Qwen2.5-Coder-0.5B (a streamed chat) and MiniLM (one embedding).
2. Chat tokens/s (4 concurrent greedy requests of 128 tokens) and embeddings sentences/s (2
   clients, 32 sentences a request, base64 vectors) for 30 s each alone, then both at once on one server. The
   goal: chat_together/chat_alone + embed_together/embed_alone >= 0.9 (both loaded and busy
   lose no more than 10% of what the machine does for one of them alone).

With --llama-server PATH (a llama-server built outside the project, see REFERENCES.md), part 1
also runs llama.cpp's router mode (`--models-dir` over a directory holding the Qwen file): the
same request that loads the model (a child llama-server process) and once it is loaded.

Usage (repository root):
  cargo build --release -p pagoda
  python3 docs/bench/multi_model.py --pagoda target/release/pagoda [--seconds 30] [--llama-server PATH]
Standard library only.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request

MODELS = os.environ.get("PAGODA_MODEL_DIR", os.path.expanduser("~/.cache/pagoda/models"))
QWEN = os.path.join(MODELS, "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
MINILM = os.path.join(MODELS, "all-MiniLM-L6-v2")
SENTENCE = "A server that keeps a chat model and an embedding model side by side, number {}."


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, path, body, stream=False):
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    return urllib.request.urlopen(req, timeout=600)


def start(pagoda, models, extra=()):
    port = free_port()
    args = [pagoda, "serve", "--port", str(port), "--kv-cache-memory", "1GiB"]
    for m in models:
        args += ["--model", m]
    proc = subprocess.Popen([*args, *extra], stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2).status == 200:
                return proc, port
        except Exception:
            time.sleep(0.1)
    proc.kill()
    sys.exit("the server did not become ready")


def warm_file(path):
    """Reads a model's files once, so a load finds them in the page cache."""
    paths = [path] if os.path.isfile(path) else [os.path.join(path, f) for f in os.listdir(path)]
    for p in paths:
        if os.path.isfile(p):
            with open(p, "rb") as f:
                while f.read(1 << 24):
                    pass


def ttft_chat(port, model):
    t = time.time()
    body = {"model": model, "stream": True, "max_tokens": 1, "temperature": 0,
            "messages": [{"role": "user", "content": "Say hi."}]}
    with post(port, "/v1/chat/completions", body) as r:
        for line in r:
            if line.startswith(b"data: {"):
                choices = json.loads(line[6:]).get("choices") or [{}]
                if choices[0].get("delta", {}).get("content"):
                    return time.time() - t
    return time.time() - t


def time_embed(port, model):
    t = time.time()
    post(port, "/v1/embeddings", {"model": model, "input": "hello"}).read()
    return time.time() - t


def first_token_times(pagoda):
    out = {}
    # Qwen loads on its first request (MiniLM is the default, loaded at start-up).
    warm_file(QWEN)
    proc, port = start(pagoda, [MINILM, QWEN])
    try:
        model = os.path.basename(QWEN)[: -len(".gguf")]
        out["qwen_loading_s"] = ttft_chat(port, model)
        out["qwen_loaded_s"] = min(ttft_chat(port, model) for _ in range(5))
    finally:
        proc.terminate()
        proc.wait()
    warm_file(MINILM)
    proc, port = start(pagoda, [QWEN, MINILM])
    try:
        model = os.path.basename(MINILM)
        out["minilm_loading_s"] = time_embed(port, model)
        out["minilm_loaded_s"] = min(time_embed(port, model) for _ in range(5))
    finally:
        proc.terminate()
        proc.wait()
    return out


def llama_router_times(binary):
    """llama-server's router mode: TTFT of the request that loads Qwen, then once loaded."""
    import tempfile
    d = tempfile.mkdtemp()
    os.symlink(QWEN, os.path.join(d, os.path.basename(QWEN)))
    warm_file(QWEN)
    port = free_port()
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(binary))
    proc = subprocess.Popen([binary, "--models-dir", d, "--port", str(port)], env=env,
                            stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except Exception:
                time.sleep(0.1)
        model = os.path.basename(QWEN)[: -len(".gguf")]
        return {"llama_router_qwen_loading_s": ttft_chat(port, model),
                "llama_router_qwen_loaded_s": min(ttft_chat(port, model) for _ in range(5))}
    finally:
        proc.terminate()
        proc.wait()


def chat_worker(port, model, stop, counts):
    body = {"model": model, "max_tokens": 128, "temperature": 0, "ignore_eos": True,
            "messages": [{"role": "user", "content": "Write a long story about a river."}]}
    while not stop.is_set():
        v = json.loads(post(port, "/v1/chat/completions", body).read())
        counts.append(v["usage"]["completion_tokens"])


def embed_worker(port, model, stop, counts):
    n = 0
    while not stop.is_set():
        batch = [SENTENCE.format(n + i) for i in range(32)]
        n += 32
        # base64: the client decodes nothing, so its CPU stays out of the server's way.
        body = {"model": model, "input": batch, "encoding_format": "base64"}
        post(port, "/v1/embeddings", body).read()
        counts.append(32)


def counter(port, name, model):
    """A `model_name`-labelled counter of the server's /metrics."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    prefix = f'{name}{{model_name="{model}"}} '
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix):])
    return 0.0


def run_load(port, seconds, chat_model=None, embed_model=None):
    stop = threading.Event()
    chat_counts, embed_counts = [], []
    threads = []
    if chat_model:
        threads += [threading.Thread(target=chat_worker, args=(port, chat_model, stop, chat_counts))
                    for _ in range(4)]
    if embed_model:
        threads += [threading.Thread(target=embed_worker, args=(port, embed_model, stop, embed_counts))
                    for _ in range(2)]
    for t in threads:
        t.start()
    # Counted by the server (tokens generated, sentences embedded) over a window that starts
    # once every client is running.
    def read():
        c = counter(port, "pagoda:generation_tokens_total", chat_model) if chat_model else 0.0
        e = counter(port, "pagoda:embedding_inputs_total", embed_model) if embed_model else 0.0
        return c, e, time.time()
    time.sleep(3)
    c0, e0, t0 = read()
    time.sleep(seconds)
    c1, e1, t1 = read()
    stop.set()
    for t in threads:
        t.join()
    return (c1 - c0) / (t1 - t0), (e1 - e0) / (t1 - t0)


def throughput(pagoda, seconds):
    proc, port = start(pagoda, [QWEN, MINILM], ["--preload", os.path.basename(MINILM)])
    try:
        qwen = os.path.basename(QWEN)[: -len(".gguf")]
        minilm = os.path.basename(MINILM)
        chat_alone, _ = run_load(port, seconds, chat_model=qwen)
        _, embed_alone = run_load(port, seconds, embed_model=minilm)
        chat_both, embed_both = run_load(port, seconds, chat_model=qwen, embed_model=minilm)
    finally:
        proc.terminate()
        proc.wait()
    return {
        "chat_alone_tok_s": chat_alone,
        "embed_alone_sent_s": embed_alone,
        "chat_together_tok_s": chat_both,
        "embed_together_sent_s": embed_both,
        "sum_of_fractions": chat_both / chat_alone + embed_both / embed_alone,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pagoda", default="target/release/pagoda")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--llama-server", help="a llama-server binary with router mode")
    args = ap.parse_args()
    result = first_token_times(args.pagoda)
    if args.llama_server:
        result.update(llama_router_times(args.llama_server))
    result.update(throughput(args.pagoda, args.seconds))
    for k, v in result.items():
        print(f"{k:24} {v:10.3f}")


if __name__ == "__main__":
    main()
