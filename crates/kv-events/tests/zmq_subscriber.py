"""A KV-events subscriber as a router or indexer would write it, with pyzmq and msgpack: SUB to
the stream, DEALER to the replay socket for what it missed (argv[4]: live batches to ignore
as if missed, so the replay path always runs). Prints "subscribed", waits for a
line "end N" on stdin (N batches were published), fills any gap by replay, applies the events
in sequence order and prints the resulting set of block hashes, one integer per line."""

import sys

import msgpack
import zmq

END_SEQ = (-1).to_bytes(8, "big", signed=True)

endpoint, replay_endpoint, topic = sys.argv[1], sys.argv[2], sys.argv[3].encode()
ignore_below = int(sys.argv[4])
ctx = zmq.Context()
sub = ctx.socket(zmq.SUB)
sub.setsockopt(zmq.SUBSCRIBE, topic)
sub.connect(endpoint)
print("subscribed", flush=True)

line = sys.stdin.readline().split()
assert line[0] == "end", line
total = int(line[1])

batches = {}
while len(batches) < total - ignore_below:
    if not sub.poll(500):
        break  # the rest (or all: a late joiner) comes from the replay
    t, seq, payload = sub.recv_multipart()
    assert t == topic, t
    if int.from_bytes(seq, "big") >= ignore_below:
        batches[int.from_bytes(seq, "big")] = payload

missing = [s for s in range(total) if s not in batches]
if missing:
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(replay_endpoint)
    dealer.send_multipart([b"", missing[0].to_bytes(8, "big")])
    while True:
        _, seq, payload = dealer.recv_multipart()
        if seq == END_SEQ:
            break
        batches.setdefault(int.from_bytes(seq, "big"), payload)
assert sorted(batches) == list(range(total)), f"sequence numbers {sorted(batches)[:5]}..."

blocks = set()
kinds = {}
for s in range(total):
    ts, events = msgpack.unpackb(batches[s])
    assert isinstance(ts, float)
    for e in events:
        kinds[e[0]] = kinds.get(e[0], 0) + 1
        if e[0] == "BlockStored":
            _, hashes, parent, token_ids, block_size, lora_id, medium = e
            assert len(token_ids) == len(hashes) * block_size and medium == "CPU"
            blocks.update(hashes)
        elif e[0] == "BlockRemoved":
            _, hashes, medium = e
            for h in hashes:
                assert h in blocks, f"removed {h}, never stored"
                blocks.discard(h)
        elif e[0] == "AllBlocksCleared":
            blocks.clear()
        else:
            raise AssertionError(f"unknown event {e[0]}")
print("kinds", " ".join(f"{k}={v}" for k, v in sorted(kinds.items())), f"replayed={len(missing)}", file=sys.stderr)
for h in sorted(blocks):
    print(h)
