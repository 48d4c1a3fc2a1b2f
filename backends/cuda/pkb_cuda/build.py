"""Building CUDA sources with torch's ``load_inline``: cached by content,
built once per node, compiler errors turned into :class:`CompileError`.

Layout of the cache (``cache_dir()``, default ``~/.cache/pkb/cuda``; see :func:`pkb_core.cache_dir`)::

    <key>/             one build: load_inline's build directory
        main.cpp, cuda.cu   written by pkb (:mod:`pkb_cuda.sources`: only the headers they use)
        build.ninja, *.o    written by load_inline
        <module>.so    the extension
        pkb.lock       the file lock held while building
        pkb-ok.json    written last, after the module loaded: the build is complete
        pkb-failed.txt the trimmed compiler message of the last failed build

Concurrency: every rank of a node calls :func:`compile` with the same
sources. The first to take ``pkb.lock`` (``fcntl.flock``) builds; the others
block on the lock and then load the finished ``.so`` (or re-raise the failure
it recorded). No collective is involved, so it works before or after the
process group exists.

What one build costs is what its content needs: the files carry torch's
headers only where they name torch (:mod:`pkb_cuda.sources`), ``main.cpp``
loads pkb's precompiled ``torch/extension.h`` (:mod:`pkb_cuda.torch_pch`),
and ninja compiles ``cuda.cu`` and ``main.cpp`` at once (``MAX_JOBS``; the
compile phase gives each build 2). ``PKB_CUDA_PLAIN_BUILD=1`` builds exactly
as load_inline writes the files (its headers, no PCH): the same modules, for
comparing build times and for ruling pkb's files out when a build misbehaves.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
from pathlib import Path

from pkb_core import CompileError
from pkb_core import file_lock, write_atomic
from pkb_core import cache_dir as pkb_cache_dir

from pkb_cuda.spec import BuildSpec, trim_compiler_output

#: A failure recorded this recently is re-raised instead of rebuilt, so the
#: ranks that waited on the lock do not repeat a failed 40-second build.
FAILURE_REUSE_S = 120.0

_LOADED: dict[str, object] = {}  # cache key -> module, per process
_CHECK_ONLY: dict | None = None  # set by compile_only()


def cache_dir() -> Path:
    """Root of the build cache: ``cuda`` in pkb's cache (``$PKB_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/pkb``, else ``~/.cache/pkb``)."""
    return pkb_cache_dir() / "cuda"


def cache_key(name, cuda_source, cpp_source="", functions=(), **options) -> str:
    """The cache key :func:`compile` would use for these arguments (same
    keywords as :func:`compile`). Changes with any source, flag, the torch
    version, nvcc's version, the arch list or the Python ABI."""
    return BuildSpec.make(name, cuda_source, cpp_source, functions, **options).key


