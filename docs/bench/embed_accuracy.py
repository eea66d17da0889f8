#!/usr/bin/env python3
"""Each engine's embeddings of the encoders' 12 test sentences (crates/model/tests/embeddings.rs)
against pagoda's exact f32 ones (`--quantization none`, over HTTP): the lowest cosine per engine,
for pagoda q8_0, sentence-transformers on torch f32, and its ONNX f32 and int8 exports (those
docs/bench/embeddings.py --onnx wrote into ~/.cache/pagoda/st-onnx/); and how much an ONNX
vector depends on the batch it ran in (int8's activation scales are per tensor). Runs in the ONNX virtual
environment of docs/benchmarks.md ("sentence-transformers' ONNX backend").

Usage: ~/.cache/pagoda/onnx-venv/bin/python docs/bench/embed_accuracy.py target/release/pagoda \
           all-MiniLM-L6-v2      (or embeddinggemma-300m)
"""

import json
import os
import subprocess
import sys
import time
import urllib.request

import numpy as np
import sentence_transformers
from sentence_transformers import SentenceTransformer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from embeddings import SENTENCES  # noqa: E402 - one list of the test sentences
PORT = 8411


def pagoda(binary, src, quantization):
    proc = subprocess.Popen(
        [binary, "serve", "--model", src, "--port", str(PORT), "--quantization", quantization,
         "--served-model-name", "m"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(3000):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{PORT}/ready", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        req = urllib.request.Request(
            f"http://127.0.0.1:{PORT}/v1/embeddings",
            data=json.dumps({"model": "m", "input": SENTENCES}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            return np.array([e["embedding"] for e in json.loads(r.read())["data"]])
    finally:
        proc.terminate()
        proc.wait()


def main():
    binary, checkpoint = sys.argv[1], sys.argv[2]
    models = os.environ.get("PAGODA_MODEL_DIR", os.path.expanduser("~/.cache/pagoda/models"))
    src = os.path.join(models, checkpoint)
    onnx = os.path.expanduser(
        f"~/.cache/pagoda/st-onnx/{checkpoint}-st{sentence_transformers.__version__}")
    ref = pagoda(binary, src, "none")
    engines = {
        "pagoda q8_0": pagoda(binary, src, "q8_0"),
        "torch f32": SentenceTransformer(src, device="cpu").encode(SENTENCES),
    }
    for file, name in (("onnx/model.onnx", "ONNX f32"), ("onnx/model_quint8_avx2.onnx", "ONNX int8")):
        m = SentenceTransformer(onnx, backend="onnx", model_kwargs={"file_name": file})
        engines[name] = m.encode(SENTENCES)
        # Batch dependence: each of four sentences alone against the same four in one batch.
        four = SENTENCES[:4]
        alone = np.stack([m.encode([t])[0] for t in four])
        cos = (alone * m.encode(four)).sum(1)
        print(f"{checkpoint}: {name}, alone against in a batch of four: lowest cosine "
              f"{cos.min():.6f}")
    for name, e in engines.items():
        cos = (e * ref).sum(1) / np.linalg.norm(e, axis=1) / np.linalg.norm(ref, axis=1)
        print(f"{checkpoint}: {name} against pagoda f32: lowest cosine {cos.min():.6f} "
              f"(distance {1 - cos.min():.2e})")


main()
