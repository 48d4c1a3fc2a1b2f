#!/usr/bin/env python3
"""Where two process groups of the same code differ (issue 53, targets 5 and 6; two GPUs).

Usage (one node, two GPUs, four processes: two groups of two ranks, as an A/A job has)::

    torchrun --nproc-per-node 4 benchmarks/comm_offsets.py [--bytes 4096] [--comms 3]
        [--calls 200] [--rounds 40]

pkb's window mode reads the reference in one process group and the candidate in another. With
the same code on both sides (an A/A job) on 2xH200, the two groups' 4 KiB calls sat 0.16-0.85 us
apart for a whole job (docs/benchmarks/2026-11-30-h200x2-clock-targets-d.md), and a harness batch
with no call run by each group did not predict by how much (2026-11-30, ``PKB_GROUP_OFFSETS``).
This asks which part of a group carries that offset, with no pkb code in the way:

* group ``A`` is ranks 0 and 1 (GPUs 0 and 1), group ``B`` ranks 2 and 3 (the same GPUs);
* each group opens ``--comms`` NCCL communicators of its own two ranks (``new_group``);
* the workloads: ``nccl<c>``, an all-reduce of ``--bytes`` of bf16 on communicator ``c``, and
  ``local``, an in-place add on a tensor of the same size (no communication: the process's
  own kernels);
* each round runs every (group, workload) once, in an order drawn for the round (the same on
  every rank), one group at a time on the GPUs (the others wait at a gloo barrier, as pkb's
  groups take turns): a long ``torch.cuda._sleep`` holds the stream while the host queues
  ``--calls`` calls, two CUDA events bracket them, and the time per call is the events' span
  divided by the calls (the slower rank's).

It prints, per group and workload, the median over rounds of the time per call, and for each
workload the paired difference B - A round by round (median and a 95 % interval of that median
by order statistics). A communicator offset is a difference between ``nccl0`` and ``nccl1`` of one
group, or an ``A``/``B`` difference that changes sign between communicators; a process offset is
one that ``local`` shows too.
"""
from __future__ import annotations

import argparse
import os
import random
import statistics

import torch
import torch.distributed as dist

#: About 20 ms at an H200's clock: longer than the host takes to queue 200 NCCL calls.
HOLD_CYCLES = 40_000_000


def options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", type=int, default=4096)
    parser.add_argument("--comms", type=int, default=3)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=40)
    return parser.parse_args()


def per_call_us(work, calls: int) -> float:
    """One batch: the host queues ``calls`` calls behind a long sleep, the events time them."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(HOLD_CYCLES)
    start.record()
    for _ in range(calls):
        work()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


def median_interval(values: list[float]) -> tuple[float, float, float]:
    """The median and a ~95 % interval of it by order statistics (binomial, normal approximation)."""
    ordered = sorted(values)
    n = len(ordered)
    half = 1.96 * (n ** 0.5) / 2
    low, high = max(0, int(n / 2 - half)), min(n - 1, int(n / 2 + half))
    return statistics.median(ordered), ordered[low], ordered[high]


def main() -> int:
    args = options()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if world != 4 or torch.cuda.device_count() < 2:
        raise SystemExit("comm_offsets: needs four processes (--nproc-per-node 4) and two GPUs")
    torch.cuda.set_device(rank % 2)
    dist.init_process_group("gloo")
    group_name = "A" if rank < 2 else "B"
    members = {"A": [0, 1], "B": [2, 3]}
    # new_group is collective over the world: every rank creates every group, in one order.
    comms = {name: [dist.new_group(ranks, backend="nccl") for _ in range(args.comms)] for name, ranks in members.items()}
    mine = comms[group_name]
    numel = max(1, args.bytes // 2)
    tensor = torch.ones(numel, dtype=torch.bfloat16, device="cuda")
    local = torch.zeros(numel, dtype=torch.bfloat16, device="cuda")
    workloads = {f"nccl{c}": (lambda c=c: dist.all_reduce(tensor, group=mine[c])) for c in range(args.comms)}
    workloads["local"] = lambda: local.add_(1)
    for work in workloads.values():  # warm-up: each communicator's lazy init, the kernels' loading
        for _ in range(20):
            work()
    torch.cuda.synchronize()
    dist.barrier()

    order_rng = random.Random(53)
    keys = [(g, w) for g in members for w in workloads]
    times: dict[tuple[str, str], list[float]] = {key: [] for key in keys}
    for _ in range(args.rounds):
        order = keys[:]
        order_rng.shuffle(order)
        for g, w in order:
            dist.barrier()
            value = per_call_us(workloads[w], args.calls) if g == group_name else 0.0
            # The slower rank's time: every rank takes part, the other group's add zeros.
            reading = torch.tensor([value], dtype=torch.float64)
            dist.all_reduce(reading, op=dist.ReduceOp.MAX)
            times[(g, w)].append(float(reading.item()))

    if rank == 0:
        print(f"comm_offsets: {torch.cuda.get_device_name()} x2, {args.bytes} bytes, {args.comms} communicators a group, "
              f"{args.calls} calls a batch, {args.rounds} rounds (us a call)")
        print(f"{'workload':>9} {'A median':>9} {'B median':>9} {'B-A median':>11} {'95 % interval':>18}")
        for w in workloads:
            a, b = times[("A", w)], times[("B", w)]
            diff, low, high = median_interval([y - x for x, y in zip(a, b)])
            print(f"{w:>9} {statistics.median(a):9.3f} {statistics.median(b):9.3f} {diff:+11.3f}   [{low:+.3f}, {high:+.3f}]")
        for g in members:
            base = times[(g, "nccl0")]
            for c in range(1, args.comms):
                other = times[(g, f"nccl{c}")]
                diff, low, high = median_interval([y - x for x, y in zip(base, other)])
                print(f"  group {g}: nccl{c} - nccl0 {diff:+.3f} [{low:+.3f}, {high:+.3f}]")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
