"""Modules a backend provides to solution files, and to nothing else.

Solution trees written for other harnesses import that harness's helpers by
their own names (PKB's CUDA files all do ``from utils.cuda_helpers import
compile_cuda_extension``). A backend declares, as data on its
:class:`~pkb_core.plugin.backend.BackendInfo`, which such names it serves and from
which of its own modules (``solution_modules``), and which names it knows but
cannot serve, with the reason (``unsupported_modules``). Nothing is installed
into site-packages: in a worker process (:func:`pkb_core.candidate.plugin_manager.worker_plugin_manager`)
the backend's declarations are handed to :func:`provide`, which puts one
finder on ``sys.meta_path``. The finder answers only imports made while a
solution's code is on the stack (a frame of a module loaded by
:mod:`pkb_core.candidate.solution`, whose names start with :data:`SOLUTION_MODULE_PREFIX`):
at the solution's import and lazily inside its ``solution()`` calls. pkb's own
code, and anything else in the process, still gets ``ModuleNotFoundError`` for
``import utils``.

A served name gets a fresh module object holding the provider's public names
(the provider's ``__all__``), so the functions are the provider's own objects;
each missing parent (``utils``) is an empty package. While a solution file
executes, :func:`serving` keeps the served entries of ``sys.modules`` apart from
whatever was there and removes them afterwards, so a top-level import leaves
nothing behind. An import made inside a ``solution()`` call stays in
``sys.modules`` (the import statement puts it there after the finder is done);
in a candidate, whose processes hold that one solution, that is harmless.

A file that imports an unsupported name is refused before it runs:
:func:`refuse_unsupported` reads its imports with :mod:`ast` (top level and
inside functions alike) and raises :class:`~pkb_core.errors.SolutionUnsupported`
with one line, which becomes the ``unsupported`` verdict. An unsupported name
reached only while the file runs (an import built from strings) is refused by
the finder with the same line, but the job's verdict is then ``compile-error``:
what a process says after solution code ran in it may be that code's forgery,
and ``unsupported`` does not fail a run (docs/trust.md).
"""
from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.abc
import importlib.machinery
import sys
from typing import Mapping

from pkb_core.errors import SolutionUnsupported
from pkb_core.problem.source import solution_text

#: Module names :mod:`pkb_core.candidate.solution` gives solution files; frames of these
#: modules are the only ones the finder serves.
SOLUTION_MODULE_PREFIX = "pkb_solution_"

_PROVIDED: dict[str, str] = {}  # served name -> provider module
_UNSUPPORTED: dict[str, str] = {}  # known name -> why it is not served
_FINDER: "_SolutionModuleFinder | None" = None
_PACKAGES: frozenset = frozenset()  # parents of the declared names (``utils``)
_NAMES: frozenset = frozenset()  # declared names and their parents


def provide(modules: Mapping[str, str] | None = None, unsupported: Mapping[str, str] | None = None) -> None:
    """Declare, for this process, the names served to solution files
    (``{name: provider module}``) and the names refused (``{name: reason}``),
    and put the finder on ``sys.meta_path`` (once)."""
    global _FINDER
    for name in [*(modules or {}), *(unsupported or {})]:
        if not all(part.isidentifier() for part in name.split(".")):
            raise ValueError(f"solution module name {name!r} is not a dotted Python name")
    _PROVIDED.update(modules or {})
    _UNSUPPORTED.update(unsupported or {})
    _index()
    if _FINDER is None and (_PROVIDED or _UNSUPPORTED):
        _FINDER = _SolutionModuleFinder()
        sys.meta_path.insert(0, _FINDER)


def withdraw() -> None:
    """Forget every declaration, remove the finder and the served modules
    left in ``sys.modules`` (tests)."""
    global _FINDER
    for name, module in list(sys.modules.items()):
        if _served_here(module):
            del sys.modules[name]
    _PROVIDED.clear()
    _UNSUPPORTED.clear()
    _index()
    if _FINDER is not None:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(_FINDER)
        _FINDER = None


def provided() -> dict:
    """``{name: provider}`` served in this process."""
    return dict(_PROVIDED)


def _served_here(module) -> bool:
    """Whether ``module`` is one the finder made."""
    namespace = getattr(module, "__dict__", None)
    return isinstance(namespace, dict) and ("__pkb_provider__" in namespace or "__pkb_made_up__" in namespace)


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _index() -> None:
    global _PACKAGES, _NAMES
    _PACKAGES = frozenset(parent for name in [*_PROVIDED, *_UNSUPPORTED] for parent in _parents(name))
    _NAMES = frozenset([*_PROVIDED, *_UNSUPPORTED, *_PACKAGES])


