"""Running one side's batch of calls in one process (docs/timing.md).

The same code runs the reference's batches (in the judge's processes) and the
candidate's (in its own processes): it aligns the ranks, makes the calls and
ends the batch with a device-wide synchronisation. The *time* pkb reports is
not measured here: the launcher times each whole batch with its own clock, from
sending the ``time`` command to the last rank's answer
(:mod:`pkb_core.conduct.timed_rounds`), so nothing a process says about itself
enters a time, a speedup or a verdict. The per-call times this module still
takes are the process's own account, kept in the record as an untrusted
diagnostic. A *batch* is one side's share of a round: ``k`` calls, call ``i``
bound to input set ``i`` of the round's fresh pool, so no input repeats within
a batch. Three modes:

``latency``
    Before every call: L2 flush (CUDA), device synchronise, the host barrier
    across ranks (pacing), a short device-side hold (``torch.cuda._sleep``,
    so the launches below queue before the work begins) and the *device
    barrier* (:mod:`pkb_core.harness.device_barrier`): every rank's timed region
    starts within a flag's trip over the link of the others'.
``back-to-back``
    One host barrier, hold and device barrier, then the ``k`` calls queued
    back to back with an event between consecutive calls: includes host
    launch cost where the host cannot keep up. No flush.
``graph``
    The ``k`` calls captured once in one CUDA graph (the pool's buffers stay
    put, so later rounds replay the same graph on new values); one host
    barrier, hold and device barrier, then the replays queued back to back,
    each after an L2 flush queued before it; a diagnostic sample is one
    replay divided by ``k``. CUDA only; a side that cannot be captured gets an
    explanation.

The L2 policy is the same for both sides because it is this code on both
sides: flushed before every latency call and every graph replay, never inside
a back-to-back batch. Without a device barrier (ranks on several nodes, no
heap) a side aligns with the host barrier and the hold alone, and says so. On
CPU the device barrier's ``host`` engine is itself a barrier of the host, so
there it replaces the store barrier (one synchronisation per sample, as
before, not two: every one costs wake-ups on a host with fewer cores than
ranks, and that cost lands in every batch's wall time).

Every batch ends with a device-wide synchronisation, so what the launcher's
clock sees includes work left on other streams. The diagnostic times are
milliseconds: CUDA events on GPU, the host clock on CPU.
"""
from __future__ import annotations

import time

import torch

from pkb_core.contracts.modes import MODES

#: Cycles of device-side hold before a latency-mode call (about 100 us at
#: 1.98 GHz): longer than a Python launch, so the work is queued before it starts.
HOLD_CYCLES = 200_000


class DeviceBarrierTimeout(RuntimeError):
    """A rank waited at the device barrier (:mod:`pkb_core.harness.device_barrier`)
    longer than its timeout for a peer: the batch is an error, not a time."""


class GraphUnavailable(RuntimeError):
    """The callable cannot be timed in graph mode; the message says why."""


class _Flusher:
    """Writes twice the L2 size before each latency call (CUDA only)."""

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


