"""Writes the speculative-decoding workloads (run from the repository root)."""
import json

src = open("crates/core/src/admission.rs").read()
edit = ("Here is a Rust source file.\n\n```rust\n" + src + "```\n\nRename the type `QueueSlots` to "
        "`WaitingSlots` everywhere and change nothing else. Reply with the whole updated file in one "
        "```rust code block and no explanation.")
with open("/tmp/spec/code_edit.jsonl", "w") as f:
    f.write(json.dumps({"prompt": edit, "output_len": 200}) + "\n")
chat = ("Explain in a few paragraphs how a hash map works, how collisions are handled, and when a "
        "B-tree map is the better choice.")
with open("/tmp/spec/chat.jsonl", "w") as f:
    f.write(json.dumps({"prompt": chat, "output_len": 128}) + "\n")
