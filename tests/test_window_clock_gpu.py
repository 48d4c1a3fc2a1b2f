"""The host engine's windows on a GPU: pkb's own timekeeper (a process with no CUDA context) and
side (stream memory operations on the region's host memory, mapped into the GPU), the batch
queued before the first window opens, the side's batches over its pool of gate regions.

Needs one GPU and is skipped without: pkb's jobs need two ranks, so this is what a one-GPU machine
checks of the code a two-GPU job times with (docs/timing.md, "Window mode")."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest
import torch

from pkb_core.harness.copies import COPIES, COPIES_ENV, copy_into
from pkb_core.harness.windows import WindowSide
from pkb_core.judge.clock import Timekeeper
from pkb_core.judge.region_pool import POOL_MAX
from test_window_clock import _arm, _snapshot

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
CALLS = 6
#: out_slot holds a call's output and its argument after it (4 KiB each) and their layout.
OUT_BYTES = 16384


def _placed_then_doubled(side):
    """As pkb's harness calls: the set placed in device memory (copied as the judge said with the
    region), the call on it, the placed buffer as its argument after the call. (A copy from
    ``in_slot`` straight into ``out_slot``, both the region's host memory, waits on the host for the
    stream to reach it: behind a closed gate, so no call of the batch is queued ahead, seen on one
    H200.)"""
    def call(args):
        placed = torch.empty_like(args[0])
        copy_into(placed, args[0], side.copies)
        return placed * 2, (placed,)

    return call


@pytest.mark.parametrize("copies", COPIES)
def test_a_gpu_side_through_the_host_engine(copies, monkeypatch):
    """Both ways of copying (the copy engine, kernels) read and write the region's host memory
    through the GPU's mapping alike."""
    monkeypatch.setenv(COPIES_ENV, copies)
    gpu = torch.device("cuda", 0)
    torch.cuda.set_device(gpu)
    # In shared memory, as every group's folder is: CUDA does not pin a mapping of a file on disk.
    folder = tempfile.mkdtemp(prefix="pkb-test-gpu-", dir="/dev/shm")
    keeper = Timekeeper(gpu, folder, 0, "host")
    side = WindowSide(gpu)
    try:
        ahead = []
        for batch in range(2 * POOL_MAX):
            sets = [(torch.arange(1024, dtype=torch.float32) + 1000 * batch + w,) for w in range(CALLS)]
            skeletons, region, layout = _arm(keeper, sets, out_bytes=OUT_BYTES)
            side.attach(region)
            epoch = 100 * batch
            keeper.send("open", epoch=epoch, timeout_s=30, **layout)
            assert side.copies == copies
            written = side.run(epoch=epoch, skeletons=skeletons, call=_placed_then_doubled(side), timeout_s=30)
            answer = keeper.receive()
            assert answer["status"] == "ok" and len(answer["times_ns"]) == CALLS
            ahead.append((answer["queued_ahead"], answer["not_queued_ahead"]))
            for w in range(CALLS):  # what each call left in its out_slot, as the judge reads it
                got = _snapshot(keeper, written[w], w, out_bytes=OUT_BYTES)
                assert torch.equal(got["out"], sets[w][0] * 2) and torch.equal(got["args"][0], sets[w][0])
        assert len(side.mapped) == POOL_MAX  # every region of the pool, each mapped once
        # Every batch after the first (a warm-up, as pkb's: a fresh process's first launches load
        # their kernels) was queued whole before its first window opened.
        print("queued ahead, not queued ahead, by batch:", ahead)
        assert ahead[1:] == [(CALLS, None)] * (len(ahead) - 1), ahead
    finally:
        side.close()
        keeper.close()
        shutil.rmtree(folder, ignore_errors=True)


