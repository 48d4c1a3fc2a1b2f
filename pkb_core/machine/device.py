"""Choosing between GPU mode and CPU mode."""
from __future__ import annotations

import os


def detect_device(choice: str = "auto") -> str:
    """``"cuda"`` when an NVIDIA GPU is visible (or asked for), else ``"cpu"``.

    ``PKB_DEVICE=cpu`` forces CPU mode on a GPU machine.
    """
    choice = os.environ.get("PKB_DEVICE", choice) if choice == "auto" else choice
    if choice != "auto":
        return choice
    import torch

    return "cuda" if torch.cuda.is_available() and torch.cuda.device_count() > 0 else "cpu"


def require_device(device: str) -> str:
    """``device``, or a one-line error when it is ``cuda`` and this machine shows no GPU
    (``--device cuda`` on a CPU machine: torch would fail deep inside, with a traceback)."""
    if device == "cuda" and device_count(device) == 0:
        from pkb_core.errors import PkbError

        raise PkbError("--device cuda but no GPU is visible here (leave --device auto for CPU mode)")
    return device


#: What a process that runs solution code gets in CPU mode, unless the caller's environment says
#: otherwise: one OpenMP thread (the ranks share the cores) and Triton's interpreter.
CPU_ENVIRONMENT = {"OMP_NUM_THREADS": "1", "TRITON_INTERPRET": "1"}


def device_environment(device: str) -> dict:
    """The variables of ``device``'s mode (:data:`CPU_ENVIRONMENT` on CPU, none on
    GPU) that the caller's environment does not set. Workers and builders both
    get them, so a file imports the same way in the compile phase as in its job
    (a builder without ``TRITON_INTERPRET`` took a Triton file for a GPU one)."""
    if device != "cpu":
        return {}
    return {name: value for name, value in CPU_ENVIRONMENT.items() if name not in os.environ}


def device_count(device: str) -> int:
    """GPUs on this node (CPU mode: 2 ranks by default)."""
    if device == "cuda":
        import torch

        return torch.cuda.device_count()
    return 2
