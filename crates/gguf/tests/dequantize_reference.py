"""Dequantizes every tensor of a GGUF file with the `gguf` Python package (ggml's own
reference, independent of pagoda) and writes each as raw little-endian f32 to OUT_DIR/NAME.f32.

Q8_K has no class in gguf-py (it is an activation format): its formula, d * q with d an f32
and q an i8, is written out here instead."""

import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader
from gguf.quants import dequantize


def q8_k(data: np.ndarray) -> np.ndarray:
    blocks = data.reshape(-1, 292)
    d = blocks[:, :4].copy().view(np.float32)
    q = blocks[:, 4:260].copy().view(np.int8).astype(np.float32)
    return d * q


def main() -> None:
    path, out = Path(sys.argv[1]), Path(sys.argv[2])
    for t in GGUFReader(path).tensors:
        data = np.asarray(t.data)
        if t.tensor_type == GGMLQuantizationType.Q8_K:
            values = q8_k(data.reshape(-1).view(np.uint8))
        else:
            values = dequantize(data, t.tensor_type)
        values.astype("<f4").tofile(out / f"{t.name}.f32")


main()
