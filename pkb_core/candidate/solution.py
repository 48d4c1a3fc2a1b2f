"""Loading a solution file: a Python file that defines ``solution(*inputs)``.

Shared by every backend whose solutions are Python files (reference, Triton,
CUDA via load_inline, ...). Failures become :class:`CompileError` with one
line naming the file, so they turn into the ``compile-error`` verdict.
"""
from __future__ import annotations

import hashlib
import traceback
from pathlib import Path

from pkb_core.errors import CompileError
from pkb_core.problem.contract import _import_file
from pkb_core.candidate.solution_modules import SOLUTION_MODULE_PREFIX, refuse_unsupported, serving


def check_source(pm, solution) -> None:
    """The core's rules on a solution file's source, before any of it runs (``None``,
    the reference, passes): an import the backend in ``pm`` cannot serve makes it
    ``unsupported`` (:class:`~pkb_core.errors.SolutionUnsupported`), checked first
    since PKB's multicast runtime also spells multicast; then NVLink multicast
    makes it a ``compile-error`` (:func:`pkb_core.plugin.multicast.refuse_solution_multicast`)."""
    from pkb_core.plugin.multicast import refuse_solution_multicast

    if solution is None:
        return
    refuse_unsupported(solution)
    refuse_solution_multicast(pm, solution)


#: Solution sources read before the lockdown (:func:`keep_source`), by resolved path.
_SOURCES: dict = {}


def keep_source(path) -> None:
    """Read the solution file ``path`` now, while this process can (a candidate
    reads it before it becomes a user of its own): :func:`load_module` compiles
    this text, whatever the file holds or whoever may read it later."""
    if path is not None and Path(path).is_file():
        _SOURCES[str(Path(path).resolve())] = Path(path).read_text()


def load_solution(path) -> callable:
    """Import ``path`` and return its ``solution`` callable."""
    module = load_module(path)
    solution = getattr(module, "solution", None)
    if not callable(solution):
        raise CompileError(f"{path} defines no callable `solution`")
    return solution


def load_module(path):
    """Run the solution file ``path`` as a module under a private name and return it.

    Its text is compiled by pkb (:func:`pkb_core.problem.contract._import_file`):
    no bytecode cache is read or written, so nothing another solution planted
    in its folder's ``__pycache__`` runs in its place.

    The modules the backend provides to solution files are served to it
    (:mod:`pkb_core.candidate.solution_modules`); a file importing one the backend
    refuses raises :class:`~pkb_core.errors.SolutionUnsupported` before it runs."""
    path = Path(path)
    source = _SOURCES.get(str(path.resolve()))
    if source is None and not path.is_file():
        raise CompileError(f"solution file {path} does not exist")
    refuse_unsupported(path)
    name = SOLUTION_MODULE_PREFIX + hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    try:
        with serving():
            module = _import_file(path, name, source)
    except SyntaxError as exc:
        raise CompileError(f"{path}:{exc.lineno}: syntax error: {exc.msg}") from None
    except CompileError:
        raise
    except BaseException as exc:  # noqa: BLE001 - anything at import time is the solution's fault
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        raise CompileError(f"{path}: importing it raised {type(exc).__name__}: {exc} "
                           f"({Path(frame.filename).name}:{frame.lineno})") from None
    return module
