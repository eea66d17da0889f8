"""An independent BERT sentence-embedding forward pass in numpy (float64), for checking
pagoda's encoder: reads model.safetensors and the sentence-transformers modules of MODEL_DIR,
takes token-id sequences as JSON on stdin, prints one embedding per sequence as JSON.
A sequence is a list of ids (token type 0), or {"ids": [...], "second": k}: a pair whose ids
from k on are of token type 1.

Follows transformers' BertModel (absolute positions, token types, post-LayerNorm, erf GELU,
bidirectional attention with no padding) and sentence-transformers' Pooling/Normalize; for a
BertForSequenceClassification checkpoint (a cross-encoder), its head instead: the pooler
(dense + tanh on [CLS]) and the classifier, printing each pair's logits."""

import json
import math
import struct
import sys
from pathlib import Path

import numpy as np


def load(path: Path) -> dict:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__" or e["dtype"] != "F32":
            continue
        a, b = e["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + a : 8 + n + b], dtype="<f4").reshape(e["shape"]).astype(np.float64)
    return out


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


erf = np.vectorize(math.erf)


def main() -> None:
    d = Path(sys.argv[1])
    cfg = json.loads((d / "config.json").read_text())
    w = load(d / "model.safetensors")
    p = lambda name: w.get(name, w.get("bert." + name))  # noqa: E731
    heads, eps = cfg["num_attention_heads"], cfg["layer_norm_eps"]
    classifier = "BertForSequenceClassification" in cfg.get("architectures", [])
    if not classifier:
        modules = json.loads((d / "modules.json").read_text())
        pooling = json.loads((d / "1_Pooling" / "config.json").read_text())
        normalize = any(m["type"].endswith("Normalize") for m in modules)
    out = []
    for seq in json.loads(sys.stdin.read()):
        ids, second = (seq["ids"], seq["second"]) if isinstance(seq, dict) else (seq, len(seq))
        n = len(ids)
        x = p("embeddings.word_embeddings.weight")[ids] + p("embeddings.position_embeddings.weight")[:n]
        types = np.array([0] * second + [1] * (n - second))
        x = x + p("embeddings.token_type_embeddings.weight")[types]
        x = layer_norm(x, p("embeddings.LayerNorm.weight"), p("embeddings.LayerNorm.bias"), eps)
        for i in range(cfg["num_hidden_layers"]):
            L = f"encoder.layer.{i}."
            lin = lambda h, name: h @ p(L + name + ".weight").T + p(L + name + ".bias")  # noqa: E731
            q, k, v = (lin(x, f"attention.self.{m}") for m in ("query", "key", "value"))
            hd = q.shape[1] // heads
            q, k, v = (t.reshape(n, heads, hd).transpose(1, 0, 2) for t in (q, k, v))
            s = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
            s = np.exp(s - s.max(-1, keepdims=True))
            s = s / s.sum(-1, keepdims=True)
            a = (s @ v).transpose(1, 0, 2).reshape(n, heads * hd)
            x = layer_norm(x + lin(a, "attention.output.dense"), p(L + "attention.output.LayerNorm.weight"), p(L + "attention.output.LayerNorm.bias"), eps)
            h = lin(x, "intermediate.dense")
            h = 0.5 * h * (1.0 + erf(h / math.sqrt(2.0)))
            x = layer_norm(x + lin(h, "output.dense"), p(L + "output.LayerNorm.weight"), p(L + "output.LayerNorm.bias"), eps)
        if classifier:
            pooled = np.tanh(x[0] @ p("pooler.dense.weight").T + p("pooler.dense.bias"))
            out.append((pooled @ w["classifier.weight"].T + w["classifier.bias"]).tolist())
            continue
        if pooling.get("pooling_mode_cls_token"):
            e = x[0]
        else:
            e = x.mean(0)
        if normalize:
            e = e / max(np.linalg.norm(e), 1e-12)
        out.append(e.tolist())
    print(json.dumps(out))


main()
