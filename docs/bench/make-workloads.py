"""Writes the speculative-decoding workloads to /tmp/spec (run from the repository root).

code_edit_<name>.jsonl: one 100-300-line file of this repository sent back with an edit each
(the answer copies most of the prompt: what prompt lookup and suffix indexes are for);
code_edit.jsonl: the first of them (older scripts); chat.jsonl: general chat, nothing to copy;
chat_<name>.jsonl: five general-chat prompts of 300 tokens out (the draft model's workload),
chat_all.jsonl: the five in one file.
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

# General chat (issue 39 item 3): ordinary requests with nothing to copy from the prompt, the
# case a draft model is for; one prompt per file, 300 tokens out.
CHATS = [
    ("explain", "Explain what inflation is and why central banks raise interest rates to fight "
     "it, in plain words for someone without an economics background."),
    ("email", "Write a short, polite email to my landlord saying the kitchen tap has been "
     "leaking for a week and asking when someone can come to fix it."),
    ("summary", "Summarize this paragraph in three sentences: The city council met on Tuesday "
     "to discuss the new bicycle lanes planned for the town centre. Several shop owners said "
     "they feared losing customers who arrive by car, while cycling groups argued that safer "
     "streets would bring more people to the area. The council agreed to run a six-month trial "
     "on two streets, to count visitors before and after, and to hold a public meeting in the "
     "spring before deciding whether to extend the lanes."),
    ("question", "Why is the sky blue during the day but red and orange at sunset?"),
    ("advice", "I have a job interview next week for a junior accountant position. What should "
     "I do to prepare, and what questions should I ask at the end?"),
]
for name, prompt in CHATS:
    with open(f"/tmp/spec/chat_{name}.jsonl", "w") as f:
        f.write(json.dumps({"prompt": prompt, "output_len": 300}) + "\n")
with open("/tmp/spec/chat_all.jsonl", "w") as f:  # the five, for the 16-stream rows
    for _, prompt in CHATS:
        f.write(json.dumps({"prompt": prompt, "output_len": 300}) + "\n")
