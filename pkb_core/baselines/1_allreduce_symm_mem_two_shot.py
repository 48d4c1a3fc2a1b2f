"""torch symm_mem two-shot all-reduce (reduce-scatter then all-gather over NVLink).

The in-place operator needs its buffer in symmetric memory; the input must stay
untouched, so the output goes to a symmetric workspace allocated once per
shape (allocation is collective: every rank reaches it in the same call).
"""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

_workspaces = {}


def _workspace(tensor):
    key = (tuple(tensor.shape), tensor.dtype, tensor.device)
    if key not in _workspaces:
        buf = symm_mem.empty(tensor.shape, dtype=tensor.dtype, device=tensor.device)
        symm_mem.rendezvous(buf, dist.group.WORLD.group_name)
        _workspaces[key] = buf
    return _workspaces[key]


def solution(tensor):
    group = dist.group.WORLD.group_name
    out_op = getattr(torch.ops.symm_mem, "two_shot_all_reduce_out", None)
    if out_op is not None:
        out = torch.empty_like(tensor)
        out_op(tensor, "sum", group, out)
        return out
    work = _workspace(tensor)
    work.copy_(tensor)
    torch.ops.symm_mem.two_shot_all_reduce_(work, "sum", group)
    return work.clone()
