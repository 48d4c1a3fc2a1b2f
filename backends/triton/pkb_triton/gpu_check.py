"""Under Triton's interpreter (pkb's CPU mode), every kernel also goes through Triton's compiler
front end for the GPU at its first launch with each specialization, so a kernel the interpreter
runs and the compiler refuses fails on the CPU too, with the compiler's words and the file's line.

The interpreter runs a kernel as Python over NumPy: it accepts code that the compiler does not
(a name that is a ``tl.static_range`` constexpr in one loop and a tensor in the next; on 2xH200
that failed every GPU job of two push kernels whose CPU tests all passed). :func:`install`
wraps the interpreter's launch: the launch's arguments are bound as a GPU launch binds them
(types, the specialisations of ints equal to 1 and of 16-byte alignment, constexprs, options)
for :data:`TARGET_ARCH`, and the kernel, with every ``@triton.jit`` function it calls, is lowered to
Triton's IR (the front end: no PTX, no ``ptxas``; about 0.1-0.4 s a kernel on a 2-core machine,
once per process and specialisation). A :class:`~triton.compiler.errors.CompilationError` there
raises :class:`RefusedOnGpu` from the launch, the solution's error, in one line: the kernel, the
line where the compiler stopped (in a function the kernel calls, that function's line and name)
and the compiler's words, with a hint where the launch made an int argument equal to 1 a
constexpr (the GPU does; the interpreter does not); anything else the check
meets (a later stage's complaint, an argument the CPU passes as the GPU would not) is left to
the GPU run, so the check never fails a kernel for what it cannot judge. It is a help to the
author, not one of the judge's checks: it runs in the candidate's process. The same wrapper
refuses a launch whose grid is wider than a barrier's signal pad it is handed
(:func:`check_pads`).
"""
from __future__ import annotations

import functools

#: The GPU the kernels are checked for: Hopper (H100, H200), the machines pkb's numbers come from.
TARGET_ARCH = 90

_CHECKED: dict = {}  # (function, specialisation, options) -> the refusal, or None: lowered already
_AS_JIT: dict = {}  # interpreted function's Python function -> its JIT function for the check
_INSTALLED = False


class RefusedOnGpu(Exception):
    """A kernel that Triton's compiler refuses for the GPU (checked at its launch, before the
    interpreter runs it)."""

    #: The message names the kernel's own line: where in pkb it was raised is no news.
    pkb_refusal = True


def install() -> None:
    """Wrap the interpreter's launch with the check (once a process; interpreter mode only).

    Triton 3.6's interpreter leaves ``triton.language`` patched for itself after a ``@triton.jit``
    function called from a kernel returns (a launch restores what it patched, a call inside it
    does not), and the front end cannot run on a language so patched: a kernel launched after one
    that called a helper read as refused. So the call restores what it patched too, which leaves
    the interpreter as it was inside the kernel and the language as it was outside. Where the
    interpreter is not the one this was written against, no check is installed."""
    global _INSTALLED
    if _INSTALLED:
        return
    try:
        from triton.runtime.interpreter import InterpretedFunction, InterpreterError, _patch_lang
    except ImportError:
        return
    launch = InterpretedFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        check(self, args, kwargs)
        check_pads(self, grid, args, kwargs)
        try:
            return launch(self, *args, grid=grid, warmup=warmup, **kwargs)
        except InterpreterError as exc:
            hint = interpreter_hint(str(exc))
            if hint:  # the same exception, its place kept: only its message gains the hint
                exc.error_message = f"{exc} ({hint})"
            raise

    def call(self, *args, **kwargs):
        patched = _patch_lang(self.fn)
        try:
            return self.rewrite()(*args, **kwargs)
        except Exception as exc:  # as the interpreter's own call reports it
            raise InterpreterError(repr(exc)) from exc
        finally:
            patched.restore()

    InterpretedFunction.run = run
    InterpretedFunction.__call__ = call
    _INSTALLED = True


#: What the interpreter's own words mean, where they are known to puzzle: a loop over a ``range``
#: whose bounds are tensors (a program id, a runtime size) compiles for the GPU, and the
#: interpreter fails on it converting the bound (a new user's grid-stride loop, 2026-12-02).
INTERPRETER_HINTS = {
    "only 0-dimensional arrays can be converted to Python scalars":
        "Triton's interpreter, which runs kernels on the CPU, cannot loop over a range whose bounds are "
        "tensors (a program id, a size passed at run time): write that loop as a while loop, as "
        "docs/backends/triton.md says",
}


def interpreter_hint(message: str) -> str | None:
    """A sentence on what an interpreter error ``message`` usually means, or None."""
    return next((hint for words, hint in INTERPRETER_HINTS.items() if words in message), None)


def check(kernel, args: tuple, kwargs: dict) -> None:
    """Lower ``kernel`` (an interpreted function) for :data:`TARGET_ARCH` with these launch
    arguments, unless done already in this process.

    :raises RefusedOnGpu: the compiler's front end refuses it.
    """
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.compiler.errors import CompilationError
    from triton.runtime.jit import create_function_from_signature

    target = GPUTarget("cuda", TARGET_ARCH, 32)
    try:
        backend = make_backend(target)
        jit = _as_jit(kernel)
        binder = create_function_from_signature(jit.signature, jit.params, backend)
        bound, specialization, options = binder(*args, **kwargs)
        key = (kernel.fn, repr(specialization), repr(options))
        if key not in _CHECKED:
            _CHECKED[key] = None
            options, signature, constexprs, attrs = jit._pack_args(backend, kwargs, bound, specialization, options)
            _lower(ASTSource(jit, signature, constexprs, attrs), target, backend, options)
    except CompilationError as refused:
        made = _refused_for_constexprs(jit, bound, specialization, signature, constexprs, attrs, target, backend,
                                       options)
        _CHECKED[key] = _describe(kernel.fn, refused, made)
    except Exception:  # noqa: BLE001 - what the front end cannot judge is the GPU run's to say
        return
    if _CHECKED[key] is not None:  # every launch of a refused kernel fails, not its first alone
        raise RefusedOnGpu(_CHECKED[key])


