#!/usr/bin/env python3
"""Issue 41's timing targets, read from runs of the reference against itself.

Usage::

    python3 benchmarks/timing_aa.py RUN/records.jsonl [OTHER/records.jsonl ...]

Every record of the reference backend run against NCCL (``pkb bench --backend reference``,
or ``pkb run --backend reference --measure-perf``) is a reading of the same code against
itself, per timing mode. For each mode it prints the readings (problem, size, the ratio and its
95 % interval), then target 1's criteria: every ratio within 1.00 +- 0.03, the share of
intervals that contain 1.00 (>= 95 %), how the exclusions split between "faster" and "slower"
(at most two thirds on one side), the pooled geometric mean (within 1.00 +- 0.01) and the share
of ratios above 1 (0.40-0.60). For window mode it adds the sides' windows, the least share of a
batch any side had queued before its first window (the host engine on GPU) and the fewest gate
regions a side's batches ran on (``window_diagnostics``). Run on a GPU, three times::

    for i in 1 2 3; do
      pkb bench --backend reference --problem 1,2,3,7 --sizes 4K,256K,2M,256M --out runs/aa-$i
    done
    python3 benchmarks/timing_aa.py runs/aa-*/records.jsonl
"""
from __future__ import annotations

import json
import math
import sys
from collections import defaultdict


def readings(paths):
    """``mode -> [(label, ratio, low, high, record's mode stats)]`` over every passing record."""
    found = defaultdict(list)
    for path in paths:
        for line in open(path):
            record = json.loads(line)
            if record.get("verdict") != "pass" or record.get("backend") != "reference":
                continue  # a reading of the same code against itself only
            for mode, stats in (record.get("stats") or {}).get("modes", {}).items():
                speedup = stats.get("speedup") or {}
                if speedup.get("value") is None:
                    continue
                label = f"{record['problem']} {record.get('size', '')}"
                found[mode].append((label, speedup["value"], speedup.get("low"), speedup.get("high"), stats))
    return found


def criteria(rows) -> list[str]:
    """Target 1's lines for one mode's readings."""
    ratios = [r for _, r, _, _, _ in rows]
    within = sum(abs(r - 1.0) <= 0.03 for r in ratios)
    contain = sum(low is not None and low <= 1.0 <= high for _, _, low, high, _ in rows)
    faster = sum(low is not None and low > 1.0 for _, _, low, _, _ in rows)
    slower = sum(high is not None and high < 1.0 for _, _, _, high, _ in rows)
    geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    above = sum(r > 1.0 for r in ratios) / len(ratios)
    return [f"ratios within 1.00 +- 0.03: {within} of {len(ratios)}",
            f"intervals containing 1.00: {contain} of {len(rows)} ({contain / len(rows):.0%}; target >= 95 %)",
            f"exclusions: {faster} faster, {slower} slower (target: at most two thirds on one side)",
            f"pooled geometric mean: {geomean:.4f} (target 1.00 +- 0.01); share above 1: {above:.2f} (0.40-0.60)"]


def main(argv) -> int:
    if not argv:
        print(__doc__)
        return 2
    for mode, rows in sorted(readings(argv).items()):
        print(f"## {mode}: {len(rows)} readings")
        for label, ratio, low, high, stats in rows:
            extra = ""
            if "windows_us" in stats:
                extra = f"  windows us {stats['windows_us']}"
            sides = (stats.get("window_diagnostics") or {}).values()
            shares = [side["queued_ahead_share"][1] for side in sides if side.get("queued_ahead_share")]
            regions = [side["gate_regions"] for side in sides if side.get("gate_regions")]
            if shares:  # the least share of a batch queued before its first window, over the sides
                extra += f"  queued first >= {min(shares):.2f}"
            if regions:
                extra += f"  regions >= {min(regions)}"
            print(f"  {label:40s} {ratio:7.4f} [{low:.4f}, {high:.4f}]{extra}")
        for line in criteria(rows):
            print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
