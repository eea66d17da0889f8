"""The official `openai` client against pagoda's /v1/embeddings: the client's default
(base64, decoded by the client) and float encodings agree, and vectors come back per input."""

import argparse
import math
import struct

import openai

p = argparse.ArgumentParser()
p.add_argument("--base-url", required=True)
p.add_argument("--model", required=True)
args = p.parse_args()
client = openai.OpenAI(base_url=args.base_url, api_key="unused", max_retries=0)

texts = ["A man is playing a guitar.", "Le chat dort sur le canapé."]
default = client.embeddings.create(model=args.model, input=texts)
floats = client.embeddings.create(model=args.model, input=texts, encoding_format="float")
assert [d.index for d in default.data] == [0, 1], default
assert default.usage.prompt_tokens == floats.usage.prompt_tokens > 0
for a, b in zip(default.data, floats.data):
    assert len(a.embedding) == len(b.embedding) == 384
    # JSON floats are the shortest text of each f32, so equal to the base64 f32s once rounded.
    as_f32 = lambda v: struct.unpack(f"{len(v)}f", struct.pack(f"{len(v)}f", *v))  # noqa: E731
    assert as_f32(a.embedding) == as_f32(b.embedding)
    assert abs(math.sqrt(sum(x * x for x in a.embedding)) - 1.0) < 1e-5
one = client.embeddings.create(model=args.model, input=[101, 7592, 2088, 102])
assert len(one.data) == 1
try:
    client.embeddings.create(model=args.model, input="x", dimensions=128)
    raise SystemExit("dimensions on a non-Matryoshka model was accepted")
except openai.BadRequestError as e:
    assert e.status_code == 400 and "dimensions" in str(e), e
print("ok")
