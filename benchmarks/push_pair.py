#!/usr/bin/env python3
"""Two ranks of pkb_triton's push protocol in one process on one GPU: the Triton push kernels'
own cost, by launch shape, where no second GPU is lent.

Usage (a GPU machine with pkb installed)::

    python3 benchmarks/push_pair.py [--problems 1,2,4,6,7] [--sizes 4K,256K] [--shapes sample,2048x8,256x1,...]

Each "rank" is a set of tensors on the same device: its input, its output, its push workspace
(:data:`pkb_triton.push.EPOCHS` epochs of ``W`` slots filled with the sentinel) and its counters;
the pointer table every kernel reads holds both ranks' workspaces, so the sample's kernel runs
unchanged, rank 0's on one stream and rank 1's on another, concurrently. Their calls are captured
into one CUDA graph (``--calls`` of each rank's, the two chains side by side, nothing between a
rank's calls) and the graph replayed ``--replays`` times; a call's time is the replays' elapsed
time (CUDA events) over the calls. Every call's output is checked against torch's, on both ranks.

What it measures is the kernels' own work and their polling, with local HBM in place of the
link: the relative cost of launch shapes (``BLOCK`` elements a program, ``num_warps``; ``sample``:
what the sample launches, :func:`pkb_triton.push.push_launch`) and of protocol variants, not a
two-GPU latency. The rooted two (4 reduce, 6 gather) have rank 0 as their root. ``ping`` is the
floor of the same setup: two one-program kernels that each bump a word of the other's and wait
for their own, once a call.

Both ranks' kernels are compiled and loaded before either runs: the ranks differ in ``rank``,
which Triton specializes on (1 is a constant), and loading a module into the context waits for
the kernels running in it, so a rank-0 kernel that spun while rank 1's was loaded would wait
forever (the first version of this script hung so on an H200). A row that takes longer than
``--row-timeout`` prints every thread's stack and exits.
"""
from __future__ import annotations

import argparse
import faulthandler
import functools
import importlib.util
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

from pkb_triton.host import Peers
from pkb_triton.push import EPOCHS, SENTINELS, push_launch

SAMPLES = Path(__file__).resolve().parent.parent / "backends" / "triton" / "pkb_triton" / "samples"
#: The push kernels by problem: sample file and kernel name.
KERNELS = {1: ("1_allreduce", "_push_allreduce"), 2: ("2_allgather", "_push_allgather"),
           4: ("4_reduce", "_push_reduce"), 6: ("6_gather", "_push_gather"),
           7: ("7_reducescatter", "_push_reducescatter")}
#: The problems with a root (rank 0 here): their kernels take ``dst`` and ``ROOT``.
ROOTED = (4, 6)
WORLD = 2


