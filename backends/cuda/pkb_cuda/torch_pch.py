"""pkb's precompiled ``torch/extension.h`` for the ``main.cpp`` of every extension it builds.

``main.cpp`` (the declarations and pybind11 bindings) compiles in 23 s on the
GPU machine, all of it ``torch/extension.h``; with a precompiled header it
takes 7.5 s. GCC accepts a ``.gch`` only for the exact flags it was built
with, so the flags are torch's own: :func:`main_cpp_flags` has torch write
the ninja file load_inline would write for these arguments and reads the
compile line of ``main.cpp`` back from it (less ``-DTORCH_EXTENSION_NAME``,
which differs per module and which the header does not read). The PCH itself
is :mod:`pkb_core.compile.pch`'s: in pkb's cache, one per compiler, flags and
torch build, built once per machine under a lock, never in torch's folder.

:func:`pch_cflags` is what :mod:`pkb_cuda.build` adds to ``extra_cflags``; it
is ``[]`` (and the build is the plain one) when the compiler is not GCC,
torch's ninja writer is not there, or the PCH cannot be built or used, each
said in one line on stderr by :mod:`pkb_core.compile.pch`.
"""
from __future__ import annotations

import functools
import inspect
import os
import shlex
import tempfile
from pathlib import Path

#: The header every load_inline ``main.cpp`` starts with.
HEADER_TEXT = "#include <torch/extension.h>\n"
#: What the users of the PCH define on top of its flags (checked to be harmless when it is built).
USE_DEFINES = ("-DTORCH_EXTENSION_NAME=pkb_pch_probe",)


def pch_cflags(extra_cflags=(), extra_include_paths=(), with_cuda: bool = True) -> list[str]:
    """Flags to append to load_inline's ``extra_cflags`` so ``main.cpp`` loads
    pkb's precompiled ``torch/extension.h``; ``[]`` when there is none to use."""
    from pkb_core import ensure_pch, pch_flags

    header = extension_header(tuple(extra_cflags), tuple(extra_include_paths), with_cuda)
    if header is None:
        return []
    path = ensure_pch(header)
    return pch_flags(path) if path is not None else []


def extension_header(extra_cflags=(), extra_include_paths=(), with_cuda: bool = True):
    """The :class:`pkb_core.PrecompiledHeader` for these load_inline arguments, or ``None``."""
    import torch

    from pkb_core import PrecompiledHeader, build_notice

    found = main_cpp_flags(tuple(extra_cflags), tuple(extra_include_paths), with_cuda)
    if isinstance(found, str):
        build_notice(f"no precompiled header for main.cpp ({found}); compiling it without one")
        return None
    compiler, flags = found
    return PrecompiledHeader(text=HEADER_TEXT, compiler=compiler, flags=flags, use_defines=USE_DEFINES,
                  identity={"torch": torch.__version__, "torch_git": getattr(torch.version, "git_version", "")})


@functools.lru_cache(maxsize=None)
def main_cpp_flags(extra_cflags: tuple, extra_include_paths: tuple, with_cuda: bool):
    """``(compiler, flags)`` of load_inline's compile of ``main.cpp`` for these
    arguments, without ``-DTORCH_EXTENSION_NAME``; a string saying why not
    when torch cannot tell (its private ninja writer changed or failed)."""
    import torch.utils.cpp_extension as cpp_extension

    writer = getattr(cpp_extension, "_write_ninja_file_to_build_library", None)
    if writer is None:
        return f"torch {_torch_version()} has no _write_ninja_file_to_build_library"
    with tempfile.TemporaryDirectory(prefix="pkb-pch-flags-") as scratch:
        sources = [os.path.join(scratch, "main.cpp")] + ([os.path.join(scratch, "cuda.cu")] if with_cuda else [])
        arguments = dict(path=os.path.join(scratch, "build.ninja"), name="pkb_pch_probe", sources=sources,
                         extra_cflags=list(extra_cflags), extra_cuda_cflags=[], extra_sycl_cflags=[],
                         extra_ldflags=[], extra_include_paths=list(extra_include_paths), with_cuda=with_cuda,
                         with_sycl=False, is_standalone=False)
        try:
            accepted = inspect.signature(writer).parameters
            writer(**{name: value for name, value in arguments.items() if name in accepted})
            text = Path(arguments["path"]).read_text()
        except Exception as exc:  # noqa: BLE001 - any failure here only costs the PCH
            return f"torch's ninja writer failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return _parse_ninja(text)


def _parse_ninja(text: str):
    variables = {}
    for line in text.splitlines():
        name, sep, value = line.partition(" = ")
        if sep and not line.startswith(" ") and name in ("cxx", "cflags", "post_cflags"):
            variables[name] = value
    if "cxx" not in variables or "cflags" not in variables:
        return "torch's ninja file names no cxx or cflags"
    flags = [f for f in shlex.split(variables["cflags"]) if not f.startswith("-DTORCH_EXTENSION_NAME=")]
    flags += shlex.split(variables.get("post_cflags", ""))
    return tuple(shlex.split(variables["cxx"])), tuple(flags)


def _torch_version() -> str:
    import torch

    return torch.__version__
