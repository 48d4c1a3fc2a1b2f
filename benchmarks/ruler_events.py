#!/usr/bin/env python3
"""The ruler's delays by their own CUDA events (issue 53, target 6).

Usage::

    python3 benchmarks/ruler_events.py [CYCLES ...]      # default 0 2000 6000 20000 200000

What a ruler solution (benchmarks/ruler/) adds to a call is one more kernel on its stream: a
``torch.cuda._sleep`` of CYCLES cycles, and the boundary between it and the kernel before it.
So each delay is measured the same way: two CUDA events around ``REPEATS`` such kernels queued
back to back (the host queues them all while the device is held by a long sleep, so no host gap
is inside: a long sleep before each run holds the device while the host queues the run), the
time divided by ``REPEATS``; ``ROUNDS`` such runs, and their median and
10th-90th percentiles are printed in microseconds. (Events around a single short kernel read
mostly the events' own cost: the earlier version of this script read 4.2 us for 2000 and for
6000 cycles.) Run it on the machine and in the same call as the ``pkb bench`` of the ruler's
solutions.
"""
from __future__ import annotations

import statistics
import sys

import torch

REPEATS = 100
ROUNDS = 25
#: About 2 ms at the H200's clock: longer than the host takes to queue one run.
HOLD_CYCLES = 4_000_000


def per_kernel_us(cycles: int) -> list[float]:
    """``ROUNDS`` readings of one ``_sleep(cycles)`` kernel's time among its like, in us."""
    runs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(ROUNDS)]
    for start, end in runs:
        torch.cuda._sleep(HOLD_CYCLES)  # the host queues the run while the device sleeps
        start.record()
        for _ in range(REPEATS):
            torch.cuda._sleep(cycles)
        end.record()
    torch.cuda.synchronize()
    return sorted(start.elapsed_time(end) * 1e3 / REPEATS for start, end in runs)


def main(argv: list[str]) -> int:
    cycles = [int(a) for a in argv] or [0, 2000, 6000, 20000, 200000]
    per_kernel_us(1000)  # warm-up
    print(f"device: {torch.cuda.get_device_name()}, {REPEATS} kernels a run, {ROUNDS} runs")
    print(f"{'cycles':>8} {'delay us':>9} {'p10 us':>8} {'p90 us':>8}")
    for n in cycles:
        times = per_kernel_us(n)
        print(f"{n:>8} {statistics.median(times):9.3f} {times[len(times) // 10]:8.3f} {times[9 * len(times) // 10]:8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
