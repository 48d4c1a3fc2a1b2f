"""Building ahead of time the CUDA extensions a solution would build lazily.

Model-written solutions often build their kernels on the first call
(``if _ext is None: _ext = load_inline(...)`` inside ``solution``), which would
put a build of tens of seconds inside the job. In the compile phase
(``BuildContext.ahead_of_time``) the backend therefore looks through the
file for calls of the build functions — torch's ``load_inline``, PKB's
``compile_cuda_extension``, :func:`pkb_cuda.compile`, wherever they appear —
and makes every call whose arguments can be evaluated with the module's
globals alone (sources kept in module constants, the common case). What they
build lands in the caches the job later loads from; a call whose arguments
depend on the call's own inputs is left to the job.

PKB's helper is the one pkb serves as ``utils.cuda_helpers``
(:mod:`pkb_cuda.pkb_helpers`), which builds through :func:`pkb_cuda.compile`:
its calls are found whether the file imports it at the top or inside the
function that builds (``from utils.cuda_helpers import compile_cuda_extension``
in ``_get_ext()``), under any alias.
"""
from __future__ import annotations

import ast
from pathlib import Path

def compile_solution(state, solution: str):
    """A backend's compile hook for files that build CUDA: import ``solution``
    (its import-time builds happen here) and return its ``solution``; in the
    compile phase (``state.ahead_of_time``) also make the builds it would
    make lazily. The cuda backend's hook, and the triton backend's for PKB's
    files that build CUDA through ``utils.cuda_helpers``.

    :raises pkb_core.CompileError: no callable ``solution``, or a build failed.
    """
    from pkb_core import CompileError, describe, load_module

    module = load_module(solution)
    program = getattr(module, "solution", None)
    if not callable(program):
        raise CompileError(f"{solution} defines no callable `solution`")
    if getattr(state, "ahead_of_time", False):
        try:
            build_lazy_extensions(module, solution)
        except CompileError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failed build is the solution's compile error
            raise CompileError(f"{solution}: building its CUDA extension raised {describe(exc, solution)}") from None
    return program


#: Names of functions that build CUDA extensions.
BUILDERS = ("load_inline", "compile_cuda_extension", "compile")


def _builder_functions() -> set:
    import torch.utils.cpp_extension as cpp_extension

    import pkb_cuda

    from pkb_cuda.pkb_helpers import compile_cuda_extension  # PKB's helper, as pkb serves it

    return {cpp_extension.load_inline, pkb_cuda.compile, compile_cuda_extension}


def _served_bindings(tree) -> dict:
    """Names the file binds, anywhere (a function's lazy import too), to the
    modules pkb serves it (``utils.cuda_helpers``), with what they stand for."""
    import importlib
    import types

    from pkb_cuda.pkb_helpers import SOLUTION_MODULES

    def provider(name):
        return importlib.import_module(SOLUTION_MODULES[name])

    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                local = alias.asname or alias.name
                if node.module in SOLUTION_MODULES and hasattr(provider(node.module), alias.name):
                    bound[local] = getattr(provider(node.module), alias.name)
                elif f"{node.module}.{alias.name}" in SOLUTION_MODULES:
                    bound[local] = provider(f"{node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name not in SOLUTION_MODULES:
                    continue
                if alias.asname:
                    bound[alias.asname] = provider(alias.name)
                else:  # `import utils.cuda_helpers`: `utils.cuda_helpers.compile_cuda_extension(...)`
                    head, *rest = alias.name.split(".")
                    root = bound.setdefault(head, types.SimpleNamespace())
                    for part in rest[:-1]:
                        root = root.__dict__.setdefault(part, types.SimpleNamespace())
                    setattr(root, rest[-1], provider(alias.name))
    return bound


def build_lazy_extensions(module, path) -> int:
    """Make every evaluable build call of the file ``path`` (imported as
    ``module``); return how many were made. A failing build raises (the
    backend turns it into a compile error)."""
    tree = ast.parse(Path(path).read_text(), filename=str(path))
    builders = _builder_functions()
    served = _served_bindings(tree)
    names = set(BUILDERS) | _aliases(tree)
    made = 0
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _name(node.func) in names):
            continue
        namespace = {**served, **vars(module)}
        try:
            function = eval(compile(ast.Expression(node.func), str(path), "eval"), namespace)  # noqa: S307
        except Exception:  # noqa: BLE001 - not resolvable from the module: a local name
            continue
        if function not in builders:
            continue
        try:
            args = [eval(compile(ast.Expression(a), str(path), "eval"), namespace) for a in node.args  # noqa: S307
                    if not isinstance(a, ast.Starred)]
            kwargs = {k.arg: eval(compile(ast.Expression(k.value), str(path), "eval"), namespace)  # noqa: S307
                      for k in node.keywords if k.arg is not None}
        except Exception:  # noqa: BLE001 - depends on the call's own inputs: built in the job
            continue
        _call_as_the_file(function, args, kwargs, path, node.lineno)
        made += 1
    return made


def _call_as_the_file(function, args, kwargs, path, lineno: int):
    """``function(*args, **kwargs)``, called from a frame at line ``lineno`` of the
    solution file ``path``: the build call is the file's own, so an error of the
    call itself (a keyword the helper does not take) names the file's line in its
    traceback (:func:`pkb_core.describe`), never this module's."""
    tree = ast.parse("__pkb_function(*__pkb_args, **__pkb_kwargs)", mode="eval")
    ast.increment_lineno(tree, lineno - 1)
    code = compile(tree, str(Path(path).resolve()), "eval")
    return eval(code, {"__pkb_function": function, "__pkb_args": args, "__pkb_kwargs": kwargs})  # noqa: S307


def _aliases(tree) -> set:
    """Other names the file gives the build functions (``import ... as build_ext``)."""
    return {alias.asname for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
            for alias in node.names if alias.name in BUILDERS and alias.asname}


def _name(func) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""
