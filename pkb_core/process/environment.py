"""The environment of a process that runs a solution's code: an allow-list, not a copy.

A candidate's processes (and their zygotes, whose environment they start from)
and a builder's get only the variables they need: where Python and the
libraries are, how the GPU, the compilers, torch, Triton, NCCL, OpenMP and
glibc's allocator (``MALLOC_*``: :mod:`pkb_core.machine.host_allocator`) are
set up, locale, and pkb's own settings. Everything else the launcher's
environment holds (a service's token, a model provider's key, a cloud's
credentials, a Ray cluster's address) stays out: a candidate that reads its
environment finds none of it. A name that says it holds a credential is left
out even under an allowed prefix.
"""
from __future__ import annotations

import re

#: Variables passed as they are.
NAMES = frozenset({
    "PATH", "LANG", "LANGUAGE", "TZ", "TERM", "USER", "LOGNAME", "HOME", "SHELL", "TMPDIR", "XDG_CACHE_HOME",
    "COLUMNS", "PYTHONPATH", "PYTHONHOME", "PYTHONUNBUFFERED", "PYTHONNOUSERSITE", "PYTHONHASHSEED",
    "PYTHONFAULTHANDLER", "PYTHONWARNINGS", "PYTHONDONTWRITEBYTECODE", "VIRTUAL_ENV", "CONDA_PREFIX",
    "LD_LIBRARY_PATH", "LD_PRELOAD", "LIBRARY_PATH", "CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH",
    "CC", "CXX", "CUDAHOSTCXX", "MAX_JOBS",
})
#: Families of variables passed (a library's or a toolchain's settings; pkb's own).
PREFIXES = ("LC_", "CUDA_", "NVCC_", "NVIDIA_", "NCCL_", "NVSHMEM_", "CUTLASS_", "THUNDERKITTENS_", "TORCH_",
            "TORCHINDUCTOR_", "TRITON_", "OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_", "GLOO_", "CUPY_",
            "NUMBA_", "PKB_", "MALLOC_")
#: What a credential's name looks like: never passed, whatever its prefix (``PKB_SERVE_TOKEN``).
CREDENTIAL = re.compile(r"TOKEN|SECRET|PASSW|API_?KEY|CREDENTIAL|PRIVATE_?KEY|AUTH", re.IGNORECASE)


def allowed(name: str, extra=()) -> bool:
    """Whether a process that runs a solution's code may see the variable ``name``; ``extra``:
    what its backend asked for besides (names, or prefixes ending in ``*``:
    ``BackendInfo.environment``)."""
    if CREDENTIAL.search(name):
        return False
    if name in NAMES or name.startswith(PREFIXES):
        return True
    return any(name.startswith(want[:-1]) if want.endswith("*") else name == want for want in extra)


def allowed_environment(environ, extra=()) -> dict:
    """The part of ``environ`` a candidate's or a builder's process gets (``extra``: its backend's
    own variables, as :func:`allowed` reads them)."""
    return {name: value for name, value in environ.items() if allowed(name, extra)}