def _packages() -> frozenset:
    """Every parent package of a declared name (``utils`` for ``utils.cuda_helpers``)."""
    return _PACKAGES


def _served_names() -> frozenset:
    return _NAMES


def _solution_on_stack() -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if str(frame.f_globals.get("__name__", "")).startswith(SOLUTION_MODULE_PREFIX):
            return True
        frame = frame.f_back
    return False


class _SolutionModuleFinder(importlib.abc.MetaPathFinder):
    """Serves the declared names to solution code only (see the module docstring)."""

    def find_spec(self, fullname, path=None, target=None):
        served = _NAMES
        package = fullname.rpartition(".")[0]
        if fullname not in served and package not in _PACKAGES:
            return None
        if not _solution_on_stack():
            return None
        if fullname in _UNSUPPORTED:
            raise SolutionUnsupported(unsupported_reason(fullname))
        if fullname not in served:  # utils.<something pkb does not serve>
            if not _served_here(sys.modules.get(package)):
                return None  # a real package of that name: not ours to answer
            raise ModuleNotFoundError(
                f"No module named {fullname!r}: pkb serves {', '.join(sorted(_PROVIDED)) or 'nothing'} "
                f"under {package!r} to solution files, not the rest of that harness", name=fullname)
        is_package = fullname in _PACKAGES
        return importlib.machinery.ModuleSpec(fullname, _ServedLoader(), is_package=is_package)


class _ServedLoader(importlib.abc.Loader):
    def create_module(self, spec):
        return None  # the default: a plain module

    def exec_module(self, module):
        name = module.__name__
        if name in _PROVIDED:
            provider = importlib.import_module(_PROVIDED[name])
            public = getattr(provider, "__all__", None)
            if public is None:
                public = [k for k in vars(provider) if not k.startswith("_")]
            module.__dict__.update({k: getattr(provider, k) for k in public})
            module.__doc__ = provider.__doc__
            module.__pkb_provider__ = provider.__name__
        else:
            module.__path__ = []
            module.__pkb_made_up__ = True
            module.__doc__ = f"{name!r}: a package pkb makes up for solution files (see pkb_core.candidate.solution_modules)"


def unsupported_reason(name: str, unsupported: Mapping[str, str] | None = None) -> str:
    """The one line for a file that imports the refused ``name`` (``unsupported``:
    the refused names and why; this process's declared ones by default)."""
    return f"imports {name}: {(_UNSUPPORTED if unsupported is None else unsupported)[name]}"


@contextlib.contextmanager
def serving():
    """Around a solution file's execution: entries of ``sys.modules`` under the
    served names are set aside before and restored after (the ones the
    solution's imports created are dropped), so nothing outside the solution
    sees them."""
    names = _served_names()
    if not names:
        yield
        return
    saved = {n: sys.modules.pop(n) for n in list(sys.modules) if _under(n, names)}
    try:
        yield
    finally:
        for n in [n for n in list(sys.modules) if _under(n, names)]:
            del sys.modules[n]
        sys.modules.update(saved)


def _under(module_name: str, names: set) -> bool:
    return module_name in names or any(module_name.startswith(p + ".") for p in _packages())


# ---------------------------------------------------------------------------
# the static check of unsupported imports
# ---------------------------------------------------------------------------

def imported_names(source: str) -> list[str]:
    """Every module name a source imports, anywhere in it (``import a.b``,
    ``from a import b`` gives ``a`` and ``a.b``, ``importlib.import_module("a")``
    and ``__import__("a")`` with a literal name)."""
    tree = ast.parse(source)
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
            names += [f"{node.module}.{alias.name}" for alias in node.names if alias.name != "*"]
        elif isinstance(node, ast.Call) and _call_name(node.func) in ("import_module", "__import__"):
            if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                names.append(node.args[0].value)
    return names


def _call_name(func) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def unsupported_import(path, unsupported: Mapping[str, str] | None = None) -> str | None:
    """The one line saying why the file ``path`` cannot run here (it imports
    a refused name), or ``None``. A file that does not parse is left to its
    import (a syntax error is a compile error).

    :param unsupported: the refused names and why (a backend's
        ``BackendInfo.unsupported_modules``); this process's declared ones by default."""
    refused_names = _UNSUPPORTED if unsupported is None else unsupported
    if not refused_names:
        return None
    try:
        names = imported_names(solution_text(path))
    except (SyntaxError, ValueError, OSError):
        return None
    for name in names:
        for refused in refused_names:
            if name == refused or name.startswith(refused + "."):
                return unsupported_reason(refused, refused_names)
    return None


def refuse_unsupported(path) -> None:
    """Raise :class:`SolutionUnsupported` when ``path`` imports a refused name."""
    reason = unsupported_import(path)
    if reason:
        raise SolutionUnsupported(reason)
