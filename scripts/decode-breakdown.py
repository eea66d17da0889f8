#!/usr/bin/env python3
"""Buckets a perf profile's self time into the decode-step categories of docs/benchmarks.md.

Usage: scripts/decode-breakdown.py p.data   (p.data from the decode_profile bench under
`perf record`; the commands are in docs/benchmarks.md, "Where the time goes").

The pool's worker loop is inlined into the thread's entry (`__rust_begin_short_backtrace`), so
that symbol is counted as fork-join wait: a worker's spinning between jobs.
"""
import re, subprocess, sys
cats = [("matmul", r"pagoda_kernels::(quant|matmul)|Weights::forward"),
        ("attention", r"pagoda_kernels::attention"),
        ("sampling", r"pagoda_model::sampler|pagoda_kernels::ops::logits"),
        ("norm/rope/activation", r"pagoda_kernels::ops|sincos"),
        ("scheduler (core)", r"pagoda_core::"),
        ("fork-join wait", r"pagoda_kernels::parallel|__rust_begin_short_backtrace|futex|finish_task_switch|_raw_spin|schedule|sched_yield|syscall|Condvar|Mutex|clock_gettime|Instant"),
        ("other", r".")]
out = subprocess.run(["perf", "report", "-i", sys.argv[1], "--no-children", "--sort", "sym",
                      "--percent-limit", "0", "-g", "none"], capture_output=True, text=True).stdout
tot = {c: 0.0 for c, _ in cats}
for line in out.splitlines():
    m = re.match(r"\s*([\d.]+)%\s+\[.\]\s+(.*)", line)
    if not m: continue
    for c, pat in cats:
        if re.search(pat, m.group(2)):
            tot[c] += float(m.group(1)); break
for c, _ in cats: print(f"| {c} | {tot[c]:.1f}% |")
