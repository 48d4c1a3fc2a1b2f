"""The working dtypes a job may name (``Job.dtype``), in one table for the plan, the judge,
the physics floor and the prompts. No torch at import (the CLI plans without it)."""
from __future__ import annotations

#: A job's dtype name -> the name of torch's dtype.
TORCH_NAMES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "fp64": "float64"}
#: Bytes per element.
ITEMSIZE = {"fp32": 4, "bf16": 2, "fp16": 2, "fp64": 8}
#: The precisions a prompt may ask a model for (``pkb prompt --precision``).
PRECISIONS = {name: TORCH_NAMES[name] for name in ("bf16", "fp16", "fp32")}


def torch_dtype(name: str):
    """The ``torch.dtype`` of a job's dtype name."""
    import torch

    return getattr(torch, TORCH_NAMES[name])
