"""An independent implementation of pagoda's block hash (docs/scale-out.md), written the way
vLLM's sha256_cbor hash_block_tokens is: hashlib + cbor2 (canonical). Reads one case per line on
stdin, `seed|lora_id|cache_salt|block_size|t0,t1,...` (empty fields for none), and prints that
case's block hashes as hex, space-separated."""

import hashlib
import sys

import cbor2


def sha256_cbor(obj):
    return hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()


def block_hashes(seed, lora_id, cache_salt, block_size, tokens):
    parent = sha256_cbor(seed)  # NONE_HASH
    out = []
    for start in range(0, len(tokens) - block_size + 1, block_size):
        keys = []
        if lora_id is not None:
            keys.append(lora_id)
        if cache_salt is not None and start == 0:
            keys.append(cache_salt)
        extra = tuple(keys) if keys else None
        block = tuple(tokens[start : start + block_size])
        parent = sha256_cbor((parent, block, extra))
        out.append(parent.hex())
    return out


for line in sys.stdin.read().splitlines():
    seed, lora, salt, bs, toks = line.split("|")
    tokens = [int(t) for t in toks.split(",") if t]
    print(" ".join(block_hashes(seed, int(lora) if lora else None, salt or None, int(bs), tokens)))
