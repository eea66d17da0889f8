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
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def encode_all(seqs, cfg, t, dense):
    """Embeds every (ids, windowed) pair, layer by layer: each layer's weights are widened to
    float64 once for all the inputs (per input, the conversions took most of the run)."""
    eps = cfg["rms_norm_eps"]
    heads, kv_heads, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    emb = t.raw("embed_tokens.weight")
    scale = cfg["query_pre_attn_scalar"] ** -0.5
    radius = cfg["sliding_window"] // 2 + 1
    xs = [emb[ids].astype(np.float64) * math.sqrt(cfg["hidden_size"]) for ids, _ in seqs]
    for i in range(cfg["num_hidden_layers"]):
        L = f"layers.{i}."
        sliding = cfg["layer_types"][i] == "sliding_attention"
        theta = cfg["rope_local_base_freq"] if sliding else cfg["rope_theta"]
        w = {
            name: t(L + name + ".weight")
            for name in (
                "input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                "self_attn.q_norm", "self_attn.k_norm", "self_attn.o_proj",
                "post_attention_layernorm", "pre_feedforward_layernorm", "mlp.gate_proj",
                "mlp.up_proj", "mlp.down_proj", "post_feedforward_layernorm",
            )
        }
        for j, (ids, windowed) in enumerate(seqs):
            x = xs[j]
            n = len(ids)
            pos = np.arange(n, dtype=np.float64)
            dist = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])
            h = rms_norm(x, w["input_layernorm"], eps)
            q = (h @ w["self_attn.q_proj"].T).reshape(n, heads, hd)
            k = (h @ w["self_attn.k_proj"].T).reshape(n, kv_heads, hd)
            v = (h @ w["self_attn.v_proj"].T).reshape(n, kv_heads, hd)
            q = rope(rms_norm(q, w["self_attn.q_norm"], eps), pos, theta)
            k = rope(rms_norm(k, w["self_attn.k_norm"], eps), pos, theta)
            rep = heads // kv_heads
            k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
            # matmul, not einsum: einsum's own loops took a third of the run, BLAS a fraction.
            s = np.matmul(q.transpose(1, 0, 2), k.transpose(1, 2, 0)) * scale
            if sliding and windowed:
                s = np.where(dist[None] < radius, s, -np.inf)
            s = np.exp(s - s.max(-1, keepdims=True))
            s = s / s.sum(-1, keepdims=True)
            a = np.matmul(s, v.transpose(1, 0, 2)).transpose(1, 0, 2).reshape(n, heads * hd)
            o = a @ w["self_attn.o_proj"].T
            x = x + rms_norm(o, w["post_attention_layernorm"], eps)
            h = rms_norm(x, w["pre_feedforward_layernorm"], eps)
            g = gelu_tanh(h @ w["mlp.gate_proj"].T) * (h @ w["mlp.up_proj"].T)
            f = g @ w["mlp.down_proj"].T
            xs[j] = x + rms_norm(f, w["post_feedforward_layernorm"], eps)
    out = []
    for x in xs:
        e = rms_norm(x, t("norm.weight"), eps).mean(0)
        for d in dense:
            e = d @ e
        out.append(e)
    return out


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
    long = [i for i, ids in enumerate(seqs) if len(ids) > cfg["sliding_window"] // 2 + 1]
    embs = encode_all([(ids, True) for ids in seqs] + [(seqs[i], False) for i in long], cfg, t, dense)
    full = embs[: len(seqs)]
    out = {str(k): [normalized(e[:k]).tolist() for e in full] for k in (768, 512, 256, 128)}
    out["768_no_window"] = [None] * len(seqs)
    for i, e in zip(long, embs[len(seqs) :]):
        out["768_no_window"][i] = normalized(e).tolist()
    print(json.dumps(out))


main()
