"""Honest floor control: reads both ranks' placed inputs from the symmetric heap (the harness's
own barrier precedes the call; the next window's board keeps a peer from overwriting them), with
the peers' views cached per buffer: about the least an honest call through pkb's harness costs.

It has no barrier after its reads, which only pkb's windows make safe: since 2026-12-01 it fails
the staggered correctness trials (from the second; a rank returns while its peer still reads),
so time it with ``--trials 1``."""
import torch

from pkb_core.symmetric import handle_of

_views = {}


def solution(tensor):
    key = (tensor.data_ptr(), tuple(tensor.shape), tensor.dtype)
    views = _views.get(key)
    if views is None:
        handle = handle_of(tensor)
        from pkb_core.symmetric.handles import peer_offset
        off = peer_offset(tensor) // tensor.element_size()
        views = _views[key] = [handle.get_buffer(p, tuple(tensor.shape), tensor.dtype, off)
                               for p in range(handle.world_size)]
    out = torch.add(views[0], views[1])
    for v in views[2:]:
        out += v
    return out
