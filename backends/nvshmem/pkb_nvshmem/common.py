"""What both NVSHMEM backends share: environment defaults, finding the NVSHMEM
library, the numpy/numba-cuda ``row_stack`` workaround, the multicast guard.

Nothing here imports torch, triton, numba or nvshmem4py at module import: the
``pkb`` command loads the plugins that import this module.
"""
from __future__ import annotations

import glob
import importlib.util
import os
import sys
from pathlib import Path

# The multicast guard is pkb_core's; re-exported for the plugins and their tests.
from pkb_core import ALLOW_MULTICAST_ENV, MULTICAST_PATTERNS, multicast_use, refuse_multicast  # noqa: F401

#: Set with ``os.environ.setdefault`` by each backend's init, before NVSHMEM
#: initialises (it reads them then). A value the user set is never replaced.
#:
#: * ``NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=lo``: the unique-id bootstrap's socket
#:   interface; every rank is on one node, and the working GPU run used ``lo``.
#: * ``NVSHMEM_DISABLE_NVLS=1``: no NVLink SHARP (multicast) teams. Multicast
#:   can take shared GPUs out of service, and NVLS team creation fails on
#:   some H100 hosts (pytorch#169879). Set it to 0 yourself where it is safe.
#: * ``NVSHMEM_DISABLE_LOCAL_ONLY_PROXY=1``: where every peer is reached over
#:   NVLink (no remote transport), NVSHMEM starts no proxy thread. That thread
#:   polls on a core for as long as the process lives, so pkb's watch for work
#:   a solution leaves running on the host (it reads the rank's CPU time right
#:   after each timed answer) flagged every NVSHMEM sample on 2xH200
#:   (2026-11-30). Without it NVSHMEM has no device-side global exit and no
#:   device-side wait timeouts; pkb's own deadlines end a hung job. It changes
#:   nothing where a remote transport is in use.
ENV_DEFAULTS = {
    "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME": "lo",
    "NVSHMEM_DISABLE_NVLS": "1",
    "NVSHMEM_DISABLE_LOCAL_ONLY_PROXY": "1",
}


def apply_env_defaults(environ=None) -> dict:
    """``setdefault`` every :data:`ENV_DEFAULTS` entry in ``environ`` (default
    ``os.environ``); return the entries that were missing and are now set."""
    environ = os.environ if environ is None else environ
    added = {}
    for key, value in ENV_DEFAULTS.items():
        if key not in environ:
            environ[key] = value
            added[key] = value
    return added


# ---------------------------------------------------------------------------
# numpy 2.5 removed np.row_stack; numba-cuda 0.30.4 still overloads it
# ---------------------------------------------------------------------------

def ensure_numpy_row_stack(np=None) -> bool:
    """Give numpy a ``row_stack`` again if it has none; return True if it was added.

    numba-cuda 0.30.4 registers an overload for ``np.row_stack`` while it is
    imported, and numpy 2.5 removed that function, so importing numba-cuda
    (and nvshmem4py's Numba device API) fails with ``AttributeError: module
    'numpy' has no attribute 'row_stack'`` (NVIDIA/numba-cuda#907). Call this
    before the first ``import numba``.

    The replacement is a *separate* function that forwards to ``np.vstack``
    (which ``row_stack`` always was an alias of). Assigning ``np.vstack``
    itself would make numba-cuda register a second overload on ``vstack``.

    :param np: the numpy module to patch (default: ``import numpy``); tests
        pass a stand-in.
    """
    if np is None:
        import numpy as np
    if hasattr(np, "row_stack"):
        return False
    vstack = np.vstack

    def row_stack(tup, *, dtype=None, casting="same_kind"):
        """Stack arrays in sequence vertically: ``numpy.vstack`` under its old name
        (numpy 2.5 removed ``row_stack``; pkb restores it for numba-cuda)."""
        return vstack(tup, dtype=dtype, casting=casting)

    row_stack.__module__ = getattr(np, "__name__", "numpy")
    np.row_stack = row_stack
    return True


# ---------------------------------------------------------------------------
# finding the NVSHMEM library without importing torch
# ---------------------------------------------------------------------------

HOST_LIBRARY = "libnvshmem_host.so*"
DEVICE_BITCODE = "libnvshmem_device.bc"
SYSTEM_DIRS = ("/usr/local/lib", "/usr/lib", "/usr/lib/x86_64-linux-gnu", "/opt/nvidia/nvshmem/lib")