def compile(name, cuda_source, cpp_source="", functions=(), *, extra_cuda_cflags=None, extra_cflags=None,
            extra_ldflags=(), extra_include_paths=(), prelude=True, verbose=None, bind="pybind11"):
    """Build (or load from the cache) a CUDA extension; return its module.

    :param name: a C identifier naming the extension (used in error messages
        and file names: the CUDA source is reported as ``<name>.cu``).
    :param cuda_source: CUDA C++ with the kernels and the host functions that
        launch them. ``<cuda.h>`` and ``<cuda_runtime.h>`` are put in front,
        and ``<torch/types.h>`` too when the source names anything of torch's
        (``torch::``, ``at::``, ``c10::``, ``TORCH_CHECK``...; see
        :mod:`pkb_cuda.sources`): a source that names none builds in seconds.
        With ``prelude`` the device helpers of :data:`BARRIER_CUH` (namespace
        ``pkb``) come first.
    :param cpp_source: C++ declarations of the host functions to bind, e.g.
        ``"torch::Tensor allreduce(torch::Tensor x, int64_t buffers);"``.
    :param functions: names of the functions to expose to Python.
    :param extra_cuda_cflags: nvcc flags (default :data:`DEFAULT_CUDA_CFLAGS`;
        a given list replaces the default). ``-std=c++20`` replaces torch's
        default standard.
    :param extra_cflags: host compiler flags for the bindings (default ``-O3``).
    :param extra_ldflags: linker flags, e.g. ``["-lcuda"]``.
    :param extra_include_paths: directories for ``#include``. Their files are
        not part of the cache key: change ``name`` or a flag after editing them.
    :param prelude: put :data:`BARRIER_CUH` in front of ``cuda_source``.
    :param verbose: show the build commands (default: ``PKB_CUDA_VERBOSE=1``).
    :param bind: ``"pybind11"`` (load_inline's bindings; ``main.cpp`` starts
        with ``torch/extension.h``) or ``"ops"``: the functions are registered
        with torch's dispatcher and called as ``torch.ops.<module>.<f>``;
        ``main.cpp`` starts with ``<torch/library.h>`` only (about 5 s instead
        of 17 on a 2-core box): declare them with ``at::Tensor``/``int64_t``/
        ``double``/``bool`` and include the ATen headers you use
        (:mod:`pkb_cuda.ops`).
    :return: the loaded module (``bind="ops"``: an object with the same
        attributes); call ``module.<function>(...)``.
    :raises pkb_core.errors.CompileError: nvcc or the host compiler failed, or
        the module did not load; the message holds the compiler's error lines.

    The build directory is ``cache_dir() / cache_key(...)``. A cached build
    loads in well under a second. A cold one is as slow as its headers: a
    ``.cu`` with torch's headers takes 40-80 s on the GPU machine, one without
    about 2 s; ``main.cpp`` (``torch/extension.h`` and the bindings) loads
    pkb's precompiled header (:mod:`pkb_cuda.torch_pch`, built once per
    machine) and the two compile at once. It is built once per node: the
    other local ranks wait on a file lock and then load it. Within a process
    the module is memoised.
    """
    spec = BuildSpec.make(name, cuda_source, cpp_source, functions, extra_cuda_cflags=extra_cuda_cflags,
                          extra_cflags=extra_cflags, extra_ldflags=extra_ldflags,
                          extra_include_paths=extra_include_paths, prelude=prelude, bind=bind)
    key = spec.key
    if key in _LOADED:
        return _LOADED[key]
    if _CHECK_ONLY is not None:
        from pkb_cuda.check import check_spec

        _CHECK_ONLY["results"].append(check_spec(spec, **_CHECK_ONLY["options"]))
        return _Unbuilt(spec)
    if verbose is None:
        verbose = os.environ.get("PKB_CUDA_VERBOSE", "") not in ("", "0")
    build_dir = cache_dir() / key
    module = _load_finished(spec, build_dir)
    if module is None:
        module = _build(spec, _writable(build_dir), verbose)
    _LOADED[key] = module
    return module


# ---------------------------------------------------------------------------
# building and loading
# ---------------------------------------------------------------------------

def _load_finished(spec: BuildSpec, build_dir: Path):
    """The module of a complete build (``pkb-ok.json`` present), else ``None``."""
    try:
        marker = json.loads((build_dir / "pkb-ok.json").read_text())
    except (OSError, ValueError):
        return None
    # The module's name as built: torch's versioner names a rebuild in the same process <module>_v1.
    module_name = marker.get("built_as", spec.module_name)
    so_path = build_dir / f"{module_name}.so"
    if not so_path.is_file():
        return None
    try:
        if spec.bind == "ops":
            from pkb_cuda import ops

            return ops.load(spec.module_name, spec.functions, so_path)
        return import_extension(module_name, so_path)
    except (ImportError, OSError, RuntimeError) as exc:
        raise CompileError(f"loading the cached CUDA extension {spec.name!r} ({so_path}) failed: {exc}") from None


