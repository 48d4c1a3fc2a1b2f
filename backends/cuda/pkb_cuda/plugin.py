"""The ``cuda`` backend's hooks.

Solutions are Python files that build CUDA C++ through :func:`pkb_cuda.compile`
at import, so the core defaults do the rest: compile loads the file's
``solution`` (the import builds the kernels, once per node, behind a file
lock), launch calls it, allocation uses torch symm_mem. This plugin describes
the backend and refuses to start on a node that cannot build or run kernels.

PKB solution files run as they are: the backend serves ``utils.cuda_helpers``
to them (:mod:`pkb_cuda.pkb_helpers`) and refuses, as ``unsupported``, files
that import PKB's ParallelKittens runtime (``BackendInfo.solution_modules``,
``unsupported_modules``).
"""
from __future__ import annotations

from pathlib import Path

from pkb_core import BackendInfo, hookimpl


from pkb_cuda.pkb_helpers import SOLUTION_MODULES, UNSUPPORTED_MODULES

SAMPLES = Path(__file__).parent / "samples"


def requirements(device: str):
    """``None`` when CUDA solutions can be built and run here, else one line
    naming what is missing (torch with CUDA and a GPU, nvcc, ninja)."""
    from pkb_cuda.toolchain import missing

    return missing(device)


@hookimpl
def pkb_backend_info():
    return BackendInfo(
        name="cuda",
        devices=("cuda",),
        requirements=requirements,
        samples=SAMPLES,
        description="CUDA C++ via torch load_inline (cached per node); peers read over NVLink",
        prompt=_prompt,
        solution_modules=SOLUTION_MODULES,
        unsupported_modules=UNSUPPORTED_MODULES,
    )



def _prompt():
    """The backend's part of generation prompts (imported only when one is written)."""
    from pkb_cuda.prompt import backend_prompt

    return backend_prompt()

@hookimpl
def pkb_backend_compile(state, problem, solution):
    """Import the solution (which builds what it builds at import); in the
    compile phase also build what it would build lazily (:mod:`pkb_cuda.ahead`)."""
    if solution is None:
        return None  # the core default runs the problem's reference
    from pkb_cuda.ahead import compile_solution

    return compile_solution(state, solution)
