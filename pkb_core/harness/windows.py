"""One side's calls, each in a window of the judge's timekeeper (docs/timing.md).

The same code runs the reference's calls (in the judge's processes), a candidate's (in
its own) and the null side's (the judge's, calling nothing: the cost of a window itself).
For every call ``w`` of a batch the side

1. waits for the timekeeper's ``go`` (:mod:`pkb_core.harness.gates`): set ``w`` is in ``in_slot``;
2. places it in its own buffers (the backend's symmetric heap for a candidate) and calls;
3. writes the call's outputs and its argument buffers after the call into ``out_slot``
   (:func:`pkb_core.harness.parcel.pack_into`) and signals ``done``.

On GPU all of it is queued on the side's stream behind the gate words (stream memory
operations, front-end waits): the host queues calls ahead, the device runs each one when
its gate opens, so neither side's host work (Python, launches, the command's messages)
lies inside a window unless the device waits for it. On CPU the steps run in this
process as they come. Nothing here measures time: the timekeeper's clock does.
"""
from __future__ import annotations

import gc
import time

import torch

from pkb_core.harness.gates import SideRegion
from pkb_core.harness.parcel import TRUSTED, pack_into, unpack_from


#: Calls queued on GPU before the side says it is ready. 0: ``ready`` comes first. A head
#: start (measured on 2xH100 with 8) deadlocks a call whose queueing waits on the device
#: (a first allocation's rendezvous, an ``.item()``): its window never opens. The first
#: window of a batch is a lead-in instead (pkb_core.conduct.window_rounds).
HEAD_START = 0


class WindowTimeout(RuntimeError):
    """The timekeeper never opened the gate of a call (CPU: the side gave up waiting)."""


class WindowSide:
    """A side's end of its gate region on one rank, mapped once per region the timekeeper makes."""

    def __init__(self, device):
        self.device = device
        self.region = None
        self.key = None
        #: The median host time this side spent queueing (GPU) or running (CPU) one call of its
        #: last batch, in microseconds: a diagnostic (on GPU a side whose host needs longer than
        #: a window makes the device wait for it inside the window).
        self.host_us = None
        #: Garbage collections of this process during its last batch (0 unless its calls ask for one).
        self.collections = 0

    def attach(self, region: dict) -> SideRegion:
        """Map the region the judge described (``handle`` or ``path``, ``in_bytes``, ``out_bytes``,
        ``generation``), unless it is the one already mapped."""
        key = (region.get("handle"), region.get("path"), region["in_bytes"], region["out_bytes"],
               region.get("generation"))
        if key != self.key:
            if self.region is not None:
                self.region.close()
            self.region = SideRegion(device=self.device, handle=region.get("handle", ""),
                                     path=region.get("path", ""), in_bytes=region["in_bytes"],
                                     out_bytes=region["out_bytes"])
            self.key = key
        return self.region

    def run(self, *, epoch: int, skeletons: list, call, timeout_s: float, make_group=None) -> list:
        """Run call ``w`` on set ``w`` (``skeletons[w]``: its layout in ``in_slot``) in window
        ``w`` of the round with epoch ``epoch``; the skeletons of what each call left in
        ``out_slot``, in order.

        :param call: ``call(args) -> (outputs, arguments after the call)``, where ``args`` is
            the set as views of ``in_slot`` (the side copies what it keeps).
        """
        region = self.region
        deadline = time.monotonic() + timeout_s
        written, host = [], []
        was_enabled = gc.isenabled()
        gc.disable()  # no collection of this process lands inside a window
        collected = _collections()
        head = HEAD_START if self.device.type == "cuda" else 0
        try:
            if not head:
                region.write_ready(epoch)
            for w, skeleton in enumerate(skeletons):
                mark = epoch + 1 + w
                if not region.wait_go(mark, deadline):
                    raise WindowTimeout(f"the gate of call {w} never opened")
                queued = time.perf_counter()
                args = unpack_from(skeleton, region.in_slot, limits=TRUSTED, make_group=make_group, copy=False)
                outputs, after = call(args)
                written.append(pack_into({"out": outputs, "args": after}, region.out_slot))
                region.write_done(mark)
                host.append(time.perf_counter() - queued)
                if head and w + 1 == min(head, len(skeletons)):
                    region.write_ready(epoch)  # a head start: the host stays ahead of the device
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            self.collections = _collections() - collected  # read before the collector is on again
        except BaseException:
            region.abandon(epoch + len(skeletons))
            raise
        finally:
            if was_enabled:
                gc.enable()
        self.host_us = sorted(host)[len(host) // 2] * 1e6 if host else None
        return written

    def close(self) -> None:
        if self.region is not None:
            self.region.close()
            self.region = self.key = None


def _collections() -> int:
    """Collections this process's garbage collector has made, all generations."""
    return sum(generation["collections"] for generation in gc.get_stats())
