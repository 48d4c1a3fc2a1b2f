"""The two files one :func:`pkb_cuda.compile` call builds: ``main.cpp`` and ``cuda.cu``, as pkb writes them.

torch's ``load_inline`` puts ``#include <torch/extension.h>`` in front of
``main.cpp`` and ``#include <torch/types.h>`` (with ``<cuda.h>`` and
``<cuda_runtime.h>``) in front of ``cuda.cu``. Those headers are nearly all
of a build's time: a ``.cu`` that uses no torch names builds in about 2 s
without them and 40-80 s with them; a ``main.cpp`` that declares and binds
nothing is an empty file once they are gone. So pkb writes both files itself
(``no_implicit_headers=True``) and includes only what the content needs
(:func:`plan`):

- ``cuda.cu`` gets ``<torch/types.h>`` only when its text names something of
  torch's (``torch::``, ``at::``, ``c10::``, ``TORCH_``/``C10_``/``AT_``
  macros, pybind11); ``<cuda.h>`` and ``<cuda_runtime.h>`` always (cheap, and
  sources rely on them).
- ``main.cpp`` gets ``<torch/extension.h>`` unless it declares and binds
  nothing (PKB's files bind in their ``.cu``: ``PYBIND11_MODULE`` there), and
  that include is served from pkb's precompiled header
  (:mod:`pkb_cuda.torch_pch`). With ``bind="ops"`` it gets ``<torch/library.h>``
  instead and binds through torch's dispatcher (:mod:`pkb_cuda.ops`): no
  pybind11, about 5 s where ``torch/extension.h`` takes 17.

Same flags, same code: only headers the file does not use are left out. Where
that guess could be wrong (a torch-free ``.cu`` that leaned on something
torch's header pulled in), the build that fails is redone with load_inline's
own headers (:data:`PLAIN`) before any error is reported, so the verdict is
always load_inline's.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

#: Names that need torch's headers in a ``.cu``.
TORCH_NAMES = re.compile(r"\b(?:torch|at|c10|caffe2|pybind11)::|\b(?:TORCH|C10|AT|PYBIND11)_[A-Z0-9_]+\b")
_LINE_MARKER = re.compile(r"^\s*#line\b.*$", re.MULTILINE)


@dataclass(frozen=True)
class Plan:
    """How one build writes its files.

    :param torch_headers: ``cuda.cu`` starts with ``#include <torch/types.h>``.
    :param main_header: ``main.cpp`` starts with ``#include <torch/extension.h>``.
    :param pch: ``main.cpp`` is compiled with pkb's precompiled header.
    """

    torch_headers: bool
    main_header: bool
    pch: bool

    @property
    def plain(self) -> bool:
        """Exactly what load_inline itself would write and run."""
        return self == PLAIN


#: load_inline's own files: both implicit headers, no PCH.
PLAIN = Plan(torch_headers=True, main_header=True, pch=False)


def uses_torch(source: str) -> bool:
    """Whether a source names anything of torch's (comments count: a guess that errs towards torch)."""
    return TORCH_NAMES.search(source) is not None


def binds_nothing(spec) -> bool:
    """No function bound and no C++ declared: ``main.cpp`` would hold only the header."""
    return not spec.functions and not _LINE_MARKER.sub("", spec.cpp_source).strip()


def plan(spec) -> Plan:
    """The lightest files that compute what load_inline's would (see the module docstring)."""
    main_header = not binds_nothing(spec)
    # The PCH is torch/extension.h's; an "ops" main.cpp starts with the far lighter torch/library.h.
    return Plan(torch_headers=uses_torch(spec.cuda_source), main_header=main_header,
                pch=main_header and spec.bind == "pybind11")


#: The header ``main.cpp`` starts with, by how it binds (``spec.bind``).
BINDING_HEADER = {"pybind11": "#include <torch/extension.h>", "ops": "#include <torch/library.h>"}


def main_cpp(spec, how: Plan) -> str:
    """``main.cpp`` before the bindings of ``spec.functions`` (:func:`bindings`)."""
    return "\n".join(([BINDING_HEADER[spec.bind]] if how.main_header else []) + [spec.cpp_source])


def cuda_cu(spec, how: Plan) -> str:
    """``cuda.cu`` as compiled (same order of includes as load_inline's)."""
    head = ["#include <torch/types.h>"] if how.torch_headers else []
    return "\n".join(head + ["#include <cuda.h>", "#include <cuda_runtime.h>", spec.cuda_source])


def bindings(spec) -> list[str]:
    """What binds ``spec.functions`` at the end of ``main.cpp``: the pybind11
    module load_inline appends, or (``bind="ops"``) pkb's ``TORCH_LIBRARY``
    block, which registers each function as ``torch.ops.<module>.<f>`` (its
    schema inferred from the C++ signature)."""
    if not spec.functions:
        return []
    if spec.bind == "ops":
        return ([f"TORCH_LIBRARY({spec.module_name}, m) {{"] + [f'  m.def("{f}", &{f});' for f in spec.functions]
                + ["}"])
    return (["PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {"]
            + [f'm.def("{f}", torch::wrap_pybind_function({f}), "{f}");' for f in spec.functions] + ["}"])