def check_pads(kernel, grid, args: tuple, kwargs: dict) -> None:
    """Refuse a launch of ``kernel`` whose grid, along axis 0, is wider than a signal pad it is
    handed (``Peers.pads``) has room for: the barrier would not synchronise it, so the launch
    fails in words here rather than at a fault inside the kernel.

    :raises pkb_triton.host.GridTooWide: naming the grid and the pad.
    """
    import inspect

    from pkb_triton.host import check_grid

    if callable(grid):  # as the interpreter resolves it: with the kernel's own arguments
        names = inspect.getfullargspec(kernel.fn).args
        grid = grid(inspect.getcallargs(kernel.fn, *args, **{k: v for k, v in kwargs.items() if k in names}))
    axes = (grid,) if isinstance(grid, int) else tuple(grid)
    check_grid(int(axes[0]), [*args, *kwargs.values()], other_axes=tuple(int(a) for a in axes[1:]))


def _refused_for_constexprs(jit, bound, specialization, signature, constexprs, attrs, target, backend,
                            options) -> list[str]:
    """The int arguments equal to 1 that the launch made constexprs (the kernel does not declare
    them so) where the kernel compiles with them as plain ints, as the interpreter sees them:
    then they are why it is refused; else none."""
    from triton.compiler import ASTSource

    made = [(index, param.name) for index, (param, (kind, _)) in enumerate(zip(jit.params, specialization))
            if kind == "constexpr" and not param.is_constexpr and type(bound.get(param.name)) is int]
    if not made:
        return []
    plain = {**signature, **{name: "i32" for _, name in made}}
    kept = {path: value for path, value in constexprs.items() if path not in {(index,) for index, _ in made}}
    try:
        _lower(ASTSource(jit, plain, kept, attrs), target, backend, options)
    except Exception:  # noqa: BLE001 - refused either way: the constexprs are not why
        return []
    return [name for _, name in made]


def _lower(source, target, backend, options) -> None:
    """Triton's front end alone (``compile``'s first step), with every interpreted function the
    kernel reaches through a module (``tl.sum``) taken as its JIT function."""
    import triton.compiler.code_generator as codegen
    from triton._C.libtriton import ir
    from triton.runtime.interpreter import InterpretedFunction

    call = codegen.CodeGenerator.call_Function

    def call_function(self, node, fn, args, kws):
        return call(self, node, _as_jit(fn) if isinstance(fn, InterpretedFunction) else fn, args, kws)

    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    codegen.CodeGenerator.call_Function = call_function
    try:
        source.make_ir(target, options, backend.get_codegen_implementation(options), backend.get_module_map(),
                       context)
    finally:
        codegen.CodeGenerator.call_Function = call


def _as_jit(kernel):
    """The JIT function of an interpreted one, whose globals' interpreted functions are JIT
    functions too (the front end takes no other)."""
    found = _AS_JIT.get(kernel.fn)
    if found is None:
        found = _AS_JIT[kernel.fn] = _for_the_check()(kernel.fn, **kernel.kwargs)
    return found


@functools.cache
def _for_the_check():
    """:class:`~triton.runtime.jit.JITFunction` as the check needs it (made on first use: triton
    is imported only where a kernel runs)."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    class ForTheCheck(JITFunction):
        def get_capture_scope(self):
            return {name: _as_jit(value) if isinstance(value, InterpretedFunction) else value
                    for name, value in super().get_capture_scope().items()}

        @property
        def cache_key(self) -> str:  # names the function in the IR; the real key hashes its callees' sources
            return f"pkb-check-{id(self.fn)}"

    return ForTheCheck


def _describe(fn, refused, made_constexpr: list[str]) -> str:
    """One line: the kernel, the line of its file (or of the function it calls) where the
    compiler stopped, and what it said there (the innermost error of a call's chain)."""
    import os

    from triton.compiler.errors import CompilationError
    from triton.runtime.jit import get_jit_fn_file_line

    where = refused
    while isinstance(where.__cause__, CompilationError):  # an error inside a called @triton.jit function
        where = where.__cause__
    lines = [line.strip() for line in (where.error_message or str(where)).splitlines() if line.strip()]
    said = lines[-1] if lines else type(where).__name__
    # The function whose source the error quotes: the kernel, or one it calls.
    function = next((jit for jit in _AS_JIT.values() if jit.src == where.src), _AS_JIT[fn])
    path, first = get_jit_fn_file_line(function)  # the line of its `def`
    place = os.path.basename(path)
    if getattr(where.node, "lineno", None):
        place += f":{first + where.node.lineno - 1}"
    if function.fn is not fn:
        place += f", in `{function.fn.__name__}`"
    hint = ""
    if made_constexpr:
        names = ", ".join(f"`{name}`" for name in made_constexpr)
        hint = (f"; a GPU launch makes an int argument equal to 1 a constexpr ({names} here): "
                "`tl.cast(x, tl.int64)` takes both")
    # Checked before the interpreter runs the launch: what the interpreter would refuse too (an
    # undefined name) is said here, so the words claim no run of it
    return f"Triton's compiler refuses kernel `{fn.__name__}` for the GPU (sm_{TARGET_ARCH}) ({place}): {said}{hint}"
