"""One side's calls, each in a window of the judge's timekeeper (docs/timing.md).

The same code runs the reference group's calls, a candidate's, and the judge's null side
(the empty hand-off: a window with no call in it, what a window costs by itself). For every
call ``w`` of a batch the side

1. announces it (``queued``, :mod:`pkb_core.harness.gates`): on GPU once everything the call
   does is queued on its stream behind the gate; on CPU once it waits for the gate;
2. waits for the timekeeper's ``go``: set ``w`` is in ``in_slot``;
3. places it in its own buffers (the backend's symmetric heap for a candidate: the buffers'
   views are made before the gate, the copies after it) and calls;
4. writes the call's outputs and its argument buffers after the call into ``out_slot``
   (:func:`pkb_core.harness.parcel.pack_into`), says how many bytes that filled (``used``: the
   host engine snapshots no more) and signals ``done``.

The timekeeper starts window ``w``'s clock only once ``queued`` says the call is on the
device's queue, so on GPU the side's host (unpacking, Python, launches) is never inside a
window: the host queues the whole batch ahead (the host engine opens no window before it has),
and the device runs each call when its gate opens. A call whose queueing waits for the device (an ``.item()``, a first allocation's
rendezvous) cannot be queued ahead of its own gate: the timekeeper sees it stall and opens
the gate itself, and the record says from which call the side's windows hold its host's
time (``not_queued_ahead``). Nothing here measures time: the timekeeper's clock does.
"""
from __future__ import annotations

import gc
import time

import torch

from pkb_core.harness.copies import region_copies
from pkb_core.harness.gates import SideRegion
from pkb_core.harness.mask import Unmasker
from pkb_core.harness.parcel import TRUSTED, ParcelError, pack_into, skeleton_end, unpack_from


class WindowTimeout(RuntimeError):
    """The timekeeper never opened the gate of a call (CPU: the side gave up waiting)."""