def test_a_masked_batch_on_a_gpu_is_queued_ahead_and_unmasked_behind_each_gate():
    """Sets of 1 MiB and more through the host engine are released masked (pkb_core.harness.mask):
    the side's stream takes each out of in_slot before its window and unmasks it with the keystream
    kernel once the key is written; every call of a batch after the first is queued before its first
    window, and each snapshot holds what the call made of its set."""
    from pkb_core.harness import mask
    from pkb_core.harness.parcel import pack_into, packed_size
    from pkb_core.judge.clock import stride

    gpu = torch.device("cuda", 0)
    torch.cuda.set_device(gpu)
    folder = tempfile.mkdtemp(prefix="pkb-test-gpu-", dir="/dev/shm")
    keeper = Timekeeper(gpu, folder, 0, "host")
    side = WindowSide(gpu)
    n = 1 << 18  # float32: a 1 MiB set
    out_bytes = 2 * 4 * n + 8192
    try:
        ahead = []
        for batch in range(3):
            sets = [(torch.randn(n) + batch,) for _ in range(CALLS)]
            set_bytes = max(packed_size(s) for s in sets)
            assert mask.masks_sets(True, True, set_bytes)
            keeper.memory(CALLS, set_bytes, out_bytes)
            step = stride(set_bytes)
            skeletons = [pack_into(s, keeper.staging[w * step:(w + 1) * step]) for w, s in enumerate(sets)]
            sizes = [packed_size(s) for s in sets]
            keys = [mask.new_key() for _ in sets]
            for w, key in enumerate(keys):
                staged = keeper.staging[w * step:w * step + 4 * mask.words(sizes[w])]
                on_device = staged.to(gpu)
                mask.mask_in_place(on_device, key)
                staged.copy_(on_device)
            region = {**keeper.region("candidate", set_bytes, out_bytes, None), "masked": True}
            side.attach(region)
            epoch = 100 * batch
            keeper.send("open", side=region["key"], epoch=epoch, sizes=sizes, set_stride=step,
                        snap_stride=stride(out_bytes), timeout_s=60, keys=keys)
            written = side.run(epoch=epoch, skeletons=skeletons, call=_placed_then_doubled(side), timeout_s=60)
            answer = keeper.receive()
            assert answer["status"] == "ok" and len(answer["times_ns"]) == CALLS, answer
            ahead.append((answer["queued_ahead"], answer["not_queued_ahead"]))
            for w in range(CALLS):
                got = _snapshot(keeper, written[w], w, out_bytes=out_bytes)
                assert torch.equal(got["out"], sets[w][0] * 2) and torch.equal(got["args"][0], sets[w][0])
        print("masked: queued ahead, not queued ahead, by batch:", ahead)
        assert ahead[1:] == [(CALLS, None)] * (len(ahead) - 1), ahead
    finally:
        side.close()
        keeper.close()
        shutil.rmtree(folder, ignore_errors=True)


def device_engine_batches(batches: int = 3, punch: bool = False) -> list:
    """Batches of :data:`CALLS` windows through the device engine, this process the side; what
    each batch's answer says of its queueing, ``(queued_ahead, not_queued_ahead)``. Asserts every
    snapshot. ``punch``: the side takes its announce page's frame out of the file before each batch
    (truncated and grown again), as a hostile side may, so its ``queued`` never reaches the
    frame the timekeeper's stream waits on."""
    gpu = torch.device("cuda", 0)
    torch.cuda.set_device(gpu)
    folder = tempfile.mkdtemp(prefix="pkb-test-gpu-", dir="/dev/shm")
    keeper = Timekeeper(gpu, folder, 0, "device")
    side = WindowSide(gpu)
    ahead = []
    try:
        for batch in range(batches):
            sets = [(torch.arange(1024, dtype=torch.float32) + 1000 * batch + w,) for w in range(CALLS)]
            skeletons, region, layout = _arm(keeper, sets, out_bytes=OUT_BYTES)
            side.attach(region)
            if punch:
                os.truncate(region["announce"], 0)
                os.truncate(region["announce"], 4096)
            epoch = 100 * batch
            keeper.send("open", epoch=epoch, timeout_s=30, **layout)
            written = side.run(epoch=epoch, skeletons=skeletons, call=_placed_then_doubled(side), timeout_s=30)
            answer = keeper.receive()
            assert answer["status"] == "ok" and len(answer["times_ns"]) == CALLS, answer
            ahead.append((answer.get("queued_ahead"), answer["not_queued_ahead"]))
            for w in range(CALLS):
                got = _snapshot(keeper, written[w], w, out_bytes=OUT_BYTES)  # this engine's: device memory
                assert torch.equal(got["out"].cpu(), sets[w][0] * 2) and torch.equal(got["args"][0].cpu(), sets[w][0])
    finally:
        side.close()
        keeper.close()
        shutil.rmtree(folder, ignore_errors=True)
    return ahead


@pytest.mark.parametrize("punch", [False, True])
def test_a_side_of_one_hardware_queue_through_the_device_engine(punch):
    """pkb's sides run with one hardware queue a context (pkb_core.machine.device.GPU_ENVIRONMENT):
    a side's word that says a call is queued must land while its gate is still closed, so it is
    the host's own write, never a stream operation behind the gate (which timed out every 128 MiB
    job on 2xH200, 2026-11-30). A fresh process, as a side's context is made with the setting; it
    would hang, not fail, where the word waited behind the gate. A side that punches its page
    (``punch``) is not queued ahead, and its batches still end at once: the timekeeper opens the
    stalled gates through the pinned frame, never through the side's file (a write there hung the
    judge, found by a review)."""
    tests = os.path.dirname(os.path.abspath(__file__))
    script = (f"import json, sys; sys.path.insert(0, {tests!r}); "
              f"from test_window_clock_gpu import device_engine_batches; print(json.dumps(device_engine_batches(punch={punch})))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180,
                          env={**os.environ, "CUDA_DEVICE_MAX_CONNECTIONS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    ahead = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"device engine, one queue (punched: {punch}): queued ahead, not queued ahead, by batch:", ahead)
    if punch:  # its announcements never reach the timekeeper: its first window is opened for it
        assert all(not_ahead == 0 for _, not_ahead in ahead), ahead
    else:  # every batch after the first (its kernels' first loads) queued whole before its first window
        assert all(not_ahead is None for _, not_ahead in ahead[1:]), ahead
