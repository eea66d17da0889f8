#!/usr/bin/env python3
"""A Hugging Face checkpoint directory (f32 safetensors, config.json, tokenizer.json,
tokenizer_config.json) from a qwen2 or llama GGUF file, its weights dequantized by the `gguf`
package's reference dequantizers. No higher-precision Qwen checkpoint exists on this machine, so
this is how `pagoda perplexity` compares a GGUF quant with pagoda's in-situ quantization of the
same weights (docs/benchmarks.md, "Perplexity"): the f32 directory loaded with
`--quantization none` is the base, the GGUF itself and `--quantization q8_0|q4_k` the others.

    python3 docs/bench/gguf_to_hf.py MODEL.gguf OUT_DIR
"""

import json
import os
import struct
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

# GGUF name (after `blk.N.`) -> HF name (after `model.layers.N.`).
LAYER = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
TOP = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
# The byte-level BPE split regex of Qwen2's tokenizer.json (its pre_tokenizer).
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def field(r, key, default=None):
    f = r.fields.get(key)
    return default if f is None else f.contents()


def unpermute(w, heads):
    """Undoes convert_hf_to_gguf's llama Q/K row permutation (GGUF's RoPE pairing)."""
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_safetensors(path, tensors):
    header, offset = {}, 0
    for name, a in tensors:
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for _, a in tensors:
            f.write(np.ascontiguousarray(a, dtype="<f4").tobytes())


def main():
    src, out = sys.argv[1], sys.argv[2]
    r = GGUFReader(src)
    arch = field(r, "general.architecture")
    if arch not in ("qwen2", "llama"):
        sys.exit(f"{src}: architecture {arch} (this script converts qwen2 and llama)")
    k = lambda name, d=None: field(r, f"{arch}.{name}", d)
    heads, kv_heads = k("attention.head_count"), k("attention.head_count_kv")
    os.makedirs(out, exist_ok=True)

    tensors = []
    for t in r.tensors:
        a = dequantize(t.data, t.tensor_type).astype(np.float32)
        a = a.reshape([int(d) for d in reversed(t.shape)])
        if t.name in TOP:
            name = TOP[t.name]
        else:
            _, n, stem, kind = t.name.split(".")
            name = f"model.layers.{n}.{LAYER[stem]}.{kind}"
            if arch == "llama" and stem in ("attn_q", "attn_k"):
                a = unpermute(a, heads if stem == "attn_q" else kv_heads)
        tensors.append((name, a))
    tied = not any(n == "lm_head.weight" for n, _ in tensors)
    write_safetensors(os.path.join(out, "model.safetensors"), tensors)

    d_model = k("embedding_length")
    vocab = len(r.fields["tokenizer.ggml.tokens"].data)
    config = {
        "architectures": ["Qwen2ForCausalLM" if arch == "qwen2" else "LlamaForCausalLM"],
        "model_type": arch,
        "hidden_size": d_model,
        "num_hidden_layers": k("block_count"),
        "intermediate_size": k("feed_forward_length"),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "vocab_size": vocab,
        "max_position_embeddings": k("context_length"),
        "rms_norm_eps": k("attention.layer_norm_rms_epsilon"),
        "rope_theta": k("rope.freq_base", 10000.0),
        "tie_word_embeddings": tied,
        "bos_token_id": field(r, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": field(r, "tokenizer.ggml.eos_token_id"),
    }
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)

    tokens = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type")
    merges = field(r, "tokenizer.ggml.merges")
    normal = {t: i for i, (t, ty) in enumerate(zip(tokens, types)) if ty == 1}
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": ty == 3}
             for i, (t, ty) in enumerate(zip(tokens, types)) if ty in (3, 4)]
    tokenizer = {
        "version": "1.0",
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
             "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "",
                  "fuse_unk": False, "byte_fallback": False, "vocab": normal,
                  "merges": merges},
    }
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tokenizer, f, ensure_ascii=False)
    tok_config = {
        "chat_template": field(r, "tokenizer.chat_template"),
        "eos_token": tokens[field(r, "tokenizer.ggml.eos_token_id")],
        "add_bos_token": bool(field(r, "tokenizer.ggml.add_bos_token", False)),
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(tok_config, f, ensure_ascii=False)
    print(f"{out}: {len(tensors)} tensors, {sum(a.nbytes for _, a in tensors) >> 20} MiB")


if __name__ == "__main__":
    main()
