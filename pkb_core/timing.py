"""Timing a zero-argument callable on every rank; the max over ranks per iteration.

Basic protocol (latency mode): before each iteration every rank synchronises
its device and meets the others at a barrier; the iteration is timed on the
device (CUDA events) or with the host clock on CPU; the per-iteration times
are then reduced with MAX over ranks, because the slowest rank is the
collective's time. Statistics come from those raw per-iteration maxima.
"""
from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_iterations(fn, *, device, group, warmup: int, iters: int, refresh=None) -> list[float]:
    """Milliseconds per iteration, each the max over ranks.

    :param refresh: called before every iteration, outside the timed region
        (restores arguments that the callable mutates).
    """
    for _ in range(warmup):
        if refresh:
            refresh()
        fn()
    _sync(device)
    times = []
    for _ in range(iters):
        if refresh:
            refresh()
        _sync(device)
        dist.barrier(group=group)
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    per_iter = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(per_iter, op=dist.ReduceOp.MAX, group=group)
    return per_iter.tolist()


def summarize(times: list[float]) -> dict:
    """min, median, max, mean, stddev, p10, p90 and the count of a list of ms."""
    ordered = sorted(times)
    quantiles = statistics.quantiles(ordered, n=10, method="inclusive") if len(ordered) > 1 else ordered * 9
    return {
        "min": ordered[0],
        "p10": quantiles[0],
        "median": statistics.median(ordered),
        "p90": quantiles[-1],
        "max": ordered[-1],
        "mean": statistics.fmean(ordered),
        "stddev": statistics.pstdev(ordered),
        "rounds": len(ordered),
    }
