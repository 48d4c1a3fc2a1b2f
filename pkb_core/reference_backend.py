"""The reference backend: NCCL on GPU, gloo on CPU.

With ``--solution FILE`` it runs a candidate written in plain PyTorch (which
may call torch.distributed or ``torch.ops.symm_mem``); with no solution it runs
the problem's own reference as the candidate, a self-check that must pass with
zero difference. Its lifecycle is the core defaults; it only describes itself.
"""
from pkb_core.backend import BackendInfo
from pkb_core.hookspecs import hookimpl


@hookimpl
def pkb_backend_info():
    return BackendInfo(
        name="reference",
        devices=("cuda", "cpu"),
        custom_kernels=False,
        description="PyTorch + torch.distributed (NCCL on GPU, gloo on CPU); no solution = self-check",
    )
