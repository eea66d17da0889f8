"""Tabulates docs/bench/speculative.sh's results in /tmp/spec: per configuration and prompt,
decode tok/s (1000 / mean TPOT) of each round, acceptance and mean acceptance length, and the
ratio to pagoda's plain decode of the same prompt (median over rounds). Usage:
python3 docs/bench/speculative_table.py [DIR] (speculative.sh's OUT, default /tmp/spec)."""
import glob
import re
import statistics
import sys
from collections import defaultdict

code = defaultdict(list)  # (config, prompt) -> [(tok/s, acceptance, mean length)]
load = defaultdict(list)  # (streams, config) -> [output tok/s]
for path in sorted(glob.glob((sys.argv[1] if len(sys.argv) > 1 else "/tmp/spec") + "/r*-*.txt")):
    text = open(path).read()
    name = path.split("/")[-1][:-4]
    m = re.match(r"r(\d+)-load(\d+)-(.+)$", name)
    if m:
        tput = re.search(r"Output tokens/s\s+([\d.]+)", text)
        if tput:
            load[(int(m.group(2)), m.group(3))].append(float(tput.group(1)))
        continue
    m = re.match(r"r(\d+)-(.+)-([a-z_]+)$", name)
    tpot = re.search(r"^TPOT\s+([\d.]+)", text, re.M)
    if not m or not tpot:
        continue
    acc = re.search(r"acceptance rate\s+([\d.]+%)", text)
    length = re.search(r"Mean acceptance length\s+([\d.]+)", text)
    code[(m.group(2), m.group(3))].append(
        (1000 / float(tpot.group(1)), acc.group(1) if acc else "", length.group(1) if length else ""))

prompts = sorted({p for _, p in code})
configs = list(dict.fromkeys(c for c, _ in code))
print("| configuration | " + " | ".join(prompts) + " |")
print("| --- |" + " --: |" * len(prompts))
for c in configs:
    cells = []
    for p in prompts:
        runs = code.get((c, p), [])
        if not runs:
            cells.append("")
            continue
        tps = statistics.median(r[0] for r in runs)
        base = code.get(("plain", p))
        ratio = f" ({tps / statistics.median(r[0] for r in base):.2f}x)" if base and c != "plain" else ""
        extra = f", {runs[-1][1]}, {runs[-1][2]}" if runs[-1][1] else ""
        cells.append("/".join(f"{r[0]:.1f}" for r in runs) + ratio + extra)
    print(f"| {c} | " + " | ".join(cells) + " |")
for (s, c), v in sorted(load.items()):
    base = load.get((s, "plain"))
    ratio = f" ({statistics.median(v) / statistics.median(base):.2f}x)" if base and c != "plain" else ""
    print(f"load {s} streams, {c}: " + "/".join(f"{x:.1f}" for x in v) + ratio)
