"""The ``parallelkittens`` backend's hooks (entry point ``pkb.backends: parallelkittens``).

Solutions are Python files that build ThunderKittens CUDA through
:func:`pkb_parallelkittens.compile` at import, so the core defaults do the
rest (compile loads the file's ``solution``, launch calls it, allocation uses
torch symm_mem without multicast). This plugin describes the backend: where
ThunderKittens kernels can be built and run, and ThunderKittens' spellings of
NVLink multicast (the core refuses solutions that use them). PKB's ParallelKittens files get
``utils.cuda_helpers`` (pkb's) and, when they import PKB's multicast runtime
``utils.parallelkittens_runtime``, the ``unsupported`` verdict.
"""
from __future__ import annotations

from pathlib import Path

from pkb_core import BackendInfo, hookimpl
from pkb_parallelkittens.build import TK_MULTICAST_PATTERNS

from pkb_cuda.pkb_helpers import SOLUTION_MODULES, UNSUPPORTED_MODULES

SAMPLES = Path(__file__).parent / "samples"
NAME = "parallelkittens"


def requirements(device: str):
    """``None`` when ThunderKittens solutions can be built and run on
    ``device`` here, else one line naming what is missing: what the CUDA
    backend needs (CUDA torch and a GPU, nvcc, ninja) and ThunderKittens'
    headers (``$THUNDERKITTENS_ROOT/include/kittens.cuh``)."""
    from pkb_cuda.toolchain import missing

    from pkb_parallelkittens.build import tk_missing

    problems = [p for p in (missing(device), tk_missing()) if p]
    return "; ".join(problems) or None


@hookimpl
def pkb_backend_info():
    return BackendInfo(
        name=NAME,
        devices=("cuda",),
        requirements=requirements,
        samples=SAMPLES,
        description="ThunderKittens (ParallelKittens) CUDA via load_inline, sm_90a; unicast pgls over "
                    "symmetric inputs, CAS barrier, no multicast",
        multicast_patterns=TK_MULTICAST_PATTERNS,
        # PKB's ParallelKittens files build with PKB's helper too; its runtime is refused.
        solution_modules=SOLUTION_MODULES,
        unsupported_modules=UNSUPPORTED_MODULES,
    )


@hookimpl
def pkb_backend_finalize(state):
    try:
        from pkb_parallelkittens.peers import _reset

        _reset()
    except Exception as exc:  # noqa: BLE001 - finalize must not raise
        print(f"pkb-parallelkittens: finalize: {type(exc).__name__}: {exc}", flush=True)