@functools.lru_cache(maxsize=None)
def _sample(name: str):
    """The sample file ``name``, imported once (its kernels compiled and loaded once a shape)."""
    spec = importlib.util.spec_from_file_location(f"pushpair_{name}", SAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _bytes(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


class Rank:
    """One rank's tensors for one problem and size (see the module docstring)."""

    def __init__(self, rank: int, problem: int, nbytes: int, slot: int, dtype, device):
        size = torch.tensor([], dtype=dtype).element_size()
        bits, self.empty = SENTINELS[size]
        elements = nbytes // size
        self.rank = rank
        # n: what each slot receives a call (a row block of W for the reduce-scatter's input).
        self.n = elements
        self.x = torch.randn((WORLD if problem == 7 else 1) * elements, dtype=torch.float32, device=device).to(dtype)
        gathers = problem == 2 or (problem == 6 and rank == 0)
        self.out = torch.empty((WORLD, elements) if gathers else (elements,), dtype=dtype, device=device)
        self.slots = torch.full((EPOCHS * WORLD * slot,), self.empty, dtype=bits, device=device)
        self.progress = torch.zeros(WORLD, dtype=torch.int32, device=device)
        self.counters = torch.zeros(4, dtype=torch.int32, device=device)


def expected(problem: int, ranks: list[Rank]) -> list[torch.Tensor]:
    xs = [r.x.float() for r in ranks]
    if problem in (1, 4):
        total = sum(xs).to(ranks[0].x.dtype)
        return [total] * WORLD if problem == 1 else [total, *(r.x for r in ranks[1:])]
    if problem in (2, 6):
        stacked = torch.stack([r.x for r in ranks])
        return [stacked] * WORLD if problem == 2 else [stacked, *(r.x for r in ranks[1:])]
    return [sum(x.view(WORLD, -1)[p] for x in xs).to(ranks[0].x.dtype) for p in range(WORLD)]


class SideBySide:
    """Each rank's calls on a stream of its own, the streams forked from and joined back into the
    current one (so a CUDA graph captures them as parallel chains)."""

    def __init__(self, launches: list, device):
        self.launches, self.device = launches, device
        self.streams = [torch.cuda.Stream(device) for _ in launches]

    def __call__(self, count: int) -> None:
        start = torch.cuda.current_stream(self.device)
        for stream, launch in zip(self.streams, self.launches):
            stream.wait_stream(start)
            with torch.cuda.stream(stream):
                for _ in range(count):
                    launch()
        for stream in self.streams:
            start.wait_stream(stream)

    def graph_us(self, calls: int, replays: int) -> float:
        """Microseconds a call: ``calls`` of each rank captured in one CUDA graph, replayed
        ``replays`` times between two CUDA events (one replay first, untimed)."""
        graph = torch.cuda.CUDAGraph()
        capture = torch.cuda.Stream(self.device)
        with torch.cuda.stream(capture):
            with torch.cuda.graph(graph, stream=capture):
                self(calls)
        torch.cuda.synchronize(self.device)
        graph.replay()
        torch.cuda.synchronize(self.device)
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        torch.cuda.synchronize(self.device)
        return begin.elapsed_time(end) * 1e3 / (replays * calls)


def run(problem: int, nbytes: int, shape: str, calls: int, replays: int, dtype, device) -> float:
    """Microseconds a call of the problem's push kernel in ``shape`` (``BLOCKxWARPS`` or ``sample``),
    both ranks side by side (module docstring)."""
    name, kernel_name = KERNELS[problem]
    sample = _sample(name)
    kernel = getattr(sample, kernel_name)
    size = torch.tensor([], dtype=dtype).element_size()
    slot = sample.PUSH_MAX_BYTES // size
    ranks = [Rank(r, problem, nbytes, slot, dtype, device) for r in range(WORLD)]
    table = torch.tensor([r.slots.data_ptr() for r in ranks], dtype=torch.int64, device=device)
    progress_table = torch.tensor([r.progress.data_ptr() for r in ranks], dtype=torch.int64, device=device)
    peers = Peers(ptrs=table.data_ptr(), pads=0, rank=0, world_size=WORLD, pad_slots=1024, device=device)
    if shape == "sample":
        programs, block, warps = push_launch(ranks[0].n, peers)
    else:
        block, warps = (int(v) for v in shape.split("x"))
        programs = peers.grid(ranks[0].n, block)

    def arguments(r: Rank) -> tuple:
        root = (0,) if problem in ROOTED else ()
        return (r.x, r.out, r.slots, table.data_ptr(), r.counters, r.progress, progress_table.data_ptr(), r.rank,
                *root, r.n)

    def constants(r: Rank) -> dict:
        root = dict(ROOT=r.rank == 0) if problem in ROOTED else {}
        return dict(SLOT=slot, WORLD=WORLD, SIZE=size, EMPTY=r.empty, BLOCK=block, num_warps=warps, **root)

    for r in ranks:  # compiled and loaded before any rank spins (the module docstring)
        kernel.warmup(*arguments(r), grid=(programs,), **constants(r))._init_handles()

    both = SideBySide([lambda r=r: kernel[(programs,)](*arguments(r), **constants(r)) for r in ranks], device)
    want = expected(problem, ranks)
    for _ in range(3):  # every epoch once, eagerly, checked
        both(1)
        torch.cuda.synchronize(device)
        for r, w in zip(ranks, want):
            if not torch.equal(r.out, w):
                raise SystemExit(f"problem {problem} {nbytes} B shape {shape}: rank {r.rank} wrong")
    us = both.graph_us(calls, replays)
    for r, w in zip(ranks, want):
        if not torch.equal(r.out, w):
            raise SystemExit(f"problem {problem} {nbytes} B shape {shape}: rank {r.rank} wrong after replays")
    return us


@triton.jit
def _ping(words, rank, calls_word):
    """Bump the other rank's word, then wait until this rank's has been bumped as often as calls made."""
    call = tl.load(calls_word + rank, volatile=True) + 1
    tl.store(calls_word + rank, call)
    tl.atomic_add(words + (1 - rank), 1, sem="release", scope="gpu")
    while tl.atomic_add(words + rank, 0, sem="acquire", scope="gpu") < call:
        pass


def ping(calls: int, replays: int, device) -> float:
    """Microseconds a call of the floor: one word each way, both ranks side by side."""
    words = torch.zeros(2, dtype=torch.int32, device=device)
    counts = torch.zeros(2, dtype=torch.int32, device=device)
    for rank in range(WORLD):  # compiled and loaded before any rank spins (the module docstring)
        _ping.warmup(words, rank, counts, grid=(1,), num_warps=1)._init_handles()
    both = SideBySide([lambda rank=rank: _ping[(1,)](words, rank, counts, num_warps=1) for rank in range(WORLD)],
                      device)
    both(2)
    torch.cuda.synchronize(device)
    return both.graph_us(calls, replays)


def _spread(readings: list[float]) -> str:
    """The median of ``readings`` and their range."""
    readings = sorted(readings)
    return f"{readings[len(readings) // 2]:.2f}  [{readings[0]:.2f}, {readings[-1]:.2f}]"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", default="1,2,4,6,7")
    parser.add_argument("--sizes", default="4K,256K", help="bytes of each rank's message (K, M suffixes)")
    parser.add_argument("--shapes", default="sample,2048x8,1024x8,512x4",
                        help="launch shapes to compare: BLOCKxnum_warps, or sample (what the sample launches; "
                             "before 2026-12-02 every size in 2048x8)")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--replays", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3, help="readings of each row (their median and range)")
    parser.add_argument("--row-timeout", type=float, default=60.0,
                        help="seconds a row may take before every thread's stack is printed and the script exits")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("push_pair: needs a GPU", file=sys.stderr)
        return 1
    device = torch.device("cuda", 0)
    dtype = getattr(torch, args.dtype)
    faulthandler.dump_traceback_later(args.row_timeout, exit=True)
    print(f"ping (floor): {_spread([ping(args.calls, args.replays, device) for _ in range(args.repeats)])} us a call",
          flush=True)
    print("problem  size    shape     us/call  [min, max]")
    for problem in (int(p) for p in args.problems.split(",")):
        for size_text in args.sizes.split(","):
            for shape in args.shapes.split(","):
                faulthandler.dump_traceback_later(args.row_timeout, exit=True)
                readings = [run(problem, _bytes(size_text), shape, args.calls, args.replays, dtype, device)
                            for _ in range(args.repeats)]
                print(f"{problem:>7}  {size_text:>5}  {shape:>7}  {_spread(readings):>22}", flush=True)
    faulthandler.cancel_dump_traceback_later()
    return 0


if __name__ == "__main__":
    sys.exit(main())
