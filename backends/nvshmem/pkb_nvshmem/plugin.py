"""The ``nvshmem`` backend's hooks (entry point ``pkb.backends: nvshmem``).

torch's symmetric memory on its NVSHMEM backend + Triton kernels that call
NVSHMEM's device API. Init switches torch's symm_mem backend to NVSHMEM before
anything in the process allocates symmetric memory, bootstraps NVSHMEM with
the first (collective) allocation and keeps the heap that the allocate hook
serves every input from. Solutions are Python files loaded by the core
default, after the core's check that they call no multicast API.

The ``nvshmem4py`` backend (``pkb_nvshmem.nvshmem4py.plugin``) initialises
NVSHMEM itself through nvshmem4py; the two never share a process (one backend
per worker process), which NVSHMEM requires: both would initialise the same
library. This module imports neither torch nor triton.
"""
from __future__ import annotations

from pathlib import Path

from pkb_core import BackendInfo, hookimpl


SAMPLES = Path(__file__).parent / "samples"
NAME = "nvshmem"


def requirements(device: str):
    """``None`` when Triton+NVSHMEM solutions can run on ``device`` here, else
    one line naming what is missing: a GPU (and CUDA torch), triton, the
    NVSHMEM library with its device bitcode, torch's NVSHMEM support."""
    from pkb_nvshmem.common import cuda_missing, first_line, library_missing, module_missing

    problems = []
    gpu = cuda_missing()
    if gpu:
        problems.append(gpu)
    if module_missing("triton"):
        problems.append("triton is not installed")
    lib = library_missing(device_bitcode=True)
    if lib:
        problems.append(lib)
    if not gpu and not lib:
        try:
            import torch.distributed._symmetric_memory as symm_mem

            if not symm_mem.is_nvshmem_available():
                problems.append("torch cannot load NVSHMEM (symm_mem.is_nvshmem_available() is False)")
            else:
                from torch.distributed._symmetric_memory import _nvshmem_triton as nvt

                if not hasattr(nvt, "signal_wait_until"):
                    problems.append("torch's Triton bindings of NVSHMEM are missing "
                                    "(torch.distributed._symmetric_memory._nvshmem_triton)")
        except Exception as exc:  # noqa: BLE001 - any failure here means "missing"
            problems.append(f"torch's NVSHMEM support is not usable ({first_line(exc)})")
    return "; ".join(problems) or None


@hookimpl
def pkb_backend_info():
    return BackendInfo(
        name=NAME,
        devices=("cuda",),
        requirements=requirements,
        samples=SAMPLES,
        description="Triton kernels calling NVSHMEM (get/put/signals) on torch's NVSHMEM symmetric heap",
    )


@hookimpl
def pkb_backend_init(ctx):
    from pkb_core import BackendUnavailable
    from pkb_nvshmem.common import apply_env_defaults, first_line

    apply_env_defaults()
    import torch.distributed._symmetric_memory as symm_mem

    try:
        if symm_mem.get_backend(ctx.device) != "NVSHMEM":
            symm_mem.set_backend("NVSHMEM")
    except Exception as exc:  # noqa: BLE001
        raise BackendUnavailable(f"torch symm_mem could not switch to NVSHMEM ({first_line(exc)}): "
                                 "something allocated symmetric memory in this process first") from None
    from pkb_nvshmem import _runtime
    from pkb_nvshmem.heap import NvshmemHeap

    try:
        heap = NvshmemHeap(ctx.device, ctx.barrier)
        heap.start()
    except Exception as exc:  # noqa: BLE001
        raise BackendUnavailable(f"NVSHMEM bootstrap failed ({first_line(exc)})") from None
    _runtime.start(heap)
    return heap


@hookimpl
def pkb_backend_allocate(state, shape, dtype):
    return state.empty(shape, dtype)


@hookimpl
def pkb_backend_finalize(state):
    try:
        from pkb_nvshmem import _runtime
        from pkb_nvshmem.host import _reset

        _reset()
        _runtime.stop()
        if state is not None:
            state.close()
    except Exception as exc:  # noqa: BLE001 - finalize must not raise
        print(f"pkb-nvshmem: finalize: {type(exc).__name__}: {exc}", flush=True)
