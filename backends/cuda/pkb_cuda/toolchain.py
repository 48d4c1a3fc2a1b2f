"""Finding nvcc and describing the toolchain (what the cache key depends on).

Nothing here imports torch at module import time.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path


def find_cuda_home() -> Path | None:
    """The CUDA toolkit directory, found the way torch's cpp_extension looks
    for it: ``CUDA_HOME``, ``CUDA_PATH``, the directory above ``nvcc`` on
    ``PATH``, then ``/usr/local/cuda``. ``None`` when there is no nvcc."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(var)
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return Path(home)
    nvcc = shutil.which("nvcc")
    if nvcc:
        return Path(os.path.realpath(nvcc)).parent.parent
    if Path("/usr/local/cuda/bin/nvcc").is_file():
        return Path("/usr/local/cuda")
    return None


def find_nvcc() -> str | None:
    """Path of nvcc, or ``None``."""
    home = find_cuda_home()
    return str(home / "bin" / "nvcc") if home else None


@functools.lru_cache(maxsize=None)
def _nvcc_version(nvcc: str) -> str:
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = [line for line in out.splitlines() if "release" in line or line.startswith("Build")]
    return " ".join(lines).strip()


def nvcc_version() -> str:
    """``nvcc --version``'s release line ('' without nvcc); run once per process."""
    nvcc = find_nvcc()
    return _nvcc_version(nvcc) if nvcc else ""


def host_compiler() -> str | None:
    """``CC``: torch's load_inline passes it to nvcc as ``-ccbin`` (torch
    ignores ``CUDAHOSTCXX``); ``None`` leaves nvcc's default (or
    ``NVCC_CCBIN``)."""
    return os.environ.get("CC") or None


def arch_list() -> str:
    """The architectures built for: ``TORCH_CUDA_ARCH_LIST`` when set, else
    the compute capabilities of the visible GPUs (what torch would detect),
    else '' (no GPU: torch cannot pick one; set the variable)."""
    env = os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip()
    if env:
        return env
    import torch

    if not torch.cuda.is_available():
        return ""
    caps = sorted({torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())})
    return ";".join(f"{major}.{minor}" for major, minor in caps)


def arch_flags(archs: str) -> list[str]:
    """``-gencode`` flags for an arch list such as ``9.0a`` or ``8.0;9.0+PTX``."""
    flags = []
    for entry in archs.replace(",", ";").replace(" ", ";").split(";"):
        entry = entry.strip()
        if not entry:
            continue
        ptx = entry.endswith("+PTX")
        number = entry.removesuffix("+PTX").replace(".", "")
        flags.append(f"-gencode=arch=compute_{number},code=sm_{number}")
        if ptx:
            flags.append(f"-gencode=arch=compute_{number},code=compute_{number}")
    return flags


def toolchain() -> dict:
    """Everything besides the sources and flags that changes a build."""
    import torch

    from pkb_cuda import __version__

    return {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda or "",
        "nvcc": nvcc_version(),
        "arch": arch_list(),
        "python": sys.implementation.cache_tag,
        "host_compiler": host_compiler() or "",
        "cxx": os.environ.get("CXX", ""),
        "nvcc_env": [os.environ.get(v, "") for v in ("NVCC_CCBIN", "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS")],
        "pkb_cuda": __version__,
    }


def missing(device: str = "cuda") -> str | None:
    """One line naming what this node lacks to build and run CUDA solutions,
    or ``None``: torch with CUDA and a visible GPU, nvcc, ninja."""
    problems = []
    import torch

    if torch.version.cuda is None:
        problems.append(f"torch {torch.__version__} is a CPU-only build (torch.cuda is unavailable)")
    elif not torch.cuda.is_available():
        problems.append("torch.cuda.is_available() is False (no visible NVIDIA GPU)")
    if find_nvcc() is None:
        problems.append("nvcc not found (set CUDA_HOME or put nvcc on PATH)")
    if shutil.which("ninja") is None:
        problems.append("ninja not found (torch's load_inline needs it: pip install ninja)")
    return "; ".join(problems) or None