def import_extension(module_name: str, so_path: Path):
    """Import a built extension ``.so`` (torch first: it links libtorch)."""
    import importlib.util

    import torch  # noqa: F401

    spec = importlib.util.spec_from_file_location(module_name, str(so_path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _writable(build_dir: Path) -> Path:
    """``build_dir``, or, where pkb's cache is read-only (a job's candidate: a
    build the compile phase could not make ahead of time, such as one whose
    name holds the rank), a folder of the same name in the process's own
    temporary space: built inside the job, as PKB's harness builds it, and not
    kept for the next job."""
    try:
        build_dir.mkdir(parents=True, exist_ok=True)
        if os.access(build_dir, os.W_OK):
            return build_dir
    except OSError:
        pass
    import tempfile

    return Path(tempfile.gettempdir()) / "pkb-cuda" / build_dir.name


def _build(spec: BuildSpec, build_dir: Path, verbose: bool):
    build_dir.mkdir(parents=True, exist_ok=True)
    waiting_since = time.time()
    with file_lock(build_dir / "pkb.lock"):
        module = _load_finished(spec, build_dir)  # another rank built it while we waited
        if module is not None:
            return module
        failed = build_dir / "pkb-failed.txt"
        if failed.is_file() and failed.stat().st_mtime >= waiting_since - FAILURE_REUSE_S:
            raise CompileError(failed.read_text())
        started = time.time()
        try:
            module = _load_inline(spec, build_dir, verbose)
        except Exception as exc:  # noqa: BLE001 - every build failure is the solution's verdict
            message = compile_message(spec.name, exc)
            write_atomic(failed, message)
            raise CompileError(message) from None
        with contextlib.suppress(FileNotFoundError):
            failed.unlink()
        write_atomic(build_dir / "pkb-ok.json", json.dumps({
            "key": spec.key, "name": spec.name, "module": spec.module_name, "functions": list(spec.functions),
            "built_as": _built_as(spec, module), "bind": spec.bind,
            "toolchain": spec.toolchain, "build_seconds": round(time.time() - started, 1),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%S"), "pid": os.getpid(),
        }, indent=1))
        return module


def _built_as(spec: BuildSpec, module) -> str:
    """The name the extension was built under (its ``.so``'s stem)."""
    path = getattr(module, "__file__", None)
    return Path(path).name.removesuffix(".so") if path else spec.module_name


def _load_inline(spec: BuildSpec, build_dir: Path, verbose: bool):
    """Build with load_inline from the lightest files that compute the same
    (:mod:`pkb_cuda.sources`); a failure that the lighter files could have
    caused is redone with load_inline's own, so the verdict is always its."""
    from pkb_core import build_notice as notice

    from pkb_cuda import sources

    light = _takes_no_implicit_headers() and os.environ.get("PKB_CUDA_PLAIN_BUILD", "") in ("", "0")
    how = sources.plan(spec) if light else sources.PLAIN
    try:
        return _load_inline_as(spec, build_dir, verbose, how)
    except Exception as exc:  # noqa: BLE001 - decided below: retried or re-raised
        light_cu = not how.torch_headers
        if how.plain or not (light_cu or "pkb_pch" in str(exc)):
            raise
        first = compile_message(spec.name, exc).splitlines()
    module = _load_inline_as(spec, build_dir, verbose, sources.PLAIN)
    notice(f"{spec.name}: built only as load_inline writes it (the lighter build failed: "
           f"{(first[1:] or first)[0].strip()[:160]})")
    return module


def _load_inline_as(spec: BuildSpec, build_dir: Path, verbose: bool, how):
    from torch.utils.cpp_extension import load_inline

    from pkb_cuda import sources

    extra_cflags = list(spec.extra_cflags)
    if how.pch:
        from pkb_cuda.torch_pch import pch_cflags

        extra_cflags += pch_cflags(spec.extra_cflags, spec.extra_include_paths)
    options = {"no_implicit_headers": True} if _takes_no_implicit_headers() else {}
    ops = spec.bind == "ops"
    main = sources.main_cpp(spec, how) if options else spec.cpp_source
    if ops:  # pkb's TORCH_LIBRARY block instead of load_inline's pybind11 module
        main = "\n".join([main, *sources.bindings(spec)])
        options["is_python_module"] = False
    built = load_inline(
        name=spec.module_name,
        cpp_sources=[main],
        cuda_sources=[sources.cuda_cu(spec, how) if "no_implicit_headers" in options else spec.cuda_source],
        functions=None if ops else list(spec.functions) or None,
        extra_cflags=extra_cflags,
        extra_cuda_cflags=list(spec.extra_cuda_cflags),
        extra_ldflags=list(spec.extra_ldflags),
        extra_include_paths=list(spec.extra_include_paths),
        build_directory=str(build_dir),
        verbose=verbose,
        with_cuda=True,
        **options,
    )
    if ops:  # load_inline loaded the library and returned its path
        from pkb_cuda.ops import OpsModule

        return OpsModule(spec.module_name, spec.functions, built)
    return built


def _takes_no_implicit_headers() -> bool:
    """Whether this torch's load_inline lets pkb write the headers itself."""
    import inspect

    from torch.utils.cpp_extension import load_inline

    return "no_implicit_headers" in inspect.signature(load_inline).parameters


class _Unbuilt:
    """Stands in for a module under :func:`compile_only`: calling it fails."""

    def __init__(self, spec: BuildSpec):
        self._spec = spec

    def __getattr__(self, attr):
        def unbuilt(*args, **kwargs):
            raise RuntimeError(f"{self._spec.name}.{attr}: compiled for checking only (pkb_cuda.compile_only)")

        return unbuilt


@contextlib.contextmanager
def compile_only(workdir=None, bindings=True, ptxas_info=True):
    """Within the block, :func:`compile` only compiles the sources to object
    files with nvcc and the host compiler (no link, no load, no GPU needed),
    exactly as load_inline would (same generated files and flags), and
    returns a stand-in module. Yields the list that collects one
    :class:`pkb_cuda.check.CheckResult` per compile call. Used by
    ``backends/cuda/tools/compile_check.py``.

    :param workdir: where objects go (default: a temporary directory).
    :param bindings: also compile load_inline's ``main.cpp`` (torch/extension.h,
        slow) and check that every bound function is defined by the CUDA
        object with the declared signature.
    :param ptxas_info: ask ptxas for registers and spills per kernel.
    """
    global _CHECK_ONLY
    previous = _CHECK_ONLY
    results: list = []
    _CHECK_ONLY = {"results": results,
                   "options": {"workdir": workdir, "bindings": bindings, "ptxas_info": ptxas_info}}
    try:
        yield results
    finally:
        _CHECK_ONLY = previous


# ---------------------------------------------------------------------------
# compiler messages
# ---------------------------------------------------------------------------

def compile_message(name: str, exc: BaseException) -> str:
    """The CompileError text for an exception raised while building ``name``."""
    text = str(exc)
    if isinstance(exc, ImportError):
        return f"the CUDA extension {name!r} built but did not load: {_demangle(text)}"
    if "Error building extension" in text:
        log = text.split(":", 1)[1] if ":" in text else text
        return f"building the CUDA extension {name!r} failed:\n{trim_compiler_output(log)}"
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"building the CUDA extension {name!r} failed: {type(exc).__name__}: {first}"


def _demangle(text: str) -> str:
    """Append the demangled form of a C++ symbol named in ``text``, if any."""
    match = re.search(r"(_Z\w+)", text)
    if not match:
        return text
    try:
        plain = subprocess.run(["c++filt", match.group(1)], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return text
    hint = " (declared in cpp_source but not defined with that signature in cuda_source?)"
    return f"{text} = {plain}{hint}" if plain and plain != match.group(1) else text
