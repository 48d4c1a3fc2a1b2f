#!/usr/bin/env python3
"""Do two processes running the same reference on the same GPUs take the same device time? (issue 53)

Usage::

    python3 benchmarks/process_states.py PROBLEM_ID [--pairs 6] [--calls 10] [--rounds 7] [--streams 0,3]

Window mode's two groups of the same code read apart by 4-40 % on 2xH200 (2026-11-30: problem
56's own CUDA events 114-128 us a call in one group's rank 0, 155-166 us in the other's, the
order changing from job to job). This script takes
pkb's harness out of the question: it starts ``--pairs`` fresh pairs of processes (one per GPU,
NCCL), one pair after another, each building the problem's inputs at the default size and timing
its reference by its own CUDA events, the host queued ahead (a ``torch.cuda._sleep`` three times
as long as the slowest rank's host takes to queue a round, the same on both ranks, holds the
devices while the hosts queue it, so no host gap is inside). Per pair and rank it prints, in us a
call (the median of ``--rounds`` rounds of ``--calls`` calls):

* ``plain``: the inputs as ``inputs`` made them;
* ``symmetric``: the same values copied into symm_mem buffers, one a tensor, as pkb places a set
  (the reference backend's heap, :mod:`pkb_core.symmetric.torch_heap`);
* ``plain2``, ``symmetric2``: both again, after each other (a process's state against a layout's);
* ``<name>_ahead``: the share of rounds whose first event was still behind the hold when the host
  had queued the round (below 1: that reading times the host);
* ``streams``: how many CUDA streams the pair's processes made (and kept) before their first
  call (``--streams``, a list taken in turn by the pairs; 0 by default), as pkb's sides made one
  with each gate region they mapped until 2026-11-30: whether the state follows the streams a
  process made before NCCL made its own (the device spreads a context's streams over
  ``CUDA_DEVICE_MAX_CONNECTIONS`` hardware queues in the order they are made);
* ``<name>_profile``: the profiler's sum of a call's kernel durations (``kernels``), its span
  from the first kernel's start to the last's end (``span``) and its kernels (``n``): whether a
  slow process runs slower kernels or waits between them (on a rank that receives, its NCCL
  kernels' waiting is in ``kernels``).
"""
from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import os
import statistics
import sys

#: The device's clock in cycles a second, about (an H200's SM clock under load), to turn a hold's
#: length into ``torch.cuda._sleep`` cycles.
CYCLES_PER_S = 1.98e9


def load_problem(problem_id: int):
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "problems", "pkb_problems")
    path, = glob.glob(os.path.join(root, "*", f"{problem_id}_*.py"))
    spec = importlib.util.spec_from_file_location(f"problem_{problem_id}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def hold_cycles(torch, dist, call, calls: int) -> int:
    """A hold three times as long as the slowest rank's host takes to queue a round (at least
    20 ms), the same on every rank (a rank whose hold ended first would wait for the others in
    its collectives, inside its events)."""
    import time

    torch.cuda.synchronize()
    began = time.perf_counter()
    for _ in range(calls):
        call()
    queued_s = torch.tensor([time.perf_counter() - began], device="cuda")
    torch.cuda.synchronize()
    dist.all_reduce(queued_s, op=dist.ReduceOp.MAX)
    return int(max(0.02, 3 * queued_s.item()) * CYCLES_PER_S)


def per_call_us(torch, dist, call, calls: int, rounds: int) -> tuple[float, float]:
    """The median over ``rounds`` of a round's span by its own events, over ``calls`` calls, and
    the share of rounds the host queued before the hold ended (a round not queued ahead times
    the host)."""
    readings, ahead = [], 0
    hold = hold_cycles(torch, dist, call, calls)
    for _ in range(rounds):
        dist.barrier()
        torch.cuda.synchronize()
        torch.cuda._sleep(hold)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            call()
        end.record()
        ahead += not start.query()
        end.synchronize()
        readings.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(readings), ahead / rounds


def kernel_account(torch, dist, call, calls: int) -> dict:
    """The profiler's view of ``calls`` calls: kernel time a call, span a call, kernels a call."""
    from torch.profiler import ProfilerActivity, profile

    hold = hold_cycles(torch, dist, call, calls)
    dist.barrier()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.cuda._sleep(hold)
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type.name == "CUDA" and not any(w in e.name.lower() for w in ("sleep", "spin"))]
    if not kernels:
        return {}
    busy = sum(e.device_time for e in kernels)
    first = min(e.time_range.start for e in kernels)
    last = max(e.time_range.end for e in kernels)
    return {"kernels": round(busy / calls, 2), "span": round((last - first) / calls, 2), "n": len(kernels) // calls}


def symmetric_copies(torch, args) -> tuple:
    """``args`` with every tensor copied into a symm_mem buffer of its own (pkb's placing: one
    buffer per tensor leaf, rendezvoused on the world group), the rest as they are."""
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    def place(value):
        if not isinstance(value, torch.Tensor):
            return value
        nbytes = max(value.numel() * value.element_size(), 16)
        buffer = symm_mem.empty(nbytes, dtype=torch.uint8, device=value.device)
        symm_mem.rendezvous(buffer, dist.group.WORLD.group_name)
        view = buffer[:value.numel() * value.element_size()].view(value.dtype).view(value.shape)
        view.copy_(value)
        return view

    return tuple(place(a) for a in args)


def worker(rank: int, problem_id: int, port: int, calls: int, rounds: int, pair: int, streams: int) -> None:
    import torch
    import torch.distributed as dist

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from pkb_core.problem.contract import RunContext

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=2, device_id=torch.device("cuda", rank))
    module = load_problem(problem_id)
    ctx = RunContext(rank=rank, world_size=2, device=f"cuda:{rank}", dtype=torch.bfloat16, size="default",
                     params=module.SIZES["default"], trial=0, secret=b"process-states", problem_key=str(problem_id))
    args = module.inputs(ctx)

    placed = symmetric_copies(torch, args)
    kept = [torch.cuda.Stream() for _ in range(streams)]  # made before the call's first NCCL use

    def plain():
        module.reference(*args)

    def symmetric():
        module.reference(*placed)

    for _ in range(10):
        plain()
        symmetric()
    torch.cuda.synchronize()
    found = {"pair": pair, "rank": rank, "streams": len(kept)}
    for name, call in (("plain", plain), ("symmetric", symmetric), ("plain2", plain), ("symmetric2", symmetric)):
        us, found[f"{name}_ahead"] = per_call_us(torch, dist, call, calls, rounds)
        found[name] = round(us, 2)
    for name, call in (("plain", plain), ("symmetric", symmetric)):
        found[f"{name}_profile"] = kernel_account(torch, dist, call, calls)
    print(json.dumps(found), flush=True)
    dist.destroy_process_group()


def stream_counts(text: str) -> list[int]:
    """``--streams``: counts of streams, comma-separated, each 0 or more."""
    try:
        counts = [int(n) for n in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of counts") from None
    if any(n < 0 for n in counts):
        raise argparse.ArgumentTypeError(f"{text!r}: a count of streams cannot be negative")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("problem", type=int)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--streams", default=[0], type=stream_counts,
                        help="streams made before the first call, by pair in turn (e.g. 0,3)")
    options = parser.parse_args()
    streams = options.streams
    import torch.multiprocessing as mp

    for pair in range(options.pairs):
        mp.spawn(worker, args=(options.problem, 29600 + pair, options.calls, options.rounds, pair,
                               streams[pair % len(streams)]), nprocs=2)


if __name__ == "__main__":
    main()
