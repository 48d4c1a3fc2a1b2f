"""A staggered correctness trial on the candidate's side (the launcher's choice of rank:
:mod:`pkb_core.conduct.staggered_trials`).

The late rank holds back before its call for a while that outlasts the others' calls: twice the
shortest call this rank has made in step or late (its own call and packing, no wait on a peer in
it), at least :data:`LEAST_HOLD_S` and at most :data:`MOST_HOLD_S`. The first staggered trial
reads the first trial's call, first uses included, so it usually holds the longest. A host sleep
on a GPU too: the late rank's stream is idle after the harness barrier, so its kernels start
after it.

Every other rank, once its answer is packed, fills the buffers pkb handed it with ``0xff`` bytes
(NaN in floating point, -1 in integers): what a caller may do with its inputs once a call has
returned, and what a peer that is still reading them then reads; then it says so
(:mod:`pkb_core.candidate.late_reads`, whose gate holds the late rank's reads for it where a
backend runs its kernels in an interpreter).
"""
from __future__ import annotations

import time

import torch

#: Bounds of the late rank's hold, in seconds.
LEAST_HOLD_S = 0.002
MOST_HOLD_S = 0.1


class Stagger:
    """One rank's part in staggered trials: how long its calls take, its hold, its scrub."""

    def __init__(self):
        self.shortest_s: float | None = None

    def hold(self) -> None:
        """Start late (this rank is the trial's late one): sleep before the call for twice its
        shortest call, within the bounds."""
        shortest = self.shortest_s if self.shortest_s is not None else MOST_HOLD_S
        time.sleep(min(MOST_HOLD_S, max(LEAST_HOLD_S, 2 * shortest)))

    def took(self, seconds: float, *, waited_on_peer: bool) -> None:
        """One call's span (call and packing); kept only where no late peer was waited on."""
        if not waited_on_peer:
            self.shortest_s = seconds if self.shortest_s is None else min(self.shortest_s, seconds)

    @staticmethod
    def scrub(buffers: list[torch.Tensor]) -> None:
        """Overwrite what this rank was handed, now that its call has returned."""
        for buffer in buffers:
            buffer.view(torch.uint8).fill_(0xFF)
        if buffers and buffers[0].device.type == "cuda":
            torch.cuda.synchronize(buffers[0].device)
