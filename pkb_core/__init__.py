"""pkb: benchmark multi-GPU kernels against PyTorch + torch.distributed references.

This package must stay light to import: no torch, triton or CUDA bindings at
module level (``pkb --help`` and ``pkb problems`` never need them).
"""

__version__ = "0.1.0"
