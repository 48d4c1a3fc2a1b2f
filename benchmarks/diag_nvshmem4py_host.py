"""Where an nvshmem4py sample's eager call spends its host time.

A solution file for problem 2 (all-gather) that, on its first call, times
each host step of ``samples/2_allgather.py`` 200 times on every rank and
prints the medians (they land in the launch log); every call then answers
with the sample's own ``solution``.
Run on a GPU machine with nvshmem4py set up (docs/backends/nvshmem.md):
``pkb run --backend nvshmem4py --problem 2 --solution benchmarks/diag_nvshmem4py_host.py --size default``
"""
import importlib.util
import statistics
import time
from pathlib import Path

import torch

import pkb_nvshmem.nvshmem4py as n4py
from pkb_nvshmem.nvshmem4py import as_bytes, barrier, peers, stream

SAMPLE = Path(n4py.__file__).parent / "samples" / "2_allgather.py"
_spec = importlib.util.spec_from_file_location("pkb_nvshmem4py_allgather_sample", SAMPLE)
sample = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sample)
_done = []


def _time(label, step, reps=200):
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        samples.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return f"{label}={statistics.median(samples):.1f}us"


def _profile(tensor):
    sym = peers(tensor)
    nbytes = tensor.numel() * tensor.element_size()
    out = torch.empty((sym.world_size, *tensor.shape), dtype=tensor.dtype, device=tensor.device)
    a, b, s = as_bytes(out), as_bytes(tensor), stream()
    blocks = sym.blocks(nbytes)
    share = sym.share(nbytes, blocks)

    def launch():
        sample._gather[blocks, sample.THREADS, s](a, b, nbytes, share, sym.rank, sym.world_size)
        barrier()  # keep the ranks in step: every launch reads the peers

    results = [
        _time("peers", lambda: peers(tensor)),
        _time("empty", lambda: torch.empty((sym.world_size, *tensor.shape), dtype=tensor.dtype,
                                           device=tensor.device)),
        _time("as_bytes", lambda: as_bytes(tensor)),
        _time("stream", stream),
        _time("barrier", barrier),
        _time("launch+barrier", launch),
    ]
    print(f"nvshmem4py host steps (rank {sym.rank}, median of 200):", " ".join(results), flush=True)


def solution(tensor):
    if not _done:
        _done.append(True)
        barrier()
        _profile(tensor)  # on every rank: the barriers need every PE
    return sample.solution(tensor)
