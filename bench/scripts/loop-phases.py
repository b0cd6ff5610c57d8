#!/usr/bin/env python3
"""Splits a shard's user-space samples by where its executor loop was:
`perf record --call-graph dwarf -e cpu-clock:u` on corekv, then

    perf script -F ip,sym | python3 bench/scripts/loop-phases.py

Each sample goes to the first phase whose pattern any frame of its chain
matches: the connections' tasks, the client ring's driver and park hook,
and glommio's own loop (its waits, polls and task queue runs around them)."""
import re
import sys

PHASES = [
    ("connection tasks", r"proxy::conn::serve"),
    ("ring driver", r"ring::.*drive"),
    ("ring park hook: park", r"ParkHook>::park"),
    ("ring park hook: poll, flush", r"ParkHook>::(poll|flush)"),
    ("glommio: wait before a park", r"react<glommio::parking::\{impl#2\}::park"),
    ("glommio: poll at the loop's top", r"react<glommio::executor"),
    ("glommio: poll before a park", r"spin_poll_io"),
    ("glommio: task queue runs, wakes", r"run_task_queues"),
]


def main():
    counts, total, frames = {}, 0, []

    def done():
        nonlocal total
        if not frames:
            return
        total += 1
        chain = "\n".join(frames)
        name = next((n for n, p in PHASES if re.search(p, chain)), "other")
        counts[name] = counts.get(name, 0) + 1

    for line in sys.stdin:
        line = line.strip()
        if not line:
            done()
            frames.clear()
            continue
        frames.append(line.split(" ", 1)[-1])
    done()
    print(f"{total} samples")
    for name in [n for n, _ in PHASES] + ["other"]:
        print(f"  {name:34} {100 * counts.get(name, 0) / max(total, 1):5.1f}%")


main()
