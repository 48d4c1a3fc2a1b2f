#!/usr/bin/env python3
"""The ruler's delays by their own CUDA events (issue 53, target 6).

Usage::

    python3 benchmarks/ruler_events.py [CYCLES ...]      # default 2000 6000 20000 200000

For each delay (``torch.cuda._sleep`` of CYCLES cycles, as benchmarks/ruler/ adds after the
reference's all-reduce) it queues 200 delays, each between two CUDA events, on one GPU, and
prints the median and the 10th-90th percentiles of the events' times in microseconds, and the
same for an empty pair of events (the events' own cost, subtracted in the "delay" column).
Run it on the machine and in the same call as the ``pkb bench`` of the ruler's solutions.
"""
from __future__ import annotations

import statistics
import sys

import torch


def event_times(cycles: int | None, repeats: int = 200) -> list[float]:
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
    torch.cuda._sleep(1_000_000)  # the host queues every pair before the device reaches the first
    for start, end in pairs:
        start.record()
        if cycles:
            torch.cuda._sleep(cycles)
        end.record()
    torch.cuda.synchronize()
    return sorted(start.elapsed_time(end) * 1e3 for start, end in pairs)


def main(argv: list[str]) -> int:
    cycles = [int(a) for a in argv] or [2000, 6000, 20000, 200000]
    event_times(1000)  # warm-up
    empty = event_times(None)
    base = statistics.median(empty)
    print(f"device: {torch.cuda.get_device_name()}")
    print(f"{'cycles':>8} {'median us':>10} {'p10 us':>8} {'p90 us':>8} {'delay us':>9}")
    print(f"{'(empty)':>8} {base:10.3f} {empty[len(empty) // 10]:8.3f} {empty[9 * len(empty) // 10]:8.3f} {0:9.3f}")
    for n in cycles:
        times = event_times(n)
        median = statistics.median(times)
        print(f"{n:>8} {median:10.3f} {times[len(times) // 10]:8.3f} {times[9 * len(times) // 10]:8.3f} "
              f"{median - base:9.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
