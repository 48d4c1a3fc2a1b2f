"""torch symm_mem two-shot all-reduce (reduce-scatter then all-gather over NVLink).

The operator works in place on a symmetric buffer; the input must stay
untouched, so the input is copied into a symmetric workspace allocated once
per shape (allocation is collective: every rank reaches it in the same call)
and reduced there. The ``two_shot_all_reduce_out`` variant is not used: on
torch 2.11 it wrote into its input (pkb's input check failed it at every size
of the 2xH200 sweep, 2026-11-22).
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
    work = _workspace(tensor)
    work.copy_(tensor)
    torch.ops.symm_mem.two_shot_all_reduce_(work, "sum", group)
    return work.clone()
