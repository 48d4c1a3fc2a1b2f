"""What one :func:`pkb_cuda.compile` call builds (:class:`BuildSpec`: sources as load_inline
gets them, flags, the toolchain, a content key) and what a failed build's log says
(:func:`trim_compiler_output`). Shared by the build (:mod:`pkb_cuda.build`) and the
compile-only check (:mod:`pkb_cuda.check`)."""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from pkb_cuda import toolchain

#: nvcc flags used when ``extra_cuda_cflags`` is not given.
DEFAULT_CUDA_CFLAGS = ("-O3",)
#: host compiler flags used when ``extra_cflags`` is not given.
DEFAULT_CFLAGS = ("-O3",)
#: How ``main.cpp`` binds the functions: load_inline's pybind11 module, or torch's dispatcher
#: (``TORCH_LIBRARY``: no pybind11, no ``torch/extension.h``; see :mod:`pkb_cuda.ops`).
BINDINGS = ("pybind11", "ops")
#: Lines of compiler output kept in a CompileError.
MAX_MESSAGE_LINES = 40

_HEADER_PATH = Path(__file__).with_name("pkb_cuda.cuh")
BARRIER_CUH = _HEADER_PATH.read_text()
#: The push helpers (pkb_push.cuh): not a prelude; a source that uses them starts with this text.
PUSH_CUH = Path(__file__).with_name("pkb_push.cuh").read_text()


@dataclass(frozen=True)
class BuildSpec:
    """What one :func:`compile` call builds: sources as load_inline gets them."""

    name: str
    cuda_source: str
    cpp_source: str
    functions: tuple
    extra_cuda_cflags: tuple
    extra_cflags: tuple
    extra_ldflags: tuple
    extra_include_paths: tuple
    toolchain: dict = field(default_factory=dict, compare=False)
    bind: str = "pybind11"

    @classmethod
    def make(cls, name, cuda_source, cpp_source="", functions=(), *, extra_cuda_cflags=None,
             extra_cflags=None, extra_ldflags=(), extra_include_paths=(), prelude=True, toolchain_info=None,
             bind="pybind11"):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name or ""):
            raise ValueError(f"compile name {name!r} must be a C identifier")
        if bind not in BINDINGS:
            raise ValueError(f"bind={bind!r}: one of {', '.join(BINDINGS)}")
        if isinstance(functions, str):
            functions = (functions,)
        cuda = f'#line 1 "{name}.cu"\n{cuda_source}'
        if prelude:
            cuda = f'#line 1 "pkb_cuda.cuh"\n{BARRIER_CUH}\n{cuda}'
        # load_inline appends the pybind11 bindings after cpp_source: name them.
        cpp = f'#line 1 "{name}.cpp"\n{cpp_source}\n#line 1 "{name}-bindings.cpp"\n'
        return cls(
            name=name, cuda_source=cuda, cpp_source=cpp, functions=tuple(functions),
            extra_cuda_cflags=tuple(DEFAULT_CUDA_CFLAGS if extra_cuda_cflags is None else extra_cuda_cflags),
            extra_cflags=tuple(DEFAULT_CFLAGS if extra_cflags is None else extra_cflags),
            extra_ldflags=tuple(extra_ldflags),
            extra_include_paths=tuple(os.path.abspath(p) for p in extra_include_paths),
            toolchain=toolchain.toolchain() if toolchain_info is None else toolchain_info,
            bind=bind,
        )

    @property
    def key(self) -> str:
        """sha256 of sources, functions, flags and toolchain (40 hex digits)."""
        payload = json.dumps({
            "name": self.name, "cuda": self.cuda_source, "cpp": self.cpp_source,
            "functions": list(self.functions), "cuda_cflags": list(self.extra_cuda_cflags),
            "cflags": list(self.extra_cflags), "ldflags": list(self.extra_ldflags),
            "include_paths": list(self.extra_include_paths), "toolchain": self.toolchain,
            **({"bind": self.bind} if self.bind != "pybind11" else {}),  # pybind11 builds keep their keys
        }, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:40]

    @property
    def module_name(self) -> str:
        """The extension's Python name (unique per key, so two solutions that
        both call their kernel ``allreduce`` never collide)."""
        return f"pkb_{self.name}_{self.key[:12]}"


_ERROR_LINE = re.compile(r"(\berror\b|undefined reference|undefined symbol|\bfatal\b)", re.IGNORECASE)
_NOISE = re.compile(r"^(\[\d+/\d+\]|FAILED:|ninja: |Error building extension|\S*(nvcc|c\+\+|g\+\+|gcc|clang\+\+)\s+-)"
                    r"|\d+ errors? detected in the compilation")


def trim_compiler_output(log: str, limit: int = MAX_MESSAGE_LINES) -> str:
    """The useful part of a build log: each error line with the two lines after
    it (nvcc and gcc print the source line and a caret there), without the
    long command lines and ninja's chatter. Falls back to the log's tail."""
    lines = [line.rstrip() for line in log.splitlines()]
    keep: list[int] = []
    for i, line in enumerate(lines):
        if _ERROR_LINE.search(line) and not _NOISE.search(line.strip()):
            for j in range(i, min(i + 3, len(lines))):
                if j == i or not (_ERROR_LINE.search(lines[j]) or _NOISE.search(lines[j].strip())):
                    if j not in keep:
                        keep.append(j)
                if j > i and _ERROR_LINE.search(lines[j]):
                    break
    if not keep:
        keep = [i for i, line in enumerate(lines) if line.strip() and not _NOISE.search(line.strip())][-15:]
    picked = [lines[i] for i in sorted(keep)]
    if len(picked) > limit:
        picked = picked[:limit] + [f"... ({len(picked) - limit} more lines)"]
    return "\n".join(picked)
