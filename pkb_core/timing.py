"""The multi-GPU timing protocol (shared/rigor.md rules 10-16).

Three named modes, all timed on the device (CUDA events; the host clock on CPU)
on every rank, reduced per iteration with MAX over ranks (the slowest rank is
the collective's time), summarised from those raw maxima:

``latency``
    Before every iteration: L2 flush (CUDA), device synchronise, barrier across
    ranks, then a short device-side hold (``torch.cuda._sleep``) so the launch
    is queued before the work begins and every rank starts together. One
    iteration per sample.
``back-to-back``
    One barrier, then ``iters`` calls queued back to back with an event between
    consecutive calls: includes host launch cost where the host cannot keep up.
``graph``
    ``graph_calls`` calls captured in one CUDA graph; each sample is one replay
    divided by ``graph_calls``: removes host launch cost. CUDA only; a callable
    that cannot be captured gets an explanation instead of a number.

Reference and candidate are timed in the same processes, alternating in rounds
(:func:`time_interleaved`), so drift hits both; the speedup is a ratio of
medians from one run. Each sample ends with the events of the current stream;
work hidden on side streams is caught by :func:`side_stream_check`.
"""
from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

MODES = ("latency", "back-to-back", "graph")
#: Cycles of device-side hold before a latency-mode sample (about 100 us at
#: 1.98 GHz): longer than a Python launch, so the work is queued before it starts.
HOLD_CYCLES = 200_000


class _Flusher:
    """Writes twice the L2 size before each latency sample (CUDA only)."""

    def __init__(self, device):
        self.buffer = None
        if device.type == "cuda":
            l2 = torch.cuda.get_device_properties(device).L2_cache_size
            self.buffer = torch.empty(2 * l2, dtype=torch.uint8, device=device)

    def __call__(self):
        if self.buffer is not None:
            self.buffer.zero_()


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _max_over_ranks(times, group) -> list[float]:
    per_iter = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(per_iter, op=dist.ReduceOp.MAX, group=group)
    return per_iter.tolist()


def time_iterations(fn, *, device, group, warmup: int, iters: int, mode: str = "latency", refresh=None,
                    graph_calls: int = 10) -> list[float]:
    """Milliseconds per iteration, each the max over ranks.

    :param refresh: called before every latency-mode iteration, outside the
        timed region (restores arguments the callable mutates; such callables
        are timed in latency mode only).
    """
    for _ in range(warmup):
        if refresh:
            refresh()
        fn()
    _sync(device)
    if mode == "latency":
        times = _latency(fn, device, group, iters, refresh)
    elif mode == "back-to-back":
        times = _back_to_back(fn, device, group, iters)
    elif mode == "graph":
        times = _graph(fn, device, group, iters, graph_calls)
    else:
        raise ValueError(f"unknown timing mode {mode!r} (one of {', '.join(MODES)})")
    return _max_over_ranks(times, group)


def _latency(fn, device, group, iters, refresh):
    flush = _Flusher(device)
    times = []
    for _ in range(iters):
        if refresh:
            refresh()
        flush()
        _sync(device)
        dist.barrier(group=group)
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(HOLD_CYCLES)  # the launch below queues while the device waits
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return times


def _back_to_back(fn, device, group, iters):
    _sync(device)
    dist.barrier(group=group)
    if device.type != "cuda":
        stamps = [time.perf_counter()]
        for _ in range(iters):
            fn()
            stamps.append(time.perf_counter())
        return [(b - a) * 1e3 for a, b in zip(stamps, stamps[1:])]
    events = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
    events[0].record()
    for i in range(iters):
        fn()
        events[i + 1].record()
    events[-1].synchronize()
    return [a.elapsed_time(b) for a, b in zip(events, events[1:])]


def _graph(fn, device, group, iters, graph_calls):
    if device.type != "cuda":
        raise GraphUnavailable("CUDA-graph mode needs a GPU")
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        fn()  # warm up on a side stream, as capture requires
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    failure = None
    try:
        with torch.cuda.graph(graph):
            for _ in range(graph_calls):
                fn()
    except Exception as exc:  # noqa: BLE001 - not every callable can be captured
        failure = f"cannot capture in a CUDA graph: {type(exc).__name__}: {exc}"
    # Every rank gives up if one could not capture: a rank that replays its
    # collectives alone waits for peers that never come.
    failures = [None] * dist.get_world_size(group)
    dist.all_gather_object(failures, failure, group=group)
    failure = next((f for f in failures if f), None)
    if failure:
        raise GraphUnavailable(failure)
    graph.replay()
    _sync(device)
    times = []
    for _ in range(iters):
        _sync(device)
        dist.barrier(group=group)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(HOLD_CYCLES)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / graph_calls)
    return times


class GraphUnavailable(RuntimeError):
    """The callable cannot be timed in graph mode; the message says why."""


def time_interleaved(sides: dict, *, device, group, warmup, iters, mode, rounds=4, refreshers=None) -> dict:
    """Time several callables alternately in ``rounds`` and return ``{name: times}``.

    Warm-up happens once per side; each round times ``iters / rounds``
    iterations of every side in turn, so slow drift affects all of them alike.
    """
    refreshers = refreshers or {}
    times = {name: [] for name in sides}
    chunk = max(1, iters // rounds)
    for name, fn in sides.items():
        for _ in range(warmup):
            if refreshers.get(name):
                refreshers[name]()
            fn()
    _sync(device)
    done = 0
    while done < iters:
        n = min(chunk, iters - done)
        for name, fn in sides.items():
            times[name] += time_iterations(fn, device=device, group=group, warmup=0, iters=n, mode=mode,
                                           refresh=refreshers.get(name))
        done += n
    return times


def side_stream_check(fn, *, device, group, samples=5) -> str | None:
    """Work still running on other streams once the current stream is done.

    Each sample records events around ``fn()`` on the current stream, waits
    for the end event only, and then times a device-wide synchronisation:
    what that still waits for was launched elsewhere and escaped the events.
    Host time spent inside ``fn`` is not counted (the driver may submit the
    start event late, so comparing wall time with event time flagged honest
    host-heavy launches: ParallelKittens at 4 KiB on 2xH200, 2026-11-22).
    Flags when the median of that tail exceeds 0.2 ms plus half the median
    event time. CUDA only.
    """
    if device.type != "cuda":
        return None
    event_ms, tail_ms = [], []
    for _ in range(samples):
        _sync(device)
        dist.barrier(group=group)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        t0 = time.perf_counter()
        torch.cuda.synchronize(device)
        tail_ms.append((time.perf_counter() - t0) * 1e3)
        event_ms.append(start.elapsed_time(end))
    event, tail = statistics.median(event_ms), statistics.median(tail_ms)
    if tail > 0.2 + 0.5 * event:
        return (f"work outside the current stream: {tail:.3f} ms still running on other streams after the "
                f"current stream's events finished ({event:.3f} ms)")
    return None


def summarize(times: list[float]) -> dict:
    """min, p10, median, p90, max, mean, stddev and the count of a list of ms."""
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