def nvshmem_lib_dirs() -> list[Path]:
    """Where NVSHMEM's libraries are looked for, in order: ``$NVSHMEM_LIB_DIR``,
    ``$NVSHMEM_HOME/lib``, ``nvidia/nvshmem/lib`` under every ``sys.path`` entry
    (the ``nvidia-nvshmem-cu13`` wheel), ``$LD_LIBRARY_PATH``,
    ``$CONDA_PREFIX/lib``, then the usual system directories."""
    dirs = []
    if os.environ.get("NVSHMEM_LIB_DIR"):
        dirs.append(Path(os.environ["NVSHMEM_LIB_DIR"]))
    if os.environ.get("NVSHMEM_HOME"):
        dirs.append(Path(os.environ["NVSHMEM_HOME"]) / "lib")
    for entry in sys.path:
        if entry:
            dirs.append(Path(entry) / "nvidia" / "nvshmem" / "lib")
    dirs += [Path(d) for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    if os.environ.get("CONDA_PREFIX"):
        dirs.append(Path(os.environ["CONDA_PREFIX"]) / "lib")
    dirs += [Path(d) for d in SYSTEM_DIRS]
    seen, unique = set(), []
    for d in dirs:
        if d not in seen:
            seen.add(d)
            unique.append(d)
    return unique


def find_nvshmem_lib(device_bitcode: bool = False) -> Path | None:
    """The first directory holding ``libnvshmem_host.so*`` (and, with
    ``device_bitcode``, ``libnvshmem_device.bc``, which Triton links), or None."""
    for d in nvshmem_lib_dirs():
        if not glob.glob(str(d / HOST_LIBRARY)):
            continue
        if device_bitcode and not (d / DEVICE_BITCODE).is_file():
            continue
        return d
    return None


LIBRARY_HINT = "pip install nvidia-nvshmem-cu13, or set NVSHMEM_LIB_DIR"


def library_missing(device_bitcode: bool = False) -> str | None:
    """One line if the NVSHMEM library (and the device bitcode) is not found."""
    if find_nvshmem_lib(device_bitcode) is not None:
        return None
    what = f"libnvshmem_host.so and {DEVICE_BITCODE}" if device_bitcode else "libnvshmem_host.so"
    return f"NVSHMEM library not found ({what}; {LIBRARY_HINT})"


def module_missing(name: str) -> bool:
    """True when ``import name`` cannot work (nothing is imported but parents)."""
    try:
        return importlib.util.find_spec(name) is None
    except (ImportError, ValueError):
        return True


#: Byte alignment of every part :func:`aligned_share` cuts: NVSHMEM's block
#: copies move wide words only between addresses aligned alike.
SHARE_ALIGN = 256


def aligned_share(total: int, parts: int, itemsize: int = 1, align: int = SHARE_ALIGN) -> int:
    """Elements per part when ``total`` elements of ``itemsize`` bytes are cut
    into at most ``parts`` parts that each start ``align`` bytes apart (given
    an aligned base): ``ceil(total / parts)`` rounded up to whole ``align``
    bytes. The last parts may be short or empty.

    An unaligned cut made every NVSHMEM get start at an odd address, and the
    samples' all-gather and all-to-all moved ~45 GB/s at 64 MiB on 2xH200
    (docs/benchmarks/2026-11-22-h200x2-b.md)."""
    step = max(1, align // itemsize) if align % itemsize == 0 else 1
    share = -(-total // max(1, parts))
    return -(-share // step) * step


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def cuda_missing() -> str | None:
    """One line when torch cannot use a GPU here."""
    import torch

    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU-only build (torch.cuda is unavailable)"
    if not torch.cuda.is_available():
        return "torch.cuda.is_available() is False (no visible NVIDIA GPU)"
    return None


#: The NVSHMEM header that turns on the InfiniBand GPU-direct-async device path.
BUILD_OPTIONS_HEADER = "non_abi/nvshmem_build_options.h"


def shadow_ibgda_headers(config, workdir) -> str | None:
    """Let nvshmem4py's Numba shim compile without InfiniBand headers.

    nvshmem4py compiles its device shim with NVRTC against the installed
    NVSHMEM headers. NVSHMEM 3.4.5's ``nvshmem_build_options.h`` defines
    ``NVSHMEM_IBGDA_SUPPORT``, which makes ``transfer_device.cuh`` include
    ``ibgda_device.cuh`` and with it ``infiniband/mlx5dv.h`` from rdma-core:
    not on the GPU image, so NVRTC stopped with *cannot open source file
    "infiniband/mlx5dv.h"* (2xH200, 2026-11-22). IBGDA is the InfiniBand
    transport; peers on one node go over NVLink without it.

    This writes a copy of the header with that option undefined into
    ``workdir`` (same relative path) and puts ``workdir`` first in
    ``config.CUDA_NVRTC_EXTRA_SEARCH_PATHS`` (nvshmem4py sets that list when
    its Numba bindings are imported), so the copy shadows the original.

    :param config: ``numba.cuda.config`` (tests pass a stand-in).
    :param workdir: a directory for the copy (created if missing).
    :returns: the directory put first, or ``None`` when nothing needed doing
        (no search paths, no NVSHMEM header in them, or no IBGDA in it).
    """
    from pathlib import Path

    paths = [p for p in (getattr(config, "CUDA_NVRTC_EXTRA_SEARCH_PATHS", "") or "").split(":") if p]
    workdir = Path(workdir)
    if str(workdir) in paths:
        return str(workdir)
    original = next((Path(p) / BUILD_OPTIONS_HEADER for p in paths if (Path(p) / BUILD_OPTIONS_HEADER).is_file()),
                    None)
    if original is None:
        return None
    text = original.read_text()
    if "#define NVSHMEM_IBGDA_SUPPORT" not in text:
        return None
    # Appended after everything (outside any guard: #undef is idempotent).
    text += ("\n/* pkb: no InfiniBand GPU-direct-async device path (its rdma-core headers are absent) */\n"
             "#undef NVSHMEM_IBGDA_SUPPORT\n#undef NVSHMEM_IBGDA_SUPPORT_GPUMEM_ONLY\n")
    target = workdir / BUILD_OPTIONS_HEADER
    target.parent.mkdir(parents=True, exist_ok=True)
    import os

    partial = target.with_name(f"{target.name}.{os.getpid()}")  # the ranks of a node write it at once
    partial.write_text(text)
    os.replace(partial, target)
    config.CUDA_NVRTC_EXTRA_SEARCH_PATHS = ":".join([str(workdir), *paths])
    return str(workdir)
