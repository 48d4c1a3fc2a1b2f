"""The ``triton`` backend's hooks (entry point ``pkb.backends: triton``).

Solutions are Python files compiled by the core default (``solution`` is
loaded from the file; Triton JIT-compiles kernels on the first call) and
launched by the core default (``lambda: program(*inputs)``). This module only
describes the backend, checks its runtime on each rank and keeps the context
that :func:`pkb_triton.workspace` needs. It imports neither torch nor triton.
PKB's files, which build CUDA through ``utils.cuda_helpers`` even in its
Triton trees, get that helper and its ahead-of-time builds from pkb-cuda when
it is installed, and ``unsupported`` with the reason when it is not.
"""
from __future__ import annotations

import os
from pathlib import Path

from pkb_core import BackendInfo, hookimpl

try:
    # PKB's Triton trees build CUDA through PKB's helper too (69 of the 70 files of its first
    # Gemini Triton tree import ``utils.cuda_helpers``): served, with its ahead-of-time builds,
    # wherever the cuda backend's distribution is installed.
    from pkb_cuda.pkb_helpers import SOLUTION_MODULES, UNSUPPORTED_MODULES
except ImportError:  # pkb-triton does not depend on pkb-cuda
    SOLUTION_MODULES = {}
    UNSUPPORTED_MODULES = {"utils.cuda_helpers": "PKB's CUDA helper is served by the pkb-cuda distribution, "
                                                 "which is not installed here (pip install backends/cuda)"}
#: In CPU mode (the Triton interpreter) nothing can run the CUDA that PKB's helper builds.
CPU_UNSUPPORTED = {"utils.cuda_helpers": "PKB's CUDA helper builds CUDA kernels, which CPU mode (the Triton "
                                         "interpreter) cannot run: run the file on a GPU"}


SAMPLES = Path(__file__).parent / "samples"


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")


def requirements(device: str):
    """``None`` when Triton can run on ``device`` here, else what is missing."""
    try:
        import triton  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure means "missing"
        return f"triton is not importable ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            return "torch.cuda is not available (no NVIDIA GPU, or a CPU build of torch)"
    return None


@hookimpl
def pkb_backend_info():
    return BackendInfo(
        name="triton",
        devices=("cuda", "cpu"),
        requirements=requirements,
        samples=SAMPLES,
        description="Triton kernels reading peers through symmetric-memory pointer tables "
                    "(CPU: the Triton interpreter)",
        prompt=_prompt,
        solution_modules={} if _interpreting() else SOLUTION_MODULES,
        unsupported_modules={**UNSUPPORTED_MODULES, **CPU_UNSUPPORTED} if _interpreting() else UNSUPPORTED_MODULES,
    )



def _prompt():
    """The backend's part of generation prompts (imported only when one is written)."""
    from pkb_triton.prompt import backend_prompt

    return backend_prompt()

@hookimpl
def pkb_backend_compile(state, problem, solution):
    """The core default (import the file, take its ``solution``), plus, where
    pkb-cuda serves PKB's helper, the ahead-of-time builds of the CUDA
    extensions a file would build lazily (:func:`pkb_cuda.ahead.compile_solution`)."""
    if solution is None or not SOLUTION_MODULES or _interpreting():
        return None
    from pkb_cuda.ahead import compile_solution

    return compile_solution(state, solution)


@hookimpl
def pkb_backend_init(ctx):
    from pkb_core import BackendUnavailable

    if ctx.device.type == "cpu" and not _interpreting():
        raise BackendUnavailable("CPU mode needs TRITON_INTERPRET=1 (pkb's launcher sets it unless the "
                                 "environment sets it otherwise)")
    if ctx.device.type == "cuda" and _interpreting():
        raise BackendUnavailable("TRITON_INTERPRET is set: unset it to run Triton kernels on the GPU")
    from pkb_triton import _runtime

    if _interpreting():
        from pkb_triton import gpu_check, interpreter_gate

        gpu_check.install()  # a kernel the interpreter runs and the GPU's compiler refuses fails here too
        interpreter_gate.install()  # a staggered trial's late rank reads once the others have returned
    # The job's name keeps the CPU workspace heap's shared-memory files apart
    # from the harness's (and the launcher sweeps them with the job's).
    return _runtime.start(ctx, f"{ctx.run_id}-ws")


@hookimpl
def pkb_backend_finalize(state):
    try:
        from pkb_triton import _runtime
        from pkb_triton.host import _reset

        _reset()
        _runtime.stop(state)
    except Exception as exc:  # noqa: BLE001 - finalize must not raise
        print(f"pkb-triton: finalize: {type(exc).__name__}: {exc}", flush=True)

