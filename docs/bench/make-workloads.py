"""Writes the speculative-decoding workloads to /tmp/spec (run from the repository root).

code_edit_<name>.jsonl: one 100-300-line file of this repository sent back with an edit each
(the answer copies most of the prompt: what prompt lookup and suffix indexes are for);
code_edit.jsonl: the first of them (older scripts); chat.jsonl: general chat, nothing to copy.
"""
import json
import os

EDITS = [
    ("admission", "crates/core/src/admission.rs",
     "Rename the type `QueueSlots` to `WaitingSlots` everywhere and change nothing else."),
    ("cost_model", "crates/core/src/speculative/cost_model.rs",
     "Rename `StepCostModel` to `StepCostCurve` and the constant `LEARN` to `LEARNING_RATE` "
     "everywhere, and change nothing else."),
    ("dataset", "crates/bench/src/dataset.rs",
     "Rename the field `output_len` to `max_output_len` everywhere (keep the JSON key strings as "
     "they are) and change nothing else."),
    ("metrics", "crates/bench/src/metrics.rs",
     "Rename `LatencyStats` to `LatencySummary` everywhere and add a one-line doc comment above "
     "`percentile_sorted`; change nothing else."),
]

os.makedirs("/tmp/spec", exist_ok=True)


def edit_prompt(path, ask):
    src = open(path).read()
    return ("Here is a Rust source file.\n\n```rust\n" + src + "```\n\n" + ask +
            " Reply with the whole updated file in one ```rust code block and no explanation.")


for i, (name, path, ask) in enumerate(EDITS):
    line = json.dumps({"prompt": edit_prompt(path, ask), "output_len": 300}) + "\n"
    with open(f"/tmp/spec/code_edit_{name}.jsonl", "w") as f:
        f.write(line)
    if i == 0:
        with open("/tmp/spec/code_edit.jsonl", "w") as f:
            f.write(line)
chat = ("Explain in a few paragraphs how a hash map works, how collisions are handled, and when a "
        "B-tree map is the better choice.")
with open("/tmp/spec/chat.jsonl", "w") as f:
    f.write(json.dumps({"prompt": chat, "output_len": 128}) + "\n")
