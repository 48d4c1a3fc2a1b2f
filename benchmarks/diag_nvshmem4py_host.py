"""Where an nvshmem4py sample's eager call spends its host time.

A solution file for problem 2 (all-gather) that, on its first call, times
each host step of ``samples/2_allgather.py`` 200 times on rank 0 and prints
the medians (they land in the launch log), then answers like the sample.
Run on a GPU machine with nvshmem4py set up (docs/backends/nvshmem.md):
``pkb run --backend nvshmem4py --problem 2 --solution benchmarks/diag_nvshmem4py_host.py --size default``
"""
import statistics
import time

import torch

from pkb_nvshmem.nvshmem4py import as_bytes, barrier, cuda, int32, nvd, peers, stream

THREADS = 512
_done = []


@cuda.jit
def _gather(out, src, nbytes, rank, world):
    share = (nbytes + cuda.gridDim.x - 1) // cuda.gridDim.x
    lo = cuda.blockIdx.x * share
    hi = min(lo + share, nbytes)
    if lo < hi:
        for i in range(world):
            peer = (rank + i) % world
            nvd.get_block(out[peer * nbytes + lo:peer * nbytes + hi], src[lo:hi], int32(peer))


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

    def launch():
        _gather[blocks, THREADS, s](a, b, nbytes, sym.rank, sym.world_size)
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
    sym = peers(tensor)
    if not _done:
        _done.append(True)
        barrier()
        _profile(tensor)  # on every rank: the barriers need every PE
    out = torch.empty((sym.world_size, *tensor.shape), dtype=tensor.dtype, device=tensor.device)
    nbytes = tensor.numel() * tensor.element_size()
    barrier()
    _gather[sym.blocks(nbytes), THREADS, stream()](as_bytes(out), as_bytes(tensor), nbytes, sym.rank,
                                                    sym.world_size)
    barrier()
    return out
