"""Several gate regions for each side, taken in turn (docs/timing.md, "Where a window's memory lies").

A window's cost can depend on the memory of the gate region it runs on: on one H200
(2026-11-29, docs/benchmarks/2026-11-29-h200-window-groups.md) four regions of one timekeeper,
timed in turn by one side, read 4 KiB windows up to 1 us apart, region by region, in every batch
of a run where the side's gates were one-thread kernels; with the stream operations pkb's gates
are, the regions' medians lay within 0.07-0.25 us of each other. A side that kept one region
for a whole job would carry its region's offset into every round, and the other side its own: a
difference between two groups of the same code that no number of rounds shrinks. So each side
of a host engine gets a pool of regions, made by the timekeeper (no side has a say in where
their pages lie), and its batches take them in a new random order in each cycle through the
pool: a region's offset becomes one round's noise, which the rounds' interval holds, and a
side's mean is over all of its pool's regions.

A pool holds up to :data:`POOL_MAX` regions, fewer where the regions are large
(:data:`POOL_BYTES` in all: each is pinned by the side's GPU). The device engine's regions
(device memory, sets over 16 MiB) are one per side: a window there is hundreds of us long.
"""
from __future__ import annotations

import random

#: The most regions one side's pool holds, and the bytes its regions may take in all.
POOL_MAX = 8
POOL_BYTES = 16 << 20


def pool_size(region_bytes: int, host_engine: bool) -> int:
    """How many regions of ``region_bytes`` a side's pool holds."""
    if not host_engine:
        return 1
    return max(1, min(POOL_MAX, POOL_BYTES // max(1, region_bytes)))


class RegionPool:
    """The regions of one side for slots of one size in one folder (a new job's, or larger
    sets, make a new pool). ``ident`` tells a side's process that a region belongs to a new
    pool, so that it unmaps the old pool's before it maps any of the new one's."""

    def __init__(self, *, ident: int, in_bytes: int, out_bytes: int, folder: str, size: int):
        self.ident = ident
        self.in_bytes, self.out_bytes, self.folder = in_bytes, out_bytes, folder
        self.size = size
        #: Index -> the region as the side attaches it (made on first use).
        self.regions: dict = {}
        self._order: list = []
        self._draw = random.Random()

    def fits(self, in_bytes: int, out_bytes: int, folder: str) -> bool:
        return self.in_bytes >= in_bytes and self.out_bytes >= out_bytes and self.folder == folder

    def next_index(self) -> int:
        """The index of the region the side's next batch runs on: every region once per cycle,
        in a new random order each cycle."""
        if not self._order:
            self._order = list(range(self.size))
            self._draw.shuffle(self._order)
        return self._order.pop()
