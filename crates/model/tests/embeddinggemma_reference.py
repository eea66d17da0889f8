"""An independent EmbeddingGemma forward pass in numpy (float64), for checking pagoda's
encoder: reads model.safetensors and the sentence-transformers modules of MODEL_DIR, takes
token-id sequences as JSON on stdin, prints {"768": [...], "512": [...], ...}: one embedding per
sequence at each Matryoshka length (cut, then re-normalised), and "768_no_window": the full
vectors with every layer global, to show the sliding window matters on long inputs.

Follows transformers' Gemma3TextModel with use_bidirectional_attention (Gemma RMSNorm
x * (1 + w), q/k norms, rotate-half RoPE with the local base on sliding layers, GeGLU with tanh
GELU, sandwich norms, the embedding scaled by sqrt(hidden)), its bidirectional sliding mask
(|i - j| < sliding_window // 2 + 1), and sentence-transformers' mean Pooling, Dense, Normalize."""

import json
import math
import struct
import sys
from pathlib import Path

import numpy as np


class Tensors:
    def __init__(self, path: Path):
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            self.header = json.loads(f.read(n))
        self.base = 8 + n
        self.mm = np.memmap(path, dtype=np.uint8, mode="r")

    def raw(self, name: str) -> np.ndarray:
        e = self.header[name]
        assert e["dtype"] == "F32", (name, e["dtype"])
        a, b = e["data_offsets"]
        return np.frombuffer(self.mm[self.base + a : self.base + b], dtype="<f4").reshape(e["shape"])

    def __call__(self, name: str) -> np.ndarray:
        return self.raw(name).astype(np.float64)


def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * (1.0 + w)


def rope(x, pos, theta):
    # x: [n, heads, hd]; transformers' rotate_half pairing (i, i + hd/2).
    hd = x.shape[-1]
    inv = 1.0 / theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    ang = pos[:, None] * inv[None, :]
    cos = np.concatenate([np.cos(ang)] * 2, -1)[:, None, :]
    sin = np.concatenate([np.sin(ang)] * 2, -1)[:, None, :]
    half = hd // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], -1)
    return x * cos + rot * sin


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def encode(ids, cfg, t, dense, windowed=True):
    n = len(ids)
    eps = cfg["rms_norm_eps"]
    heads, kv_heads, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    emb = t.raw("embed_tokens.weight")
    x = emb[ids].astype(np.float64) * math.sqrt(cfg["hidden_size"])
    pos = np.arange(n, dtype=np.float64)
    scale = cfg["query_pre_attn_scalar"] ** -0.5
    radius = cfg["sliding_window"] // 2 + 1
    dist = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])
    for i in range(cfg["num_hidden_layers"]):
        L = f"layers.{i}."
        sliding = cfg["layer_types"][i] == "sliding_attention"
        theta = cfg["rope_local_base_freq"] if sliding else cfg["rope_theta"]
        h = rms_norm(x, t(L + "input_layernorm.weight"), eps)
        q = (h @ t(L + "self_attn.q_proj.weight").T).reshape(n, heads, hd)
        k = (h @ t(L + "self_attn.k_proj.weight").T).reshape(n, kv_heads, hd)
        v = (h @ t(L + "self_attn.v_proj.weight").T).reshape(n, kv_heads, hd)
        q = rope(rms_norm(q, t(L + "self_attn.q_norm.weight"), eps), pos, theta)
        k = rope(rms_norm(k, t(L + "self_attn.k_norm.weight"), eps), pos, theta)
        rep = heads // kv_heads
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        s = np.einsum("qhd,khd->hqk", q, k) * scale
        if sliding and windowed:
            s = np.where(dist[None] < radius, s, -np.inf)
        s = np.exp(s - s.max(-1, keepdims=True))
        s = s / s.sum(-1, keepdims=True)
        a = np.einsum("hqk,khd->qhd", s, v).reshape(n, heads * hd)
        o = a @ t(L + "self_attn.o_proj.weight").T
        x = x + rms_norm(o, t(L + "post_attention_layernorm.weight"), eps)
        h = rms_norm(x, t(L + "pre_feedforward_layernorm.weight"), eps)
        g = gelu_tanh(h @ t(L + "mlp.gate_proj.weight").T) * (h @ t(L + "mlp.up_proj.weight").T)
        f = g @ t(L + "mlp.down_proj.weight").T
        x = x + rms_norm(f, t(L + "post_feedforward_layernorm.weight"), eps)
    x = rms_norm(x, t("norm.weight"), eps)
    e = x.mean(0)
    for w in dense:
        e = w @ e
    return e


def normalized(e):
    return e / max(np.linalg.norm(e), 1e-12)


def main() -> None:
    d = Path(sys.argv[1])
    cfg = json.loads((d / "config.json").read_text())
    assert cfg.get("use_bidirectional_attention"), "not a bidirectional Gemma 3"
    t = Tensors(d / "model.safetensors")
    modules = json.loads((d / "modules.json").read_text())
    pooling = json.loads((d / "1_Pooling" / "config.json").read_text())
    assert pooling["pooling_mode_mean_tokens"], "EmbeddingGemma pools by mean"
    dense = []
    for m in modules:
        if m["type"].endswith("Dense"):
            dense.append(Tensors(d / m["path"] / "model.safetensors")("linear.weight"))
    assert any(m["type"].endswith("Normalize") for m in modules)
    seqs = json.loads(sys.stdin.read())
    full = [encode(ids, cfg, t, dense) for ids in seqs]
    out = {str(k): [normalized(e[:k]).tolist() for e in full] for k in (768, 512, 256, 128)}
    out["768_no_window"] = [normalized(encode(ids, cfg, t, dense, windowed=False)).tolist() if len(ids) > cfg["sliding_window"] // 2 + 1 else None for ids in seqs]
    print(json.dumps(out))


main()