class WindowSide:
    """A side's end of its gate region on one rank, mapped once per region the timekeeper makes."""

    def __init__(self, device):
        self.device = device
        #: The region the next batch runs on, and every region of its pool mapped so far.
        self.region = None
        self.key = None
        self.mapped: dict = {}
        self.pool = None
        #: The median host time this side spent queueing (GPU) or running (CPU) one call of its
        #: last batch, in microseconds: a diagnostic (on GPU it lies before each window).
        self.host_us = None
        #: Garbage collections of this process during its last batch (0 unless its calls ask for one).
        self.collections = 0
        #: Whether the judge asked for the side's own events around each call, and their median over
        #: the last batch in microseconds (None where not asked): :mod:`pkb_core.harness.call_events`.
        self.call_events = False
        self.call_event_us = None
        #: Of each call's span, the part before the solution's own work (the set's placing and the
        #: ranks' barrier: :meth:`placed`), median over the last batch in microseconds; None where
        #: not asked, or where the side's call marks no such point.
        self.place_event_us = None
        self._placed = None
        #: How this side's harness copies sets in and outputs out, as the judge said with the
        #: region (:mod:`pkb_core.harness.copies`).
        self.copies = "engine"
        #: Whether the next batch's sets arrive masked (:mod:`pkb_core.harness.mask`), as the judge
        #: said with the region, and each mapped region's unmasking (made on its first masked batch
        #: with a call: the null side reads no set).
        self.masked = False
        self.unmaskers: dict = {}

    @staticmethod
    def _key(region: dict) -> tuple:
        return (region.get("handle"), region.get("path"), region["in_bytes"], region["out_bytes"],
                region.get("generation"))

    def in_pool(self, region: dict) -> bool:
        """Whether ``region`` belongs to the pool whose regions are mapped here."""
        return self.pool == region.get("pool")

    def close(self) -> None:
        """Unmap every region (a device engine's allocation must be unmapped here before its
        timekeeper's next one may take its address)."""
        for mapped in self.mapped.values():
            mapped.close()
        self.mapped.clear()
        self.unmaskers.clear()
        self.region = self.key = self.pool = None

    def attach(self, region: dict) -> SideRegion:
        """Make the region the judge described (``handle`` or ``path``, ``in_bytes``, ``out_bytes``,
        ``generation``, ``pool``, ``copies``) the one the next batch runs on, mapping it unless it is mapped
        already. A region of another pool (:mod:`pkb_core.judge.region_pool`) unmaps every
        region of the old one first."""
        if not self.in_pool(region):
            self.close()
            self.pool = region.get("pool")
        key = self._key(region)
        if key not in self.mapped:
            self.mapped[key] = SideRegion(device=self.device, handle=region.get("handle", ""),
                                          path=region.get("path", ""), announce=region.get("announce", ""),
                                          in_bytes=region["in_bytes"],
                                          out_bytes=region["out_bytes"])
        self.region, self.key = self.mapped[key], key
        self.copies = region_copies(region)
        self.masked = bool(region.get("masked"))
        self.call_events = region.get("call_events") is True
        return self.region

    def run(self, *, epoch: int, skeletons: list, call, timeout_s: float, make_group=None, fill: int = 0,
            before_gate=None) -> list:
        """Run call ``w`` on set ``w`` (``skeletons[w]``: its layout in ``in_slot``) in window
        ``w`` of the round with epoch ``epoch``; the skeletons of what each call left in
        ``out_slot``, in order.

        :param call: ``call(args) -> (outputs, arguments after the call)``, where ``args`` is
            the set as views of ``in_slot`` (the side copies what it keeps); ``None`` for the
            empty hand-off (the null side: each window is a wait for ``go`` and ``done``).
        :param fill: the bytes of ``out_slot`` a call with nothing to export says it filled (the
            judge's own sides say the reference's, so their windows copy what a real side's do).
        :param before_gate: ``before_gate(args) -> prepared``, run before the call's gate (what
            needs no value of the set: views, allocations, finding the callable); ``call`` is then
            given ``prepared`` instead of ``args``. On CPU the host's work from the gate on is
            inside the window, so what can be done before it is.
        """
        region = self.region
        # A masked set is taken out of in_slot before its window and unmasked into this side's own
        # memory once its gate opens; the call's views are laid out there instead of in in_slot.
        unmask = None
        if self.masked and call is not None:
            if self.key not in self.unmaskers:
                self.unmaskers[self.key] = Unmasker(region.masked_slot, region.key_words)
            unmask = self.unmaskers[self.key]
        source = region.in_slot if unmask is None else unmask.plain
        deadline = time.monotonic() + timeout_s
        written, host = [], []
        events = [] if self.call_events and call is not None else None  # (start, end) of each call
        was_enabled = gc.isenabled()
        gc.disable()  # no collection of this process lands inside a window
        collected = _collections()
        on_device = self.device.type == "cuda"
        try:
            for w, skeleton in enumerate(skeletons):
                mark = epoch + 1 + w
                queued = time.perf_counter()
                # The set's views of in_slot are laid out before the gate (their values arrive with it).
                args = None if call is None else unpack_from(skeleton, source, limits=TRUSTED,
                                                             make_group=make_group, copy=False)
                if before_gate is not None and call is not None:
                    args = before_gate(args)
                if not on_device:
                    region.write_queued(mark)  # CPU: from here on this side only waits for the gate
                if self.masked:
                    # Every side of a masked batch, the null too, answers the release: the timekeeper
                    # opens no window before the set is taken.
                    if not region.wait_released(mark, deadline):
                        raise WindowTimeout(f"the set of call {w} was never released")
                    if unmask is not None:
                        unmask.take(skeleton_end(skeleton))
                    region.write_taken(mark)
                if not region.wait_go(mark, deadline):
                    raise WindowTimeout(f"the gate of call {w} never opened")
                if not on_device:
                    queued = time.perf_counter()  # CPU: the host time of the call itself
                if unmask is not None:
                    unmask(skeleton_end(skeleton))
                if call is None:
                    written.append(None)
                else:
                    start = _stamp(on_device) if events is not None else None
                    self._placed = None
                    outputs, after = call(args)
                    if events is not None:
                        events.append((start, self._placed, _stamp(on_device)))
                    try:
                        written.append(pack_into({"out": outputs, "args": after}, region.out_slot,
                                                 copies=self.copies))
                    except ParcelError as exc:
                        raise ParcelError(f"call {w}'s outputs and arguments after it do not fit window mode's out "
                                          f"slot, twice what the reference's largest trial exported ({exc})") from None
                region.finish(max(fill, skeleton_end(written[-1])), mark)  # used, then done
                if on_device:
                    region.write_queued(mark)  # GPU: all of call w is on the stream, behind its gate
                host.append(time.perf_counter() - queued)
            if on_device:
                torch.cuda.synchronize(self.device)
            self.collections = _collections() - collected  # read before the collector is on again
        except BaseException:
            region.abandon(epoch + len(skeletons))
            raise
        finally:
            if was_enabled:
                gc.enable()
        self.host_us = sorted(host)[len(host) // 2] * 1e6 if host else None
        self.call_event_us = _median_us([(s, e) for s, _, e in events], on_device) if events else None
        placing = [(s, p) for s, p, _ in events] if events else []
        self.place_event_us = _median_us(placing, on_device) if placing and all(p is not None for _, p in placing) \
            else None
        return written

    def placed(self) -> None:
        """Where ``PKB_CALL_EVENTS=on``: stamp the point in a windowed call where the set is in place
        and the ranks have crossed the barrier, just before the solution's own work
        (``place_event_us``: the window's start to there; the side's own account, as
        ``call_event_us``). Called by the side's ``call`` (:meth:`run`); nothing otherwise."""
        if self.call_events:
            self._placed = _stamp(self.device.type == "cuda")


def _stamp(on_device: bool):
    """A point in a side's own time: a CUDA event recorded on the current stream (GPU), the host's
    clock (CPU)."""
    if not on_device:
        return time.perf_counter()
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return event


def _median_us(events: list, on_device: bool) -> float:
    """The median of ``(start, end)`` stamps' spans, in microseconds (GPU: once they have run)."""
    spans = sorted((start.elapsed_time(end) * 1e3) if on_device else (end - start) * 1e6 for start, end in events)
    return round(spans[len(spans) // 2], 3)


def _collections() -> int:
    """Collections this process's garbage collector has made, all generations."""
    return sum(generation["collections"] for generation in gc.get_stats())
