#!/usr/bin/env python3
"""Packs each target's minimised corpus (`cargo fuzz cmin TARGET`, in corpus/TARGET/) into one
file, corpus-min/TARGET.pack: records of a little-endian u32 length and the input's bytes, in
file-name order. The packs are committed and replayed by crates/pagoda/tests/fuzz_corpus.rs.

Usage: fuzz/pack-corpus.py TARGET...   (from anywhere)"""
import struct
import sys
from pathlib import Path

here = Path(__file__).resolve().parent
for target in sys.argv[1:]:
    files = sorted((here / "corpus" / target).iterdir())
    out = here / "corpus-min" / f"{target}.pack"
    out.parent.mkdir(exist_ok=True)
    with open(out, "wb") as f:
        for p in files:
            data = p.read_bytes()
            f.write(struct.pack("<I", len(data)))
            f.write(data)
    print(f"{out.relative_to(here.parent)}: {len(files)} inputs, {out.stat().st_size} bytes")