class BatchTimer:
    """Times batches of one side's calls on one rank.

    :param device: this rank's device.
    :param barrier: a zero-argument barrier across this side's ranks (host; pacing).
    :param device_barrier: a :class:`pkb_core.harness.device_barrier.DeviceBarrier`
        of this side's ranks, or None (host barrier and hold only).
    :param alignment: how samples are aligned, in words (goes into the record).
    """

    def __init__(self, device, barrier, device_barrier=None, alignment: str = "host barrier only"):
        self.device = device
        self.barrier = barrier
        self.device_barrier = device_barrier
        self.alignment = alignment
        self.flush = _Flusher(device)
        self._graph = None
        self._graph_outputs = None

    def renewed(self) -> "BatchTimer":
        """A timer with the same barriers and no captured graph (its buffers moved)."""
        return BatchTimer(self.device, self.barrier, self.device_barrier, self.alignment)

    def warm_up(self, calls, count: int, refresh=None) -> None:
        for n in range(count):
            i = n % len(calls)
            if refresh:
                refresh(i)
            calls[i]()
        _sync(self.device)

    def run(self, calls, mode: str, *, refresh=None, replays: int = 0) -> tuple[list, list]:
        """``(times_ms, outputs)``: one time per call (per replay in graph
        mode) and the output of each call, in order.

        :param refresh: ``refresh(i)`` restores input set ``i`` before its call
            (arguments the problem mutates; latency mode only).
        """
        if mode == "latency":
            result = self._latency(calls, refresh)
        elif mode == "back-to-back":
            result = self._back_to_back(calls)
        elif mode == "graph":
            result = self._graph_replays(calls, replays or len(calls))
        elif mode == "window":
            raise ValueError("window mode's calls are run by pkb_core.harness.windows, not a batch timer")
        else:
            raise ValueError(f"unknown timing mode {mode!r} (one of {', '.join(MODES)})")
        _sync(self.device)  # work on any stream of this process is done before the batch ends
        if self.device_barrier is not None:
            self.device_barrier.check()  # a rank that gave up waiting makes the batch an error
        return result

    def _aligned(self, flush: bool = True):
        if flush:
            self.flush()
        _sync(self.device)
        if self.device_barrier is None or self.device_barrier.engine != "host":
            self.barrier()  # host: paces the ranks, so the device barrier below waits microseconds
        if self.device.type == "cuda":
            torch.cuda._sleep(HOLD_CYCLES)  # the launches below queue while the device waits
        if self.device_barrier is not None:
            self.device_barrier()  # on the timing stream: every rank leaves it together

    def _latency(self, calls, refresh):
        times, outputs = [], []
        for i, call in enumerate(calls):
            if refresh:
                refresh(i)
            self._aligned()
            if self.device.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                outputs.append(call())
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                outputs.append(call())
                times.append((time.perf_counter() - t0) * 1e3)
        return times, outputs

    def _back_to_back(self, calls):
        self._aligned(flush=False)
        outputs = []
        if self.device.type != "cuda":
            stamps = [time.perf_counter()]
            for call in calls:
                outputs.append(call())
                stamps.append(time.perf_counter())
            return [(b - a) * 1e3 for a, b in zip(stamps, stamps[1:])], outputs
        events = [torch.cuda.Event(enable_timing=True) for _ in range(len(calls) + 1)]
        events[0].record()
        for i, call in enumerate(calls):
            outputs.append(call())
            events[i + 1].record()
        events[-1].synchronize()
        return [a.elapsed_time(b) for a, b in zip(events, events[1:])], outputs

    def capture(self, calls) -> str | None:
        """Capture ``calls`` in one CUDA graph; ``None`` or why it failed.

        The caller makes the ranks agree on the result before replaying (a
        rank that replays its collectives alone waits for peers that never
        come)."""
        if self.device.type != "cuda":
            return "CUDA-graph mode needs a GPU"
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        try:
            with torch.cuda.stream(side):
                for call in calls:
                    call()  # warm up on a side stream, as capture requires
            torch.cuda.current_stream(self.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                outputs = [call() for call in calls]
        except Exception as exc:  # noqa: BLE001 - not every callable can be captured
            return f"cannot capture in a CUDA graph: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        self._graph, self._graph_outputs = graph, outputs
        graph.replay()
        _sync(self.device)
        return None

    def _graph_replays(self, calls, replays):
        """One alignment, then the replays queued back to back, each after an L2
        flush queued on the same stream. Aligning every replay (host barrier,
        hold, device barrier: about 0.5 ms on 2xH200) cost each call of a
        50-call graph 10 us of the launcher's clock, more than a 4 KiB
        all-reduce takes; the replays' collectives keep the ranks in step."""
        if self._graph is None:
            raise GraphUnavailable("the batch was not captured")
        self._aligned(flush=False)
        events = []
        for _ in range(replays):
            self.flush()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            self._graph.replay()
            end.record()
            events.append((start, end))
        events[-1][1].synchronize()
        return [start.elapsed_time(end) / len(calls) for start, end in events], list(self._graph_outputs)
