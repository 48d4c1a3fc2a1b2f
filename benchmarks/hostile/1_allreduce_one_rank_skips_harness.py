"""A hostile file for window mode at ONE rank (`--nproc 1`, the one-GPU runs of docs/benchmarks):
the least a call's window can hold. Its own window loop replaces pkb's (the loop runs in the side's
process): no placing of the set in the heap, no device barrier, no separate export. Each window is
the gate, then one copy of the set from ``in_slot`` straight into the output's place in ``out_slot``
(an all-reduce over one rank is its input) and one into the arguments' place, then ``used`` and
``done``. At two ranks its answers are wrong (`fail`). On one H200 at 4 KiB it passed at 3.65x
against the judge's own harness side with a quarter of its cost allowed, and is `flagged` against
the reference group's harness batch (docs/benchmarks/2026-11-29-h200-skipped-harness.md); read it
beside 1_allreduce_honest.py."""
import time

import torch

from pkb_core.harness import parcel, windows
from pkb_core.harness.copies import copy_into


def _run(self, *, epoch, skeletons, call, timeout_s, make_group=None, **_):
    region, deadline, written = self.region, time.monotonic() + timeout_s, []
    on_device = self.device.type == "cuda"
    for w, skeleton in enumerate(skeletons):
        mark = epoch + 1 + w
        args = parcel.unpack_from(skeleton, region.in_slot, limits=parcel.TRUSTED, make_group=make_group, copy=False)
        layout = parcel.pack_into({"out": args[0], "args": args}, region.out_slot)  # the layout alone
        outs = parcel.unpack_from(layout, region.out_slot, limits=parcel.TRUSTED, copy=False)
        if not on_device:
            region.write_queued(mark)
        if not region.wait_go(mark, deadline):
            raise windows.WindowTimeout(f"the gate of call {w} never opened")
        copy_into(outs["out"], args[0], self.copies)
        copy_into(outs["args"][0], args[0], self.copies)
        written.append(layout)
        region.finish(parcel.skeleton_end(layout), mark)
        if on_device:
            region.write_queued(mark)
    if on_device:
        torch.cuda.synchronize(self.device)
    self.host_us, self.collections = None, 0
    return written


windows.WindowSide.run = _run


def solution(tensor):
    import torch.distributed as dist

    out = tensor.clone()
    dist.all_reduce(out)
    return out
