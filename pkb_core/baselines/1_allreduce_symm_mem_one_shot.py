"""torch symm_mem one-shot all-reduce: every rank reads all peers' inputs."""
import torch
import torch.distributed as dist


def solution(tensor):
    group = dist.group.WORLD.group_name
    return torch.ops.symm_mem.one_shot_all_reduce(tensor, "sum", group)
