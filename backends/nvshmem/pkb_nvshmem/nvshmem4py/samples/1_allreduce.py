"""All-reduce (sum) with nvshmem4py: gather every rank's input, then add locally.

A Numba-CUDA kernel pulls every rank's input (an NVSHMEM symmetric object)
into a local (W, bytes) staging tensor with nvshmem4py's block-scoped
``get_block(dst, src, pe)``, byte-wise so that any dtype works (Numba cannot
type bfloat16); torch then sums the W rows in fp32 (fp64 for double), exact
for the problem's integer inputs, into a new output. NVSHMEM barriers on
torch's stream meet the peers before (every input is in place) and after the
gather (no rank returns while a peer still reads its input).

A fused kernel that adds while it reads would save the staging round trip;
this sample keeps the NVSHMEM part small.
"""
import torch

from pkb_nvshmem.nvshmem4py import as_bytes, barrier, cuda, int32, nvd, peers, stream

THREADS = 512


@cuda.jit
def _gather(out, src, nbytes, share, rank, world):
    lo = cuda.blockIdx.x * share
    hi = min(lo + share, nbytes)
    if lo < hi:
        for i in range(world):
            peer = (rank + i) % world
            nvd.get_block(out[peer * nbytes + lo:peer * nbytes + hi], src[lo:hi], int32(peer))


def solution(tensor):
    sym = peers(tensor)
    nbytes = tensor.numel() * tensor.element_size()
    staging = torch.empty((sym.world_size, *tensor.shape), dtype=tensor.dtype, device=tensor.device)
    barrier()
    blocks = sym.blocks(nbytes)
    share = sym.share(nbytes, blocks)
    _gather[blocks, THREADS, stream()](as_bytes(staging), as_bytes(tensor), nbytes, share, sym.rank,
                                       sym.world_size)
    barrier()
    accumulate = torch.float64 if tensor.dtype == torch.float64 else torch.float32
    return staging.sum(dim=0, dtype=accumulate).to(tensor.dtype)
