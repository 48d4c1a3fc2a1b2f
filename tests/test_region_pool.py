"""Each side's batches run on a pool of gate regions in turn (pkb_core.judge.region_pool): a
region's memory sets an offset on every window run on it, so no side keeps one region all job."""
from __future__ import annotations

import collections
import os

import torch

from pkb_core.harness.windows import WindowSide
from pkb_core.judge.clock import Timekeeper
from pkb_core.judge.region_pool import POOL_MAX, RegionPool, pool_size

CPU = torch.device("cpu")


def test_every_region_of_a_pool_once_per_cycle_in_a_new_order():
    pool = RegionPool(ident=1, in_bytes=64, out_bytes=64, folder="f", size=5)
    cycles = [[pool.next_index() for _ in range(5)] for _ in range(40)]
    assert all(sorted(cycle) == list(range(5)) for cycle in cycles)
    assert len({tuple(cycle) for cycle in cycles}) > 1  # the order is drawn again each cycle


def test_the_pool_is_smaller_for_large_regions_and_one_for_the_device_engine():
    assert pool_size(16 << 10, host_engine=True) == POOL_MAX
    assert pool_size(6 << 20, host_engine=True) == 2
    assert pool_size(64 << 20, host_engine=True) == 1
    assert pool_size(16 << 10, host_engine=False) == 1


def test_a_side_runs_on_each_region_of_its_pool_as_often(clock, tmp_path):
    regions = [clock.region("candidate", 4096, 4096, None) for _ in range(2 * POOL_MAX)]
    used = collections.Counter(region["key"] for region in regions)
    assert len(used) == POOL_MAX and set(used.values()) == {2}
    other = clock.region("reference", 4096, 4096, None)
    made = {region["path"] for region in regions}
    assert other["key"].startswith("reference.") and other["path"] not in made
    assert len(made) == POOL_MAX and all(os.path.exists(path) for path in [*made, other["path"]])


def test_a_side_keeps_its_pool_mapped_and_drops_it_for_a_new_pool(clock):
    side = WindowSide(CPU)
    for _ in range(2 * POOL_MAX):
        side.attach(clock.region("candidate", 4096, 4096, None))
    assert len(side.mapped) == POOL_MAX  # each mapped once, not once a batch
    larger = clock.region("candidate", 1 << 20, 1 << 20, None)  # larger sets: a new pool
    side.attach(larger)
    assert list(side.mapped) == [side.key] and side.pool == larger["pool"]
    side.close()


def test_the_timekeeper_removes_every_region_file_it_made(tmp_path):
    def gates():
        return sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("pkb-gates-"))

    keeper = Timekeeper(CPU, str(tmp_path), 0, "host")
    for _ in range(POOL_MAX):
        keeper.region("candidate", 4096, 4096, None)
    assert len(gates()) == POOL_MAX
    larger = keeper.region("candidate", 1 << 20, 1 << 20, None)
    assert gates() == [os.path.basename(larger["path"])]  # the old pool's files went with it
    keeper.close()
    assert not gates()


def test_a_mapped_region_does_not_fault_inside_a_window():
    """A side maps each region of its pool before its first batch on it; its pages are mapped
    then, so touching them inside a window costs no page fault (regions are in shared memory,
    as every group's folder is)."""
    import os
    import resource
    import tempfile

    from pkb_core.harness.gates import HostRegion

    size, folder = 64 * 4096, tempfile.mkdtemp(prefix="pkb-test-fault-", dir="/dev/shm")
    path = os.path.join(folder, "region")
    HostRegion(path, size, create=True).touch()
    side = HostRegion(path, size, create=False)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for at in range(0, size, 4096):
        side.map[at] = 1
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    side.close()
    os.unlink(path)
    os.rmdir(folder)
    assert faults < 16  # not one a page
