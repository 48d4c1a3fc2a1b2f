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


def device_count(device: str) -> int:
    """GPUs on this node (CPU mode: 2 ranks by default)."""
    if device == "cuda":
        import torch

        return torch.cuda.device_count()
    return 2
