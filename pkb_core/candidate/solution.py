"""Loading a solution file: a Python file that defines ``solution(*inputs)``.

Shared by every backend whose solutions are Python files (reference, Triton,
CUDA via load_inline, ...). Failures become :class:`CompileError` with one
line naming the file, so they turn into the ``compile-error`` verdict.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from pkb_core.errors import CompileError, SolutionUnsupported, where
from pkb_core.problem.contract import _import_file
from pkb_core.problem.source import solution_text
from pkb_core.candidate.solution_modules import SOLUTION_MODULE_PREFIX, refuse_unsupported, serving


def check_source(pm, solution, device: str = "cuda") -> None:
    """The core's rules on a solution file's source, before any of it runs (``None``,
    the reference, passes): :func:`source_refusal` with the one backend loaded in
    ``pm``, raised as :class:`~pkb_core.errors.SolutionUnsupported`."""
    from pkb_core.plugin.manager import backend_infos

    if solution is None:
        return
    for info in backend_infos(pm).values():
        reason = source_refusal(info, solution, device)
        if reason:
            raise SolutionUnsupported(reason)


def source_refusal(info, solution, device: str = "cuda") -> str | None:
    """Why ``solution`` cannot run with the backend ``info`` describes on ``device``,
    read from its text alone (the ``unsupported`` reason), or None: an import the
    backend cannot serve (:func:`~pkb_core.candidate.solution_modules.unsupported_import`,
    checked first, since PKB's multicast runtime also spells multicast), then a
    multicast call pkb cannot watch where multicast is off
    (:func:`pkb_core.plugin.multicast.multicast_refusal`). The compile phase asks
    before it starts a builder, so no build is spent on a refusal."""
    from pkb_core.candidate.solution_modules import unsupported_import
    from pkb_core.plugin.multicast import multicast_refusal

    if solution is None:
        return None
    return (unsupported_import(solution, dict(info.unsupported_modules or {}))
            or multicast_refusal(solution, tuple(info.multicast_patterns), device))


def keep_source(path) -> None:
    """Read the solution file ``path`` now, while this process can (a candidate
    reads it before it becomes a user of its own): :func:`load_module` compiles
    this text, whatever the file holds or whoever may read it later (it is kept
    by :mod:`pkb_core.problem.source`, where every reader of this process finds it)."""
    if path is not None and Path(path).is_file():
        solution_text(path)


def load_solution(path) -> callable:
    """Import ``path`` and return its ``solution`` callable."""
    module = load_module(path)
    solution = getattr(module, "solution", None)
    if not callable(solution):
        import difflib
        import inspect

        defined = sorted(name for name, value in vars(module).items()
                         if inspect.isfunction(value) and value.__module__ == module.__name__ and not name.startswith("_"))
        close = difflib.get_close_matches("solution", defined, n=1, cutoff=0.6)
        said = (f" (did you mean `{close[0]}`?)" if close else
                f"; it defines {', '.join(f'`{n}`' for n in defined[:6])}" if defined else "")
        raise CompileError(f"{path} defines no callable `solution`{said}")
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
    try:
        source = solution_text(path)
    except OSError:
        raise CompileError(f"solution file {path} does not exist") from None
    except UnicodeDecodeError as exc:  # the file and the byte, not the line of pkb's that decoded it
        raise CompileError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start}); "
                           "a solution file is UTF-8 Python") from None
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
        # The place names the file's own line first (pkb_core.errors.where), whatever it called.
        raise CompileError(f"{path}: importing it raised {type(exc).__name__}: {exc}{where(exc, path)}") from None
    return module
