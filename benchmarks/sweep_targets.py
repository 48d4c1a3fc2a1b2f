#!/usr/bin/env python3
"""Best speedup over NCCL per problem and size across backends' sweep records.

Usage::

    python3 benchmarks/sweep_targets.py triton=RUN/records.jsonl cuda=OTHER/records.jsonl ...

For every (problem, size) it prints each backend's candidate/NCCL ratio of
medians in latency mode (eager NCCL) and graph mode (graphed NCCL), and marks
where no backend beats NCCL (ratio <= 1.0) -- the issue-4 target "each
collective beats NCCL at every swept size in at least one backend". Baseline
records (torch symm_mem kernels run by the reference backend) are skipped.
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict


def _ratio(record, mode):
    sides = record.get("stats", {}).get("modes", {}).get(mode, {})
    ref, cand = sides.get("reference"), sides.get("candidate")
    return ref["median"] / cand["median"] if ref and cand else None


def main(argv) -> int:
    table = defaultdict(dict)
    backends = []
    for arg in argv:
        name, path = arg.split("=", 1)
        backends.append(name)
        for line in open(path):
            record = json.loads(line)
            if record["backend"] != name or record["verdict"] != "pass":
                continue
            size = int(record["size"].split(":")[1])
            table[(record["problem_id"], record["problem"], size)][name] = (
                _ratio(record, "latency"), _ratio(record, "graph"))
    header = ["problem", "size"] + [f"{b} {m}" for b in backends for m in ("eager", "graph")] + ["beats NCCL"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for (_, problem, size), by_backend in sorted(table.items()):
        cells, best_eager, best_graph = [], 0.0, 0.0
        for b in backends:
            eager, graph = by_backend.get(b, (None, None))
            cells += [f"{eager:.2f}" if eager else "-", f"{graph:.2f}" if graph else "-"]
            best_eager = max(best_eager, eager or 0.0)
            best_graph = max(best_graph, graph or 0.0)
        if not best_graph:  # NCCL's version cannot be graphed (CUDA_GRAPH = False)
            verdict = "eager (no graph mode)" if best_eager > 1 else "**no**"
        else:
            verdict = "eager+graph" if best_eager > 1 and best_graph > 1 else \
                "eager only" if best_eager > 1 else "graph only" if best_graph > 1 else "**no**"
        label = f"{size >> 20}M" if size >= 1 << 20 else f"{size >> 10}K"
        print(f"| {problem} | {label} | " + " | ".join(cells) + f" | {verdict} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
