#!/usr/bin/env python3
"""Random LoRA adapters in llama.cpp's GGUF adapter format, for benchmarks.

make-lora.py BASE.gguf OUT.gguf --rank 16 --targets attn_q,attn_k,attn_v,attn_output --seed 1
Shapes are read from the base model; A ~ U(+-1/sqrt(in)), B ~ U(+-b_scale) (0.02 unless --b-scale), alpha = rank.
"""
import argparse

import numpy as np
import gguf

p = argparse.ArgumentParser()
p.add_argument("base")
p.add_argument("out")
p.add_argument("--rank", type=int, default=16)
p.add_argument("--targets", default="attn_q,attn_k,attn_v,attn_output")
p.add_argument("--seed", type=int, default=0)
p.add_argument("--b-scale", type=float, default=0.02, help="B ~ U(+-b_scale)")
a = p.parse_args()

reader = gguf.GGUFReader(a.base)
arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
targets = a.targets.split(",")
rng = np.random.default_rng(a.seed)
w = gguf.GGUFWriter(a.out, arch)
w.add_string("general.type", "adapter")
w.add_string("adapter.type", "lora")
w.add_float32("adapter.lora.alpha", float(a.rank))
for t in reader.tensors:
    parts = t.name.split(".")
    if len(parts) != 4 or parts[0] != "blk" or parts[2] not in targets:
        continue
    d_in, d_out = int(t.shape[0]), int(t.shape[1])
    lim = 1.0 / np.sqrt(d_in)
    la = rng.uniform(-lim, lim, size=(a.rank, d_in)).astype(np.float32)
    lb = rng.uniform(-a.b_scale, a.b_scale, size=(d_out, a.rank)).astype(np.float32)
    w.add_tensor(t.name + ".lora_a", la)
    w.add_tensor(t.name + ".lora_b", lb)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
