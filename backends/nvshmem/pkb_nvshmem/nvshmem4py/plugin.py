"""The ``nvshmem4py`` backend's hooks (entry point ``pkb.backends: nvshmem4py``).

NVIDIA's nvshmem4py: init binds this rank's GPU through ``cuda.core``,
exchanges an NVSHMEM unique id over the harness's gloo group (rank 0 makes
it) and calls ``nvshmem.core.init(..., initializer_method="uid")``. Every
input then lives in ``nvshmem.core.tensor`` memory (the allocate hook), and
solutions launch Numba-CUDA kernels that call nvshmem4py's device API.

torch's own NVSHMEM backend is never touched in these processes (both would
initialise the same library); the ``nvshmem`` backend lives in other worker
processes. The numpy ``row_stack`` workaround is applied before anything
imports numba. ``PKB_NVSHMEM4PY_HOME`` gives these processes an NVSHMEM of
their own (:mod:`pkb_nvshmem.nvshmem4py.home`). This module imports none of
torch, numba or nvshmem4py.
"""
from __future__ import annotations

from pathlib import Path

from pkb_core import BackendInfo, hookimpl
from pkb_nvshmem.nvshmem4py.home import preload

SAMPLES = Path(__file__).parent / "samples"
NAME = "nvshmem4py"

#: How to bring nvshmem4py to a machine without a package index (gpu-notes §3.6).
WHEEL_HINT = ("carry the cp312 wheel nvshmem4py-cu13 and install it with `pip install --no-index --no-deps "
              "--target DIR wheels/*.whl`, then add DIR to PYTHONPATH")


def requirements(device: str):
    """``None`` when nvshmem4py solutions can run on ``device`` here, else one
    line naming what is missing: a GPU (and CUDA torch), the NVSHMEM library
    (the tree ``PKB_NVSHMEM4PY_HOME`` names, when it is set), an importable
    nvshmem4py (``nvshmem.core``), numba-cuda, and cffi (which nvshmem4py's
    Numba device bindings import; the GPU image lacks it)."""
    from pkb_nvshmem.common import cuda_missing, first_line, library_missing, module_missing
    from pkb_nvshmem.nvshmem4py.home import home_missing, nvshmem_home

    problems = []
    gpu = cuda_missing()
    if gpu:
        problems.append(gpu)
    home = nvshmem_home()
    lib = home_missing(home) if home else library_missing()
    if lib:
        problems.append(lib)
    if module_missing("nvshmem.core"):
        problems.append(f"nvshmem4py is not importable (no module nvshmem.core): {WHEEL_HINT}")
    else:
        try:
            import nvshmem.core  # noqa: F401 - imports cuda.core, not numba
        except Exception as exc:  # noqa: BLE001
            problems.append(f"nvshmem4py is not importable ({first_line(exc)}): {WHEEL_HINT}")
    if module_missing("numba") or module_missing("numba_cuda"):
        problems.append("numba-cuda is missing (nvshmem4py's device API is written for Numba-CUDA: "
                        "pip install numba-cuda)")
    if module_missing("cffi"):
        problems.append("cffi is missing (nvshmem4py's Numba device API imports it: carry its wheel and "
                        "pycparser's with nvshmem4py's)")
    return "; ".join(problems) or None


@hookimpl
def pkb_backend_info():
    return BackendInfo(
        name=NAME,
        devices=("cuda",),
        requirements=requirements,
        samples=SAMPLES,
        description="Numba-CUDA kernels calling nvshmem4py's device API (get/put/signals); NVSHMEM "
                    "initialised by nvshmem4py",
        preload=preload,
    )


def _home_not_loaded():
    """One line when ``PKB_NVSHMEM4PY_HOME`` is set but its host library is not
    the one this worker loaded (the preload failed, or another came first)."""
    from pkb_core import mapped_paths, preload_errors
    from pkb_nvshmem.nvshmem4py.home import HOME_ENV, loaded_elsewhere, nvshmem_home

    home = nvshmem_home()
    if home is None:
        return None
    failed = preload_errors()
    if failed:
        path, error = next(iter(failed.items()))
        return f"{HOME_ENV}: could not load {path} ({error})"
    return loaded_elsewhere(home, mapped_paths("libnvshmem_host"))


def _device(local_rank: int):
    try:
        from cuda.core import Device
    except ImportError:  # cuda.core before 0.4 kept it under `experimental`
        from cuda.core.experimental import Device
    return Device(local_rank)


@hookimpl
def pkb_backend_init(ctx):
    from pkb_core import BackendUnavailable

    reason = _home_not_loaded()
    if reason:
        raise BackendUnavailable(reason)
    from pkb_nvshmem.common import apply_env_defaults, ensure_numpy_row_stack, first_line

    apply_env_defaults()
    ensure_numpy_row_stack()  # before anything imports numba
    import pickle

    import nvshmem.core as nvs

    from pkb_nvshmem.nvshmem4py import _runtime
    from pkb_nvshmem.nvshmem4py.heap import Nvshmem4pyHeap

    try:
        device = _device(ctx.local_rank)
        device.set_current()
        # Rank 0's unique id reaches the others through the job's store (the
        # candidate's process group has no collectives: pkb_core.candidate.sealed).
        if ctx.rank == 0:
            ctx.store.set("pkb-nvshmem4py-uid", pickle.dumps(nvs.get_unique_id()))
        uid = pickle.loads(ctx.store.get("pkb-nvshmem4py-uid"))
        nvs.init(device=device, uid=uid, rank=ctx.rank, nranks=ctx.world_size, initializer_method="uid")
    except Exception as exc:  # noqa: BLE001
        raise BackendUnavailable(f"nvshmem4py could not initialise NVSHMEM ({first_line(exc)})") from None
    heap = Nvshmem4pyHeap(ctx.device, ctx.rank, ctx.world_size, ctx.barrier)
    _runtime.start(heap)
    return heap


@hookimpl
def pkb_backend_allocate(state, shape, dtype):
    return state.empty(shape, dtype)


@hookimpl
def pkb_backend_finalize(state):
    if state is None:
        return
    try:
        from pkb_nvshmem.nvshmem4py import _runtime

        _runtime.stop()
        state.close()
        import nvshmem.core as nvs

        nvs.finalize()
    except Exception as exc:  # noqa: BLE001 - finalize must not raise
        print(f"pkb-nvshmem: nvshmem4py finalize: {type(exc).__name__}: {exc}", flush=True)
